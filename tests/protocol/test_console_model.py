"""The web console's model and derivations, and its shape, tested without a
browser by node's own test runner (issue 22, Legibility): ``node --test`` on
``tests/protocol/console/*.test.mjs``, which import the console's modules directly.
This file runs them as part of the README's test command and fails with
node's report; it skips, saying so, only when no ``node`` is on PATH (or
one too old to load the modules). The browser tests of the same console are
``tests/test_web_console.py``."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "protocol" / "console"
NODE_TESTS = sorted((ROOT / "tests" / "protocol" / "console").glob("*.test.mjs"))


def loads_console_modules(major: int, minor: int) -> bool:
    """Whether this node imports the console's ``.js`` files (ES modules
    with no package.json ``type``) as modules: it detects their syntax from
    20.19 and 22.7 on."""
    return (major, minor) >= (22, 7) or (major == 20 and minor >= 19)


def node_missing() -> str | None:
    """Why the node tests cannot run here, or None."""
    node = shutil.which("node")
    if node is None:
        return "no `node` on PATH: the console's unit tests (tests/protocol/console/*.test.mjs) need Node.js 20.19 or later"
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    match = re.fullmatch(r"v(\d+)\.(\d+)\.\d+.*", out)
    if not match:
        return f"cannot tell node's version from {out!r}"
    if not loads_console_modules(int(match.group(1)), int(match.group(2))):
        return f"node {out} is too old for the console's unit tests (20.19 or 22.7 and later load its modules)"
    return None


@pytest.mark.skipif(node_missing() is not None, reason=f"console unit tests: {node_missing()}")
def test_f20_the_consoles_model_and_views_pass_their_node_tests():
    assert NODE_TESTS, "no tests/protocol/console/*.test.mjs"
    done = subprocess.run(["node", "--test", *map(str, NODE_TESTS)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"node --test failed:\n{done.stdout}\n{done.stderr}"
    summary = dict(re.findall(r"^# (tests|pass|fail) (\d+)$", done.stdout, re.M))
    assert summary.get("fail") == "0" and int(summary.get("pass", 0)) > 0, done.stdout


def test_f20_every_console_file_is_package_data():
    """The console is served from package data (protocol/http.py loads
    every file of the folder): a file the globs miss works from a checkout
    and 404s from a wheel."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["agentd.protocol"]
    files = [p for p in CONSOLE.iterdir() if p.is_file() and not p.name.startswith(".")]
    assert files
    missed = [p.name for p in files if not any(fnmatch.fnmatch(f"console/{p.name}", g) for g in globs)]
    assert missed == [], f"not in pyproject.toml's package-data for agentd.protocol: {missed}"
    assert not [p for p in CONSOLE.iterdir() if p.is_dir()], "console/*.js covers no subfolder: keep the console flat"

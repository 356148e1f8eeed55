"""mypy passes on the package as it installs, strict on the layers below the CLI (issue 22).

``scripts/typecheck.py`` lays ``agentd/`` out as setuptools does (the repository's
``package-dir`` mapping hides it from mypy) and runs mypy with ``[tool.mypy]`` from
pyproject.toml; this test fails with mypy's report."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STRICT = {"agentd.actors.*", "agentd.store.*", "agentd.supervisor.*", "agentd.protocol.*"}


def test_mypy_finds_no_error():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "typecheck.py")],
                          capture_output=True, text=True, timeout=240)
    assert "No module named mypy" not in done.stderr, "mypy is in the test extra: pip install -e '.[test]'"
    assert done.returncode == 0, f"mypy:\n{done.stdout}{done.stderr}"


def test_the_four_layers_below_the_cli_are_checked_with_every_flag_of_strict():
    from mypy.main import define_options
    from mypy.options import PER_MODULE_OPTIONS

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    (strict,) = [o for o in config["overrides"] if set(o["module"]) == STRICT]
    # `strict = true` cannot be set per module (mypy then turns it on everywhere), so each flag of
    # this mypy's --strict is spelled out: in the override where mypy allows it, else globally.
    missing = [f"{flag} = {str(value).lower()}" for flag, value in define_options()[2]
               if (strict if flag in PER_MODULE_OPTIONS else config).get(flag) is not value]
    assert not missing, f"[tool.mypy] lacks these flags of --strict: {missing}"
    # Nothing below the CLI opts back out of checking.
    assert not [o for o in config["overrides"] if o.get("ignore_errors") and any(
        m.startswith(tuple(s[:-1] for s in STRICT)) for m in o["module"])]

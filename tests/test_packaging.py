"""The wheel installs one import package, ``agentd`` (issue 8): none of the
bare layer names (``supervisor``, ``protocol``, ``store``, ``actors``), which
are all taken on PyPI, lands in site-packages."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    pytest.importorskip("setuptools", reason="building the wheel needs setuptools in this environment")
    out = tmp_path_factory.mktemp("wheel")
    # No build isolation: the build must not need the network.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        check=True, capture_output=True, timeout=240,
    )
    (path,) = out.glob("agentd-*.whl")
    with zipfile.ZipFile(path) as archive:
        yield archive


def test_one_top_level_package(wheel):
    dist_info = next(n.split("/")[0] for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    assert wheel.read(f"{dist_info}/top_level.txt").decode().split() == ["agentd"]
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert tops == {"agentd", dist_info}


def test_layers_and_contract_are_inside(wheel):
    names = set(wheel.namelist())
    for module in ("agentd/__init__.py", "agentd/main.py", "agentd/actors/thread_actor.py",
                   "agentd/actors/providers/scripted_agent.py", "agentd/store/db.py",
                   "agentd/supervisor/daemon.py", "agentd/protocol/server.py", "agentd/protocol/README.md",
                   # the web console (issue 15): served from package data
                   "agentd/protocol/console/index.html", "agentd/protocol/console/app.js",
                   "agentd/protocol/console/model.js", "agentd/protocol/console/console.css"):
        assert module in names, module
    entry_points = next(wheel.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "agentd = agentd.main:main" in entry_points


def test_the_wheels_relay_runs_as_a_file_without_site(wheel, tmp_path):
    """Issue 24: agentd gives ACP agents its MCP relay as ``python -I -S
    …/agentd/protocol/mcp_relay.py``; the wheel's copy, taken out alone,
    runs so (it imports nothing of agentd): a usage error, and with no
    daemon the one-line reason."""
    relay = tmp_path / "mcp_relay.py"
    relay.write_bytes(wheel.read("agentd/protocol/mcp_relay.py"))
    usage = subprocess.run([sys.executable, "-I", "-S", str(relay), "--bogus"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: agentd mcp"), usage.stderr
    missing = tmp_path / "no.sock"
    down = subprocess.run([sys.executable, "-I", "-S", str(relay), "--thread", "thr_1", "--socket", str(missing)],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert down.returncode == 1 and down.stderr.startswith(f"agentd mcp: the daemon is not running at {missing}"), down.stderr

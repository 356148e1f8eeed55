"""The layers import one way: protocol <- store <- actors <- supervisor <- agentd
(the CLI); the WebSocket stack loads only when a WebSocket is served; scripts
import no test module."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: repository folder -> import package, bottom layer first
LAYERS = {"protocol": "agentd.protocol", "store": "agentd.store", "actors": "agentd.actors",
          "supervisor": "agentd.supervisor", "cli": "agentd"}


def rank(module: str) -> int:
    """0 for agentd.protocol.… up to 4 for the CLI (agentd, agentd.main, agentd.demo, …)."""
    for index, package in enumerate(list(LAYERS.values())[:-1]):
        if module == package or module.startswith(package + "."):
            return index
    return len(LAYERS) - 1


def imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``, a module of ``package``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            name = "." * node.level + (node.module or "")
            found.append((node.lineno, importlib.util.resolve_name(name, package) if node.level else name))
    return found


def modules():
    for folder, package in LAYERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            sub = path.parent.relative_to(ROOT / folder).parts
            yield path, ".".join((package, *sub))


@pytest.mark.parametrize(("path", "package"), list(modules()), ids=lambda v: str(v.relative_to(ROOT)) if isinstance(v, Path) else "")
def test_a_layer_imports_only_layers_below_it(path, package):
    own = rank(package)
    upward = [f"{path.relative_to(ROOT)}:{line}: {module}" for line, module in imports(path, package)
              if module.split(".")[0] == "agentd" and rank(module) > own]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_the_websocket_stack_loads_only_when_a_websocket_is_served():
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, agentd.supervisor.daemon, agentd.main\n"
         "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('trio_websocket', 'wsproto', 'h11')"
         " or m == 'agentd.protocol.websocket'))"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.split()
    assert loaded == []
@pytest.mark.parametrize("path", sorted((ROOT / "scripts").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_scripts_import_no_test_module(path):
    package = ".".join(path.parent.relative_to(ROOT).parts)
    tests = [f"{line}: {module}" for line, module in imports(path, package) if module.split(".")[0] == "tests"]
    assert not tests, f"{path.name} imports test modules: {tests}"

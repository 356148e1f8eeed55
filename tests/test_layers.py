"""Imports flow one way (issue 8): protocol <- store <- actors <- supervisor <-
the CLI (``agentd`` itself), and scripts import no test module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: folder -> rank; a module may import only from layers of its rank or lower
LAYERS = {"protocol": 0, "store": 1, "actors": 2, "supervisor": 3, "cli": 4}
PACKAGE = {"protocol": "agentd.protocol", "store": "agentd.store", "actors": "agentd.actors",
           "supervisor": "agentd.supervisor"}


def imported_modules(path: Path) -> list[str]:
    """Absolute names of what ``path`` imports, wherever it does (lazy imports count)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def layer_of(module: str) -> int | None:
    """The rank of an ``agentd`` module; ``agentd`` alone is the package
    root (its ``__version__``), which every layer may read."""
    if module == "agentd":
        return None
    for folder, package in PACKAGE.items():
        if module == package or module.startswith(package + "."):
            return LAYERS[folder]
    if module.startswith("agentd."):
        return LAYERS["cli"]
    return None


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_imports_flow_one_way(folder):
    rank = LAYERS[folder]
    wrong = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for module in imported_modules(path):
            other = layer_of(module)
            if other is not None and other > rank:
                wrong.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_scripts_import_no_test_module():
    wrong = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sorted((ROOT / "scripts").glob("*.py"))
        for module in imported_modules(path)
        if module == "tests" or module.startswith("tests.")
    ]
    assert not wrong, "\n".join(wrong)

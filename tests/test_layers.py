"""The layers import one way: protocol <- store <- actors <- supervisor <- agentd
(the CLI); no module imports itself back through others (counting every
import: module level, ``TYPE_CHECKING`` and inside functions); the actors'
transitions import neither trio nor the actor, its executors or the registry
(issue 22); the WebSocket stack loads only when a WebSocket is served;
scripts import no test module."""

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


def module_name(path: Path, package: str) -> str:
    return package if path.stem == "__init__" else f"{package}.{path.stem}"


def import_graph() -> dict[str, set[str]]:
    """Every product module -> the product modules it imports, any way at all
    (``from a import b`` counts ``a.b`` when that is a module)."""
    found = {module_name(path, package): (path, package) for path, package in modules()}
    graph: dict[str, set[str]] = {}
    for name, (path, package) in found.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level else node.module
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in found and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_product_module_imports_itself_back():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


#: the actors' core: state and batch, and the transitions of every feature
#: (they decide; effects.py says what must happen; the actor and
#: executors.py carry it out)
CORE = ["state", "graph", "messages", "effects", "context", "handoff", "lineage", "points", "steering", "run_control",
        "turns", "requests", "artifacts", "transfers", "delegation", "checkpointing", "child_checkpoints",
        "merge_back", "rollback", "restoring", "provider_memory", "workspace_guard", "ending", "starting", "wakeups",
        "node_interrupt", "task_slots", "usage", "stalls", "thread_admin", "own_workspace", "merge_files", "archiving"]
#: what the core may not import: the event loop, and everything that runs it
BANNED = ["trio", "agentd.actors.thread_actor", "agentd.actors.registry", "agentd.actors.executors",
          "agentd.actors.host", "agentd.actors.starter", "agentd.actors.reply", "agentd.actors.restoring_folders",
          "agentd.actors.worktrees"]


@pytest.mark.parametrize("name", CORE)
def test_a_transition_module_imports_no_event_loop_and_no_actor(name):
    path = ROOT / "actors" / f"{name}.py"
    banned = [f"{line}: {module}" for line, module in imports(path, "agentd.actors")
              if any(module == b or module.startswith(b + ".") for b in BANNED)]
    assert not banned, f"actors/{name}.py imports what runs the loop: {banned}"
    awaiting = [node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.AsyncFunctionDef)]
    assert not awaiting, f"actors/{name}.py awaits (it should yield an effect): {awaiting}"


def test_every_actors_module_is_core_or_runs_it():
    """A new module in actors/ is placed on purpose: in the core, or among
    what runs it (the loop, its executors, the starter task, the registry)."""
    runners = {"thread_actor", "registry", "executors", "host", "starter", "reply", "restoring_folders",
               "failures", "config", "__init__", "worktrees", "regular_files", "trees"}
    placed = set(CORE) | runners
    unplaced = sorted(p.stem for p in (ROOT / "actors").glob("*.py") if p.stem not in placed)
    assert not unplaced, f"place these in CORE or among the runners in tests/test_layers.py: {unplaced}"


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

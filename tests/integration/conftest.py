"""Fixtures of the real-runtime tests: a fake model server world per
runtime (its own home, config and request log), closed after the test."""

from __future__ import annotations

import pytest

from scripts.offline import claude as claude_world
from scripts.offline import codex as codex_world


@pytest.fixture
def codex(tmp_path):
    world = codex_world.make_world(tmp_path / "codex")
    yield world
    world.close()


@pytest.fixture
def claude(tmp_path):
    world = claude_world.make_world(tmp_path / "claude")
    yield world
    world.close()


@pytest.fixture(scope="module")
def runtimes_daemon(tmp_path_factory, module_paths):
    """One daemon for a module, with the pinned Codex and Claude (each where
    it is installed), for the lineage, rollback and delegation tests on the
    real runtimes (``tests/integration/shared.py``: each test in threads of
    its own, reading only their state). Instances: ``codex`` and ``claude``
    (agentd's tool asks), ``codex_allow`` and ``claude_allow``
    (pre-approved), ``basic`` (the scripted agent)."""
    from tests.integration.shared import module_daemon

    root = tmp_path_factory.mktemp("runtimes")
    worlds = {}
    if codex_world.codex_binary() is not None:
        worlds["codex"] = codex_world.make_world(root / "codex")
    if claude_world.claude_binary() is not None:
        worlds["claude"] = claude_world.make_world(root / "claude")
    providers = "".join(world.provider_toml(kind) + "\n" + world.provider_toml(f"{kind}_allow", agentd_tool="allow") + "\n"
                        for kind, world in worlds.items())
    try:
        with module_daemon(module_paths, providers + '[providers.basic]\nkind = "scripted"\n',
                           daemon="interrupt_grace = 30", **worlds) as shared:
            yield shared
    finally:
        for world in worlds.values():
            world.close()

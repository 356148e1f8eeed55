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

"""A fork's workspace of its own (issue 27), as the transitions name it: no
git and no file is touched here (the world side is worktrees.py)."""

from __future__ import annotations

import msgspec

from agentd.protocol import wire_records
from agentd.store.db import struct_copy
from agentd.store.records import WorkspaceSource, to_wire

#: ``thread.fork {workspace}`` values that give the fork a workspace of its own
OWN_WORKSPACES = ("worktree", "copy")
BRANCH_PREFIX = "agentd/"


def short_id(thread_id: str) -> str:
    """The part of a thread id a branch name carries: its last 12 characters
    (random bits, unlike its leading milliseconds)."""
    return thread_id[-12:]


def own_workspace(source: WorkspaceSource) -> str:
    """A fork's workspace: its worktree's (or copy's) top plus the source's place in the repository."""
    return f"{source.path}/{source.prefix}" if source.prefix else source.path


def for_thread(source: WorkspaceSource, thread_id: str) -> WorkspaceSource:
    """``source`` planned before its thread had an id (a delegated task),
    placed at ``<worktrees>/<thread id>`` on branch ``agentd/<short id>``."""
    root = source.path.rsplit("/", 1)[0]
    branch = BRANCH_PREFIX + short_id(thread_id) if source.kind == "worktree" else None
    return struct_copy(source, path=f"{root}/{thread_id}", branch=branch)


def wire_source(source: WorkspaceSource | None) -> wire_records.WorkspaceSource | None:
    """A stored WorkspaceSource as the wire's."""
    return msgspec.convert(to_wire(source), wire_records.WorkspaceSource) if source is not None else None

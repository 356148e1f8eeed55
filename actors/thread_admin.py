"""Rename and delete a thread (issue 28), in the thread's own actor.

Both run as the thread's commands, one at a time with everything else the
actor does, so a delete cannot race a run that starts: the actor is idle
when it checks, and no run can start in it until the deletion is
committed. After it, the actor answers every command ``not_found`` until it
retires (``ThreadState.deleted``); the registry finds no thread to load.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentd.protocol.errors import InvalidParams, InvalidState
from agentd.store.records import to_wire
from agentd.store.thread_delete import DeletedThread, delete_thread

from . import graph
from .context import ThreadContext
from .effects import NO_SEQ, Decision, PruneMcpSecrets, SaveMcpSecrets, StopSession, Transition
from .messages import Command
from .providers import extra_mcp


def thread_update(ctx: ThreadContext, command: Command) -> Transition:
    """``thread.update {threadId, title?, mcpServers?}``: change the thread's
    title, or the MCP servers its provider sessions get; ``thread.updated``.
    The servers' secrets (values of env variables and headers) go to the
    thread's secrets file first (``providers/mcp_secrets.py``), the record
    keeps their names. New servers reach the provider when a native thread
    is next made or loaded: an idle live session is stopped for it (a
    running one keeps its servers until its session ends)."""
    params = command.params
    state = ctx.state
    changes: dict[str, Any] = {}
    renamed: dict[str, str] = {}
    secrets_changed = False
    if params.title is not None:
        title = params.title.strip()
        if not title:
            raise InvalidParams("title must not be empty", field="title")
        if title != state.thread.title:
            changes["title"] = title
    if params.mcp_servers is not None:
        given, renamed = extra_mcp.normalize(params.mcp_servers)
        secrets = extra_mcp.secrets(given)
        # Written before the record that names them is committed, beside the
        # values kept already: a commit that fails leaves the record as it was,
        # which still finds its own. They go once the record is committed.
        secrets_changed = yield SaveMcpSecrets(secrets, beside_old=True)
        servers = extra_mcp.records(given)
        if (servers or None) != (state.thread.mcp_servers or None):
            changes["mcp_servers"] = servers or None
    if not changes and not secrets_changed:
        return Decision(None, {"thread": to_wire(state.thread), "changed": [], "renamed": renamed,
                               "seq": ctx.store.last_seq}, seq=False)
    batch = ctx.batch()
    # Only new values: the record is the same, its updatedAt says it changed.
    graph.set_thread(batch, state, **changes)
    servers_changed = "mcp_servers" in changes or secrets_changed
    changed = sorted([k for k in changes if k != "mcp_servers"] + (["mcpServers"] if servers_changed else []))
    batch.emit("thread.updated", thread=to_wire(state.thread), changed=changed)
    result = {"thread": to_wire(state.thread), "changed": changed, "renamed": renamed}
    batch.record_receipt(command.command_id, command.method, result)
    effects: list[Any] = [PruneMcpSecrets(secrets)] if secrets_changed else []
    if servers_changed and state.active is None and state.next_queued() is None:
        effects.append(StopSession("mcp_servers_changed"))
    return Decision(batch, result, effects)


def _refuse_if_busy(ctx: ThreadContext) -> None:
    state = ctx.state
    if state.active is not None:
        run = state.active.run
        raise InvalidState(f"thread {state.thread_id} has run {run.ordinal} ({run.id}) {run.status}: "
                           "stop it first (agentd stop), then delete the thread",
                           runId=run.id, status=run.status)
    waiting = state.next_queued()
    if waiting is not None:
        raise InvalidState(f"thread {state.thread_id} has run {waiting.ordinal} ({waiting.id}) about to start: "
                           "stop it first (agentd stop), then delete the thread", runId=waiting.id, status="queued")


def thread_delete(ctx: ThreadContext, command: Command) -> Decision:
    """``thread.delete {threadId}``: take the thread and its records out of the
    store (``store/thread_delete.py``) in one batch with ``thread.deleted``.
    Refused while a run is active or about to start; runs a Stop holds go too.
    The reply carries what the daemon does after the commit (the shadow refs
    to drop: ``DeletedThread``)."""
    _refuse_if_busy(ctx)
    state = ctx.state
    batch = ctx.batch()
    deleted = delete_thread(batch, ctx.store, state.thread)
    batch.emit("thread.deleted", threadId=state.thread_id, childThreadIds=deleted.child_thread_ids)
    state.queued.clear()
    state.deleted = True
    return Decision(batch, DeleteDone(deleted=deleted))


class DeleteDone(msgspec.Struct, kw_only=True):
    """The actor's answer to a delete: what was taken out, and the commit's ``seq``."""

    deleted: DeletedThread
    seq: int = NO_SEQ

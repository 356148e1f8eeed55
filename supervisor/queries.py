"""Daemon-owned methods: reads answered from the store, thread creation, and
the daemon's own status. None of them takes a thread's lock."""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import trio

from agentd.actors.checkpointing import captured_checkpoint
from agentd.actors.checkpoints import DEFAULT_MAX_PATCH_BYTES, CheckpointError
from agentd.protocol import wire
from agentd.protocol.errors import AgentdError, InvalidState, NotFound, Unsupported
from agentd.protocol.server import Connection
from agentd.store.records import AppThread, ContextHandoff, to_wire

from .context import DaemonContext

try:
    VERSION = version("agentd")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    VERSION = "unknown"


async def thread_create(context: DaemonContext, params: wire.ThreadCreateParams, _conn: Connection) -> dict[str, Any]:
    """SPEC F1: an AppThread only (the registry makes it; no actor is needed)."""
    return await context.registry.create_thread(params, params.command_id)


def thread_create_quick(context: DaemonContext, params: wire.ThreadCreateParams, _conn: Connection) -> Any:
    """``thread_create`` where the request is read (no task of its own) (see ``create_thread_quick``)."""
    return context.registry.create_thread_quick(params, params.command_id)


async def run_resume(context: DaemonContext, params: wire.RunResumeParams, _conn: Connection) -> dict[str, Any]:
    """SPEC F12: execution is never resumed after a restart; say so plainly."""
    run = context.store.run(params.run_id)
    if run is None:
        raise NotFound(f"no run {params.run_id}", runId=params.run_id)
    raise Unsupported(
        f"agentd does not resume execution: run {run.id} is {run.status}"
        + (f" ({run.reason})" if run.reason else "")
        + ". In-flight model requests, tool calls and approvals are not revived after a restart; "
        "send a new message to continue the thread.",
        runId=run.id,
    )


def unreadable_wire(errors: list[AgentdError]) -> list[dict[str, Any]]:
    """What a read could not decode, as clients see it: ``{kind, id, reason}``."""
    return [{"kind": e.data.get("recordKind"), "id": e.data.get("recordId"), "reason": e.data.get("reason", e.message)}
            for e in errors]


def _thread_entry(item: AppThread | AgentdError) -> dict[str, Any]:
    """A thread in a list, or ``{id, corrupt: true, reason}`` where its record cannot be decoded."""
    if isinstance(item, AgentdError):
        return {"id": item.data.get("recordId"), "corrupt": True, "reason": item.data.get("reason", item.message)}
    return to_wire(item)


async def thread_list(context: DaemonContext, params: wire.ThreadListParams, _conn: Connection) -> dict[str, Any]:
    """Every thread, oldest first; with ``limit``, one page, newest first,
    and ``next`` (the ``before`` of the next page; null on the last). A
    thread whose record cannot be decoded is listed as ``{id, corrupt, reason}``.
    Archived threads are left out unless ``includeArchived`` (issue 27); a
    page left without them is filled from older threads, so that only the
    last page holds fewer than ``limit``."""
    def shown(t: AppThread | AgentdError) -> bool:
        return params.include_archived or not (isinstance(t, AppThread) and t.archived_at is not None)

    store = context.store
    if params.limit is None:
        return {"threads": [_thread_entry(t) for t in store.list_threads_keeping_unreadable() if shown(t)]}
    kept: list[AppThread | AgentdError] = []
    before, more = params.before, True
    while more and len(kept) < params.limit:
        # Each read asks for as many as are still missing: a page reads what
        # it holds plus the archived threads it passes over.
        threads, more = store.list_threads_page(params.limit - len(kept), before)
        if not threads:
            break
        kept += [t for t in threads if shown(t)]
        last = threads[-1]
        before = last.id if isinstance(last, AppThread) else last.data.get("recordId")
        if before is None:  # a record with no id to go on from: the list ends here
            more = False
    return {"threads": [_thread_entry(t) for t in kept], "next": before if more else None}


async def thread_get(context: DaemonContext, params: wire.ThreadGetParams, _conn: Connection) -> dict[str, Any]:
    """The thread, its runs and messages; records that cannot be decoded are
    left out and named in ``unreadable`` (the rest is still answered)."""
    store = context.store
    thread = store.thread(params.thread_id)
    if thread is None:
        raise NotFound(f"no thread {params.thread_id}; list threads with thread.list", threadId=params.thread_id)
    unreadable: list[AgentdError] = []
    result = {
        "thread": to_wire(thread),
        "runs": [to_wire(r) for r in store.thread_runs(thread.id, unreadable=unreadable)],
        "messages": [to_wire(m) for m in store.thread_messages(thread.id, unreadable=unreadable)],
        "quarantine": context.registry.quarantine_of(thread.id),
    }
    result["unreadable"] = unreadable_wire(unreadable)
    return result


async def thread_unquarantine(context: DaemonContext, params: wire.ThreadIdParams, _conn: Connection) -> dict[str, Any]:
    """Lift a thread's quarantine (its actor failed too often): commands reach it again."""
    return await context.registry.unquarantine(params.thread_id)


async def run_get(context: DaemonContext, params: wire.RunGetParams, _conn: Connection) -> dict[str, Any]:
    store = context.store
    run = store.run(params.run_id)
    if run is None:
        raise NotFound(f"no run {params.run_id}", runId=params.run_id)
    unreadable: list[AgentdError] = []
    return {
        "run": to_wire(run),
        "attempts": [to_wire(a) for a in store.run_attempts(run.id, unreadable=unreadable)],
        "nodes": [to_wire(n) for n in store.run_nodes(run.id, unreadable=unreadable)],
        "artifacts": [to_wire(a) for a in store.run_artifacts(run.id, unreadable=unreadable)],
        "unreadable": unreadable_wire(unreadable),
    }


async def checkpoint_list(context: DaemonContext, params: wire.ThreadIdParams, _conn: Connection) -> dict[str, Any]:
    """A thread's checkpoints (root, child and safety ones) by ordinal, then creation."""
    if context.store.thread(params.thread_id) is None:
        raise NotFound(f"no thread {params.thread_id}", threadId=params.thread_id)
    unreadable: list[AgentdError] = []
    checkpoints = context.store.thread_checkpoints(params.thread_id, unreadable=unreadable)
    return {"checkpoints": [to_wire(c) for c in checkpoints], "unreadable": unreadable_wire(unreadable)}


async def checkpoint_diff(context: DaemonContext, params: wire.CheckpointDiffParams, _conn: Connection) -> dict[str, Any]:
    """Files and patch from a base checkpoint (default: the one it was
    captured against) to a checkpoint; reads the shadow's objects only."""
    store = context.store
    engine = context.registry.checkpoints
    if engine is None:
        raise InvalidState("checkpoints are off in this agentd")
    target = captured_checkpoint(store, params.checkpoint_id)
    base_id = params.base_checkpoint_id or target.base_checkpoint_id
    base = captured_checkpoint(store, base_id) if base_id else None
    if base is not None and base.thread_id != target.thread_id:
        raise InvalidState(f"checkpoints {target.id} and {base.id} belong to different threads",
                           checkpointId=target.id, baseCheckpointId=base.id)
    max_bytes = DEFAULT_MAX_PATCH_BYTES if params.max_bytes is None else params.max_bytes
    assert target.commit is not None  # captured_checkpoint refuses one without files
    try:
        result = await engine.diff(target.workspace, target.commit, base.commit if base else None, max_bytes=max_bytes)
    except CheckpointError as exc:
        raise InvalidState(f"cannot diff checkpoint {target.id}: {exc}", checkpointId=target.id, reason=exc.reason) from None
    return {
        "checkpointId": target.id,
        "baseCheckpointId": base.id if base else None,
        "files": to_wire(result)["files"],
        "patch": result.patch,
        "truncated": result.truncated,
    }


async def thread_transfers(context: DaemonContext, params: wire.ThreadIdParams, _conn: Connection) -> dict[str, Any]:
    """SPEC F8: the ContextTransfers the thread takes part in (source or target), oldest first."""
    if context.store.thread(params.thread_id) is None:
        raise NotFound(f"no thread {params.thread_id}", threadId=params.thread_id)
    return {"transfers": [to_wire(t) for t in context.store.thread_transfers(params.thread_id)]}


async def handoff_get(context: DaemonContext, params: wire.HandoffGetParams, _conn: Connection) -> dict[str, Any]:
    """SPEC F5: a stored ContextHandoff — exactly what an agent was given."""
    handoff = context.store.get(ContextHandoff, params.handoff_id)
    if handoff is None:
        raise NotFound(f"no handoff {params.handoff_id}", handoffId=params.handoff_id)
    return {"handoff": to_wire(handoff)}


async def providers_list(context: DaemonContext, _params: wire.NoParams, _conn: Connection) -> dict[str, Any]:
    out = []
    for adapter in context.sessions.adapters.values():
        try:
            probe = await adapter.probe()
        except Exception as exc:  # noqa: BLE001 - a probe failure is what to show
            probe = {"usable": False, "why": str(exc)}
        out.append({**adapter.describe(), **probe})
    return {"providers": out}


async def web_login_code(context: DaemonContext, _params: wire.NoParams, _conn: Connection) -> dict[str, Any]:
    """A one-time code that logs the web console in (``agentd web`` opens
    ``url``): good once, for ``expiresIn`` seconds (protocol/login.py)."""
    if context.login_codes is None or context.endpoints.web is None:
        raise InvalidState("the web console is off; start the daemon with `agentd serve --web` "
                           "(or `web = true` under [daemon] in config.toml)")
    code = context.login_codes.issue()
    return {"code": code, "url": f"{context.endpoints.web}#code={code}", "expiresIn": context.login_codes.ttl}


async def daemon_status(context: DaemonContext, _params: wire.NoParams, _conn: Connection) -> dict[str, Any]:
    store = context.store
    return {
        "version": VERSION,
        "pid": os.getpid(),
        "uptime": trio.current_time() - context.started_at,
        "socket": context.endpoints.socket,
        "websocket": context.endpoints.websocket,
        "web": context.endpoints.web,
        "dataDir": str(store.path.parent),
        "lastSeq": store.last_seq,
        "loadedActors": context.registry.loaded,
        "quarantined": sorted(context.registry.failures.quarantined),
        "sessions": context.sessions.status(),
        "subscribers": context.hub.subscriber_count,
        "commits": {"batches": store.writer.batches_committed, "transactions": store.writer.transactions},
    }

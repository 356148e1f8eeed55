"""Daemon-owned methods: reads answered from the store, thread creation, and
the daemon's own status. None of them takes a thread's lock."""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import trio

from agentd.actors.checkpointing import captured_checkpoint
from agentd.actors.checkpoints import DEFAULT_MAX_PATCH_BYTES, CheckpointError
from agentd.protocol import wire
from agentd.protocol.errors import InvalidState, NotFound, Unsupported
from agentd.protocol.server import Connection
from agentd.store.records import ContextHandoff, to_wire

if TYPE_CHECKING:
    from .router import DaemonRouter

try:
    VERSION = version("agentd")
except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
    VERSION = "unknown"


async def thread_create(router: DaemonRouter, params: wire.ThreadCreateParams, _conn: Connection) -> dict[str, Any]:
    """SPEC F1: an AppThread only (the registry makes it; no actor is needed)."""
    return await router.registry.create_thread(params, params.command_id)


def thread_create_quick(router: DaemonRouter, params: wire.ThreadCreateParams, _conn: Connection) -> Any:
    """``thread_create`` where the request is read (no task of its own) (see ``create_thread_quick``)."""
    return router.registry.create_thread_quick(params, params.command_id)


async def run_resume(router: DaemonRouter, params: wire.RunResumeParams, _conn: Connection) -> dict[str, Any]:
    """SPEC F12: execution is never resumed after a restart; say so plainly."""
    run = router.store.run(params.run_id)
    if run is None:
        raise NotFound(f"no run {params.run_id}", runId=params.run_id)
    raise Unsupported(
        f"agentd does not resume execution: run {run.id} is {run.status}"
        + (f" ({run.reason})" if run.reason else "")
        + ". In-flight model requests, tool calls and approvals are not revived after a restart; "
        "send a new message to continue the thread.",
        runId=run.id,
    )


async def thread_list(router: DaemonRouter, params: wire.ThreadListParams, _conn: Connection) -> dict[str, Any]:
    """Every thread, oldest first; with ``limit``, one page, newest first,
    and ``next`` (the ``before`` of the next page; null on the last)."""
    if params.limit is None:
        return {"threads": [to_wire(t) for t in router.store.list_threads()]}
    threads, more = router.store.list_threads_page(params.limit, params.before)
    return {"threads": [to_wire(t) for t in threads], "next": threads[-1].id if more and threads else None}


async def thread_get(router: DaemonRouter, params: wire.ThreadGetParams, _conn: Connection) -> dict[str, Any]:
    store = router.store
    thread = store.thread(params.thread_id)
    if thread is None:
        raise NotFound(f"no thread {params.thread_id}; list threads with thread.list", threadId=params.thread_id)
    return {
        "thread": to_wire(thread),
        "runs": [to_wire(r) for r in store.thread_runs(thread.id)],
        "messages": [to_wire(m) for m in store.thread_messages(thread.id)],
    }


async def run_get(router: DaemonRouter, params: wire.RunGetParams, _conn: Connection) -> dict[str, Any]:
    store = router.store
    run = store.run(params.run_id)
    if run is None:
        raise NotFound(f"no run {params.run_id}", runId=params.run_id)
    return {
        "run": to_wire(run),
        "attempts": [to_wire(a) for a in store.run_attempts(run.id)],
        "nodes": [to_wire(n) for n in store.run_nodes(run.id)],
        "artifacts": [to_wire(a) for a in store.run_artifacts(run.id)],
    }


async def checkpoint_list(router: DaemonRouter, params: wire.ThreadIdParams, _conn: Connection) -> dict[str, Any]:
    """A thread's checkpoints (root, child and safety ones) by ordinal, then creation."""
    if router.store.thread(params.thread_id) is None:
        raise NotFound(f"no thread {params.thread_id}", threadId=params.thread_id)
    return {"checkpoints": [to_wire(c) for c in router.store.thread_checkpoints(params.thread_id)]}


async def checkpoint_diff(router: DaemonRouter, params: wire.CheckpointDiffParams, _conn: Connection) -> dict[str, Any]:
    """Files and patch from a base checkpoint (default: the one it was
    captured against) to a checkpoint; reads the shadow's objects only."""
    store = router.store
    engine = router.registry.checkpoints
    if engine is None:
        raise InvalidState("checkpoints are off in this agentd")
    target = captured_checkpoint(store, params.checkpoint_id)
    base_id = params.base_checkpoint_id or target.base_checkpoint_id
    base = captured_checkpoint(store, base_id) if base_id else None
    if base is not None and base.thread_id != target.thread_id:
        raise InvalidState(f"checkpoints {target.id} and {base.id} belong to different threads",
                           checkpointId=target.id, baseCheckpointId=base.id)
    max_bytes = DEFAULT_MAX_PATCH_BYTES if params.max_bytes is None else params.max_bytes
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


async def thread_transfers(router: DaemonRouter, params: wire.ThreadIdParams, _conn: Connection) -> dict[str, Any]:
    """SPEC F8: the ContextTransfers the thread takes part in (source or target), oldest first."""
    if router.store.thread(params.thread_id) is None:
        raise NotFound(f"no thread {params.thread_id}", threadId=params.thread_id)
    return {"transfers": [to_wire(t) for t in router.store.thread_transfers(params.thread_id)]}


async def handoff_get(router: DaemonRouter, params: wire.HandoffGetParams, _conn: Connection) -> dict[str, Any]:
    """SPEC F5: a stored ContextHandoff — exactly what an agent was given."""
    handoff = router.store.get(ContextHandoff, params.handoff_id)
    if handoff is None:
        raise NotFound(f"no handoff {params.handoff_id}", handoffId=params.handoff_id)
    return {"handoff": to_wire(handoff)}


async def providers_list(router: DaemonRouter, _params: wire.NoParams, _conn: Connection) -> dict[str, Any]:
    out = []
    for adapter in router.sessions.adapters.values():
        try:
            probe = await adapter.probe()
        except Exception as exc:  # noqa: BLE001 - a probe failure is what to show
            probe = {"usable": False, "why": str(exc)}
        out.append({**adapter.describe(), **probe})
    return {"providers": out}


async def web_login_code(router: DaemonRouter, _params: wire.NoParams, _conn: Connection) -> dict[str, Any]:
    """A one-time code that logs the web console in (``agentd web`` opens
    ``url``): good once, for ``expiresIn`` seconds (protocol/login.py)."""
    if router.login_codes is None or router.web_url is None:
        raise InvalidState("the web console is off; start the daemon with `agentd serve --web` "
                           "(or `web = true` under [daemon] in config.toml)")
    code = router.login_codes.issue()
    return {"code": code, "url": f"{router.web_url}#code={code}", "expiresIn": router.login_codes.ttl}


async def daemon_status(router: DaemonRouter, _params: wire.NoParams, _conn: Connection) -> dict[str, Any]:
    store = router.store
    return {
        "version": VERSION,
        "pid": os.getpid(),
        "uptime": trio.current_time() - router.started_at,
        "socket": router.socket_path,
        "websocket": router.websocket_url,
        "web": router.web_url,
        "dataDir": str(store.path.parent),
        "lastSeq": store.last_seq,
        "loadedActors": router.registry.loaded,
        "sessions": router.sessions.status(),
        "subscribers": router.hub.subscriber_count,
        "commits": {"batches": store.writer.batches_committed, "transactions": store.writer.transactions},
    }

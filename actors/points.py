"""What a thread's conversation is, and what a source point means (SPEC F6, F8).

Reads only, for forks, merge-backs and the context a run starts with:
``thread_history`` (a fork's conversation starts with its source's runs,
frozen at the fork), ``fork_transfer`` (the transfer that made a fork),
``run_point`` (a source point at the end of a run, with its native refs) and
``resolve_source`` (what a client's source point means now, or why it is no
stable point).
"""

from __future__ import annotations

from typing import Any

from agentd.protocol import wire
from agentd.protocol.errors import InvalidState, NotFound
from agentd.store.db import Store, struct_copy
from agentd.store.records import (
    NODE_TERMINAL,
    Checkpoint,
    ContextTransfer,
    ExecutionNode,
    ProviderThread,
    ProviderTurn,
    Run,
    RunAttempt,
    SourcePoint,
)

from . import delegation
from .lineage import in_history
from .state import ActiveRun, ThreadState


# -- what a thread's conversation is ---------------------------------------------------------


def fork_transfer(store: Store, thread_id: str) -> ContextTransfer | None:
    """The ``fork`` transfer that made ``thread_id``, if it is a fork."""
    return next((t for t in store.thread_transfers(thread_id) if t.type == "fork" and t.target_thread_id == thread_id), None)


def thread_history(store: Store, thread_id: str, *, before_ordinal: int | None = None,
                   upto_ordinal: int | None = None) -> list[str]:
    """The thread's conversation as app run ids, oldest first: a fork's
    source runs (as they were at the fork), then its own runs that reached a
    provider and ended — before ``before_ordinal`` / up to ``upto_ordinal``."""
    transfer = fork_transfer(store, thread_id)
    inherited = list(transfer.source_run_ids) if transfer is not None else []
    own = [
        run.id for run in store.thread_runs(thread_id)
        if in_history(run) and (before_ordinal is None or run.ordinal < before_ordinal)
        and (upto_ordinal is None or run.ordinal <= upto_ordinal)
    ]
    return inherited + own


def with_legacy_coverage(store: Store, pt: ProviderThread) -> ProviderThread:
    """A provider thread made before coverage was recorded has seen its
    thread's runs up to ``coveredRunCount``."""
    if pt.covered_run_ids or pt.covered_run_count <= 0:
        return pt
    runs = [run.id for run in store.thread_runs(pt.thread_id) if run.ordinal <= pt.covered_run_count and in_history(run)]
    return struct_copy(pt, covered_run_ids=runs)


# -- source points ---------------------------------------------------------------------------


def describe_unstable(active: ActiveRun) -> str:
    """Why the active run is no stable point to fork from."""
    if active.requests:
        kinds = sorted({request.kind for request in active.requests.values()})
        return "it is waiting on " + " and ".join("an approval" if k == "approval" else "a question" for k in kinds)
    running = [node for node in active.nodes.values() if node.status not in NODE_TERMINAL]
    if any(node.kind == "subagent" for node in running):
        return "a subagent is running"
    if running:
        return f"a tool is running ({running[0].title or running[0].kind})"
    if active.messages:
        return "it is streaming text"
    if active.provider_turn is None:
        return "its turn has not started yet"
    return "its turn is still running"


def _check_run_stable(state: ThreadState, run: Run) -> None:
    active = state.active
    if active is not None and active.run.id == run.id:
        raise InvalidState(
            f"run {run.id} is not a stable point to fork from: {describe_unstable(active)}. Fork from an earlier "
            "run or from latest_stable, or wait for it to end", runId=run.id, status=run.status,
        )
    if run.status == "queued":
        raise InvalidState(f"run {run.id} is queued: it has not run yet, so there is nothing to fork", runId=run.id, status=run.status)
    if run.status == "rolled_back":
        raise InvalidState(f"run {run.id} was rolled back; fork from a run still in the thread", runId=run.id, status=run.status)
    if not in_history(run):
        raise InvalidState(f"run {run.id} is {run.status} and never reached a provider; there is nothing to fork",
                           runId=run.id, status=run.status)


def run_point(store: Store, kind: str, run: Run, **extra: Any) -> SourcePoint:
    """A source point at the end of ``run``, with the native refs of the
    provider turn that ran it (when it has them)."""
    attempt = store.get(RunAttempt, run.selected_attempt_id) if run.selected_attempt_id else None
    pt = store.get(ProviderThread, attempt.provider_thread_id) if attempt and attempt.provider_thread_id else None
    turn = store.get(ProviderTurn, attempt.provider_turn_id) if attempt and attempt.provider_turn_id else None
    fields: dict[str, Any] = dict(type=kind, thread_id=run.thread_id, run_id=run.id, provider=run.provider)
    if pt is not None:
        fields.update(provider_thread_id=pt.id, native_thread_id=pt.native_thread_id)
    if turn is not None:
        fields.update(provider_turn_id=turn.id, native_turn_ref=turn.native_end_ref or turn.native_turn_id)
    fields.update(extra)
    return SourcePoint(**fields)


def resolve_source(store: Store, state: ThreadState, spec: wire.SourcePointParams | None) -> tuple[SourcePoint, list[str]]:
    """What a client's source point means now: the point (with its native
    refs) and the conversation up to it, as app run ids.

    Raises:
        NotFound: it names nothing in this thread.
        InvalidState: it is not a stable point (with why).
    """
    thread_id = state.thread_id
    match spec:
        case None | wire.LatestStablePoint():
            return _latest_stable(store, state)
        case wire.RunPoint(run_id=run_id):
            run = store.run(run_id)
            if run is None or run.thread_id != thread_id:
                raise NotFound(f"no run {run_id} in thread {thread_id}", runId=run_id)
            _check_run_stable(state, run)
            return run_point(store, "run", run), thread_history(store, thread_id, upto_ordinal=run.ordinal)
        case wire.NodePoint(node_id=node_id):
            return _node_point(store, state, node_id)
        case wire.ProviderThreadPoint(provider_thread_id=pt_id, provider_turn_id=turn_id):
            return _provider_thread_point(store, state, pt_id, turn_id)
        case wire.CheckpointPoint(checkpoint_id=checkpoint_id):
            run = _checkpoint_run(store, state, checkpoint_id)
            if run is None:  # a baseline before the thread's first run: an empty fork
                return SourcePoint(type="checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id,
                                   provider=state.thread.provider), list(fork_transfer_run_ids(store, thread_id))
            point = run_point(store, "checkpoint", run, checkpoint_id=checkpoint_id)
            return point, thread_history(store, thread_id, upto_ordinal=run.ordinal)
    raise AssertionError(f"unknown source point {spec!r}")  # pragma: no cover


def _latest_stable(store: Store, state: ThreadState) -> tuple[SourcePoint, list[str]]:
    """The thread's newest completed run; a fork's source point while it has none."""
    thread_id = state.thread_id
    completed = [run for run in store.thread_runs(thread_id) if run.status == "completed" and in_history(run)]
    if completed:
        run = completed[-1]
        # The run's checkpoint, where one was captured, names the
        # files as they were at that point too (SPEC F6).
        checkpoint = store.get(Checkpoint, run.checkpoint_id) if run.checkpoint_id else None
        extra = {"checkpoint_id": checkpoint.id} if checkpoint is not None and checkpoint.status == "captured" else {}
        return (run_point(store, "latest_stable", run, **extra),
                thread_history(store, thread_id, upto_ordinal=run.ordinal))
    inherited = fork_transfer(store, thread_id)
    if inherited is not None and inherited.source_run_ids:
        # A fork with no run of its own yet: its point is its source's.
        point = struct_copy(inherited.source_point, type="latest_stable")
        return point, list(inherited.source_run_ids)
    # Nothing has completed yet: the fork starts empty (it never takes
    # partial state), with its lineage.
    return SourcePoint(type="latest_stable", thread_id=thread_id, provider=state.thread.provider), []


def _node_point(store: Store, state: ThreadState, node_id: str) -> tuple[SourcePoint, list[str]]:
    """A completed node: the run it ended in, or the node's own provider thread when it has one."""
    thread_id = state.thread_id
    node = store.get(ExecutionNode, node_id)
    if node is None or node.thread_id != thread_id:
        raise NotFound(f"no node {node_id} in thread {thread_id}", nodeId=node_id)
    if node.status != "completed":
        raise InvalidState(f"node {node_id} is {node.status}: only a completed node is a stable point", nodeId=node_id)
    run = store.run(node.run_id)
    assert run is not None
    _check_run_stable(state, run)
    # A child scope (a subagent, a delegated task) has its own checkpoint: the
    # files as that child left them are the fork's baseline (SPEC F6, F13).
    children = [c for c in store.thread_checkpoints(thread_id)
                if c.scope == "child" and c.node_id == node.id and c.status == "captured"]
    extra = {"checkpoint_id": max(children, key=lambda c: (c.created_at, c.id)).id} if children else {}
    point = run_point(store, "node", run, node_id=node.id, **extra)
    native = _node_native_thread(node)
    if native is not None:
        # A native subagent's own thread backs a child thread (delegation.native_subagent):
        # its provider thread record makes the fork native.
        backing = delegation.subagent_provider_thread(store, thread_id, native)
        point = struct_copy(point, provider_thread_id=backing.id if backing else None, provider_turn_id=None,
                            native_thread_id=native, native_turn_ref=None)
    return point, thread_history(store, thread_id, upto_ordinal=run.ordinal)


def _provider_thread_point(
    store: Store, state: ThreadState, pt_id: str, turn_id: str | None,
) -> tuple[SourcePoint, list[str]]:
    """A provider thread after one of its turns, or after the last run it has seen."""
    thread_id = state.thread_id
    pt = store.get(ProviderThread, pt_id)
    if pt is None or pt.thread_id != thread_id:
        raise NotFound(f"no provider thread {pt_id} in thread {thread_id}", providerThreadId=pt_id)
    history = thread_history(store, thread_id)
    if turn_id is not None:
        turn = store.get(ProviderTurn, turn_id)
        if turn is None or turn.provider_thread_id != pt.id:
            raise NotFound(f"no provider turn {turn_id} in provider thread {pt_id}", providerTurnId=turn_id)
        if turn.status == "started":
            raise InvalidState(f"provider turn {turn_id} is still running; fork from it once it ended",
                               providerTurnId=turn_id)
        run = store.run(turn.run_id)
        assert run is not None
        _check_run_stable(state, run)
        point = run_point(store, "provider_thread", run)
        point = struct_copy(point, provider_thread_id=pt.id, provider_turn_id=turn.id, native_thread_id=pt.native_thread_id,
                            native_turn_ref=turn.native_end_ref or turn.native_turn_id)
        return point, thread_history(store, thread_id, upto_ordinal=run.ordinal)
    active = state.active
    if active is not None and active.attempt.provider_thread_id == pt.id:
        raise InvalidState(
            f"provider thread {pt_id} is running run {active.run.id} ({describe_unstable(active)}); "
            "name a providerTurnId that ended, or wait", providerThreadId=pt_id,
        )
    seen = set(with_legacy_coverage(store, pt).covered_run_ids)
    upto = max((i for i, run_id in enumerate(history) if run_id in seen), default=None)
    if upto is None:
        raise InvalidState(f"provider thread {pt_id} has seen no run of this thread; there is nothing to fork",
                           providerThreadId=pt_id)
    run = store.run(history[upto])
    assert run is not None
    point = SourcePoint(type="provider_thread", thread_id=thread_id, run_id=run.id, provider_thread_id=pt.id,
                        provider=pt.provider, native_thread_id=pt.native_thread_id)
    return point, history[: upto + 1]


def fork_transfer_run_ids(store: Store, thread_id: str) -> list[str]:
    """The runs a fork inherited from its source (none for a thread that is no fork)."""
    transfer = fork_transfer(store, thread_id)
    return list(transfer.source_run_ids) if transfer is not None else []


def _checkpoint_run(store: Store, state: ThreadState, checkpoint_id: str) -> Run | None:
    """The run a checkpoint of this thread is the state after: its own run
    for a run's checkpoint; for a baseline (the state before run N), the
    newest run before N still in the conversation (None: before the first).

    Raises:
        NotFound: no such checkpoint in this thread.
        InvalidState: it holds no files, or is a restore's safety capture
            (no point of the conversation).
    """
    thread_id = state.thread_id
    checkpoint = store.get(Checkpoint, checkpoint_id)
    if checkpoint is None or checkpoint.thread_id != thread_id:
        raise NotFound(f"no checkpoint {checkpoint_id} in thread {thread_id}", checkpointId=checkpoint_id)
    if checkpoint.status != "captured":
        raise InvalidState(
            f"checkpoint {checkpoint_id} is {checkpoint.status}" + (f" ({checkpoint.reason})" if checkpoint.reason else "")
            + ": it is no stable point; fork from its run instead", checkpointId=checkpoint_id, status=checkpoint.status,
        )
    if checkpoint.kind == "pre_rollback" or checkpoint.run_id is None:
        raise InvalidState(
            f"checkpoint {checkpoint_id} is a restore's safety capture, not a point of the conversation; "
            "fork from a run's checkpoint", checkpointId=checkpoint_id,
        )
    if checkpoint.kind == "run":
        run = store.run(checkpoint.run_id)
        assert run is not None
        _check_run_stable(state, run)
        return run
    before = [run for run in store.thread_runs(thread_id) if run.ordinal <= checkpoint.ordinal and in_history(run)]
    return before[-1] if before else None


def _node_native_thread(node: ExecutionNode) -> str | None:
    """The native thread a (subagent) node ran in, when the provider said."""
    detail = node.detail
    for key in ("nativeThreadId", "threadId", "newThreadId"):
        value = detail.get(key)
        if isinstance(value, str) and value:
            return value
    receivers = detail.get("receiverThreadIds")
    if isinstance(receivers, list) and receivers and isinstance(receivers[0], str):
        return receivers[0]
    return None

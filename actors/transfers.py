"""Lineage in the thread actor: ``thread.fork`` and the context a run starts
with (SPEC F5, F6, F8).

- ``thread_fork`` (in the source thread's actor, which knows whether its
  active run is at a stable point): resolves the source point, and commits
  the fork's AppThread and a pending ``fork`` ContextTransfer — nothing else:
  no provider, session, provider thread or handoff.
- ``on_context_needed``: before any provider work of an attempt, the starter
  asks; this gathers a ``StartView`` from state and store, lets
  ``lineage.resolve_start_context`` decide, builds the handoff text from the
  stored graph (handoff.py), commits transfer and handoff, and answers with
  a ``StartPlan`` — or ends the run when the context is unsupported.

The reads that define a thread's conversation live here too:
``thread_history`` (a fork's starts with its source's runs, frozen at the
fork) and ``resolve_source`` (what a client's source point means now).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from agentd.protocol import wire
from agentd.protocol.errors import AgentdError, InternalError, InvalidState, NotFound
from agentd.store.db import Store, struct_copy
from agentd.store.ids import new_id
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
    to_wire,
)

from . import delegation, lineage
from .handoff import build_handoff
from .lineage import Limits, StartView, Target, in_history
from .messages import Command, ContextNeeded, StartPlan
from .state import ActiveRun, ThreadState

if TYPE_CHECKING:
    from .thread_actor import ThreadActor

log = logging.getLogger(__name__)



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


def _with_legacy_coverage(store: Store, pt: ProviderThread) -> ProviderThread:
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
        case wire.RunPoint(run_id=run_id):
            run = store.run(run_id)
            if run is None or run.thread_id != thread_id:
                raise NotFound(f"no run {run_id} in thread {thread_id}", runId=run_id)
            _check_run_stable(state, run)
            return run_point(store, "run", run), thread_history(store, thread_id, upto_ordinal=run.ordinal)
        case wire.NodePoint(node_id=node_id):
            node = store.get(ExecutionNode, node_id)
            if node is None or node.thread_id != thread_id:
                raise NotFound(f"no node {node_id} in thread {thread_id}", nodeId=node_id)
            if node.status != "completed":
                raise InvalidState(f"node {node_id} is {node.status}: only a completed node is a stable point", nodeId=node_id)
            run = store.run(node.run_id)
            assert run is not None
            _check_run_stable(state, run)
            point = run_point(store, "node", run, node_id=node.id)
            native = _node_native_thread(node)
            # The node's own provider thread, when it has one; else the run it ended in.
            if native is not None:
                # A native subagent's own thread backs a child thread (delegation.native_subagent):
                # its provider thread record makes the fork native.
                backing = delegation.subagent_provider_thread(store, thread_id, native)
                point = struct_copy(point, provider_thread_id=backing.id if backing else None, provider_turn_id=None,
                                    native_thread_id=native, native_turn_ref=None)
            return point, thread_history(store, thread_id, upto_ordinal=run.ordinal)
        case wire.ProviderThreadPoint(provider_thread_id=pt_id, provider_turn_id=turn_id):
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
            seen = set(_with_legacy_coverage(store, pt).covered_run_ids)
            upto = max((i for i, run_id in enumerate(history) if run_id in seen), default=None)
            if upto is None:
                raise InvalidState(f"provider thread {pt_id} has seen no run of this thread; there is nothing to fork",
                                   providerThreadId=pt_id)
            run = store.run(history[upto])
            assert run is not None
            point = SourcePoint(type="provider_thread", thread_id=thread_id, run_id=run.id, provider_thread_id=pt.id,
                                provider=pt.provider, native_thread_id=pt.native_thread_id)
            return point, history[: upto + 1]
        case wire.CheckpointPoint(checkpoint_id=checkpoint_id):
            run = _checkpoint_run(store, state, checkpoint_id)
            if run is None:  # a baseline before the thread's first run: an empty fork
                return SourcePoint(type="checkpoint", thread_id=thread_id, checkpoint_id=checkpoint_id,
                                   provider=state.thread.provider), list(fork_transfer_run_ids(store, thread_id))
            point = run_point(store, "checkpoint", run, checkpoint_id=checkpoint_id)
            return point, thread_history(store, thread_id, upto_ordinal=run.ordinal)
    raise AssertionError(f"unknown source point {spec!r}")  # pragma: no cover


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
        if isinstance(detail.get(key), str) and detail[key]:
            return detail[key]
    receivers = detail.get("receiverThreadIds")
    if isinstance(receivers, list) and receivers and isinstance(receivers[0], str):
        return receivers[0]
    return None


# -- thread.fork -----------------------------------------------------------------------------


async def thread_fork(actor: ThreadActor, command: Command) -> dict[str, Any]:
    """``thread.fork``: a new AppThread with fork lineage and a pending
    ``fork`` ContextTransfer from the source point — nothing else (SPEC F6)."""
    params: wire.ThreadForkParams = command.params
    state = actor.state
    source, history = resolve_source(actor.store, state, params.source_point)
    workspace = actor.registry.checked_workspace(params.workspace) or state.thread.workspace
    parent = state.thread
    title = params.title if params.title is not None else f"fork of {parent.title or parent.id}"
    thread = actor.registry.new_thread_record(
        title=title, provider=source.provider or parent.provider, workspace=workspace, parent=parent,
        relationship="fork", side_chat=params.side_chat, created_by=params.created_by,
    )
    batch = actor.batch()
    transfer = ContextTransfer(
        id=new_id("xfr"), type="fork", source_thread_id=parent.id, target_thread_id=thread.id, source_point=source,
        source_provider=source.provider, source_run_ids=history, reason="fork", created_by=params.created_by,
        created_at=batch.now,
    )
    batch.put_all(thread, transfer)
    batch.event("thread.created", thread_id=thread.id, at=batch.now, thread=to_wire(thread))
    batch.event("context_transfer.created", thread_id=thread.id, at=batch.now, transfer=to_wire(transfer))
    source_run = actor.store.get(Run, source.run_id) if source.run_id else None
    batch.emit("thread.forked", run_id=source.run_id,
               node_id=source.node_id or (source_run.root_node_id if source_run else None),
               forkThreadId=thread.id, transferId=transfer.id,
               sideChat=params.side_chat)
    result = {"threadId": thread.id, "transferId": transfer.id}
    batch.record_receipt(command.command_id, command.method, result)
    committed = await actor.commit(batch)
    return {**result, "seq": committed.seq}


# -- the context a run starts with -------------------------------------------------------------


def gather_view(actor: ThreadActor, active: ActiveRun, lost: tuple[str, str] | None) -> StartView:
    """What ``lineage.resolve_start_context`` needs, from state and store."""
    store = actor.store
    state = actor.state
    thread = state.thread
    run = active.run
    provider = run.provider
    adapter = actor.sessions.adapter(provider)
    target = Target(provider, adapter.kind, adapter.capabilities.native_fork,
                    lineage.provider_settings(actor.config.providers.get(provider)))
    transfers = store.thread_transfers(thread.id)
    # A pending transfer into the thread; a failed fork too (it resolves again, portably).
    # (Delegation transfers are taken in besides the thread's own context: delegation.take_inbox.)
    transfer = next((t for t in transfers if t.target_thread_id == thread.id and t.type not in ("provider_handoff", "merge_back")
                     and t.type not in delegation.INBOX_TYPES
                     and (t.status == "pending" or (t.type == "fork" and t.status == "failed"))), None)
    # A merge-back comes with its own message's run (a failed attempt's, again on the retry).
    merge = next((t for t in transfers if t.type == "merge_back" and t.target_thread_id == thread.id and t.run_id == run.id
                  and t.status in ("pending", "failed")), None)
    history = tuple(thread_history(store, thread.id, before_ordinal=run.ordinal))
    current = state.provider_thread
    backing: dict[str, ProviderThread] = {}
    for pt in store.thread_provider_threads(thread.id):
        backing[pt.provider] = pt  # oldest first: the newest per provider wins
    if current is not None and (current.provider not in backing or backing[current.provider].id == current.id):
        backing[current.provider] = current
    backing = {name: _with_legacy_coverage(store, pt) for name, pt in backing.items()}
    if current is not None and backing.get(current.provider, current).id == current.id:
        state.provider_thread = current = backing.get(current.provider, current)
    source_backing = None
    rolled_back: tuple[str, ...] = ()
    if transfer is not None and transfer.source_point.provider_thread_id:
        source_backing = store.get(ProviderThread, transfer.source_point.provider_thread_id)
        if source_backing is not None:
            source_backing = _with_legacy_coverage(store, source_backing)
        rolled_back = tuple(run.id for run in map(store.run, transfer.source_run_ids) if run and run.status == "rolled_back")
    previous = store.run(history[-1]) if history else None
    config = actor.config
    return StartView(
        thread_id=thread.id, run_id=run.id, target=target, history=history, backing=backing, current=current,
        transfer=transfer, source_backing=source_backing, source_rolled_back=rolled_back,
        previous_provider=previous.provider if previous else None,
        clean_context=run.clean_context, lost=lost,
        limits=Limits(max_bridges=config.handoff_max_bridges, max_runs_behind=config.handoff_max_runs_behind),
        merge=merge,
        workspace_moved=transfer is not None and _workspace_of(store, transfer.source_thread_id) != thread.workspace,
    )


def _workspace_of(store: Store, thread_id: str) -> str | None:
    source = store.thread(thread_id)
    return source.workspace if source is not None else None


async def on_context_needed(actor: ThreadActor, item: ContextNeeded) -> None:
    """Resolve the attempt's start context (``lineage.resolve_start_context``)
    and make it durable before any provider work; answer the starter — with
    an error if that fails, so the starter never waits for nothing."""
    try:
        await _resolve_context(actor, item)
    except Exception as exc:
        log.exception("thread %s: resolving the context of attempt %s failed", actor.thread_id, item.attempt_id)
        item.reply.fail(exc if isinstance(exc, AgentdError) else InternalError(f"resolving the run's context failed: {exc}"))


async def _resolve_context(actor: ThreadActor, item: ContextNeeded) -> None:
    from . import merge_back  # it reads fork points through this module

    state = actor.state
    active = state.active
    if active is None or not state.is_current(item.attempt_id):
        item.reply.set(None)
        return
    view = gather_view(actor, active, item.lost)
    ctx = lineage.resolve_start_context(view)
    batch = actor.batch()
    if ctx.kind == "unsupported":
        item.reply.set(None)
        batch.emit("run.context_resolved", run_id=active.run.id, node_id=active.root.id, kind=ctx.kind, reason=ctx.reason)
        for transfer in (ctx.transfer if ctx.transfer is not None and ctx.transfer.type != "fork" else None, ctx.merge):
            if transfer is not None:
                # Said once: the thread's next runs go on without it.
                failed = struct_copy(transfer, status="failed", error=f"context_unsupported: {ctx.reason}", run_id=active.run.id)
                batch.put(failed)
                batch.emit("context_transfer.failed", run_id=active.run.id, node_id=active.root.id, transfer=to_wire(failed))
        await actor.end_run(batch, "failed", reason=f"context_unsupported: {ctx.reason}")
        return
    merged = None
    if ctx.merge is not None:
        # Built now, from the graph as it is when the run starts (SPEC F7:
        # lazily); reading the fork's checkpoints awaits git, in the lock.
        merged = await merge_back.build(actor, ctx.merge)
    built = None
    if ctx.handoff is not None:
        built = build_handoff(actor.store, ctx.handoff.run_ids, strategy=ctx.handoff.strategy, reason=ctx.handoff.reason,
                              cap=actor.config.handoff_max_chars)
    context = lineage.record_start(batch, state, view, ctx, built)
    text = delegation.take_inbox(actor, batch, built.text if built is not None else None)
    if ctx.kind != "none" or ctx.retire is not None:
        batch.emit("run.context_resolved", run_id=active.run.id, node_id=active.root.id, kind=ctx.kind, reason=ctx.reason,
                   transferId=context.transfer.id if context.transfer else None,
                   handoffId=context.handoff.id if context.handoff else None)
    texts = [text] if text else []
    if merged is not None and ctx.merge is not None:
        found, merge_text, _files = merged
        handoff = lineage.record_merge(batch, state, ctx, ctx.merge, merge_text, base=found.base, run_ids=found.run_ids,
                                       target_provider=view.target.provider)
        batch.emit("run.context_resolved", run_id=active.run.id, node_id=active.root.id, kind="delta",
                   reason=ctx.merge.reason, transferId=ctx.merge.id, handoffId=handoff.id)
        texts.append(handoff.text)
    await actor.commit(batch)
    item.reply.set(StartPlan(
        resume=ctx.resume,
        fork_native_thread_id=ctx.native.native_thread_id if ctx.native else None,
        fork_turn_ref=ctx.native.turn_ref if ctx.native else None,
        context="\n\n".join(texts) if texts else None,
    ))

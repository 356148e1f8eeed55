"""Interrupt, Stop and the queue (SPEC F10).

Interrupt: agentd records ``run.interrupt_requested`` and asks the provider;
the run ends only when the provider reports the turn ended. A provider that
cannot interrupt has its session stopped instead; one that does not answer
within the grace period (or refuses) is escalated to a session stop.

Stop holds the thread's queue, interrupts the active run and then — after the
commit, outside this thread's lock, as the ``StopChildren`` effect
(executors.py) — sends ``thread.stop`` to every delegated child, depth-first,
each handled by the child's own actor. The cascade is an outbox entry, so a
restart before it finished runs it again.

Handlers (one per method): ``run_interrupt``, ``thread_stop``,
``queue_release``, ``queued_run_cancel``, ``queued_run_reorder``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentd.protocol.errors import InvalidParams, InvalidState
from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.records import ConversationMessage, Effect, ExecutionNode, MessageStatus, Run, RunAttempt, to_wire

from . import graph
from .context import ThreadContext
from agentd.protocol import results

from .effects import NO_SEQ, Commit, Decision, InterruptTurn, StartNext, StartTimer, StopChildren, StopSession, Transition
from .graph import ThreadBatch
from .messages import Command, InterruptOverdue
from .state import ActiveRun, ThreadState

#: relationships of child threads that belong to (and stop with) their parent
DELEGATED = frozenset({"delegated_task", "subagent"})


@dataclass(frozen=True)
class InternalStop:
    """``thread.stop`` sent by a parent's Stop to a delegated child."""

    thread_id: str


# -- transitions ------------------------------------------------------------------------


def hold_queue(batch: ThreadBatch, state: ThreadState) -> None:
    """Keep the runs queued now from starting until ``thread.queue.release``;
    runs sent later are not held."""
    held = [run_id for run_id in state.thread.held_run_ids if state.queued_run(run_id) is not None]
    newly = [r.id for r in state.queued if r.id not in held]
    if state.thread.queue_held and not newly:
        return
    graph.set_thread(batch, state, queue_held=True, held_run_ids=held + newly)
    batch.emit("thread.queue_held", queuedRunIds=[r.id for r in state.queued])


def release_queue(batch: ThreadBatch, state: ThreadState) -> None:
    """Let queued runs start again."""
    graph.set_thread(batch, state, queue_held=False, held_run_ids=[])
    batch.emit("thread.queue_released", queuedRunIds=[r.id for r in state.queued])


def enqueue(
    batch: ThreadBatch, state: ThreadState, text: str, provider: str, *, dispatch_mode: str,
    message: ConversationMessage | None = None, clean_context: bool = False, root_of: graph.RootOf = graph.no_root,
    created_by: str = "user",
) -> tuple[Run, ConversationMessage]:
    """A new run (``graph.new_run``) in the queue: last, but before the runs
    a Stop holds, which move up one ordinal (ordinals stay the order runs
    start in)."""
    held = state.held_runs()
    if not held:
        run, message = graph.new_run(batch, state, text, provider, dispatch_mode=dispatch_mode, message=message,
                                     clean_context=clean_context, created_by=created_by)
        state.queued.append(run)
        return run, message
    place = state.queued.index(held[0])
    ordinal = held[0].ordinal
    for index in range(place, len(state.queued)):
        state.queued[index] = graph.renumber(batch, state.queued[index], state.queued[index].ordinal + 1, root_of)
    run, message = graph.new_run(batch, state, text, provider, dispatch_mode=dispatch_mode, message=message,
                                 ordinal=ordinal, clean_context=clean_context, created_by=created_by)
    state.queued.insert(place, run)
    return run, message


def drop_wakeups(ctx: ThreadContext, batch: ThreadBatch, reason: str) -> None:
    """A Stop drops the wake-ups the thread's delegated tasks still owe
    (SPEC F9, F10: nothing automatic restarts a stopped thread): the tasks
    still working will wake no one (their results, when they come, end
    ``superseded``), and a wake-up run that has not started is cancelled
    (its result transfer ``superseded`` with it)."""
    state = ctx.state
    waking = list(state.thread.wake_task_ids)
    wake_runs = [run for run in state.queued if run.created_by == "system"]
    for run in wake_runs:
        cancel_queued_run(ctx, batch, run, reason)
    if waking:
        graph.set_thread(batch, state, wake_task_ids=[])
    if waking or wake_runs:
        batch.emit("task.wake_dropped", taskIds=waking, cancelledRunIds=[r.id for r in wake_runs], reason=reason)


def stop_cascade_effect(batch: ThreadBatch, state: ThreadState) -> Effect:
    """The outbox entry for stopping delegated children: replay-safe, so a
    restart before it finished runs it again."""
    effect = Effect(id=new_id("eff"), kind="thread.stop_children", thread_id=state.thread_id,
                    payload={"threadId": state.thread_id}, replay_safe=True, created_at=batch.now)
    batch.put(effect)
    return effect


def drop_pending_restart(batch: ThreadBatch, active: ActiveRun) -> None:
    """An explicit interrupt or Stop wins over a steer still waiting to
    restart the run: the run ends; a same-run steering message is kept
    (``not_sent``) for the person to re-send. A superseding run already
    waits in the queue and starts unless the queue is held."""
    pending = active.pending_restart
    if pending is None:
        return
    active.pending_restart = None
    if pending.superseding_run_id is None:
        batch.put(struct_copy(pending.message, status="not_sent"))
        batch.emit("message.not_sent", run_id=active.run.id, node_id=active.root.id, messageId=pending.message.id,
                   reason="the run was interrupted before the steer could restart it")


def request_interrupt_event(batch: ThreadBatch, active: ActiveRun, *, hold_queue: bool) -> None:
    """``run.interrupt_requested`` for the active run (a pending steer restart is dropped)."""
    drop_pending_restart(batch, active)
    batch.emit("run.interrupt_requested", run_id=active.run.id, node_id=active.root.id, holdQueue=hold_queue)


def cancel_queued(
    batch: ThreadBatch, state: ThreadState, run: Run, reason: str, *, attempt: RunAttempt | None,
    root: ExecutionNode | None, message: ConversationMessage | None, turn_start_effect: Effect | None,
    message_status: MessageStatus | None = "cancelled",
) -> None:
    """Take a queued run out of the queue and cancel it with its attempt and
    root node; its message becomes ``message_status`` (None: left as it is)."""
    now = batch.now
    state.queued.remove(run)
    if run.id in state.thread.held_run_ids:
        graph.set_thread(batch, state, held_run_ids=[i for i in state.thread.held_run_ids if i != run.id])
    run = struct_copy(run, status="cancelled", reason=reason, ended_at=now)
    if attempt is not None:
        batch.put(struct_copy(attempt, status="cancelled", error=reason, ended_at=now))
    if root is not None:
        batch.put(struct_copy(root, status="cancelled", summary=reason, ended_at=now))
    if message is not None and message_status is not None:
        batch.put(struct_copy(message, status=message_status))
    graph.settle_effect(batch, turn_start_effect, "retired", reason=reason)
    batch.put(run)
    batch.emit("run.cancelled", run_id=run.id, node_id=run.root_node_id, run=to_wire(run))


def reorder_queue(batch: ThreadBatch, state: ThreadState, run_ids: list[str], root_of: graph.RootOf = graph.no_root) -> None:
    """Put the queued runs in the order of ``run_ids`` (exactly the queued runs)."""
    current = {run.id: run for run in state.queued}
    if sorted(run_ids) != sorted(current):
        raise InvalidParams(
            f"runIds must list exactly the queued runs of thread {state.thread_id}: {', '.join(current) or 'none'}",
            field="runIds",
        )
    ordered = [current[run_id] for run_id in run_ids]
    # Held runs stay behind the runs that may start: a run sent after a Stop
    # is not kept waiting by the runs the Stop holds.
    state.queued = [r for r in ordered if not state.is_held(r)] + [r for r in ordered if state.is_held(r)]
    graph.renumber_queue(batch, state, root_of)
    batch.emit("thread.queue_reordered", queuedRunIds=[r.id for r in state.queued])


# -- interrupting the provider ----------------------------------------------------------


def request_interrupt(ctx: ThreadContext, active: ActiveRun, reason: str) -> list[Any]:
    """Ask for the active turn to end; ``reason`` is what an interrupted run
    records. The effects that ask the provider."""
    active.interrupt_requested = True
    active.interrupt_reason = reason
    return send_interrupt(ctx, active)


def send_interrupt(ctx: ThreadContext, active: ActiveRun) -> list[Any]:
    """The effects that ask the provider to interrupt the running turn
    (once it has started): its native interrupt with a grace timer, or a
    session stop when it has none."""
    if active.interrupt_sent or active.provider_turn is None:
        return []
    capabilities = ctx.adapter(active.run.provider).capabilities
    live = ctx.live_session_id()
    overdue = StartTimer(InterruptOverdue(active.attempt.id), ctx.config.interrupt_grace)
    if capabilities.interrupt and live is not None and not active.attempt.provider_thread_id:
        # A first turn whose runtime has not named its new thread yet (it
        # may only with the turn's end): asked again once it has
        # (starting.on_provider_thread_ready); the grace runs from now.
        return [overdue]
    active.interrupt_sent = True
    if not capabilities.interrupt or live is None:
        reason = "interrupt_unsupported" if not capabilities.interrupt else "interrupt_no_session"
        return [StopSession(reason)]
    provider_thread = ctx.state.provider_thread
    assert provider_thread is not None, "a turn started without a provider thread"
    return [overdue, InterruptTurn(active.attempt.id, provider_thread.native_thread_id, active.provider_turn.native_turn_id)]


def on_interrupt_overdue(ctx: ThreadContext, attempt_id: str) -> Decision | None:
    """The interrupt's grace period passed with the turn still running."""
    grace = ctx.config.interrupt_grace
    return escalate_interrupt(ctx, attempt_id, f"the provider did not end the turn within {grace:g}s of the interrupt")


def escalate_interrupt(ctx: ThreadContext, attempt_id: str, why: str) -> Decision | None:
    """The interrupt of ``attempt_id`` did not work: stop its provider session."""
    active = ctx.state.active
    if active is None or active.attempt.id != attempt_id:
        return None
    batch = ctx.batch()
    batch.emit("runtime.warning", run_id=active.run.id, node_id=active.root.id,
               message=f"{why}; stopping the provider session")
    return Decision(batch, effects=[StopSession("interrupt_escalated")])


# -- the Stop cascade -------------------------------------------------------------------


def on_cascade_done(ctx: ThreadContext, effect_id: str) -> Decision:
    """The Stop cascade finished: its outbox entry is done."""
    batch = ctx.batch()
    graph.settle_effect(batch, ctx.store.get(Effect, effect_id), "done")
    return Decision(batch if batch else None)


# -- handlers ---------------------------------------------------------------------------


def run_interrupt(ctx: ThreadContext, command: Command) -> Decision:
    """``run.interrupt``: interrupt the active run, and with ``holdQueue``
    hold the queue and stop delegated children as Stop does."""
    params = command.params
    state = ctx.state
    active = state.active
    is_active = active is not None and active.run.id == params.run_id
    if not is_active:
        run = ctx.thread_run(params.run_id)
        if not params.hold_queue:
            hint = "cancel it with queued-run.cancel" if run.status == "queued" else "it has already ended"
            raise InvalidState(f"run {run.id} is {run.status}, not running: {hint}", runId=run.id, status=run.status)
    batch = ctx.batch()
    after: list[Any] = []
    if params.hold_queue:
        drop_wakeups(ctx, batch, "stopped: the run was interrupted with holdQueue (run.interrupt)")
        hold_queue(batch, state)
        after.append(StopChildren(stop_cascade_effect(batch, state).id))
    if is_active:
        assert active is not None
        request_interrupt_event(batch, active, hold_queue=params.hold_queue)
        after[:0] = request_interrupt(ctx, active, "interrupted")
    result = results.RunInterruptResult(run_id=params.run_id, interrupt_requested=is_active,
                                        queue_held=state.thread.queue_held, seq=NO_SEQ)
    batch.record_receipt(command.command_id, command.method, result)
    return Decision(batch, result, after)


def thread_stop(ctx: ThreadContext, command: Command) -> Decision:
    """``thread.stop``, the Stop button: hold the queue, interrupt the active
    run, then stop delegated children (only from the thread the person
    stopped; an ``InternalStop`` does not walk the tree again)."""
    state = ctx.state
    batch = ctx.batch()
    drop_wakeups(ctx, batch, "stopped: the thread was stopped (thread.stop)")
    hold_queue(batch, state)
    active = state.active
    after: list[Any] = []
    if active is not None:
        request_interrupt_event(batch, active, hold_queue=True)
        after = request_interrupt(ctx, active, "stopped")
    result = results.ThreadStopResult(thread_id=state.thread_id, interrupted_run_id=active.run.id if active else None,
                                      queue_held=True, seq=NO_SEQ)
    cascade = stop_cascade_effect(batch, state)
    batch.record_receipt(command.command_id, command.method, result)
    if not isinstance(command.params, InternalStop):
        after.append(StopChildren(cascade.id))
    return Decision(batch, result, after)


#: run statuses a person may retry (``run.retry``)
RETRYABLE = ("failed", "interrupted")


def run_retry(ctx: ThreadContext, command: Command) -> Decision:
    """``run.retry``: a new attempt (reason ``retry``) of the thread's latest
    run when it failed or was interrupted and nothing else is active or
    waiting to start; the attempt starts at once, on the run's message."""
    params = command.params
    state = ctx.state
    run = ctx.thread_run(params.run_id)
    if run.status not in RETRYABLE:
        hint = "it is still going" if run.status in ("queued", "running", "waiting") else "only a failed or interrupted run is"
        raise InvalidState(f"run {run.id} is {run.status}: {hint} retried", runId=run.id, status=run.status)
    busy = state.active.run if state.active is not None else state.next_queued()
    if busy is not None:
        raise InvalidState(f"thread {state.thread_id} has run {busy.id} {busy.status}: retry once it has ended",
                           runId=busy.id, status=busy.status)
    latest = max((r for r in ctx.store.thread_runs(state.thread_id) if r.status != "rolled_back"),
                 key=lambda r: r.ordinal, default=None)
    if latest is not None and latest.id != run.id:
        raise InvalidState(f"run {run.id} is not the thread's latest (run {latest.ordinal}, {latest.id}, is): "
                           "only the latest run is retried; send its message again instead",
                           runId=run.id, latestRunId=latest.id)
    batch = ctx.batch()
    queued = graph.retry_ended(batch, state, run, why=f"retried by the user after it was {run.status}")
    assert queued.selected_attempt_id is not None
    result = results.RunRetryResult(run_id=queued.id, attempt_id=queued.selected_attempt_id,
                                    attempt_number=queued.attempt_count, seq=NO_SEQ)
    batch.record_receipt(command.command_id, command.method, result)
    return Decision(batch, result, [StartNext()])


def task_cancel(ctx: ThreadContext, command: Command) -> Decision:
    """``task.cancel``, in the delegated task's own actor (SPEC F9, F10): the
    task's queued runs are cancelled, its running one interrupted (it ends
    ``interrupted`` when the provider says so), and — after the commit — its
    own delegated tasks are stopped, depth-first, as a Stop does."""
    state = ctx.state
    batch = ctx.batch()
    drop_wakeups(ctx, batch, "stopped: the task was cancelled (task.cancel)")
    cancelled = list(state.queued)
    for run in cancelled:
        cancel_queued_run(ctx, batch, run, "task_cancelled: the agent that delegated it cancelled it")
    active = state.active
    after: list[Any] = []
    if active is not None:
        request_interrupt_event(batch, active, hold_queue=False)
        after = request_interrupt(ctx, active, "task_cancelled")
    after.append(StopChildren(stop_cascade_effect(batch, state).id))
    result = results.TaskCancelResult(task_id=state.thread_id, interrupted_run_id=active.run.id if active else None,
                                      cancelled_run_ids=[r.id for r in cancelled], seq=NO_SEQ)
    batch.record_receipt(command.command_id, command.method, result)
    return Decision(batch, result, after)


def queue_release(ctx: ThreadContext, command: Command) -> Transition:
    """``thread.queue.release``: let queued runs start again; the answer
    names the runs still waiting once the next one started."""
    state = ctx.state
    if not state.thread.queue_held:
        raise InvalidState(f"the queue of thread {state.thread_id} is not held")
    batch = ctx.batch()
    release_queue(batch, state)
    committed = yield Commit(batch)
    yield StartNext()
    return results.QueueReleaseResult(thread_id=state.thread_id, queued_run_ids=[r.id for r in state.queued],
                                      seq=committed.seq)


def root_of(ctx: ThreadContext) -> graph.RootOf:
    """The store's root nodes, for renumbering queued runs."""
    return lambda node_id: ctx.store.get(ExecutionNode, node_id) if node_id else None


def queued_run_of(ctx: ThreadContext, run_id: str) -> Run:
    """The queued run ``run_id`` of the thread (InvalidState if it is not queued)."""
    run = ctx.state.queued_run(run_id)
    if run is not None:
        return run
    run = ctx.thread_run(run_id)
    active = ctx.state.active
    hint = "interrupt it with run.interrupt" if active and active.run.id == run_id else "it is not waiting in the queue"
    raise InvalidState(f"run {run.id} is {run.status}, not queued: {hint}", runId=run.id, status=run.status)


def cancel_queued_run(
    ctx: ThreadContext, batch: ThreadBatch, run: Run, reason: str, *, message_status: MessageStatus | None = "cancelled",
    supersede: bool = True,
) -> None:
    """``cancel_queued`` with the run's records read from the store; the
    transfers bound to the run end ``superseded`` unless ``supersede`` is
    false (the caller settles them itself)."""
    store = ctx.store
    cancel_queued(
        batch, ctx.state, run, reason,
        attempt=store.get(RunAttempt, run.selected_attempt_id) if run.selected_attempt_id else None,
        root=store.get(ExecutionNode, run.root_node_id) if run.root_node_id else None,
        message=store.get(ConversationMessage, run.user_message_id) if run.user_message_id else None,
        turn_start_effect=store.get(Effect, graph.turn_start_effect_id(run.id)), message_status=message_status,
    )
    if supersede:
        graph.supersede_transfers(batch, store.thread_transfers(ctx.thread_id), {run.id},
                                  f"its run {run.id} was cancelled ({reason}) before it started")


def queued_run_cancel(ctx: ThreadContext, command: Command) -> Decision:
    """``queued-run.cancel``: a run that has not started never will."""
    run = queued_run_of(ctx, command.params.run_id)
    batch = ctx.batch()
    cancel_queued_run(ctx, batch, run, "cancelled_by_user")
    return Decision(batch, results.QueuedRunCancelResult(run_id=run.id, status="cancelled", seq=NO_SEQ))


def queued_run_reorder(ctx: ThreadContext, command: Command) -> Decision:
    """``queued-run.reorder``: the queued runs start in the order given."""
    batch = ctx.batch()
    reorder_queue(batch, ctx.state, list(command.params.run_ids), root_of(ctx))
    return Decision(batch, results.QueueReorderResult(queued_run_ids=[r.id for r in ctx.state.queued], seq=NO_SEQ))

"""The end of an attempt: the completion barrier, and a retry (SPEC F2,
F11, F13, F16).

``end_run`` passes the completion barrier (``graph.end_run``) in the batch
it is given: the attempt's open child scopes and the run's own checkpoint are
captured first — git, as effects the actor awaits in the thread's lock, after
the provider's streams drained and before ``run.<status>`` is committed —
then the run ends, a delegated task's result goes into the same batch, and
the thread is free for its next queued run. ``retry`` closes the attempt and
starts attempt N+1 of the same run.
"""

from __future__ import annotations

from agentd.store.records import ConversationMessage, Effect

from . import checkpointing, child_checkpoints, delegation, graph, lineage
from .context import ThreadContext
from .effects import Activate, Commit, MarkBusy, StartNext, StopAttemptTasks, TaskEnded, Transition, WakeParent
from .graph import Ending, ThreadBatch


def end_run(ctx: ThreadContext, batch: ThreadBatch, status: Ending, *, reason: str | None) -> Transition:
    """Pass the completion barrier in ``batch``, commit it, then free the
    thread for the next queued run."""
    state = ctx.state
    active = state.active
    assert active is not None
    yield StopAttemptTasks(active.attempt.id)
    lineage.attempt_closing(batch, state, reason)
    # The run's checkpoint (SPEC F13): mailbox items wait meanwhile, as they
    # wait for any transition.
    yield from child_checkpoints.capture_open_children(ctx, active)
    checkpoint = yield from checkpointing.capture_run(ctx, active)
    if checkpoint is not None:
        checkpoint = (child_checkpoints.with_children(ctx.store, checkpoint[0]), checkpoint[1])
    graph.end_run(
        batch, state, status, reason=reason, artifacts=ctx.store.run_artifacts(active.run.id),
        turn_start_effect=ctx.store.get(Effect, graph.turn_start_effect_id(active.run.id)),
        checkpoint=checkpoint,
    )
    # A delegated task's result is durable with its run's end (SPEC F9).
    task_ended = delegation.result_on_run_end(ctx, batch, active.run)
    yield Commit(batch)
    state.active = None
    yield MarkBusy(False)
    if task_ended:
        yield TaskEnded()
        task = state.thread
        if task.wakes_parent and task.parent_thread_id is not None:
            yield WakeParent(task.parent_thread_id, task.id, delegation.result_transfer_id(active.run.id))
        yield from delegation.release_task_session(ctx)
    yield StartNext()


def retry(
    ctx: ThreadContext, batch: ThreadBatch, reason: str, why: str, *, closing_status: Ending = "failed",
    message: ConversationMessage | None = None,
) -> Transition:
    """Close the active attempt and start attempt N+1 (``graph.retry``)."""
    active = ctx.state.active
    assert active is not None
    yield StopAttemptTasks(active.attempt.id)
    lineage.attempt_closing(batch, ctx.state, why)
    yield from child_checkpoints.capture_open_children(ctx, active)
    next_attempt = graph.retry(
        batch, ctx.state, reason, why, artifacts=ctx.store.run_artifacts(active.run.id),
        closing_status=closing_status, message=message,
    )
    yield Commit(batch)
    yield Activate(next_attempt)

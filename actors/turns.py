"""The provider's events of a running turn, and how an attempt ends (SPEC
F2, F11, F16, F19).

Each function is the transition of one provider event: it reads what it
needs, builds the batch (graph.py) and decides what follows the commit
(interrupt a turn that began after an interrupt was asked, flush text, start
what comes next). Events of an attempt that is no longer active never get here.
"""

from __future__ import annotations

from typing import Any

from agentd.store.db import struct_copy
from agentd.store.records import Effect
from agentd.store.writer import full_disk_note

from . import artifacts, child_checkpoints, delegation, graph, lineage, run_control, steering
from .context import ThreadContext
from .effects import AllowRecovery, CancelTimer, Commit, Decision, PublishDelta, StartTimer, Transition
from .ending import end_run, retry
from .graph import Ending, ThreadBatch
from .messages import FlushTimer
from .providers.base import ItemCompleted, ItemStarted, RuntimeWarning_, SessionExited, TextDelta, TurnCompleted, TurnStarted
from .state import ActiveRun, OpenMessage

#: How long streamed text may wait in memory before it is durable, and how
#: much of it. Every delta is published at once (ephemeral); only its synced
#: write waits, and a synced commit costs ~85 KB of disk writes whatever it
#: holds (LMDB's copy-on-write pages and meta page, the file system's own),
#: so text is written when its message ends, with any other write of the
#: thread (``pending_text_first``), at TEXT_FLUSH_BYTES, and — for a slow
#: stream — TEXT_FLUSH_INTERVAL after the first delta not yet durable. A
#: crash loses at most that tail: the message ends ``interrupted`` with the
#: text that was durable (seed 003: an answer cut by a crash is incomplete;
#: nothing committed is lost). At 200 deltas of 20 bytes a second this is
#: one text commit per 30 s instead of 20 a second. The bytes bound keeps
#: the commit at the message's end small (a synced commit's time grows with
#: its size) and a burst's commits few: each one costs ~85 KB of disk writes
#: besides its text, so a 1 MiB answer streamed at once takes 4 text commits
#: at 256 KiB (16 at 64 KiB).
TEXT_FLUSH_INTERVAL = 30.0
TEXT_FLUSH_BYTES = 256 * 1024


def _active(ctx: ThreadContext) -> ActiveRun:
    active = ctx.state.active
    assert active is not None, "the actor routes attempt events only while the attempt is active"
    return active


def on_turn_started(ctx: ThreadContext, event: TurnStarted) -> Decision:
    """The provider began the attempt's turn (``graph.turn_started``)."""
    active = _active(ctx)
    batch = ctx.batch()
    effect = ctx.store.get(Effect, graph.turn_start_effect_id(active.run.id))
    graph.turn_started(batch, ctx.state, event, turn_start_effect=effect)
    lineage.turn_started(batch, ctx.state)
    delegation.inbox_consumed(batch, ctx.state)
    # Asked before the provider had a turn to interrupt: ask now.
    after = run_control.send_interrupt(ctx, active) if active.interrupt_requested else []
    return Decision(batch, effects=after)


def on_item_started(ctx: ThreadContext, event: ItemStarted) -> Decision:
    """A provider item began: a node, or an assistant message to stream."""
    batch = ctx.batch()
    graph.item_started(batch, ctx.state, event)
    return Decision(batch)


def on_item_completed(ctx: ThreadContext, event: ItemCompleted) -> Transition:
    """A provider item ended; a finished ``plan`` item is proposed as a plan."""
    batch = ctx.batch()
    node = graph.item_completed(batch, ctx.state, event)
    if node is not None and node.kind == "plan":
        artifacts.propose_plan(batch, ctx.state, node)
    if node is not None and node.kind == "subagent":
        delegation.native_subagent(ctx, batch, node)
    if child_checkpoints.is_checkpointable(node):
        # The child ended: its scope's checkpoint, committed with its end.
        assert node is not None
        yield from child_checkpoints.capture_child(ctx, _active(ctx), node, batch)
    if event.item_type == "agent_message" and all(e.type in _MESSAGE_CLOSE for e in batch.events):
        # An answer's close rides with the next commit (the next item's
        # start, the run's end): a crash before it ends the message
        # ``interrupted`` with its durable text, as for a streaming tail
        # (seed 003), and no client saw the close before it was written.
        return Decision(batch if batch else None, lazy=True)
    return Decision(batch if batch else None)


#: the events of a message's close alone
_MESSAGE_CLOSE = frozenset({"message.appended", "message.completed"})


def on_runtime_warning(ctx: ThreadContext, event: RuntimeWarning_) -> Decision:
    """Something the person should know about the runtime (kept in the log)."""
    batch = ctx.batch()
    active = ctx.state.active
    batch.emit("runtime.warning", run_id=active.run.id if active else None, node_id=active.root.id if active else None,
               message=event.message)
    return Decision(batch)


# -- streamed text ------------------------------------------------------------------


def on_text_delta(ctx: ThreadContext, event: TextDelta) -> Transition | Decision:
    """Publish a delta at once (ephemeral) and buffer it for a coalesced
    write. The common case — the message is open, the buffer not full — is a
    plain Decision: this runs for every token a model streams."""
    active = _active(ctx)
    open_message = active.messages.get(event.item_id)
    if open_message is None or open_message.pending_len + len(event.delta) >= TEXT_FLUSH_BYTES:
        return _delta_that_writes(ctx, event)
    return Decision(effects=_buffered(active, open_message, event.delta))


#: the flush timer of buffered text (one instance, as every delta asks for
#: it; TEXT_FLUSH_INTERVAL is read here, once)
_START_FLUSH_TIMER = StartTimer(FlushTimer(), TEXT_FLUSH_INTERVAL)


def _buffered(active: ActiveRun, open_message: OpenMessage, delta: str) -> list[Any]:
    """Buffer ``delta``: its ``message.delta`` to publish, and the flush
    timer (started by the first delta not yet durable; a pending one is kept)."""
    offset = open_message.buffer(delta)
    record = open_message.record
    return [PublishDelta(active.run.id, record.node_id, record.id, offset, delta), _START_FLUSH_TIMER]


def _delta_that_writes(ctx: ThreadContext, event: TextDelta) -> Transition:
    """A delta that opens its message (it came before its item) or fills
    the buffer (written at once)."""
    active = _active(ctx)
    open_message = active.messages.get(event.item_id)
    if open_message is None:
        # A delta before its item: open the message implicitly.
        opened = on_item_started(ctx, ItemStarted(attempt_id=event.attempt_id, item_id=event.item_id, item_type="agent_message"))
        assert opened.batch is not None
        yield Commit(opened.batch)
        open_message = active.messages[event.item_id]
    publish, timer = _buffered(active, open_message, event.delta)
    yield publish
    if open_message.pending_len >= TEXT_FLUSH_BYTES:
        return (yield from flush_text(ctx))
    yield timer
    return None


def pending_text_first(ctx: ThreadContext, batch: ThreadBatch) -> None:
    """Put the text streamed so far ahead of ``batch``'s own writes: a
    durable event (a tool that starts, an approval, a command's answer) is
    never ahead of the text the provider streamed before it, so a client
    that replays the log sees them in the order they happened."""
    active = ctx.state.active
    if active is None or not any(message.pending for message in active.messages.values()):
        return
    text = ctx.batch()
    graph.flush_text(text, ctx.state)
    batch.prepend(text)


def flush_text(ctx: ThreadContext) -> Transition:
    """Write the buffered text of every open message."""
    yield CancelTimer(FlushTimer())
    batch = ctx.batch()
    graph.flush_text(batch, ctx.state)
    return Decision(batch if batch else None)


# -- the end of an attempt ----------------------------------------------------------


def on_turn_completed(ctx: ThreadContext, event: TurnCompleted) -> Transition:
    """The provider ended the turn: apply a pending steer restart, else end the run."""
    active = _active(ctx)
    batch = ctx.batch()
    if event.end_ref is not None and active.provider_turn is not None:
        active.provider_turn = struct_copy(active.provider_turn, native_end_ref=event.end_ref)
    lineage.turn_completed(batch, ctx.state)
    if active.pending_restart is not None:
        yield from steering.apply_restart(ctx, active, batch)
        return
    status: Ending = event.status if event.status in ("completed", "failed", "interrupted") else "failed"  # type: ignore[assignment]
    reason = None
    if status == "failed":
        reason = f"provider_error: {event.error}" if event.error else "provider_error"
    elif status == "interrupted":
        reason = active.interrupt_reason if active.interrupt_requested else "interrupted_by_provider"
    yield from end_run(ctx, batch, status, reason=reason)


def on_session_exited(ctx: ThreadContext, event: SessionExited) -> Transition:
    """SPEC F11/F19: a requested stop interrupts the run; a crash before any
    side effect is recovered by a new attempt on a new runtime (as the
    session host's recovery policy allows); otherwise the run fails with the
    reason."""
    batch = ctx.batch()
    active = ctx.state.active
    if active is None or active.session_id != event.session_id:
        return  # not the session this attempt runs on (or it has none yet)
    graph.requests_not_resumable(batch, active, f"the provider session ended ({event.reason or 'exited'})")
    if active.pending_restart is not None:
        yield from steering.apply_restart(ctx, active, batch)
        return
    if event.requested:
        status = ctx.config.unsupported_interrupt_status if event.reason == "interrupt_unsupported" else "interrupted"
        reason = active.interrupt_reason if active.interrupt_requested else event.reason or "provider_stopped"
        yield from end_run(ctx, batch, status, reason=reason)
        return
    how = f"exit code {event.exit_code}" if event.exit_code is not None else f"signal {event.signal}"
    crashed = f"provider_crashed: the provider process ended unexpectedly ({how})"
    full = full_disk_note(str(ctx.store.path))
    if full is not None:
        # A runtime that cannot write its own files dies again on a new
        # start: no retry, and the reason names the disk, not the crash.
        yield from end_run(ctx, batch, "failed", reason=f"{crashed}; {full}")
        return
    if active.nodes or active.interrupt_requested:
        # A tool may have touched the world: re-running could repeat it.
        yield from end_run(ctx, batch, "failed", reason=crashed)
        return
    decision = yield AllowRecovery(how)
    if decision.retry:
        yield from retry(ctx, batch, "provider_recovery", crashed)
        return
    reason = decision.reason or "provider_crash_loop"
    graph.provider_thread_failed(batch, ctx.state, reason)
    yield from end_run(ctx, batch, "failed", reason=reason)

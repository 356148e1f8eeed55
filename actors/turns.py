"""The provider's events of a running turn, and how an attempt ends (SPEC
F2, F11, F16, F19).

Each function handles one provider event in the thread's actor: read what the
transition needs, build the batch (graph.py), commit, then act (interrupt a
turn that began after an interrupt was asked, flush text, start what comes
next). Events of an attempt that is no longer active never get here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentd.store.db import struct_copy
from agentd.store.writer import full_disk_note
from agentd.store.records import Effect

from . import artifacts, child_checkpoints, delegation, graph, lineage, run_control, steering
from .messages import FlushTimer
from .providers.base import ItemCompleted, ItemStarted, RuntimeWarning_, SessionExited, TextDelta, TurnCompleted, TurnStarted
from .state import ActiveRun

if TYPE_CHECKING:
    from .thread_actor import ThreadActor

TEXT_FLUSH_INTERVAL = 0.05  # seconds a delta may wait before it is durable
TEXT_FLUSH_BYTES = 64 * 1024


def _active(actor: ThreadActor) -> ActiveRun:
    active = actor.state.active
    assert active is not None, "the actor routes attempt events only while the attempt is active"
    return active


async def on_turn_started(actor: ThreadActor, event: TurnStarted) -> None:
    """The provider began the attempt's turn (``graph.turn_started``)."""
    active = _active(actor)
    batch = actor.batch()
    effect = actor.store.get(Effect, graph.turn_start_effect_id(active.run.id))
    graph.turn_started(batch, actor.state, event, turn_start_effect=effect)
    lineage.turn_started(batch, actor.state)
    delegation.inbox_consumed(batch, actor.state)
    await actor.commit(batch)
    if active.interrupt_requested:
        # Asked before the provider had a turn to interrupt.
        run_control.send_interrupt(actor, active)


async def on_item_started(actor: ThreadActor, event: ItemStarted) -> None:
    """A provider item began: a node, or an assistant message to stream."""
    batch = actor.batch()
    graph.item_started(batch, actor.state, event)
    await actor.commit(batch)


async def on_item_completed(actor: ThreadActor, event: ItemCompleted) -> None:
    """A provider item ended; a finished ``plan`` item is proposed as a plan."""
    batch = actor.batch()
    node = graph.item_completed(batch, actor.state, event)
    if node is not None and node.kind == "plan":
        artifacts.propose_plan(batch, actor.state, node)
    if node is not None and node.kind == "subagent":
        delegation.native_subagent(actor, batch, node)
    if child_checkpoints.is_checkpointable(node):
        # The child ended: its scope's checkpoint, committed with its end.
        await child_checkpoints.capture_child(actor, _active(actor), node, batch)
    if batch:
        await actor.commit(batch)


async def on_runtime_warning(actor: ThreadActor, event: RuntimeWarning_) -> None:
    """Something the person should know about the runtime (kept in the log)."""
    batch = actor.batch()
    active = actor.state.active
    batch.emit("runtime.warning", run_id=active.run.id if active else None, node_id=active.root.id if active else None,
               message=event.message)
    await actor.commit(batch)


# -- streamed text ------------------------------------------------------------------


async def on_text_delta(actor: ThreadActor, event: TextDelta) -> None:
    """Publish a delta at once (ephemeral) and buffer it for a coalesced write."""
    active = _active(actor)
    open_message = active.messages.get(event.item_id)
    if open_message is None:
        # A delta before its item: open the message implicitly.
        await on_item_started(actor, ItemStarted(attempt_id=event.attempt_id, item_id=event.item_id, item_type="agent_message"))
        open_message = active.messages[event.item_id]
    offset = open_message.buffer(event.delta)
    record = open_message.record
    actor.hub.publish_ephemeral(
        "message.delta", thread_id=actor.thread_id, run_id=active.run.id, node_id=record.node_id, at=actor.now(),
        messageId=record.id, offset=offset, text=event.delta,
    )
    if open_message.pending_len >= TEXT_FLUSH_BYTES:
        await flush_text(actor)
    else:
        actor.start_timer(FlushTimer(), TEXT_FLUSH_INTERVAL)


async def flush_text(actor: ThreadActor) -> None:
    """Write the buffered text of every open message."""
    actor.cancel_timer(FlushTimer())
    batch = actor.batch()
    graph.flush_text(batch, actor.state)
    if batch:
        await actor.commit(batch)


# -- the end of an attempt ----------------------------------------------------------


async def on_turn_completed(actor: ThreadActor, event: TurnCompleted) -> None:
    """The provider ended the turn: apply a pending steer restart, else end the run."""
    active = _active(actor)
    batch = actor.batch()
    if event.end_ref is not None and active.provider_turn is not None:
        active.provider_turn = struct_copy(active.provider_turn, native_end_ref=event.end_ref)
    lineage.turn_completed(batch, actor.state)
    if active.pending_restart is not None:
        await steering.apply_restart(actor, active, batch)
        return
    status = event.status if event.status in ("completed", "failed", "interrupted") else "failed"
    reason = None
    if status == "failed":
        reason = f"provider_error: {event.error}" if event.error else "provider_error"
    elif status == "interrupted":
        reason = active.interrupt_reason if active.interrupt_requested else "interrupted_by_provider"
    await actor.end_run(batch, status, reason=reason)


async def on_session_exited(actor: ThreadActor, event: SessionExited) -> None:
    """SPEC F11/F19: a requested stop interrupts the run; a crash before any
    side effect is recovered by a new attempt on a new runtime (as the
    session host's recovery policy allows); otherwise the run fails with the
    reason."""
    batch = actor.batch()
    active = actor.state.active
    if active is None or active.session_id != event.session_id:
        return  # not the session this attempt runs on (or it has none yet)
    graph.requests_not_resumable(batch, active, f"the provider session ended ({event.reason or 'exited'})")
    if active.pending_restart is not None:
        await steering.apply_restart(actor, active, batch)
        return
    if event.requested:
        status = actor.config.unsupported_interrupt_status if event.reason == "interrupt_unsupported" else "interrupted"
        reason = active.interrupt_reason if active.interrupt_requested else event.reason or "provider_stopped"
        await actor.end_run(batch, status, reason=reason)
        return
    how = f"exit code {event.exit_code}" if event.exit_code is not None else f"signal {event.signal}"
    crashed = f"provider_crashed: the provider process ended unexpectedly ({how})"
    full = full_disk_note(str(actor.store.path))
    if full is not None:
        # A runtime that cannot write its own files dies again on a new
        # start: no retry, and the reason names the disk, not the crash.
        await actor.end_run(batch, "failed", reason=f"{crashed}; {full}")
        return
    if active.nodes or active.interrupt_requested:
        # A tool may have touched the world: re-running could repeat it.
        await actor.end_run(batch, "failed", reason=crashed)
        return
    decision = actor.sessions.allow_recovery(actor.thread_id, how)
    if decision.retry:
        await actor.retry(batch, "provider_recovery", crashed)
        return
    reason = decision.reason or "provider_crash_loop"
    graph.provider_thread_failed(batch, actor.state, reason)
    await actor.end_run(batch, "failed", reason=reason)

"""Starting an attempt: the runtime, the native thread, the turn (SPEC F11).

The starter is a task of the thread's actor, one per attempt, that does what
waits on the provider — open (or reuse) the provider session, resume the
thread's native thread or make a new one, start the turn — outside the
thread's lock. It reports through the mailbox: ``ProviderThreadReady`` before
the turn starts (so the actor knows the provider thread before any event of
the turn) and ``AttemptStartFailed`` if it cannot get the turn running.

A native thread that cannot be resumed is replaced by a new one that is given
the thread's portable context (handoff.py), never left empty.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import trio

from agentd.protocol.errors import AgentdError

from . import checkpointing, graph
from .handoff import portable_context
from .messages import AttemptStartFailed, HandoffDraft, ProviderThreadReady
from .providers.base import NativeThreadMissing, ProviderRuntimeError
from .state import ActiveRun

if TYPE_CHECKING:
    from .thread_actor import ThreadActor


async def start_attempt(actor: ThreadActor, active: ActiveRun) -> None:
    """Get ``active``'s attempt running on the provider; report every outcome
    through ``actor``'s mailbox."""
    state = actor.state
    attempt_id = active.attempt.id
    text = active.user_message.text
    try:
        cwd = state.thread.workspace
        await trio.to_thread.run_sync(lambda: os.makedirs(cwd, mode=0o700, exist_ok=True))
        # Before the root execution starts: the workspace state this run's
        # checkpoint is diffed against (SPEC F13).
        await checkpointing.ensure_baseline(actor, active)
        session_id, conn = await actor.sessions.ensure_session(actor.thread_id, active.run.provider)
        # Known at once (same loop, no await in between): an exit of an
        # older session of this thread must not be blamed on this attempt.
        active.session_id = session_id
        current = state.provider_thread
        lost: str | None = None
        if current is not None and current.status != "unusable":
            native = current.native_thread_id
            turns = None
            try:
                if native not in conn.loaded_threads:
                    turns = (await conn.resume_thread(native, cwd=cwd)).turn_count
            except NativeThreadMissing as exc:
                lost = f"resume failed: {exc}"
            else:
                # Posted before the turn starts, so the actor knows the
                # provider thread before any event of the turn arrives.
                await actor.post(ProviderThreadReady(attempt_id, session_id, native, created=False, resumed_turn_count=turns))
                await conn.start_turn(native, text=text, attempt_id=attempt_id, cwd=cwd)
                return
        elif current is not None:
            lost = current.reason or "the provider thread is unusable"
        handoff = None
        if current is not None:
            # A replacement is built from the app's own record, never left empty.
            context, covered = portable_context(actor.store, actor.thread_id, before_ordinal=active.run.ordinal, reason=lost or "")
            if context:
                handoff = HandoffDraft(context, lost or "", covered, current.id)
        context_text = handoff.text if handoff else None
        if conn.capabilities.empty_threads:
            native = await conn.create_thread(cwd=cwd)
            await actor.post(ProviderThreadReady(attempt_id, session_id, native, created=True, handoff=handoff))
            await conn.start_turn(native, text=text, attempt_id=attempt_id, cwd=cwd, context=context_text)
        else:
            native, _turn = await conn.start_first_turn(text=text, attempt_id=attempt_id, cwd=cwd, context=context_text)
            await actor.post(ProviderThreadReady(attempt_id, session_id, native, created=True, handoff=handoff))
    except (ProviderRuntimeError, AgentdError, OSError) as exc:
        await actor.post(AttemptStartFailed(attempt_id, "provider_start_failed", exc))


async def on_provider_thread_ready(actor: ThreadActor, ready: ProviderThreadReady) -> None:
    """Record the attempt's provider thread (new, replacing or resumed)."""
    if not actor.state.is_current(ready.attempt_id):
        return
    active = actor.state.active
    assert active is not None
    kind = actor.sessions.adapter(active.run.provider).kind if ready.created else ""
    batch = actor.batch()
    graph.provider_thread_ready(batch, actor.state, ready, kind=kind)
    await actor.commit(batch)


async def on_attempt_start_failed(actor: ThreadActor, failed: AttemptStartFailed) -> None:
    """The turn could not start: the run ends (``interrupted`` if that was asked)."""
    active = actor.state.active
    if active is None or active.attempt.id != failed.attempt_id:
        return
    if actor.registry.shutting_down:
        return  # the daemon is stopping: the restart reconciles this run
    if active.interrupt_requested and active.pending_restart is None:
        await actor.end_run(actor.batch(), "interrupted", reason=active.interrupt_reason)
        return
    await actor.end_run(actor.batch(), "failed", reason=f"{failed.reason}: {failed.error}")

"""The attempt starter's reports, as transitions (SPEC F5, F6, F11).

The starter task (starter.py) brings an attempt up on the provider outside
the thread's lock and reports through the mailbox; these take its reports in:
the provider thread the attempt runs on, or that the turn could not start.
"""

from __future__ import annotations

from . import graph, lineage, run_control
from .context import ThreadContext
from .effects import Decision, Transition
from .ending import end_run
from .messages import AttemptStartFailed, ProviderThreadReady


def on_provider_thread_ready(ctx: ThreadContext, ready: ProviderThreadReady) -> Decision | None:
    """Record the attempt's provider thread (new, natively forked or resumed)."""
    state = ctx.state
    if not state.is_current(ready.attempt_id):
        return None
    active = state.active
    assert active is not None
    batch = ctx.batch()
    if ready.created:
        provider = active.run.provider
        fields = lineage.new_provider_thread_fields(
            active.context, lineage.provider_settings(ctx.config.providers.get(provider)), ready.runtime_version,
            forked=ready.forked,
        )
        pt = graph.provider_thread_ready(batch, state, ready, kind=ctx.adapter(provider).kind, fields=fields)
        lineage.provider_thread_made(batch, state, pt, native=ready.forked)
    else:
        graph.provider_thread_ready(batch, state, ready, kind="")
    # An interrupt asked for before the runtime named the thread goes now.
    after = run_control.send_interrupt(ctx, active) if active.interrupt_requested else []
    # Rides with the turn's start, which follows at once (the actor knows the
    # provider thread now, in memory): a crash before that leaves a run
    # whose turn start is in the outbox, reconciled as interrupted, and at
    # worst a native thread agentd never used again.
    return Decision(batch, effects=after, lazy=True)


def on_attempt_start_failed(ctx: ThreadContext, failed: AttemptStartFailed) -> Transition:
    """The turn could not start: the run ends (``interrupted`` if that was asked)."""
    active = ctx.state.active
    if active is None or active.attempt.id != failed.attempt_id:
        return
    if ctx.shutting_down():
        return  # the daemon is stopping: the restart reconciles this run
    if active.interrupt_requested and active.pending_restart is None:
        yield from end_run(ctx, ctx.batch(), "interrupted", reason=active.interrupt_reason)
        return
    yield from end_run(ctx, ctx.batch(), "failed", reason=f"{failed.reason}: {failed.error}")

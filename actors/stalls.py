"""Stalled runs: a running run whose provider has said nothing for a while
(issue 28, ``[daemon] stall_after``).

Every event the active attempt's provider sends moves the attempt's
``StallTimer`` on by ``stall_after`` seconds. When it comes due while the run
is running — not while it waits on the person, whose silence is no stall —
the run is marked: ``Run.stalledSince`` and a ``run.stalled`` event. The
next word from the provider clears the mark (``run.unstalled``). A stall
never ends a run: interrupting or stopping it stays the person's call.
"""

from __future__ import annotations

from agentd.store.db import struct_copy
from agentd.store.records import NODE_TERMINAL

from .context import ThreadContext
from .effects import Decision, RestartTimer
from .messages import StallTimer
from .state import ActiveRun


def _node_at(active: ActiveRun) -> str:
    """Where the run is silent: its newest open child node, else its root."""
    open_nodes = [node for node in active.nodes.values() if node.status not in NODE_TERMINAL]
    return open_nodes[-1].id if open_nodes else active.root.id


def on_heard(ctx: ThreadContext, attempt_id: str) -> Decision | None:
    """The active attempt's provider spoke: its silence starts over, and a
    stalled run is running again (``run.unstalled``)."""
    stall_after = ctx.config.stall_after
    active = ctx.state.active
    if not stall_after or active is None:
        return None
    restart = RestartTimer(StallTimer(attempt_id), stall_after)
    since = active.run.stalled_since
    if since is None:
        return Decision(effects=[restart])
    batch = ctx.batch()
    active.run = run = struct_copy(active.run, stalled_since=None)
    batch.put(run)
    node_id = _node_at(active)
    batch.emit("run.unstalled", run_id=run.id, node_id=node_id, runId=run.id, nodeId=node_id,
               silentFor=round(max(0.0, batch.now - since), 3))
    return Decision(batch, effects=[restart])


def on_stall_timer(ctx: ThreadContext, timer: StallTimer) -> Decision | None:
    """The attempt's provider said nothing for ``stall_after`` seconds: mark
    a running run stalled; a run waiting on the person is looked at again later."""
    active = ctx.state.active
    stall_after = ctx.config.stall_after
    if not stall_after or active is None or active.attempt.id != timer.attempt_id:
        return None
    if active.run.status != "running":
        return Decision(effects=[RestartTimer(timer, stall_after)])
    if active.run.stalled_since is not None:
        return None
    batch = ctx.batch()
    active.run = run = struct_copy(active.run, stalled_since=batch.now - stall_after)
    batch.put(run)
    node_id = _node_at(active)
    batch.emit("run.stalled", run_id=run.id, node_id=node_id, runId=run.id, nodeId=node_id, silentFor=stall_after)
    return Decision(batch)

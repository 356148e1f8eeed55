"""``run.diff``: what a run changed in its workspace (SPEC F13; issue 28 item 8).

A run that ended with its own checkpoint captured is diffed exactly: that
checkpoint against the one it was captured against. A run cut off before it
had one — the daemon was killed under it (its capture ``missing``, reason
``daemon_restart``, or none at all), or its runtime died mid-write — still
changed files, and they are on disk: the next capture of the workspace (the
next run's baseline, a restore's safety checkpoint) holds them. So the run's
diff is then the change between the baseline before it and the first capture
after it, marked ``approximate: "between_baselines"``: anything else that
changed the folder in between (the person's edits after the restart) is in it
too. A run with nothing captured after it yet (no run since) says so.
"""

from __future__ import annotations

from typing import Any

from agentd.protocol import wire
from agentd.protocol.errors import InvalidState, NotFound
from agentd.protocol.server import Connection
from agentd.store.records import RUN_TERMINAL, Checkpoint, Run

from .context import DaemonContext
from .queries import checkpoint_diff

#: how a diff between the captures around a run is marked
BETWEEN_BASELINES = "between_baselines"
#: scopes that capture the whole workspace (a child scope's checkpoint may be partial)
WHOLE = ("root", "pre_rollback")


def _holds_files(checkpoint: Checkpoint) -> bool:
    return checkpoint.commit is not None and checkpoint.status in ("captured", "stale") and checkpoint.scope in WHOLE


def around(run: Run, checkpoints: list[Checkpoint]) -> tuple[Checkpoint | None, Checkpoint | None]:
    """The capture the run started from — the newest whole-workspace capture
    of the ordinal before it, made before it started — and the first one made
    after it ended (None where there is none)."""
    started, ended = run.started_at or run.created_at, run.ended_at or run.started_at or run.created_at
    captures = sorted((c for c in checkpoints if _holds_files(c)), key=lambda c: c.created_at)
    before = [c for c in captures if c.scope == "root" and c.ordinal == run.ordinal - 1 and c.created_at <= started]
    after = [c for c in captures if c.created_at >= ended and c.run_id != run.id]
    return (before[-1] if before else None), (after[0] if after else None)


def _refusal(run: Run, why: str) -> InvalidState:
    return InvalidState(f"run {run.id} has no checkpoint of its own ({run.status}"
                        + (f": {run.reason}" if run.reason else "") + f") and {why}", runId=run.id)


async def run_diff(context: DaemonContext, params: wire.RunDiffParams, conn: Connection) -> dict[str, Any]:
    """The run's checkpoint diff, or — for a run cut off before its capture —
    the diff between the captures around it, marked approximate."""
    store = context.store
    run = store.run(params.run_id)
    if run is None:
        raise NotFound(f"no run {params.run_id}", runId=params.run_id)
    own = store.get(Checkpoint, run.checkpoint_id) if run.checkpoint_id else None
    if own is not None and _holds_files(own):
        diff = await checkpoint_diff(context, wire.CheckpointDiffParams(checkpoint_id=own.id, max_bytes=params.max_bytes), conn)
        return {**diff, "runId": run.id, "approximate": None}
    if run.status not in RUN_TERMINAL or run.started_at is None:
        raise InvalidState(f"run {run.id} has no checkpoint (it is {run.status}: a run gets one when it ends after it "
                           "started)", runId=run.id, status=run.status)
    before, after = around(run, store.thread_checkpoints(run.thread_id))
    if before is None:
        raise _refusal(run, "no checkpoint before it was captured (checkpoints were off, or its baseline failed)")
    if after is None:
        raise _refusal(run, "nothing was captured after it yet: the next run's baseline will hold what it changed")
    diff = await checkpoint_diff(context, wire.CheckpointDiffParams(
        checkpoint_id=after.id, base_checkpoint_id=before.id, max_bytes=params.max_bytes), conn)
    return {**diff, "runId": run.id, "approximate": BETWEEN_BASELINES}

"""Checkpoints of a thread's runs (SPEC F13, F14): the daemon's use of the
checkpoint engine (``actors/checkpoints``).

- Before a run's root execution starts, the starter ensures the baseline
  checkpoint for ordinal − 1 (``ensure_baseline``): the previous run's own
  checkpoint when there is one and no restore came after it, else a fresh
  ``baseline`` capture of the workspace as it is now.
- In the completion barrier the actor captures the run's checkpoint
  (``capture_run``), diffed against that baseline; ``graph.end_run`` commits
  the Checkpoint record with ``run.<status>`` in one transaction. The capture
  is announced first by a ``checkpoint.capture`` outbox entry, so a daemon
  killed mid-capture leaves a trace that the next start's reconciliation turns
  into a ``missing`` checkpoint (``daemon_restart``), never a late capture.
- ``checkpoint.restore`` and the file step of a rollback are in
  ``restoring.py``.

Every engine call is an awaited git subprocess: nothing blocks the loop. An
engine failure (git missing, a refused workspace, …) becomes a Checkpoint with
status ``error`` and the engine's reason; the run still ends normally.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec

from agentd.protocol.errors import InvalidState, NotFound
from agentd.store.ids import new_id
from agentd.store.reconcile import CHECKPOINT_CAPTURE
from agentd.store.records import NODE_TERMINAL, Checkpoint, Effect, to_wire

from .checkpoints import CheckpointEngine, CheckpointError, checkpoint_ref

if TYPE_CHECKING:
    from agentd.store.db import Store

    from .state import ActiveRun
    from .thread_actor import ThreadActor

log = logging.getLogger(__name__)

#: the outbox entry of a run's checkpoint capture (store/reconcile.py turns
#: one a restart left pending into a ``missing`` checkpoint)
CAPTURE_EFFECT = CHECKPOINT_CAPTURE


def engine_of(actor: ThreadActor) -> CheckpointEngine | None:
    """The daemon's engine (None: checkpoints are off, as in unit tests)."""
    return getattr(actor.registry, "checkpoints", None)


def _summary(result: Any) -> dict[str, Any]:
    return msgspec.to_builtins(result.summary)


def _failure(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, CheckpointError):
        return exc.reason, str(exc)
    return "internal", f"{type(exc).__name__}: {exc}"


def previous_root(store: Store, thread_id: str, ordinal: int) -> Checkpoint | None:
    """The captured root checkpoint a run of ``ordinal`` is diffed against:
    the newest one of ordinal − 1, unless a restore came after it (then the
    workspace is no longer that state and a new baseline is needed)."""
    checkpoints = store.thread_checkpoints(thread_id)
    last_restore = max((c.created_at for c in checkpoints if c.kind == "pre_rollback"), default=None)
    candidates = [c for c in checkpoints
                  if c.scope == "root" and c.status == "captured" and c.ordinal == ordinal - 1]
    if not candidates:
        return None
    best = max(candidates, key=lambda c: (c.created_at, c.id))
    if last_restore is not None and last_restore >= best.created_at:
        return None
    return best


async def ensure_baseline(actor: ThreadActor, active: ActiveRun) -> None:
    """Before the run's root execution starts: make sure a captured root
    checkpoint of ordinal − 1 exists (captured now if not). Called by the
    starter, outside the thread's lock; the record it commits is new and
    touches no state the actor holds."""
    engine = engine_of(actor)
    if engine is None:
        return
    run = active.run
    if previous_root(actor.store, actor.thread_id, run.ordinal) is not None:
        return
    workspace = actor.state.thread.workspace
    # The attempt id makes the ref unique: a baseline whose record a crash
    # lost is never in the way of the next one (refs are create-only).
    ref = checkpoint_ref(actor.thread_id, "baseline", f"{run.ordinal - 1}-{active.attempt.id}")
    fields: dict[str, Any]
    try:
        result = await engine.capture(workspace, ref)
        fields = {"status": "captured", "commit": result.commit, "ref": ref, "summary": _summary(result)}
    except Exception as exc:  # noqa: BLE001 - recorded; the run starts anyway
        reason, detail = _failure(exc)
        if not isinstance(exc, CheckpointError):
            log.exception("thread %s: baseline capture for run %s failed", actor.thread_id, run.id)
        fields = {"status": "error", "reason": reason, "detail": detail}
    batch = actor.batch()
    checkpoint = Checkpoint(
        id=new_id("ckp"), thread_id=actor.thread_id, run_id=run.id, node_id=active.root.id, scope="root",
        kind="baseline", ordinal=run.ordinal - 1, workspace=workspace, created_at=batch.now, **fields,
    )
    batch.put(checkpoint)
    batch.emit(f"checkpoint.{checkpoint.status}", run_id=run.id, node_id=active.root.id, checkpoint=to_wire(checkpoint))
    await actor.commit(batch)


#: node kinds whose work may write to the workspace
WRITING_KINDS = frozenset({"file_change", "command_execution", "tool", "mcp_tool_call", "subagent", "background_task"})


def writes_in_flight(actor: ThreadActor, active: ActiveRun) -> str | None:
    """Why the workspace cannot be read safely at the run's end, or None: the
    runtime died (its session is gone) while a step that writes was still
    running, so that step's processes may still be writing."""
    running = [n for n in active.nodes.values() if n.kind in WRITING_KINDS and n.status not in NODE_TERMINAL]
    if not running:
        return None
    live = actor.sessions.live_session(actor.thread_id)
    if live is not None and live[0] == active.session_id:
        return None  # the runtime ended the turn itself: its steps are over
    node = running[0]
    return (f"the agent's runtime ended while {node.kind} {node.title or node.id!r} was running; what it started "
            "may still be writing, so the files were not captured")


async def capture_run(actor: ThreadActor, active: ActiveRun) -> tuple[Checkpoint, Effect | None] | None:
    """The completion barrier's capture: commit the ``checkpoint.capture``
    outbox entry, capture the workspace as the run's checkpoint and return the
    record (not yet committed) with the entry to settle in the same batch as
    ``run.<status>``. None when checkpoints are off or the run never started
    (the agent never saw the workspace)."""
    engine = engine_of(actor)
    run = active.run
    if engine is None or run.started_at is None:
        return None
    thread_id = actor.thread_id
    checkpoint_id = new_id("ckp")
    busy = writes_in_flight(actor, active)
    if busy is not None:
        # Reading the files now would capture half of whatever is still
        # being written: say so rather than record a state nobody saw.
        return Checkpoint(
            id=checkpoint_id, thread_id=thread_id, run_id=run.id, node_id=active.root.id, scope="root", kind="run",
            ordinal=run.ordinal, status="missing", reason="write_in_flight", detail=busy,
            workspace=actor.state.thread.workspace, created_at=actor.now(),
        ), None
    marker = actor.batch()
    effect = Effect(
        id=new_id("eff"), kind=CAPTURE_EFFECT, thread_id=thread_id, replay_safe=True, created_at=marker.now,
        payload={"checkpointId": checkpoint_id, "runId": run.id, "nodeId": active.root.id, "ordinal": run.ordinal,
                 "workspace": actor.state.thread.workspace},
    )
    marker.put(effect)
    await actor.commit(marker)
    base = previous_root(actor.store, thread_id, run.ordinal)
    workspace = actor.state.thread.workspace
    ref = checkpoint_ref(thread_id, "root", run.ordinal)
    fields: dict[str, Any]
    try:
        result = await engine.capture(workspace, ref, base=base.commit if base else None)
        fields = {"status": "captured", "commit": result.commit, "ref": ref, "summary": _summary(result)}
    except Exception as exc:  # noqa: BLE001 - any failure is recorded, the run still ends
        reason, detail = _failure(exc)
        if not isinstance(exc, CheckpointError):
            log.exception("thread %s: capturing run %s failed", thread_id, run.id)
        fields = {"status": "error", "reason": reason, "detail": detail}
    checkpoint = Checkpoint(
        id=checkpoint_id, thread_id=thread_id, run_id=run.id, node_id=active.root.id, scope="root", kind="run",
        ordinal=run.ordinal, base_checkpoint_id=base.id if base else None, workspace=workspace,
        created_at=actor.now(), **fields,
    )
    return checkpoint, effect


# -- checkpoint.restore ------------------------------------------------------------------


def captured_checkpoint(store: Store, checkpoint_id: str) -> Checkpoint:
    """A checkpoint that has files to diff or restore (``not_found`` /
    ``invalid_state`` otherwise)."""
    checkpoint = store.get(Checkpoint, checkpoint_id)
    if checkpoint is None:
        raise NotFound(f"no checkpoint {checkpoint_id}", checkpointId=checkpoint_id)
    if checkpoint.commit is None or checkpoint.status not in ("captured", "stale"):
        raise InvalidState(
            f"checkpoint {checkpoint.id} is {checkpoint.status}" + (f" ({checkpoint.reason})" if checkpoint.reason else "")
            + ": it holds no files", checkpointId=checkpoint.id, status=checkpoint.status,
        )
    return checkpoint

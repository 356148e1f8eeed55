"""Checkpoints of a thread's runs (SPEC F13, F14): the daemon's use of the
checkpoint engine (``actors/checkpoints``).

- Before a run's root execution starts, the starter ensures the baseline
  checkpoint for ordinal − 1 (``starter.ensure_baseline``): the previous run's own
  checkpoint when there is one and no restore came after it, else a fresh
  ``baseline`` capture of the workspace as it is now.
- In the completion barrier the actor captures the run's checkpoint
  (``capture_run``), diffed against that baseline; ``graph.end_run`` commits
  the Checkpoint record with ``run.<status>`` in one transaction. The capture
  is announced by a ``checkpoint.capture`` outbox entry, committed while git
  reads the workspace and durable before the capture's ref is made, so a
  daemon killed mid-capture leaves a trace that the next start's
  reconciliation turns into a ``missing`` checkpoint (``daemon_restart``),
  never a late capture nor a ref no record names.
- ``checkpoint.restore`` and the file step of a rollback are in
  ``restoring.py``.

Every engine call is an effect, a git subprocess the actor awaits: nothing
blocks the loop, and nothing here awaits. An
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
from agentd.store.records import NODE_TERMINAL, Checkpoint, Effect

from .checkpoints.errors import CheckpointError
from .checkpoints.refs import checkpoint_ref
from .effects import Capture, Transition

if TYPE_CHECKING:
    from agentd.store.db import Store

    from .context import ThreadContext
    from .state import ActiveRun

log = logging.getLogger(__name__)

#: the outbox entry of a run's checkpoint capture (store/reconcile.py turns
#: one a restart left pending into a ``missing`` checkpoint)
CAPTURE_EFFECT = CHECKPOINT_CAPTURE


def _summary(result: Any) -> dict[str, Any]:
    return msgspec.to_builtins(result.summary)  # type: ignore[no-any-return]


def _failure(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, CheckpointError):
        return exc.reason, str(exc)
    return "internal", f"{type(exc).__name__}: {exc}"


def capture_fields(outcome: Any, ref: str, *, what: str = "capture") -> dict[str, Any]:
    """A Checkpoint's fields from an engine capture's result, or from the
    error it raised: ``status: error`` with the engine's reason (an
    unexpected error is logged, as ``what``, and recorded as ``internal``).
    Any failure is recorded; the run goes on."""
    if isinstance(outcome, BaseException):
        reason, detail = _failure(outcome)
        if not isinstance(outcome, CheckpointError):
            log.error("%s failed", what, exc_info=outcome)
        return {"status": "error", "reason": reason, "detail": detail}
    return {"status": "captured", "commit": outcome.commit, "ref": ref, "summary": _summary(outcome)}


def capture(workspace: str, ref: str, base: str | None = None, *, durable_first: Any = None) -> Transition:
    """Capture ``workspace`` (effect; ``durable_first``: see ``effects.Capture``);
    the engine's result, or the exception it raised as a value."""
    try:
        return (yield Capture(workspace, ref, base, durable_first=durable_first))
    except Exception as exc:  # noqa: BLE001 - the caller records it
        return exc


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


#: node kinds whose work may write to the workspace
WRITING_KINDS = frozenset({"file_change", "command_execution", "tool", "mcp_tool_call", "subagent", "background_task"})


def writes_in_flight(ctx: ThreadContext, active: ActiveRun) -> str | None:
    """Why the workspace cannot be read safely at the run's end, or None: the
    runtime died (its session is gone) while a step that writes was still
    running, so that step's processes may still be writing."""
    running = [n for n in active.nodes.values() if n.kind in WRITING_KINDS and n.status not in NODE_TERMINAL]
    if not running:
        return None
    if ctx.live_session_id() == active.session_id and active.session_id is not None:
        return None  # the runtime ended the turn itself: its steps are over
    node = running[0]
    return (f"the agent's runtime ended while {node.kind} {node.title or node.id!r} was running; what it started "
            "may still be writing, so the files were not captured")


def capture_run(ctx: ThreadContext, active: ActiveRun) -> Transition:
    """The completion barrier's capture: commit the ``checkpoint.capture``
    outbox entry (durable before the capture's ref is made: see
    ``effects.Capture``), capture the workspace as the run's checkpoint and return
    ``(record, entry)`` — not yet committed — for the caller to commit with
    ``run.<status>``, settling the entry in the same batch. None when
    checkpoints are off or the run never started (the agent never saw the
    workspace)."""
    run = active.run
    if not ctx.checkpoints_on or run.started_at is None:
        return None
    thread_id = ctx.thread_id
    workspace = ctx.state.thread.workspace
    checkpoint_id = new_id("ckp")
    busy = writes_in_flight(ctx, active)
    if busy is not None:
        # Reading the files now would capture half of whatever is still
        # being written: say so rather than record a state nobody saw.
        return Checkpoint(
            id=checkpoint_id, thread_id=thread_id, run_id=run.id, node_id=active.root.id, scope="root", kind="run",
            ordinal=run.ordinal, status="missing", reason="write_in_flight", detail=busy,
            workspace=workspace, created_at=ctx.now(),
        ), None
    marker = ctx.batch()
    effect = Effect(
        id=new_id("eff"), kind=CAPTURE_EFFECT, thread_id=thread_id, replay_safe=True, created_at=marker.now,
        payload={"checkpointId": checkpoint_id, "runId": run.id, "nodeId": active.root.id, "ordinal": run.ordinal,
                 "workspace": workspace},
    )
    marker.put(effect)
    base = previous_root(ctx.store, thread_id, run.ordinal)
    # A run retried by the person ends again: its second capture needs a ref
    # of its own (refs are create-only).
    ref = checkpoint_ref(thread_id, "root", run.ordinal if run.checkpoint_id is None else f"{run.ordinal}-{active.attempt.id}")
    # The entry is committed while git reads the workspace, and is durable
    # before the ref exists (not one synced commit before git even starts).
    outcome = yield from capture(workspace, ref, base.commit if base else None, durable_first=marker)
    fields = capture_fields(outcome, ref, what=f"thread {thread_id}: capturing run {run.id}")
    checkpoint = Checkpoint(
        id=checkpoint_id, thread_id=thread_id, run_id=run.id, node_id=active.root.id, scope="root", kind="run",
        ordinal=run.ordinal, base_checkpoint_id=base.id if base else None, workspace=workspace,
        created_at=ctx.now(), **fields,
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

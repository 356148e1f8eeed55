"""Putting a checkpoint's files back for the daemon (SPEC F13, F14):
``checkpoint.restore`` and the file step of ``rollback.toRun`` /
``rollback.node``.

The order makes what is durable describe what happened, whenever the daemon
is killed:

1. The engine captures the workspace as it is now (the safety checkpoint);
   no file is touched yet.
2. Still before any file is touched, one commit records the ``pre_rollback``
   Checkpoint (``checkpoint.captured``: it is in ``checkpoint.list`` from
   now on) with the outbox entry that says a restore to it is under way: the
   caller's ``rollback`` entry, updated with the safety checkpoint, or a
   ``restore`` entry of its own for ``checkpoint.restore``.
3. The files are put back.
4. The caller commits the outcome and settles the entry in one batch.

A daemon killed during 3 leaves the entry pending; the next start's
reconciliation (``store/reconcile.py``) records that the restore was cut off
and names the safety checkpoint that takes the files back.

Paths leave as ``names.shown`` strings with a ``pathBytes`` map for names
that are not UTF-8: records and answers never hold a lone surrogate.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from agentd.protocol.errors import InvalidParams, InvalidState, NotFound, RestoreIncomplete
from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.reconcile import RESTORE
from agentd.store.records import Checkpoint, Effect, to_wire

from .checkpointing import captured_checkpoint
from .checkpoints.errors import CheckpointError
from .checkpoints.names import raw
from .checkpoints.refs import checkpoint_ref
from .checkpoints.results import CaptureResult, RestoreResult
from .effects import Commit, Decision, RestoreFiles, Transition
from .graph import ThreadBatch, settle_effect

if TYPE_CHECKING:
    from .context import ThreadContext
    from .messages import Command

#: how many paths a restore_incomplete message names before "and N more"
NAMED_IN_MESSAGE = 5


@dataclass
class Restored:
    """Files put back by ``restore_files``: the safety checkpoint (committed
    already), the engine's outcome, the paths written or removed, and the
    outbox entry (as updated) for the caller to settle."""

    safety: Checkpoint
    result: RestoreResult
    paths: list[str]
    effect: Effect | None

    @property
    def path_bytes(self) -> dict[str, str]:
        """The bytes (base64) of each restored path that is not UTF-8, by its shown string."""
        return dict(self.result.path_bytes)


def include_paths(include: list[str] | None) -> list[bytes]:
    """``checkpoint.restore``'s ``include`` as workspace-relative folder names
    (``invalid_params`` for an absolute one, ``..``, or a ``.git``)."""
    out = []
    for path in include or []:
        parts = path.strip("/").split("/")
        if path.startswith("/") or not path.strip("/") or any(p in ("", ".", "..", ".git") for p in parts):
            raise InvalidParams(f"include: {path!r} is not a folder inside the workspace (relative, no '..' or "
                                "'.git')", field="include")
        out.append(raw("/".join(parts)))
    return out


def _paths(n: int) -> str:
    return f"{n} path" if n == 1 else f"{n} paths"


def incomplete_message(target: Checkpoint, safety: Checkpoint, result: RestoreResult, *, rollback: bool) -> str:
    """What a restore that left paths as they were did, truthfully: how many
    paths it put back, which it did not and why, what stopped it (if
    something did), and the checkpoint that undoes it."""
    put_back = len(result.written) + len(result.deleted)
    left = result.not_restored
    why = Counter(n.reason for n in left)
    named = ", ".join(f"{n.path} ({n.reason})" for n in left[:NAMED_IN_MESSAGE])
    more = f" and {len(left) - NAMED_IN_MESSAGE} more" if len(left) > NAMED_IN_MESSAGE else ""
    text = (f"restoring checkpoint {target.id} put {put_back} of {_paths(put_back + len(left))} back and left "
            f"{len(left)} as {'it is' if len(left) == 1 else 'they are'} "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(why.items()))}): {named}{more}")
    if result.error:
        text += f"; it stopped early: {result.error}"
    if why.get("nested_repository"):
        text += ("; a nested repository (a folder with a .git) is never restored by itself: restore it with "
                 "checkpoint.restore and include naming the folder")
    if put_back:
        text += f". Restore checkpoint {safety.id} to take back the {_paths(put_back)} it did put back"
    else:
        text += f". No file was changed (checkpoint {safety.id} holds the files as they are)"
    if rollback:
        text += "; no run and no agent memory was changed"
    return text + "."


def restore_files(ctx: ThreadContext, target: Checkpoint, *, effect: Effect | None = None,
                  fail_incomplete: bool = True, include: list[bytes] | None = None) -> Transition:
    """Put ``target``'s files back, after a ``pre_rollback`` safety capture
    of the workspace as it is now (restoring that one undoes this), which is
    committed — with ``effect`` updated to name it, or a ``restore`` outbox
    entry of its own when there is none — before any file is touched. The
    result: ``Restored``.

    With ``fail_incomplete``, a restore that leaves paths as they were
    settles ``effect`` and raises RestoreIncomplete saying what was and was
    not restored; without, the caller reports it. A restore that could not
    start (the safety capture failed) raises InvalidState: nothing changed.
    """
    if not ctx.checkpoints_on:
        raise InvalidState("checkpoints are off in this agentd")
    thread_id = ctx.thread_id
    workspace = target.workspace or ctx.state.thread.workspace
    safety_n = 1 + sum(1 for c in ctx.store.thread_checkpoints(thread_id) if c.kind == "pre_rollback")
    safety_id = new_id("ckp")
    # The id makes the ref unique even if a crash lost an earlier record.
    safety_ref = checkpoint_ref(thread_id, "pre_rollback", f"{safety_n}-{safety_id}")
    recorded: list[tuple[Checkpoint, Effect]] = []

    def record_safety(capture: CaptureResult) -> ThreadBatch:
        batch = ctx.batch()
        safety = Checkpoint(
            id=safety_id, thread_id=thread_id, scope="pre_rollback", kind="pre_rollback", ordinal=safety_n,
            commit=capture.commit, ref=safety_ref, base_checkpoint_id=target.id,
            summary=msgspec.to_builtins(capture.summary), workspace=workspace, created_at=batch.now,
        )
        batch.put(safety)
        batch.emit("checkpoint.captured", checkpoint=to_wire(safety))
        payload = {"checkpointId": target.id, "safetyCheckpointId": safety.id, "workspace": workspace}
        if effect is not None:
            marker = struct_copy(effect, payload={**effect.payload, **payload})
        else:
            marker = Effect(id=new_id("eff"), kind=RESTORE, thread_id=thread_id, replay_safe=False,
                            created_at=batch.now, payload=payload)
        batch.put(marker)
        recorded.append((safety, marker))
        return batch

    assert target.commit is not None
    try:
        result: RestoreResult = yield RestoreFiles(workspace, target.commit, safety_ref, tuple(include or ()),
                                                   record_safety)
    except CheckpointError as exc:
        batch = ctx.batch()
        settle_effect(batch, recorded[0][1] if recorded else effect, "done", reason=f"nothing restored: {exc}")
        if batch:
            yield Commit(batch)
        raise InvalidState(f"cannot restore checkpoint {target.id}: {exc}", checkpointId=target.id,
                           reason=exc.reason) from None
    safety, marker = recorded[0]
    restored = Restored(safety=safety, result=result, paths=sorted(result.written + result.deleted), effect=marker)
    if fail_incomplete and not result.complete:
        batch = ctx.batch()
        settle_effect(batch, marker, "done", reason=f"restore incomplete: {result.error or 'paths left as they were'}")
        yield Commit(batch)
        raise RestoreIncomplete(
            incomplete_message(target, safety, result, rollback=effect is not None and effect.kind != RESTORE),
            checkpointId=target.id, safetyCheckpointId=safety.id, restored=restored.paths,
            notRestored=msgspec.to_builtins(result.not_restored), error=result.error, pathBytes=restored.path_bytes,
        )
    return restored


def checkpoint_restore(ctx: ThreadContext, command: Command) -> Transition:
    """``checkpoint.restore``: put a captured checkpoint's files back, after a
    ``pre_rollback`` safety capture of the workspace as it is now. Refused
    while a run is active or waiting; changes no run and no agent memory."""
    params = command.params
    state = ctx.state
    if not ctx.checkpoints_on:
        raise InvalidState("checkpoints are off in this agentd")
    include = include_paths(params.include)
    target = captured_checkpoint(ctx.store, params.checkpoint_id)
    if target.thread_id != ctx.thread_id:  # pragma: no cover - routed by the checkpoint's thread
        raise NotFound(f"no checkpoint {target.id} in thread {ctx.thread_id}", checkpointId=target.id)
    if state.active is not None:
        raise InvalidState(
            f"thread {ctx.thread_id} has run {state.active.run.id} {state.active.run.status}: "
            "stop it (thread.stop) before restoring a checkpoint",
            threadId=ctx.thread_id, runId=state.active.run.id,
        )
    restored = yield from restore_files(ctx, target, fail_incomplete=False, include=include)
    result = restored.result
    batch = ctx.batch()
    answer = {
        "checkpointId": target.id,
        "safetyCheckpointId": restored.safety.id,
        "restored": restored.paths,
        "written": result.written,
        "deleted": result.deleted,
        "notRestored": msgspec.to_builtins(result.not_restored),
        "complete": result.complete,
        "error": result.error,
        "pathBytes": restored.path_bytes,
        "message": None if result.complete else incomplete_message(target, restored.safety, result, rollback=False),
    }
    batch.emit("checkpoint.restored", run_id=target.run_id, node_id=target.node_id, **answer)
    settle_effect(batch, restored.effect, "done")
    batch.record_receipt(command.command_id, command.method, answer)
    return Decision(batch, answer)

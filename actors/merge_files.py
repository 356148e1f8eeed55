"""Merge-back of files: a fork's file changes come home with the message
(issue 27, SPEC F7 ``mergeBack: {forkThreadId, files: true}``).

A three-way merge on the shadow repositories (checkpoints/merge.py): base
the fork point's checkpoint (a worktree fork's; for another fork, its first
baseline, copied from its shadow) or, after an earlier merge of its files,
that merge's theirs (so merging again brings only what changed since);
theirs the fork's latest checkpoint — its changes since its first baseline
(or that merge) laid onto the base; ours
this workspace now, captured first as a ``pre_merge`` safety checkpoint
(``checkpoint.restore`` of it undoes the merge). Clean: the merged files are
written. Conflicting: nothing is written, unless ``onConflict: "markers"``
(then git's conflict markers). Files over the checkpoint size cap are in no
checkpoint: they are reported, never merged.

The safety checkpoint is committed, with a ``restore`` outbox entry, before
any file is written (as a restore does): a daemon killed while it writes
leaves the way back listed, and the next start names it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import msgspec

from agentd.protocol import wire, wire_records
from agentd.protocol.errors import InvalidParams, InvalidState
from agentd.store.ids import new_id
from agentd.store.reconcile import RESTORE
from agentd.store.records import Checkpoint, ContextTransfer, Effect, FilesMerge, PathReason, Run, to_wire

from .checkpoints.refs import checkpoint_ref
from .checkpoints.results import CaptureResult
from .checkpoints.errors import CheckpointError
from .effects import Commit, EndRestore, GuardRestore, MergeForkFiles, Transition
from .graph import settle_effect
from .merge_back import FIELD, MergeDelta

if TYPE_CHECKING:
    from .checkpoints.merge import MergeOutcome
    from .context import ThreadContext
    from .graph import ThreadBatch

#: file-merge statuses after which the merged theirs is the next merge's base
APPLIED = ("merged", "conflicts_marked")
#: what a refusal while another thread runs in the workspace calls the merge
GUARDED = "a merge-back of files (mergeBack.files)"


def previous_merge(transfers: list[ContextTransfer], fork_id: str, thread_id: str) -> FilesMerge | None:
    """The newest merge of ``fork_id``'s files into ``thread_id`` that wrote them."""
    done = [t for t in transfers if t.type == "merge_back" and t.source_thread_id == fork_id
            and t.target_thread_id == thread_id and t.files_merge is not None and t.files_merge.status in APPLIED]
    done.sort(key=lambda t: (t.created_at, t.id))
    return done[-1].files_merge if done else None


def _captured(checkpoint: Checkpoint | None) -> bool:
    return checkpoint is not None and checkpoint.status in ("captured", "stale") and bool(checkpoint.ref)


def _ends(ctx: ThreadContext, found: MergeDelta) -> tuple[Checkpoint, str, str | None]:
    """theirs (the fork's latest checkpoint); the fork's checkpoint ref its
    changes are counted from — the last merge's theirs, else its first
    baseline; and the base here, when there is one — the last merge's theirs
    as made here, else a worktree fork's fork-point checkpoint (None: the
    fork's own start is fetched).

    Raises:
        InvalidState: the fork's latest run has no captured checkpoint, or it has no baseline.
    """
    store = ctx.store
    theirs = store.get(Checkpoint, found.source.checkpoint_id) if found.source.checkpoint_id else None
    if theirs is None or not _captured(theirs):
        raise InvalidState(f"fork {found.fork.id}'s latest completed run has no captured checkpoint: its files "
                           "cannot be merged", threadId=found.fork.id)
    earlier = previous_merge(store.thread_transfers(ctx.thread_id), found.fork.id, ctx.thread_id)
    merged = store.get(Checkpoint, earlier.theirs_checkpoint_id) if earlier is not None else None
    if earlier is not None and merged is not None and _captured(merged):
        return theirs, merged.ref or "", earlier.theirs_ref
    baselines = [c for c in store.thread_checkpoints(found.fork.id) if c.kind == "baseline" and _captured(c)
                 and c.workspace == theirs.workspace]
    baselines.sort(key=lambda c: (c.ordinal, c.created_at))
    if not baselines:
        raise InvalidState(f"fork {found.fork.id} has no captured baseline to merge its files from",
                           threadId=found.fork.id)
    source = found.fork.workspace_source
    point = store.get(Checkpoint, source.checkpoint_id) if source is not None and source.checkpoint_id else None
    here = point.commit if (point is not None and _captured(point) and point.thread_id == ctx.thread_id
                            and point.workspace == ctx.state.thread.workspace) else None
    return theirs, baselines[0].ref or "", here


def _safety_record(ctx: ThreadContext, capture: CaptureResult, safety_id: str, ref: str, n: int,
                   theirs: Checkpoint, fork_id: str, recorded: list[Effect]) -> ThreadBatch:
    batch = ctx.batch()
    workspace = ctx.state.thread.workspace
    safety = Checkpoint(
        id=safety_id, thread_id=ctx.thread_id, scope="pre_rollback", kind="pre_merge", ordinal=n,
        commit=capture.commit, ref=ref, summary=msgspec.to_builtins(capture.summary), workspace=workspace,
        created_at=batch.now,
    )
    batch.put(safety)
    batch.emit("checkpoint.captured", checkpoint=to_wire(safety))
    marker = Effect(id=new_id("eff"), kind=RESTORE, thread_id=ctx.thread_id, replay_safe=False, created_at=batch.now,
                    payload={"checkpointId": theirs.id, "safetyCheckpointId": safety_id, "workspace": workspace,
                             "mergeForkThreadId": fork_id})
    batch.put(marker)
    recorded.append(marker)
    return batch


def merge(ctx: ThreadContext, found: MergeDelta, params: wire.MergeBack) -> Transition:
    """Merge the fork's files into this idle workspace; the result: the
    ``FilesMerge`` and the outbox entry to settle with the message's commit.

    Raises:
        InvalidState: checkpoints are off, a run of this thread — or of
            another thread in the same folder (``data.activeRuns``) — is
            active, or the fork has no checkpoint to merge.
        InvalidParams: the fork works in this same workspace.
    """
    state = ctx.state
    if not ctx.checkpoints_on:
        raise InvalidState("a merge-back of files needs checkpoints, and they are off in this agentd")
    if state.active is not None:
        raise InvalidState(f"thread {ctx.thread_id} has run {state.active.run.id} {state.active.run.status}: a "
                           "merge-back of files writes this workspace, so it waits for no run; stop it or let it end",
                           threadId=ctx.thread_id, runId=state.active.run.id)
    if found.fork.workspace == state.thread.workspace:
        raise InvalidParams(f"fork {found.fork.id} works in this thread's own workspace: its files are here already",
                            field=FIELD)
    theirs, fork_base, base_here = _ends(ctx, found)
    n = 1 + sum(1 for c in ctx.store.thread_checkpoints(ctx.thread_id) if c.kind == "pre_merge")
    safety_id = new_id("ckp")
    safety_ref = checkpoint_ref(ctx.thread_id, "pre_merge", f"{n}-{safety_id}")
    theirs_ref = checkpoint_ref(ctx.thread_id, "merged", f"{n}-{safety_id}-theirs")
    base_ref = checkpoint_ref(ctx.thread_id, "merged", f"{n}-{safety_id}-base")
    recorded: list[Effect] = []
    # The source workspace may be shared: another fork made in the same
    # folder, a second thread on the project. A merge writes (and deletes)
    # files there, so — like a restore — it is refused while a run of
    # another thread is active in that folder (naming it), and a run that
    # starts meanwhile waits for the merge to end (workspace_guard.py).
    token = yield GuardRestore(GUARDED, state.thread.workspace)
    try:
        outcome: MergeOutcome = yield MergeForkFiles(
            state.thread.workspace, found.fork.workspace, fork_base, theirs.ref or "", base_here, base_ref, theirs_ref,
            safety_ref, params.on_conflict == "markers",
            lambda capture: _safety_record(ctx, capture, safety_id, safety_ref, n, theirs, found.fork.id, recorded))
    except CheckpointError as exc:
        batch = ctx.batch()
        settle_effect(batch, recorded[0] if recorded else None, "done", reason=f"merge of fork files failed: {exc}")
        if batch:
            yield Commit(batch)
        undo = f"; checkpoint {safety_id} holds this workspace as it was" if recorded else ""
        raise InvalidState(f"the files of fork {found.fork.id} could not be merged: {exc}{undo}; the message was "
                           "not sent", threadId=found.fork.id, reason=exc.reason) from None
    finally:
        yield EndRestore(token)
    return _files_merge(outcome, theirs, safety_id, theirs_ref), recorded[0] if recorded else None


def _files_merge(outcome: MergeOutcome, theirs: Checkpoint, safety_id: str, theirs_ref: str) -> FilesMerge:
    applied = outcome.applied
    too_large = [PathReason(path=s["path"], reason=s.get("reason", "too_large"))
                 for s in theirs.summary.get("skipped", [])]
    left = [PathReason(path=n.path, reason=n.reason) for n in applied.not_restored] if applied is not None else []
    status: Literal["merged", "conflicts", "conflicts_marked"] = (
        "merged" if not outcome.conflicts else "conflicts_marked" if applied is not None else "conflicts")
    return FilesMerge(
        status=status, written=list(applied.written) if applied else [], deleted=list(applied.deleted) if applied else [],
        conflicts=[PathReason(path=p, reason=why) for p, why in sorted(outcome.conflicts.items())],
        not_merged=too_large + left, safety_checkpoint_id=safety_id, theirs_checkpoint_id=theirs.id,
        base_commit=outcome.base, theirs_commit=outcome.theirs, theirs_ref=theirs_ref,
    )


def recorded(batch: ThreadBatch, transfer: ContextTransfer, run: Run, marker: Effect | None) -> wire_records.FilesMerge | None:
    """With the message's commit: the merge's outbox entry settles and
    ``merge_back.files`` names what was written and every conflicting path;
    the answer's ``files``."""
    files = transfer.files_merge
    if files is None:
        return None
    settle_effect(batch, marker, "done", reason=f"merge of fork files: {files.status}")
    batch.emit("merge_back.files", run_id=run.id, node_id=run.root_node_id, transferId=transfer.id,
               forkThreadId=transfer.source_thread_id, **to_wire(files))
    return msgspec.convert(to_wire(files), wire_records.FilesMerge)

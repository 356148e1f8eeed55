"""Archiving a thread (issue 27): ``thread.archive`` / ``thread.unarchive``.

An archived thread leaves ``thread.list`` (unless ``includeArchived``) and
stays readable. Archiving releases its agent session and — for a fork that
works in a git worktree of its own — removes that worktree after a final
checkpoint (``kind: archive``) of it; its branch stays. Files no checkpoint
can hold (over the size cap, unreadable, a nested repository) would be lost
with the tree: then the archive is refused and names them, and nothing
changes but the final checkpoint being listed. ``thread.unarchive`` brings the
thread back, and its worktree from that checkpoint.

Refused while a run of the thread is active or queued: archive a thread at
rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from agentd.protocol import results
from agentd.protocol.errors import InvalidState
from agentd.store.ids import new_id
from agentd.store.records import Checkpoint, to_wire

from .checkpoints.errors import CheckpointError
from .checkpoints.refs import checkpoint_ref
from .effects import NO_SEQ, Capture, Commit, Decision, RecreateWorktree, RemoveWorktree, StopSession, Transition, \
    WorktreeMade
from .graph import set_thread

if TYPE_CHECKING:
    from .checkpoints.results import CaptureResult
    from .context import ThreadContext
    from .messages import Command


def _at_rest(ctx: ThreadContext, what: str) -> None:
    state = ctx.state
    busy = state.active.run if state.active is not None else (state.queued[0] if state.queued else None)
    if busy is not None:
        raise InvalidState(f"thread {ctx.thread_id} has run {busy.id} {busy.status}: {what} a thread at rest "
                           "(stop it, cancel its queued runs, or let them end)", threadId=ctx.thread_id, runId=busy.id)


def _not_checkpointed(capture: CaptureResult) -> list[dict[str, str]]:
    summary = capture.summary
    return ([{"path": s.path, "reason": s.reason} for s in summary.skipped]
            + [{"path": p, "reason": "nested_repository"} for p in summary.nested_repos])


def _final_checkpoint(ctx: ThreadContext) -> Transition:
    """Capture the worktree as the thread's ``archive`` checkpoint (recorded
    at once); refuse when it leaves files out."""
    thread = ctx.state.thread
    n = 1 + sum(1 for c in ctx.store.thread_checkpoints(thread.id) if c.kind == "archive")
    checkpoint_id = new_id("ckp")
    ref = checkpoint_ref(thread.id, "archive", f"{n}-{checkpoint_id}")
    try:
        capture: CaptureResult = yield Capture(thread.workspace, ref)
    except CheckpointError as exc:
        raise InvalidState(f"thread {thread.id} is not archived: its worktree could not be checkpointed ({exc}), "
                           "so it is kept", threadId=thread.id) from None
    batch = ctx.batch()
    final = Checkpoint(id=checkpoint_id, thread_id=thread.id, scope="pre_rollback", kind="archive", ordinal=n,
                       commit=capture.commit, ref=ref, summary=msgspec.to_builtins(capture.summary),
                       workspace=thread.workspace, created_at=batch.now)
    batch.put(final)
    batch.emit("checkpoint.captured", checkpoint=to_wire(final))
    yield Commit(batch)
    left = _not_checkpointed(capture)
    if left:
        named = ", ".join(f"{f['path']} ({f['reason']})" for f in left[:5])
        raise InvalidState(
            f"thread {thread.id} is not archived: its worktree holds {len(left)} file(s) no checkpoint holds, which "
            f"removing it would lose: {named}{' and more' if len(left) > 5 else ''}; move them or commit them on "
            f"branch {thread.workspace_source.branch if thread.workspace_source else '?'}, then archive again",
            threadId=thread.id, notCheckpointed=left, checkpointId=final.id)
    return final


def thread_archive(ctx: ThreadContext, command: Command) -> Transition:
    """``thread.archive``: hide the thread, release its session, remove its
    worktree after a final checkpoint (its branch stays)."""
    state = ctx.state
    thread = state.thread
    if thread.archived_at is not None:
        return results.ThreadArchiveResult(thread_id=thread.id, archived=True, worktree_removed=False, seq=NO_SEQ)
    _at_rest(ctx, "archive")
    source = thread.workspace_source
    final = None
    if source is not None and source.kind == "worktree" and (yield WorktreeMade(source)):
        if not ctx.checkpoints_on:
            raise InvalidState(f"thread {thread.id} is not archived: its worktree can be removed only after a final "
                               "checkpoint, and checkpoints are off", threadId=thread.id)
        final = yield from _final_checkpoint(ctx)
        yield RemoveWorktree(source)
    batch = ctx.batch()
    set_thread(batch, state, archived_at=batch.now)
    branch = source.branch if source is not None else None
    batch.emit("thread.archived", worktreeRemoved=final is not None, checkpointId=final.id if final else None,
               branch=branch, path=source.path if final is not None and source is not None else None)
    result = results.ThreadArchiveResult(thread_id=thread.id, archived=True, worktree_removed=final is not None,
                                         checkpoint_id=final.id if final else None, branch=branch, seq=NO_SEQ)
    batch.record_receipt(command.command_id, command.method, result)
    return Decision(batch, result, effects=[StopSession("archived")])


def thread_unarchive(ctx: ThreadContext, command: Command) -> Transition:
    """``thread.unarchive``: the thread is listed again; a worktree archiving
    removed is made again from its final checkpoint."""
    state = ctx.state
    thread = state.thread
    if thread.archived_at is None:
        return results.ThreadUnarchiveResult(thread_id=thread.id, archived=False, worktree_restored=False, seq=NO_SEQ)
    finals = sorted((c for c in ctx.store.thread_checkpoints(thread.id) if c.kind == "archive" and c.commit),
                    key=lambda c: (c.created_at, c.id))
    final = finals[-1] if finals else None
    source = thread.workspace_source
    restored = False
    if source is not None and source.kind == "worktree" and final is not None and final.commit:
        if not (yield WorktreeMade(source)):
            yield RecreateWorktree(source, final.commit)
            restored = True
    batch = ctx.batch()
    set_thread(batch, state, archived_at=None)
    batch.emit("thread.unarchived", worktreeRestored=restored, checkpointId=final.id if restored and final else None)
    result = results.ThreadUnarchiveResult(thread_id=thread.id, archived=False, worktree_restored=restored,
                                           checkpoint_id=final.id if restored and final else None, seq=NO_SEQ)
    batch.record_receipt(command.command_id, command.method, result)
    return Decision(batch, result)

"""Merge-back: a fork's work comes home with a message on the thread it was
forked from (SPEC F7).

``thread.message.send {threadId, text, mergeBack: {forkThreadId}}`` records,
with the message's run, a ``merge_back`` ContextTransfer from the fork into
this thread — ``sourcePoint`` the fork's latest stable point (its newest
completed run), ``basePoint`` the fork point or, when the fork was merged
before, that merge's source point — and nothing else (``prepare`` /
``record_request``). The delta is built lazily when that run starts
(``build``, from transfers.py's context resolution), so what the agent is
given is what the graph holds then: per fork run its conclusion, commands
and tests with their outcome, decisions, open questions and unanswered
requests; the files the fork changed (from a checkpoint diff where there is
one, else its file-change nodes); and — when the fork works in a workspace of
its own — which of those files differ here. It is stored as a ``delta``
ContextHandoff and given with the message; the transfer is consumed with the
turn, in the same transaction (lineage.py). Merge-back touches files only
with ``mergeBack.files`` (merge_files.py, at the send); the handoff then says
what that merge wrote.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentd.protocol.errors import InvalidParams, InvalidState, NotFound
from agentd.store.db import Store
from agentd.store.ids import new_id
from agentd.store.records import AppThread, Checkpoint, ContextTransfer, FilesMerge, Run, SourcePoint, to_wire

from .checkpoints.errors import CheckpointError
from .checkpoints.results import FileChange
from .effects import CompareFiles, Diff, Transition
from .handoff import MergeFiles, build_merge_handoff, file_paths
from .lineage import in_history
from .points import fork_transfer, run_point

if TYPE_CHECKING:
    from .context import ThreadContext
    from .graph import ThreadBatch

FIELD = "mergeBack.forkThreadId"


@dataclass(frozen=True)
class MergeDelta:
    """What a merge of ``fork`` into its source carries: the fork's runs after
    ``base`` up to ``source`` (app run ids, oldest first)."""

    fork: AppThread
    base: SourcePoint
    source: SourcePoint
    run_ids: tuple[str, ...]
    #: the merge-back whose source point ``base`` is (None: the fork point)
    since_merge: ContextTransfer | None


def _made_from(store: Store, thread_id: str, fork: AppThread) -> ContextTransfer | None:
    """The transfer that made ``fork`` from ``thread_id``: a fork's ``fork``
    transfer, or — for a task delegated from it with a workspace of its own
    (``workspace: worktree`` or ``copy``, issue 27) — its ``subagent_spawn``."""
    made = fork_transfer(store, fork.id)
    if made is not None:
        return made if made.source_thread_id == thread_id else None
    source = fork.workspace_source
    if (fork.relationship_to_parent != "delegated_task" or fork.parent_thread_id != thread_id or source is None
            or source.source_thread_id != thread_id):
        return None
    return next((t for t in store.thread_transfers(fork.id)
                 if t.type == "subagent_spawn" and t.target_thread_id == fork.id and t.source_thread_id == thread_id),
                None)


def _fork_of(store: Store, thread_id: str, fork_id: str) -> tuple[AppThread, ContextTransfer]:
    """The fork ``fork_id`` of ``thread_id`` (or a task delegated from it
    with a workspace of its own) and the transfer that made it.

    Raises:
        NotFound: no such thread.
        InvalidParams: it is neither.
    """
    fork = store.thread(fork_id)
    if fork is None:
        raise NotFound(f"no thread {fork_id}", threadId=fork_id)
    made = _made_from(store, thread_id, fork) if fork_id != thread_id else None
    if made is None:
        what = (f"a {fork.relationship_to_parent} of {fork.parent_thread_id}" if fork.parent_thread_id
                else "a thread of its own")
        raise InvalidParams(
            f"thread {fork_id} is not a fork of thread {thread_id} (it is {what}); merge-back brings a fork's work "
            "(or that of a task delegated with a workspace of its own) home to the thread it was made from",
            field=FIELD, threadId=fork_id,
        )
    return fork, made


def delta(store: Store, thread_id: str, fork_id: str, *, source: SourcePoint | None = None) -> MergeDelta:
    """The fork's runs a merge into ``thread_id`` would carry now: after the
    last consumed merge-back of this fork (else the fork point), up to
    ``source`` (default: the fork's latest stable point, its newest completed
    run).

    Raises:
        NotFound / InvalidParams: see ``_fork_of``.
        InvalidState: the fork has no completed run to merge.
    """
    fork, made = _fork_of(store, thread_id, fork_id)
    runs = [run for run in store.thread_runs(fork_id) if in_history(run)]
    if source is None:
        completed = [run for run in runs if run.status == "completed"]
        if not completed:
            raise InvalidState(f"fork {fork_id} has no completed run yet: there is nothing to merge back", threadId=fork_id)
        last = completed[-1]
        checkpoint = store.get(Checkpoint, last.checkpoint_id) if last.checkpoint_id else None
        extra = {"checkpoint_id": checkpoint.id} if checkpoint is not None and checkpoint.status == "captured" else {}
        source = run_point(store, "latest_stable", last, **extra)
    upto = store.run(source.run_id) if source.run_id else None
    merged = [t for t in store.thread_transfers(thread_id)
              if t.type == "merge_back" and t.source_thread_id == fork_id and t.target_thread_id == thread_id
              and t.status == "consumed"]
    previous = max(merged, key=lambda t: (t.consumed_at or 0.0, t.id), default=None)
    base_run = store.run(previous.source_point.run_id) if previous is not None and previous.source_point.run_id else None
    after = base_run.ordinal if base_run is not None else 0
    until = upto.ordinal if upto is not None else 0
    run_ids = tuple(run.id for run in runs if after < run.ordinal <= until)
    return MergeDelta(fork, previous.source_point if previous is not None else made.source_point, source, run_ids, previous)


def prepare(store: Store, thread_id: str, fork_id: str) -> MergeDelta:
    """Check a ``mergeBack`` of a message before anything is stored.

    Raises:
        NotFound, InvalidParams, InvalidState: see ``delta``; also when the
            fork did nothing since its last merge-back.
    """
    found = delta(store, thread_id, fork_id)
    if not found.run_ids:
        raise InvalidState(
            f"fork {fork_id} has no run since its last merge-back ({found.since_merge.id if found.since_merge else '-'}): "
            "there is nothing new to merge", threadId=fork_id,
        )
    return found


def record_request(batch: ThreadBatch, thread_id: str, found: MergeDelta, run: Run, *,
                   files_merge: FilesMerge | None = None) -> ContextTransfer:
    """The pending ``merge_back`` transfer of ``run`` (the message's run),
    resolved when that run starts; ``files_merge``: what the merge of the
    fork's files did (merge_files.py)."""
    transfer = ContextTransfer(
        id=new_id("xfr"), type="merge_back", source_thread_id=found.fork.id, target_thread_id=thread_id,
        source_point=found.source, base_point=found.base, source_provider=found.source.provider,
        run_id=run.id, source_run_ids=list(found.run_ids), reason=f"merge_back: fork {found.fork.id}",
        created_by="user", created_at=batch.now, files_merge=files_merge,
    )
    batch.put(transfer)
    batch.emit("context_transfer.created", run_id=run.id, node_id=run.root_node_id, transfer=to_wire(transfer))
    return transfer


# -- the files a fork changed -----------------------------------------------------------------


def fork_files(ctx: ThreadContext, found: MergeDelta, workspace: str) -> Transition:
    """The files the merge's fork runs changed: a diff from the first run's
    baseline checkpoint to the last run's checkpoint where both were captured
    (else the runs' file-change nodes); and, for a fork in another workspace
    than ``workspace``, which of them differ here (compared byte for byte in
    a worker thread). The effects: git's diff, the comparison; the
    result: the ``MergeFiles``."""
    store = ctx.store
    runs = [run for run in map(store.run, found.run_ids) if run is not None]
    files: tuple[str, ...] = ()
    checkpoints = None
    source = "nodes"
    target = store.get(Checkpoint, runs[-1].checkpoint_id) if runs and runs[-1].checkpoint_id else None
    first = store.get(Checkpoint, runs[0].checkpoint_id) if runs and runs[0].checkpoint_id else None
    base = store.get(Checkpoint, first.base_checkpoint_id) if first and first.base_checkpoint_id else None
    if base is None and found.base.checkpoint_id:
        # No baseline of the fork's own (e.g. checkpoints came on later): the
        # fork point's checkpoint — for a fork from a subagent node, the
        # files as that child left them.
        base = store.get(Checkpoint, found.base.checkpoint_id)
    if (ctx.checkpoints_on and target is not None and base is not None and target.commit and base.commit
            and target.status == "captured" and base.status == "captured" and target.workspace == base.workspace):
        try:
            result = yield Diff(target.workspace, target.commit, base.commit, max_bytes=0)
        except CheckpointError:
            result = None
        if result is not None:
            source, checkpoints = "checkpoint", (base.id, target.id)
            files = tuple(describe_change(f) for f in result.files)
            paths = [f.path for f in result.files]
    if source == "nodes":
        paths = list(dict.fromkeys(path for run in runs for node in store.run_nodes(run.id)
                                   if node.kind == "file_change" and node.attempt_id == run.selected_attempt_id
                                   for path in file_paths(node)))
        files = tuple(paths)
    fork_ws = found.fork.workspace
    # None: the fork works in this same folder (as resolved on disk).
    differ = (yield CompareFiles(fork_ws, workspace, tuple(paths))) if fork_ws else None
    if differ is None:
        return MergeFiles(source, files, checkpoints)
    return MergeFiles(source, files, checkpoints, fork_workspace=fork_ws, differ=tuple(differ))


def describe_change(change: FileChange) -> str:
    """A changed file as handoffs name it: ``path (added, +3 −0)``."""
    sign = "binary" if change.binary else f"+{change.insertions} −{change.deletions}"
    renamed = f" from {change.old_path}" if change.old_path else ""
    return f"{change.path} ({change.change}{renamed}, {sign})"


def build(ctx: ThreadContext, transfer: ContextTransfer) -> Transition:
    """The delta handoff of a pending merge, as the graph is now (the run
    carrying it is starting): since the last merge consumed by then, up to
    the source point recorded with the message."""
    store = ctx.store
    state = ctx.state
    found = delta(store, state.thread_id, transfer.source_thread_id, source=transfer.source_point)
    files = yield from fork_files(ctx, found, state.thread.workspace)
    fork = found.fork
    label = f"\"{fork.title}\", {fork.id}" if fork.title else fork.id
    base_run = store.run(found.base.run_id) if found.base.run_id else None
    made = "delegated" if fork.relationship_to_parent == "delegated_task" else "forked"
    if found.since_merge is not None:
        since = f"the last merge-back ({found.since_merge.id})"
    elif base_run is not None:
        since = f"it was {made} {'in' if made == 'delegated' else 'after'} run {base_run.ordinal} of this conversation"
    else:
        since = f"it was {made}"
    built = build_merge_handoff(store, found.run_ids, fork_label=label, since=since, files=files,
                                reason=transfer.reason, cap=ctx.config.handoff_max_chars, delegated=made == "delegated")
    if transfer.files_merge is not None:
        built = built.with_section(describe_files(transfer.files_merge))
    return found, built, files


def describe_files(files: FilesMerge) -> str:
    """The handoff's section on the files (what the agent is told was merged)."""
    lines = ["Files merged into this workspace from the fork (three-way merge):"]
    if files.status == "conflicts":
        lines = ["The fork's files were NOT merged into this workspace: they conflict with changes here "
                 "(nothing was written)."]
    elif files.status == "conflicts_marked":
        lines = ["The fork's files were merged into this workspace WITH CONFLICT MARKERS to resolve:"]
    lines += [f"- {p} (written)" for p in files.written] + [f"- {p} (deleted)" for p in files.deleted]
    lines += [f"- {c.path} (conflict: {c.reason})" for c in files.conflicts]
    lines += [f"- {n.path} (not merged: {n.reason})" for n in files.not_merged]
    if len(lines) == 1:
        lines.append("- nothing changed")
    lines.append(f"Restoring checkpoint {files.safety_checkpoint_id} undoes the merge.")
    return "\n".join(lines)

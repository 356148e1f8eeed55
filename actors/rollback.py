"""``rollback.toRun``: take a thread back to the state after one of its runs —
files and the agent's memory together (SPEC F13, F14).

In the thread's actor, holding its lock, in this order:

1. Refused while a run is active or waiting; queued runs are cancelled first
   (their messages were written against a state that is going away).
2. A ``pre_rollback`` safety checkpoint of the workspace as it is now,
   committed (with the outbox entry naming it) before any file is touched,
   then the target checkpoint's files put back (restoring.restore_files). A
   restore that leaves paths as they were fails the rollback saying which
   files were and were not restored and why; the safety checkpoint is
   recorded, so nothing the person had is lost, and no run or agent memory
   has changed.
3. The agent's memory (``provider_memory.py``): reverted natively where the
   runtime can (Codex ``thread/revert``, the scripted agent
   ``thread/rollback``), else its provider thread is retired and the next
   run starts a fresh one with a stored ``full_thread_summary`` handoff of
   the kept runs (``rebuilt``: Claude, which cannot rewind a session).
4. The later runs are marked ``rolled_back`` (kept and shown, never deleted),
   their checkpoints ``stale``, all in one batch with ``thread.rolled_back``.

A daemon killed between 2 and 4 leaves a pending ``rollback`` outbox entry;
the next start's reconciliation retires the thread's provider threads (their
memory may or may not have been reverted) so the next run rebuilds the
agent's context from the graph, which still shows every run, and names the
safety checkpoint (listed since before the files were touched) that takes
the files back.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from agentd.protocol import results, wire
from agentd.protocol.results import ProviderRollback
from agentd.protocol.errors import InvalidParams, InvalidState, NotFound, Unsupported
from agentd.store.db import Store, struct_copy
from agentd.store.ids import new_id
from agentd.store.reconcile import ROLLBACK
from agentd.store.records import Checkpoint, Effect, ExecutionNode, Run, to_wire

from . import checkpointing, graph, lineage, provider_memory, restoring, run_control
from .checkpoints.errors import CheckpointError
from .context import ThreadContext
from .effects import NO_SEQ, Commit, Decision, Diff, RollbackChildMemory, Transition
from .graph import ThreadBatch
from .messages import Command


def target_checkpoint(ctx: ThreadContext, ordinal: int) -> Checkpoint:
    """The captured root checkpoint that is the state after run ``ordinal``
    (0: the baseline before the thread's first run)."""
    store = ctx.store
    thread_id = ctx.thread_id
    runs = {run.ordinal: run for run in store.thread_runs(thread_id)}
    if ordinal > 0:
        run = runs.get(ordinal)
        if run is None:
            raise NotFound(f"thread {thread_id} has no run {ordinal} (it has {ctx.state.thread.run_count})",
                           threadId=thread_id, targetOrdinal=ordinal)
        if run.status == "rolled_back":
            raise InvalidState(f"run {ordinal} ({run.id}) was rolled back already; roll back to a run still in the thread",
                               threadId=thread_id, runId=run.id, targetOrdinal=ordinal)
        if not lineage.in_history(run):
            raise InvalidState(f"run {ordinal} ({run.id}) is {run.status} and never reached a provider, so it has no "
                               "checkpoint; roll back to an earlier run", threadId=thread_id, runId=run.id,
                               targetOrdinal=ordinal)
        checkpoint = store.get(Checkpoint, run.checkpoint_id) if run.checkpoint_id else None
        if checkpoint is None:
            raise InvalidState(f"run {ordinal} ({run.id}) has no checkpoint (it ended before checkpoints were "
                               "captured); nothing to restore", threadId=thread_id, runId=run.id, targetOrdinal=ordinal)
    else:
        baselines = [c for c in store.thread_checkpoints(thread_id) if c.kind == "baseline" and c.ordinal == 0]
        if not baselines:
            raise InvalidState(f"thread {thread_id} has no checkpoint from before its first run", threadId=thread_id,
                               targetOrdinal=0)
        checkpoint = max(baselines, key=lambda c: (c.status == "captured", c.created_at))
    if checkpoint.status != "captured":
        raise InvalidState(
            f"the checkpoint after run {ordinal} ({checkpoint.id}) is {checkpoint.status}"
            + (f" ({checkpoint.reason}: {checkpoint.detail})" if checkpoint.reason else "")
            + ": it holds no files to go back to", threadId=thread_id, checkpointId=checkpoint.id,
            status=checkpoint.status, targetOrdinal=ordinal,
        )
    return checkpoint


def later_runs(ctx: ThreadContext, ordinal: int) -> list[Run]:
    """The runs a rollback to ``ordinal`` undoes: every ended run after it
    that is not rolled back already."""
    return [run for run in ctx.store.thread_runs(ctx.thread_id)
            if run.ordinal > ordinal and run.status not in ("queued", "running", "waiting", "rolled_back")]


def refuse_legacy_history(ctx: ThreadContext, *, allow_rebuild: bool) -> None:
    """A thread whose current provider thread has a legacy history (Codex's
    ``historyMode: legacy``) cannot be rewound natively: refused before
    anything changes, unless the caller accepts a rebuilt memory (seed 002:
    check the history mode before a rollback, fail explicitly on legacy)."""
    pt = ctx.state.provider_thread
    if allow_rebuild or pt is None or pt.history_mode != "legacy" or pt.status == "unusable":
        return
    if not ctx.adapter(pt.provider).capabilities.rollback:
        return  # rebuilt anyway: the runtime never rewinds
    raise Unsupported(
        f"thread {ctx.thread_id}'s provider thread {pt.id} on {pt.provider} has a legacy history, which "
        f"{pt.provider} cannot roll back; pass allowRebuild: true (agentd rollback --allow-rebuild) to roll back the "
        "files and start the agent afresh with a summary of the kept runs",
        threadId=ctx.thread_id, providerThreadId=pt.id, historyMode="legacy",
    )


def rollback_to_run(ctx: ThreadContext, command: Command) -> Transition:
    """``rollback.toRun {threadId, targetOrdinal}``: see the module docstring."""
    params: wire.RollbackToRunParams = command.params
    state = ctx.state
    thread_id = ctx.thread_id
    if not ctx.checkpoints_on:
        raise InvalidState("checkpoints are off in this agentd, so there is nothing to roll back to")
    if state.active is not None:
        raise InvalidState(
            f"thread {thread_id} has run {state.active.run.id} {state.active.run.status}: stop it (thread.stop) "
            "before rolling back", threadId=thread_id, runId=state.active.run.id,
        )
    target = target_checkpoint(ctx, params.target_ordinal)
    undone = later_runs(ctx, params.target_ordinal)
    refuse_legacy_history(ctx, allow_rebuild=params.allow_rebuild)

    # An outbox entry first: a daemon killed from here until the final commit
    # leaves a trace the next start turns into retired provider threads.
    marker = ctx.batch()
    effect = Effect(id=new_id("eff"), kind=ROLLBACK, thread_id=thread_id, replay_safe=False, created_at=marker.now,
                    payload={"targetOrdinal": params.target_ordinal, "checkpointId": target.id,
                             "runIds": [run.id for run in undone]})
    marker.put(effect)
    yield Commit(marker)

    restored = yield from restoring.restore_files(ctx, target, effect=effect)
    memory = yield from provider_memory.roll_back(ctx, {run.id for run in undone})

    batch = ctx.batch()
    why = f"rolled_back: the thread was rolled back to run {params.target_ordinal}"
    for run in list(state.queued):
        run_control.cancel_queued_run(ctx, batch, run, why)
    if state.thread.held_run_ids:
        graph.set_thread(batch, state, held_run_ids=[], queue_held=False)
    stale = _undo_runs(ctx.store, batch, thread_id, undone, params.target_ordinal, why)
    graph.supersede_transfers(batch, ctx.store.thread_transfers(thread_id), {run.id for run in undone}, why)
    memory.apply(batch, state)
    safety = restored.safety  # committed before the files were touched
    graph.settle_effect(batch, restored.effect, "done")
    graph.set_thread(batch, state)
    event = results.ThreadRolledBack(
        thread_id=thread_id, target_ordinal=params.target_ordinal, checkpoint_id=target.id,
        rolled_back_run_ids=[run.id for run in undone], restored_files=restored.paths, path_bytes=restored.path_bytes,
        provider_rollback=memory.kind, provider_rollback_reason=memory.reason,
        retired_provider_thread_ids=memory.retired_ids, safety_checkpoint_id=safety.id,
        stale_checkpoint_ids=[c.id for c in stale],
    )
    target_run = ctx.store.get(Run, target.run_id) if params.target_ordinal > 0 and target.run_id else None
    batch.emit("thread.rolled_back", run_id=target_run.id if target_run else None,
               node_id=target_run.root_node_id if target_run else None, **msgspec.to_builtins(event))
    answer = results.RollbackToRunResult(**msgspec.structs.asdict(event), seq=NO_SEQ)
    batch.record_receipt(command.command_id, command.method, answer)
    return Decision(batch, answer)


def _undo_runs(store: Store, batch: ThreadBatch, thread_id: str, undone: list[Run], target_ordinal: int,
               why: str) -> list[Checkpoint]:
    """Mark the ``undone`` runs ``rolled_back`` and their checkpoints
    ``stale`` (kept and shown, never deleted); the stale checkpoints."""
    for run in undone:
        rolled = struct_copy(run, status="rolled_back", reason=why, status_before_rollback=run.status,
                             rolled_back_at=batch.now)
        batch.put(rolled)
        batch.emit("run.rolled_back", run_id=run.id, node_id=run.root_node_id, run=to_wire(rolled),
                   targetOrdinal=target_ordinal)
    undone_ids = {run.id for run in undone}
    stale = [c for c in store.thread_checkpoints(thread_id)
             if c.status == "captured" and c.kind != "pre_rollback"
             and (c.run_id in undone_ids and not (c.kind == "baseline" and c.ordinal <= target_ordinal))]
    for checkpoint in stale:
        checkpoint = struct_copy(checkpoint, status="stale", reason="rolled_back",
                                 detail=f"the thread was rolled back to run {target_ordinal}")
        batch.put(checkpoint)
        batch.emit("checkpoint.stale", run_id=checkpoint.run_id, node_id=checkpoint.node_id, checkpoint=to_wire(checkpoint))
    return stale


# -- rollback.node --------------------------------------------------------------------------


@dataclass(frozen=True)
class ChildMemoryRollback:
    """In a child thread's actor (a delegated task, a threaded subagent):
    its agent's memory goes back to the end of its run ``keep_ordinal``
    (0: before its first run), because its parent's ``rollback.node`` put its
    files back to the child's checkpoint."""

    thread_id: str
    keep_ordinal: int
    node_id: str


def child_memory_rollback(ctx: ThreadContext, command: Command) -> Transition:
    """``rollback.node``'s part in the child's own thread: its later runs are
    ``rolled_back`` and its provider thread reverted to the point the child
    checkpoint holds — natively where the runtime can, else rebuilt (as
    ``rollback.toRun`` does for the memory); no file is touched here."""
    params: ChildMemoryRollback = command.params
    state = ctx.state
    if state.active is not None:
        raise InvalidState(f"the child's thread {ctx.thread_id} has run {state.active.run.id} {state.active.run.status}",
                           threadId=ctx.thread_id, runId=state.active.run.id)
    undone = later_runs(ctx, params.keep_ordinal)
    memory = yield from provider_memory.roll_back(ctx, {run.id for run in undone})
    batch = ctx.batch()
    why = f"rolled_back: node {params.node_id} of the parent thread was rolled back to this task's checkpoint"
    for run in list(state.queued):
        run_control.cancel_queued_run(ctx, batch, run, why)
    _undo_runs(ctx.store, batch, ctx.thread_id, undone, params.keep_ordinal, why)
    graph.supersede_transfers(batch, ctx.store.thread_transfers(ctx.thread_id), {run.id for run in undone}, why)
    memory.apply(batch, state)
    graph.set_thread(batch, state)
    batch.emit("thread.memory_rolled_back", byNodeId=params.node_id, keepOrdinal=params.keep_ordinal,
               rolledBackRunIds=[run.id for run in undone], providerRollback=memory.kind,
               providerRollbackReason=memory.reason, retiredProviderThreadIds=memory.retired_ids)
    return Decision(batch, {"kind": memory.kind, "reason": memory.reason, "runIds": [run.id for run in undone]},
                    seq=False)


def _descendants(store: Store, run_id: str, node_id: str) -> set[str]:
    """The nodes of the run nested under ``node_id`` (at any depth)."""
    parents = {node.id: node.parent_node_id for node in store.run_nodes(run_id)}
    out: set[str] = set()
    for candidate in parents:
        seen = set()
        parent = parents.get(candidate)
        while parent is not None and parent not in seen:
            if parent == node_id:
                out.add(candidate)
                break
            seen.add(parent)
            parent = parents.get(parent)
    return out


def _node_target(ctx: ThreadContext, params: wire.RollbackNodeParams) -> tuple[ExecutionNode, Checkpoint]:
    """The node and its child-scope checkpoint a ``rollback.node`` names,
    checked (``not_found``, ``invalid_params``, ``invalid_state``)."""
    store = ctx.store
    state = ctx.state
    thread_id = ctx.thread_id
    node = store.get(ExecutionNode, params.node_id)
    if node is None or node.thread_id != thread_id:  # pragma: no cover - routed by the node's thread
        raise NotFound(f"no node {params.node_id}", nodeId=params.node_id)
    target = store.get(Checkpoint, params.checkpoint_id)
    if target is None:
        raise NotFound(f"no checkpoint {params.checkpoint_id}", checkpointId=params.checkpoint_id)
    if target.scope != "child" or target.node_id != node.id:
        raise InvalidParams(
            f"checkpoint {target.id} is not a child-scope checkpoint of node {node.id} (it is a {target.kind} "
            f"checkpoint{' of node ' + target.node_id if target.node_id else ''}); checkpoint.list shows each "
            "child checkpoint with its nodeId", field="checkpointId", checkpointId=target.id, nodeId=node.id,
        )
    target = checkpointing.captured_checkpoint(store, target.id)
    if state.active is not None:
        raise InvalidState(
            f"thread {thread_id} has run {state.active.run.id} {state.active.run.status}: stop it (thread.stop) "
            "before rolling back a node", threadId=thread_id, runId=state.active.run.id,
        )
    return node, target


def _changed_since(ctx: ThreadContext, node: ExecutionNode, target: Checkpoint) -> Transition:
    """The files changed between the child's checkpoint and its run's own
    (the parent's, or anything after the child): ``(paths, pathBytes)``."""
    store = ctx.store
    run = store.get(Run, node.run_id)
    parent_checkpoint = store.get(Checkpoint, run.checkpoint_id) if run is not None and run.checkpoint_id else None
    if not ctx.checkpoints_on or parent_checkpoint is None or not parent_checkpoint.commit or not target.commit:
        return [], {}
    try:
        diff = yield Diff(target.workspace or ctx.state.thread.workspace, parent_checkpoint.commit, target.commit,
                          max_bytes=0)
    except CheckpointError:
        return [], {}
    return (sorted(change.path for change in diff.files),
            {c.path: c.path_bytes for c in diff.files if c.path_bytes is not None})


def rollback_node(ctx: ThreadContext, command: Command) -> Transition:
    """``rollback.node {nodeId, checkpointId}``: put a child scope's files back
    as they were when that child (a subagent, a delegated task) ended.

    The checkpoint's files are restored after a ``pre_rollback`` safety
    capture, as ``rollback.toRun`` does; the checkpoints of the children
    nested under it become ``stale``. The parent's runs and the parent
    agent's memory are kept; ``parentChangedFiles`` names the files the
    parent (or anything after the child) had changed since, which are now
    back as the child left them."""
    params: wire.RollbackNodeParams = command.params
    store = ctx.store
    state = ctx.state
    thread_id = ctx.thread_id
    node, target = _node_target(ctx, params)
    parent_changed, parent_bytes = yield from _changed_since(ctx, node, target)
    restored = yield from restoring.restore_files(ctx, target)

    batch = ctx.batch()
    nested = _descendants(store, node.run_id, node.id)
    stale = [c for c in store.thread_checkpoints(thread_id)
             if c.scope == "child" and c.status == "captured" and c.node_id in nested]
    for checkpoint in stale:
        checkpoint = struct_copy(checkpoint, status="stale", reason="rolled_back",
                                 detail=f"node {node.id} was rolled back to its checkpoint {target.id}")
        batch.put(checkpoint)
        batch.emit("checkpoint.stale", run_id=checkpoint.run_id, node_id=checkpoint.node_id, checkpoint=to_wire(checkpoint))
    safety = restored.safety  # committed before the files were touched
    graph.settle_effect(batch, restored.effect, "done")
    child_thread = next((t.target_thread_id for t in store.thread_transfers(thread_id)
                         if t.type == "subagent_spawn" and t.source_point.node_id == node.id), None)
    shared = (target.workspace or state.thread.workspace) == state.thread.workspace
    kind: ProviderRollback = "none"
    why = "the subagent ran inside the parent's turn, whose history is kept"
    if child_thread is not None:
        # The child's memory goes back with its files (seed 000), in its own actor.
        child = store.thread(child_thread)
        keep = 1 if child is not None and child.relationship_to_parent == "delegated_task" else 0
        outcome = yield RollbackChildMemory(ChildMemoryRollback(child_thread, keep, node.id))
        if isinstance(outcome, dict):
            kind, why = outcome["kind"], f"the child's thread {child_thread}: {outcome['reason']}"
        else:
            why = f"the child's thread {child_thread} kept its memory: {outcome}; roll it back with rollback.toRun"
    event = results.NodeRolledBack(
        node_id=node.id, checkpoint_id=target.id, run_id=node.run_id, restored_files=restored.paths,
        safety_checkpoint_id=safety.id, stale_checkpoint_ids=[c.id for c in stale],
        # The parent's own history is kept: its runs stay as they are.
        provider_rollback=kind, provider_rollback_reason=why,
        child_thread_id=child_thread, shared_workspace=shared, parent_changed_files=parent_changed,
        path_bytes={**restored.path_bytes, **parent_bytes},
    )
    batch.emit("node.rolled_back", run_id=node.run_id, node_id=node.id, **msgspec.to_builtins(event))
    answer = results.RollbackNodeResult(**msgspec.structs.asdict(event), seq=NO_SEQ)
    batch.record_receipt(command.command_id, command.method, answer)
    return Decision(batch, answer)

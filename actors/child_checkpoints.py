"""Child-scope checkpoints (SPEC F13): a checkpointable child node of a run
(a ``subagent`` node, a ``delegated_task``) gets its own Checkpoint when it
ends — scope ``child`` under its parent's scope (``parent_node_id``: the run's
root node or the enclosing child node).

- Captured when the child ends (its ``item.completed``), or in the completion
  barrier for a child the provider left open (``capture_open_children``):
  the workspace as it is then, in the same shadow repository as the run's.
- Diffed against the previous child checkpoint under the same parent in this
  run, else the parent's base: the enclosing child's, and for a child of the
  root the run's baseline (the previous root checkpoint).
- A child checkpoint has the run's ordinal and never advances the run count:
  ``previous_root`` and the run numbering only look at scope ``root``.
- The run's own checkpoint references its children's summaries
  (``summary.children``, ``with_children``).

Like the run's, a child capture is announced by a ``checkpoint.capture``
outbox entry first (``scope: child`` in its payload), so a daemon killed
mid-capture leaves a ``missing`` child checkpoint, never a late capture.

A child shares the run's workspace, so its checkpoint holds whatever the
workspace is when it ends, the root's or a sibling's writes included; a child
with changes counts for SPEC F3 (``ActiveRun.changed_files``).
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.records import NODE_TERMINAL, Checkpoint, Effect, ExecutionNode, to_wire

from .checkpointing import CAPTURE_EFFECT, capture, capture_fields, previous_root, writes_in_flight
from .checkpoints.refs import checkpoint_ref
from .effects import Commit, PeekMailbox, Transition
from .handoff import detail_paths
from .providers.base import ItemCompleted, ItemStarted
from .graph import settle_effect

if TYPE_CHECKING:
    from agentd.store.db import Store

    from .context import ThreadContext
    from .graph import ThreadBatch
    from .state import ActiveRun

log = logging.getLogger(__name__)

#: node kinds that get a child-scope checkpoint when they end
CHECKPOINTABLE = frozenset({"subagent", "delegated_task"})

#: what a run's ``summary.children`` keeps of each child checkpoint
_CHILD_SUMMARY = ("filesChanged", "insertions", "deletions")


def is_checkpointable(node: ExecutionNode | None) -> bool:
    """True for a child node that gets its own checkpoint when it ends."""
    return node is not None and node.kind in CHECKPOINTABLE


def _run_children(store: Store, thread_id: str, run_id: str) -> list[Checkpoint]:
    return [c for c in store.thread_checkpoints(thread_id) if c.run_id == run_id and c.scope == "child"]


def child_base(store: Store, active: ActiveRun, node: ExecutionNode) -> Checkpoint | None:
    """The checkpoint a child's is diffed against: the newest captured child
    checkpoint under the same parent in this run, else the parent's base (an
    enclosing child's, recursively), else the run's baseline."""
    run = active.run
    captured = [c for c in _run_children(store, run.thread_id, run.id) if c.status == "captured"]
    nodes = {n.id: n for n in active.nodes.values()}
    while True:
        siblings = [c for c in captured if c.parent_node_id == node.parent_node_id]
        if siblings:
            return max(siblings, key=lambda c: (c.created_at, c.id))
        parent = nodes.get(node.parent_node_id or "")
        if parent is None or not is_checkpointable(parent):
            return previous_root(store, run.thread_id, run.ordinal)
        node = parent


def capture_child(ctx: ThreadContext, active: ActiveRun, node: ExecutionNode, batch: ThreadBatch) -> Transition:
    """Capture the child scope of ``node`` (which just ended): commit the
    ``checkpoint.capture`` outbox entry, capture, then put the Checkpoint,
    its ``checkpoint.<status>`` event and the settled entry into ``batch``
    (committed by the caller with the node's end). None when checkpoints are
    off or the node is not checkpointable."""
    if not ctx.checkpoints_on or not is_checkpointable(node):
        return None
    thread_id, run = ctx.thread_id, active.run
    workspace = ctx.state.thread.workspace
    checkpoint_id = new_id("ckp")
    marker = ctx.batch()
    effect = Effect(
        id=new_id("eff"), kind=CAPTURE_EFFECT, thread_id=thread_id, replay_safe=True, created_at=marker.now,
        payload={"checkpointId": checkpoint_id, "runId": run.id, "nodeId": node.id, "ordinal": run.ordinal,
                 "workspace": workspace, "scope": "child", "kind": "child", "parentNodeId": node.parent_node_id},
    )
    marker.put(effect)
    yield Commit(marker)
    base = child_base(ctx.store, active, node)
    # The node id makes the ref unique: one child checkpoint per node.
    ref = checkpoint_ref(thread_id, "child", f"{run.ordinal}-{node.id}")
    outcome = yield from capture(workspace, ref, base.commit if base else None)
    fields = capture_fields(outcome, ref, what=f"thread {thread_id}: capturing child {node.id} of run {run.id}")
    if not isinstance(outcome, BaseException) and outcome.files:
        active.changed_files = True
        # What the agent said it wrote elsewhere while git read the files.
        waiting = yield PeekMailbox()
        concurrent = concurrent_paths(waiting, active.attempt.id, workspace, {f.path for f in outcome.files})
        if concurrent:
            fields["concurrent_paths"] = concurrent
    checkpoint = Checkpoint(
        id=checkpoint_id, thread_id=thread_id, run_id=run.id, node_id=node.id, scope="child", kind="child",
        ordinal=run.ordinal, base_checkpoint_id=base.id if base else None, workspace=workspace,
        parent_node_id=node.parent_node_id, created_at=ctx.now(), **fields,
    )
    batch.put(checkpoint)
    settle_effect(batch, effect, "done")
    batch.emit(f"checkpoint.{checkpoint.status}", run_id=run.id, node_id=node.id, checkpoint=to_wire(checkpoint))
    return checkpoint


#: provider items that name the files they write
WRITING_ITEMS = frozenset({"file_change"})


def concurrent_paths(waiting: list[Any], attempt_id: str, workspace: str, captured: set[str]) -> list[str]:
    """The paths among ``captured`` (a child checkpoint's changed files) that
    file changes of the same attempt, reported after the child ended (the
    provider events ``waiting`` in the mailbox when the capture finished),
    name: written by the parent or a sibling meanwhile, not by the child."""
    named: set[str] = set()
    for item in waiting:
        if isinstance(item, (ItemStarted, ItemCompleted)) and item.attempt_id == attempt_id \
                and item.item_type in WRITING_ITEMS:
            for path in detail_paths(item.detail):
                if os.path.isabs(path):
                    path = os.path.relpath(path, workspace)
                named.add(path)
    return sorted(named & captured)


def capture_open_children(ctx: ThreadContext, active: ActiveRun) -> Transition:
    """In the completion barrier (or before a retry closes the attempt): the
    checkpointable children the provider left open end now, so their scopes
    are captured now, innermost first (a child's own children end before it)."""
    if not ctx.checkpoints_on:
        return
    open_children = [n for n in active.nodes.values() if is_checkpointable(n) and n.status not in NODE_TERMINAL]
    busy = writes_in_flight(ctx, active)
    if busy is not None and open_children:
        # The runtime died under them: their files may still be changing.
        own = ctx.batch()
        for node in open_children:
            checkpoint = Checkpoint(
                id=new_id("ckp"), thread_id=ctx.thread_id, run_id=active.run.id, node_id=node.id, scope="child",
                kind="child", ordinal=active.run.ordinal, status="missing", reason="write_in_flight", detail=busy,
                workspace=ctx.state.thread.workspace, created_at=own.now, parent_node_id=node.parent_node_id,
            )
            own.put(checkpoint)
            own.emit("checkpoint.missing", run_id=active.run.id, node_id=node.id, checkpoint=to_wire(checkpoint))
        yield Commit(own)
        return
    depth = {n.id: _depth(active, n) for n in open_children}
    for node in sorted(open_children, key=lambda n: -depth[n.id]):
        # Each committed on its own, before the barrier's batch: the run's
        # checkpoint reads them from the store (``with_children``).
        own = ctx.batch()
        yield from capture_child(ctx, active, node, own)
        yield Commit(own)


def _depth(active: ActiveRun, node: ExecutionNode) -> int:
    nodes = {n.id: n for n in active.nodes.values()}
    depth = 0
    while node.parent_node_id in nodes:
        node = nodes[node.parent_node_id]
        depth += 1
    return depth


def with_children(store: Store, checkpoint: Checkpoint) -> Checkpoint:
    """A run's checkpoint with ``summary.children``: its child checkpoints'
    ids, nodes, statuses and counts (nothing when the run had none)."""
    if checkpoint.run_id is None:
        return checkpoint
    children = _run_children(store, checkpoint.thread_id, checkpoint.run_id)
    if not children:
        return checkpoint
    summaries = [
        {"checkpointId": c.id, "nodeId": c.node_id, "status": c.status,
         **{k: c.summary[k] for k in _CHILD_SUMMARY if k in c.summary}}
        for c in sorted(children, key=lambda c: (c.created_at, c.id))
    ]
    return struct_copy(checkpoint, summary={**checkpoint.summary, "children": summaries})

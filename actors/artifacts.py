"""Plans, todo lists and questions (SPEC F16).

Three distinct artifacts: a ``proposed_plan`` (durable; implementing it starts
a new run or thread), a ``todo_list`` (live progress of the run: the root
node's list drives the run's progress view, a child node's list nests under
that node and never replaces it), and ``questions`` (made by requests.py).
At the completion barrier the run's live todo lists become ``final``
(``graph.finalize_artifacts``).

Handler: ``plan_implement``.
"""

from __future__ import annotations

from typing import Any, Iterable, Literal

from agentd.protocol.errors import InvalidState, NotFound
from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.records import ExecutionNode, PlanArtifact, to_wire

from . import graph, run_control
from .context import ThreadContext
from agentd.protocol import results

from .effects import NO_SEQ, Decision, SendInternal, StartNext
from .graph import ThreadBatch
from .messages import Command
from .providers.base import PlanUpdated
from .state import ThreadState

IMPLEMENT_PROMPT = "Implement the following plan.\n\n"


# -- transitions ------------------------------------------------------------------------


def plan_updated(batch: ThreadBatch, state: ThreadState, event: PlanUpdated, *, artifacts: Iterable[PlanArtifact]) -> PlanArtifact:
    """The provider's todo list for a node (the root, or the item's node):
    the node's ``todo_list`` among the run's ``artifacts`` is updated, or made."""
    active = state.active
    assert active is not None
    node = graph.parent_node(active, event.item_id)
    now = batch.now
    artifact = next((a for a in artifacts if a.kind == "todo_list" and a.node_id == node.id), None)
    if artifact is None:
        artifact = PlanArtifact(
            id=new_id("art"), thread_id=state.thread_id, run_id=active.run.id, node_id=node.id, kind="todo_list",
            steps=event.plan, created_at=now, updated_at=now,
        )
    else:
        artifact = struct_copy(artifact, steps=event.plan, updated_at=now)
    batch.put(artifact)
    batch.emit("plan.updated", run_id=active.run.id, node_id=node.id, artifact=to_wire(artifact),
               scope="root" if node.id == active.root.id else "child")
    return artifact


def propose_plan(batch: ThreadBatch, state: ThreadState, node: ExecutionNode) -> PlanArtifact:
    """A completed ``plan`` item becomes a ``proposed_plan`` artifact."""
    active = state.active
    assert active is not None
    now = batch.now
    artifact = PlanArtifact(
        id=new_id("art"), thread_id=state.thread_id, run_id=active.run.id, node_id=node.id, kind="proposed_plan",
        status="proposed", text=str(node.detail.get("text", "")), created_at=now, updated_at=now,
    )
    batch.put(artifact)
    batch.emit("plan.proposed", run_id=active.run.id, node_id=node.id, artifact=to_wire(artifact))
    return artifact


def plan_implemented(batch: ThreadBatch, plan: PlanArtifact, *, by: str, mode: Literal["new_run", "new_thread"]) -> PlanArtifact:
    """A proposed plan is being implemented by run or thread ``by``."""
    plan = struct_copy(plan, status="implemented", implemented_by=by, updated_at=batch.now)
    batch.put(plan)
    batch.emit("plan.implemented", run_id=plan.run_id, node_id=plan.node_id, artifact=to_wire(plan), mode=mode)
    return plan


# -- in the actor -----------------------------------------------------------------------


def on_plan_updated(ctx: ThreadContext, event: PlanUpdated) -> Decision:
    """The provider's todo list changed (``plan_updated``)."""
    active = ctx.state.active
    assert active is not None
    batch = ctx.batch()
    plan_updated(batch, ctx.state, event, artifacts=ctx.store.run_artifacts(active.run.id))
    return Decision(batch)


def plan_implement(ctx: ThreadContext, command: Command) -> Decision:
    """``plan.implement``: start work from a proposed plan, as a new run here
    (``new_run``) or in a new child thread."""
    params = command.params
    state = ctx.state
    plan = ctx.store.get(PlanArtifact, params.plan_id)
    if plan is None or plan.thread_id != state.thread_id or plan.kind != "proposed_plan":
        raise NotFound(f"no proposed plan {params.plan_id} in thread {state.thread_id}", planId=params.plan_id)
    if plan.status != "proposed":
        raise InvalidState(f"plan {plan.id} is already {plan.status} (by {plan.implemented_by})", planId=plan.id)
    text = IMPLEMENT_PROMPT + plan.text
    batch = ctx.batch()
    result: results.PlanImplementResult
    if params.mode == "new_run":
        run, _message = run_control.enqueue(batch, state, text, state.thread.provider, dispatch_mode="queue_after_active",
                                            root_of=run_control.root_of(ctx))
        target = run.id
        result = results.PlanImplementResult(plan_id=plan.id, run_id=run.id, thread_id=state.thread_id, seq=NO_SEQ)
        after: list[Any] = [StartNext()]
    else:
        thread = state.thread
        child = ctx.new_thread_record(
            title=f"Plan: {plan.text.splitlines()[0][:80] if plan.text else plan.id}", provider=thread.provider,
            workspace=thread.workspace, parent=thread, relationship="plan_implementation",
        )
        batch.put(child)
        batch.event("thread.created", thread_id=child.id, at=batch.now, thread=to_wire(child))
        target = child.id
        result = results.PlanImplementResult(plan_id=plan.id, thread_id=child.id, seq=NO_SEQ)
        # Cross-thread work runs after commit, in the child's own actor.
        after = [SendInternal(target, text)]
    plan_implemented(batch, plan, by=target, mode=params.mode)
    batch.record_receipt(command.command_id, command.method, result)
    return Decision(batch, result, after)

"""Plans, todo lists and questions for ThreadActor (SPEC F16).

Three distinct artifacts: a ``proposed_plan`` (durable; implementing it starts
a new run or thread), a ``todo_list`` (live progress of the run: the root
node's list drives the run's progress view, a child node's list nests under
that node and never replaces it), and ``questions`` (made by requests.py).
At the completion barrier the run's live todo lists become ``final``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentd.protocol.errors import InvalidState, NotFound
from agentd.store.batch import WriteBatch
from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.records import ExecutionNode, PlanArtifact, to_wire

from .active import ActiveRun
from .messages import Command
from .providers.base import PlanUpdated

if TYPE_CHECKING:
    from .thread_actor import ThreadActor

IMPLEMENT_PROMPT = "Implement the following plan.\n\n"


class ArtifactsMixin:
    def _todo_list(self: ThreadActor, active: ActiveRun, node: ExecutionNode) -> PlanArtifact | None:
        for artifact in self.store.run_artifacts(active.run.id):
            if artifact.kind == "todo_list" and artifact.node_id == node.id:
                return artifact
        return None

    async def _on_plan_updated(self: ThreadActor, active: ActiveRun, event: PlanUpdated) -> None:
        node = self._parent_node(active, event.item_id)
        now = self.now()
        artifact = self._todo_list(active, node)
        if artifact is None:
            artifact = PlanArtifact(
                id=new_id("art"), thread_id=self.thread_id, run_id=active.run.id, node_id=node.id, kind="todo_list",
                steps=event.plan, created_at=now, updated_at=now,
            )
        else:
            artifact = struct_copy(artifact, steps=event.plan, updated_at=now)
        batch = WriteBatch()
        batch.put(artifact)
        self._event(batch, "plan.updated", run_id=active.run.id, node_id=node.id, artifact=to_wire(artifact),
                    scope="root" if node.id == active.root.id else "child")
        await self._commit(batch)

    def _propose_plan(self: ThreadActor, batch: WriteBatch, active: ActiveRun, node: ExecutionNode) -> None:
        now = self.now()
        artifact = PlanArtifact(
            id=new_id("art"), thread_id=self.thread_id, run_id=active.run.id, node_id=node.id, kind="proposed_plan",
            status="proposed", text=str(node.detail.get("text", "")), created_at=now, updated_at=now,
        )
        batch.put(artifact)
        self._event(batch, "plan.proposed", run_id=active.run.id, node_id=node.id, artifact=to_wire(artifact))

    def _finalize_artifacts(self: ThreadActor, batch: WriteBatch, active: ActiveRun) -> None:
        """Completion barrier step: live todo lists become final, unanswered
        questions are closed."""
        now = self.now()
        for artifact in self.store.run_artifacts(active.run.id):
            if artifact.kind == "todo_list" and artifact.status == "active":
                artifact = struct_copy(artifact, status="final", updated_at=now)
            elif artifact.kind == "questions" and artifact.status == "active":
                artifact = struct_copy(artifact, status="closed", updated_at=now)
            else:
                continue
            batch.put(artifact)
            self._event(batch, "plan.finalized", run_id=active.run.id, node_id=artifact.node_id, artifact=to_wire(artifact))

    async def _cmd_plan_implement(self: ThreadActor, command: Command) -> dict[str, Any]:
        """Start work from a proposed plan: a new run here, or a new thread."""
        params = command.params
        plan = self.store.get(PlanArtifact, params.plan_id)
        if plan is None or plan.thread_id != self.thread_id or plan.kind != "proposed_plan":
            raise NotFound(f"no proposed plan {params.plan_id} in thread {self.thread_id}", planId=params.plan_id)
        if plan.status != "proposed":
            raise InvalidState(f"plan {plan.id} is already {plan.status} (by {plan.implemented_by})", planId=plan.id)
        text = IMPLEMENT_PROMPT + plan.text
        batch = WriteBatch()
        if params.mode == "new_run":
            run, message = self._new_run(batch, text, self.thread.provider, dispatch_mode="queue_after_active")
            target, result = run.id, {"planId": plan.id, "runId": run.id, "threadId": self.thread_id}
        else:
            child = self.registry.new_thread_record(
                title=f"Plan: {plan.text.splitlines()[0][:80] if plan.text else plan.id}", provider=self.thread.provider,
                workspace=self.thread.workspace, parent=self.thread, relationship="plan_implementation",
            )
            batch.put(child)
            batch.event("thread.created", thread_id=child.id, at=self.now(), thread=to_wire(child))
            run = None
            target, result = child.id, {"planId": plan.id, "threadId": child.id}
        plan = struct_copy(plan, status="implemented", implemented_by=target, updated_at=self.now())
        batch.put(plan)
        self._event(batch, "plan.implemented", run_id=plan.run_id, node_id=plan.node_id, artifact=to_wire(plan), mode=params.mode)
        if command.command_id is not None:
            batch.set_receipt(command.command_id, command.method, result, self.now())
        committed = await self._commit(batch)
        if run is not None:
            self.queued.append(run)
            self._maybe_start_next()
        else:
            # Cross-thread work runs after commit, in the child's own actor.
            self._spawn_effect(self.registry.send_internal, target, text)
        return {**result, "seq": committed.seq}

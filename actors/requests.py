"""Approvals and user-input requests for ThreadActor (SPEC F15).

A provider request becomes an app-owned RuntimeRequest (the provider's id is
only a reference), a node in the graph, and the run and thread ``waiting``.
Answering goes back through the live provider callback; when that callback is
gone (its session died, the daemon restarted) the request is marked
``not_resumable`` and the caller gets that error, never a fake success.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentd.protocol.errors import InvalidParams, InvalidState, NotFound, NotResumable
from agentd.store.batch import WriteBatch
from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.records import ExecutionNode, PlanArtifact, RuntimeRequest, to_wire

from .active import ActiveRun
from .messages import Command
from .providers.base import ProviderRuntimeError, RequestOpened

if TYPE_CHECKING:
    from .thread_actor import ThreadActor

NODE_KIND = {"approval": "approval", "user_input": "user_input_request"}
EVENT_PREFIX = {"approval": "approval", "user_input": "user_input"}


class RequestsMixin:
    async def _on_request_opened(self: ThreadActor, active: ActiveRun, event: RequestOpened) -> None:
        now = self.now()
        batch = WriteBatch()
        node_kind = NODE_KIND.get(event.kind, event.kind)
        node = active.nodes.get(event.item_id or "")
        if node is None or node.kind != node_kind:
            # The provider has no item of its own for the request (Codex asks
            # about a command item): the request gets its node under that item.
            parent = self._parent_node(active, event.item_id)
            node = ExecutionNode(
                id=new_id("nod"), thread_id=self.thread_id, run_id=active.run.id, attempt_id=active.attempt.id,
                parent_node_id=parent.id, kind=node_kind, status="running", title=event.kind,
                provider_item_id=None, detail=event.detail, created_at=now,
            )
            batch.put(node)
            self._event(batch, f"{node_kind}.started", run_id=active.run.id, node_id=node.id, node=to_wire(node))
        request = RuntimeRequest(
            id=new_id("req"), thread_id=self.thread_id, run_id=active.run.id, attempt_id=active.attempt.id,
            node_id=node.id, kind=event.kind, provider_request_ref=event.request_ref, session_id=active.session_id,
            detail=event.detail, created_at=now,
        )
        batch.put(request)
        payload: dict[str, Any] = {"request": to_wire(request), "node": to_wire(node)}
        if event.kind == "user_input":
            artifact = PlanArtifact(
                id=new_id("art"), thread_id=self.thread_id, run_id=active.run.id, node_id=node.id, kind="questions",
                questions=list(event.detail.get("questions", [])), request_id=request.id, created_at=now, updated_at=now,
            )
            batch.put(artifact)
            payload["artifact"] = to_wire(artifact)
        run = struct_copy(active.run, status="waiting")
        batch.put(run)
        self._set_thread(batch, status="waiting")
        self._event(batch, f"{EVENT_PREFIX.get(event.kind, event.kind)}.requested", run_id=run.id, node_id=node.id, **payload)
        await self._commit(batch)
        active.run = run
        active.requests[request.id] = request
        # A node made for the request is keyed by the request; the provider's
        # own request item keeps its item id.
        key = event.item_id if node.provider_item_id is not None and event.item_id else request.id
        active.nodes.setdefault(key, node)

    def _pending_request(self: ThreadActor, request_id: str, kind: str) -> RuntimeRequest:
        request = self.store.get(RuntimeRequest, request_id)
        if request is None or request.thread_id != self.thread_id:
            raise NotFound(f"no request {request_id}; list pending requests with thread.requests", requestId=request_id)
        if request.kind != kind:
            method = "approval.respond" if request.kind == "approval" else "user-input.respond"
            raise InvalidParams(f"request {request_id} is a {request.kind} request; answer it with {method}", field="requestId")
        if request.status == "not_resumable":
            raise NotResumable(f"request {request_id} can no longer be answered: {request.reason}", requestId=request_id)
        if request.status != "pending":
            raise InvalidState(f"request {request_id} is already {request.status}", requestId=request_id, status=request.status)
        return request

    async def _answer(self: ThreadActor, request: RuntimeRequest, response: dict[str, Any]) -> None:
        """Send ``response`` through the live callback, or mark the request
        not_resumable and raise NotResumable."""
        active = self.active
        live = self.sessions.live_session(self.thread_id)
        why = None
        if active is None or request.id not in active.requests:
            why = "its run is no longer active"
        elif live is None or live[0] != request.session_id:
            why = "the provider session that asked has ended"
        else:
            try:
                await live[1].answer_request(request.provider_request_ref or "", response)
                return
            except ProviderRuntimeError as exc:
                why = f"the provider could not take the answer ({exc})"
        batch = WriteBatch()
        self._mark_not_resumable(batch, request, why)
        if active is not None:
            active.requests.pop(request.id, None)
        await self._commit(batch)
        raise NotResumable(f"request {request.id} can no longer be answered: {why}", requestId=request.id)

    async def _cmd_approval_respond(self: ThreadActor, command: Command) -> dict[str, Any]:
        params = command.params
        request = self._pending_request(params.request_id, "approval")
        await self._answer(request, {"decision": params.decision})
        node_status = "completed" if params.decision == "accept" else "cancelled"
        return await self._resolve(command, request, {"decision": params.decision}, node_status, "approval.resolved")

    async def _cmd_user_input_respond(self: ThreadActor, command: Command) -> dict[str, Any]:
        params = command.params
        request = self._pending_request(params.request_id, "user_input")
        asked = [q.get("id") for q in request.detail.get("questions", [])]
        missing = [q for q in asked if q not in params.answers]
        if missing:
            raise InvalidParams(f"answers lack {', '.join(map(str, missing))}; answer every question", field="answers")
        await self._answer(request, {"answers": params.answers})
        return await self._resolve(command, request, {"answers": params.answers}, "completed", "user_input.resolved")

    async def _resolve(
        self: ThreadActor, command: Command, request: RuntimeRequest, response: dict[str, Any], node_status: str, event_type: str,
    ) -> dict[str, Any]:
        active = self.active
        assert active is not None
        now = self.now()
        batch = WriteBatch()
        request = struct_copy(request, status="resolved", response=response, resolved_at=now)
        batch.put(request)
        active.requests.pop(request.id, None)
        node = next((n for n in active.nodes.values() if n.id == request.node_id), None)
        if node is not None and node.status not in ("completed", "cancelled", "failed", "interrupted", "incomplete"):
            node = struct_copy(node, status=node_status, detail={**node.detail, **response}, ended_at=now)
            batch.put(node)
            for key, value in list(active.nodes.items()):
                if value.id == node.id:
                    active.nodes[key] = node
        for artifact in self.store.run_artifacts(active.run.id):
            if artifact.request_id == request.id:
                batch.put(struct_copy(artifact, status="answered", answers=response.get("answers", {}), updated_at=now))
        if not active.requests:
            active.run = struct_copy(active.run, status="running")
            batch.put(active.run)
            self._set_thread(batch, status="running")
        self._event(batch, event_type, run_id=active.run.id, node_id=request.node_id, request=to_wire(request))
        result = {"requestId": request.id, "status": "resolved"}
        if command.command_id is not None:
            batch.set_receipt(command.command_id, command.method, result, now)
        committed = await self._commit(batch)
        return {**result, "seq": committed.seq}

    def _mark_not_resumable(self: ThreadActor, batch: WriteBatch, request: RuntimeRequest, why: str) -> None:
        request = struct_copy(request, status="not_resumable", reason=why, resolved_at=self.now())
        batch.put(request)
        self._event(batch, f"{EVENT_PREFIX.get(request.kind, request.kind)}.not_resumable", run_id=request.run_id,
                    node_id=request.node_id, request=to_wire(request))

    def _requests_not_resumable(self: ThreadActor, batch: WriteBatch, active: ActiveRun, why: str) -> None:
        """Every pending request of the attempt: its callback is gone."""
        for request in list(active.requests.values()):
            self._mark_not_resumable(batch, request, why)
        active.requests.clear()

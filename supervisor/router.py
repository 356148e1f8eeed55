"""The router: the one small interface through which the protocol servers
reach the daemon. Commands go to actors; reads go straight to the store."""

from __future__ import annotations

import os
from typing import Any

import trio

from agentd.actors.artifacts import plan_implement
from agentd.actors.registry import ThreadRegistry
from agentd.actors.requests import approval_respond, user_input_respond
from agentd.actors.run_control import queue_release, queued_run_cancel, queued_run_reorder, run_interrupt, thread_stop
from agentd.actors.steering import message_send, queued_message_promote_to_steer
from agentd.protocol import wire
from agentd.protocol.errors import InvalidParams, NotFound, Unsupported
from agentd.protocol.server import Connection, Then
from agentd.store.db import Store
from agentd.store.hub import EventHub, Resync, replay_then_live
from agentd.store.ids import new_id
from agentd.store.records import ConversationMessage, PlanArtifact, Run, RuntimeRequest, to_wire

from .sessions import ProviderSessionManager

VERSION = "0.1.0"


class DaemonRouter:
    """Maps each protocol method to the part of the daemon that owns it."""

    def __init__(
        self,
        store: Store,
        hub: EventHub,
        registry: ThreadRegistry,
        sessions: ProviderSessionManager,
        *,
        socket_path: str,
    ) -> None:
        self.store = store
        self.hub = hub
        self.registry = registry
        self.sessions = sessions
        self.socket_path = socket_path
        self.websocket_url: str | None = None
        self.started_at = trio.current_time()

    async def dispatch(self, method: str, params: wire.Params, connection: Connection) -> Any:
        handler = getattr(self, "_" + method.replace(".", "_").replace("-", "_"))
        return await handler(params, connection)

    # -- commands --------------------------------------------------------------

    async def _thread_create(self, params: wire.ThreadCreateParams, _conn: Connection) -> Any:
        return await self.registry.create_thread(params, params.command_id)

    async def _thread_message_send(self, params: wire.MessageSendParams, _conn: Connection) -> Any:
        return await self.registry.call(params.thread_id, message_send, params, params.command_id, method="thread.message.send")

    def _thread_of(self, cls: type, record_id: str, what: str) -> str:
        record = self.store.get(cls, record_id)
        if record is None:
            raise NotFound(f"no {what} {record_id}", **{f"{what}Id": record_id})
        return record.thread_id

    async def _run_interrupt(self, params: wire.RunInterruptParams, _conn: Connection) -> Any:
        thread_id = self._thread_of(Run, params.run_id, "run")
        return await self.registry.call(thread_id, run_interrupt, params, params.command_id, method="run.interrupt")

    async def _thread_stop(self, params: wire.ThreadStopParams, _conn: Connection) -> Any:
        return await self.registry.call(params.thread_id, thread_stop, params, params.command_id, method="thread.stop")

    async def _thread_queue_release(self, params: wire.ThreadIdParams, _conn: Connection) -> Any:
        return await self.registry.call(params.thread_id, queue_release, params, method="thread.queue.release")

    async def _queued_run_cancel(self, params: wire.QueuedRunParams, _conn: Connection) -> Any:
        return await self.registry.call(self._thread_of(Run, params.run_id, "run"), queued_run_cancel, params, method="queued-run.cancel")

    async def _queued_run_reorder(self, params: wire.QueueReorderParams, _conn: Connection) -> Any:
        return await self.registry.call(params.thread_id, queued_run_reorder, params, method="queued-run.reorder")

    async def _queued_message_promote_to_steer(self, params: wire.PromoteParams, _conn: Connection) -> Any:
        thread_id = self._thread_of(ConversationMessage, params.message_id, "message")
        return await self.registry.call(
            thread_id, queued_message_promote_to_steer, params, method="queued-message.promote-to-steer",
        )

    async def _approval_respond(self, params: wire.ApprovalRespondParams, _conn: Connection) -> Any:
        thread_id = self._thread_of(RuntimeRequest, params.request_id, "request")
        return await self.registry.call(thread_id, approval_respond, params, params.command_id, method="approval.respond")

    async def _user_input_respond(self, params: wire.UserInputRespondParams, _conn: Connection) -> Any:
        thread_id = self._thread_of(RuntimeRequest, params.request_id, "request")
        return await self.registry.call(thread_id, user_input_respond, params, params.command_id, method="user-input.respond")

    async def _plan_implement(self, params: wire.PlanImplementParams, _conn: Connection) -> Any:
        thread_id = self._thread_of(PlanArtifact, params.plan_id, "plan")
        return await self.registry.call(thread_id, plan_implement, params, params.command_id, method="plan.implement")

    async def _run_resume(self, params: wire.RunResumeParams, _conn: Connection) -> Any:
        # SPEC F12: execution is never resumed after a restart; say so plainly.
        run = self.store.run(params.run_id)
        if run is None:
            raise NotFound(f"no run {params.run_id}", runId=params.run_id)
        raise Unsupported(
            f"agentd does not resume execution: run {run.id} is {run.status}"
            + (f" ({run.reason})" if run.reason else "")
            + ". In-flight model requests, tool calls and approvals are not revived after a restart; "
            "send a new message to continue the thread.",
            runId=run.id,
        )

    # -- reads ------------------------------------------------------------------

    async def _thread_list(self, _params: wire.NoParams, _conn: Connection) -> Any:
        return {"threads": [to_wire(t) for t in self.store.list_threads()]}

    async def _thread_get(self, params: wire.ThreadGetParams, _conn: Connection) -> Any:
        thread = self.store.thread(params.thread_id)
        if thread is None:
            raise NotFound(f"no thread {params.thread_id}; list threads with thread.list", threadId=params.thread_id)
        return {
            "thread": to_wire(thread),
            "runs": [to_wire(r) for r in self.store.thread_runs(thread.id)],
            "messages": [to_wire(m) for m in self.store.thread_messages(thread.id)],
        }

    async def _run_get(self, params: wire.RunGetParams, _conn: Connection) -> Any:
        run = self.store.run(params.run_id)
        if run is None:
            raise NotFound(f"no run {params.run_id}", runId=params.run_id)
        return {
            "run": to_wire(run),
            "attempts": [to_wire(a) for a in self.store.run_attempts(run.id)],
            "nodes": [to_wire(n) for n in self.store.run_nodes(run.id)],
            "artifacts": [to_wire(a) for a in self.store.run_artifacts(run.id)],
        }

    async def _thread_requests(self, params: wire.ThreadIdParams, _conn: Connection) -> Any:
        if self.store.thread(params.thread_id) is None:
            raise NotFound(f"no thread {params.thread_id}", threadId=params.thread_id)
        return {"requests": [to_wire(r) for r in self.store.pending_requests(params.thread_id)]}

    async def _providers_list(self, _params: wire.NoParams, _conn: Connection) -> Any:
        out = []
        for adapter in self.sessions.adapters.values():
            try:
                probe = await adapter.probe()
            except Exception as exc:  # noqa: BLE001 - a probe failure is what to show
                probe = {"usable": False, "why": str(exc)}
            out.append({**adapter.describe(), **probe})
        return {"providers": out}

    async def _daemon_status(self, _params: wire.NoParams, _conn: Connection) -> Any:
        return {
            "version": VERSION,
            "pid": os.getpid(),
            "uptime": trio.current_time() - self.started_at,
            "socket": self.socket_path,
            "websocket": self.websocket_url,
            "dataDir": str(self.store.path.parent),
            "lastSeq": self.store.last_seq,
            "loadedActors": self.registry.loaded,
            "sessions": self.sessions.status(),
            "subscribers": self.hub.subscriber_count,
            "commits": {
                "batches": self.store.writer.batches_committed,
                "transactions": self.store.writer.transactions,
            },
        }

    # -- events --------------------------------------------------------------------

    async def _events_subscribe(self, params: wire.SubscribeParams, conn: Connection) -> Any:
        if params.thread_id is not None and self.store.thread(params.thread_id) is None:
            raise NotFound(f"no thread {params.thread_id} to subscribe to", threadId=params.thread_id)
        if params.after_seq > self.store.last_seq:
            # A client from another data dir or a wiped store: say so rather than wait forever.
            raise InvalidParams(
                f"afterSeq {params.after_seq} is beyond the last event ({self.store.last_seq}); "
                "resubscribe with afterSeq 0 or the last seq you saw from this daemon",
                field="afterSeq",
            )
        subscription_id = new_id("sub")
        scope = trio.CancelScope()
        conn.subscriptions[subscription_id] = scope

        async def stream() -> None:
            with scope:
                try:
                    async for events in replay_then_live(
                        self.store, self.hub, thread_id=params.thread_id, after_seq=params.after_seq
                    ):
                        for event in events:
                            await conn.notify("event", {"subscriptionId": subscription_id, **event})
                except Resync as exc:
                    await conn.notify("events.resync", {"subscriptionId": subscription_id, "afterSeq": exc.after_seq})
                finally:
                    conn.subscriptions.pop(subscription_id, None)

        return Then({"subscriptionId": subscription_id, "seq": self.store.last_seq}, stream)

    async def _events_unsubscribe(self, params: wire.UnsubscribeParams, conn: Connection) -> Any:
        scope = conn.subscriptions.pop(params.subscription_id, None)
        if scope is None:
            raise NotFound(
                f"no subscription {params.subscription_id} on this connection",
                subscriptionId=params.subscription_id,
            )
        scope.cancel()
        return {}

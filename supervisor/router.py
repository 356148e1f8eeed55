"""The router: the one small interface through which the protocol servers
reach the daemon. Commands go to actors; reads go straight to the store."""

from __future__ import annotations

import os
from typing import Any

import trio

from actors.registry import ThreadRegistry
from protocol import wire
from protocol.errors import InvalidParams, NotFound, Unsupported
from protocol.server import Connection, Then
from store.db import Store
from store.hub import EventHub, Resync, replay_then_live
from store.ids import new_id
from store.records import to_wire

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
        self.started_at = trio.current_time()

    async def dispatch(self, method: str, params: wire.Params, connection: Connection) -> Any:
        handler = getattr(self, "_" + method.replace(".", "_"))
        return await handler(params, connection)

    # -- commands --------------------------------------------------------------

    async def _thread_create(self, params: wire.ThreadCreateParams, _conn: Connection) -> Any:
        return await self.registry.create_thread(params, params.command_id)

    async def _thread_message_send(self, params: wire.MessageSendParams, _conn: Connection) -> Any:
        return await self.registry.call(params.thread_id, "thread.message.send", params, params.command_id)

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
        }

    async def _daemon_status(self, _params: wire.NoParams, _conn: Connection) -> Any:
        return {
            "version": VERSION,
            "pid": os.getpid(),
            "uptime": trio.current_time() - self.started_at,
            "socket": self.socket_path,
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

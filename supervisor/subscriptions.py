"""``events.subscribe`` and ``events.unsubscribe``: replay from a sequence,
then follow live, on the subscriber's connection (SPEC F17)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from agentd.protocol import wire
from agentd.protocol.errors import InvalidParams, NotFound
from agentd.protocol.server import Connection, Then
from agentd.store.hub import Resync, replay_then_live
from agentd.store.ids import new_id

if TYPE_CHECKING:
    from .router import DaemonRouter


async def subscribe(router: DaemonRouter, params: wire.SubscribeParams, conn: Connection) -> Then:
    store, hub = router.store, router.hub
    if params.thread_id is not None and store.thread(params.thread_id) is None:
        raise NotFound(f"no thread {params.thread_id} to subscribe to", threadId=params.thread_id)
    if params.after_seq > store.last_seq:
        # A client from another data dir or a wiped store: say so rather than wait forever.
        raise InvalidParams(
            f"afterSeq {params.after_seq} is beyond the last event ({store.last_seq}); "
            "resubscribe with afterSeq 0 or the last seq you saw from this daemon",
            field="afterSeq",
        )
    subscription_id = new_id("sub")
    scope = trio.CancelScope()
    conn.subscriptions[subscription_id] = scope

    async def stream() -> None:
        with scope:
            try:
                async for events in replay_then_live(store, hub, thread_id=params.thread_id, after_seq=params.after_seq):
                    for event in events:
                        await conn.notify("event", {"subscriptionId": subscription_id, **event})
            except Resync as exc:
                await conn.notify("events.resync", {"subscriptionId": subscription_id, "afterSeq": exc.after_seq})
            finally:
                conn.subscriptions.pop(subscription_id, None)

    # The stream starts only once the answer is queued: the client learns the
    # subscription id before the first event that carries it.
    return Then({"subscriptionId": subscription_id, "seq": store.last_seq}, stream)


async def unsubscribe(router: DaemonRouter, params: wire.UnsubscribeParams, conn: Connection) -> dict[str, Any]:
    scope = conn.subscriptions.pop(params.subscription_id, None)
    if scope is None:
        raise NotFound(
            f"no subscription {params.subscription_id} on this connection",
            subscriptionId=params.subscription_id,
        )
    scope.cancel()
    return {}

"""``events.subscribe`` and ``events.unsubscribe``: replay from a sequence,
then follow live, on the subscriber's connection (SPEC F17).

A subscriber never holds up anyone: its stream waits for room on its own
connection while the hub keeps a bounded buffer for it (events and bytes);
past that buffer, or when the daemon's shared budget for queued events is
spent, the subscription ends with ``events.resync`` at the last event it was
given, and the client resubscribes from there. Subscriptions are bounded per connection and
in total, since each one costs every publish a little.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import trio

from agentd.protocol import wire
from agentd.protocol.errors import InvalidParams, InvalidState, NotFound, Overloaded
from agentd.protocol.server import Connection, Then
from agentd.store.hub import Resync, replay_then_live
from agentd.store.ids import new_id

from .context import DaemonContext


async def subscribe(context: DaemonContext, params: wire.SubscribeParams, conn: Connection) -> Then:
    store, hub = context.store, context.hub
    if params.thread_id is not None and store.thread(params.thread_id) is None:
        raise NotFound(f"no thread {params.thread_id} to subscribe to", threadId=params.thread_id)
    if params.after_seq > store.last_seq:
        # A client from another data dir or a wiped store: say so rather than wait forever.
        raise InvalidParams(
            f"afterSeq {params.after_seq} is beyond the last event ({store.last_seq}); "
            "resubscribe with afterSeq 0 or the last seq you saw from this daemon",
            field="afterSeq",
        )
    limits = conn.limits
    if len(conn.subscriptions) >= limits.subscriptions_per_connection:
        raise InvalidState(
            f"this connection already has {len(conn.subscriptions)} subscriptions, the most one may have; "
            "unsubscribe one (events.unsubscribe) or use one subscription for all threads",
            limit=limits.subscriptions_per_connection,
        )
    if hub.subscriber_count >= limits.subscriptions_total:
        raise Overloaded(
            f"agentd is serving its maximum of {limits.subscriptions_total} subscriptions; retry when clients leave",
            limit=limits.subscriptions_total,
        )
    subscription_id = new_id("sub")
    scope = trio.CancelScope()
    conn.subscriptions[subscription_id] = scope

    async def stream() -> None:
        delivered = params.after_seq
        cut_off = False
        waiting: trio.CancelScope | None = None  # the send in progress, while it waits for room

        def on_overflow() -> None:
            # The subscriber fell a buffer behind: whatever it waits for, it is not waited for.
            nonlocal cut_off
            cut_off = True
            if waiting is not None:
                waiting.cancel()

        def direct(event: dict[str, Any]) -> bool:
            # A live delta, handed over on the publisher's turn while this
            # stream waits with nothing buffered: queued on the connection
            # (written at the hub's flush), or left to the stream when there
            # is no room or the budget refuses it.
            nonlocal delivered
            if cut_off or conn.offer_event(subscription_id, event) is not True:
                return False
            delivered = max(delivered, event["seq"])
            return True

        with scope:
            try:
                async with aclosing(replay_then_live(
                    store, hub, thread_id=params.thread_id, after_seq=params.after_seq, on_overflow=on_overflow,
                    direct=direct, flush=conn.flush_events,
                )) as batches:
                    async for events in batches:
                        try:
                            for event in events:
                                # Queued without waiting when there is room (a
                                # streamed delta: no cancel scope, no wake-up of the
                                # write task); else waited for, and an overflow stops the wait.
                                sent = conn.offer_event(subscription_id, event)
                                if sent is None:
                                    sent = False
                                    conn.flush_events()
                                    with trio.CancelScope() as waiting:
                                        sent = await conn.send_event("event", {"subscriptionId": subscription_id, **event})
                                    waiting = None
                                if sent:
                                    delivered = max(delivered, event["seq"])
                                if not sent or cut_off:
                                    raise Resync(delivered)
                        finally:
                            conn.flush_events()  # one write for the batch
            except Resync as exc:
                conn.notify_now("events.resync", {"subscriptionId": subscription_id, "afterSeq": exc.after_seq})
            finally:
                conn.subscriptions.pop(subscription_id, None)

    # The stream starts only once the answer is queued: the client learns the
    # subscription id before the first event that carries it.
    return Then({"subscriptionId": subscription_id, "seq": store.last_seq}, stream)


async def unsubscribe(context: DaemonContext, params: wire.UnsubscribeParams, conn: Connection) -> dict[str, Any]:
    scope = conn.subscriptions.pop(params.subscription_id, None)
    if scope is None:
        raise NotFound(
            f"no subscription {params.subscription_id} on this connection",
            subscriptionId=params.subscription_id,
        )
    scope.cancel()
    return {}

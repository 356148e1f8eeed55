"""The event hub: live fan-out of committed events, and replay-then-live streams.

Committed events reach the hub from the writer, on the trio loop, in ``seq``
order, before the committing actor even wakes — so a subscriber sees events in
log order and never sees an event that is not durable. Ephemeral events (live
text deltas) are published at once and never stored; they carry the last
durable ``seq`` and ``ephemeral: true``, and a text offset that lets a client
place them against the durable ``message.appended`` records.

A slow subscriber never blocks a publisher: past its bounded buffer (10,000
events, or 8 MiB of events counted as their JSON size — one delta can be a
megabyte, and a record-carrying event can be large too) it is marked
overflowed, its ``on_overflow`` is called (its stream may be waiting for room
on a stalled connection: it stops waiting), and its stream ends with
``Resync`` so the client can resubscribe from its last ``seq``.
"""

from __future__ import annotations

from collections import deque
from typing import Any, AsyncGenerator, Callable

import msgspec
import trio

from agentd.protocol.framing import EncodedEvent

from .db import Store
from .records import Event

DEFAULT_CAPACITY = 10_000
#: bytes of events (their JSON size) one subscriber may have waiting
DEFAULT_BYTE_CAPACITY = 8 << 20
#: bytes an event's envelope adds to its payload on the wire (ids, seq, type, ...)
EVENT_ENVELOPE_BYTES = 256
REPLAY_PAGE = 500

_encoder = msgspec.json.Encoder()


class Resync(Exception):
    """The subscriber fell behind its buffer; resubscribe with ``after_seq``."""

    def __init__(self, after_seq: int) -> None:
        super().__init__(f"subscriber fell behind; resubscribe with afterSeq={after_seq}")
        self.after_seq = after_seq


class Subscription:
    """A live buffer of events for one subscriber (all threads, or one)."""

    def __init__(self, hub: EventHub, thread_id: str | None, capacity: int, byte_capacity: int,
                 on_overflow: Callable[[], None] | None = None) -> None:
        self._hub = hub
        self.thread_id = thread_id
        self._capacity = capacity
        self._byte_capacity = byte_capacity
        self._on_overflow = on_overflow
        self._buffer: deque[Event | dict[str, Any]] = deque()
        self._bytes = 0  # wire size of the events in ``_buffer``
        self._wake = trio.Event()
        self.overflowed = False
        #: set by the consumer while it waits in ``take`` with nothing
        #: buffered (``replay_then_live``'s ``direct``): a live delta is handed
        #: to it at once, on the publisher's turn, instead of waking the
        #: consumer's task; it returns False to have the delta buffered instead
        self.direct: Callable[[dict[str, Any]], bool] | None = None
        #: writes what ``direct`` took (``EventHub.flush``)
        self.flush: Callable[[], None] | None = None

    def _offer(self, item: Event | dict[str, Any], size: int) -> None:
        if self.overflowed:
            return
        if len(self._buffer) >= self._capacity or (self._buffer and self._bytes + size > self._byte_capacity):
            self.overflowed = True
            self._buffer.clear()
            self._bytes = 0
            if self._on_overflow is not None:
                self._on_overflow()
        else:
            self._buffer.append(item)
            self._bytes += size
        self._wake.set()

    async def take(self) -> list[Event | dict[str, Any]]:
        """Wait for and return everything buffered; raise Resync on overflow
        (with ``after_seq`` left to the caller, which knows what it delivered)."""
        while not self._buffer and not self.overflowed:
            await self._wake.wait()
            self._wake = trio.Event()
        if self.overflowed:
            raise Resync(-1)
        items = list(self._buffer)
        self._buffer.clear()
        self._bytes = 0
        return items

    def close(self) -> None:
        self._hub._subscriptions.discard(self)


class EventHub:
    """Fans committed and ephemeral events out to subscriptions."""

    def __init__(self) -> None:
        self._subscriptions: set[Subscription] = set()
        self.last_seq = 0
        #: the ``flush`` of every subscription whose ``direct`` took a delta
        #: since the last ``flush`` (a dict as an ordered set: one per connection)
        self._unflushed: dict[Callable[[], None], None] = {}

    def subscribe(
        self, thread_id: str | None = None, *, capacity: int = DEFAULT_CAPACITY,
        byte_capacity: int = DEFAULT_BYTE_CAPACITY, on_overflow: Callable[[], None] | None = None,
    ) -> Subscription:
        """A buffer of the events published from now on (of ``thread_id``, or
        all), bounded in events and in bytes; ``on_overflow`` is called, on
        the loop, when it overflows."""
        sub = Subscription(self, thread_id, capacity, byte_capacity, on_overflow)
        self._subscriptions.add(sub)
        return sub

    @property
    def subscriber_count(self) -> int:
        return len(self._subscriptions)

    def publish(self, events: list[Event]) -> None:
        """Fan out committed events (called by the store writer, in seq order)."""
        subs = self._subscriptions
        for event in events:
            self.last_seq = event.seq
            size = -1  # measured once, for the first subscriber that takes it
            for sub in subs:
                if sub.thread_id is None or sub.thread_id == event.thread_id:
                    if size < 0:
                        size = wire_size(event)
                    sub._offer(event, size)

    def publish_ephemeral(
        self,
        type: str,
        *,
        thread_id: str,
        run_id: str | None = None,
        node_id: str | None = None,
        at: float = 0.0,
        **payload: Any,
    ) -> None:
        """Fan out an event that is not stored (a live text delta). It is
        spelled as JSON once, here, for every subscriber (``EncodedEvent``),
        and that spelling is its size against their buffers."""
        subs = [sub for sub in self._subscriptions if sub.thread_id is None or sub.thread_id == thread_id]
        if not subs:
            return
        item = EncodedEvent({
            "seq": self.last_seq,
            "ephemeral": True,
            "type": type,
            "threadId": thread_id,
            "runId": run_id,
            "nodeId": node_id,
            "at": at,
            "payload": payload,
        })
        size = len(item.json)
        for sub in subs:
            direct = sub.direct
            if direct is not None and not sub._buffer and not sub.overflowed and direct(item):
                if sub.flush is not None:
                    self._unflushed[sub.flush] = None
                continue
            sub._offer(item, size)

    def flush(self) -> None:
        """Write what subscribers took at once from ``publish_ephemeral``
        (``Subscription.direct``): one write per connection for all the
        deltas published since the last flush. The publisher calls it before
        it waits or yields (the thread actor: when its mailbox is empty, or
        before a commit), so a delta is on its way before anything else runs."""
        if not self._unflushed:
            return
        flushes, self._unflushed = self._unflushed, {}
        for flush in flushes:
            flush()


def wire_size(item: Event | dict[str, Any]) -> int:
    """About how many bytes an event takes on the wire: its payload's JSON
    and the envelope. Every event counts, not only text: a record-carrying
    one (a run, a checkpoint's summary) can be large too."""
    payload = item.payload if isinstance(item, Event) else item["payload"]
    try:
        return EVENT_ENVELOPE_BYTES + len(_encoder.encode(payload))
    except (TypeError, msgspec.EncodeError):  # pragma: no cover - events are built from JSON types
        return EVENT_ENVELOPE_BYTES


def event_to_wire(event: Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "type": event.type,
        "threadId": event.thread_id,
        "runId": event.run_id,
        "nodeId": event.node_id,
        "at": event.at,
        "payload": event.payload,
    }


async def replay_then_live(
    store: Store,
    hub: EventHub,
    *,
    thread_id: str | None,
    after_seq: int,
    capacity: int = DEFAULT_CAPACITY,
    on_overflow: Callable[[], None] | None = None,
    direct: Callable[[dict[str, Any]], bool] | None = None,
    flush: Callable[[], None] | None = None,
) -> AsyncGenerator[list[dict[str, Any]], None]:
    """Yield lists of wire events: every stored event after ``after_seq``, then
    live ones, with no gap and no duplicate.

    The live subscription is registered before the store is read, so an event
    committed during the replay is either in the read or arrives live; live
    durable events at or below the last replayed ``seq`` are dropped.
    ``on_overflow`` is called when the live buffer overflows (see ``EventHub.subscribe``).
    ``direct`` (with ``flush``), when given, takes live deltas at once while
    this generator waits for live events with everything before them
    yielded — and, the generator being suspended at a ``yield`` until its
    consumer asks for more, consumed (``Subscription.direct``).

    Raises:
        Resync: the consumer fell behind; ``after_seq`` says where to resume.
    """
    sub = hub.subscribe(thread_id, capacity=capacity, on_overflow=on_overflow)
    last = after_seq
    try:
        while True:
            page = store.events_after(last, thread_id=thread_id, limit=REPLAY_PAGE)
            if not page:
                break
            last = page[-1].seq
            yield [event_to_wire(e) for e in page]
            if sub.overflowed:
                raise Resync(last)
        while True:
            sub.direct, sub.flush = direct, flush
            try:
                items = await sub.take()
            except Resync:
                raise Resync(last) from None
            finally:
                sub.direct = sub.flush = None
            out = []
            for item in items:
                if isinstance(item, Event):
                    if item.seq <= last:
                        continue
                    last = item.seq
                    out.append(event_to_wire(item))
                else:
                    out.append(item)
            if out:
                yield out
    finally:
        sub.close()

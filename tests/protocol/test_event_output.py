"""A subscription's events on their way out of a connection (SPEC F17,
issue 24 §3): a streamed delta is spelled as JSON once for every subscriber,
queued without waiting and written by the task that published it; whatever
the socket does not take goes out after, in order, through the write task."""

from __future__ import annotations

import msgspec
import pytest
import trio

from agentd.protocol import framing
from agentd.protocol.limits import ServerLimits
from agentd.protocol.server import Connection

EVENTS = [
    {"seq": 7, "ephemeral": True, "type": "message.delta", "threadId": "thr_1", "runId": "run_1", "nodeId": None,
     "at": 1.5, "payload": {"messageId": "msg_1", "offset": 3, "text": 'a "quoted" é\n\x01 😀'}},
    {"seq": 8, "type": "run.completed", "threadId": "thr_1", "runId": None, "nodeId": "nod_1", "at": 2.0,
     "payload": {"run": {"id": "run_1", "status": "completed"}}},
]


@pytest.mark.parametrize("event", EVENTS, ids=["delta", "durable"])
def test_a_subscription_line_is_the_same_bytes_spliced_or_encoded(event):
    encoded = framing.EncodedEvent(event)
    spliced = framing.subscription_line("event", "sub_1", encoded)
    plain = framing.subscription_line("event", "sub_1", event)
    assert spliced == plain == framing.encode(framing.notification("event", {"subscriptionId": "sub_1", **event}))
    assert msgspec.json.decode(spliced)["params"] == {"subscriptionId": "sub_1", **event}
    assert encoded == event  # still the dict every other consumer reads


class Socket:
    """A connection's socket: takes ``room`` bytes per write (None: all)."""

    def __init__(self) -> None:
        self.room: int | None = None
        self.direct: list[bytes] = []  # what try_write took, write by write
        self.by_task: list[bytes] = []  # what the write task sent

    def try_write(self, data: bytes) -> int:
        taken = len(data) if self.room is None else min(self.room, len(data))
        if taken:
            self.direct.append(bytes(data[:taken]))
        return taken

    async def send(self, batch: list[bytes]) -> None:
        self.by_task.append(b"".join(batch))

    def text(self) -> bytes:
        return b"".join(self.direct) + b"".join(self.by_task)


def lines(data: bytes) -> list[dict]:
    return [msgspec.json.decode(line) for line in data.splitlines()]


async def test_queued_events_go_out_in_one_write_without_the_write_task(nursery):
    socket = Socket()
    async with connection_of(socket, nursery) as conn:
        for seq in range(3):
            assert conn.offer_event("sub_1", framing.EncodedEvent({**EVENTS[0], "seq": seq})) is True
        assert socket.direct == []  # nothing is written before the flush
        conn.flush_events()
        assert len(socket.direct) == 1 and socket.by_task == []
        assert [m["params"]["seq"] for m in lines(socket.text())] == [0, 1, 2]
        assert conn.limits.outbound.used == 0  # the shared budget is given back once written


async def test_what_the_socket_does_not_take_follows_in_order_through_the_write_task(nursery):
    socket = Socket()
    async with connection_of(socket, nursery) as conn:
        socket.room = 10
        for seq in range(3):
            conn.offer_event("sub_1", framing.EncodedEvent({**EVENTS[0], "seq": seq}))
        conn.flush_events()
        socket.room = None
        await conn.send({"jsonrpc": "2.0", "id": 1, "result": {}})  # an answer queued behind the rest
        await conn.drain(timeout=5)
        messages = lines(socket.text())
        assert [m.get("params", {}).get("seq", "answer") for m in messages] == [0, 1, 2, "answer"]
        assert conn.limits.outbound.used == 0


async def test_an_event_with_no_room_on_its_connection_is_left_to_wait(nursery):
    socket = Socket()
    limits = ServerLimits(events_per_connection=600)
    async with connection_of(socket, nursery, limits) as conn:
        first = framing.EncodedEvent({**EVENTS[0], "payload": {"text": "x" * 400}})
        assert conn.offer_event("sub_1", first) is True
        assert conn.offer_event("sub_1", first) is None  # past the connection's bound for events: the caller waits
        conn.flush_events()
        assert conn.offer_event("sub_1", first) is True  # written: room again


class connection_of:
    """A Connection on ``socket`` with its write task, closed afterwards."""

    def __init__(self, socket: Socket, nursery: trio.Nursery, limits: ServerLimits | None = None) -> None:
        self.conn = Connection(socket.send, nursery, limits=limits or ServerLimits(), try_write=socket.try_write)
        self.nursery = nursery

    async def __aenter__(self) -> Connection:
        self.scope = trio.CancelScope()

        async def write() -> None:
            with self.scope:
                await self.conn._write_loop()

        self.nursery.start_soon(write)
        await trio.lowlevel.checkpoint()
        return self.conn

    async def __aexit__(self, *exc: object) -> None:
        self.scope.cancel()

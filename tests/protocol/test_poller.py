"""F20: the Unix socket's one reading task (``ReadPoller``): every connection
is read by it, in order, and whatever must wait (a free slot, room for an
error) pauses only that connection's input."""

from __future__ import annotations

import json
import os
import socket

import pytest
import trio

from agentd.protocol.limits import ServerLimits
from agentd.protocol.methods import Method, MethodTable
from agentd.protocol.poller import ReadPoller
from agentd.protocol.server import MAX_INFLIGHT, serve_unix
from agentd.protocol.wire import NoParams

from tests.protocol.test_hostile_clients import read_line


class HoldingRouter:
    """``hold`` waits until ``release`` is set (a task per request);
    ``quick`` is answered where it is read, with how many ``hold`` run now."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.holding = 0
        self.most_holding = 0
        self.changed = trio.Event()

        async def hold(_router, _params, _conn):
            self.holding += 1
            self.most_holding = max(self.most_holding, self.holding)
            self.changed.set()
            self.changed = trio.Event()
            await self.release.wait()
            self.holding -= 1
            return {"held": True}

        async def quick_slow(_router, _params, _conn):  # pragma: no cover - quick answers first
            raise AssertionError("quick is answered without a task")

        def quick(_router, _params, _conn):
            return {"holding": self.holding}

        self.methods = MethodTable([
            Method("hold", NoParams, "daemon", hold),
            Method("quick", NoParams, "daemon", quick_slow, quick=quick),
        ])

    async def dispatch(self, method, params, connection):
        return await method.handler(self, params, connection)

    async def wait_holding(self, count: int) -> None:
        with trio.fail_after(10):
            while self.holding < count:
                await self.changed.wait()


def request(request_id: int, method: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method}).encode() + b"\n"


@pytest.fixture
async def holding_server(short_dir, nursery):
    router = HoldingRouter()
    path = short_dir / "p.sock"
    await nursery.start(lambda task_status: serve_unix(path, router, limits=ServerLimits(), task_status=task_status))
    return path, router


async def test_a_connection_past_its_slots_waits_alone_and_resumes_in_order(holding_server):
    """F20: 300 waiting requests and a quick one in one write: the first 256
    run, the rest stay unread (no 257th handler starts, the quick one is not
    answered) while another connection is served; freeing the slots takes
    the rest, and every request is answered."""
    path, router = holding_server
    busy = await trio.open_unix_socket(str(path))
    other = await trio.open_unix_socket(str(path))
    total = MAX_INFLIGHT + 44
    await busy.send_all(b"".join(request(i, "hold") for i in range(total)) + request(total, "quick"))
    await router.wait_holding(MAX_INFLIGHT)
    buffer = bytearray()
    for i in range(3):
        await other.send_all(request(1000 + i, "quick"))
        reply = await read_line(other, buffer)
        assert reply["id"] == 1000 + i
        assert reply["result"] == {"holding": MAX_INFLIGHT}
    assert router.most_holding == MAX_INFLIGHT
    with pytest.raises(BlockingIOError):  # nothing answered yet: not even the quick request, read last
        os.read(busy.socket.fileno(), 1)
    router.release.set()
    answers: dict[int, dict] = {}
    busy_buffer = bytearray()
    while len(answers) < total + 1:
        reply = await read_line(busy, busy_buffer)
        answers[reply["id"]] = reply
    assert all(answers[i]["result"] == {"held": True} for i in range(total))
    assert "holding" in answers[total]["result"]
    assert router.most_holding == MAX_INFLIGHT
    await busy.aclose()
    await other.aclose()


async def test_quick_answers_come_in_request_order_from_many_connections(holding_server):
    """F20: 32 connections each send 50 quick requests in one write; each
    gets its 50 answers in order, none lost, none crossed."""
    path, _router = holding_server
    streams = [await trio.open_unix_socket(str(path)) for _ in range(32)]
    async with trio.open_nursery() as nursery:
        for n, stream in enumerate(streams):
            nursery.start_soon(stream.send_all, b"".join(request(n * 1000 + i, "quick") for i in range(50)))
    for n, stream in enumerate(streams):
        buffer = bytearray()
        assert [(await read_line(stream, buffer))["id"] for _ in range(50)] == [n * 1000 + i for i in range(50)]
        await stream.aclose()


async def test_clients_that_leave_mid_line_do_not_disturb_the_next_one(holding_server):
    """F20: 20 connections that close mid-line, each with a request still in
    flight, end one by one; the next client (often on a reused descriptor
    number) is served."""
    path, router = holding_server
    for round_ in range(20):
        stream = await trio.open_unix_socket(str(path))
        await stream.send_all(request(1, "hold") + b'{"jsonrpc":"2.0","id":2,"meth')
        await router.wait_holding(round_ + 1)
        await stream.aclose()
    fresh = await trio.open_unix_socket(str(path))
    await fresh.send_all(request(9, "quick"))
    assert (await read_line(fresh, bytearray()))["id"] == 9
    await fresh.aclose()


async def test_the_poller_calls_back_each_ready_descriptor_and_survives_a_failing_callback(nursery):
    """F20: a callback that raises costs only its descriptor."""
    poller = ReadPoller()
    await nursery.start(poller.run)
    good_a, good_b = socket.socketpair()
    bad_a, bad_b = socket.socketpair()
    seen: list[bytes] = []
    got = trio.Event()

    def good() -> None:
        seen.append(good_b.recv(100))
        got.set()

    def bad() -> None:
        raise RuntimeError("a bug")

    poller.add(good_b.fileno(), good)
    poller.add(bad_b.fileno(), bad)
    bad_a.send(b"x")
    good_a.send(b"hello")
    with trio.fail_after(10):
        await got.wait()
    assert seen == [b"hello"]
    assert bad_b.fileno() not in poller._callbacks
    got = trio.Event()
    good_a.send(b"again")
    with trio.fail_after(10):
        await got.wait()
    assert seen == [b"hello", b"again"]
    poller.remove(good_b.fileno())
    for sock in (good_a, good_b, bad_a, bad_b):
        sock.close()


async def test_a_paused_descriptor_is_not_called_back_even_when_its_peer_hangs_up(nursery):
    """F20: pausing takes the descriptor out of the set — epoll reports a
    hang-up whatever a member asked for — and resuming puts it back."""
    poller = ReadPoller()
    await nursery.start(poller.run)
    ours, peer = socket.socketpair()
    calls: list[bytes] = []
    called = trio.Event()

    def on_readable() -> None:
        calls.append(ours.recv(100))
        called.set()

    poller.add(ours.fileno(), on_readable)
    poller.pause(ours.fileno())
    peer.send(b"late")
    peer.close()
    # A second descriptor that is called back proves the poller made passes meanwhile.
    probe_ours, probe_peer = socket.socketpair()
    probed = trio.Event()
    poller.add(probe_ours.fileno(), lambda: (probe_ours.recv(100), probed.set()))
    for _ in range(3):
        probed = trio.Event()
        probe_peer.send(b"p")
        with trio.fail_after(10):
            await probed.wait()
    assert calls == []
    poller.resume(ours.fileno())
    with trio.fail_after(10):
        await called.wait()
    assert calls[0] == b"late"  # then the hang-up (b""), maybe already
    for fd in (ours.fileno(), probe_ours.fileno()):
        poller.remove(fd)
    for sock in (ours, probe_ours, probe_peer):
        sock.close()


class TricklingRouter:
    """``hold`` requests end one at a time, when the test lets one go
    (``let_one_go``): slots free up one by one, as behind a busy writer."""

    def __init__(self) -> None:
        self.gate = trio.Semaphore(0)
        self.started = 0

        async def hold(_router, _params, _conn):
            self.started += 1
            await self.gate.acquire()
            return {"held": True}

        def quick(_router, _params, _conn):
            return {"started": self.started}

        self.methods = MethodTable([
            Method("hold", NoParams, "daemon", hold),
            Method("quick", NoParams, "daemon", hold, quick=quick),
        ])

    async def dispatch(self, method, params, connection):
        return await method.handler(self, params, connection)


async def test_a_burst_past_the_slots_freed_one_by_one_is_answered_whole(short_dir, nursery):
    """Hostile round item 1 (F20): 600 requests in one write, whose slots
    free up one at a time, pause the connection again and again; every one
    is answered, a second client is served meanwhile, and the server lives
    (the second pause of a paused descriptor crashed the socket server)."""
    router = TricklingRouter()
    path = short_dir / "t.sock"
    await nursery.start(lambda task_status: serve_unix(path, router, limits=ServerLimits(), task_status=task_status))
    busy = await trio.open_unix_socket(str(path))
    other = await trio.open_unix_socket(str(path))
    total = 600
    await busy.send_all(b"".join(request(i, "hold") for i in range(total)))
    busy_buffer, other_buffer = bytearray(), bytearray()
    answered: list[int] = []
    for i in range(total):
        router.gate.release()
        answered.append((await read_line(busy, busy_buffer))["id"])
        if i % 100 == 0:  # the other connection is served throughout
            await other.send_all(request(10_000 + i, "quick"))
            assert (await read_line(other, other_buffer))["id"] == 10_000 + i
    assert sorted(answered) == list(range(total))
    assert router.started == total
    await busy.send_all(request(total, "quick"))
    assert (await read_line(busy, busy_buffer))["result"] == {"started": total}
    await busy.aclose()
    await other.aclose()


async def test_a_defect_in_one_connections_task_closes_that_connection_only(short_dir, nursery):
    """Hostile round item 1 (F20): a connection task that fails with a bug
    (here a ``Then`` follow-up, as a subscription's stream is) closes that
    connection; the server and its other connections go on."""
    from agentd.protocol.server import Then

    async def buggy(_router, _params, _conn):
        async def follow_up():
            raise RuntimeError("a bug in a connection's task")
        return Then({"ok": True}, follow_up)

    async def echo(_router, _params, _conn):
        return {"echo": True}

    class BuggyRouter:
        methods = MethodTable([Method("buggy", NoParams, "daemon", buggy), Method("echo", NoParams, "daemon", echo)])

        async def dispatch(self, method, params, connection):
            return await method.handler(self, params, connection)

    path = short_dir / "b.sock"
    await nursery.start(lambda task_status: serve_unix(path, BuggyRouter(), limits=ServerLimits(), task_status=task_status))
    bystander = await trio.open_unix_socket(str(path))
    victim = await trio.open_unix_socket(str(path))
    victim_buffer = bytearray()
    await victim.send_all(request(1, "buggy"))
    assert (await read_line(victim, victim_buffer))["result"] == {"ok": True}
    with pytest.raises(EOFError):
        await read_line(victim, victim_buffer)  # closed: the defect cost this connection
    await bystander.send_all(request(2, "echo"))
    assert (await read_line(bystander, bytearray()))["result"] == {"echo": True}
    fresh = await trio.open_unix_socket(str(path))
    await fresh.send_all(request(3, "echo"))
    assert (await read_line(fresh, bytearray()))["result"] == {"echo": True}
    for stream in (bystander, victim, fresh):
        await stream.aclose()

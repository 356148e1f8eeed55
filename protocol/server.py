"""The Unix-socket JSON-RPC server.

The server knows the wire and nothing of threads: each request's method is
looked up in the router's method table, its params are decoded into that
method's Struct and handed to the ``Router`` (supplied by the supervisor),
whose answer or AgentdError becomes the response. Requests on one
connection run concurrently (up to a bound), so one slow command never holds
up a client's reads.

The path of a request takes as few trio hops as its method allows. One task
(``ReadPoller``) reads every Unix-socket connection: one wake-up for all the
connections that have input, not one per connection. A method with a
``quick`` form that cannot block (a read) is answered right there, and a
durable command whose batch it only queues (``Later``) is answered from the
writer's delivery on the loop — neither spawns a task. An answer is written
straight to the socket when nothing is queued before it and the socket takes
it whole; only the rest wakes the connection's write task. Everything else
runs in a task of its own.

Security: the socket is created 0600 inside a 0700 directory, and a peer
whose uid (SO_PEERCRED) differs from the daemon's is refused. Agents run as
the same uid, so a method is also checked against who asks (its ``access``):
``control`` methods are refused (``forbidden``) to a peer that is an agent's
process or its descendant, which the router tells from the peer's pid
(``Router.identify_peer``, asked once per connection; see ``peers.py``).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import struct
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, Protocol

import msgspec
import trio

from . import framing
from .errors import AgentdError, Forbidden, InternalError, InvalidRequest, MethodNotFound, Overloaded, ParseError
from .limits import ReserveDescriptor, ServerLimits, descriptor_limit
from .methods import SLOW, Later, Method, ResultMismatch
from .peers import UNIDENTIFIED_PEER, Peer
from .poller import ReadPoller
from .wire import Params

log = logging.getLogger(__name__)

MAX_INFLIGHT = 256  # concurrent requests per connection

#: hold every answer to its method's result Struct before it is sent
#: (``Method.check_result``): the test suite's daemons run with
#: ``AGENTD_CHECK_RESULTS=1``, so a handler that answers off the schema fails
#: the test that called it. Off by default: the check converts the whole
#: answer (a 10,000-thread ``thread.list`` is converted once more), and a
#: person's daemon should answer rather than refuse over an extra field.
CHECK_RESULTS = os.environ.get("AGENTD_CHECK_RESULTS", "") not in ("", "0")


class Then:
    """A result whose follow-up must start only after the response is queued
    (``events.subscribe``: the response, then the stream)."""

    def __init__(self, result: Any, then: Callable[[], Awaitable[Any]]) -> None:
        self.result = result
        self.then = then


class Router(Protocol):
    """What the server needs from the daemon: its method table, a way to
    run a method with its decoded params, and — optionally — a way to tell
    who a Unix-socket peer is (``identify_peer(pid, pidfd) -> Peer``; a
    router without it sees every peer as the person's)."""

    @property
    def methods(self) -> Mapping[str, Method]:
        """The method table (read-only here, so a router's own Mapping type fits)."""
        ...

    async def dispatch(self, method: Method, params: Params, connection: Connection) -> Any: ...


Sender = Callable[[list[bytes]], Awaitable[None]]
#: a non-blocking write of bytes to the transport: how many it took (0 when
#: it would block); None where the transport has no such write
TryWrite = Callable[[bytes], int]


class Connection:
    """One client connection, whatever its transport: ordered outbound
    messages and tasks that live as long as it does.

    What waits to be written is bounded in bytes, not messages (one event can
    be a megabyte of text): a message waits for room on its connection, and
    an event that finds the daemon's shared budget spent is refused
    (``send_event``), which ends its subscription with a resync.
    """

    def __init__(
        self, sender: Sender, nursery: trio.Nursery, *, limits: ServerLimits, peer_pid: int | None = None,
        try_write: TryWrite | None = None, identify: Callable[[], Peer] | None = None,
    ) -> None:
        self._sender = sender
        self._identify = identify
        self._peer: Peer | None = None
        self._try_write = try_write
        self._writing = False  # the write task is in the middle of a write
        self.nursery = nursery
        self.limits = limits
        self.peer_pid = peer_pid
        # Outbound lines wait in a plain list that the write loop takes whole:
        # cheaper per message than a memory channel, same order.
        self._pending: list[bytes] = []
        #: bytes queued or being written; events also count against limits.outbound
        self._pending_bytes = 0
        self._event_bytes = 0
        self._wake = trio.Event()
        self._room = trio.Event()
        self._broken = False
        #: subscription id -> cancel scope of its streaming task
        self.subscriptions: dict[str, trio.CancelScope] = {}
        self.closed = trio.Event()

    @property
    def peer(self) -> Peer:
        """Who this client is (an agent's process or not), found out once: at
        the first call that needs to know, while the client waits for its
        answer (so it is alive to be looked at)."""
        if self._peer is None:
            self._peer = self._identify() if self._identify is not None else UNIDENTIFIED_PEER
        return self._peer

    def _queue(self, line: bytes, *, event: bool) -> None:
        if not event and self._try_write is not None and not self._pending and not self._writing:
            # An answer, with nothing queued or being written: write it now,
            # in order, and wake the write task only for what the socket did
            # not take. (Events come in bursts: the write task joins them.)
            try:
                written = self._try_write(line)
            except OSError:
                written = 0  # the write task meets the same error and ends the connection
            if written == len(line):
                return
            line = line[written:]
        self._pending.append(line)
        self._pending_bytes += len(line)
        if event:
            self._event_bytes += len(line)
        self._wake.set()

    async def send(self, message: dict[str, Any]) -> None:
        """Queue a message; waits while the client is slow to read."""
        await self.send_line(framing.encode(message))

    async def send_line(self, line: bytes) -> None:
        """Queue an encoded message; waits while the client is slow to read."""
        cap = self.limits.outbound_per_connection
        while self._pending_bytes and self._pending_bytes + len(line) > cap and not self._broken:
            await self._room.wait()
        if not self._broken:
            self._queue(line, event=False)

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send(framing.notification(method, params))

    async def send_event(self, method: str, params: dict[str, Any]) -> bool:
        """Queue a notification of a subscription: waits for room on this
        connection like ``send``, but returns False at once when the daemon's
        shared budget for queued events is spent and this connection already
        holds more than ``limits.reader_floor`` (the caller resyncs). A client
        that keeps reading always gets its events: the budget is taken by
        those that stopped, and they are the ones cut off."""
        line = framing.encode(framing.notification(method, params))
        if not self._event_room(len(line)):
            # A slow reader: wait for room without holding the line (a
            # stalled one must not cost a megabyte per event it is behind).
            size, line = len(line), b""
            while not self._event_room(size) and not self._broken:
                await self._room.wait()
            if not self._broken:
                line = framing.encode(framing.notification(method, params))
        if self._broken:
            return True  # nothing to keep: the stream ends with the connection
        if not self.limits.outbound.take(len(line)):
            if self._pending_bytes > self.limits.reader_floor:
                return False
            self.limits.outbound.force(len(line))
        self._queue(line, event=True)
        return True

    def offer_event(self, subscription_id: str, event: dict[str, Any]) -> bool | None:
        """Queue a subscription's ``event`` without waiting, for the next
        ``flush_events``: True when queued (or the connection is gone), False
        when the daemon's shared budget refuses it (as ``send_event``), None
        when there is no room on this connection now (the caller waits with
        ``send_event``). The line is spelled from the event's own JSON when
        it carries it (``framing.EncodedEvent``: one encoding for every subscriber)."""
        if self._broken:
            return True
        line = framing.subscription_line("event", subscription_id, event)
        size = len(line)
        if not self._event_room(size):
            return None
        if not self.limits.outbound.take(size):
            if self._pending_bytes > self.limits.reader_floor:
                return False
            self.limits.outbound.force(size)
        self._pending.append(line)
        self._pending_bytes += size
        self._event_bytes += size
        return True

    def flush_events(self) -> None:
        """Write what ``offer_event`` queued: straight to the socket when
        nothing is being written and it takes it whole (no wake-up of the
        write task: a streamed delta is written by the task that published
        it, one write for every event it had), else by the write task."""
        if not self._pending:
            return
        if self._try_write is not None and not self._writing:
            data = b"".join(self._pending) if len(self._pending) > 1 else self._pending[0]
            try:
                written = self._try_write(data)
            except OSError:
                written = 0  # the write task meets the same error and ends the connection
            if written == len(data):
                self._pending.clear()
                self.limits.outbound.release(self._event_bytes)
                self._pending_bytes = self._event_bytes = 0
                if self._room.statistics().tasks_waiting:  # a send or a drain waits for room
                    room, self._room = self._room, trio.Event()
                    room.set()
                return
            # The rest waits for the write task, still counted whole until
            # it is written (as a batch the write task took).
            self._pending[:] = [data[written:]]
        self._wake.set()

    def _event_room(self, size: int) -> bool:
        """Whether an event of ``size`` bytes may be queued now: within the
        connection's bound, and within its bound for events (either way, one
        goes out when nothing of its kind is queued)."""
        limits = self.limits
        return ((not self._pending_bytes or self._pending_bytes + size <= limits.outbound_per_connection)
                and (not self._event_bytes or self._event_bytes + size <= limits.events_per_connection))

    def has_room(self, size: int) -> bool:
        """Whether a message of ``size`` bytes can be queued without waiting."""
        return not self._pending_bytes or self._pending_bytes + size <= self.limits.outbound_per_connection

    def send_now(self, line: bytes) -> None:
        """Queue an encoded message at once (the caller checked ``has_room``);
        a connection that is gone drops it."""
        if not self._broken:
            self._queue(line, event=False)

    def close_output(self) -> None:
        """Nothing more is sent: late answers (a commit that completes after
        the client left) are dropped, never written to a reused descriptor."""
        self._broken = True
        self._try_write = None

    def notify_now(self, method: str, params: dict[str, Any]) -> None:
        """Queue a small notification past the bounds (``events.resync``):
        the client must learn why its stream ended."""
        if not self._broken:
            self._queue(framing.encode(framing.notification(method, params)), event=False)

    async def drain(self, *, timeout: float) -> None:
        """Wait (at most ``timeout``) until everything queued is written."""
        with trio.move_on_after(timeout):
            while self._pending_bytes and not self._broken:
                await self._room.wait()

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a task for as long as the connection lives."""
        self.nursery.start_soon(fn, *args)

    async def _write_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                batch, self._pending = self._pending, []
                written, events = self._pending_bytes, self._event_bytes
                # One write for everything queued meanwhile; the bytes stay
                # counted until they are written.
                self._writing = True
                await self._sender(batch)
                self._writing = False
                del batch
                self._pending_bytes -= written
                self._event_bytes -= events
                self.limits.outbound.release(events)
                room, self._room = self._room, trio.Event()
                room.set()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self._broken = True
            self._pending.clear()
            self.limits.outbound.release(self._event_bytes)
            self._pending_bytes = self._event_bytes = 0
            self._room.set()


async def serve_messages(
    router: Router,
    messages: AsyncIterator[bytes | framing.LineTooLong | framing.InputOverloaded],
    sender: Sender,
    *,
    limits: ServerLimits,
    peer_pid: int | None = None,
    try_write: TryWrite | None = None,
    identify: Callable[[], Peer] | None = None,
) -> None:
    """Serve JSON-RPC requests from ``messages`` until they end, answering
    through ``sender`` (and ``try_write``, when the transport has it), with
    ``identify`` saying who the client is. The WebSocket transport's way;
    the Unix socket's is ``_PolledInput``."""
    async with _open_connection(sender, limits=limits, peer_pid=peer_pid, try_write=try_write,
                                identify=identify) as connection:
        limiter = trio.Semaphore(MAX_INFLIGHT)
        async for message in messages:
            if not await _take(router, connection, limiter, message):
                break


@asynccontextmanager
async def _open_connection(sender: Sender, *, limits: ServerLimits, peer_pid: int | None,
                           try_write: TryWrite | None,
                           identify: Callable[[], Peer] | None = None) -> AsyncIterator[Connection]:
    """A connection with its write task, for the block; when the block ends
    (the input is over), nothing more is sent and its tasks are cancelled."""
    async with trio.open_nursery() as nursery:
        connection = Connection(sender, nursery, limits=limits, peer_pid=peer_pid, try_write=try_write,
                                identify=identify)
        nursery.start_soon(connection._write_loop)
        try:
            yield connection
        finally:
            connection.close_output()
            connection.closed.set()
            nursery.cancel_scope.cancel()


async def _take(router: Router, connection: Connection, limiter: trio.Semaphore,
                message: bytes | framing.LineTooLong | framing.InputOverloaded) -> bool:
    """Serve one message of a connection's input, in order: report a line
    that was too long, or start the request once it has one of the
    connection's slots. False: the connection is to be ended."""
    error: AgentdError
    if isinstance(message, framing.LineTooLong):
        error = ParseError(
            f"request is longer than {message.limit} bytes and was dropped; send smaller requests",
            limit=message.limit,
        )
        await connection.send(framing.error_response(None, error.to_error()))
        return True
    if isinstance(message, framing.InputOverloaded):
        error = Overloaded(
            "agentd is holding too many unfinished requests from its clients; "
            "this connection is closed, reconnect and send complete lines",
            limit=message.limit,
        )
        await connection.send(framing.error_response(None, error.to_error()))
        await connection.drain(timeout=1.0)
        return False
    # A request holds one of the connection's 256 slots from here until it
    # is answered, whichever way it is served.
    try:
        limiter.acquire_nowait()
    except trio.WouldBlock:
        await limiter.acquire()
    _start(router, connection, limiter, message)
    return True


def _start(router: Router, connection: Connection, limiter: trio.Semaphore, line: bytes) -> None:
    """Serve a request that holds a slot: answered at once where it cannot
    block, else in a task of its own."""
    request = _Request(connection, limiter)
    if not request.serve_quickly(router, line):
        connection.nursery.start_soon(request.serve, router)


class _PolledInput:
    """The input side of one Unix-socket connection, read by the daemon's
    ``ReadPoller`` instead of a task of its own.

    Requests are taken in order, exactly as ``serve_messages`` takes them;
    whatever needs waiting (a free slot, room to report an over-long line)
    pauses the descriptor and waits in a task of the connection, and reading
    resumes after it. ``ended`` is set when the input is over.
    """

    def __init__(self, fd: int, poller: ReadPoller, router: Router, connection: Connection,
                 lines: framing.LineReader) -> None:
        self.fd = fd
        self.poller = poller
        self.router = router
        self.connection = connection
        self.lines = lines
        self.limiter = trio.Semaphore(MAX_INFLIGHT)
        self.ended = trio.Event()
        self._waiting = False  # a task is taking a message; input is paused

    def on_readable(self) -> None:
        """The poller's callback: read one chunk and take what it completes."""
        if self._waiting:  # paused: a message before these bytes is still being taken
            return
        try:
            chunk = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:  # reset by the peer: the end of its requests
            chunk = b""
        try:
            self.lines.feed(chunk)
            self._take_ready()
        except Exception:  # noqa: BLE001 - a bug must cost this connection, not the daemon
            log.exception("serving a connection failed; closing it")
            self._end()

    def _take_ready(self) -> None:
        router, connection, limiter, lines = self.router, self.connection, self.limiter, self.lines
        while (message := lines.next_ready()) is not None:
            if isinstance(message, bytes):
                try:
                    limiter.acquire_nowait()
                except trio.WouldBlock:
                    pass
                else:
                    _start(router, connection, limiter, message)
                    continue
            # It must wait: no more input until it is taken.
            self._waiting = True
            self.poller.pause(self.fd)
            connection.start_soon(self._take_later, message)
            return
        if lines.ended:
            self._end()

    async def _take_later(self, message: bytes | framing.LineTooLong | framing.InputOverloaded) -> None:
        try:
            if not await _take(self.router, self.connection, self.limiter, message):
                self._end()
                return
            self._waiting = False
            self._take_ready()
        except Exception:  # noqa: BLE001 - a bug must cost this connection, not the daemon
            log.exception("serving a connection failed; closing it")
            self._end()
            return
        if not self._waiting and not self.ended.is_set():
            self.poller.resume(self.fd)

    def _end(self) -> None:
        self.poller.remove(self.fd)
        self.ended.set()


class _Request:
    """One request line, from parsing to its answer."""

    __slots__ = ("connection", "limiter", "id", "notification", "method", "params")

    def __init__(self, connection: Connection, limiter: trio.Semaphore) -> None:
        self.connection = connection
        self.limiter = limiter
        self.id: Any = None
        # JSON-RPC: a notification is never answered, not even with an error
        self.notification = False
        self.method: Method | None = None
        self.params: Params | None = None

    def _parse(self, router: Router, line: bytes) -> tuple[Method, Params]:
        try:
            message = framing.decode(line)
        except msgspec.DecodeError as exc:
            raise ParseError(f"request is not valid JSON: {exc}") from None
        except RecursionError:
            raise ParseError("request is nested too deeply to parse") from None
        if isinstance(message, list):
            raise InvalidRequest("batch requests are not supported; send one request per line")
        if not isinstance(message, dict):
            raise InvalidRequest("a request must be a JSON object")
        request_id = message.get("id")
        # JSON-RPC ids are strings, numbers or null; a boolean is none of them
        # (though Python counts it as an int).
        if request_id is not None and (isinstance(request_id, bool) or not isinstance(request_id, (str, int))):
            raise InvalidRequest("id must be a string or an integer")
        self.id = request_id
        name = message.get("method")
        if not isinstance(name, str):
            raise InvalidRequest("a request needs a string method")
        self.notification = "id" not in message
        if message.get("jsonrpc", "2.0") != "2.0":
            raise InvalidRequest('jsonrpc must be "2.0"')
        method = router.methods.get(name)
        if method is None:
            raise MethodNotFound(f"unknown method {name!r}; the methods are listed in protocol/README.md", method=name)
        self.params = method.decode(message.get("params"))
        if method.access != "open" and method.access_for(self.params) == "control":
            _refuse_to_agents(method, self.connection)
        self.method = method
        return method, self.params

    def serve_quickly(self, router: Router, line: bytes) -> bool:
        """Parse and, where that cannot block, answer where the request was read.
        False: the request needs a task (``serve``)."""
        try:
            method, params = self._parse(router, line)
            quick = method.quick
            if quick is None:
                return False
            result = quick(router, params, self.connection)
            if result is SLOW:
                return False
        except AgentdError as exc:
            return self._answer_now(None, exc)
        except Exception as exc:  # noqa: BLE001 - a bug must cost one request, not the daemon
            log.exception("request failed")
            return self._answer_now(None, InternalError(f"agentd failed: {exc}"))
        if isinstance(result, Later):
            result.on_done(self._answer_later)
            return True
        return self._answer_now(result, None)

    def _message(self, result: Any, error: BaseException | None) -> bytes:
        if error is None and CHECK_RESULTS:
            error = _mismatch(self.method, result)
        if error is None:
            return framing.encode(framing.response(self.id, result))
        if not isinstance(error, AgentdError):
            log.error("request failed", exc_info=error)
            error = InternalError(f"agentd failed: {error}")
        return framing.encode(framing.error_response(self.id, error.to_error()))

    def _answer_now(self, result: Any, error: BaseException | None) -> bool:
        """Answer where the request was read; a task answers instead when the
        connection has no room (the reader never waits on a slow client)."""
        if self.method is None and error is None:
            return False  # not parsed: the task reports why
        if self.notification:
            self.limiter.release()
            return True
        line = self._message(result, error)
        if self.connection.has_room(len(line)):
            self.connection.send_now(line)
            self.limiter.release()
        else:
            self.connection.start_soon(self._send, line)
        return True

    def _answer_later(self, result: Any, error: BaseException | None) -> None:
        """A ``Later`` resolved, on the loop (outside any task of this connection)."""
        connection = self.connection
        if connection.closed.is_set() or self.notification:
            self.limiter.release()
            return
        line = self._message(result, error)
        if connection.has_room(len(line)):
            connection.send_now(line)
            self.limiter.release()
        else:
            try:
                connection.start_soon(self._send, line)
            except RuntimeError:  # the connection's nursery is closing: nobody to answer
                self.limiter.release()

    async def _send(self, line: bytes) -> None:
        try:
            await self.connection.send_line(line)
        finally:
            self.limiter.release()

    async def serve(self, router: Router) -> None:
        """Run the method's full handler in this task and answer."""
        connection = self.connection
        try:
            try:
                if self.method is None or self.params is None:  # set together, by _parse
                    raise InternalError("request was not parsed")  # pragma: no cover - serve_quickly parses first
                result = await router.dispatch(self.method, self.params, connection)
                follow_up = None
                if isinstance(result, Then):
                    result, follow_up = result.result, result.then
                if CHECK_RESULTS and (mismatch := _mismatch(self.method, result)) is not None:
                    raise mismatch
                if not self.notification:
                    await connection.send(framing.response(self.id, result))
                if follow_up is not None:
                    connection.start_soon(follow_up)
            except AgentdError as exc:
                if not self.notification:
                    await connection.send(framing.error_response(self.id, exc.to_error()))
            except Exception as exc:  # noqa: BLE001 - a bug must cost one request, not the daemon
                log.exception("request failed")
                if not self.notification:
                    await connection.send(framing.error_response(self.id, InternalError(f"agentd failed: {exc}").to_error()))
        finally:
            self.limiter.release()


def _mismatch(method: Method | None, result: Any) -> ResultMismatch | None:
    """Why ``result`` is not an answer ``method`` may give (logged), or None."""
    if method is None:
        return None
    try:
        method.check_result(result)
    except ResultMismatch as exc:
        log.error("%s", exc.message)
        return exc
    return None


def _refuse_to_agents(method: Method, connection: Connection) -> None:
    """A control method from an agent's process (or its descendant) is
    ``forbidden``: an agent must not answer its own approvals, roll back,
    stop or steer — the person does (see protocol/README.md)."""
    peer = connection.peer
    if peer.agent_process:
        raise Forbidden(
            f"{method.name} is refused: this connection comes from {peer.why}, and an agent's processes may "
            "not control agentd (only read it, and use agentd's tool); the person answers, stops or rolls back "
            "from a client agentd did not start",
            method=method.name, pid=peer.pid, sessionId=peer.session_id,
        )


#: getsockopt option for a pidfd of the peer as it connected (Linux 6.5+; not in every Python's socket module)
SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)


def peer_pidfd(sock: trio.socket.SocketType) -> int | None:
    """A pidfd of the process that connected (the caller closes it), or None
    where the kernel has no SO_PEERPIDFD. Unlike the pid, it cannot come to
    name another process that reuses the pid.

    Raises:
        ProcessLookupError: that process is gone (its pid may be another's by now).
    """
    try:
        return sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD)
    except ProcessLookupError:
        raise
    except OSError:
        return None


def _peer_identifier(router: Router, pid: int | None, sock: trio.socket.SocketType) -> Callable[[], Peer] | None:
    """How a Unix-socket connection finds out who its peer is (None: the
    router cannot tell, and every peer is the person's)."""
    identify_peer = getattr(router, "identify_peer", None)
    if identify_peer is None:
        return None

    def identify() -> Peer:
        if pid is None:
            # SO_PEERCRED failed: nothing says whose it is.
            return Peer(pid=None, agent_process=True, why="a process agentd could not identify")
        try:
            pidfd = peer_pidfd(sock)
        except ProcessLookupError:
            return Peer(pid=pid, agent_process=True, why="a process that exited before agentd could tell whose it was")
        try:
            peer: Peer = identify_peer(pid, pidfd)  # the router's (a getattr: the method is optional)
            return peer
        finally:
            if pidfd is not None:
                os.close(pidfd)

    return identify


def peer_credentials(sock: trio.socket.SocketType) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of a Unix-socket peer."""
    data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", data)


async def _refuse(stream: trio.SocketStream, error: AgentdError) -> None:
    """One error line, then close: a client that is turned away learns why."""
    try:
        with trio.move_on_after(1.0):
            await stream.send_all(framing.encode(framing.error_response(None, error.to_error())))
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        await stream.aclose()


async def handle_connection(stream: trio.SocketStream, router: Router, limits: ServerLimits,
                            poller: ReadPoller) -> None:
    """Serve one client until it disconnects; ``poller`` reads its requests."""
    pid: int | None = None
    try:
        pid, uid, _gid = peer_credentials(stream.socket)
    except OSError:
        uid = -1
    if uid != os.getuid():
        await _refuse(stream, InvalidRequest("connection refused: agentd only serves its own user"))
        return
    if limits.connections >= limits.max_connections:
        await _refuse(stream, Overloaded(
            f"agentd is serving its maximum of {limits.max_connections} connections; close some and retry",
            limit=limits.max_connections,
        ))
        return
    limits.connections += 1

    async def send_lines(batch: list[bytes]) -> None:
        data = b"".join(batch)
        batch.clear()  # the lines are in ``data`` now: not held twice while a slow client reads
        await stream.send_all(data)

    fd = stream.socket.fileno()
    raw: socket.socket | None = None

    def try_write(data: bytes) -> int:
        # The socket is non-blocking (trio's); a full one raises BlockingIOError.
        assert raw is not None
        try:
            return raw.send(data)
        except BlockingIOError:
            return 0

    lines = framing.LineReader(budget=limits.inbound)
    try:
        # The same descriptor as a plain socket (no dup), to send(2) on it as
        # trio does — not write(2), which /proc/PID/io counts as bytes
        # written; detached (never closed by it) before the stream closes it.
        raw = socket.socket(fileno=fd)
        async with _open_connection(send_lines, limits=limits, peer_pid=pid, try_write=try_write,
                                    identify=_peer_identifier(router, pid, stream.socket)) as connection:
            polled = _PolledInput(fd, poller, router, connection, lines)
            poller.add(fd, polled.on_readable)
            try:
                await polled.ended.wait()
            finally:
                poller.remove(fd)  # before the descriptor is closed
    finally:
        if raw is not None:
            raw.detach()
        limits.connections -= 1
        with trio.CancelScope(shield=True):
            await lines.aclose()
            await stream.aclose()


def _make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and any missing parents, 0700 — only those:
    a directory that already exists (``/tmp``, a shared runtime dir) is
    never changed."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for created in reversed(missing):
        try:
            os.mkdir(created, 0o700)
        except FileExistsError:
            continue
        os.chmod(created, 0o700)  # the umask must not widen it


def prepare_socket_path(path: Path) -> None:
    """Make the socket's missing directories (0700) and remove a stale agentd
    socket. Nothing that is not a socket is ever removed.

    Raises:
        OSError: another daemon listens on ``path``, or ``path`` is not a socket.
    """
    _make_private_dirs(path.parent)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(
            errno.EEXIST,
            f"{path} exists and is not a socket; agentd will not replace it — remove it or pass another --socket",
        )
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink()  # stale: nobody listens
    else:
        raise OSError(errno.EADDRINUSE, f"another agentd is already listening on {path}")
    finally:
        probe.close()


#: accept() errors that mean "no descriptors or memory right now", not "broken"
_ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
ACCEPT_WARNING_INTERVAL = 60.0


def _out_of_descriptors_line(errno_: int) -> bytes:
    """The one line a client turned away for want of descriptors gets."""
    limit = descriptor_limit()
    return framing.encode(framing.error_response(None, Overloaded(
        f"agentd cannot take another connection now ({os.strerror(errno_)}, descriptor limit {limit}); "
        "retry shortly", limit=limit,
    ).to_error()))


async def accept_loop(listener: trio.SocketListener, handler: Callable[[trio.SocketStream], Awaitable[None]],
                      *, reserve: ReserveDescriptor | None = None,
                      refusal: Callable[[int], bytes] = _out_of_descriptors_line,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Accept clients until cancelled, each handled in a task of its own
    whose failure ends that connection only. Out of descriptors, it keeps
    serving the connections it has and says so once a minute (no
    traceback); with a ``reserve`` each client that arrives meanwhile is
    accepted on the reserve's descriptor, sent ``refusal(errno)`` (by
    default an ``overloaded`` error line) and closed at once: it does not
    hang in the backlog. Without one, or when even that fails, it tries
    again with a growing pause, until descriptors free up."""
    last_warning = -ACCEPT_WARNING_INTERVAL
    pause = 0.01
    async with trio.open_nursery() as nursery:
        task_status.started()
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_CAPACITY_ERRNOS:
                    raise
                now = trio.current_time()
                if now - last_warning >= ACCEPT_WARNING_INTERVAL:
                    last_warning = now
                    log.warning("cannot accept new clients: %s; serving the connected ones, turning new ones "
                                "away and retrying", os.strerror(exc.errno))
                if reserve is not None and reserve.turn_away(listener.socket.fileno(), refusal(exc.errno)):
                    # One client told; the next accept waits for the next one (no spin).
                    await trio.lowlevel.checkpoint()
                    continue
                await trio.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            pause = 0.01
            if reserve is not None:
                reserve.take()  # descriptors came back: hold the reserve again if it was lost
            nursery.start_soon(_contained, handler, stream)


async def _contained(handler: Callable[[trio.SocketStream], Awaitable[None]], stream: trio.SocketStream) -> None:
    """Run one connection's handler so that whatever goes wrong in it ends
    that connection only: the accept loop (and every other client) goes on."""
    try:
        await handler(stream)
    except Exception:  # noqa: BLE001 - a defect on one connection must not end the server
        log.exception("a connection's handler failed; that connection is closed")
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def serve_unix(path: Path, router: Router, *, limits: ServerLimits | None = None,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Listen on the Unix socket at ``path`` until cancelled; unlink it after."""
    path = Path(path)
    limits = limits or ServerLimits.for_this_process()
    prepare_socket_path(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)  # the socket file is born 0600
    try:
        await sock.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    sock.listen(1024)  # many clients may connect at once (a burst of 256 is benchmarked)
    listener = trio.SocketListener(sock)
    reserve = ReserveDescriptor()  # early: a low number, under any limit set later
    try:
        async with trio.open_nursery() as nursery:
            poller = ReadPoller()
            await nursery.start(poller.run)

            async def handler(stream: trio.SocketStream) -> None:
                await handle_connection(stream, router, limits, poller)

            await accept_loop(listener, handler, reserve=reserve, task_status=task_status)
    finally:
        reserve.close()
        with trio.CancelScope(shield=True):
            await listener.aclose()
        try:
            path.unlink()
        except FileNotFoundError:
            pass

"""The Unix-socket JSON-RPC server.

The server knows the wire and nothing of threads: each request's method is
looked up in the router's method table, its params are decoded into that
method's Struct and handed to the ``Router`` (supplied by the supervisor),
whose answer or AgentdError becomes the response. Requests on one
connection run concurrently (up to a bound), so one slow command never holds
up a client's reads.

Security: the socket is created 0600 inside a 0700 directory, and a peer
whose uid (SO_PEERCRED) differs from the daemon's is refused.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import stat
import struct
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, Protocol

import msgspec
import trio

from . import framing
from .errors import AgentdError, InternalError, InvalidRequest, MethodNotFound, Overloaded, ParseError
from .limits import ServerLimits
from .methods import Method
from .wire import Params

log = logging.getLogger(__name__)

MAX_INFLIGHT = 256  # concurrent requests per connection


class Then:
    """A result whose follow-up must start only after the response is queued
    (``events.subscribe``: the response, then the stream)."""

    def __init__(self, result: Any, then: Callable[[], Awaitable[Any]]) -> None:
        self.result = result
        self.then = then


class Router(Protocol):
    """What the server needs from the daemon: its method table, and a way to
    run a method with its decoded params."""

    methods: Mapping[str, Method]

    async def dispatch(self, method: Method, params: Params, connection: Connection) -> Any: ...


Sender = Callable[[list[bytes]], Awaitable[None]]


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
    ) -> None:
        self._sender = sender
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

    def _queue(self, line: bytes, *, event: bool) -> None:
        self._pending.append(line)
        self._pending_bytes += len(line)
        if event:
            self._event_bytes += len(line)
        self._wake.set()

    async def send(self, message: dict[str, Any]) -> None:
        """Queue a message; waits while the client is slow to read."""
        line = framing.encode(message)
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
        cap = self.limits.outbound_per_connection
        while self._pending_bytes and self._pending_bytes + len(line) > cap and not self._broken:
            await self._room.wait()
        if self._broken:
            return True  # nothing to keep: the stream ends with the connection
        if not self.limits.outbound.take(len(line)):
            if self._pending_bytes > self.limits.reader_floor:
                return False
            self.limits.outbound.force(len(line))
        self._queue(line, event=True)
        return True

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
                await self._sender(batch)
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
) -> None:
    """Serve JSON-RPC requests from ``messages`` until they end, answering
    through ``sender``. Shared by the Unix-socket and WebSocket transports."""
    async with trio.open_nursery() as nursery:
        connection = Connection(sender, nursery, limits=limits, peer_pid=peer_pid)
        nursery.start_soon(connection._write_loop)
        limiter = trio.Semaphore(MAX_INFLIGHT)
        try:
            async for message in messages:
                if isinstance(message, framing.LineTooLong):
                    error = ParseError(
                        f"request is longer than {message.limit} bytes and was dropped; send smaller requests",
                        limit=message.limit,
                    )
                    await connection.send(framing.error_response(None, error.to_error()))
                    continue
                if isinstance(message, framing.InputOverloaded):
                    error = Overloaded(
                        "agentd is holding too many unfinished requests from its clients; "
                        "this connection is closed, reconnect and send complete lines",
                        limit=message.limit,
                    )
                    await connection.send(framing.error_response(None, error.to_error()))
                    await connection.drain(timeout=1.0)
                    break
                await limiter.acquire()
                nursery.start_soon(_serve_request, connection, router, message, limiter)
        finally:
            connection.closed.set()
            nursery.cancel_scope.cancel()


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


async def handle_connection(stream: trio.SocketStream, router: Router, limits: ServerLimits) -> None:
    """Serve one client until it disconnects."""
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
        await stream.send_all(b"".join(batch))

    lines = framing.LineReader(stream, budget=limits.inbound).lines()
    try:
        await serve_messages(router, lines, send_lines, limits=limits, peer_pid=pid)
    finally:
        limits.connections -= 1
        with trio.CancelScope(shield=True):
            await lines.aclose()
            await stream.aclose()


async def _serve_request(connection: Connection, router: Router, line: bytes, limiter: trio.Semaphore) -> None:
    request_id = None
    notification = False  # JSON-RPC: a notification is never answered, not even with an error
    try:
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
            request_id = None
            raise InvalidRequest("id must be a string or an integer")
        name = message.get("method")
        if not isinstance(name, str):
            raise InvalidRequest("a request needs a string method")
        notification = "id" not in message
        if message.get("jsonrpc", "2.0") != "2.0":
            raise InvalidRequest('jsonrpc must be "2.0"')
        method = router.methods.get(name)
        if method is None:
            raise MethodNotFound(f"unknown method {name!r}; the methods are listed in protocol/README.md", method=name)
        params = method.decode(message.get("params"))
        result = await router.dispatch(method, params, connection)
        follow_up = None
        if isinstance(result, Then):
            result, follow_up = result.result, result.then
        if not notification:
            await connection.send(framing.response(request_id, result))
        if follow_up is not None:
            connection.start_soon(follow_up)
    except AgentdError as exc:
        if not notification:
            await connection.send(framing.error_response(request_id, exc.to_error()))
    except Exception as exc:  # noqa: BLE001 - a bug must cost one request, not the daemon
        log.exception("request failed")
        if not notification:
            await connection.send(framing.error_response(request_id, InternalError(f"agentd failed: {exc}").to_error()))
    finally:
        limiter.release()


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


async def _accept_loop(listener: trio.SocketListener, handler: Callable[[trio.SocketStream], Awaitable[None]],
                       *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Accept clients until cancelled. Out of descriptors, it keeps serving
    the connections it has, says so once a minute (no traceback), and tries
    again with a growing pause until descriptors free up."""
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
                    log.warning("cannot accept new clients: %s; serving the connected ones and retrying",
                                os.strerror(exc.errno))
                await trio.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            pause = 0.01
            nursery.start_soon(handler, stream)


async def serve_unix(path: Path, router: Router, *, limits: ServerLimits | None = None,
                     task_status=trio.TASK_STATUS_IGNORED) -> None:
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
    sock.listen(128)
    listener = trio.SocketListener(sock)
    try:
        async def handler(stream: trio.SocketStream) -> None:
            await handle_connection(stream, router, limits)

        await _accept_loop(listener, handler, task_status=task_status)
    finally:
        with trio.CancelScope(shield=True):
            await listener.aclose()
        try:
            path.unlink()
        except FileNotFoundError:
            pass

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
import struct
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping, Protocol

import msgspec
import trio

from . import framing
from .errors import AgentdError, InternalError, InvalidRequest, MethodNotFound, ParseError
from .methods import Method
from .wire import Params

log = logging.getLogger(__name__)

MAX_INFLIGHT = 256  # concurrent requests per connection
OUTBOUND_QUEUE = 1024  # messages waiting to be written per connection


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
    messages and tasks that live as long as it does."""

    def __init__(self, sender: Sender, nursery: trio.Nursery, *, peer_pid: int | None = None) -> None:
        self._sender = sender
        self.nursery = nursery
        self.peer_pid = peer_pid
        # Outbound lines wait in a plain list that the write loop takes whole:
        # cheaper per message than a memory channel, same order, same bound.
        self._pending: list[bytes] = []
        self._wake = trio.Event()
        self._room = trio.Event()
        self._broken = False
        #: subscription id -> cancel scope of its streaming task
        self.subscriptions: dict[str, trio.CancelScope] = {}
        self.closed = trio.Event()

    async def send(self, message: dict[str, Any]) -> None:
        """Queue a message; waits while the client is slow to read."""
        while len(self._pending) >= OUTBOUND_QUEUE and not self._broken:
            await self._room.wait()
        if self._broken:
            return
        self._pending.append(framing.encode(message))
        self._wake.set()

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self.send(framing.notification(method, params))

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run a task for as long as the connection lives."""
        self.nursery.start_soon(fn, *args)

    async def _write_loop(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                batch, self._pending = self._pending, []
                room, self._room = self._room, trio.Event()
                room.set()
                # One write for everything queued meanwhile.
                await self._sender(batch)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self._broken = True
            self._room.set()


async def serve_messages(
    router: Router,
    messages: AsyncIterator[bytes | framing.LineTooLong],
    sender: Sender,
    *,
    peer_pid: int | None = None,
) -> None:
    """Serve JSON-RPC requests from ``messages`` until they end, answering
    through ``sender``. Shared by the Unix-socket and WebSocket transports."""
    async with trio.open_nursery() as nursery:
        connection = Connection(sender, nursery, peer_pid=peer_pid)
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
                await limiter.acquire()
                nursery.start_soon(_serve_request, connection, router, message, limiter)
        finally:
            connection.closed.set()
            nursery.cancel_scope.cancel()


def peer_credentials(sock: trio.socket.SocketType) -> tuple[int, int, int]:
    """``(pid, uid, gid)`` of a Unix-socket peer."""
    data = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", data)


async def handle_connection(stream: trio.SocketStream, router: Router) -> None:
    """Serve one client until it disconnects."""
    pid: int | None = None
    try:
        pid, uid, _gid = peer_credentials(stream.socket)
    except OSError:
        uid = -1
    if uid != os.getuid():
        error = InvalidRequest("connection refused: agentd only serves its own user").to_error()
        try:
            await stream.send_all(framing.encode(framing.error_response(None, error)))
        finally:
            await stream.aclose()
        return

    async def send_lines(batch: list[bytes]) -> None:
        await stream.send_all(b"".join(batch))

    try:
        await serve_messages(router, framing.LineReader(stream).lines(), send_lines, peer_pid=pid)
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


async def _serve_request(connection: Connection, router: Router, line: bytes, limiter: trio.Semaphore) -> None:
    request_id = None
    notification = False  # JSON-RPC: a notification is never answered, not even with an error
    try:
        try:
            message = framing.decode(line)
        except msgspec.DecodeError as exc:
            raise ParseError(f"request is not valid JSON: {exc}") from None
        if isinstance(message, list):
            raise InvalidRequest("batch requests are not supported; send one request per line")
        if not isinstance(message, dict):
            raise InvalidRequest("a request must be a JSON object")
        request_id = message.get("id")
        if request_id is not None and not isinstance(request_id, (str, int)):
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


def prepare_socket_path(path: Path) -> None:
    """Make the socket's directory 0700 and remove a stale socket file.

    Raises:
        OSError: another daemon is listening on ``path``.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale: nobody listens
        else:
            raise OSError(errno.EADDRINUSE, f"another agentd is already listening on {path}")
        finally:
            probe.close()


async def serve_unix(path: Path, router: Router, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Listen on the Unix socket at ``path`` until cancelled; unlink it after."""
    path = Path(path)
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
            await handle_connection(stream, router)

        await trio.serve_listeners(handler, [listener], task_status=task_status)
    finally:
        with trio.CancelScope(shield=True):
            await listener.aclose()
        try:
            path.unlink()
        except FileNotFoundError:
            pass

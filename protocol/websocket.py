"""The same JSON-RPC protocol over a WebSocket on loopback (SPEC F20).

For clients that cannot open a Unix socket (a browser-based GUI, an editor
extension host). One JSON-RPC message per text frame. Because any local
process — and any web page the person opens — can reach a loopback port:

* it binds loopback addresses only;
* every connection must present the token from ``<data-dir>/websocket.token``
  (a 0600 file), as ``Authorization: Bearer TOKEN`` or ``?token=TOKEN``;
* a request with an ``Origin`` header (a browser) is refused unless that
  origin is explicitly allowed — or, with the web console on (``--web``),
  is the console's own origin;
* a request that repeats ``Origin``, ``Host`` or ``Authorization`` is
  refused (400) before any of them is judged;
* an agent's process may have read the token (it runs as the person's uid):
  the processes holding the client's end of the loopback connection are
  found in /proc (``loopback_peer.py``) and told apart as a Unix-socket peer
  is, so ``control`` methods are ``forbidden`` to an agent's here too.

The port's HTTP front (protocol/http.py) hands upgrades to trio-websocket and
answers other requests with the console's files, or 404 when it is off.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets
import stat
from functools import partial
from pathlib import Path
from typing import AsyncIterator, Iterable
from urllib.parse import parse_qs, urlsplit

import trio
import trio_websocket

from . import framing, http, login
from .limits import ReserveDescriptor, ServerLimits
from .loopback_peer import stream_peer
from .peers import Peer
from .server import Router, accept_loop, serve_messages

log = logging.getLogger(__name__)

TOKEN_FILE = "websocket.token"


def load_or_create_token(data_dir: Path) -> str:
    """The daemon's WebSocket token, created 0600 on first use.

    A token file that others could read (or that another user owns) may have
    leaked: it is replaced by a new one, never reused.
    """
    path = Path(data_dir) / TOKEN_FILE
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None:
        private = stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077
        token = path.read_text().strip() if private else ""
        if token:
            return token
        if not private:
            log.warning("%s was readable by others or not a private file; it is replaced by a new token", path)
        path.unlink()
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return token


def check_loopback(host: str) -> None:
    """Raise ValueError unless ``host`` is a loopback address."""
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"the WebSocket listens on loopback only (127.0.0.1 or ::1), not {host!r}")


def _presented_token(request: trio_websocket.WebSocketRequest) -> str | None:
    for name, value in request.headers:
        if name.lower() == b"authorization" and value.startswith(b"Bearer "):
            return value[len(b"Bearer ") :].decode(errors="replace")
    query = parse_qs(urlsplit(request.path).query)
    values = query.get("token")
    return values[0] if values else None


def _origin(request: trio_websocket.WebSocketRequest) -> str | None:
    for name, value in request.headers:
        if name.lower() == b"origin":
            return value.decode(errors="replace")
    return None


async def websocket_peer(router: Router, stream: trio.SocketStream) -> Peer:
    """Who a WebSocket client is (``loopback_peer.stream_peer``)."""
    return await stream_peer(getattr(router, "identify_peer", None), stream, "a WebSocket client")


async def serve_websocket(
    router: Router,
    *,
    host: str,
    port: int,
    token: str,
    allowed_origins: Iterable[str] = (),
    limits: ServerLimits | None = None,
    console: bool = False,
    login_codes: login.LoginCodes | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``task_status.started(port)`` with the bound port.
    ``limits`` are shared with the daemon's other transports.

    With ``console`` the same port serves the web console (``GET /``, see
    protocol/http.py), and the console's own origin (``http://HOST:PORT``,
    ``http://localhost:PORT``) passes the Origin check; every other origin
    still needs ``allowed_origins``. With ``login_codes`` too, the page trades
    a one-time code for the token at ``POST /login`` (protocol/login.py)."""
    check_loopback(host)
    limits = limits or ServerLimits.for_this_process()
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    files = await trio.to_thread.run_sync(http.load_console) if console else None
    pages = http.Console(files, host=host, port=bound)
    allowed = frozenset(allowed_origins) | (
        frozenset(f"http://{h}" for h in pages.hosts) if console else frozenset())
    front = _Front(router, token=token, allowed=allowed, limits=limits, pages=pages,
                   login_codes=login_codes if console else None)
    reserve = ReserveDescriptor()
    try:
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                await nursery.start(partial(accept_loop, listener, front.handle_connection, reserve=reserve,
                                            refusal=_out_of_descriptors_response))
            task_status.started(bound)
    finally:
        reserve.close()
        with trio.CancelScope(shield=True):
            for listener in listeners:
                await listener.aclose()


class _Front:
    """One port's connections: an HTTP head read first, then the console's
    files, a login, or an upgrade to the WebSocket that serves the protocol.

    Args:
        allowed: the origins a browser's request may come from.
        pages: the console's files (none when it is off: 404).
        login_codes: ``POST /login`` trades these for the token (None: no login).
    """

    def __init__(self, router: Router, *, token: str, allowed: frozenset[str], limits: ServerLimits,
                 pages: http.Console, login_codes: login.LoginCodes | None) -> None:
        self.router = router
        self.token = token
        self.allowed = allowed
        self.limits = limits
        self.pages = pages
        self.login_codes = login_codes

    async def handle_connection(self, stream: trio.SocketStream) -> None:
        """Serve one accepted connection, then close it."""
        try:
            await self._serve_head(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio_websocket.ConnectionClosed):
            pass
        except Exception:  # noqa: BLE001 - a defect on one connection must not end the server
            log.exception("a WebSocket connection's handler failed; that connection is closed")
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _serve_head(self, stream: trio.SocketStream) -> None:
        try:
            head_bytes = await http.read_head(stream)
        except http.HeadTooLong:
            await http.send_response(stream, 431, [], b"request head too long\n")
            return
        except trio.TooSlowError:
            return
        head = http.parse_head(head_bytes) if head_bytes else None
        if head is None:
            if head_bytes:
                await http.send_response(stream, 400, [], b"not an HTTP/1.1 request\n")
            return
        if head.repeated:
            # Refused outright, never judged by one of the copies.
            names = ", ".join(sorted(head.repeated))
            await http.send_response(stream, 400, [], f"repeated header: {names}; send each once\n".encode())
            return
        if not head.is_websocket:
            await self._answer_http(stream, head, head_bytes)
            return
        await self._upgrade(stream, head_bytes)

    async def _answer_http(self, stream: trio.SocketStream, head: http.Head, head_bytes: bytes) -> None:
        """A plain HTTP request: a login, or one of the console's files."""
        if self.login_codes is not None and head.path.split("?", 1)[0] == login.LOGIN_PATH:
            await http.send_response(stream, *await login.exchange(
                stream, head, head_bytes, self.login_codes, hosts=self.pages.hosts))
            return
        await http.send_response(stream, *self.pages.respond(head))

    async def _upgrade(self, stream: trio.SocketStream, head_bytes: bytes) -> None:
        async with trio.open_nursery() as nursery:
            # A handshake wsproto refuses is answered (400) by its reader
            # task and never becomes a request: bounded, as the head was.
            request = None
            with trio.move_on_after(http.HEAD_TIMEOUT):
                request = await trio_websocket.wrap_server_stream(
                    nursery, http.ReplayStream(stream, head_bytes), max_message_size=framing.MAX_LINE)
            if request is not None:
                await self._handle_websocket(request, stream)
            nursery.cancel_scope.cancel()

    def _refusal(self, request: trio_websocket.WebSocketRequest) -> tuple[int, bytes] | None:
        """Why the handshake is refused (status, body), or None to accept it."""
        origin = _origin(request)
        if origin is not None and origin not in self.allowed:
            return 403, f"origin {origin} is not allowed".encode()
        presented = _presented_token(request)
        if presented is None or not hmac.compare_digest(presented.encode(), self.token.encode()):
            return 401, b"a valid token is required (see <data-dir>/websocket.token)"
        limits = self.limits
        if limits.connections >= limits.max_connections:
            return 503, f"agentd is serving its maximum of {limits.max_connections} connections".encode()
        return None

    async def _handle_websocket(self, request: trio_websocket.WebSocketRequest, stream: trio.SocketStream) -> None:
        refusal = self._refusal(request)
        if refusal is not None:
            status, body = refusal
            await request.reject(status, body=body)
            return
        peer = await websocket_peer(self.router, stream)
        ws = await request.accept()
        limits = self.limits
        limits.connections += 1
        try:
            await serve_messages(self.router, _messages(ws), partial(_send_frames, ws), limits=limits,
                                 identify=lambda: peer)
        finally:
            limits.connections -= 1
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                await ws.aclose()


async def _messages(ws: trio_websocket.WebSocketConnection) -> AsyncIterator[bytes]:
    """The client's messages, as the lines of the protocol, until it closes."""
    while True:
        try:
            message = await ws.get_message()
        except trio_websocket.ConnectionClosed:
            return
        yield message.encode() if isinstance(message, str) else bytes(message)


async def _send_frames(ws: trio_websocket.WebSocketConnection, batch: list[bytes]) -> None:
    """Lines out, one text frame each."""
    try:
        for data in batch:
            await ws.send_message(data.rstrip(b"\n").decode())
    except trio_websocket.ConnectionClosed as exc:
        raise trio.BrokenResourceError("websocket closed") from exc


def _out_of_descriptors_response(errno_: int) -> bytes:
    """What a client turned away for want of descriptors gets: a 503."""
    body = f"agentd cannot take another connection now ({os.strerror(errno_)}); retry shortly\n".encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 1\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)) + body

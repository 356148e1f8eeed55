"""The same JSON-RPC protocol over a WebSocket on loopback (SPEC F20).

For clients that cannot open a Unix socket (a browser-based GUI, an editor
extension host). One JSON-RPC message per text frame. Because any local
process — and any web page the person opens — can reach a loopback port:

* it binds loopback addresses only;
* every connection must present the token from ``<data-dir>/websocket.token``
  (a 0600 file), as ``Authorization: Bearer TOKEN`` or ``?token=TOKEN``;
* a request with an ``Origin`` header (a browser) is refused unless that
  origin is explicitly allowed.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets
import stat
from pathlib import Path
from typing import AsyncIterator, Iterable
from urllib.parse import parse_qs, urlsplit

import trio
import trio_websocket

from . import framing
from .limits import ServerLimits
from .server import Router, serve_messages

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


async def serve_websocket(
    router: Router,
    *,
    host: str,
    port: int,
    token: str,
    allowed_origins: Iterable[str] = (),
    limits: ServerLimits | None = None,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``task_status.started(port)`` with the bound port.
    ``limits`` are shared with the daemon's other transports."""
    check_loopback(host)
    allowed = frozenset(allowed_origins)
    limits = limits or ServerLimits.for_this_process()

    async def handler(request: trio_websocket.WebSocketRequest) -> None:
        origin = _origin(request)
        if origin is not None and origin not in allowed:
            await request.reject(403, body=f"origin {origin} is not allowed".encode())
            return
        presented = _presented_token(request)
        if presented is None or not hmac.compare_digest(presented.encode(), token.encode()):
            await request.reject(401, body=b"a valid token is required (see <data-dir>/websocket.token)")
            return
        if limits.connections >= limits.max_connections:
            await request.reject(503, body=f"agentd is serving its maximum of {limits.max_connections} connections".encode())
            return
        ws = await request.accept()

        async def messages() -> AsyncIterator[bytes]:
            while True:
                try:
                    message = await ws.get_message()
                except trio_websocket.ConnectionClosed:
                    return
                yield message.encode() if isinstance(message, str) else bytes(message)

        async def send_frames(batch: list[bytes]) -> None:
            try:
                for data in batch:
                    await ws.send_message(data.rstrip(b"\n").decode())
            except trio_websocket.ConnectionClosed as exc:
                raise trio.BrokenResourceError("websocket closed") from exc

        limits.connections += 1
        try:
            await serve_messages(router, messages(), send_frames, limits=limits)
        finally:
            limits.connections -= 1

    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            lambda task_status: trio_websocket.serve_websocket(
                handler, host, port, None, max_message_size=framing.MAX_LINE, task_status=task_status
            )
        )
        task_status.started(server.port)

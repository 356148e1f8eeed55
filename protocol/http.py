"""The loopback HTTP front of the WebSocket port: one listener, two uses.

A connection's request head is read here. A WebSocket upgrade is handed, with
the bytes already read, to trio-websocket; any other request is answered from
the web console's static files (``protocol/console/``, package data) when the
console is on (``agentd serve --web``), else with 404. The console is the
protocol's reference client: it talks to the daemon over the same WebSocket
as every other client, and the files served here hold no secret (the token
reaches the page through a one-time code, protocol/login.py, or in the URL's
fragment, which a browser never sends).
"""

from __future__ import annotations

import http
import importlib.resources
import mimetypes
from dataclasses import dataclass
from typing import Iterable

import h11
import trio

#: the request head (request line and headers) may be at most this long
MAX_HEAD = 16 * 1024
#: seconds a client may take to send its request head
HEAD_TIMEOUT = 10.0
CONSOLE_PACKAGE = "agentd.protocol"
CONSOLE_DIR = "console"

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".json": "application/json"}


class HeadTooLong(Exception):
    """The client sent more than ``MAX_HEAD`` bytes without ending its head."""


async def read_head(stream: trio.abc.ReceiveStream) -> bytes:
    """Everything received until the end of the request head (it may hold a
    few bytes past it); b"" if the client closed first.

    Raises:
        HeadTooLong: the head passed ``MAX_HEAD`` bytes.
        trio.TooSlowError: it took longer than ``HEAD_TIMEOUT``.
    """
    data = b""
    with trio.fail_after(HEAD_TIMEOUT):
        while b"\r\n\r\n" not in data:
            if len(data) > MAX_HEAD:
                raise HeadTooLong()
            chunk = await stream.receive_some(4096)
            if not chunk:
                return b""
            data += chunk
    if data.index(b"\r\n\r\n") > MAX_HEAD:
        raise HeadTooLong()
    return data


#: headers a request may carry once: with two, a check that reads one while
#: another part of the stack reads the other could be passed with a forged
#: value (an allowed ``Origin`` first, the real one second)
SINGLE_HEADERS = frozenset({"host", "origin", "authorization"})


@dataclass(frozen=True)
class Head:
    """The parts of a request head that decide how it is served."""

    method: str
    path: str
    #: each header's value (the last, where one is repeated: see ``repeated``)
    headers: dict[str, str]
    #: names (lower case) of the ``SINGLE_HEADERS`` the request repeats
    repeated: frozenset[str] = frozenset()

    @property
    def is_websocket(self) -> bool:
        return "websocket" in self.headers.get("upgrade", "").lower()


def parse_head(data: bytes) -> Head | None:
    """The request in ``data``, or None when it is not HTTP/1.1 that h11 accepts."""
    conn = h11.Connection(h11.SERVER)
    try:
        conn.receive_data(data)
        event = conn.next_event()
    except h11.RemoteProtocolError:
        return None
    if not isinstance(event, h11.Request):
        return None
    headers: dict[str, str] = {}
    repeated = set()
    for raw_name, raw_value in event.headers:
        name = raw_name.decode("latin-1").lower()
        if name in headers and name in SINGLE_HEADERS:
            repeated.add(name)
        headers[name] = raw_value.decode("latin-1")
    return Head(event.method.decode("ascii", "replace"), event.target.decode("latin-1"), headers, frozenset(repeated))


class ReplayStream(trio.abc.Stream):
    """A stream whose first bytes are ``prefix`` (what the head reader
    already took), then the wrapped stream's."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._prefix:
            await trio.lowlevel.checkpoint()
            size = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            return data
        return await self._stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self._stream.aclose()


def load_console() -> dict[str, bytes]:
    """The console's files by URL path (``/`` is index.html). Blocking: call
    it in a worker thread."""
    root = importlib.resources.files(CONSOLE_PACKAGE) / CONSOLE_DIR
    files = {f"/{entry.name}": entry.read_bytes() for entry in root.iterdir()
             if entry.is_file() and not entry.name.startswith(".")}
    files["/"] = files["/index.html"]
    return files


def local_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` values (and, with ``http://``, the origins) under which a
    browser on this machine reaches the daemon: its address and localhost."""
    shown = f"[{host}]" if ":" in host else host
    return frozenset({f"{shown}:{port}", f"localhost:{port}"})


class Console:
    """Answers the HTTP requests that are not WebSocket upgrades."""

    def __init__(self, files: dict[str, bytes] | None, *, host: str, port: int) -> None:
        #: None: the console is off, every page is 404
        self.files = files
        self.hosts = local_hosts(host, port)

    def respond(self, head: Head) -> tuple[int, list[tuple[str, str]], bytes]:
        """Status, headers and body for ``head``."""
        if self.files is None:
            return 404, [], b"the web console is off; `agentd serve --web` serves it\n"
        host = head.headers.get("host", "")
        if host not in self.hosts:
            # A page of another site resolving its name to 127.0.0.1 (DNS rebinding) gets nothing.
            return 421, [], b"unknown host\n"
        if head.method not in ("GET", "HEAD"):
            return 405, [("Allow", "GET, HEAD")], b"only GET\n"
        path = head.path.split("?", 1)[0].split("#", 1)[0]
        body = self.files.get(path)
        if body is None:
            return 404, [], b"not found\n"
        name = "/index.html" if path == "/" else path
        suffix = name[name.rfind("."):]
        content_type = _TYPES.get(suffix) or mimetypes.guess_type(name)[0] or "application/octet-stream"
        headers = [
            ("Content-Type", content_type),
            # Nothing from the internet, no inline script; the page connects to
            # this daemon's WebSocket only.
            ("Content-Security-Policy", f"default-src 'self'; connect-src ws://{host} http://{host}; img-src 'self' data:; "
                                        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
            ("Referrer-Policy", "no-referrer"),
            ("X-Content-Type-Options", "nosniff"),
            ("Cache-Control", "no-cache"),
        ]
        return 200, headers, b"" if head.method == "HEAD" else body


async def send_response(stream: trio.abc.SendStream, status: int, headers: Iterable[tuple[str, str]], body: bytes) -> None:
    """One HTTP/1.1 response, then the connection closes (no keep-alive)."""
    conn = h11.Connection(h11.SERVER)
    # h11 needs to have seen a request before it writes a response.
    conn.receive_data(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    conn.next_event()
    all_headers = [*headers, ("Content-Length", str(len(body))), ("Connection", "close")]
    data = conn.send(h11.Response(status_code=status, headers=all_headers, reason=http.HTTPStatus(status).phrase.encode()))
    data += conn.send(h11.Data(data=body)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)

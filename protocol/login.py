"""One-time login codes for the web console, so that no process's command
line ever holds the WebSocket token.

``agentd web`` used to open ``http://127.0.0.1:PORT/#token=…``: a browser
started with that URL keeps it in its argv, which every local user can read
in ``/proc/PID/cmdline``. Now it asks the daemon, over the Unix socket (its
own user only), for a code (``web.loginCode``) and opens
``http://127.0.0.1:PORT/#code=…``. The page trades the code once for the
token (``POST /login``, answered here) and keeps the token in its session
storage. A code:

* works once, and only within ``CODE_TTL`` seconds;
* is exchanged only for a connection of the daemon's own user (the
  loopback peer's uid, ``peer_uid``): another user who read the code in a
  command line before the browser used it gets nothing, and the code
  stays good for its owner;
* is exchanged only for the console's own origin and host.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from collections import OrderedDict
from typing import Callable

import trio

from . import http, peer_uid

#: seconds a login code stays good: enough for a browser to start and load the page
CODE_TTL = 60.0
#: codes outstanding at once; issuing more forgets the oldest
MAX_CODES = 32
#: bytes of a ``POST /login`` body (a code is 22 characters)
MAX_BODY = 256
LOGIN_PATH = "/login"


class LoginCodes:
    """The codes issued and not yet used, each good once until it expires."""

    def __init__(self, token: str, *, ttl: float = CODE_TTL, clock: Callable[[], float] = trio.current_time) -> None:
        self._token = token
        self.ttl = ttl
        self._clock = clock
        self._codes: OrderedDict[str, float] = OrderedDict()  # code -> when it expires

    def issue(self) -> str:
        """A new code, good once within ``ttl`` seconds."""
        self._forget_expired()
        while len(self._codes) >= MAX_CODES:
            self._codes.popitem(last=False)
        code = secrets.token_urlsafe(16)
        self._codes[code] = self._clock() + self.ttl
        return code

    def redeem(self, code: str) -> str | None:
        """The token for a good code, which is used up by this; None for a
        code that is unknown, used or expired."""
        self._forget_expired()
        for known in self._codes:
            # Constant time per comparison: a wrong code says nothing of a right one.
            if hmac.compare_digest(known.encode(), code.encode()):
                del self._codes[known]
                return self._token
        return None

    def _forget_expired(self) -> None:
        now = self._clock()
        for code in [c for c, expires in self._codes.items() if expires <= now]:
            del self._codes[code]


def _text(status: int, text: str) -> tuple[int, list[tuple[str, str]], bytes]:
    return status, [("Content-Type", "text/plain; charset=utf-8"), ("Cache-Control", "no-store")], (text + "\n").encode()


async def _body(stream: trio.abc.ReceiveStream, head: http.Head, head_bytes: bytes) -> bytes | None:
    """The request's body (at most ``MAX_BODY`` bytes), or None if it is too
    long, not framed by a ``Content-Length`` or not sent in time."""
    try:
        length = int(head.headers.get("content-length", ""))
    except ValueError:
        return None
    if not 0 <= length <= MAX_BODY:
        return None
    body = head_bytes[head_bytes.index(b"\r\n\r\n") + 4:]
    with trio.move_on_after(http.HEAD_TIMEOUT):
        while len(body) < length:
            chunk = await stream.receive_some(MAX_BODY)
            if not chunk:
                return None
            body += chunk
        return body[:length]
    return None


async def exchange(stream: trio.SocketStream, head: http.Head, head_bytes: bytes, codes: LoginCodes, *,
                   hosts: frozenset[str]) -> tuple[int, list[tuple[str, str]], bytes]:
    """Answer ``POST /login`` (the body is the code): 200 with
    ``{"token": …}`` once per good code, for the daemon's own user on the
    console's own origin; an HTTP error saying why otherwise."""
    if head.method != "POST":
        return 405, [("Allow", "POST")], b"only POST\n"
    host = head.headers.get("host", "")
    if host not in hosts:
        return 421, [], b"unknown host\n"
    if head.headers.get("origin") != f"http://{host}":
        return _text(403, "a login code is exchanged only by the console's own page")
    body = await _body(stream, head, head_bytes)
    if body is None:
        return _text(400, f"send the code as the body, with a Content-Length of at most {MAX_BODY} bytes")
    try:
        local, peer = stream.socket.getsockname(), stream.socket.getpeername()
    except OSError:
        return _text(400, "the connection is gone")
    uid = await trio.to_thread.run_sync(peer_uid.of_loopback_tcp, local, peer)
    # Checked before the code is spent: another user's attempt leaves it good for its owner.
    if uid is None:
        return _text(403, "agentd cannot tell which user this connection comes from (another network "
                          "namespace?), so it does not trade the code; open the URL `agentd web --no-open` prints")
    if uid != os.getuid():
        return _text(403, "a login code is exchanged only for the user agentd runs as")
    token = codes.redeem(body.decode("utf-8", "replace").strip())
    if token is None:
        return _text(403, "this login link was used already or has expired; run `agentd web` again")
    return 200, [("Content-Type", "application/json"), ("Cache-Control", "no-store")], json.dumps({"token": token}).encode()

"""agentd's MCP tools over streamable HTTP, on loopback (SPEC F9).

The daemon serves its tools itself (``POST http://127.0.0.1:PORT/mcp``), so
a provider session's runtime reaches them with no process of its own: a
Codex or Claude session connects to the URL with its session's bearer token.
The transport is MCP's streamable HTTP, server side, kept to what a tool
server needs (``mcp.py`` answers the messages):

- ``POST /mcp`` with one JSON-RPC message. A request is answered with
  ``application/json`` — except ``tools/call`` from a client that accepts
  ``text/event-stream``, answered as an event stream: its headers at once,
  a comment every ``HEARTBEAT`` seconds while the tool works (a waiting
  delegation lasts as long as its task, past a client's idle timeouts), then
  the response as one ``message`` event; a client that goes away cancels
  the call. A notification or a response is ``202 Accepted``, no body.
- ``GET`` and ``DELETE`` are ``405``: there is no server-to-client stream and
  no session to end (no ``Mcp-Session-Id`` is issued: the token names who asks).
- Every request needs ``Authorization: Bearer TOKEN`` that the host knows
  (``401`` with ``WWW-Authenticate: Bearer``); a ``Host`` other than this
  port's loopback names is ``421`` and any ``Origin`` ``403`` (no page may
  reach it: DNS rebinding); a repeated ``Host``, ``Origin`` or
  ``Authorization`` is ``400``; an ``MCP-Protocol-Version`` it does not
  speak is ``400``.
- HTTP/1.1 with keep-alive (Codex and Claude keep their connection), bodies
  up to ``MAX_BODY`` bytes (``413``), loopback addresses only — and the same
  on a Unix socket beside the daemon's (for a client that cannot reach the
  loopback port: the ``agentd mcp`` relay, a runtime in a network namespace
  through a bridge), whose peer is identified by SO_PEERCRED.

h11 parses the requests; it is loaded only with this module, which the
daemon imports when it serves the endpoint.
"""

from __future__ import annotations

import http as http_status
import json
import os
import socket
from functools import partial
from typing import Any, Awaitable, Callable

import h11
import trio

from . import framing, http, mcp
from .limits import ServerLimits
from .loopback_peer import stream_peer
from .peers import UNIDENTIFIED_PEER, Peer
from .server import accept_loop, peer_credentials, peer_pidfd

PATH = "/mcp"
#: a message's body may be this long (a protocol line's bound: a delegation's instructions fit)
MAX_BODY = framing.MAX_LINE
#: seconds a kept-alive connection may wait for its next request
IDLE_TIMEOUT = 600.0
#: seconds between the comments that keep a ``tools/call`` event stream alive
HEARTBEAT = 15.0

Response = tuple[int, list[tuple[str, str]], bytes]


class BodyTooLarge(Exception):
    """The request's body passed ``MAX_BODY``."""


async def serve_mcp(host: mcp.ToolHost, listeners: list[trio.SocketListener], *,
                    identify_peer: Callable[[int, int | None], Peer] | None, limits: ServerLimits,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``listeners`` (bound by the caller, on loopback: the port stays
    the same across restarts of this server) until cancelled."""
    port = listeners[0].socket.getsockname()[1]  # the TCP listener first, then any Unix one
    address = listeners[0].socket.getsockname()[0]
    front = McpFront(host, identify_peer=identify_peer, limits=limits, hosts=http.local_hosts(address, port))
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            await nursery.start(partial(accept_loop, listener, front.handle_connection))
        task_status.started()


class McpFront:
    """One HTTP connection after another to the endpoint, each request
    judged (``_refusal``) before its message is answered.

    Args:
        hosts: the ``Host`` values this port answers to.
    """

    def __init__(self, host: mcp.ToolHost, *, identify_peer: Callable[[int, int | None], Peer] | None,
                 limits: ServerLimits, hosts: frozenset[str]) -> None:
        self.host = host
        self.identify_peer = identify_peer
        self.limits = limits
        self.hosts = hosts

    async def handle_connection(self, stream: trio.SocketStream) -> None:
        """Serve one accepted connection's requests, then close it."""
        limits = self.limits
        try:
            if limits.connections >= limits.max_connections:
                await http.send_response(stream, 503, [], b"agentd is serving its maximum of connections\n")
                return
            limits.connections += 1
            try:
                await self._serve(stream)
            finally:
                limits.connections -= 1
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError, BodyTooLarge):
            pass
        finally:
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _serve(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=http.MAX_HEAD)
        peer = _PeerOnce(self.identify_peer, stream)
        while True:
            try:
                request = await _next_request(conn, stream)
            except (h11.RemoteProtocolError, BodyTooLarge) as exc:
                status = 413 if isinstance(exc, BodyTooLarge) else 400
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await _send(conn, stream, (status, [("Connection", "close")], f"{status}: {exc}\n".encode()))
                return
            if request is None:
                return
            head, body = request
            await self._respond(conn, stream, head, body, peer)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _respond(self, conn: h11.Connection, stream: trio.SocketStream, head: http.Head, body: bytes,
                       peer: _PeerOnce) -> None:
        refusal = self._refusal(head)
        if refusal is not None:
            await _send(conn, stream, refusal)
            return
        caller = self.host.authenticate(_bearer(head) or "")
        if caller is None:
            await _send(conn, stream, (401, [("WWW-Authenticate", 'Bearer realm="agentd"')],
                                       b"a valid bearer token is required (one per provider session)\n"))
            return
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            await _send_json(conn, stream, 400, mcp.error(None, mcp.PARSE_ERROR, "the body is not JSON"))
            return
        if not mcp.is_request(message):
            status = 400 if not isinstance(message, dict) else 202
            reply = mcp.error(None, mcp.INVALID_REQUEST, "one JSON-RPC message per request") if status == 400 else None
            await (_send_json(conn, stream, status, reply) if reply else _send(conn, stream, (202, [], b"")))
            return
        if message["method"] == "tools/call" and "text/event-stream" in head.headers.get("accept", ""):
            await _stream_answer(conn, stream, mcp.answer(self.host, caller, message, peer))
            return
        await _send_json(conn, stream, 200, await mcp.answer(self.host, caller, message, peer))

    def _refusal(self, head: http.Head) -> Response | None:
        """Why the request is refused before any token is judged, or None."""
        if head.repeated:
            return 400, [], f"repeated header: {', '.join(sorted(head.repeated))}; send each once\n".encode()
        if head.headers.get("host", "") not in self.hosts:
            return 421, [], b"unknown host\n"
        if "origin" in head.headers:
            return 403, [], b"agentd's MCP endpoint takes no requests from web pages\n"
        if head.path.split("?", 1)[0] != PATH:
            return 404, [], b"not found; agentd's MCP endpoint is /mcp\n"
        if head.method != "POST":
            return 405, [("Allow", "POST")], b"only POST: this endpoint opens no event stream and keeps no session\n"
        version = head.headers.get("mcp-protocol-version")
        if version is not None and version not in mcp.PROTOCOL_VERSIONS:
            return 400, [], f"unsupported MCP-Protocol-Version {version}\n".encode()
        return None


class _PeerOnce:
    """The connection's peer, looked up in /proc at the first tool call
    (``initialize`` and ``tools/list`` need no one's identity)."""

    def __init__(self, identify_peer: Callable[[int, int | None], Peer] | None, stream: trio.SocketStream) -> None:
        self.identify_peer = identify_peer
        self.stream = stream
        self.peer: Peer | None = None

    async def __call__(self) -> Peer:
        if self.peer is None:
            if self.stream.socket.family == socket.AF_UNIX:
                self.peer = _unix_peer(self.identify_peer, self.stream)
            else:
                self.peer = await stream_peer(self.identify_peer, self.stream, "an MCP client")
        return self.peer


def _unix_peer(identify_peer: Callable[[int, int | None], Peer] | None, stream: trio.SocketStream) -> Peer:
    """Who the client of the endpoint's Unix socket is: SO_PEERCRED and the
    peer's pidfd, as on the daemon's socket."""
    if identify_peer is None:
        return UNIDENTIFIED_PEER
    try:
        pid, _uid, _gid = peer_credentials(stream.socket)
        pidfd = peer_pidfd(stream.socket)
    except OSError:
        return Peer(pid=None, agent_process=True, why="an MCP client agentd could not identify")
    try:
        return identify_peer(pid, pidfd)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _bearer(head: http.Head) -> str | None:
    value = head.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def _next_request(conn: h11.Connection, stream: trio.SocketStream) -> tuple[http.Head, bytes] | None:
    """The next request's head and body; None when the client closed the
    connection between requests (or waited past ``IDLE_TIMEOUT``)."""
    head: http.Head | None = None
    body = bytearray()
    with trio.move_on_after(IDLE_TIMEOUT):
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Request):
                head = _head(event)
                declared = head.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > MAX_BODY:
                    # Refused at once, not after the client has sent (or held back) that much.
                    raise BodyTooLarge(f"a message may be at most {MAX_BODY} bytes, not {declared}")
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > MAX_BODY:
                    raise BodyTooLarge(f"a message may be at most {MAX_BODY} bytes")
            elif isinstance(event, h11.EndOfMessage):
                return (head, bytes(body)) if head is not None else None
            else:  # ConnectionClosed
                return None
    return None


def _head(event: h11.Request) -> http.Head:
    headers: dict[str, str] = {}
    repeated = set()
    for raw_name, raw_value in event.headers:
        name = raw_name.decode("latin-1").lower()
        if name in headers and name in http.SINGLE_HEADERS:
            repeated.add(name)
        headers[name] = raw_value.decode("latin-1")
    return http.Head(event.method.decode("ascii", "replace"), event.target.decode("latin-1"), headers,
                     frozenset(repeated))


async def _send(conn: h11.Connection, stream: trio.SocketStream, response: Response) -> None:
    status, headers, body = response
    all_headers = [*headers, ("Content-Length", str(len(body)))]
    if status != 202 and not any(name.lower() == "content-type" for name, _ in headers):
        all_headers.append(("Content-Type", "text/plain; charset=utf-8"))
    data = conn.send(h11.Response(status_code=status, headers=all_headers,
                                  reason=http_status.HTTPStatus(status).phrase.encode()))
    data = (data or b"") + (conn.send(h11.Data(data=body)) or b"" if body else b"")
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)


async def _send_json(conn: h11.Connection, stream: trio.SocketStream, status: int, message: Any) -> None:
    body = json.dumps(message, ensure_ascii=False).encode()
    await _send(conn, stream, (status, [("Content-Type", "application/json")], body))


async def _stream_answer(conn: h11.Connection, stream: trio.SocketStream,
                         answer: Awaitable[dict[str, Any]]) -> None:
    """A request's answer as an event stream: the headers now, comments while
    it is worked out, then the response. A client gone cancels the work."""
    head = conn.send(h11.Response(status_code=200, headers=[
        ("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")]))
    await stream.send_all(head or b"")
    response: dict[str, Any] = {}

    async def work(cancel: trio.CancelScope) -> None:
        response.update(await answer)
        cancel.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(work, nursery.cancel_scope)
        nursery.start_soon(_watch_for_close, conn, stream, nursery.cancel_scope)
        while True:
            await trio.sleep(HEARTBEAT)
            await stream.send_all(conn.send(h11.Data(data=b": working\n\n")) or b"")
    if not response:
        raise trio.BrokenResourceError("the client closed the connection before the answer")
    event = b"event: message\ndata: " + json.dumps(response, ensure_ascii=False).encode() + b"\n\n"
    await stream.send_all((conn.send(h11.Data(data=event)) or b"") + (conn.send(h11.EndOfMessage()) or b""))


async def _watch_for_close(conn: h11.Connection, stream: trio.SocketStream, cancel: trio.CancelScope) -> None:
    """While an answer is worked out: a client that closes its connection
    cancels it (a delegation it no longer waits for); bytes it sends meanwhile
    wait for the next request."""
    while True:
        data = await stream.receive_some(65536)
        if not data:
            cancel.cancel()
            return
        conn.receive_data(data)

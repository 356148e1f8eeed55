"""agentd's MCP tools on stdio: the relay to the daemon's endpoint (SPEC F9).

``agentd mcp`` (``cli/mcp_server.py``) and the stdio MCP server agentd gives
an ACP agent (``AgentdTool.relay_command``) are this relay. It is a file of
its own that imports nothing of agentd, and of the standard library only the
C cores it needs, so that it also runs without ``site`` wherever the package
is installed (an editable install's package-dir mapping, a wheel): ``python
-I -S …/agentd/protocol/mcp_relay.py`` as a script, or as ``command`` spells
it, imported from its folder so that its bytecode is cached. On a machine
whose site-packages run ``.pth`` files at every start (an editable install's
finder, a sandbox's certificate hook) ``site`` is most of a bare Python's
start.

Who it speaks for, and how it gets its token:

- ``--thread T`` (the person's MCP client): it asks the daemon's socket for
  the endpoint and a grant for the thread (``mcp.endpoint``) and keeps that
  connection open — a grant is good while it is;
- a provider session (``AGENTD_SESSION_ID``, the credential in the file
  ``AGENTD_TOOL_CREDENTIAL`` names): its token is ``<session>.<credential>``,
  so with the endpoint in its environment (``AGENTD_MCP_URL``,
  ``AGENTD_MCP_SOCKET``) it asks the daemon nothing; else it asks
  ``mcp.endpoint`` with the session.

Then every JSON-RPC message read from stdin is posted to the endpoint (one
``POST`` each, HTTP/1.1 by hand — ``http.client`` would load ``ssl`` and
``email``), each in a thread of its own so that a waiting ``delegate_task``
holds up nothing, and every answer is written to stdout, one line each.
"""

from __future__ import annotations

import _socket as socket  # the C core: the ``socket`` module's enums cost more than the rest of the start
import _thread
import os
import sys
import time

TYPE_CHECKING = False  # typing's import costs the start as much as json's; only the type checker reads it
if TYPE_CHECKING:
    from typing import Any, BinaryIO

#: the protocol version this client asks for
PROTOCOL_VERSION = "2025-11-25"
#: seconds the answers under way may still take once stdin ended (the client is gone or done)
DRAIN = 10.0
SESSION_ENV = "AGENTD_SESSION_ID"
CREDENTIAL_ENV = "AGENTD_TOOL_CREDENTIAL"
URL_ENV = "AGENTD_MCP_URL"
SOCKET_ENV = "AGENTD_MCP_SOCKET"
USAGE = "usage: agentd mcp [--socket PATH] [--thread THREAD | --session SESSION]"


class McpHttpError(Exception):
    """The endpoint refused a message (an HTTP status other than 200 or 202)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"agentd's MCP endpoint answered {status}: {text.strip()}")
        self.status = status


class RelayError(Exception):
    """Why the relay cannot start (its message is for the person)."""


def split_url(url: str) -> tuple[str, int, str]:
    """``(host, port, path)`` of an ``http://HOST:PORT/PATH`` URL (what the
    daemon hands out; urllib's parser costs the relay's start more)."""
    rest = url.split("://", 1)[-1]
    authority, _, path = rest.partition("/")
    host, _, port = authority.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port or 80), "/" + path


def _connect(url: str, unix: str | None, timeout: float | None) -> socket.socket:
    """A connection to the endpoint: its Unix socket, else the URL's host and port."""
    if unix:
        targets: list[tuple[int, Any]] = [(socket.AF_UNIX, unix)]
    else:
        host, port, _path = split_url(url)
        targets = [(family, address) for family, _type, _proto, _name, address
                   in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)]
    error: OSError = OSError(f"no address for {url}")
    for family, address in targets:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error


def post(url: str, token: str, body: bytes, *, timeout: float | None = None, unix: str | None = None,
         opened: list[socket.socket] | None = None) -> bytes | None:
    """POST one JSON-RPC message; its response's JSON (None for ``202``).
    ``unix``: through the endpoint's Unix socket instead of the URL's port
    (which must then be a loopback address: the daemon's). ``opened`` gets
    the connection's socket (another thread may shut it to end the call:
    the endpoint then cancels it).

    Raises:
        McpHttpError: another status.
        OSError: the endpoint cannot be reached.
    """
    host, port, path = split_url(url)
    sock = _connect(url, unix, timeout)
    if opened is not None:
        opened.append(sock)
    try:
        head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                f"MCP-Protocol-Version: {PROTOCOL_VERSION}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
        _send_all(sock, head.encode() + body)
        status, headers, data = _response(_Reader(sock))
    finally:
        sock.close()
    if status == 202:
        return None
    if status != 200:
        raise McpHttpError(status, data.decode(errors="replace"))
    if headers.get("content-type", "").startswith("text/event-stream"):
        return _last_message(data)
    return data


def _send_all(sock: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[sock.send(view):]


class _Reader:
    """Lines and counted bytes from a socket (``socket.makefile`` lives in
    the ``socket`` module, which this file does not load)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.ended = False

    def _fill(self) -> bool:
        if self.ended:
            return False
        chunk = self.sock.recv(65536)
        if not chunk:
            self.ended = True
            return False
        self.buffer += chunk
        return True

    def readline(self) -> bytes:
        searched = 0
        while (end := self.buffer.find(b"\n", searched)) < 0:
            searched = len(self.buffer)
            if not self._fill():
                return self._take(len(self.buffer))
        return self._take(end + 1)

    def read(self, size: int = -1) -> bytes:
        while (size < 0 or len(self.buffer) < size) and self._fill():
            pass
        return self._take(len(self.buffer) if size < 0 else min(size, len(self.buffer)))

    def _take(self, size: int) -> bytes:
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data


def _response(reader: Any) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one HTTP/1.1 response."""
    status_line = reader.readline()
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        raise OSError(f"not an HTTP response: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    while (line := reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = bytearray()
        while (size := int(reader.readline().split(b";")[0].strip() or b"0", 16)) > 0:
            body += reader.read(size)
            reader.readline()
        return int(parts[1]), headers, bytes(body)
    length = headers.get("content-length")
    return int(parts[1]), headers, reader.read(int(length)) if length is not None else reader.read()


def _last_message(stream: bytes) -> bytes | None:
    """The data of the last ``message`` event of an event stream."""
    found: bytes | None = None
    for event in stream.replace(b"\r\n", b"\n").split(b"\n\n"):
        lines = [line for line in event.split(b"\n") if line and not line.startswith(b":")]
        data = [line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:")]
        if data and all(not line.startswith(b"event:") or line[6:].strip() == b"message" for line in lines):
            found = b"\n".join(data)
    return found


# -- the token --------------------------------------------------------------------------------------


def ask_endpoint(daemon: socket.socket, params: dict[str, str]) -> dict[str, Any]:
    """``mcp.endpoint`` on the daemon's socket (connected): its result.

    Raises:
        RelayError: the daemon's error, or it closed the connection.
    """
    import json

    _send_all(daemon, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "mcp.endpoint", "params": params}).encode()
              + b"\n")
    reader = _Reader(daemon)
    while line := reader.readline():
        message = json.loads(line) if line.strip() else None
        if not isinstance(message, dict) or "method" in message:
            continue  # a notification on the way
        if "error" in message and message.get("id") in (1, None):
            raise RelayError(str(message["error"].get("message", "unknown error")))
        if message.get("id") == 1:
            result: dict[str, Any] = message["result"]
            return result
    raise RelayError("the daemon closed the connection")


def _read_credential(path: str | None) -> str | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def endpoint(socket_path: str | None, *, thread_id: str | None = None, session_id: str | None = None,
             environ: dict[str, str] | None = None) -> tuple[dict[str, Any], socket.socket | None]:
    """Where the endpoint is and the token to use — ``({url, token, socket},
    the daemon connection to keep open or None)``: a grant for ``thread_id``,
    else the session's (``session_id`` or ``$AGENTD_SESSION_ID``) token.

    Raises:
        RelayError: no thread or session, no daemon, or its refusal.
    """
    env = os.environ if environ is None else environ
    if thread_id:
        params = {"parentThreadId": thread_id}
    else:
        session_id = session_id or env.get(SESSION_ENV) or None
        if not session_id:
            raise RelayError("give --thread THREAD (or run it with AGENTD_SESSION_ID and its credential)")
        params = {"sessionId": session_id}
        credential = _read_credential(env.get(CREDENTIAL_ENV))
        if credential:
            params["credential"] = credential
            if env.get(URL_ENV):
                # The session's token is its id and credential: nothing to ask the daemon.
                return {"url": env[URL_ENV], "socket": env.get(SOCKET_ENV) or None,
                        "token": f"{session_id}.{credential}"}, None
    socket_path = socket_path or env.get("AGENTD_SOCKET")
    if not socket_path:
        raise RelayError("no daemon socket (AGENTD_SOCKET or --socket)")
    daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        daemon.connect(socket_path)
    except OSError as exc:
        daemon.close()
        raise RelayError(f"the daemon is not running at {socket_path} ({exc})") from None
    try:
        return ask_endpoint(daemon, params), daemon
    except BaseException:
        daemon.close()
        raise


# -- the relay --------------------------------------------------------------------------------------


class _InFlight:
    """How many answers are under way, and a wait until there are none."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._idle = _thread.allocate_lock()  # held while any is under way
        self._count = 0

    def start(self) -> None:
        with self._lock:
            if self._count == 0:
                self._idle.acquire()
            self._count += 1

    def done(self) -> None:
        with self._lock:
            self._count -= 1
            if self._count == 0:
                self._idle.release()

    def wait(self, timeout: float) -> None:
        if self._idle.acquire(timeout=max(0.0, timeout)):
            self._idle.release()


class Relay:
    """Messages from ``source`` to the endpoint, answers to ``sink``."""

    def __init__(self, url: str, token: str, sink: BinaryIO, *, unix: str | None = None) -> None:
        self.url = url
        self.token = token
        self.unix = unix
        self.sink = sink
        self._lock = _thread.allocate_lock()
        self._in_flight = _InFlight()

    def forward(self, line: bytes) -> None:
        """Post one message; write its answer (or an error for a request that got none)."""
        try:
            answer = post(self.url, self.token, line, unix=self.unix)
        except (OSError, McpHttpError) as exc:
            answer = _error_for(line, f"agentd's MCP endpoint is not reachable: {exc}")
        if answer:
            with self._lock:
                self.sink.write(answer.rstrip(b"\n") + b"\n")
                self.sink.flush()

    def _forward_then_done(self, line: bytes) -> None:
        try:
            self.forward(line)
        finally:
            self._in_flight.done()

    def run(self, source: BinaryIO) -> None:
        """Until ``source`` ends; then the answers under way get ``DRAIN`` seconds to come."""
        for line in source:
            if line.strip():
                self._in_flight.start()
                _thread.start_new_thread(self._forward_then_done, (line.strip(),))
        self._in_flight.wait(DRAIN)


def _error_for(line: bytes, message: str) -> bytes | None:
    import json

    try:
        request: Any = json.loads(line)
    except ValueError:
        return None
    if not isinstance(request, dict) or "id" not in request or "method" not in request:
        return None
    return json.dumps({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32603, "message": message}}).encode()


def serve(socket_path: str | None, *, thread_id: str | None = None, session_id: str | None = None) -> None:
    """Relay stdin to the daemon's MCP endpoint until stdin ends.

    Raises:
        RelayError: it could not start (no thread or session, no daemon, a refusal).
    """
    found, daemon = endpoint(socket_path, thread_id=thread_id, session_id=session_id)
    try:
        # Through the endpoint's Unix socket when it has one: reachable from a network namespace too.
        Relay(found["url"], found["token"], sys.stdout.buffer, unix=found.get("socket")).run(sys.stdin.buffer)
    finally:
        if daemon is not None:
            daemon.close()  # the grant ends with it


def parse_args(argv: list[str]) -> dict[str, str] | None:
    """``--socket``, ``--thread`` and ``--session`` (``--name value`` or
    ``--name=value``, each once, none empty) as ``serve``'s keywords; None
    for anything else (``agentd mcp`` then lets its full parser explain)."""
    names = {"--socket": "socket_path", "--thread": "thread_id", "--session": "session_id"}
    found: dict[str, str] = {}
    index = 0
    while index < len(argv):
        name, equals, value = argv[index].partition("=")
        if name not in names or names[name] in found:
            return None
        if not equals:
            if index + 1 >= len(argv):
                return None
            index += 1
            value = argv[index]
        if not value.strip() or (not equals and value.startswith("-")):
            return None
        found[names[name]] = value
        index += 1
    return found


def command(python: str, path: str) -> list[str]:
    """argv that runs the relay in the file at ``path`` with ``python``,
    isolated and without ``site``: imported from its folder (appended to
    ``sys.path``, after the standard library, so that nothing beside it
    shadows a standard module) rather than run as a script, because a
    script is compiled at every start and a module's bytecode is cached."""
    folder, name = os.path.split(os.path.abspath(path))
    module = os.path.splitext(name)[0]
    return [python, "-I", "-S", "-c",
            f"import sys; sys.path.append({folder!r}); import {module}; sys.exit({module}.main())"]


def main(argv: list[str] | None = None) -> int:
    """The relay as a script: ``python -I -S mcp_relay.py [--socket S] [--thread T | --session S]``."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args is None:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        serve(args.pop("socket_path", None), **args)
    except RelayError as exc:
        print(f"agentd mcp: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

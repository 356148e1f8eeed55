"""A blocking client of agentd's MCP endpoint, with the standard library only
(SPEC F9).

For the two callers that must start fast and carry no SDK: ``agentd mcp``
(the stdio relay, cli/mcp_server.py) posts each message it reads, and the
scripted agent's ``delegate`` step calls a tool as a runtime would
(``call_tool``: ``initialize``, ``notifications/initialized``,
``tools/call``). One message per ``POST``, as MCP's streamable HTTP says;
an answer that comes as an event stream (``text/event-stream``) is read to
its ``message`` event.
"""

from __future__ import annotations

import json
import socket
from typing import Any

#: the protocol version this client asks for
PROTOCOL_VERSION = "2025-11-25"


class McpHttpError(Exception):
    """The endpoint refused a message (an HTTP status other than 200 or 202)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"agentd's MCP endpoint answered {status}: {text.strip()}")
        self.status = status


def split_url(url: str) -> tuple[str, int, str]:
    """``(host, port, path)`` of an ``http://HOST:PORT/PATH`` URL (what the
    daemon hands out; urllib's parser costs the relay's start more)."""
    rest = url.split("://", 1)[-1]
    authority, _, path = rest.partition("/")
    host, _, port = authority.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port or 80), "/" + path


def post(url: str, token: str, body: bytes, *, timeout: float | None = None, unix: str | None = None,
         opened: list[socket.socket] | None = None) -> bytes | None:
    """POST one JSON-RPC message; its response's JSON (None for ``202``).
    ``unix``: through the endpoint's Unix socket instead of the URL's port.
    ``opened`` gets the connection's socket (another thread may shut it to
    end the call: the endpoint then cancels it).

    HTTP/1.1 by hand, one request per connection: ``http.client`` would load
    ``ssl`` and ``email`` (most of the relay's start).

    Raises:
        McpHttpError: another status.
        OSError: the endpoint cannot be reached.
    """
    host, port, path = split_url(url)
    if unix:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(unix)
    else:
        sock = socket.create_connection((host, port), timeout=timeout)
    if opened is not None:
        opened.append(sock)
    try:
        head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                f"MCP-Protocol-Version: {PROTOCOL_VERSION}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
        sock.sendall(head.encode() + body)
        status, headers, data = _response(sock.makefile("rb"))
    finally:
        sock.close()
    if status == 202:
        return None
    if status != 200:
        raise McpHttpError(status, data.decode(errors="replace"))
    if headers.get("content-type", "").startswith("text/event-stream"):
        return _last_message(data)
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


def _message(method: str, params: dict[str, Any], request_id: int | None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    return json.dumps(message).encode()


def call_tool(url: str, token: str, tool: str, arguments: dict[str, Any], *, unix: str | None = None,
              opened: list[socket.socket] | None = None) -> tuple[str | None, dict[str, Any]]:
    """Call one tool as an MCP client: ``(error, structured result)`` — a tool
    error's text, or the tool's structured content.

    Raises:
        McpHttpError, OSError: as ``post``; ValueError: an answer that is no JSON-RPC result.
    """
    initialize = {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                  "clientInfo": {"name": "agentd-scripted-agent", "version": "1"}}
    _result(post(url, token, _message("initialize", initialize, 1), unix=unix))
    post(url, token, _message("notifications/initialized", {}, None), unix=unix)
    result = _result(post(url, token, _message("tools/call", {"name": tool, "arguments": arguments}, 2),
                          unix=unix, opened=opened))
    text = "\n".join(block.get("text", "") for block in result.get("content", []) if isinstance(block, dict))
    if result.get("isError"):
        return text or f"{tool} failed", {}
    return None, dict(result.get("structuredContent") or {})


def _result(data: bytes | None) -> dict[str, Any]:
    answer = json.loads(data or b"null")
    if not isinstance(answer, dict):
        raise ValueError("the MCP endpoint gave no answer")
    if "error" in answer:
        raise ValueError(f"MCP error {answer['error'].get('code')}: {answer['error'].get('message')}")
    result = answer.get("result")
    if not isinstance(result, dict):
        raise ValueError("the MCP endpoint's answer has no result")
    return result


def shut(opened: list[socket.socket]) -> None:
    """End the calls on ``opened`` from another thread (their reads fail at once)."""
    for sock in opened:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

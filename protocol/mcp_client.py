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

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

#: the protocol version this client asks for
PROTOCOL_VERSION = "2025-11-25"


class McpHttpError(Exception):
    """The endpoint refused a message (an HTTP status other than 200 or 202)."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"agentd's MCP endpoint answered {status}: {text.strip()}")
        self.status = status


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP to the endpoint's Unix socket (the ``Host`` is still the URL's)."""

    def __init__(self, host: str, port: int | None, *, path: str, timeout: float | None = None) -> None:
        super().__init__(host, port, timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        import socket

        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def post(url: str, token: str, body: bytes, *, timeout: float | None = None, unix: str | None = None,
         opened: list[http.client.HTTPConnection] | None = None) -> bytes | None:
    """POST one JSON-RPC message; its response's JSON (None for ``202``).
    ``unix``: through the endpoint's Unix socket instead of the URL's port.
    ``opened`` gets the connection (another thread may shut its socket to
    end the call: the endpoint then cancels it).

    Raises:
        McpHttpError: another status.
        OSError: the endpoint cannot be reached.
    """
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    conn = (UnixHTTPConnection(host, port, path=unix, timeout=timeout) if unix
            else http.client.HTTPConnection(host, port, timeout=timeout))
    if opened is not None:
        opened.append(conn)
    try:
        conn.request("POST", parts.path or "/", body=body, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": PROTOCOL_VERSION,
        })
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    if response.status == 202:
        return None
    if response.status != 200:
        raise McpHttpError(response.status, data.decode(errors="replace"))
    if response.getheader("Content-Type", "").startswith("text/event-stream"):
        return _last_message(data)
    return data


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
              opened: list[http.client.HTTPConnection] | None = None) -> tuple[str | None, dict[str, Any]]:
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


def shut(opened: list[http.client.HTTPConnection]) -> None:
    """End the calls on ``opened`` from another thread (their reads fail at once)."""
    for conn in opened:
        if conn.sock is not None:
            try:
                conn.sock.shutdown(2)  # SHUT_RDWR, without importing socket's enums
            except OSError:
                pass

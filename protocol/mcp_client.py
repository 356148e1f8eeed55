"""A blocking client of agentd's MCP endpoint, with the standard library only
(SPEC F9).

For the scripted agent's ``delegate`` step, which calls a tool as a runtime
would (``call_tool``: ``initialize``, ``notifications/initialized``,
``tools/call``). One message per ``POST``, as MCP's streamable HTTP says
(``post``, the transport ``agentd mcp`` relays with, ``mcp_relay.py``); an
answer that comes as an event stream (``text/event-stream``) is read to its
``message`` event.
"""

from __future__ import annotations

import _socket
import json
from typing import Any

# The transport is the relay's (a file that imports nothing of agentd, so that it runs as a script).
from .mcp_relay import PROTOCOL_VERSION, McpHttpError, post, split_url

__all__ = ["PROTOCOL_VERSION", "McpHttpError", "call_tool", "post", "shut", "split_url"]


def _message(method: str, params: dict[str, Any], request_id: int | None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if request_id is not None:
        message["id"] = request_id
    return json.dumps(message).encode()


def call_tool(url: str, token: str, tool: str, arguments: dict[str, Any], *, unix: str | None = None,
              opened: list[_socket.socket] | None = None) -> tuple[str | None, dict[str, Any]]:
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


def shut(opened: list[_socket.socket]) -> None:
    """End the calls on ``opened`` from another thread (their reads fail at once)."""
    for sock in opened:
        try:
            sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass

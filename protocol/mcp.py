"""The MCP messages agentd's tool server answers (SPEC F9), transport aside.

agentd serves its own MCP tools from the daemon (``mcp_http.py`` carries
them over streamable HTTP), so a session needs no process of its own for
them. It is the small server half of MCP that tools need, written here
rather than taken from the ``mcp`` SDK: the SDK's server transport is an
ASGI app (starlette, run by uvicorn or hypercorn, neither of which runs on
trio here) and loading it with pydantic would cost the daemon a second at
start. What is answered:

- ``initialize``: the protocol version the client asks for when it is one
  of ``PROTOCOL_VERSIONS`` (else the latest), ``capabilities: {tools:
  {listChanged: false}}``, ``serverInfo`` and ``instructions``;
- ``ping``: ``{}``;
- ``tools/list``: every tool, with its ``inputSchema`` (a JSON Schema object);
- ``tools/call``: the host's answer as ``content`` (one text block),
  ``structuredContent`` and ``isError``; an unknown tool is a protocol error
  (``-32602``), a refusal of the call a tool error the model reads;
- notifications (``notifications/initialized``, ``notifications/cancelled``)
  and responses: nothing (the transport says ``202 Accepted``);
- anything else: ``-32601`` (method not found).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Protocol

#: the handshake versions of MCP this server speaks (the answer to ``initialize`` is one of them)
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_VERSION = PROTOCOL_VERSIONS[-1]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


@dataclass(frozen=True)
class Tool:
    """One tool as ``tools/list`` shows it."""

    name: str
    description: str
    #: a JSON Schema of ``type: object`` (MCP requires an object schema)
    input_schema: dict[str, Any]

    def wire(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "inputSchema": self.input_schema}


@dataclass(frozen=True)
class ToolAnswer:
    """What a tool call gives the model: text, the same as fields, and
    whether it is a tool error (a refusal the model reads)."""

    text: str
    structured: dict[str, Any] = field(default_factory=dict)
    is_error: bool = False

    def wire(self) -> dict[str, Any]:
        result: dict[str, Any] = {"content": [{"type": "text", "text": self.text}], "isError": self.is_error}
        if self.structured:
            result["structuredContent"] = self.structured
        return result


class ToolHost(Protocol):
    """The tools behind the server, and who may call them.

    ``authenticate`` maps a bearer token to the caller it names (None:
    refused); ``call`` runs a tool for that caller — ``peer`` finds out, at
    most once per connection, which process is on the other end."""

    name: str
    version: str
    instructions: str
    tools: dict[str, Tool]

    def authenticate(self, token: str) -> object | None: ...

    async def call(self, caller: object, tool: str, arguments: dict[str, Any],
                   peer: Callable[[], Awaitable[object]]) -> ToolAnswer: ...


class RpcError(Exception):
    """A JSON-RPC error answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def error(request_id: Any, code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def result(request_id: Any, value: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def is_request(message: Any) -> bool:
    """A request (it has an ``id`` and a ``method``), not a notification or a response."""
    return isinstance(message, dict) and "id" in message and isinstance(message.get("method"), str)


def initialize(host: ToolHost, params: dict[str, Any]) -> dict[str, Any]:
    asked = params.get("protocolVersion")
    return {
        "protocolVersion": asked if asked in PROTOCOL_VERSIONS else LATEST_VERSION,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": host.name, "version": host.version},
        "instructions": host.instructions,
    }


async def answer(host: ToolHost, caller: object, message: dict[str, Any],
                 peer: Callable[[], Awaitable[object]]) -> dict[str, Any]:
    """The response to one request (``is_request``)."""
    request_id = message["id"]
    params = message.get("params") or {}
    if not isinstance(params, dict):
        return error(request_id, INVALID_PARAMS, "params must be an object")
    method = message["method"]
    try:
        if method == "initialize":
            return result(request_id, initialize(host, params))
        if method == "ping":
            return result(request_id, {})
        if method == "tools/list":
            return result(request_id, {"tools": [tool.wire() for tool in host.tools.values()]})
        if method == "tools/call":
            return result(request_id, (await _call(host, caller, params, peer)).wire())
    except RpcError as exc:
        return error(request_id, exc.code, str(exc))
    return error(request_id, METHOD_NOT_FOUND, f"unknown method {method!r}; this server offers tools only")


async def _call(host: ToolHost, caller: object, params: dict[str, Any],
                peer: Callable[[], Awaitable[object]]) -> ToolAnswer:
    name = params.get("name")
    if not isinstance(name, str) or name not in host.tools:
        raise RpcError(INVALID_PARAMS, f"unknown tool {name!r}; the tools are {', '.join(host.tools)}")
    arguments = params.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise RpcError(INVALID_PARAMS, "arguments must be an object")
    return await host.call(caller, name, arguments, peer)

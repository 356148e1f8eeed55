"""``agentd mcp``: agentd's MCP tools on stdio, relayed to the daemon (SPEC F9).

The daemon serves agentd's tools itself, over MCP's streamable HTTP on
loopback (``supervisor/mcp_tools.py``); the runtimes agentd starts connect
to it directly. This relay is for an MCP client that speaks stdio only —
one agentd did not start (``agentd mcp --thread T``: the person's; the
tools then delegate from thread T), or a session's (``AGENTD_SESSION_ID``
with the credential file ``AGENTD_TOOL_CREDENTIAL`` names).

It asks the daemon's socket for the endpoint and a token (``mcp.endpoint``)
and keeps that connection open: a thread's token is good while it is. Then
every JSON-RPC message read from stdin is posted to the endpoint (each in a
thread of its own, so a waiting ``delegate_task`` holds up nothing) and
every answer written to stdout, one line each. It imports neither trio nor
the MCP SDK (the standard library and agentd's blocking socket client):
it answers ``initialize`` a few tens of milliseconds after its start.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, BinaryIO

from agentd.protocol.errors import AgentdError
from agentd.protocol.mcp_client import McpHttpError, post

from .connection import DaemonConnection

#: seconds the answers under way may still take once stdin ended (the client is gone or done)
DRAIN = 10.0


def _who(session_id: str | None, thread_id: str | None) -> dict[str, str]:
    """``mcp.endpoint``'s params: the thread, or the session with its credential."""
    if thread_id:
        return {"parentThreadId": thread_id}
    session_id = session_id or os.environ.get("AGENTD_SESSION_ID") or None
    if not session_id:
        raise SystemExit("agentd mcp: give --thread THREAD (or run it with AGENTD_SESSION_ID and its credential)")
    params = {"sessionId": session_id}
    path = os.environ.get("AGENTD_TOOL_CREDENTIAL")
    credential = _read(path) if path else None
    if credential:
        params["credential"] = credential
    return params


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


class Relay:
    """Messages from ``source`` to the endpoint, answers to ``sink``."""

    def __init__(self, url: str, token: str, sink: BinaryIO, *, unix: str | None = None) -> None:
        self.url = url
        self.token = token
        self.unix = unix
        self.sink = sink
        self._lock = threading.Lock()

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

    def run(self, source: BinaryIO) -> None:
        """Until ``source`` ends; then the answers under way get ``DRAIN`` seconds to come."""
        running: list[threading.Thread] = []
        for line in source:
            if line.strip():
                thread = threading.Thread(target=self.forward, args=(line.strip(),), daemon=True)
                thread.start()
                running = [t for t in running if t.is_alive()] + [thread]
        deadline = time.monotonic() + DRAIN
        for thread in running:
            thread.join(max(0.0, deadline - time.monotonic()))


def _error_for(line: bytes, message: str) -> bytes | None:
    try:
        request: Any = json.loads(line)
    except ValueError:
        return None
    if not isinstance(request, dict) or "id" not in request or "method" not in request:
        return None
    return json.dumps({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32603, "message": message}}).encode()


def serve(socket: str | None, session_id: str | None, thread_id: str | None) -> int:
    """Relay stdin to the daemon's MCP endpoint until stdin ends."""
    socket = socket or os.environ.get("AGENTD_SOCKET")
    if not socket:
        raise SystemExit("agentd mcp: no daemon socket (AGENTD_SOCKET or --socket)")
    params = _who(session_id, thread_id)
    try:
        daemon = DaemonConnection.open(socket)
    except OSError as exc:
        raise SystemExit(f"agentd mcp: the daemon is not running at {socket} ({exc})") from None
    with daemon:
        try:
            endpoint = daemon.call("mcp.endpoint", **params)
        except AgentdError as exc:
            raise SystemExit(f"agentd mcp: {exc}") from None
        # Through the endpoint's Unix socket when it has one: reachable from a network namespace too.
        Relay(endpoint["url"], endpoint["token"], sys.stdout.buffer, unix=endpoint.get("socket")).run(sys.stdin.buffer)
    return 0

"""``agentd mcp``: agentd's MCP tools on stdio, relayed to the daemon (SPEC F9).

The daemon serves agentd's tools itself, over MCP's streamable HTTP on
loopback (``supervisor/mcp_tools.py``); the runtimes agentd starts connect
to it directly. This relay is for an MCP client that speaks stdio only —
one agentd did not start (``agentd mcp --thread T``: the person's; the
tools then delegate from thread T), or a session's (``AGENTD_SESSION_ID``
with the credential file ``AGENTD_TOOL_CREDENTIAL`` names).

The relay itself is ``agentd.protocol.mcp_relay``, a file that imports
nothing of agentd and neither trio nor the MCP SDK, so that it also runs
as a script without ``site`` (``python -I -S …/mcp_relay.py``, what agentd
gives an ACP agent). ``agentd main`` runs this module for ``agentd mcp``
before it loads its argument parser when the arguments are the plain ones
(``mcp_relay.parse_args``).
"""

from __future__ import annotations

from agentd.protocol import mcp_relay


def serve(socket: str | None, session_id: str | None, thread_id: str | None) -> int:
    """Relay stdin to the daemon's MCP endpoint until stdin ends."""
    try:
        mcp_relay.serve(socket, thread_id=thread_id, session_id=session_id)
    except mcp_relay.RelayError as exc:
        raise SystemExit(f"agentd mcp: {exc}") from None
    return 0

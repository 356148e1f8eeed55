"""How a provider session gets agentd's own MCP tool (SPEC F9).

The daemon serves the tool itself, over MCP's streamable HTTP on loopback
(``http://127.0.0.1:PORT/mcp``, ``supervisor/mcp_tools.py``): no process is
started for it. Each session's runtime is given the URL and its session's
bearer token (``<sessionId>.<credential>``, ``tool_credentials.py``), which
names the session — the daemon maps it to the thread and that thread's
running turn. The token is never put in an argv (every user can read those
in ``/proc``):

- Codex: ``-c mcp_servers.agentd.url=…`` and
  ``-c mcp_servers.agentd.bearer_token_env_var="AGENTD_MCP_TOKEN"``, the
  token in the runtime's environment (``codex_env``);
- Claude Code: ``--mcp-config`` naming the session's 0600 client
  configuration file (``{"type": "http", "url": …, "headers":
  {"Authorization": "Bearer …"}}``), plus ``--allowedTools`` when pre-approved;
- the scripted agent: ``AGENTD_MCP_URL`` and the path of its credential file
  (``AGENTD_TOOL_CREDENTIAL``), from which its ``delegate`` step makes the
  token and posts the MCP messages itself;
- an ACP agent (which every agent can start: stdio MCP servers only): the
  relay ``relay_command`` names, with the scripted agent's environment; it
  makes the session's token as the scripted agent does and relays stdio to
  the endpoint.

Without a live endpoint (``credentials.mcp_url`` unset) nothing is configured.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from agentd.protocol import mcp_relay

from .tool_credentials import CREDENTIAL_ENV, SERVER_NAME, ToolCredentials

#: the tools it offers
TOOLS = ("delegate_task", "task_result", "task_cancel")
#: seconds Codex lets one tool call run: a ``wait: true`` delegation lasts as long as its task
CODEX_TOOL_TIMEOUT = 24 * 3600
CODEX_STARTUP_TIMEOUT = 60
#: milliseconds Codex waits at most for MCP servers still starting before a
#: turn: without it the first turn's model request may go out before the
#: tools are listed (the endpoint answers in milliseconds, so it rarely waits)
CODEX_STARTUP_GRACE_MS = 20_000
#: the variable of Codex's environment that holds the bearer token
TOKEN_ENV = "AGENTD_MCP_TOKEN"
#: the variable of every runtime's environment that holds the endpoint's URL
URL_ENV = "AGENTD_MCP_URL"
#: … and the path of its Unix socket: a runtime's wrapper that isolates the
#: network (a loopback-only namespace) bridges the URL's port to it
SOCKET_ENV = "AGENTD_MCP_SOCKET"


@dataclass(frozen=True)
class AgentdTool:
    """What a session needs to reach agentd's MCP endpoint.

    Args:
        socket: the daemon's socket path (in the scripted agent's environment).
        credentials: the sessions' tool credentials, and the endpoint's URL.
    """

    socket: str
    credentials: ToolCredentials

    def _live(self, session_id: str) -> tuple[str, str] | None:
        """(url, token) of a session whose credential is issued, else None."""
        url, token = self.credentials.mcp_url, self.credentials.token(session_id)
        return (url, token) if url is not None and token is not None else None

    def runtime_env(self, session_id: str) -> dict[str, str]:
        """Every runtime's: where the endpoint is (its URL and Unix socket; no secret)."""
        live = self._live(session_id)
        if live is None:
            return {}
        env = {URL_ENV: live[0]}
        if self.credentials.mcp_socket is not None:
            env[SOCKET_ENV] = self.credentials.mcp_socket
        return env

    def scripted_env(self, session_id: str) -> dict[str, str]:
        """The scripted agent's: where the daemon and the endpoint are, who it is, where its credential is."""
        env = {"AGENTD_SOCKET": self.socket, "AGENTD_SESSION_ID": session_id, **self.runtime_env(session_id)}
        if self._live(session_id) is not None:
            env[CREDENTIAL_ENV] = str(self.credentials.path(session_id))
        return env

    def codex_env(self, session_id: str) -> dict[str, str]:
        """Codex's environment: the endpoint, and the token its ``bearer_token_env_var`` names."""
        live = self._live(session_id)
        return {**self.runtime_env(session_id), TOKEN_ENV: live[1]} if live is not None else {}

    def codex_args(self, session_id: str, *, preapproved: bool) -> list[str]:
        """``-c`` overrides that configure the endpoint in ``codex app-server``
        (values are TOML). Codex 0.171 offers the tools as the namespace
        ``mcp__agentd`` once listed; it starts a turn without waiting for MCP
        servers unless given a startup grace."""
        live = self._live(session_id)
        if live is None:
            return []
        key = f"mcp_servers.{SERVER_NAME}"
        args = [
            "-c", f'{key}.url="{live[0]}"',
            "-c", f'{key}.bearer_token_env_var="{TOKEN_ENV}"',
            "-c", f"{key}.startup_timeout_sec={CODEX_STARTUP_TIMEOUT}",
            "-c", f"{key}.tool_timeout_sec={CODEX_TOOL_TIMEOUT}",
            "-c", f"mcp_optional_startup_grace_ms={CODEX_STARTUP_GRACE_MS}",
        ]
        if preapproved:
            args += ["-c", f'{key}.default_tools_approval_mode="approve"']
        return args

    def claude_args(self, session_id: str, *, preapproved: bool) -> list[str]:
        """``--mcp-config`` naming the session's client configuration file;
        pre-approved, its tools in ``--allowedTools`` (else Claude asks
        ``can_use_tool``, an approval)."""
        if self._live(session_id) is None:
            return []
        args = ["--mcp-config", str(self.credentials.client_config(session_id))]
        if preapproved:
            args += ["--allowedTools", ",".join(f"mcp__{SERVER_NAME}__{tool}" for tool in TOOLS)]
        return args


def relay_command() -> list[str]:
    """argv of agentd's relay as a stdio MCP server (``agentd mcp``): its file
    imported in isolated mode without ``site`` (``mcp_relay.command``) — it
    imports nothing of agentd, and ``site`` (an editable install's finder,
    ``.pth`` hooks) is most of a Python start, which the session's first turn
    may wait for.
    ``python -m agentd mcp`` where the file is not on disk (a zipped install)."""
    path = mcp_relay.__file__
    if path and os.path.isfile(path):
        return mcp_relay.command(sys.executable, path)
    return [sys.executable, "-m", "agentd", "mcp"]

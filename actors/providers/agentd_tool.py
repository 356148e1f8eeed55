"""How a provider session gets agentd's own MCP tool (SPEC F9).

agentd configures ``agentd mcp`` (cli/mcp_server.py, a stdio MCP server)
into every session it starts, with the session's identity in its
environment, so the daemon knows which thread delegates:

- ``AGENTD_SOCKET``: the daemon's Unix socket (the server is a client of it);
- ``AGENTD_SESSION_ID``: the ProviderSession the runtime belongs to (the
  daemon maps it to the thread, and to that thread's running turn);
- ``AGENTD_TOOL_CREDENTIAL``: the path of the session's credential file
  (``tool_credentials.py``): the tool methods refuse a call without the
  secret in it. Only the path is in any argv, never the secret.

Each runtime takes it its own way: Codex as ``-c mcp_servers.agentd.*``
overrides on ``codex app-server``; Claude Code as ``--mcp-config`` JSON
(plus ``--allowedTools`` when pre-approved); the scripted agent from its
environment (``AGENTD_MCP_COMMAND``), starting the same server as an MCP
client for its ``delegate`` step — one path for every agent.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from .tool_credentials import CREDENTIAL_ENV, ToolCredentials

#: the MCP server's name in the runtimes (Claude names its tools ``mcp__agentd__…``)
SERVER_NAME = "agentd"
#: the tools it offers
TOOLS = ("delegate_task", "task_result", "task_cancel")
#: seconds Codex lets one tool call run: a ``wait: true`` delegation lasts as long as its task
CODEX_TOOL_TIMEOUT = 24 * 3600
CODEX_STARTUP_TIMEOUT = 60
#: milliseconds Codex waits for MCP servers still starting before a turn: without it
#: the first turn's model request goes out before ``agentd mcp`` listed its tools
#: (checked on 0.171: the server is ready after its imports, seconds later)
CODEX_STARTUP_GRACE_MS = 20_000


def default_command() -> list[str]:
    """``agentd mcp`` with the Python that runs this daemon."""
    return [sys.executable, "-m", "agentd", "mcp"]


@dataclass(frozen=True)
class AgentdTool:
    """What a session needs to start ``agentd mcp`` for itself.

    Args:
        socket: the daemon's socket path.
        command: argv of ``agentd mcp``.
        credentials: the sessions' tool credentials (None: none is issued,
            and the daemon's tool methods refuse the server's calls).
    """

    socket: str
    command: list[str] = field(default_factory=default_command)
    credentials: ToolCredentials | None = None

    def env(self, session_id: str) -> dict[str, str]:
        """The server's environment: where the daemon is, who asks, and
        where that session's credential is."""
        env = {"AGENTD_SOCKET": self.socket, "AGENTD_SESSION_ID": session_id}
        if self.credentials is not None:
            env[CREDENTIAL_ENV] = str(self.credentials.path(session_id))
        return env

    def scripted_env(self, session_id: str) -> dict[str, str]:
        """For the scripted agent: the same, and how to start the server."""
        return {**self.env(session_id), "AGENTD_MCP_COMMAND": json.dumps(self.command)}

    def codex_args(self, session_id: str, *, preapproved: bool) -> list[str]:
        """``-c`` overrides that configure the server in ``codex app-server``
        (values are TOML). Codex passes MCP servers only the environment it
        is told, so the identity goes in ``env``; and it starts a turn without
        waiting for MCP servers unless given a startup grace (Codex then lists
        the tools as the namespace ``mcp__agentd``)."""
        key = f"mcp_servers.{SERVER_NAME}"
        env = ", ".join(f"{name} = {json.dumps(value)}" for name, value in self.env(session_id).items())
        args = [
            "-c", f"{key}.command={json.dumps(self.command[0])}",
            "-c", f"{key}.args={json.dumps(self.command[1:])}",
            "-c", f"{key}.env={{ {env} }}",
            "-c", f"{key}.startup_timeout_sec={CODEX_STARTUP_TIMEOUT}",
            "-c", f"{key}.tool_timeout_sec={CODEX_TOOL_TIMEOUT}",
            "-c", f"mcp_optional_startup_grace_ms={CODEX_STARTUP_GRACE_MS}",
        ]
        if preapproved:
            args += ["-c", f'{key}.default_tools_approval_mode="approve"']
        return args

    def claude_args(self, session_id: str, *, preapproved: bool) -> list[str]:
        """``--mcp-config`` JSON for ``claude -p``; pre-approved, its tools in
        ``--allowedTools`` (else Claude asks ``can_use_tool``, an approval)."""
        config = {"mcpServers": {SERVER_NAME: {
            "type": "stdio", "command": self.command[0], "args": self.command[1:], "env": self.env(session_id),
        }}}
        args = ["--mcp-config", json.dumps(config)]
        if preapproved:
            args += ["--allowedTools", ",".join(f"mcp__{SERVER_NAME}__{tool}" for tool in TOOLS)]
        return args

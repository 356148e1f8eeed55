"""MCP servers a thread's provider sessions get besides agentd's own tool
(issue 26): an editor's, given to the thread with ``thread.update
{mcpServers}``, kept on the thread (``AppThread.mcpServers``), and handed to
each runtime in its own form when a native thread is made, resumed or
forked:

- Codex: ``thread/start`` / ``thread/resume`` / ``thread/fork`` ``config``
  overrides ``mcp_servers.NAME`` (``command``, ``args``, ``env``; or ``url``,
  ``http_headers``);
- Claude Code: a second ``--mcp-config`` file (0600; it may hold secrets);
- ACP agents: ``session/new`` / ``session/load`` ``mcpServers`` after
  agentd's own (``http`` ones only where the agent's ``mcpCapabilities.http``);
- the scripted agent: ``mcpServers`` on ``thread/start`` / ``thread/resume``
  (its ``reportMcp`` step says what it got).

No server may take agentd's own tool's name: ``normalize`` renames it
(``agentd`` → ``agentd-editor``), as it does a name that is not letters,
digits, ``_`` and ``-`` (each other character becomes ``_``) or is taken
already (``-2``, ``-3``…), so every runtime can key it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from agentd.store.records import McpServer

from .tool_credentials import SERVER_NAME

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def normalize(servers: Sequence[Any]) -> tuple[list[McpServer], dict[str, str]]:
    """The wire's servers (``McpServerStdio`` / ``McpServerHttp``) as the
    thread keeps them, and the names that changed (given → kept)."""
    kept: list[McpServer] = []
    renamed: dict[str, str] = {}
    taken = {SERVER_NAME}
    for server in servers:
        base = _UNSAFE.sub("_", server.name)
        if base.lower() == SERVER_NAME:
            base = f"{SERVER_NAME}-editor"
        name, n = base, 1
        while name.lower() in taken:
            n += 1
            name = f"{base}-{n}"
        taken.add(name.lower())
        if name != server.name:
            renamed[server.name] = name
        if getattr(server, "url", None) is not None:
            kept.append(McpServer(name=name, type="http", url=server.url, headers=dict(server.headers)))
        else:
            kept.append(McpServer(name=name, type="stdio", command=server.command, args=list(server.args),
                                  env=dict(server.env)))
    return kept, renamed


def codex_config(servers: Sequence[McpServer]) -> dict[str, Any]:
    """Codex's per-thread ``config`` overrides (dotted keys: agentd's own
    server, set on the command line, stays)."""
    config: dict[str, Any] = {}
    for server in servers:
        if server.type == "http":
            entry: dict[str, Any] = {"url": server.url}
            if server.headers:
                entry["http_headers"] = dict(server.headers)
        else:
            entry = {"command": server.command, "args": list(server.args)}
            if server.env:
                entry["env"] = dict(server.env)
        config[f"mcp_servers.{server.name}"] = entry
    return config


def claude_config(servers: Sequence[McpServer]) -> dict[str, Any]:
    """Claude Code's ``--mcp-config`` document."""
    out: dict[str, Any] = {}
    for server in servers:
        if server.type == "http":
            out[server.name] = {"type": "http", "url": server.url, "headers": dict(server.headers)}
        else:
            out[server.name] = {"type": "stdio", "command": server.command, "args": list(server.args),
                                "env": dict(server.env)}
    return {"mcpServers": out}


def acp_servers(servers: Sequence[McpServer], *, http: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """ACP ``mcpServers`` entries, and the names left out (``http`` ones for
    an agent that did not say ``mcpCapabilities.http``)."""
    out: list[dict[str, Any]] = []
    left: list[str] = []
    for server in servers:
        if server.type == "http":
            if not http:
                left.append(server.name)
                continue
            out.append({"type": "http", "name": server.name, "url": server.url,
                        "headers": [{"name": k, "value": v} for k, v in server.headers.items()]})
        else:
            out.append({"name": server.name, "command": server.command, "args": list(server.args),
                        "env": [{"name": k, "value": v} for k, v in server.env.items()]})
    return out, left


def scripted_servers(servers: Sequence[McpServer]) -> list[dict[str, Any]]:
    """The scripted agent's ``mcpServers``: ``{name, type, command | url}``."""
    return [{"name": s.name, "type": s.type, **({"url": s.url} if s.type == "http" else {"command": s.command})}
            for s in servers]

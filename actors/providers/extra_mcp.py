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

The thread's record keeps each server with the names of its environment
variables and headers only (``McpServer``); their values, which may be API
tokens, are kept in the thread's secrets file (``mcp_secrets.py``) and put
back (``with_secrets``) when a native thread is made, resumed or forked:
what a runtime gets is an ``McpServerSpec``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentd.store.records import McpServer

from .tool_credentials import SERVER_NAME

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class McpServerSpec:
    """An MCP server as a runtime gets it: the thread's ``McpServer`` with the
    values of its environment variables and headers (never stored in a record)."""

    name: str
    type: Literal["stdio", "http"] = "stdio"
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


class McpSecretsMissing(OSError):
    """A server of the thread's record names values its secrets file does not hold."""


#: the secrets of a thread's servers: ``{server name: {"env": {...}, "headers": {...}}}``
Secrets = dict[str, dict[str, dict[str, str]]]


def normalize(servers: Sequence[Any]) -> tuple[list[McpServerSpec], dict[str, str]]:
    """The wire's servers (``McpServerStdio`` / ``McpServerHttp``) with the
    names they are kept under, and the names that changed (given → kept)."""
    kept: list[McpServerSpec] = []
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
            kept.append(McpServerSpec(name=name, type="http", url=server.url, headers=dict(server.headers)))
        else:
            kept.append(McpServerSpec(name=name, type="stdio", command=server.command, args=list(server.args),
                                      env=dict(server.env)))
    return kept, renamed


def records(servers: Sequence[McpServerSpec]) -> list[McpServer]:
    """What the thread's record keeps of ``servers``: no value of an
    environment variable or header, only their names."""
    return [McpServer(name=s.name, type=s.type, command=s.command, args=list(s.args), env_names=list(s.env),
                      url=s.url, header_names=list(s.headers)) for s in servers]


def secrets(servers: Sequence[McpServerSpec]) -> Secrets:
    """The values the secrets file keeps for ``servers`` (servers without any are left out)."""
    out: Secrets = {}
    for server in servers:
        entry = {key: dict(values) for key, values in (("env", server.env), ("headers", server.headers)) if values}
        if entry:
            out[server.name] = entry
    return out


def with_secrets(servers: Sequence[McpServer], kept: Mapping[str, Mapping[str, Mapping[str, str]]]) -> list[McpServerSpec]:
    """The record's servers with their values back from the secrets file.

    Raises:
        McpSecretsMissing: a value the record names is not in ``kept`` (the
            file is gone or was changed), naming the server.
    """
    out = []
    for server in servers:
        entry = kept.get(server.name) or {}
        values: dict[str, dict[str, str]] = {}
        for key, names in (("env", server.env_names), ("headers", server.header_names)):
            have = entry.get(key) or {}
            missing = [n for n in names if n not in have]
            if missing:
                what = "environment variable" if key == "env" else "header"
                raise McpSecretsMissing(
                    f"the MCP server {server.name!r} of this thread has no value for its {what}"
                    f"{'s' if len(missing) > 1 else ''} {', '.join(missing)}: agentd's file of its secrets is gone "
                    f"or damaged; give the thread its servers again (thread.update {{mcpServers}}, or open the "
                    f"session again in the editor)")
            values[key] = {n: have[n] for n in names}
        out.append(McpServerSpec(name=server.name, type=server.type, command=server.command, args=list(server.args),
                                 env=values["env"], url=server.url, headers=values["headers"]))
    return out


def codex_config(servers: Sequence[McpServerSpec]) -> dict[str, Any]:
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


def claude_config(servers: Sequence[McpServerSpec]) -> dict[str, Any]:
    """Claude Code's ``--mcp-config`` document."""
    out: dict[str, Any] = {}
    for server in servers:
        if server.type == "http":
            out[server.name] = {"type": "http", "url": server.url, "headers": dict(server.headers)}
        else:
            out[server.name] = {"type": "stdio", "command": server.command, "args": list(server.args),
                                "env": dict(server.env)}
    return {"mcpServers": out}


def acp_servers(servers: Sequence[McpServerSpec], *, http: bool) -> tuple[list[dict[str, Any]], list[str]]:
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


def scripted_servers(servers: Sequence[McpServerSpec]) -> list[dict[str, Any]]:
    """The scripted agent's ``mcpServers``: ``{name, type, command | url, env?, headers?}``."""
    out = []
    for s in servers:
        entry: dict[str, Any] = {"name": s.name, "type": s.type,
                                 **({"url": s.url} if s.type == "http" else {"command": s.command})}
        if s.env:
            entry["env"] = dict(s.env)
        if s.headers:
            entry["headers"] = dict(s.headers)
        out.append(entry)
    return out

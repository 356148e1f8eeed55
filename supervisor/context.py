"""What the daemon's own handlers work with: one ``DaemonContext``, built by
the daemon (``daemon.py``) and handed to the router, which passes it to
every daemon-owned handler (``queries``, ``tasks``, ``subscriptions``).

It sits low in ``supervisor/``: it knows the daemon's parts, not the router
nor the method table, so a handler imports it and nothing that dispatches
to the handler. (Thread-owned handlers run in an actor and take the actor.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentd.actors.providers.tool_credentials import ToolCredentials
from agentd.actors.registry import ThreadRegistry
from agentd.actors.task_slots import TaskSlots
from agentd.store.db import Store
from agentd.store.hub import EventHub

from .mcp_grants import ThreadGrants
from .sessions import ProviderSessionManager

if TYPE_CHECKING:  # loaded by the daemon only when the console is on (it loads h11)
    from agentd.protocol.login import LoginCodes

    from .search_indexer import SearchIndexer


@dataclass
class Endpoints:
    """Where clients reach this daemon. The WebSocket's URLs are known only
    once it listens (its port may be any free one), and are set again when
    it restarts; None while it is not served."""

    #: the Unix socket's path
    socket: str
    #: ``ws://host:port/``
    websocket: str | None = None
    #: the web console's URL (``agentd serve --web``)
    web: str | None = None
    #: agentd's MCP endpoint (``http://127.0.0.1:PORT/mcp``), None when no instance offers the tool
    mcp: str | None = None


@dataclass(frozen=True)
class DaemonContext:
    """The daemon's parts, as its handlers see them.

    Attributes:
        store: the durable store (reads; commits go through the actors).
        hub: live events (``events.subscribe``, waits for a thread's events).
        registry: the thread actors (``registry.call`` runs a command in one).
        sessions: the provider-session manager (adapters, claims, status).
        endpoints: the daemon's addresses, for ``daemon.status`` and logins.
        started_at: trio time the daemon started (``daemon.status`` uptime).
        task_slots: fan-out slots of ``task.delegate`` calls under way (SPEC F9).
        credentials: the sessions' tool credentials (None: every tool call
            from an agent is refused).
        login_codes: the console's one-time login codes (``agentd web``),
            None when the console is off.
        search: the search index's keeper (``thread.search``; None: search is off).
        mcp_grants: the thread tokens of agentd's MCP endpoint (None: it is
            not served).
    """

    store: Store
    hub: EventHub
    registry: ThreadRegistry
    sessions: ProviderSessionManager
    endpoints: Endpoints
    started_at: float
    task_slots: TaskSlots = field(default_factory=TaskSlots)
    credentials: ToolCredentials | None = None
    login_codes: LoginCodes | None = None
    search: SearchIndexer | None = None
    mcp_grants: ThreadGrants | None = None

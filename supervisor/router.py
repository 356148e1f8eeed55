"""The router: the one small interface through which the protocol servers
reach the daemon. It reads the method table: daemon-owned methods run here,
thread-owned ones go to the actor of the thread their route names. It also
tells the socket server who a peer is (an agent's process or the person's,
``peers.py``) and holds the sessions' tool credentials."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from agentd.actors.providers.tool_credentials import ToolCredentials
from agentd.actors.registry import ThreadRegistry
from agentd.actors.task_slots import TaskSlots
from agentd.protocol.methods import Method, MethodTable
from agentd.protocol.peers import Peer
from agentd.protocol.server import Connection
from agentd.protocol.wire import Params
from agentd.store.db import Store
from agentd.store.hub import EventHub

from .methods import METHODS
from .peers import AgentProcesses
from .sessions import ProviderSessionManager

if TYPE_CHECKING:  # imported by the daemon only when the console is on (it loads h11)
    from agentd.protocol.login import LoginCodes


class DaemonRouter:
    """What the servers call: ``methods`` to decode, ``dispatch`` to run."""

    def __init__(
        self,
        store: Store,
        hub: EventHub,
        registry: ThreadRegistry,
        sessions: ProviderSessionManager,
        *,
        socket_path: str,
        methods: MethodTable = METHODS,
        credentials: ToolCredentials | None = None,
    ) -> None:
        self.store = store
        self.hub = hub
        self.registry = registry
        self.sessions = sessions
        self.methods = methods
        self.socket_path = socket_path
        self.websocket_url: str | None = None
        #: the web console's URL (``agentd serve --web``), None when it is off
        self.web_url: str | None = None
        #: the console's one-time login codes (``agentd web``), None when it is off
        self.login_codes: LoginCodes | None = None
        self.started_at = trio.current_time()
        #: fan-out slots of ``task.delegate`` calls under way (SPEC F9)
        self.task_slots = TaskSlots()
        #: the sessions' tool credentials (None: every tool call from an agent is refused)
        self.credentials = credentials
        self.agent_processes = AgentProcesses(sessions.runtime_processes)

    def identify_peer(self, pid: int, pidfd: int | None) -> Peer:
        """Who the Unix-socket peer ``pid`` is (the server asks once per connection)."""
        return self.agent_processes.identify(pid, pidfd)

    async def dispatch(self, method: Method, params: Params, connection: Connection) -> Any:
        if method.owner == "daemon":
            return await method.handler(self, params, connection)
        assert method.route is not None
        thread_id = method.route(self.store, params)
        command_id = getattr(params, "command_id", None)
        return await self.registry.call(thread_id, method.handler, params, command_id, method=method.name)

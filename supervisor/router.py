"""The router: the one small interface through which the protocol servers
reach the daemon. It reads the method table it is given: daemon-owned
methods run here, with the daemon's context (``context.py``); thread-owned
ones go to the actor of the thread their route names. It also tells the
socket server who a peer is (an agent's process or the person's,
``peers.py``).

The daemon (``daemon.py``) builds it with the table and the context: this
module imports neither the table nor any handler."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from agentd.protocol.methods import Method, MethodTable
from agentd.protocol.peers import Peer
from agentd.protocol.server import Connection
from agentd.protocol.wire import Params

from .context import DaemonContext
from .peers import AgentProcesses


class DaemonRouter:
    """What the servers call: ``methods`` to decode, ``dispatch`` to run.

    Args:
        methods: the method table (``agentd.supervisor.methods.METHODS``);
            its daemon-owned handlers take ``(context, params, connection)``.
        context: what those handlers are given.
    """

    def __init__(self, methods: MethodTable, context: DaemonContext) -> None:
        self.context = context
        self.methods: Mapping[str, Method] = _quick_with_context(methods, context)
        self.agent_processes = AgentProcesses(context.sessions.runtime_processes)

    def identify_peer(self, pid: int, pidfd: int | None) -> Peer:
        """Who the Unix-socket peer ``pid`` is (the server asks once per connection)."""
        return self.agent_processes.identify(pid, pidfd)

    async def dispatch(self, method: Method, params: Params, connection: Connection) -> Any:
        """Run ``method``: here, or in the actor of the thread it routes to."""
        context = self.context
        if method.owner == "daemon":
            return await method.handler(context, params, connection)
        assert method.route is not None
        thread_id = method.route(context.store, params)
        command_id = getattr(params, "command_id", None)
        return await context.registry.call(thread_id, method.handler, params, command_id, method=method.name)


def _quick_with_context(methods: MethodTable, context: DaemonContext) -> MethodTable:
    """``methods`` as the servers are given it. A server runs a ``quick``
    handler itself, where it reads the request, passing the router it
    serves as the first argument (protocol/methods.py); the daemon's quick
    handlers take the context instead, so each is bound to it here."""
    return MethodTable(
        method if method.quick is None else replace(method, quick=_bound(method.quick, context))
        for method in methods.values()
    )


def _bound(quick: Callable[..., Any], context: DaemonContext) -> Callable[..., Any]:
    def with_context(_router: object, params: Params, connection: Connection) -> Any:
        return quick(context, params, connection)

    with_context.__qualname__ = f"with_context({getattr(quick, '__qualname__', quick)})"
    return with_context

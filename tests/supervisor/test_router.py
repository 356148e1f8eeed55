"""The router runs the table it is given with the context it is given
(issue 22): daemon-owned handlers — full or quick — receive the daemon's
``DaemonContext``, never the router; thread-owned ones go to the actor of
the thread their route names."""

from __future__ import annotations

from typing import Any

import trio

from agentd.protocol.limits import ServerLimits
from agentd.protocol.methods import Method, MethodTable, run_now
from agentd.protocol.server import serve_unix
from agentd.protocol.wire import NoParams, ThreadIdParams
from agentd.supervisor.context import DaemonContext, Endpoints
from agentd.supervisor.router import DaemonRouter

from tests.protocol.test_protocol import raw_connection


class Sessions:
    """The session manager, as far as the router asks it (the roots of agents' processes)."""

    def runtime_processes(self) -> list[tuple[str, int, int]]:
        return []


class Registry:
    """The thread registry, as far as the router asks it: it records the commands it is sent."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, str | None, str]] = []

    async def call(self, thread_id: str, handler: Any, params: Any, command_id: str | None = None, *,
                   method: str) -> Any:
        self.calls.append((thread_id, params, command_id, method))
        return {"ranIn": thread_id}


def context_of(registry: Registry) -> DaemonContext:
    return DaemonContext(store=None, hub=None, registry=registry, sessions=Sessions(),
                         endpoints=Endpoints(socket="/nowhere"), started_at=0.0)


def table(seen: list[Any]) -> MethodTable:
    async def which(context: Any, _params: Any, _conn: Any) -> dict[str, Any]:
        seen.append(context)
        return {"socket": context.endpoints.socket}

    async def in_actor(_actor: Any, _params: Any) -> dict[str, Any]:  # pragma: no cover - the stand-in registry runs nothing
        return {}

    return MethodTable([
        Method("full.which", NoParams, "daemon", which, access="open"),
        Method("quick.which", NoParams, "daemon", which, quick=run_now(which), access="open"),
        Method("thread.poke", ThreadIdParams, "thread", in_actor, lambda _store, params: params.thread_id,
               access="open"),
    ])


async def test_every_daemon_handler_is_given_the_context_and_thread_methods_reach_their_thread(short_dir, nursery):
    seen: list[Any] = []
    registry = Registry()
    context = context_of(registry)
    router = DaemonRouter(table(seen), context)
    path = short_dir / "r.sock"
    await nursery.start(lambda task_status: serve_unix(path, router, limits=ServerLimits(), task_status=task_status))
    async with raw_connection(path) as conn:
        with trio.fail_after(10):
            assert await conn.result("full.which") == {"socket": "/nowhere"}
            assert await conn.result("quick.which") == {"socket": "/nowhere"}
            assert await conn.result("thread.poke", {"threadId": "thr_1"}) == {"ranIn": "thr_1"}
    assert seen == [context, context]
    assert [(thread_id, method) for thread_id, _params, _command, method in registry.calls] == [("thr_1", "thread.poke")]

"""agentd's own MCP tools, served by the daemon (SPEC F9): ``delegate_task``,
``task_result`` and ``task_cancel`` over ``protocol/mcp_http.py``.

A tool call is the protocol method behind it (``task.delegate``,
``task.result``, ``task.cancel``), dispatched through the router as a call
from the HTTP client would be over the socket, so the control-plane rules
are the same: the bearer token stands for the ``sessionId`` and
``credential`` the methods check (``tasks.authorize_tool_call``), and the
peer — the process at the other end of the loopback connection, found in
/proc at its first tool call — must be a process of that session's own
runtime.

Tokens: ``<sessionId>.<credential>`` for a provider session (its tool
credential, ``tool_credentials.py``: revoked when the session ends); a
grant for a thread (``mcg_….<secret>``) for ``agentd mcp --thread``,
handed out by ``mcp.endpoint`` to the person's clients only and revoked
when the connection that asked for it closes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import msgspec
import trio

from agentd.actors.providers.tool_credentials import ToolCredentials
from agentd.protocol import wire
from agentd.protocol.errors import AgentdError, InvalidParams, InvalidState, NotFound
from agentd.protocol.limits import ServerLimits
from agentd.protocol.mcp import Tool, ToolAnswer
from agentd.protocol.peers import Peer
from agentd.protocol.server import Connection, Router

from .context import DaemonContext
from .mcp_grants import ThreadGrants
from .tasks import authorize_tool_call

INSTRUCTIONS = (
    "agentd runs you and other coding agents. delegate_task hands a self-contained piece of work to another "
    "agent (optionally of another provider) in a thread of its own; its final answer, the files it changed and "
    "how it ended come back to you. Give it complete instructions: it does not see this conversation."
)
DELEGATE_DESCRIPTION = (
    "Delegate a task to another agent run by agentd. `instructions` is everything the other agent gets (it does "
    "not see this conversation). `provider` names an agentd provider instance (default: your own). `workspace`: "
    "`same` (your workspace, the default), `fork` (a copy of it), `worktree` (a git worktree of it on a branch of its own, in a git repository) or `new` (an empty folder). With `wait: true` "
    "the call returns the task's result (final answer, files changed, outcome) when it ends; with `wait: false` "
    "it returns the task id at once and the result is given to you at your next turn (or ask task_result); "
    "add `wake: true` to be given a turn of your own with the result as soon as the task ends, so you can fan "
    "work out, end your turn and carry on when it comes back."
)
RESULT_DESCRIPTION = "Where a delegated task stands (by the taskId delegate_task returned), and its result once it ended."
CANCEL_DESCRIPTION = (
    "Cancel a task you delegated (by its taskId): its run is interrupted (or, not started yet, cancelled) and the "
    "tasks it delegated are stopped too. task_result then tells how it ended."
)


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_TASK_ID = {"taskId": {"type": "string", "title": "Taskid", "description": "the taskId delegate_task returned"}}
TOOLS = {tool.name: tool for tool in (
    Tool("delegate_task", DELEGATE_DESCRIPTION, _object({
        "instructions": {"type": "string", "title": "Instructions"},
        "wait": {"type": "boolean", "title": "Wait"},
        "provider": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Provider"},
        "workspace": {"enum": ["same", "fork", "new", "worktree"], "type": "string", "default": "same", "title": "Workspace"},
        "wake": {"type": "boolean", "default": False, "title": "Wake"},
    }, ["instructions", "wait"])),
    Tool("task_result", RESULT_DESCRIPTION, _object(_TASK_ID, ["taskId"])),
    Tool("task_cancel", CANCEL_DESCRIPTION, _object(_TASK_ID, ["taskId"])),
)}
#: the fields of a task's answer the tool returns as structured content
FIELDS = ("taskId", "threadId", "runId", "status", "outcome", "finalAnswer", "filesChanged", "transferId", "handoffId")


@dataclass(frozen=True)
class Caller:
    """Who a token names: a provider session (with its credential) or a thread."""

    session_id: str | None = None
    credential: str | None = None
    thread_id: str | None = None

    def session(self) -> dict[str, str]:
        return {"sessionId": self.session_id, "credential": self.credential or ""} if self.session_id else {}

    def who(self) -> dict[str, str]:
        return self.session() or {"parentThreadId": self.thread_id or ""}


class AgentdTools:
    """The ``mcp.ToolHost`` of agentd's tools, for one daemon.

    Args:
        credentials: the sessions' tool credentials (their tokens).
        grants: the thread grants (``mcp.endpoint``'s tokens).
        version: agentd's version, for ``serverInfo``.
    """

    name = "agentd"
    instructions = INSTRUCTIONS
    tools = TOOLS

    def __init__(self, credentials: ToolCredentials, grants: ThreadGrants, *, version: str) -> None:
        #: dispatches the methods behind the tools (set once the daemon made it)
        self.router: Router | None = None
        self.credentials = credentials
        self.version = version
        self.grants = grants
        self.limits = ServerLimits()

    def authenticate(self, token: str) -> Caller | None:
        """The caller ``token`` names, or None (unknown, revoked, malformed)."""
        name, _, secret = token.partition(".")
        if not secret:
            return None
        if name.startswith("mcg_"):
            thread_id = self.grants.thread_of(name, secret)
            return Caller(thread_id=thread_id) if thread_id is not None else None
        return Caller(session_id=name, credential=secret) if self.credentials.check(name, secret) else None

    async def call(self, caller: object, tool: str, arguments: dict[str, Any],
                   peer: Callable[[], Awaitable[object]]) -> ToolAnswer:
        """Run ``tool``; a refusal is a tool error the model reads."""
        assert isinstance(caller, Caller)
        who = await peer()
        assert isinstance(who, Peer)
        async with trio.open_nursery() as nursery:
            connection = Connection(_no_output, nursery, limits=self.limits, identify=lambda: who)
            try:
                _check_arguments(TOOLS[tool], arguments)
                answer = await self._run(caller, tool, arguments, connection)
            except AgentdError as exc:
                answer = ToolAnswer(f"Error executing tool {tool}: {exc}", is_error=True)
            finally:
                nursery.cancel_scope.cancel()  # the connection's tasks (none that outlive the call)
        return answer

    async def _run(self, caller: Caller, tool: str, arguments: dict[str, Any], connection: Connection) -> ToolAnswer:
        if tool == "delegate_task":
            answer = await self._method("task.delegate", {**arguments, **caller.who()}, connection)
            answer = {**answer, "wake": bool(arguments.get("wake"))}
            if arguments["wait"]:
                answer = {**answer, **await self._method(
                    "task.result", {"taskId": answer["taskId"], "wait": True, **caller.session()}, connection)}
            return _task_answer(answer)
        if tool == "task_result":
            return _task_answer(await self._method("task.result", {**arguments, **caller.session()}, connection))
        answer = await self._method("task.cancel", {**arguments, **caller.session()}, connection)
        running = answer.get("interruptedRunId")
        text = (f"Task {answer['taskId']}: " + (f"its run {running} is being interrupted" if running
                else "it had no run going") + "; the tasks it delegated are stopped too. task_result tells how it ended.")
        return ToolAnswer(text, {"taskId": answer["taskId"], "interruptedRunId": running,
                                 "cancelledRunIds": answer.get("cancelledRunIds", []), "text": text})

    async def _method(self, name: str, params: dict[str, Any], connection: Connection) -> dict[str, Any]:
        router = self.router
        assert router is not None, "the daemon gives its tools the router before serving them"
        method = router.methods[name]
        answer = await router.dispatch(method, method.decode(params), connection)
        wire_form: dict[str, Any] = answer if isinstance(answer, dict) else msgspec.to_builtins(answer)
        return wire_form


async def _no_output(_batch: list[bytes]) -> None:
    """A tool call's connection sends nothing: its answer is the tool's."""


def _check_arguments(tool: Tool, arguments: dict[str, Any]) -> None:
    schema = tool.input_schema
    unknown = sorted(set(arguments) - set(schema["properties"]))
    missing = [name for name in schema["required"] if name not in arguments]
    if unknown or missing:
        raise InvalidParams(f"{tool.name} takes {', '.join(schema['properties'])}" +
                          (f"; unknown: {', '.join(unknown)}" if unknown else "") +
                          (f"; missing: {', '.join(missing)}" if missing else ""))


def describe(answer: dict[str, Any]) -> str:
    """The tool's text for the model."""
    if answer.get("text"):
        return str(answer["text"])
    when = ("You get a turn of your own when it ends, with its result" if answer.get("wake")
            else "Its result comes to you at your next turn")
    return (f"Delegated as task {answer['taskId']} (thread {answer['threadId']}, provider {answer.get('provider')}). "
            f"{when}; task_result tells where it stands.")


def _task_answer(answer: dict[str, Any]) -> ToolAnswer:
    text = describe(answer)
    return ToolAnswer(text, {**{key: answer[key] for key in FIELDS if key in answer}, "text": text})


async def mcp_endpoint(context: DaemonContext, params: wire.McpEndpointParams, connection: Connection) -> dict[str, Any]:
    """``mcp.endpoint``: where agentd's MCP tools are served and a token for
    them — a session's own (with its credential), or a grant for
    ``parentThreadId`` to the person's client, good while the asking
    connection stays open (``agentd mcp`` holds it for its lifetime)."""
    authorize_tool_call(context, connection, "mcp.endpoint", params.session_id, params.credential)
    grants = context.mcp_grants
    if grants is None or context.endpoints.mcp is None:
        raise InvalidState("agentd's MCP endpoint is not served (no provider instance offers agentd's tool)")
    if params.session_id is not None:
        return {"url": context.endpoints.mcp, "socket": context.credentials.mcp_socket if context.credentials else None,
                "token": f"{params.session_id}.{params.credential}"}
    if params.parent_thread_id is None:
        raise InvalidParams("mcp.endpoint needs parentThreadId (or sessionId with its credential)",
                            field="parentThreadId")
    if context.store.thread(params.parent_thread_id) is None:
        raise NotFound(f"no thread {params.parent_thread_id}", threadId=params.parent_thread_id)
    grant_id, token = grants.grant(params.parent_thread_id)

    async def revoke_on_close() -> None:
        try:
            await connection.closed.wait()
        finally:
            grants.revoke(grant_id)

    connection.start_soon(revoke_on_close)
    return {"url": context.endpoints.mcp, "socket": context.credentials.mcp_socket if context.credentials else None,
            "token": token}

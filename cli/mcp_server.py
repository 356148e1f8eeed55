"""``agentd mcp``: agentd's own MCP server, over stdio (SPEC F9).

Any agent that runs under agentd can hand a piece of work to any other agent
through it. agentd configures it into the Codex and Claude Code sessions it
starts, and the scripted agent's ``delegate`` step starts it as an MCP
client, so every agent takes the same path. It is a client of the daemon's
socket (``protocol.client``); the session it was started for
(``AGENTD_SESSION_ID``) names the delegating thread, whose running turn
receives the result, and the session's tool credential (in the file
``AGENTD_TOOL_CREDENTIAL`` names) proves it: the daemon refuses a session's
tool calls without it.

Tools:

- ``delegate_task {instructions, provider?, workspace?: same|fork|new|worktree, wait}``
  — ``task.delegate``: a child thread (``delegated_task``, ``createdBy:
  agent``) and its first run on ``provider`` (default: the delegating
  thread's). With ``wait: true`` the tool answers with the task's result once
  its run ends (``task.result {wait: true}``); else at once with the task's
  id, and the result reaches the thread's next run as a stored handoff.
- ``task_result {taskId}`` — ``task.result``: where the task stands, and its
  result once it ended.

The protocol is the ``mcp`` SDK's; this module only maps tools to methods.
A refusal (a depth or fan-out limit, an unknown provider) is a tool error
the model reads, never a crash of the server.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable
from typing import Any, Literal

import trio

from agentd.actors.providers.tool_credentials import read_credential
from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError

INSTRUCTIONS = (
    "agentd runs you and other coding agents. delegate_task hands a self-contained piece of work to another "
    "agent (optionally of another provider) in a thread of its own; its final answer, the files it changed and "
    "how it ended come back to you. Give it complete instructions: it does not see this conversation."
)

DELEGATE_DESCRIPTION = (
    "Delegate a task to another agent run by agentd. `instructions` is everything the other agent gets (it does "
    "not see this conversation). `provider` names an agentd provider instance (default: your own). `workspace`: "
    "`same` (your workspace, the default), `fork` (a copy of it) or `new` (an empty folder). With `wait: true` "
    "the call returns the task's result (final answer, files changed, outcome) when it ends; with `wait: false` "
    "it returns the task id at once and the result is given to you at your next turn (or ask task_result)."
)
RESULT_DESCRIPTION = "Where a delegated task stands (by the taskId delegate_task returned), and its result once it ended."
CANCEL_DESCRIPTION = (
    "Cancel a task you delegated (by its taskId): its run is interrupted (or, not started yet, cancelled) and the "
    "tasks it delegated are stopped too. task_result then tells how it ended."
)


class Delegator:
    """The daemon calls behind the tools, for one session (or thread)."""

    def __init__(self, socket: str, *, session_id: str | None, thread_id: str | None,
                 credential: str | None = None) -> None:
        self.socket = socket
        self.session_id = session_id
        self.thread_id = thread_id
        self.credential = credential

    def _session(self) -> dict[str, str]:
        """The session that asks, with its credential (empty: not started for a session)."""
        if not self.session_id:
            return {}
        return {"sessionId": self.session_id, **({"credential": self.credential} if self.credential else {})}

    def _who(self) -> dict[str, str]:
        if self.session_id:
            return self._session()
        if self.thread_id:
            return {"parentThreadId": self.thread_id}
        raise AgentdError("agentd mcp was started without AGENTD_SESSION_ID or --thread: it does not know who delegates")

    async def delegate(self, instructions: str, provider: str | None, workspace: str, wait: bool) -> dict[str, Any]:
        params: dict[str, Any] = {"instructions": instructions, "workspace": workspace, "wait": wait, **self._who()}
        if provider:
            params["provider"] = provider
        async with Client.connect(self.socket) as client:
            task = await client.call("task.delegate", **params)
            if not wait:
                return task
            result = await client.call("task.result", taskId=task["taskId"], wait=True, **self._session())
            return {**task, **result}

    async def result(self, task_id: str) -> dict[str, Any]:
        async with Client.connect(self.socket) as client:
            return await client.call("task.result", taskId=task_id, **self._session())

    async def cancel(self, task_id: str) -> dict[str, Any]:
        async with Client.connect(self.socket) as client:
            return await client.call("task.cancel", taskId=task_id, **self._session())


def describe(answer: dict[str, Any]) -> str:
    """The tool's text for the model."""
    if answer.get("text"):
        return answer["text"]
    return (f"Delegated as task {answer['taskId']} (thread {answer['threadId']}, provider {answer.get('provider')}). "
            "Its result comes to you at your next turn; task_result tells where it stands.")


def build_server(delegator: Delegator) -> Any:
    """The MCP server with agentd's tools."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    app = MCPServer("agentd", instructions=INSTRUCTIONS)

    async def answer_of(call: Awaitable[dict[str, Any]]) -> dict[str, Any]:
        """The daemon's answer; a refusal is a tool error the model reads."""
        try:
            return await call
        except (AgentdError, OSError) as exc:
            raise ToolError(str(exc)) from None

    @app.tool(name="delegate_task", description=DELEGATE_DESCRIPTION)
    async def delegate_task(
        instructions: str, wait: bool, provider: str | None = None,
        workspace: Literal["same", "fork", "new", "worktree"] = "same",
    ) -> dict[str, Any]:
        answer = await answer_of(delegator.delegate(instructions, provider, workspace, wait))
        return {**_fields(answer), "text": describe(answer)}

    @app.tool(name="task_result", description=RESULT_DESCRIPTION)
    async def task_result(taskId: str) -> dict[str, Any]:  # noqa: N803 - the tool's parameter name
        answer = await answer_of(delegator.result(taskId))
        return {**_fields(answer), "text": describe(answer)}

    @app.tool(name="task_cancel", description=CANCEL_DESCRIPTION)
    async def task_cancel(taskId: str) -> dict[str, Any]:  # noqa: N803 - the tool's parameter name
        answer = await answer_of(delegator.cancel(taskId))
        running = answer.get("interruptedRunId")
        text = (f"Task {answer['taskId']}: " + (f"its run {running} is being interrupted" if running
                else "it had no run going") + "; the tasks it delegated are stopped too. task_result tells how it ended.")
        return {"taskId": answer["taskId"], "interruptedRunId": running,
                "cancelledRunIds": answer.get("cancelledRunIds", []), "text": text}

    return app


def _fields(answer: dict[str, Any]) -> dict[str, Any]:
    keys = ("taskId", "threadId", "runId", "status", "outcome", "finalAnswer", "filesChanged", "transferId", "handoffId")
    return {key: answer[key] for key in keys if key in answer}


def serve(socket: str | None, session_id: str | None, thread_id: str | None) -> int:
    """Run the server on stdin/stdout until the client closes it."""
    socket = socket or os.environ.get("AGENTD_SOCKET")
    if not socket:
        raise SystemExit("agentd mcp: no daemon socket (AGENTD_SOCKET or --socket)")
    delegator = Delegator(socket, session_id=session_id or os.environ.get("AGENTD_SESSION_ID") or None,
                          thread_id=thread_id, credential=read_credential())
    app = build_server(delegator)
    trio.run(app.run_stdio_async)
    return 0

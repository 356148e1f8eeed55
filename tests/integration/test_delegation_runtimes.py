"""Delegation across real runtimes, offline (SPEC F9): a real Claude Code
delegates to a real Codex through agentd's MCP tool, proved with the fake
model servers' request logs — what each runtime actually sent to its model.

Claude 2.1.332 names MCP tools only as deferred tools, so its (fake) model
first loads ``mcp__agentd__delegate_task`` with ``ToolSearch``, then calls
it; Claude asks permission for it (``can_use_tool``), which is an agentd
approval unless the instance pre-approves agentd's tool.

Skipped when a binary is not installed (``npm ci --prefix tests/integration/runtimes``).
"""

from __future__ import annotations

import json

import pytest

from agentd.protocol.client import Client
from scripts.offline import claude as claude_world
from scripts.offline import codex as codex_world
from scripts.offline import fake_openai
from tests.helpers import script, wait_event, wait_run_terminal
from tests.integration.shared import connect, requests_in, workspace_of

needs_both = pytest.mark.skipif(
    codex_world.codex_binary() is None or claude_world.claude_binary() is None,
    reason=codex_world.SKIP_REASON + "; " + claude_world.SKIP_REASON,
)

INSTRUCTIONS = "count the files named quebec in this workspace"


async def _threads(client: Client) -> list[dict]:
    return (await client.call("thread.list"))["threads"]


@needs_both
async def test_f9_real_claude_delegates_to_real_codex_and_gets_the_result(runtimes_daemon):
    """F9 + F15: Claude's model calls delegate_task (after ToolSearch loads
    it); Claude's permission prompt is an agentd approval, accepted; a child
    thread on Codex (createdBy agent) runs the task — Codex's model request
    carries the instructions — and the result is the tool's answer in
    Claude's turn: Claude's next model request carries it."""
    claude, codex = runtimes_daemon.worlds["claude"], runtimes_daemon.worlds["codex"]
    async with connect(runtimes_daemon) as client:
        parent = (await client.call("thread.create", provider="claude", title="lead"))["threadId"]
        sent = await client.call("thread.message.send", threadId=parent, text=f"DELEGATE_TO:codex: {INSTRUCTIONS}")
        asked = await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=parent, timeout=120)
        request = asked["payload"]["request"]
        assert request["detail"]["tool"] == "mcp__agentd__delegate_task", request
        await client.call("approval.respond", requestId=request["id"], decision="accept")
        run = await wait_run_terminal(client, parent, sent["runId"], timeout=240)
        assert run["status"] == "completed", run

        [child] = [t for t in await _threads(client) if t["parentThreadId"] == parent]
        assert (child["relationshipToParent"], child["createdBy"], child["provider"]) == ("delegated_task", "agent", "codex")
        [child_run] = (await client.call("thread.get", threadId=child["id"]))["runs"]
        assert child_run["status"] == "completed" and child_run["provider"] == "codex"
        spawn, result = (await client.call("thread.transfers", threadId=child["id"]))["transfers"]
        assert (spawn["type"], spawn["status"]) == ("subagent_spawn", "consumed")
        assert (result["type"], result["status"], result["runId"]) == ("subagent_result", "consumed", run["id"])
        task_text = (await client.call("handoff.get", handoffId=spawn["handoffId"]))["handoff"]["text"]
        result_text = (await client.call("handoff.get", handoffId=result["handoffId"]))["handoff"]["text"]
        # The spawn's source is the parent's tool node for the MCP call.
        nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
        [tool] = [n for n in nodes if n["id"] == spawn["sourcePoint"]["nodeId"]]
        assert "delegate_task" in tool["title"]
        # The worlds are shared (runtimes_daemon): the requests of these threads' runtimes.
        parent_workspace, child_workspace = await workspace_of(client, parent), await workspace_of(client, child["id"])

    # What Codex's model was sent: the stored task handoff and the instructions.
    [codex_request] = requests_in(codex.model_requests(), child_workspace)
    # (One user message: the handoff, then the instructions, as two parts.)
    [codex_text] = codex_world.user_texts(codex_request)
    assert codex_text == task_text + "\n" + INSTRUCTIONS
    # Codex waited for agentd mcp: agentd's tools are offered to it too.
    assert "mcp__agentd" in fake_openai.tool_names(codex_request)

    # What Claude's model was sent after the tool: the task's result.
    requests = requests_in(claude.model_requests(), parent_workspace)
    last = requests[-1]["messages"]
    tool_uses = [block for message in last if message["role"] == "assistant" and isinstance(message["content"], list)
                 for block in message["content"] if block.get("type") == "tool_use"]
    assert [b["name"] for b in tool_uses] == ["ToolSearch", "mcp__agentd__delegate_task"]
    results = [block for message in last if message["role"] == "user" and isinstance(message["content"], list)
               for block in message["content"] if block.get("type") == "tool_result"]
    content = results[-1]["content"]
    payload = json.loads(content[0]["text"] if isinstance(content, list) else content)
    assert payload["text"] == result_text and payload["status"] == "completed"
    assert payload["finalAnswer"].startswith("You said: ") and INSTRUCTIONS in payload["finalAnswer"]
    assert f"Final answer: {payload['finalAnswer']}" in result_text


@needs_both
async def test_f9_a_preapproved_agentd_tool_asks_no_permission(runtimes_daemon):
    """F9: ``agentd_tool = "allow"`` pre-approves agentd's own tool
    (``--allowedTools``): the call runs without an approval."""
    async with connect(runtimes_daemon) as client:
        parent = (await client.call("thread.create", provider="claude_allow"))["threadId"]
        sent = await client.call("thread.message.send", threadId=parent, text=f"DELEGATE_TO:codex: {INSTRUCTIONS}")
        run = await wait_run_terminal(client, parent, sent["runId"], timeout=240)
        assert run["status"] == "completed", run
        nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
        assert [n for n in nodes if n["kind"] == "approval"] == []
        [child] = [t for t in await _threads(client) if t["parentThreadId"] == parent]
        assert child["createdBy"] == "agent"


@pytest.mark.skipif(claude_world.claude_binary() is None, reason=claude_world.SKIP_REASON)
async def test_issue23_real_claude_cancels_its_task_with_task_cancel(runtimes_daemon):
    """Issue 23 item 3 on the real binary: a Claude thread's delegated task
    (a hanging scripted one) is cancelled by Claude itself through agentd's
    ``task_cancel`` tool, with its session's token; the task ends
    interrupted (task_cancelled) and Claude's turn goes on to its answer."""
    async with connect(runtimes_daemon) as client:
        parent = (await client.call("thread.create", provider="claude_allow"))["threadId"]
        task = await client.call("task.delegate", parentThreadId=parent, provider="basic",
                                 instructions=script({"say": "on it"}, {"hang": True}))
        await wait_event(client, lambda e: e["type"] == "message.completed", thread_id=task["taskId"], timeout=60)
        sent = await client.call("thread.message.send", threadId=parent, text=f"CANCEL_TASK:{task['taskId']}")
        run = await wait_run_terminal(client, parent, sent["runId"], timeout=240)
        assert run["status"] == "completed", run
        ended = await wait_run_terminal(client, task["taskId"], task["runId"], timeout=60)
        assert (ended["status"], ended["reason"]) == ("interrupted", "task_cancelled"), ended
        answers = [m["text"] for m in (await client.call("thread.get", threadId=parent))["messages"]
                   if m["role"] == "assistant"]
        assert any(a.startswith("The cancel answered:") and task["taskId"] in a for a in answers), answers


@needs_both
@pytest.mark.parametrize("agentd_tool", ["ask", "allow"])
async def test_f9_real_codex_delegates_to_a_scripted_agent(runtimes_daemon, agentd_tool):
    """F9 + F15: Codex's model calls ``delegate_task`` in the ``mcp__agentd``
    namespace. With ``ask`` Codex asks first — an MCP elicitation, which is
    an agentd approval, accepted here; with ``allow`` (Codex's approval mode
    ``approve``) it does not ask. A scripted child does the task and Codex's
    next model request carries the result as the tool's output."""
    codex = runtimes_daemon.worlds["codex"]
    async with connect(runtimes_daemon) as client:
        parent = (await client.call("thread.create", provider="codex" if agentd_tool == "ask" else "codex_allow"))["threadId"]
        sent = await client.call("thread.message.send", threadId=parent, text="DELEGATE_TO:basic: tango")
        if agentd_tool == "ask":
            asked = await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=parent, timeout=120)
            request = asked["payload"]["request"]
            assert (request["detail"]["method"], request["detail"]["server"]) == ("mcpServer/elicitation/request", "agentd")
            await client.call("approval.respond", requestId=request["id"], decision="accept")
        run = await wait_run_terminal(client, parent, sent["runId"], timeout=240)
        assert run["status"] == "completed", run
        [child] = [t for t in await _threads(client) if t["parentThreadId"] == parent]
        assert (child["createdBy"], child["provider"]) == ("agent", "basic")
        nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
        approvals = [n for n in nodes if n["kind"] == "approval"]
        assert len(approvals) == (1 if agentd_tool == "ask" else 0)
        [tool] = [n for n in nodes if n["kind"] == "mcp_tool_call"]
        assert tool["title"] == "agentd.delegate_task" and tool["status"] == "completed"
        [spawn, result] = (await client.call("thread.transfers", threadId=child["id"]))["transfers"]
        assert spawn["sourcePoint"]["nodeId"] == tool["id"]
        assert (result["status"], result["runId"]) == ("consumed", run["id"])
        last = requests_in(codex.model_requests(), await workspace_of(client, parent))[-1]
    outputs = [item for item in last["input"] if item.get("type") == "function_call_output"]
    assert "You said: tango" in json.dumps(outputs[-1])

"""Delegated tasks through agentd's own MCP tool (SPEC F9), end to end: a
scripted agent's ``delegate`` step starts ``agentd mcp`` as an MCP client —
the same server agentd configures into Codex and Claude sessions — which
calls ``task.delegate`` / ``task.result`` on the daemon's socket.

``basic`` is a second scripted instance without native fork: the child runs
on another provider than its parent.
"""

from __future__ import annotations

import os
import signal

import pytest
import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import LimitExceeded
from tests.helpers import TERMINAL, script, send_and_wait, stored_events, wait_event, wait_run_terminal

CONFIG = """
[daemon]
delegate_max_depth = {depth}
delegate_max_fanout = {fanout}

[providers.basic]
kind = "scripted"
capabilities = {{ nativeFork = false }}
"""


async def _start(tmp_path, short_dir, *, depth: int = 3, fanout: int = 8):
    config = tmp_path / "config.toml"
    config.write_text(CONFIG.format(depth=depth, fanout=fanout))
    return await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)


@pytest.fixture
async def daemon(tmp_path, short_dir):
    daemon = await _start(tmp_path, short_dir)
    try:
        yield daemon
    finally:
        code = await daemon.terminate()
        assert code == 0, daemon.log_text()[-4000:]


@pytest.fixture
async def client(daemon):
    async with Client.connect(daemon.socket) as c:
        yield c


def delegate(instructions: str, *, wait: bool, provider: str = "basic", **extra) -> str:
    return script({"delegate": {"provider": provider, "instructions": instructions, "wait": wait, **extra}})


async def answer_of(client: Client, thread_id: str, run_id: str) -> str:
    messages = (await client.call("thread.get", threadId=thread_id))["messages"]
    return "\n".join(m["text"] for m in messages if m["role"] == "assistant" and m["runId"] == run_id)


async def only_child(client: Client, parent_id: str) -> dict:
    threads = (await client.call("thread.list"))["threads"]
    children = [t for t in threads if t["parentThreadId"] == parent_id]
    assert len(children) == 1, children
    return children[0]


async def transfers(client: Client, thread_id: str) -> list[dict]:
    return (await client.call("thread.transfers", threadId=thread_id))["transfers"]


async def test_f9_delegate_and_wait_the_childs_answer_is_the_tools_result(client, tmp_path):
    """F9: wait: true — a child thread on basic does the task; its final
    answer is the tool's result, said by the parent in the same turn."""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    task = script({"write": {"path": "notes.txt", "content": "done"}}, {"say": "the answer is kilo"})
    run = await send_and_wait(client, parent, delegate(task, wait=True))
    assert run["status"] == "completed", run
    assert "delegated task completed: the answer is kilo" in await answer_of(client, parent, run["id"])

    child = await only_child(client, parent)
    assert child["relationshipToParent"] == "delegated_task" and child["createdBy"] == "agent"
    assert child["provider"] == "basic" and child["rootThreadId"] == parent
    detail = await client.call("thread.get", threadId=child["id"])
    [child_run] = detail["runs"]
    assert child_run["status"] == "completed" and child_run["provider"] == "basic"
    assert detail["messages"][0]["role"] == "user" and detail["messages"][0]["text"] == task

    # The spawn: from the parent's delegate_task tool node, its handoff the task.
    spawn, result = await transfers(client, child["id"])
    parent_nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    [tool] = [n for n in parent_nodes if n["kind"] == "tool" and n["title"] == "delegate_task"]
    assert spawn["type"] == "subagent_spawn" and spawn["createdBy"] == "agent"
    assert spawn["sourceThreadId"] == parent and spawn["targetThreadId"] == child["id"]
    assert spawn["sourcePoint"]["nodeId"] == tool["id"] and spawn["sourcePoint"]["runId"] == run["id"]
    assert spawn["status"] == "consumed" and spawn["runId"] == child_run["id"]
    handoff = (await client.call("handoff.get", handoffId=spawn["handoffId"]))["handoff"]
    assert handoff["strategy"] == "subagent_task" and task in handoff["text"]
    attempt = (await client.call("run.get", runId=child_run["id"]))["attempts"][0]
    assert attempt["extraHandoffIds"] == [handoff["id"]]

    # The result: back to the parent, consumed by the turn that waited for it.
    assert result["type"] == "subagent_result" and result["sourceThreadId"] == child["id"]
    assert result["targetThreadId"] == parent and result["status"] == "consumed" and result["runId"] == run["id"]
    text = (await client.call("handoff.get", handoffId=result["handoffId"]))["handoff"]["text"]
    assert "Final answer: the answer is kilo" in text and "Files changed: notes.txt" in text
    assert (tmp_path / "data").exists()
    assert result in await transfers(client, parent) and spawn in await transfers(client, parent)

    # Nothing is injected again into the parent's next run.
    follow = await send_and_wait(client, parent, script({"reportHistory": {}}))
    assert (await client.call("run.get", runId=follow["id"]))["attempts"][0]["extraHandoffIds"] == []

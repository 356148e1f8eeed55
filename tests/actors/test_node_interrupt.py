"""``node.interrupt`` (issue 23 item 2; SPEC F10, seed 000 "interrupt targets a
run or a node"): one running node ends, the run goes on. Through the socket
on the scripted agent, whose ``item/interrupt`` ends one tool, command or
subagent item; a ``delegate_task`` call's tasks are cancelled."""

from __future__ import annotations

import pytest

from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError
from tests.actors.test_delegation import SLOW, answer_of, client, daemon, delegate, shared_daemon  # noqa: F401 - fixtures
from tests.helpers import script, wait_event, wait_run_terminal


async def _started(client: Client, thread_id: str, kind: str, title: str | None = None) -> dict:
    event = await wait_event(client, lambda e: e["type"] == f"{kind}.started"
                             and (title is None or e["payload"]["node"]["title"] == title), thread_id=thread_id,
                             timeout=SLOW)
    return event["payload"]["node"]


async def _node(client: Client, run_id: str, node_id: str) -> dict:
    [node] = [n for n in (await client.call("run.get", runId=run_id))["nodes"] if n["id"] == node_id]
    return node


@pytest.mark.parametrize("kind, step", [
    ("tool", {"tool": {"name": "long", "hang": True}}),
    ("command_execution", {"command": {"argv": ["sleep", "60"]}}),
    ("subagent", {"subagent": {"steps": [{"say": "thinking"}, {"hang": True}]}}),
])
async def test_f10_interrupting_a_running_node_ends_it_and_the_run_goes_on(client, kind, step):
    """A hanging tool, a long command, a subagent: node.interrupt ends that
    node ``interrupted``; the turn goes on to its next step and completes."""
    thread = (await client.call("thread.create", title="node"))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread, text=script(step, {"say": "after the node"}))
    node = await _started(client, thread, kind)

    answer = await client.call("node.interrupt", nodeId=node["id"])
    assert (answer["nodeId"], answer["runId"], answer["via"], answer["taskIds"]) == (node["id"], sent["runId"],
                                                                                      "provider", [])
    run = await wait_run_terminal(client, thread, sent["runId"])
    assert run["status"] == "completed", run
    assert (await _node(client, sent["runId"], node["id"]))["status"] == "interrupted"
    assert "after the node" in await answer_of(client, thread, sent["runId"])
    requested = await wait_event(client, lambda e: e["type"] == "node.interrupt_requested", thread_id=thread)
    assert requested["nodeId"] == node["id"] and requested["payload"]["via"] == "provider"


async def test_f10_f9_interrupting_a_delegate_task_call_cancels_its_task(client):
    """A waiting delegate_task call: node.interrupt cancels the task it made
    (task_cancel); the call answers with the interrupted result and the
    parent's turn goes on."""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    text = script({"delegate": {"provider": "basic", "instructions": script({"say": "on it"}, {"hang": True}),
                                "wait": True}}, {"say": "the lead goes on"})
    sent = await client.call("thread.message.send", threadId=parent, text=text)
    delegated = await wait_event(client, lambda e: e["type"] == "task.delegated", thread_id=parent, timeout=SLOW)
    task_id = delegated["payload"]["taskId"]
    await wait_event(client, lambda e: e["type"] == "message.completed", thread_id=task_id, timeout=SLOW)

    answer = await client.call("node.interrupt", nodeId=delegated["nodeId"])
    assert (answer["via"], answer["taskIds"]) == ("task_cancel", [task_id])
    run = await wait_run_terminal(client, parent, sent["runId"], timeout=SLOW)
    assert run["status"] == "completed", run
    said = await answer_of(client, parent, sent["runId"])
    assert "delegated task interrupted: task_cancelled" in said and "the lead goes on" in said
    assert (await client.call("task.result", taskId=task_id))["status"] == "interrupted"


async def test_f10_what_cannot_be_interrupted_says_why(client):
    """A pending approval node is unsupported (interrupt the run); the run's
    root is invalid_state pointing at run.interrupt; an ended node says it
    ended; an unknown one is not_found. Nothing of it ends the run."""
    thread = (await client.call("thread.create", title="node"))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread,
                             text=script({"tool": {"name": "quick"}}, {"approval": {"kind": "command", "command": "make"}}))
    approval = await _started(client, thread, "approval")
    with pytest.raises(AgentdError) as refused:
        await client.call("node.interrupt", nodeId=approval["id"])
    assert refused.value.kind == "unsupported" and "interrupt the run" in str(refused.value)

    detail = await client.call("run.get", runId=sent["runId"])
    root = detail["run"]["rootNodeId"]
    with pytest.raises(AgentdError) as refused:
        await client.call("node.interrupt", nodeId=root)
    assert refused.value.kind == "invalid_state" and "agentd interrupt" in str(refused.value)
    [said] = [n for n in detail["nodes"] if n["kind"] == "tool"]
    with pytest.raises(AgentdError) as refused:
        await client.call("node.interrupt", nodeId=said["id"])
    assert refused.value.kind == "invalid_state" and "completed" in str(refused.value)
    with pytest.raises(AgentdError) as refused:
        await client.call("node.interrupt", nodeId="nod_00000000000000000000000000")
    assert refused.value.kind == "not_found"

    assert (await client.call("run.get", runId=sent["runId"]))["run"]["status"] == "waiting"
    await client.call("run.interrupt", runId=sent["runId"])
    await wait_run_terminal(client, thread, sent["runId"])

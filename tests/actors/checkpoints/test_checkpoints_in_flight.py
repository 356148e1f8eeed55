"""A run whose agent runtime died while a step was still writing gets no
capture of half-written files (SPEC F13, issue 10): its checkpoint is
``missing`` with reason ``write_in_flight``, and the next run starts from a
fresh baseline."""

from __future__ import annotations

import os
import signal

from tests.helpers import script, send_and_wait, wait_event, wait_run_terminal


async def test_a_runtime_killed_during_a_tool_gives_a_missing_checkpoint(client, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread_id, text=script(
        {"write": {"path": "a.txt", "content": "a\n"}}, {"tool": {"name": "build", "hang": True}}))
    await wait_event(client, lambda e: e["type"] == "tool.started", thread_id=thread_id)
    ready = await wait_event(client, lambda e: e["type"] == "session.ready", thread_id=thread_id)
    os.kill(ready["payload"]["session"]["pid"], signal.SIGKILL)
    run = await wait_run_terminal(client, thread_id, sent["runId"])
    assert run["status"] == "failed" and run["reason"].startswith("provider_crashed")
    listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
    last = listed[-1]
    assert (last["id"], last["status"], last["reason"]) == (run["checkpointId"], "missing", "write_in_flight")
    assert "build" in last["detail"]
    # The thread goes on: the next run gets a fresh baseline and its own checkpoint.
    run2 = await send_and_wait(client, thread_id, script({"write": {"path": "b.txt", "content": "b\n"}}))
    assert run2["status"] == "completed"
    listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
    assert [(c["kind"], c["ordinal"], c["status"]) for c in listed] == [
        ("baseline", 0, "captured"), ("run", 1, "missing"), ("baseline", 1, "captured"), ("run", 2, "captured")]


async def test_a_subagent_left_open_by_a_dead_runtime_gets_a_missing_child_checkpoint(client, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread_id, text=script(
        {"subagent": {"steps": [{"write": {"path": "a.txt", "content": "a\n"}}, {"tool": {"name": "build", "hang": True}}]}}))
    await wait_event(client, lambda e: e["type"] == "tool.started", thread_id=thread_id)
    ready = await wait_event(client, lambda e: e["type"] == "session.ready", thread_id=thread_id)
    os.kill(ready["payload"]["session"]["pid"], signal.SIGKILL)
    run = await wait_run_terminal(client, thread_id, sent["runId"])
    assert run["status"] == "failed"
    listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
    child = next(c for c in listed if c["scope"] == "child")
    assert (child["status"], child["reason"]) == ("missing", "write_in_flight")
    root = next(c for c in listed if c["id"] == run["checkpointId"])
    assert (root["status"], root["reason"]) == ("missing", "write_in_flight")

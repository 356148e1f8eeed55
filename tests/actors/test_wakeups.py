"""Wake-ups (issue 23 item 4; SPEC F9, F10, F12): a task delegated with
``wake: true`` gives its parent a run of its own when it ends; a Stop drops
the wake-ups still owed; a restart owes none. Through the socket, on the
scripted agent (``task.delegate`` called as a client would, so no ``agentd
mcp`` process is needed; the tool's ``wake`` argument is the same param)."""

from __future__ import annotations

from agentd.protocol.client import Client
from tests.actors.test_delegation import SLOW, _start, client, daemon, only_child, shared_daemon, transfers  # noqa: F401 - fixtures
from tests.helpers import script, send_and_wait, wait_event, wait_run_terminal


async def _result(client: Client, thread_id: str) -> dict:
    [result] = [t for t in await transfers(client, thread_id) if t["type"] == "subagent_result"]
    return result


async def _runs(client: Client, thread_id: str) -> list[dict]:
    return (await client.call("thread.get", threadId=thread_id))["runs"]


async def test_f9_a_task_that_ends_wakes_its_parent_with_a_run_that_takes_its_result_in(client):
    """F9: the task ends; the parent, idle, gets run 2 (createdBy system)
    whose message names the task and whose turn takes the stored result in
    — that run and no other; wakeTaskIds is empty again."""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    await send_and_wait(client, parent, "plan the work")
    task = await client.call("task.delegate", parentThreadId=parent, provider="basic", wake=True,
                             instructions=script({"say": "the answer is juliet"}))
    child = (await client.call("thread.get", threadId=task["taskId"]))["thread"]
    assert child["wakesParent"] is True
    assert (await client.call("thread.get", threadId=parent))["thread"]["wakeTaskIds"] == [task["taskId"]]

    woke = await wait_event(client, lambda e: e["type"] == "task.woke", thread_id=parent, timeout=SLOW)
    assert woke["payload"]["taskId"] == task["taskId"]
    wake_run = await wait_run_terminal(client, parent, woke["payload"]["wakeRunId"], timeout=SLOW)
    assert (wake_run["status"], wake_run["createdBy"], wake_run["ordinal"]) == ("completed", "system", 2)
    detail = await client.call("thread.get", threadId=parent)
    assert detail["thread"]["wakeTaskIds"] == []
    [note] = [m for m in detail["messages"] if m["runId"] == wake_run["id"] and m["role"] == "user"]
    assert task["taskId"] in note["text"] and "has ended (completed)" in note["text"]
    result = await _result(client, parent)
    assert (result["status"], result["runId"]) == ("consumed", wake_run["id"])
    attempt = (await client.call("run.get", runId=wake_run["id"]))["attempts"][0]
    assert attempt["extraHandoffIds"] == [result["handoffId"]]

    # Taken in once: the person's next run carries nothing of it.
    nxt = await send_and_wait(client, parent, "and now?")
    assert (await client.call("run.get", runId=nxt["id"]))["attempts"][0]["extraHandoffIds"] == []
    assert [r["createdBy"] for r in await _runs(client, parent)] == ["user", "system", "user"]


async def test_f9_a_wake_up_waits_behind_the_running_turn_and_a_stop_cancels_it(client):
    """F9 + F10: the task ends while the parent's turn runs: the wake-up run
    is queued behind it; the person's Stop cancels it (it never starts) and
    its result ends superseded, still readable with task.result."""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    running = (await client.call("thread.message.send", threadId=parent, text=script({"hang": True})))["runId"]
    task = await client.call("task.delegate", parentThreadId=parent, provider="basic", wake=True,
                             instructions=script({"say": "done quickly"}))
    woke = await wait_event(client, lambda e: e["type"] == "task.woke", thread_id=parent, timeout=SLOW)
    wake_run_id = woke["payload"]["wakeRunId"]
    assert (await client.call("run.get", runId=wake_run_id))["run"]["status"] == "queued"

    await client.call("thread.stop", threadId=parent)
    dropped = await wait_event(client, lambda e: e["type"] == "task.wake_dropped", thread_id=parent)
    assert dropped["payload"]["cancelledRunIds"] == [wake_run_id]
    assert dropped["payload"]["reason"].startswith("stopped")
    assert (await wait_run_terminal(client, parent, running))["status"] == "interrupted"
    cancelled = (await client.call("run.get", runId=wake_run_id))["run"]
    assert cancelled["status"] == "cancelled"
    result = await _result(client, parent)
    assert result["status"] == "superseded" and result["runId"] == wake_run_id
    answer = await client.call("task.result", taskId=task["taskId"])
    assert answer["status"] == "completed" and answer["finalAnswer"] == "done quickly"

    # Released, nothing of the task comes back by itself.
    await client.call("thread.queue.release", threadId=parent)
    nxt = await send_and_wait(client, parent, "anything new?")
    assert (await client.call("run.get", runId=nxt["id"]))["attempts"][0]["extraHandoffIds"] == []


async def test_f9_f10_a_stop_drops_the_wake_ups_its_working_tasks_owe(client):
    """F10: the parent is stopped while its wake task still works: the task
    is stopped too and, when its (interrupted) result comes, nothing wakes
    the parent; the result is superseded (reason stopped), not injected."""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    await send_and_wait(client, parent, "start")
    task = await client.call("task.delegate", parentThreadId=parent, provider="basic", wake=True,
                             instructions=script({"say": "working"}, {"hang": True}))
    await wait_event(client, lambda e: e["type"] == "message.completed", thread_id=task["taskId"], timeout=SLOW)

    await client.call("thread.stop", threadId=parent)
    dropped = await wait_event(client, lambda e: e["type"] == "task.wake_dropped", thread_id=parent)
    assert dropped["payload"]["taskIds"] == [task["taskId"]] and dropped["payload"]["cancelledRunIds"] == []
    assert (await wait_run_terminal(client, task["taskId"], task["runId"], timeout=SLOW))["status"] == "interrupted"
    superseded = await wait_event(client, lambda e: e["type"] == "context_transfer.superseded", thread_id=parent,
                                  timeout=SLOW)
    assert superseded["payload"]["transfer"]["type"] == "subagent_result"
    assert superseded["payload"]["transfer"]["error"].startswith("stopped")
    assert len(await _runs(client, parent)) == 1, "no wake-up run"
    assert (await client.call("thread.get", threadId=parent))["thread"]["wakeTaskIds"] == []

    await client.call("thread.queue.release", threadId=parent)
    nxt = await send_and_wait(client, parent, "go on")
    assert (await client.call("run.get", runId=nxt["id"]))["attempts"][0]["extraHandoffIds"] == []
    assert (await client.call("task.result", taskId=task["taskId"]))["status"] == "interrupted"


async def test_f9_f12_a_task_cut_off_by_a_restart_owes_nothing(tmp_path, short_dir):
    """F12 + seed 003: the daemon is SIGKILLed while a wake task works: after
    the restart nothing wakes the parent, and the task's result is
    superseded — readable with task.result, never taken in by a later run."""
    daemon = await _start(tmp_path, short_dir)
    try:
        async with Client.connect(daemon.socket) as client:
            parent = (await client.call("thread.create", title="lead"))["threadId"]
            await send_and_wait(client, parent, "start")
            task = await client.call("task.delegate", parentThreadId=parent, provider="basic", wake=True,
                                     instructions=script({"say": "working"}, {"hang": True}))
            await wait_event(client, lambda e: e["type"] == "message.completed", thread_id=task["taskId"],
                             timeout=SLOW)
    finally:
        await daemon.kill()
    daemon = await _start(tmp_path, short_dir)
    try:
        async with Client.connect(daemon.socket) as client:
            answer = await client.call("task.result", taskId=task["taskId"])
            assert answer["status"] == "interrupted" and answer["outcome"] == "interrupted: daemon_restart"
            result = await _result(client, parent)
            assert result["status"] == "superseded" and result["error"].startswith("cut off by a restart")
            assert (await client.call("thread.get", threadId=parent))["thread"]["wakeTaskIds"] == []
            nxt = await send_and_wait(client, parent, "what happened?")
            assert (await client.call("run.get", runId=nxt["id"]))["attempts"][0]["extraHandoffIds"] == []
            assert [r["createdBy"] for r in await _runs(client, parent)] == ["user", "user"]
    finally:
        assert await daemon.terminate() == 0


async def test_f9_the_agents_tool_takes_wake_and_says_what_it_does(client):
    """F9: the scripted agent's ``delegate {wake: true}`` step calls agentd's
    MCP tool (``agentd mcp``) with ``wake``: recorded on ``task.delegated``,
    and the parent is woken when the task ends."""
    from tests.actors.test_delegation import delegate

    parent = (await client.call("thread.create", title="lead"))["threadId"]
    run = await send_and_wait(client, parent, delegate(script({"say": "fanned out"}), wait=False, wake=True))
    assert run["status"] == "completed", run
    delegated = await wait_event(client, lambda e: e["type"] == "task.delegated", thread_id=parent)
    assert delegated["payload"]["wake"] is True and delegated["payload"]["wait"] is False
    woke = await wait_event(client, lambda e: e["type"] == "task.woke", thread_id=parent, timeout=SLOW)
    assert woke["payload"]["taskId"] == delegated["payload"]["taskId"]
    assert (await wait_run_terminal(client, parent, woke["payload"]["wakeRunId"], timeout=SLOW))["status"] == "completed"

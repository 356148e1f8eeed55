"""Run control over the socket, native and fallback (SPEC F3, F10, F15, F16, F17).

One daemon per module (issue 28 item 13: each test works in threads of its
own and reads only their sessions and events) with the scripted provider
instances ``scripted`` (every capability), ``nosteer`` (no native steer: the
restart fallback), ``basic`` (no steer, interrupt, structured questions or
empty threads) and ``gone`` (a Codex whose binary is missing: unusable).
"""

from __future__ import annotations

import os
import signal

import pytest

from agentd.protocol.client import Client
from tests.helpers import configured_module_daemon, script, stored_events, wait_event, wait_run_terminal

CONFIG = """
[daemon]
interrupt_grace = 30

[providers.nosteer]
kind = "scripted"
capabilities = { steer = false }

[providers.basic]
kind = "scripted"
capabilities = { steer = false, nativeFork = false, interrupt = false, rollback = false, structuredQuestions = false, emptyThreads = false }

[providers.gone]
kind = "codex"
binary = "/nonexistent/codex"
"""

HANG_TOOL = script({"tool": {"name": "long job", "hang": True}})


@pytest.fixture(scope="module")
def shared_daemon(module_paths):
    with configured_module_daemon(module_paths, CONFIG) as daemon:
        yield daemon


@pytest.fixture
async def rc(shared_daemon):
    async with Client.connect(shared_daemon.socket) as client:
        yield client


async def session_of(client: Client, thread_id: str) -> dict:
    """The live session of ``thread_id`` (the module's daemon runs other tests' too)."""
    return next(s for s in (await client.call("daemon.status"))["sessions"] if s["threadId"] == thread_id)


async def new_thread(client: Client, provider: str = "scripted", **params) -> str:
    return (await client.call("thread.create", provider=provider, **params))["threadId"]


async def started(client: Client, thread_id: str, event_type: str, run_id: str | None = None) -> dict:
    return await wait_event(client, lambda e: e["type"] == event_type and (run_id is None or e.get("runId") == run_id), thread_id=thread_id)


async def texts(client: Client, thread_id: str, role: str = "assistant") -> list[str]:
    return [m["text"] for m in (await client.call("thread.get", threadId=thread_id))["messages"] if m["role"] == role]


# -- F3 steering ------------------------------------------------------------------


async def test_native_steer_keeps_the_same_run_and_attempt(rc):
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id,
                         text=script({"approval": {"kind": "command", "command": "make"}}, {"say": "after"}))
    requested = await started(rc, thread_id, "approval.requested")
    steer = await rc.call("thread.message.send", threadId=thread_id, text="use ninja instead",
                          dispatchMode={"type": "steer_active", "targetRunId": sent["runId"]})
    assert steer["runId"] == sent["runId"] and steer["strategy"] == "native_steer"
    await started(rc, thread_id, "message.steered")
    await rc.call("approval.respond", requestId=requested["payload"]["request"]["id"], decision="accept")
    run = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert run["status"] == "completed"
    detail = await rc.call("run.get", runId=sent["runId"])
    assert len(detail["attempts"]) == 1
    assert await texts(rc, thread_id) == ["approval: accept", "steered: use ninja instead", "after"]
    users = [m for m in (await rc.call("thread.get", threadId=thread_id))["messages"] if m["role"] == "user"]
    assert [(m["text"], m["runId"], m["status"]) for m in users][1] == ("use ninja instead", sent["runId"], "complete")


async def test_steer_without_native_support_restarts_the_run_as_attempt_two(rc):
    """F3 fallback: interrupt, close attempt 1 interrupted, attempt 2 (steering_restart) carries the message."""
    thread_id = await new_thread(rc, "nosteer")
    sent = await rc.call("thread.message.send", threadId=thread_id, text=HANG_TOOL)
    await started(rc, thread_id, "tool.started")
    steer = await rc.call("thread.message.send", threadId=thread_id, text="do it differently",
                          dispatchMode={"type": "steer_active", "targetRunId": sent["runId"]})
    assert steer["runId"] == sent["runId"] and steer["strategy"] == "steering_restart"
    run = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert run["status"] == "completed" and run["attemptCount"] == 2
    detail = await rc.call("run.get", runId=sent["runId"])
    first, second = detail["attempts"]
    assert (first["reason"], first["status"]) == ("initial", "interrupted"), "the interrupted attempt stays for audit"
    assert (second["reason"], second["status"]) == ("steering_restart", "completed")
    assert run["selectedAttemptId"] == second["id"]
    tool = next(n for n in detail["nodes"] if n["kind"] == "tool")
    assert tool["status"] == "interrupted"
    assert (await texts(rc, thread_id))[-1] == "You said: do it differently"


async def test_restart_active_restarts_even_when_native_steer_exists(rc):
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id, text=HANG_TOOL)
    await started(rc, thread_id, "tool.started")
    steer = await rc.call("thread.message.send", threadId=thread_id, text="again",
                          dispatchMode={"type": "restart_active", "targetRunId": sent["runId"]})
    assert steer["strategy"] == "steering_restart"
    run = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert [a["reason"] for a in (await rc.call("run.get", runId=run["id"]))["attempts"]] == ["initial", "steering_restart"]


async def test_steer_after_a_final_answer_supersedes_the_run(rc):
    """F3 default: same run until the attempt gave a final answer; then a new run with supersedesRunId."""
    thread_id = await new_thread(rc, "nosteer")
    sent = await rc.call("thread.message.send", threadId=thread_id,
                         text=script({"say": "here is my answer"}, {"tool": {"name": "cleanup", "hang": True}}))
    await started(rc, thread_id, "tool.started")
    steer = await rc.call("thread.message.send", threadId=thread_id, text="one more thing",
                          dispatchMode={"type": "steer_active", "targetRunId": sent["runId"]})
    assert steer["strategy"] == "superseding_run" and steer["runId"] != sent["runId"]
    old = await wait_run_terminal(rc, thread_id, sent["runId"])
    new = await wait_run_terminal(rc, thread_id, steer["runId"])
    assert old["status"] == "interrupted" and steer["runId"] in old["reason"]
    assert new["status"] == "completed" and new["supersedesRunId"] == sent["runId"]
    assert new["ordinal"] == old["ordinal"] + 1


async def test_steering_a_run_that_is_not_active_is_invalid_state(rc):
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id, text="quick")
    await wait_run_terminal(rc, thread_id, sent["runId"])
    with pytest.raises(Exception) as info:
        await rc.call("thread.message.send", threadId=thread_id, text="late",
                      dispatchMode={"type": "steer_active", "targetRunId": sent["runId"]})
    assert info.value.kind == "invalid_state" and "completed" in info.value.message
    with pytest.raises(Exception) as info:
        await rc.call("thread.message.send", threadId=thread_id, text="no target", dispatchMode={"type": "steer_active"})
    assert info.value.kind == "invalid_params"


# -- queue management ------------------------------------------------------------------


async def test_queue_cancel_reorder_and_promote_to_steer(rc):
    thread_id = await new_thread(rc)
    active = await rc.call("thread.message.send", threadId=thread_id,
                           text=script({"approval": {"kind": "command", "command": "x"}}, {"say": "end"}))
    request = await started(rc, thread_id, "approval.requested")
    q1 = await rc.call("thread.message.send", threadId=thread_id, text="first queued")
    q2 = await rc.call("thread.message.send", threadId=thread_id, text="second queued")
    q3 = await rc.call("thread.message.send", threadId=thread_id, text="third queued")

    await rc.call("queued-run.cancel", runId=q2["runId"])
    with pytest.raises(Exception) as info:
        await rc.call("queued-run.cancel", runId=active["runId"])
    assert info.value.kind == "invalid_state"
    await rc.call("queued-run.reorder", threadId=thread_id, runIds=[q3["runId"], q1["runId"]])
    with pytest.raises(Exception) as info:
        await rc.call("queued-run.reorder", threadId=thread_id, runIds=[q1["runId"]])
    assert info.value.kind == "invalid_params"
    promoted = await rc.call("queued-message.promote-to-steer", messageId=q1["messageId"])
    assert promoted["runId"] == active["runId"] and promoted["strategy"] == "native_steer"
    await started(rc, thread_id, "message.steered")
    await rc.call("approval.respond", requestId=request["payload"]["request"]["id"], decision="accept")

    last = await wait_run_terminal(rc, thread_id, q3["runId"])
    assert last["status"] == "completed"
    runs = {r["id"]: r for r in (await rc.call("thread.get", threadId=thread_id))["runs"]}
    assert runs[q2["runId"]]["status"] == "cancelled" and runs[q2["runId"]]["reason"] == "cancelled_by_user"
    assert runs[q1["runId"]]["status"] == "cancelled" and runs[q1["runId"]]["reason"] == "promoted_to_steer"
    assert runs[q3["runId"]]["ordinal"] < runs[q1["runId"]]["ordinal"], "reorder renumbers the queue"
    assert "steered: first queued" in await texts(rc, thread_id)


# -- F10 interrupt and Stop ---------------------------------------------------------------


async def test_interrupt_ends_the_run_only_when_the_provider_says_so(rc):
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id, text=HANG_TOOL)
    await started(rc, thread_id, "tool.started")
    reply = await rc.call("run.interrupt", runId=sent["runId"])
    assert reply["interruptRequested"] is True and "status" not in reply
    run = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert (run["status"], run["reason"]) == ("interrupted", "interrupted")
    types = [e["type"] for e in await stored_events(rc, thread_id) if e.get("runId") == sent["runId"]]
    assert types.index("run.interrupt_requested") < types.index("tool.interrupted") < types.index("run.interrupted")
    with pytest.raises(Exception) as info:
        await rc.call("run.interrupt", runId=sent["runId"])
    assert info.value.kind == "invalid_state"
    session = await session_of(rc, thread_id)
    assert session["status"] == "ready", "a native interrupt keeps the runtime"


async def test_interrupt_without_provider_support_stops_the_session(rc):
    thread_id = await new_thread(rc, "basic")
    sent = await rc.call("thread.message.send", threadId=thread_id, text=HANG_TOOL)
    await started(rc, thread_id, "tool.started")
    await rc.call("run.interrupt", runId=sent["runId"])
    run = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert run["status"] == "interrupted"
    stopped = await started(rc, thread_id, "session.stopped")
    assert stopped["payload"]["session"]["reason"] == "interrupt_unsupported"
    again = await rc.call("thread.message.send", threadId=thread_id, text=script({"reportHistory": True}))
    assert (await wait_run_terminal(rc, thread_id, again["runId"]))["status"] == "completed"


async def test_stop_holds_the_queue_and_stops_delegated_children_depth_first(rc):
    parent = await new_thread(rc)
    child = await new_thread(rc, parentThreadId=parent, relationship="delegated_task")
    grandchild = await new_thread(rc, parentThreadId=child, relationship="delegated_task")
    fork = await new_thread(rc, parentThreadId=parent, relationship="fork")
    runs = {}
    for thread_id in (parent, child, grandchild, fork):
        runs[thread_id] = await rc.call("thread.message.send", threadId=thread_id, text=HANG_TOOL)
        await started(rc, thread_id, "tool.started")
    queued = await rc.call("thread.message.send", threadId=parent, text="after the stop")

    await rc.call("thread.stop", threadId=parent)
    for thread_id in (parent, child, grandchild):
        assert (await wait_run_terminal(rc, thread_id, runs[thread_id]["runId"]))["status"] == "interrupted"
    all_events = await stored_events(rc, parent)
    assert any(e["type"] == "thread.queue_held" for e in all_events)
    detail = await rc.call("thread.get", threadId=parent)
    assert detail["thread"]["queueHeld"] is True
    assert next(r for r in detail["runs"] if r["id"] == queued["runId"])["status"] == "queued", "the queue is held"
    assert (await rc.call("thread.get", threadId=fork))["thread"]["status"] == "running", "a fork is not a delegated task"
    order = []
    async with rc.subscribe() as events:
        target = (await rc.call("daemon.status"))["lastSeq"]
        async for event in events:
            if event["type"] == "run.interrupt_requested" and event["threadId"] in runs:
                order.append(event["threadId"])
            if event["seq"] >= target:
                break
    assert order == [parent, child, grandchild], "depth-first, each by its own actor"

    await rc.call("thread.queue.release", threadId=parent)
    assert (await wait_run_terminal(rc, parent, queued["runId"]))["status"] == "completed"
    await rc.call("run.interrupt", runId=runs[fork]["runId"])


async def test_hold_queue_interrupt_is_the_stop_button(rc):
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id, text=HANG_TOOL)
    queued = await rc.call("thread.message.send", threadId=thread_id, text="later")
    await started(rc, thread_id, "tool.started")
    reply = await rc.call("run.interrupt", runId=sent["runId"], holdQueue=True)
    assert reply["queueHeld"] is True
    await wait_run_terminal(rc, thread_id, sent["runId"])
    assert (await rc.call("run.get", runId=queued["runId"]))["run"]["status"] == "queued"
    await rc.call("thread.queue.release", threadId=thread_id)
    assert (await wait_run_terminal(rc, thread_id, queued["runId"]))["status"] == "completed"


async def test_a_message_sent_after_a_stop_runs_and_the_held_runs_wait(rc):
    """Issue 13: the hold applies to the runs queued before the Stop; a new
    message runs (first, even while the stopped run is still ending) and the
    answer says which runs wait for a release."""
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id, text=HANG_TOOL)
    held = await rc.call("thread.message.send", threadId=thread_id, text="queued before the stop")
    assert (held["queueHeld"], held["heldRunIds"]) == (False, [])
    await started(rc, thread_id, "tool.started")
    await rc.call("thread.stop", threadId=thread_id)
    after = await rc.call("thread.message.send", threadId=thread_id, text="sent after the stop")
    assert (after["queueHeld"], after["heldRunIds"]) == (True, [held["runId"]])
    assert (await wait_run_terminal(rc, thread_id, sent["runId"]))["status"] == "interrupted"
    assert (await wait_run_terminal(rc, thread_id, after["runId"]))["status"] == "completed"
    runs = {r["id"]: r for r in (await rc.call("thread.get", threadId=thread_id))["runs"]}
    assert runs[held["runId"]]["status"] == "queued", "still held"
    assert runs[after["runId"]]["ordinal"] < runs[held["runId"]]["ordinal"], "ordinals stay the order runs start in"
    idle = await rc.call("thread.message.send", threadId=thread_id, text="again", dispatchMode={"type": "start_immediately"})
    assert (await wait_run_terminal(rc, thread_id, idle["runId"]))["status"] == "completed", "held runs do not make the thread busy"
    await rc.call("thread.queue.release", threadId=thread_id)
    assert (await wait_run_terminal(rc, thread_id, held["runId"]))["status"] == "completed"
    assert (await rc.call("thread.get", threadId=thread_id))["thread"]["heldRunIds"] == []


# -- F15 approvals and questions -------------------------------------------------------------


@pytest.mark.parametrize(("decision", "node_status"), [("accept", "completed"), ("decline", "cancelled")])
async def test_approval_round_trip(rc, decision, node_status):
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id,
                         text=script({"approval": {"kind": "command", "command": "rm -rf build"}}))
    event = await started(rc, thread_id, "approval.requested")
    request = event["payload"]["request"]
    assert request["id"].startswith("req_") and request["providerRequestRef"] != request["id"]
    assert event["runId"] == sent["runId"] and event["nodeId"] == request["nodeId"]
    pending = (await rc.call("thread.requests", threadId=thread_id))["requests"]
    assert [r["id"] for r in pending] == [request["id"]]
    detail = await rc.call("thread.get", threadId=thread_id)
    assert detail["thread"]["status"] == "waiting"
    assert (await rc.call("run.get", runId=sent["runId"]))["run"]["status"] == "waiting"

    await rc.call("approval.respond", requestId=request["id"], decision=decision)
    run = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert run["status"] == "completed"
    assert (await texts(rc, thread_id))[-1] == f"approval: {decision}"
    node = next(n for n in (await rc.call("run.get", runId=sent["runId"]))["nodes"] if n["id"] == request["nodeId"])
    assert node["kind"] == "approval" and node["status"] == node_status
    assert (await rc.call("thread.requests", threadId=thread_id))["requests"] == []
    with pytest.raises(Exception) as info:
        await rc.call("approval.respond", requestId=request["id"], decision="accept")
    assert info.value.kind == "invalid_state"


async def test_an_approval_whose_session_died_is_not_resumable(rc):
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id,
                         text=script({"tool": {"name": "t", "seconds": 0}}, {"approval": {"kind": "command", "command": "x"}}))
    request = (await started(rc, thread_id, "approval.requested"))["payload"]["request"]
    pid = (await session_of(rc, thread_id))["pid"]
    os.kill(pid, signal.SIGKILL)
    run = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert run["status"] == "failed"
    with pytest.raises(Exception) as info:
        await rc.call("approval.respond", requestId=request["id"], decision="accept")
    assert info.value.kind == "not_resumable"
    gone = await started(rc, thread_id, "approval.not_resumable")
    assert gone["payload"]["request"]["status"] == "not_resumable"


async def test_user_input_questions_round_trip(rc):
    thread_id = await new_thread(rc)
    questions = [{"id": "color", "question": "Which color?", "options": ["red", "blue"]},
                 {"id": "size", "question": "Which size?", "options": ["S", "L"]}]
    sent = await rc.call("thread.message.send", threadId=thread_id, text=script({"ask": {"questions": questions}}))
    event = await started(rc, thread_id, "user_input.requested")
    assert event["payload"]["artifact"]["kind"] == "questions"
    assert [q["id"] for q in event["payload"]["artifact"]["questions"]] == ["color", "size"]
    request_id = event["payload"]["request"]["id"]
    with pytest.raises(Exception) as info:
        await rc.call("user-input.respond", requestId=request_id, answers={"color": "blue"})
    assert info.value.kind == "invalid_params"
    with pytest.raises(Exception) as info:
        await rc.call("approval.respond", requestId=request_id, decision="accept")
    assert info.value.kind == "invalid_params"
    # Issue 28 item 10: an answer that is none of the options is refused, saying which they are.
    with pytest.raises(Exception) as info:
        await rc.call("user-input.respond", requestId=request_id, answers={"color": "green", "size": "L"})
    assert info.value.kind == "invalid_params" and info.value.data["field"] == "answers.color"
    assert "'green'" in str(info.value) and "red, blue" in str(info.value)
    await rc.call("user-input.respond", requestId=request_id, answers={"color": "blue", "size": "L"})
    run = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert run["status"] == "completed"
    assert (await texts(rc, thread_id))[-1] == "answers: color=blue, size=L"
    artifact = next(a for a in (await rc.call("run.get", runId=sent["runId"]))["artifacts"] if a["kind"] == "questions")
    assert artifact["status"] == "answered" and artifact["answers"] == {"color": "blue", "size": "L"}


async def test_questions_without_structured_support_are_plain_text(rc):
    thread_id = await new_thread(rc, "basic")
    sent = await rc.call("thread.message.send", threadId=thread_id,
                         text=script({"ask": {"questions": [{"id": "q", "question": "Proceed?"}]}}))
    run = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert run["status"] == "completed"
    assert (await texts(rc, thread_id))[-1] == "? Proceed?"
    assert (await rc.call("thread.requests", threadId=thread_id))["requests"] == []
    assert not any(e["type"] == "user_input.requested" for e in await stored_events(rc, thread_id))


# -- F16 plans, todos and the completion barrier ----------------------------------------------


async def test_todos_subagents_and_the_completion_barrier(rc):
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id, text=script(
        {"plan": [{"step": "read", "status": "in_progress"}, {"step": "write", "status": "pending"}]},
        {"subagent": {"steps": [{"plan": [{"step": "child step", "status": "completed"}]}, {"say": "child says hi"}]}},
        {"plan": [{"step": "read", "status": "completed"}, {"step": "write", "status": "completed"}]},
        {"say": "all done", "chunks": 5},
    ))
    run = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert run["status"] == "completed"
    detail = await rc.call("run.get", runId=sent["runId"])
    todos = [a for a in detail["artifacts"] if a["kind"] == "todo_list"]
    root_todo = next(a for a in todos if a["nodeId"] == run["rootNodeId"])
    subagent = next(n for n in detail["nodes"] if n["kind"] == "subagent")
    child_todo = next(a for a in todos if a["nodeId"] == subagent["id"])
    assert [s["status"] for s in root_todo["steps"]] == ["completed", "completed"], "child todos never replace the root plan"
    assert child_todo["steps"] == [{"step": "child step", "status": "completed"}]
    assert root_todo["status"] == child_todo["status"] == "final"
    assert subagent["status"] == "completed" and subagent["parentNodeId"] == run["rootNodeId"]
    child_message = next(m for m in (await rc.call("thread.get", threadId=thread_id))["messages"] if m["text"] == "child says hi")
    assert child_message["nodeId"] == subagent["id"]

    events = [e for e in await stored_events(rc, thread_id) if e.get("runId") == sent["runId"]]
    types = [e["type"] for e in events]
    assert "subagent.started" in types and "subagent.completed" in types
    scopes = [e["payload"]["scope"] for e in events if e["type"] == "plan.updated"]
    assert scopes == ["root", "child", "root"]
    end = types.index("run.completed")
    last_text = max(i for i, t in enumerate(types) if t in ("message.appended", "message.completed"))
    last_todo = max(i for i, t in enumerate(types) if t in ("plan.updated", "plan.finalized"))
    assert last_text < end and last_todo < end, "F16: run.completed comes after the final text and todo state"
    assert all(e["runId"] and e["nodeId"] for e in events if e["type"].split(".")[0] in ("plan", "subagent", "tool")), "F17"


async def test_proposed_plan_implemented_as_a_new_run_and_a_new_thread(rc):
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id, text=script({"proposePlan": "1. test\n2. ship"}))
    await wait_run_terminal(rc, thread_id, sent["runId"])
    plan = next(a for a in (await rc.call("run.get", runId=sent["runId"]))["artifacts"] if a["kind"] == "proposed_plan")
    assert plan["status"] == "proposed" and plan["text"] == "1. test\n2. ship"
    implemented = await rc.call("plan.implement", planId=plan["id"], mode="new_run")
    run = await wait_run_terminal(rc, thread_id, implemented["runId"])
    assert run["status"] == "completed"
    assert "1. test\n2. ship" in (await texts(rc, thread_id, "user"))[-1]
    with pytest.raises(Exception) as info:
        await rc.call("plan.implement", planId=plan["id"], mode="new_run")
    assert info.value.kind == "invalid_state"

    sent2 = await rc.call("thread.message.send", threadId=thread_id, text=script({"proposePlan": "refactor"}))
    await wait_run_terminal(rc, thread_id, sent2["runId"])
    plan2 = next(a for a in (await rc.call("run.get", runId=sent2["runId"]))["artifacts"] if a["kind"] == "proposed_plan")
    child = await rc.call("plan.implement", planId=plan2["id"], mode="new_thread")
    child_thread = (await rc.call("thread.get", threadId=child["threadId"]))["thread"]
    assert child_thread["parentThreadId"] == thread_id and child_thread["relationshipToParent"] == "plan_implementation"
    first = await wait_event(rc, lambda e: e["type"] == "run.completed", thread_id=child["threadId"])
    assert first["payload"]["run"]["ordinal"] == 1


async def test_an_approval_asked_inside_a_subagent_stays_answerable(rc):
    """F15: a pending approval from a native subagent is a request like any other."""
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id, text=script(
        {"subagent": {"steps": [{"approval": {"kind": "command", "command": "pytest"}}, {"say": "sub done"}]}}))
    event = await started(rc, thread_id, "approval.requested")
    detail = await rc.call("run.get", runId=sent["runId"])
    subagent = next(n for n in detail["nodes"] if n["kind"] == "subagent")
    approval = next(n for n in detail["nodes"] if n["id"] == event["payload"]["request"]["nodeId"])
    assert approval["parentNodeId"] == subagent["id"]
    await rc.call("approval.respond", requestId=event["payload"]["request"]["id"], decision="accept")
    run = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert run["status"] == "completed"
    assert (await texts(rc, thread_id))[-2:] == ["approval: accept", "sub done"]


# -- F2 a person's retry -----------------------------------------------------------------


async def test_a_retry_of_an_interrupted_run_is_its_next_attempt_and_finishes_it(rc):
    """Issue 23 item 5: ``run.retry`` gives the thread's latest run attempt
    N+1 (reason ``retry``) on its own message; the first attempt stays in the
    graph; the run then completes like any other."""
    thread_id = await new_thread(rc)
    sent = await rc.call("thread.message.send", threadId=thread_id,
                         text=script({"approval": {"kind": "command", "command": "make"}}, {"say": "built"}))
    requested = await started(rc, thread_id, "approval.requested", sent["runId"])
    await rc.call("run.interrupt", runId=sent["runId"])
    first = await wait_run_terminal(rc, thread_id, sent["runId"])
    assert first["status"] == "interrupted"

    retried = await rc.call("run.retry", runId=sent["runId"])
    assert (retried["runId"], retried["attemptNumber"]) == (sent["runId"], 2)
    again = await wait_event(rc, lambda e: e["type"] == "approval.requested" and e["seq"] > requested["seq"],
                             thread_id=thread_id)
    await rc.call("approval.respond", requestId=again["payload"]["request"]["id"], decision="accept")
    run = await wait_run_terminal(rc, thread_id, sent["runId"], after_seq=retried["seq"])
    assert run["status"] == "completed" and run["attemptCount"] == 2
    got = await rc.call("run.get", runId=sent["runId"])
    assert [(a["number"], a["reason"], a["status"]) for a in got["attempts"]] == [
        (1, "initial", "interrupted"), (2, "retry", "completed")]
    assert (await texts(rc, thread_id)).count("built") == 1
    assert (await rc.call("thread.get", threadId=thread_id))["thread"]["runCount"] == 1, "a retry is no new run"
    checkpoints = {c["id"]: c for c in (await rc.call("checkpoint.list", threadId=thread_id))["checkpoints"]}
    assert run["checkpointId"] != first["checkpointId"], "the retry's end is captured again, as the run's checkpoint"
    assert checkpoints[run["checkpointId"]]["status"] == checkpoints[first["checkpointId"]]["status"] == "captured"


async def test_only_the_latest_ended_run_that_failed_or_was_interrupted_is_retried(rc):
    """Issue 23 item 5: a completed run, a run that is not the latest and a
    run while another is going are ``invalid_state``, saying why."""
    thread_id = await new_thread(rc)
    failed = await rc.call("thread.message.send", threadId=thread_id, text=script({"fail": "boom"}))
    assert (await wait_run_terminal(rc, thread_id, failed["runId"]))["status"] == "failed"
    ok = await rc.call("thread.message.send", threadId=thread_id, text="hello")
    assert (await wait_run_terminal(rc, thread_id, ok["runId"]))["status"] == "completed"
    for run_id, words in ((failed["runId"], "not the thread's latest"), (ok["runId"], "only a failed or interrupted run")):
        with pytest.raises(Exception) as refused:
            await rc.call("run.retry", runId=run_id)
        assert refused.value.kind == "invalid_state" and words in str(refused.value)

    hung = await rc.call("thread.message.send", threadId=thread_id, text=script({"fail": "again"}))
    await wait_run_terminal(rc, thread_id, hung["runId"])
    busy = await rc.call("thread.message.send", threadId=thread_id, text=HANG_TOOL)
    await started(rc, thread_id, "run.started", busy["runId"])
    with pytest.raises(Exception) as refused:
        await rc.call("run.retry", runId=hung["runId"])
    assert refused.value.kind == "invalid_state"
    await rc.call("run.interrupt", runId=busy["runId"])
    await wait_run_terminal(rc, thread_id, busy["runId"])


async def test_a_switch_to_a_provider_that_cannot_run_here_is_refused_up_front(rc):
    """Issue 28 item 2: ``thread.message.send {provider}`` naming an instance
    that ``providers.list`` reports unusable (``gone``) is ``invalid_params``
    with its why; nothing is stored and the thread stays on its provider."""
    listed = {p["name"]: p for p in (await rc.call("providers.list"))["providers"]}
    assert listed["gone"]["usable"] is False
    thread_id = await new_thread(rc)
    with pytest.raises(Exception) as refused:
        await rc.call("thread.message.send", threadId=thread_id, text="hi", provider="gone")
    assert refused.value.kind == "invalid_params" and refused.value.data["field"] == "provider"
    assert "cannot be used here" in str(refused.value) and listed["gone"]["why"] in str(refused.value)
    got = await rc.call("thread.get", threadId=thread_id)
    assert got["runs"] == [] and got["thread"]["provider"] == "scripted"


async def test_a_queued_runs_root_node_is_titled_with_the_run_it_became(rc):
    """Issue 28 item 4: after a reorder, and after a message sent past a Stop
    moves the held runs up, each run's root node says its own number."""
    thread_id = await new_thread(rc)
    busy = await rc.call("thread.message.send", threadId=thread_id, text=HANG_TOOL)
    await started(rc, thread_id, "tool.started")
    a = await rc.call("thread.message.send", threadId=thread_id, text="a")
    b = await rc.call("thread.message.send", threadId=thread_id, text="b")
    await rc.call("queued-run.reorder", threadId=thread_id, runIds=[b["runId"], a["runId"]])

    async def titles() -> dict[str, tuple[int, str]]:
        out = {}
        for sent in (a, b):
            got = await rc.call("run.get", runId=sent["runId"])
            root = next(n for n in got["nodes"] if n["id"] == got["run"]["rootNodeId"])
            out[sent["runId"]] = (got["run"]["ordinal"], root["title"])
        return out

    assert await titles() == {b["runId"]: (2, "run 2"), a["runId"]: (3, "run 3")}
    await rc.call("thread.stop", threadId=thread_id)  # a and b are held now
    c = await rc.call("thread.message.send", threadId=thread_id, text="c")  # goes before the held runs
    got = await rc.call("run.get", runId=c["runId"])
    assert got["run"]["ordinal"] == 2
    assert await titles() == {b["runId"]: (3, "run 3"), a["runId"]: (4, "run 4")}
    await wait_run_terminal(rc, thread_id, c["runId"])
    await rc.call("thread.queue.release", threadId=thread_id)
    await wait_run_terminal(rc, thread_id, a["runId"])
    assert busy["runId"]

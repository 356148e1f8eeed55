"""SPEC F3 with the provider's phase, through the socket with the scripted
agent: a "meaningful final answer" is an assistant message that is not
``commentary``. Narration before a tool call keeps a steer in the same run
(a new attempt); an answer (``partial_answer``, ``final_answer``, or no phase
at all, as before phases) makes the steer a new run that supersedes it."""

from __future__ import annotations

import pytest

from tests.helpers import script, send_and_wait, wait_event, wait_run_terminal
from tests.actors.test_run_control import new_thread, rc, shared_daemon  # noqa: F401 - the daemon fixtures (one daemon for the module)


@pytest.mark.parametrize(("phase", "strategy"), [
    ("commentary", "steering_restart"),
    ("partial_answer", "superseding_run"),
    ("final_answer", "superseding_run"),
    (None, "superseding_run"),
])
async def test_f3_a_steer_after_narration_restarts_and_after_an_answer_supersedes(rc, phase, strategy):  # noqa: F811
    thread_id = await new_thread(rc, "nosteer")
    say = {"say": "I will look at the tests first"} | ({"phase": phase} if phase else {})
    sent = await rc.call("thread.message.send", threadId=thread_id,
                         text=script(say, {"tool": {"name": "pytest", "hang": True}}))
    await wait_event(rc, lambda e: e["type"] == "tool.started", thread_id=thread_id)
    steer = await rc.call("thread.message.send", threadId=thread_id, text="only the fast ones",
                          dispatchMode={"type": "steer_active", "targetRunId": sent["runId"]})
    assert steer["strategy"] == strategy
    old = await wait_run_terminal(rc, thread_id, sent["runId"])
    if strategy == "steering_restart":
        assert steer["runId"] == sent["runId"]
        assert (old["status"], old["attemptCount"]) == ("completed", 2)
        attempts = (await rc.call("run.get", runId=old["id"]))["attempts"]
        assert [(a["reason"], a["status"]) for a in attempts] == [("initial", "interrupted"), ("steering_restart", "completed")]
    else:
        new = await wait_run_terminal(rc, thread_id, steer["runId"])
        assert old["status"] == "interrupted" and new["supersedesRunId"] == old["id"]
    runs = (await rc.call("thread.get", threadId=thread_id))["runs"]
    assert len(runs) == (1 if strategy == "steering_restart" else 2)


async def test_a_say_step_with_an_unknown_phase_fails_the_turn(rc):  # noqa: F811
    thread_id = await new_thread(rc)
    run = await send_and_wait(rc, thread_id, script({"say": "hi", "phase": "musing"}))
    assert run["status"] == "failed" and "say phase must be one of" in run["reason"]

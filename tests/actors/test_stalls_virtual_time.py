"""Stalled runs on virtual time (issue 28, ``[daemon] stall_after``; F10, F15).

The daemon runs in the test's trio loop with ``MockClock(autojump_threshold=0)``
(tests/supervisor/test_supervision.py's ``virtual_daemon``), its wall clock the
trio clock: the default five minutes of silence pass at once, exactly. The
scripted agent is a real process, so virtual time also runs while it works —
assertions look only at the stretch they are about.
"""

from __future__ import annotations

import pytest
import trio

from agentd.protocol.client import Client
from tests.helpers import script, stored_events
from tests.supervisor.test_supervision import next_event, virtual_daemon

STALL_AFTER = 300.0  # the default


def after(seq: int, type_: str, run_id: str):
    return lambda e: e["seq"] > seq and e["type"] == type_ and e.get("runId") == run_id


async def test_a_run_waiting_on_the_person_never_stalls_and_a_silent_tool_does_until_the_run_is_stopped(tmp_path, autojump_clock):
    async with virtual_daemon(tmp_path) as (daemon, client):
        client: Client
        thread_id = (await client.call("thread.create"))["threadId"]
        sent = await client.call("thread.message.send", threadId=thread_id, text=script(
            {"approval": {"kind": "command", "command": "make"}}, {"tool": {"name": "quiet job", "hang": True}}))
        run_id = sent["runId"]
        asked = await next_event(client, thread_id, lambda e: e["type"] == "approval.requested")

        # Three times stall_after pass while the approval waits on the person: no stall.
        await trio.sleep(3 * STALL_AFTER)
        events = await stored_events(client, thread_id)
        assert not [e for e in events if e["seq"] > asked["seq"] and e["type"] == "run.stalled"]
        assert (await client.call("run.get", runId=run_id))["run"]["status"] == "waiting"

        await client.call("approval.respond", requestId=asked["payload"]["request"]["id"], decision="accept")
        tool = await next_event(client, thread_id, lambda e: e["type"] == "tool.started")
        stalled = await next_event(client, thread_id, after(tool["seq"], "run.stalled", run_id))
        assert stalled["payload"]["silentFor"] == STALL_AFTER
        assert stalled["payload"]["nodeId"] == tool["payload"]["node"]["id"], "marked at the silent step"
        assert stalled["at"] - tool["at"] == pytest.approx(STALL_AFTER), "stall_after after the agent's last word"
        run = (await client.call("run.get", runId=run_id))["run"]
        assert run["status"] == "running" and run["stalledSince"] == pytest.approx(tool["at"])

        # Still going much later: a stall never ends a run; the person's interrupt does.
        await trio.sleep(10 * STALL_AFTER)
        assert (await client.call("run.get", runId=run_id))["run"]["status"] == "running"
        events = await stored_events(client, thread_id)
        assert len([e for e in events if e["type"] == "run.stalled" and e["seq"] > tool["seq"]]) == 1, "marked once"
        await client.call("run.interrupt", runId=run_id)
        unstalled = await next_event(client, thread_id, after(stalled["seq"], "run.unstalled", run_id))
        ended = await next_event(client, thread_id, after(unstalled["seq"], "run.interrupted", run_id))
        assert unstalled["payload"]["silentFor"] >= 11 * STALL_AFTER
        # The ended run says what the last mark said. The clock here jumps to the next timer
        # whenever the loop waits on the real agent process, so the agent's own pause between its
        # interrupted item and its turn's end can be another stall_after of silence.
        events = await stored_events(client, thread_id)
        marks = [e for e in events if e["seq"] > unstalled["seq"] and e["seq"] < ended["seq"]
                 and e["type"] in ("run.stalled", "run.unstalled") and e["runId"] == run_id]
        if marks and marks[-1]["type"] == "run.stalled":
            assert ended["payload"]["run"]["stalledSince"] == pytest.approx(marks[-1]["at"] - STALL_AFTER)
        else:
            assert ended["payload"]["run"]["stalledSince"] is None


async def test_stall_after_zero_marks_nothing(tmp_path, autojump_clock):
    async with virtual_daemon(tmp_path, stall_after=0.0) as (daemon, client):
        thread_id = (await client.call("thread.create"))["threadId"]
        sent = await client.call("thread.message.send", threadId=thread_id, text=script({"tool": {"name": "q", "hang": True}}))
        await next_event(client, thread_id, lambda e: e["type"] == "tool.started")
        await trio.sleep(10 * STALL_AFTER)
        await client.call("run.interrupt", runId=sent["runId"])
        await next_event(client, thread_id, lambda e: e["type"] == "run.interrupted")
        assert not [e for e in await stored_events(client, thread_id) if e["type"].endswith("stalled")]

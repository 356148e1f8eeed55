"""Record a real runtime's exchange and replay it through the same adapter."""

from __future__ import annotations

import functools

import pytest
import trio

from agentd.actors.providers.base import TurnCompleted
from agentd.actors.providers.scripted import ScriptedAdapter
from agentd.actors.providers.transport import TranscriptMismatch, load_transcript, matches, recording, replaying
from tests.helpers import script

TURN = script({"say": "recorded answer", "chunks": 3}, {"write": {"path": "r.txt", "content": "1"}})


async def drive(adapter, cwd, text=TURN):
    """One session: a thread, one turn to its end; returns the normalized events."""
    events = []
    done = trio.Event()

    async def emit(event):
        events.append(event)
        if isinstance(event, TurnCompleted):
            done.set()

    async with trio.open_nursery() as nursery:
        conn = await nursery.start(functools.partial(adapter.open, session_id="pss_test", emit=emit))
        native = await conn.create_thread(cwd=str(cwd))
        await conn.start_turn(native, text=text, attempt_id="att_test", cwd=str(cwd))
        with trio.fail_after(30):
            await done.wait()
        await conn.stop()
        nursery.cancel_scope.cancel()
    return events


async def test_a_recorded_session_replays_to_the_same_events(tmp_path):
    path = tmp_path / "scripted.ndjson"
    live = ScriptedAdapter("scripted", home=tmp_path / "home", spawn=recording(path, {"provider": "scripted"}))
    recorded = await drive(live, tmp_path)
    entries = load_transcript(path)
    assert [e["type"] for e in entries][:2] == ["expect_outbound", "emit_inbound"]
    assert entries[0]["message"]["method"] == "initialize"

    async with trio.open_nursery() as nursery:
        spawn, replays = replaying([path], nursery)
        replayed = await drive(ScriptedAdapter("scripted", home=tmp_path / "unused", spawn=spawn), tmp_path)
    assert replays[0].mismatch is None
    assert replayed == recorded
    assert isinstance(replayed[-1], TurnCompleted) and replayed[-1].status == "completed"


async def test_replay_notices_an_adapter_that_sends_something_else(tmp_path):
    path = tmp_path / "scripted.ndjson"
    await drive(ScriptedAdapter("scripted", home=tmp_path / "home", spawn=recording(path, {})), tmp_path)
    async with trio.open_nursery() as nursery:
        spawn, replays = replaying([path], nursery)
        with pytest.raises(BaseException):
            await drive(ScriptedAdapter("scripted", home=tmp_path / "x", spawn=spawn), tmp_path, text="a different turn")
    assert isinstance(replays[0].mismatch, TranscriptMismatch)


def test_subset_matching():
    assert matches({"method": "turn/start", "params": {"threadId": "*"}}, {"id": 3, "method": "turn/start", "params": {"threadId": "x", "input": "y"}})
    assert not matches({"method": "turn/start"}, {"method": "turn/steer"})
    assert not matches([1, 2], [1])

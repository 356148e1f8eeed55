"""Record a real runtime's exchange and replay it through the same adapter."""

from __future__ import annotations

import functools
import json

import pytest
import trio
import trio.testing

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


class _ExitedEarly:
    """A runtime that has exited while its last lines still wait in the pipe."""

    def __init__(self, lines: list[bytes]) -> None:
        self.stdin_send, _ = trio.testing.memory_stream_pair()
        self.stdout_send, self.stdout = trio.testing.memory_stream_pair()
        self.stdin = self.stdin_send
        self.lines = lines
        self.pid = None
        self.returncode = 0

    async def wait(self) -> int:
        return 0


async def test_lines_read_after_the_runtime_exited_are_recorded_before_its_exit(tmp_path):
    """The reader often sees a runtime's exit before its last lines; the
    transcript keeps them, in order, and ends with the exit (it used to be
    closed at the exit, and the next line failed with ``write to closed file``)."""
    runtime = _ExitedEarly([b'{"method": "last/words", "params": {}}\n'])

    async def spawn(args, **kwargs):
        return runtime

    path = tmp_path / "early.ndjson"
    process = await recording(path, {"provider": "test"}, spawn)([])
    assert await process.wait() == 0
    await runtime.stdout_send.send_all(runtime.lines[0])
    assert await process.stdout.receive_some(1024)
    await runtime.stdout_send.aclose()
    assert await process.stdout.receive_some(1024) == b""
    kinds = [entry["type"] for entry in map(json.loads, path.read_text().splitlines())]
    assert kinds == ["header", "emit_inbound", "runtime_exit"]


async def test_a_transcript_whose_output_is_closed_unread_still_ends_with_the_exit(tmp_path):
    """An adapter that stops reading closes the stream: the transcript ends then."""
    runtime = _ExitedEarly([])

    async def spawn(args, **kwargs):
        return runtime

    path = tmp_path / "closed.ndjson"
    process = await recording(path, {"provider": "test"}, spawn)([])
    await process.wait()
    await process.stdout.aclose()
    assert path.read_text().splitlines()[-1].startswith('{"type":"runtime_exit"')

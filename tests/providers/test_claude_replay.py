"""The Claude Code adapter's mapping, replayed from recorded transcripts.

Each scenario below drives ``ClaudeAdapter`` through its primitives and checks
the normalized events. ``tests/integration/test_claude.py`` runs the same
scenarios against the real pinned ``claude`` (recording each exchange); here
they run against the recordings in ``tests/fixtures/transcripts/claude_*.ndjson``,
so the mapping is tested in milliseconds, without node or the binary.
Refresh the recordings with ``AGENTD_RECORD_CLAUDE=1 pytest tests/integration/test_claude.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
import trio

from agentd.actors.providers.base import (
    ItemCompleted,
    ItemStarted,
    NativeThreadMissing,
    ProviderEvent,
    ProviderRuntimeError,
    RequestOpened,
    ResumeInfo,
    TextDelta,
    TurnCompleted,
    TurnStarted,
    Usage,
)
from agentd.actors.config import ProviderConfig
from agentd.actors.providers.claude import BASE_ARGS, NATIVE_CAPABILITIES, ClaudeAdapter, find_binary
from agentd.actors.providers.claude_launcher import LAUNCHER
from agentd.actors.providers.runtime import parse_version
from agentd.actors.providers.transport import replaying

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"
BOGUS_SESSION = "11111111-2222-4333-8444-555555555555"


class Harness:
    """Opens adapter sessions and collects their events.

    Args:
        live: a real claude (kill really kills; session files are visible).
    """

    def __init__(self, nursery: trio.Nursery, adapter: ClaudeAdapter, *, live: bool) -> None:
        self.nursery = nursery
        self.adapter = adapter
        self.live = live
        self.events: list[ProviderEvent] = []
        self._changed = trio.Event()
        self._done: dict[int, trio.Event] = {}
        self._count = 0

    async def _emit(self, event: ProviderEvent) -> None:
        self.events.append(event)
        self._changed.set()

    async def open(self):
        self._count += 1
        done = trio.Event()

        async def run(task_status=trio.TASK_STATUS_IGNORED) -> None:
            try:
                await self.adapter.open(session_id=f"pss_{self._count}", emit=self._emit, task_status=task_status)
            finally:
                done.set()

        conn = await self.nursery.start(run)
        self._done[id(conn)] = done
        return conn

    async def ended(self, conn, timeout: float = 20) -> tuple[int | None, int | None]:
        """Wait until the session's open() returned; its exit status."""
        with trio.fail_after(timeout):
            await self._done[id(conn)].wait()
        return conn.exit_status

    async def stop(self, conn) -> tuple[int | None, int | None]:
        await conn.stop()
        return await self.ended(conn)

    async def wait_for(self, predicate: Callable[[ProviderEvent], bool], *, after: int = 0, timeout: float = 30) -> ProviderEvent:
        with trio.fail_after(timeout):
            while True:
                for event in self.events[after:]:
                    if predicate(event):
                        return event
                self._changed = trio.Event()
                await self._changed.wait()

    async def turn_end(self, attempt_id: str, timeout: float = 30) -> TurnCompleted:
        return await self.wait_for(lambda e: isinstance(e, TurnCompleted) and e.attempt_id == attempt_id, timeout=timeout)

    def of(self, attempt_id: str, kind: type | None = None) -> list[ProviderEvent]:
        return [e for e in self.events if e.attempt_id == attempt_id and (kind is None or isinstance(e, kind))]

    def text(self, attempt_id: str) -> str:
        return "".join(e.delta for e in self.of(attempt_id, TextDelta))

    def texts(self, attempt_id: str) -> list[str]:
        """The attempt's assistant messages, one string each."""
        by_item: dict[str, str] = {}
        for e in self.of(attempt_id, TextDelta):
            by_item[e.item_id] = by_item.get(e.item_id, "") + e.delta
        return list(by_item.values())


# -- scenarios: each returns facts the live test checks against the model's request log ---------


async def scenario_plain(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    session, turn = await conn.start_first_turn(text="hello there", attempt_id="att_1", cwd=cwd)
    assert session in conn.loaded_threads and turn
    done = await h.turn_end("att_1")
    assert (done.status, done.error, done.native_turn_id) == ("completed", None, turn)
    events = h.of("att_1")
    assert isinstance(events[0], TurnStarted) and events[0].native_turn_id == turn
    assert isinstance(events[-1], TurnCompleted)
    (started,) = [e for e in events if isinstance(e, ItemStarted)]
    (completed,) = [e for e in events if isinstance(e, ItemCompleted)]
    assert started.item_type == completed.item_type == "agent_message" and started.item_id == completed.item_id
    deltas = h.of("att_1", TextDelta)
    assert len(deltas) > 1, "the text streams in several deltas"
    assert all(d.item_id == started.item_id for d in deltas)
    assert h.text("att_1") == "Reply 1: hello there"
    assert completed.phase == "final_answer", "text of a message that ends the turn is the answer (SPEC F3)"
    assert events.index(started) < events.index(deltas[0]) and events.index(deltas[-1]) < events.index(completed)
    await h.stop(conn)
    return {"session": session}


async def scenario_usage(h: Harness, cwd: str) -> dict[str, Any]:
    """Issue 28: each ``result`` states per model what it used since the
    previous one (``model_usage_since_last_result``): Usage increments of
    that turn's attempt, before its TurnCompleted — the second turn's are its
    own, not the session's running total."""
    conn = await h.open()
    session, _ = await conn.start_first_turn(text="count one", attempt_id="att_1", cwd=cwd)
    assert (await h.turn_end("att_1")).status == "completed"
    await conn.start_turn(session, text="count two", attempt_id="att_2", cwd=cwd)
    assert (await h.turn_end("att_2")).status == "completed"
    per_turn = {}
    for attempt in ("att_1", "att_2"):
        events = h.of(attempt)
        reports = [e for e in events if isinstance(e, Usage)]
        assert reports and all(r.model for r in reports), f"no usage reported for {attempt}"
        assert events.index(reports[-1]) < events.index(next(e for e in events if isinstance(e, TurnCompleted)))
        per_turn[attempt] = sum(r.input_tokens for r in reports), sum(r.output_tokens for r in reports)
        assert all(r.cached_input_tokens <= r.input_tokens and r.reasoning_tokens <= r.output_tokens for r in reports)
    assert per_turn["att_1"][0] > 0 and per_turn["att_1"][1] > 0
    # The fake model answers each call with the same output tokens: a running total would double.
    assert per_turn["att_2"][1] == per_turn["att_1"][1]
    await h.stop(conn)
    return {"session": session, "usage": per_turn}


async def scenario_command(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    await conn.start_first_turn(text="please RUN_COMMAND", attempt_id="att_1", cwd=cwd)
    done = await h.turn_end("att_1")
    assert done.status == "completed"
    (tool,) = [e for e in h.of("att_1", ItemStarted) if e.item_type == "tool"]
    assert tool.title == "Bash" and tool.detail["input"]["command"] == "echo hello-from-bash"
    (result,) = [e for e in h.of("att_1", ItemCompleted) if e.item_id == tool.item_id]
    assert result.status == "completed" and result.item_type == "tool"
    assert result.detail["result"] == "hello-from-bash" and result.detail["isError"] is False
    assert not h.of("att_1", RequestOpened), "a read-only command needs no approval"
    assert h.texts("att_1") == ["The command finished: hello-from-bash"]
    await h.stop(conn)
    return {}


async def scenario_narrate(h: Harness, cwd: str) -> dict[str, Any]:
    """SPEC F3: Claude's text followed by a tool use in the same message is
    commentary; the text that ends the turn is the final answer."""
    conn = await h.open()
    await conn.start_first_turn(text="please NARRATE and RUN_COMMAND", attempt_id="att_1", cwd=cwd)
    done = await h.turn_end("att_1")
    assert done.status == "completed"
    assert h.texts("att_1") == ["Let me run that command first.", "The command finished: hello-from-bash"]
    messages = [e for e in h.of("att_1", ItemCompleted) if e.item_type == "agent_message"]
    assert [e.phase for e in messages] == ["commentary", "final_answer"]
    events = h.of("att_1")
    (tool,) = [e for e in events if isinstance(e, ItemStarted) and e.item_type == "tool"]
    assert events.index(messages[0]) < events.index(tool), "the narration ends before its tool starts"
    await h.stop(conn)
    return {}


async def _approval(h: Harness, cwd: str, decision: str) -> tuple[Any, RequestOpened]:
    conn = await h.open()
    await conn.start_first_turn(text="ASK_APPROVAL", attempt_id="att_1", cwd=cwd)
    request = await h.wait_for(lambda e: isinstance(e, RequestOpened))
    assert request.attempt_id == "att_1" and request.kind == "approval"
    (tool,) = [e for e in h.of("att_1", ItemStarted) if e.item_type == "tool"]
    assert request.item_id == tool.item_id, "the approval hangs under its tool node"
    assert request.detail["tool"] == "Bash" and "touch approved-by-user.txt" in request.detail["command"]
    assert request.decisions == ["accept", "acceptForSession", "decline"], "Claude made permission suggestions"
    assert not [e for e in h.of("att_1", ItemCompleted) if e.item_id == tool.item_id], "nothing ran before the answer"
    await conn.answer_request(request.request_ref, {"decision": decision})
    with pytest.raises(ProviderRuntimeError):
        await conn.answer_request(request.request_ref, {"decision": decision})
    done = await h.turn_end("att_1")
    assert done.status == "completed"
    (result,) = [e for e in h.of("att_1", ItemCompleted) if e.item_id == tool.item_id]
    await h.stop(conn)
    return result, request


async def scenario_approval_accept(h: Harness, cwd: str) -> dict[str, Any]:
    result, _request = await _approval(h, cwd, "accept")
    assert result.status == "completed" and result.detail["result"] == "wrote-approved-file"
    assert h.texts("att_1") == ["The command finished: wrote-approved-file"]
    return {"file": "approved-by-user.txt", "exists": True}


async def scenario_approval_decline(h: Harness, cwd: str) -> dict[str, Any]:
    result, _request = await _approval(h, cwd, "decline")
    assert result.status == "cancelled" and result.detail["isError"] is True
    assert h.texts("att_1")[-1].startswith("The command finished:")
    return {"file": "approved-by-user.txt", "exists": False}


async def scenario_interrupt(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    session, turn = await conn.start_first_turn(text="GO_SLOW", attempt_id="att_1", cwd=cwd)
    await h.wait_for(lambda e: isinstance(e, TextDelta) and e.attempt_id == "att_1")
    await conn.interrupt_turn(session, turn)
    done = await h.turn_end("att_1")
    assert (done.status, done.error) == ("interrupted", None), "ended by Claude's result, as we asked"
    assert len(h.text("att_1").split()) < 60, "the answer was cut short"
    assert not h.of("att_1", ItemCompleted), "the cut message is left for agentd's barrier to close as interrupted"
    await conn.interrupt_turn(session, turn)  # the turn has ended: nothing to do
    await conn.start_turn(session, text="are you still there?", attempt_id="att_2", cwd=cwd)
    again = await h.turn_end("att_2")
    assert again.status == "completed" and h.texts("att_2")[-1].endswith("are you still there?")
    await h.stop(conn)
    return {"session": session}


async def scenario_interrupt_approval(h: Harness, cwd: str) -> dict[str, Any]:
    """An interrupt while Claude waits for a permission: Claude cancels its
    request, refuses the tool and ends the turn."""
    conn = await h.open()
    session, turn = await conn.start_first_turn(text="ASK_APPROVAL", attempt_id="att_1", cwd=cwd)
    request = await h.wait_for(lambda e: isinstance(e, RequestOpened))
    await conn.interrupt_turn(session, turn)
    done = await h.turn_end("att_1")
    assert done.status == "interrupted"
    (tool,) = [e for e in h.of("att_1", ItemCompleted) if e.item_id == request.item_id]
    assert tool.status == "interrupted"
    with pytest.raises(ProviderRuntimeError, match="not waiting"):
        await conn.answer_request(request.request_ref, {"decision": "accept"})
    await conn.start_turn(session, text="carry on", attempt_id="att_2", cwd=cwd)
    assert (await h.turn_end("att_2")).status == "completed"
    await h.stop(conn)
    return {"file": "approved-by-user.txt", "exists": False}


async def scenario_resume(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    session, _ = await conn.start_first_turn(text="remember the word pineapple", attempt_id="att_1", cwd=cwd)
    assert (await h.turn_end("att_1")).status == "completed"
    assert await h.stop(conn) == (0, None)
    conn = await h.open()
    assert conn.loaded_threads == set()
    with pytest.raises(ProviderRuntimeError):
        await conn.start_turn(session, text="not loaded yet", attempt_id="att_x", cwd=cwd)
    info = await conn.resume_thread(session, cwd=cwd)
    assert isinstance(info, ResumeInfo) and info.native_thread_id == session and conn.loaded_threads == {session}
    if h.live:
        assert info.turn_count == 1
    assert (await conn.resume_thread(session, cwd=cwd)).native_thread_id == session, "already loaded: no relaunch"
    await conn.start_turn(session, text="which word?", attempt_id="att_2", cwd=cwd)
    assert (await h.turn_end("att_2")).status == "completed"
    assert h.texts("att_2") == ["Reply 2: which word?"], "the resumed session carries the first turn"
    await h.stop(conn)
    return {"session": session}


async def scenario_resume_missing(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    pid = conn.pid
    with pytest.raises(NativeThreadMissing) as info:
        await conn.resume_thread(BOGUS_SESSION, cwd=cwd)
    assert "No conversation found" in str(info.value)
    assert conn.loaded_threads == set()
    if h.live:
        assert conn.pid != pid, "a fresh launcher took the place of the claude that refused"
    session, _ = await conn.start_first_turn(
        text="fresh start", attempt_id="att_1", cwd=cwd, context="[handoff] the word was pineapple",
    )
    assert session != BOGUS_SESSION
    assert (await h.turn_end("att_1")).status == "completed"
    assert h.texts("att_1") == ["Reply 1: fresh start"]
    await h.stop(conn)
    return {"session": session}


async def scenario_fork(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    session, _ = await conn.start_first_turn(text="the color is teal", attempt_id="att_1", cwd=cwd)
    assert (await h.turn_end("att_1")).status == "completed"
    await h.stop(conn)
    conn = await h.open()
    with pytest.raises(ProviderRuntimeError):
        await conn.fork_thread(session, last_turn_id="turn_x")
    fork = await conn.fork_thread(session, last_turn_id=None)
    assert fork != session and conn.loaded_threads == {fork}
    await conn.start_turn(fork, text="in the fork", attempt_id="att_2", cwd=cwd)
    assert (await h.turn_end("att_2")).status == "completed"
    assert h.texts("att_2") == ["Reply 2: in the fork"]
    await h.stop(conn)
    return {"session": session, "fork": fork}


async def scenario_crash(h: Harness, cwd: str) -> dict[str, Any]:
    import os
    import signal

    conn = await h.open()
    await conn.start_first_turn(text="GO_SLOW:30", attempt_id="att_1", cwd=cwd)
    await h.wait_for(lambda e: isinstance(e, TextDelta))
    if h.live:
        os.kill(conn.pid, signal.SIGKILL)
    assert await h.ended(conn) == (None, signal.SIGKILL)
    assert not h.of("att_1", TurnCompleted), "a crash is the session's to report, not a turn end"
    with pytest.raises(ProviderRuntimeError, match="claude exited \\(signal 9\\)"):
        await conn.start_turn(next(iter(conn.loaded_threads)), text="too late", attempt_id="att_2", cwd=cwd)
    return {}


SCENARIOS: dict[str, Callable[[Harness, str], Awaitable[dict[str, Any]]]] = {
    "plain": scenario_plain,
    "command": scenario_command,
    "narrate": scenario_narrate,
    "approval_accept": scenario_approval_accept,
    "approval_decline": scenario_approval_decline,
    "interrupt": scenario_interrupt,
    "interrupt_approval": scenario_interrupt_approval,
    "resume": scenario_resume,
    "resume_missing": scenario_resume_missing,
    "fork": scenario_fork,
    "crash": scenario_crash,
    "usage": scenario_usage,
}


def transcript_paths(name: str, directory: Path = TRANSCRIPTS) -> list[Path]:
    """The transcript of a scenario and those of its later sessions (``.2``, ``.3``, …)."""
    first = directory / f"claude_{name}.ndjson"
    paths = [first]
    n = 2
    while (directory / f"claude_{name}.{n}.ndjson").exists():
        paths.append(directory / f"claude_{name}.{n}.ndjson")
        n += 1
    return paths


async def run_replay(name: str, tmp_path: Path, directory: Path = TRANSCRIPTS) -> dict[str, Any]:
    """Run scenario ``name`` against its transcripts; fail on any mismatch."""
    cwd = tmp_path / "ws"
    cwd.mkdir(parents=True, exist_ok=True)
    config_dir = tmp_path / "claude-config"  # empty: no session file is found
    async with trio.open_nursery() as nursery:
        spawn, started = replaying(transcript_paths(name, directory), nursery)
        adapter = ClaudeAdapter(
            ProviderConfig(name="claude", kind="claude", binary=sys.executable, env={"CLAUDE_CONFIG_DIR": str(config_dir)}),
            home=tmp_path / "home", request_timeout=10, spawn=spawn,
        )
        harness = Harness(nursery, adapter, live=False)
        facts = await SCENARIOS[name](harness, str(cwd))
        nursery.cancel_scope.cancel()
    for replay in started:
        assert replay.mismatch is None, replay.mismatch
    assert len(started) == len(transcript_paths(name, directory)), "every recorded session was opened"
    return facts


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_replay(name, tmp_path):
    if not (TRANSCRIPTS / f"claude_{name}.ndjson").exists():
        pytest.fail(f"no transcript for {name}; record it with AGENTD_RECORD_CLAUDE=1 pytest tests/integration/test_claude.py")
    await run_replay(name, tmp_path)


# -- the adapter without a runtime ---------------------------------------------------------------


def test_capabilities_are_claudes_and_config_only_switches_off():
    adapter = ClaudeAdapter(ProviderConfig(name="c", kind="claude", binary=sys.executable), home=Path("/nonexistent"))
    assert adapter.capabilities == NATIVE_CAPABILITIES
    caps = adapter.describe()["capabilities"]
    assert caps == {"steer": False, "nativeFork": True, "interrupt": True, "rollback": False,
                    "structuredQuestions": False, "emptyThreads": False}
    config = ProviderConfig(name="c", kind="claude", binary=sys.executable)
    config.capabilities = type(config.capabilities)(interrupt=False)
    assert ClaudeAdapter(config, home=Path("/nonexistent")).capabilities.interrupt is False


async def test_the_runtime_version_is_probed_once_per_binary_file(tmp_path):
    """F4: Claude reports no version before a turn, so the adapter asks
    ``claude --version`` — once per binary file; a replaced binary (an
    upgrade) is asked again."""
    calls = tmp_path / "calls"
    binary = tmp_path / "claude"

    def install(version: str) -> None:
        binary.write_text(f"#!/bin/sh\necho x >> {calls}\necho '{version} (Claude Code)'\n")
        binary.chmod(0o755)

    install("2.1.332")
    adapter = ClaudeAdapter(ProviderConfig(name="c", kind="claude", binary=str(binary)), home=tmp_path / "home")
    assert [await adapter.runtime_version() for _ in range(3)] == ["2.1.332"] * 3
    assert calls.read_text().count("x") == 1
    install("3.0.0-beta")
    assert await adapter.runtime_version() == "3.0.0"
    assert calls.read_text().count("x") == 2


def test_a_missing_binary_is_refused_at_construction():
    with pytest.raises(ProviderRuntimeError, match="claude binary not found"):
        ClaudeAdapter(ProviderConfig(name="c", kind="claude", binary="/no/such/claude"), home=Path("/nonexistent"))
    assert find_binary(sys.executable) == Path(sys.executable)


def test_the_command_is_wrapper_launcher_then_claude():
    config = ProviderConfig(name="c", kind="claude", binary=sys.executable, model="claude-x", args=["--effort", "low"],
                            wrapper=["nice", "-n", "5"], env={"ANTHROPIC_API_KEY": "k"})
    adapter = ClaudeAdapter(config, home=Path("/nonexistent"))
    command = adapter.command()
    assert command[:3] == ["nice", "-n", "5"]
    assert command[3:8] == [sys.executable, "-I", "-S", "-c", LAUNCHER]
    assert command[8:] == [sys.executable, *BASE_ARGS, "--model", "claude-x", "--effort", "low"]
    assert adapter.environment()["ANTHROPIC_API_KEY"] == "k"


async def test_the_launcher_execs_with_the_launch_args_and_keeps_the_pid(tmp_path):
    """The launcher waits for its line, chdirs, execs — same pid — and leaves the rest of stdin."""
    import json
    import subprocess

    show = "import json,os,sys; print(json.dumps([os.getpid(), os.getcwd(), sys.argv[1:], sys.stdin.readline().strip()]))"
    command = [sys.executable, "-I", "-S", "-c", LAUNCHER, sys.executable, "-c", show]
    process = await trio.lowlevel.open_process(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    line = json.dumps({"type": "agentd_launch", "args": ["a", "b"], "cwd": str(tmp_path)}) + "\nnext line\n"
    await process.stdin.send_all(line.encode())
    out = b""
    with trio.fail_after(10):
        while chunk := await process.stdout.receive_some():
            out += chunk
        await process.wait()
    pid, cwd, argv, rest = json.loads(out)
    assert pid == process.pid, "exec keeps the pid the session manager recorded"
    assert (cwd, argv, rest) == (str(tmp_path), ["a", "b"], "next line")
    # end of input before a launch line: the launcher just exits
    quiet = await trio.run_process(command, stdin=b"", capture_stdout=True)
    assert quiet.returncode == 0 and quiet.stdout == b""


async def test_probe_reports_version_and_refuses_unsupported_ones(tmp_path):
    fake = tmp_path / "claude"
    fake.write_text("#!/bin/sh\necho '2.1.332 (Claude Code)'\n")
    fake.chmod(0o755)
    probe = await ClaudeAdapter(ProviderConfig(name="c", kind="claude", binary=str(fake)), home=tmp_path).probe()
    assert probe == {"usable": True, "binary": str(fake), "version": "2.1.332"}
    fake.write_text("#!/bin/sh\necho '1.0.3 (Claude Code)'\n")
    probe = await ClaudeAdapter(ProviderConfig(name="c", kind="claude", binary=str(fake)), home=tmp_path).probe()
    assert probe["usable"] is False and "1.0.3 is not a supported version" in probe["why"]
    fake.write_text("#!/bin/sh\nsleep 5\n")
    probe = await ClaudeAdapter(ProviderConfig(name="c", kind="claude", binary=str(fake)), home=tmp_path, request_timeout=0.2).probe()
    assert probe["usable"] is False and "did not answer" in probe["why"]
    assert parse_version("claude 2.1.332") == (2, 1, 332)


async def test_every_primitive_is_bounded_when_claude_never_answers(tmp_path):
    """A runtime that reads but never writes (e.g. Claude retrying a bad base
    URL) cannot hang a primitive: each gives up after request_timeout."""
    async with trio.open_nursery() as nursery:
        spawn, _started = replaying([_silent_transcript(tmp_path)], nursery)
        adapter = ClaudeAdapter(ProviderConfig(name="c", kind="claude", binary=sys.executable), home=tmp_path,
                                request_timeout=0.2, spawn=spawn)
        adapter.stop_grace = 0.1
        harness = Harness(nursery, adapter, live=False)
        conn = await harness.open()
        with trio.fail_after(5):
            with pytest.raises(ProviderRuntimeError, match="within 0.2s"):
                await conn.start_first_turn(text="hi", attempt_id="att_1", cwd=str(tmp_path))
        nursery.cancel_scope.cancel()


def _silent_transcript(tmp_path: Path) -> Path:
    path = tmp_path / "silent.ndjson"
    path.write_text('{"type": "header", "provider": "claude", "note": "never answers"}\n')
    return path


def test_the_fake_model_answers_every_kind_of_call(tmp_path):
    """The fake Messages API the integration tests use: streaming and not,
    count_tokens, a side call without tools, keyword behaviours, the request log."""
    import json
    import urllib.request

    from scripts.offline.claude import FAKE_SERVER as fake
    from scripts.offline.world import start_fake_server

    log = tmp_path / "log.ndjson"
    server, port = start_fake_server(fake, request_log=log, timings_log=tmp_path / "timings.ndjson",
                                     fake_log=tmp_path / "fake.log")
    try:
        base = f"http://127.0.0.1:{port}"

        def post(path: str, body: dict) -> bytes:
            request = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                             headers={"content-type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.read()

        tools = [{"name": "Bash", "input_schema": {}}]
        user = {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"},
                                            {"type": "text", "text": "hello"}]}
        reply = json.loads(post("/v1/messages?beta=true", {"model": "m", "messages": [user], "tools": tools}))
        assert reply["content"] == [{"type": "text", "text": "Reply 1: hello"}] and reply["stop_reason"] == "end_turn"
        title = json.loads(post("/v1/messages", {"model": "small", "messages": [user]}))
        assert title["content"][0]["type"] == "text", "a side call (no tools) gets a plain answer"
        assert json.loads(post("/v1/messages/count_tokens", {"messages": [user]}))["input_tokens"] > 0
        command = {"role": "user", "content": "RUN_COMMAND: ls -la"}
        stream = post("/v1/messages?beta=true", {"model": "m", "messages": [command], "tools": tools, "stream": True}).decode()
        names = [line[7:] for line in stream.splitlines() if line.startswith("event: ")]
        assert names[:3] == ["message_start", "content_block_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
        payload = "".join(json.loads(line[6:])["delta"]["partial_json"] for line in stream.splitlines()
                          if line.startswith("data: ") and "input_json_delta" in line)
        assert json.loads(payload)["command"] == "ls -la" and '"stop_reason": "tool_use"' in stream
        follow = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "total 0"}]}
        done = json.loads(post("/v1/messages", {"model": "m", "messages": [command, follow], "tools": tools}))
        assert done["content"][0]["text"] == "The command finished: total 0"
        logged = [json.loads(line) for line in log.read_text().splitlines()]
        assert [entry["path"] for entry in logged][:3] == ["/v1/messages?beta=true", "/v1/messages", "/v1/messages/count_tokens"]
        assert logged[0]["body"]["messages"] == [user]
    finally:
        server.terminate()
        server.wait(5)

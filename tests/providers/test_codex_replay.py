"""The Codex adapter's mapping, checked fast on recorded exchanges.

Each scenario below drives a ``CodexAdapter`` directly (no daemon) and checks
the normalized events it reports and the answers it sends. The integration
tests (``tests/integration/test_codex.py``) run the same scenarios against the
real pinned ``codex app-server`` and a fake model, recording each exchange;
with ``AGENTD_RECORD_CODEX=1`` they refresh ``tests/fixtures/transcripts/
codex_<scenario>.ndjson``. Here those transcripts are replayed through the
same adapter — no binary, no node, no network — so the mapping is tested in
CI everywhere.

Also here: the schema-drift check of the adapter's typed shapes against the
schema the pinned binary generates (skipped, with the reason, without it).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import types
import typing
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Awaitable, Callable

import msgspec
import pytest
import trio

from agentd.actors.providers import codex as codex_module
from agentd.actors.providers import codex_wire
from agentd.actors.providers.base import (
    ItemCompleted,
    ItemStarted,
    NativeThreadMissing,
    ProviderEvent,
    ProviderRuntimeError,
    RequestOpened,
    TextDelta,
    TurnCompleted,
    TurnStarted,
    Usage,
)
from agentd.actors.providers.codex import (
    MCP_ELICITATION_METHOD,
    CodexAdapter,
    approval_decisions,
    approval_response,
    user_input_response,
)
from agentd.actors.config import ProviderConfig
from agentd.actors.providers.transport import replaying

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"
WAIT = 30.0


# -- the scenario harness ---------------------------------------------------------------------


class EventLog:
    """Collects what the adapter emits; tests wait on it."""

    def __init__(self) -> None:
        self.events: list[ProviderEvent] = []
        self._changed = trio.Event()

    async def emit(self, event: ProviderEvent) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, predicate: Callable[[ProviderEvent], bool], timeout: float = WAIT) -> ProviderEvent:
        with trio.fail_after(timeout):
            seen = 0
            while True:
                for event in self.events[seen:]:
                    if predicate(event):
                        return event
                seen = len(self.events)
                await self._changed.wait()

    async def turn_completed(self, attempt_id: str) -> TurnCompleted:
        return await self.wait_for(lambda e: isinstance(e, TurnCompleted) and e.attempt_id == attempt_id)

    def of(self, kind: type, attempt_id: str | None = None) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind) and (attempt_id is None or e.attempt_id == attempt_id)]

    def text(self, attempt_id: str) -> str:
        return "".join(e.delta for e in self.of(TextDelta, attempt_id))


class Harness:
    """What a scenario gets: an adapter factory bound to a spawn, a workspace
    and the event log. ``real`` is True against the real binary."""

    def __init__(self, make_adapter: Callable[[], CodexAdapter], workspace: Path, real: bool) -> None:
        self.make_adapter = make_adapter
        self.workspace = workspace
        self.real = real
        self.log = EventLog()

    @asynccontextmanager
    async def session(self, session_id: str = "pss_1"):
        adapter = self.make_adapter()
        async with trio.open_nursery() as nursery:
            conn = await nursery.start(functools.partial(adapter.open, session_id=session_id, emit=self.log.emit))
            yield conn
            with trio.fail_after(WAIT):
                await conn.stop()

    @property
    def cwd(self) -> str:
        return str(self.workspace)


Scenario = Callable[[Harness], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {}


def scenario(fn: Scenario) -> Scenario:
    SCENARIOS[fn.__name__.removeprefix("scenario_")] = fn
    return fn


# -- the scenarios (the same checks against the real runtime and its replay) ------------------


@scenario
async def scenario_turn(h: Harness) -> None:
    """Two streamed turns, then turns/list, fork and revert."""
    async with h.session() as conn:
        thread = await conn.create_thread(cwd=h.cwd)
        assert thread in conn.loaded_threads
        # Codex 0.171 says which history contract the thread has (issue 23 item 6).
        assert conn.history_mode(thread) == "paginated"
        first = await conn.start_turn(thread, text="hello there", attempt_id="att_1", cwd=h.cwd)
        done = await h.log.turn_completed("att_1")
        assert (done.status, done.native_turn_id) == ("completed", first)
        assert h.log.text("att_1") == "You said: hello there (turn 1)"
        assert len(h.log.of(TextDelta, "att_1")) >= 2, "the answer is streamed"
        started = h.log.of(TurnStarted, "att_1")
        assert [s.native_turn_id for s in started] == [first]
        (message,) = [e for e in h.log.of(ItemStarted, "att_1") if e.item_type == "agent_message"]
        assert any(isinstance(e, ItemCompleted) and e.item_id == message.item_id for e in h.log.events)
        assert not [e for e in h.log.of(ItemStarted) if e.item_type not in ("agent_message", "reasoning")], (
            "the user's own message is not an item of the run"
        )

        second = await conn.start_turn(thread, text="and again", attempt_id="att_2", cwd=h.cwd)
        assert (await h.log.turn_completed("att_2")).status == "completed"
        assert h.log.text("att_2") == "You said: and again (turn 2)"

        turns = await conn.list_turns(thread)
        assert [(t["turnId"], t["status"], t["input"]) for t in turns] == [
            (first, "completed", "hello there"), (second, "completed", "and again"),
        ]
        assert turns[1]["output"] == "You said: and again (turn 2)"

        fork = await conn.fork_thread(thread, last_turn_id=first)
        assert fork != thread and fork in conn.loaded_threads
        assert [t["turnId"] for t in await conn.list_turns(fork)] == [first]

        await conn.rollback_thread(thread, before_turn_id=second)
        assert [t["turnId"] for t in await conn.list_turns(thread)] == [first]


@scenario
async def scenario_usage(h: Harness) -> None:
    """Issue 28: ``thread/tokenUsage/updated`` becomes Usage increments of the
    turn's attempt — the growth of the thread's total, so the second turn
    reports its own tokens, not the thread's so far (the fake model answers
    every call with 10 input and 5 output tokens)."""
    async with h.session() as conn:
        thread = await conn.create_thread(cwd=h.cwd)
        for attempt in ("att_1", "att_2"):
            await conn.start_turn(thread, text=f"count {attempt}", attempt_id=attempt, cwd=h.cwd)
            assert (await h.log.turn_completed(attempt)).status == "completed"
        per_turn = []
        for attempt in ("att_1", "att_2"):
            reports = h.log.of(Usage, attempt)
            assert reports, f"no usage reported for {attempt}"
            assert {r.model for r in reports} == {"fake-model"}
            per_turn.append((sum(r.input_tokens for r in reports), sum(r.output_tokens for r in reports)))
        first, second = per_turn
        assert first[0] > 0 and first[1] > 0
        assert second == first, "each turn reports its own tokens, not the thread's total"


@scenario
async def scenario_fork_revert(h: Harness) -> None:
    """SPEC F6: where Codex cannot fork at a turn — it refuses ``lastTurnId``,
    or ignores it as an older runtime would — the adapter forks the whole
    thread and reverts the fork's later turns; the source keeps all of them.
    The refusal and the ignoring are injected in front of the runtime (the
    pinned one takes the field), so the same exchange is recorded and replayed."""
    async with h.session() as conn:
        thread = await conn.create_thread(cwd=h.cwd)
        turns = []
        for number, text in enumerate(("one alpha", "two bravo", "three charlie"), 1):
            turns.append(await conn.start_turn(thread, text=text, attempt_id=f"att_{number}", cwd=h.cwd))
            assert (await h.log.turn_completed(f"att_{number}")).status == "completed"
        request = conn._peer.request
        mode = {"fault": "refuse"}
        sent: list[dict[str, Any]] = []

        async def faulty(method: str, params: Any = None, **kwargs: Any) -> Any:
            if method == "thread/fork" and isinstance(params, dict) and params.get("lastTurnId"):
                if mode["fault"] == "refuse":
                    raise ProviderRuntimeError("Invalid request: unknown field `lastTurnId`", code=-32600)
                params = {k: v for k, v in params.items() if k != "lastTurnId"}
            sent.append({"method": method, **(params if isinstance(params, dict) else {})})
            return await request(method, params, **kwargs)

        conn._peer.request = faulty
        refused = await conn.fork_thread(thread, last_turn_id=turns[0])
        assert [t["turnId"] for t in await conn.list_turns(refused)] == turns[:1]
        assert [s["method"] for s in sent[:2]] == ["thread/fork", "thread/turns/list"]
        assert {"method": "thread/revert", "threadId": refused, "beforeTurnId": turns[1]} in sent, "the fork is reverted"

        mode["fault"] = "ignore"
        ignored = await conn.fork_thread(thread, last_turn_id=turns[1])
        assert [t["turnId"] for t in await conn.list_turns(ignored)] == turns[:2]
        assert [t["turnId"] for t in await conn.list_turns(thread)] == turns, "the source keeps every turn"
        with pytest.raises(ProviderRuntimeError, match="does not hold that turn"):
            await conn.fork_thread(thread, last_turn_id="019a0000-0000-7000-8000-000000000000")

        # The fork takes the next turn with the history it was cut to.
        await conn.start_turn(refused, text="fork hello", attempt_id="att_4", cwd=h.cwd)
        assert (await h.log.turn_completed("att_4")).status == "completed"
        assert h.log.text("att_4") == "You said: fork hello (turn 2)"


@scenario
async def scenario_command(h: Harness) -> None:
    """A shell tool call is a command_execution item with its output."""
    async with h.session() as conn:
        thread = await conn.create_thread(cwd=h.cwd)
        await conn.start_turn(thread, text="RUN_COMMAND now", attempt_id="att_1", cwd=h.cwd)
        assert (await h.log.turn_completed("att_1")).status == "completed"
        (started,) = [e for e in h.log.of(ItemStarted, "att_1") if e.item_type == "command_execution"]
        assert "echo agentd-ran-this" in started.title
        (completed,) = [e for e in h.log.of(ItemCompleted, "att_1") if e.item_id == started.item_id]
        assert completed.status == "completed" and completed.item_type == "command_execution"
        assert completed.detail["exitCode"] == 0 and "agentd-ran-this" in completed.detail["aggregatedOutput"]
        assert h.log.text("att_1") == "Tool finished: agentd-ran-this"


@scenario
async def scenario_phase(h: Harness) -> None:
    """SPEC F3: Codex marks assistant text with the model's ``phase``: the
    narration before a tool call is ``commentary``, a marked reply keeps its
    phase, and text without one is unknown (None)."""
    async with h.session() as conn:
        thread = await conn.create_thread(cwd=h.cwd)
        await conn.start_turn(thread, text="NARRATE then RUN_COMMAND", attempt_id="att_1", cwd=h.cwd)
        assert (await h.log.turn_completed("att_1")).status == "completed"
        messages = [e for e in h.log.of(ItemCompleted, "att_1") if e.item_type == "agent_message"]
        assert [e.phase for e in messages] == ["commentary", None]
        await conn.start_turn(thread, text="done? PHASE:final_answer", attempt_id="att_2", cwd=h.cwd)
        assert (await h.log.turn_completed("att_2")).status == "completed"
        (answer,) = [e for e in h.log.of(ItemCompleted, "att_2") if e.item_type == "agent_message"]
        assert answer.phase == "final_answer"


async def _approval(h: Harness, decision: str) -> None:
    async with h.session() as conn:
        thread = await conn.create_thread(cwd=h.cwd)
        await conn.start_turn(thread, text="ASK_APPROVAL please", attempt_id="att_1", cwd=h.cwd)
        request = await h.log.wait_for(lambda e: isinstance(e, RequestOpened))
        assert request.kind == "approval" and request.attempt_id == "att_1"
        assert request.detail["method"] == "item/commandExecution/requestApproval"
        assert "touch approved.txt" in request.detail["command"] and request.detail["reason"]
        assert request.decisions == ["accept", "decline"], "0.171's availableDecisions has no acceptForSession here"
        command = next(e for e in h.log.of(ItemStarted, "att_1") if e.item_type == "command_execution")
        (item,) = [e for e in h.log.of(ItemStarted, "att_1") if e.item_type == "approval"]
        assert request.item_id == item.item_id and item.parent_item_id == command.item_id, (
            "the approval is an item of its own, under the command it approves"
        )
        with pytest.raises(ProviderRuntimeError):
            await conn.answer_request("no-such-request", {"decision": "accept"})
        await conn.answer_request(request.request_ref, {"decision": decision})
        with pytest.raises(ProviderRuntimeError, match="not waiting"):
            await conn.answer_request(request.request_ref, {"decision": decision})
        assert (await h.log.turn_completed("att_1")).status == "completed"
        (completed,) = [e for e in h.log.of(ItemCompleted, "att_1") if e.item_id == command.item_id]
        if decision == "accept":
            assert completed.status == "completed"
            if h.real:
                assert (h.workspace / "approved.txt").exists()
        else:
            assert completed.status == "cancelled" and completed.detail["status"] == "declined"
            if h.real:
                assert not (h.workspace / "approved.txt").exists()


@scenario
async def scenario_approval_accept(h: Harness) -> None:
    await _approval(h, "accept")


@scenario
async def scenario_approval_decline(h: Harness) -> None:
    await _approval(h, "decline")


@scenario
async def scenario_user_input(h: Harness) -> None:
    """``/plan`` turns on plan mode, where Codex asks structured questions."""
    async with h.session() as conn:
        thread = await conn.create_thread(cwd=h.cwd)
        await conn.start_turn(thread, text="/plan ASK_USER about the button", attempt_id="att_1", cwd=h.cwd)
        request = await h.log.wait_for(lambda e: isinstance(e, RequestOpened))
        assert request.kind == "user_input" and request.attempt_id == "att_1"
        (item,) = [e for e in h.log.of(ItemStarted, "att_1") if e.item_type == "user_input_request"]
        assert item.item_id == request.item_id
        (question,) = request.detail["questions"]
        assert question["id"] == "color" and question["question"] == "Which color should the button be?"
        assert question["options"] == ["Red (Recommended)", "Blue"]
        await conn.answer_request(request.request_ref, {"answers": {"color": "Blue"}})
        assert (await h.log.turn_completed("att_1")).status == "completed"
        assert '"answers":["Blue"]' in h.log.text("att_1")


@scenario
async def scenario_interrupt(h: Harness) -> None:
    """The interrupt's answer is not the end: turn/completed ``interrupted`` is."""
    async with h.session() as conn:
        thread = await conn.create_thread(cwd=h.cwd)
        turn = await conn.start_turn(thread, text="GO_SLOW please", attempt_id="att_1", cwd=h.cwd)
        await h.log.wait_for(lambda e: isinstance(e, TextDelta))
        await conn.interrupt_turn(thread, turn)
        done = await h.log.turn_completed("att_1")
        assert (done.status, done.native_turn_id) == ("interrupted", turn)
        assert "slow59" not in h.log.text("att_1")
        # The thread takes the next turn.
        await conn.start_turn(thread, text="still there?", attempt_id="att_2", cwd=h.cwd)
        assert (await h.log.turn_completed("att_2")).status == "completed"


@scenario
async def scenario_steer(h: Harness) -> None:
    """A native steer joins the running turn, which then ends completed."""
    async with h.session() as conn:
        thread = await conn.create_thread(cwd=h.cwd)
        turn = await conn.start_turn(thread, text="GO_SLOW please", attempt_id="att_1", cwd=h.cwd)
        await h.log.wait_for(lambda e: isinstance(e, TextDelta))
        await conn.steer_turn(thread, turn, text="also mention bananas")
        done = await h.log.turn_completed("att_1")
        assert (done.status, done.native_turn_id) == ("completed", turn)
        assert "You said: also mention bananas" in h.log.text("att_1")
        assert len(h.log.of(TurnStarted, "att_1")) == 1, "one turn, not a new one"
        with pytest.raises(ProviderRuntimeError):
            await conn.steer_turn(thread, turn, text="too late")


@scenario
async def scenario_resume(h: Harness) -> None:
    """A fresh process resumes a thread from CODEX_HOME; a missing one is
    NativeThreadMissing."""
    async with h.session("pss_1") as conn:
        thread = await conn.create_thread(cwd=h.cwd)
        await conn.start_turn(thread, text="remember the tea", attempt_id="att_1", cwd=h.cwd)
        assert (await h.log.turn_completed("att_1")).status == "completed"
    async with h.session("pss_2") as conn:
        assert thread not in conn.loaded_threads
        with pytest.raises(NativeThreadMissing):
            await conn.resume_thread("01a22b41-41f2-7791-a868-9d30d2e02349", cwd=h.cwd)
        info = await conn.resume_thread(thread, cwd=h.cwd)
        assert (info.native_thread_id, info.turn_count) == (thread, 1)
        assert thread in conn.loaded_threads
        await conn.start_turn(thread, text="what did I say?", attempt_id="att_2", cwd=h.cwd)
        assert (await h.log.turn_completed("att_2")).status == "completed"
        assert h.log.text("att_2") == "You said: what did I say? (turn 2)"


@scenario
async def scenario_context(h: Harness) -> None:
    """A handoff's context goes in as an input item before the user's text."""
    async with h.session() as conn:
        thread = await conn.create_thread(cwd=h.cwd)
        await conn.start_turn(
            thread, text="carry on", attempt_id="att_1", cwd=h.cwd, context="Earlier, the user asked for tea.",
        )
        assert (await h.log.turn_completed("att_1")).status == "completed"
        assert h.log.text("att_1").startswith("You said: Earlier, the user asked for tea.\ncarry on")


@scenario
async def scenario_crash(h: Harness) -> None:
    """SIGKILL mid-turn: the session ends with the signal, no TurnCompleted."""
    adapter = h.make_adapter()
    async with trio.open_nursery() as nursery:
        conn = await nursery.start(functools.partial(adapter.open, session_id="pss_1", emit=h.log.emit))
        thread = await conn.create_thread(cwd=h.cwd)
        await conn.start_turn(thread, text="GO_SLOW please", attempt_id="att_1", cwd=h.cwd)
        await h.log.wait_for(lambda e: isinstance(e, TextDelta))
        if conn.pid is not None:
            os.kill(conn.pid, signal.SIGKILL)
    assert conn.exit_status == (None, signal.SIGKILL)
    assert not h.log.of(TurnCompleted)
    with pytest.raises(ProviderRuntimeError):
        await conn.start_turn(thread, text="anyone?", attempt_id="att_2", cwd=h.cwd)


# -- replaying the recorded transcripts ----------------------------------------------------------


def transcripts(name: str) -> list[Path]:
    first = TRANSCRIPTS / f"codex_{name}.ndjson"
    more = sorted(TRANSCRIPTS.glob(f"codex_{name}.*.ndjson"), key=lambda p: int(p.name.split(".")[1]))
    return [first, *more]


def fast_stop(spawn):
    """Until ``transport.ReplayProcess`` notices a closed stdin by itself (it
    waits for the next outbound line, so a polite stop waits out the 2 s
    grace), closing stdin also wakes the player."""

    async def spawn_replay(args, **kwargs):
        process = await spawn(args, **kwargs)
        close = process.stdin.aclose

        async def aclose() -> None:
            await close()
            process.outbound.send_nowait({"method": "(stdin closed)"})

        process.stdin.aclose = aclose
        return process

    return spawn_replay


def replay_config() -> ProviderConfig:
    # Any executable will do: a replay never starts it.
    return ProviderConfig(name="codex", kind="codex", binary=sys.executable)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_scenario_replays(name, tmp_path):
    paths = transcripts(name)
    if not paths[0].exists():
        pytest.fail(f"no transcript {paths[0].name}; record it with AGENTD_RECORD_CODEX=1 pytest tests/integration/test_codex.py")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with trio.open_nursery() as nursery:
        spawn, replays = replaying(paths, nursery)
        spawn = fast_stop(spawn)
        harness = Harness(lambda: CodexAdapter(replay_config(), home=tmp_path / "home", spawn=spawn), workspace, real=False)
        await SCENARIOS[name](harness)
        nursery.cancel_scope.cancel()
    assert len(replays) == len(paths), "every recorded session was replayed"
    for replay in replays:
        assert replay.mismatch is None, replay.mismatch


def test_every_transcript_belongs_to_a_scenario():
    names = {p.name.split(".")[0].removeprefix("codex_") for p in TRANSCRIPTS.glob("codex_*.ndjson")}
    assert names == set(SCENARIOS), "transcripts without a scenario, or scenarios without a transcript"


# -- unit checks of the mapping that need no transcript ------------------------------------------


def test_approval_answers_take_each_methods_shape():
    to = msgspec.to_builtins
    assert to(approval_response("item/commandExecution/requestApproval", {}, {"decision": "accept"})) == {"decision": "accept"}
    assert to(approval_response("item/fileChange/requestApproval", {}, {"decision": "decline"})) == {"decision": "decline"}
    asked = {"permissions": {"network": {"enabled": True}}}
    assert to(approval_response("item/permissions/requestApproval", asked, {"decision": "accept"})) == {"permissions": {"network": {"enabled": True}}}
    assert to(approval_response("item/permissions/requestApproval", asked, {"decision": "decline"})) == {"permissions": {}}
    assert to(approval_response("execCommandApproval", {}, {"decision": "accept"})) == {"decision": "approved"}
    assert to(approval_response("applyPatchApproval", {}, {"decision": "decline"}))["decision"]["denied"]["rejection"]
    with pytest.raises(ProviderRuntimeError):
        approval_response("item/commandExecution/requestApproval", {}, {"decision": "maybe"})


def test_accept_for_session_is_codexs_session_scoped_approval():
    """``acceptForSession`` in each method's shape (the pinned 0.171 schema);
    refused where the request does not offer it (SPEC F15)."""
    to = msgspec.to_builtins
    session = {"decision": "acceptForSession"}
    assert to(approval_response("item/commandExecution/requestApproval", {}, session)) == session
    assert to(approval_response("item/fileChange/requestApproval", {}, session)) == session
    asked = {"permissions": {"network": {"enabled": True}}}
    assert to(approval_response("item/permissions/requestApproval", asked, session)) == {**asked, "scope": "session"}
    assert to(approval_response("execCommandApproval", {}, session)) == {"decision": "approved_for_session"}
    assert approval_decisions("item/commandExecution/requestApproval", {"availableDecisions": ["accept", "acceptForSession"]}) \
        == ["accept", "acceptForSession", "decline"]
    not_offered = {"availableDecisions": ["accept", "cancel"]}
    assert approval_decisions("item/commandExecution/requestApproval", not_offered) == ["accept", "decline"]
    assert approval_decisions(MCP_ELICITATION_METHOD, {}) == ["accept", "decline"]
    with pytest.raises(ProviderRuntimeError, match="takes decision accept, decline"):
        approval_response("item/commandExecution/requestApproval", not_offered, session)


def test_user_input_answers_become_answer_lists():
    assert msgspec.to_builtins(user_input_response({"answers": {"a": "x", "b": ["y", "z"]}})) == {
        "answers": {"a": {"answers": ["x"]}, "b": {"answers": ["y", "z"]}}
    }
    with pytest.raises(ProviderRuntimeError):
        user_input_response({"nope": 1})


async def _replay_lines(tmp_path, steps: list[dict[str, Any]], drive):
    path = tmp_path / "t.ndjson"
    handshake = [
        {"type": "expect_outbound", "message": {"method": "initialize"}},
        {"type": "emit_inbound", "message": {"id": 1, "result": {"userAgent": "codex/test", "codexHome": "/x", "platformFamily": "unix", "platformOs": "linux"}}},
        {"type": "expect_outbound", "message": {"method": "initialized"}},
    ]
    path.write_text("".join(json.dumps(s) + "\n" for s in handshake + steps))
    log = EventLog()
    async with trio.open_nursery() as nursery:
        spawn, replays = replaying([path], nursery)
        adapter = CodexAdapter(replay_config(), home=tmp_path / "home", spawn=fast_stop(spawn))
        conn = await nursery.start(functools.partial(adapter.open, session_id="pss", emit=log.emit))
        await drive(conn, log)
        with trio.fail_after(10):
            await replays[0].played.wait()  # every scripted step happened
        await conn.stop()
        nursery.cancel_scope.cancel()
    assert replays[0].mismatch is None, replays[0].mismatch
    return log


async def test_unknown_server_requests_get_an_error_reply(tmp_path):
    steps = [
        {"type": "emit_inbound", "message": {"id": 7, "method": "item/tool/call", "params": {"threadId": "t"}}},
        {"type": "expect_outbound", "message": {"id": 7, "error": {"code": -32601}}},
        {"type": "emit_inbound", "message": {"id": 8, "method": "item/commandExecution/requestApproval", "params": {"bogus": 1}}},
        {"type": "expect_outbound", "message": {"id": 8, "error": {"code": -32602}}},
    ]

    async def drive(conn, log):
        pass  # the runtime asks; _replay_lines waits until every step was played

    log = await _replay_lines(tmp_path, steps, drive)
    assert not log.of(RequestOpened)


async def test_diffs_become_one_node_per_turn_and_unstreamed_text_is_kept(tmp_path):
    t, u = "thr", "turn1"
    steps = [
        {"type": "expect_outbound", "message": {"method": "turn/start", "params": {"threadId": t}}},
        {"type": "emit_inbound", "message": {"id": 2, "result": {"turn": {"id": u, "status": "inProgress", "items": []}}}},
        {"type": "emit_inbound", "message": {"method": "turn/started", "params": {"threadId": t, "turn": {"id": u, "status": "inProgress", "items": []}}}},
        {"type": "emit_inbound", "message": {"method": "turn/diff/updated", "params": {"threadId": t, "turnId": u, "diff": "d1"}}},
        {"type": "emit_inbound", "message": {"method": "turn/plan/updated", "params": {"threadId": t, "turnId": u, "plan": [{"step": "a", "status": "inProgress"}]}}},
        {"type": "emit_inbound", "message": {"method": "turn/diff/updated", "params": {"threadId": t, "turnId": u, "diff": "d2"}}},
        {"type": "emit_inbound", "message": {"method": "item/started", "params": {"threadId": t, "turnId": u, "item": {"type": "agentMessage", "id": "m", "text": ""}}}},
        {"type": "emit_inbound", "message": {"method": "item/agentMessage/delta", "params": {"threadId": t, "turnId": u, "itemId": "m", "delta": "Hel"}}},
        {"type": "emit_inbound", "message": {"method": "item/completed", "params": {"threadId": t, "turnId": u, "item": {"type": "agentMessage", "id": "m", "text": "Hello"}}}},
        {"type": "emit_inbound", "message": {"method": "error", "params": {"threadId": t, "turnId": u, "willRetry": False, "error": {"message": "model exploded"}}}},
        {"type": "emit_inbound", "message": {"method": "turn/completed", "params": {"threadId": t, "turn": {"id": u, "status": "failed", "items": [], "error": None}}}},
    ]

    async def drive(conn, log):
        conn.loaded_threads.add(t)
        await conn.start_turn(t, text="x", attempt_id="att", cwd="/w")
        await log.turn_completed("att")

    log = await _replay_lines(tmp_path, steps, drive)
    diffs_started = [e for e in log.of(ItemStarted) if e.item_type == "turn_diff"]
    diffs_done = [e for e in log.of(ItemCompleted) if e.item_type == "turn_diff"]
    assert [(e.item_id, e.detail["diff"]) for e in diffs_started] == [("diff:turn1", "d1")]
    assert [(e.item_id, e.detail["diff"], e.status) for e in diffs_done] == [("diff:turn1", "d2", "failed")]
    assert log.text("att") == "Hello", "text the runtime did not stream still reaches the message"
    done = log.of(TurnCompleted)[-1]
    assert (done.status, done.error) == ("failed", "model exploded")
    assert log.events.index(diffs_done[0]) < log.events.index(done)
    assert [e.plan for e in log.events if type(e).__name__ == "PlanUpdated"] == [[{"step": "a", "status": "inProgress"}]]


def test_missing_binary_is_a_clear_error(tmp_path):
    with pytest.raises(ProviderRuntimeError, match="codex binary not found"):
        CodexAdapter(ProviderConfig(name="c", kind="codex", binary=str(tmp_path / "nope")), home=tmp_path)


def test_version_range():
    assert codex_module.version_problem((0, 171, 0)) is None
    assert codex_module.version_problem((0, 169, 3)) is None
    assert "older" in codex_module.version_problem((0, 168, 9))
    assert "newer" in codex_module.version_problem((0, 172, 0))
    assert codex_module.parse_version("codex-cli 0.171.0\n") == (0, 171, 0)


def test_command_and_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    config = ProviderConfig(name="c", kind="codex", binary=sys.executable, args=["-c", "x=1"], wrapper=["nice"], env={"A": "b"})
    adapter = CodexAdapter(config, home=tmp_path / "h")
    assert adapter.command() == ["nice", sys.executable, "app-server", "-c", "x=1"]
    env = adapter.environment()
    assert env["A"] == "b" and env["CODEX_HOME"] == str(tmp_path / ".codex"), "real users keep their own login"
    config.env["CODEX_HOME"] = "/private"
    assert adapter.environment()["CODEX_HOME"] == "/private"


# -- schema drift ---------------------------------------------------------------------------------


def _pinned_binary() -> Path | None:
    from agentd.actors.providers.codex import PROJECT_LOCAL_BINARY, native_binary

    configured = os.environ.get("AGENTD_CODEX_BINARY")
    path = Path(configured) if configured else PROJECT_LOCAL_BINARY
    if not path.exists():
        return None
    return native_binary(path)[0]


@pytest.fixture(scope="module")
def codex_schema():
    binary = _pinned_binary()
    if binary is None:
        pytest.skip("the pinned codex binary is not installed (npm ci --prefix tests/integration/runtimes): schema not checked")
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HOME": tmp, "CODEX_HOME": tmp}
        subprocess.run([str(binary), "app-server", "generate-json-schema", "--experimental", "--out", f"{tmp}/s"],
                       check=True, env=env, capture_output=True, timeout=60)
        with open(f"{tmp}/s/codex_app_server_protocol.schemas.json") as f:
            return json.load(f)


class Schema:
    def __init__(self, bundle: dict[str, Any]) -> None:
        self.defs = dict(bundle["definitions"])
        self.v2 = self.defs.pop("v2")

    def lookup(self, name: str) -> dict[str, Any]:
        variant = None
        if "#" in name:
            name, variant = name.split("#")
        table = self.v2 if name.startswith("v2/") else self.defs
        node = table[name.removeprefix("v2/")]
        if variant is not None:
            node = next(v for v in node["oneOf"] if v.get("title") == variant)
        return node

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = self.lookup(node["$ref"].removeprefix("#/definitions/"))
        return node

    def json_types(self, node: dict[str, Any]) -> set[str]:
        """Every JSON type a schema node admits."""
        node = self.resolve(node)
        if not node:
            return {"any"}
        out: set[str] = set()
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in node.get(key, []):
                out |= self.json_types(sub)
        if "type" in node:
            types_ = node["type"] if isinstance(node["type"], list) else [node["type"]]
            out |= {"number" if t == "integer" else t for t in types_}
        elif "enum" in node:
            out |= {"string" if isinstance(v, str) else "null" if v is None else "number" for v in node["enum"]}
        elif "properties" in node and not out:
            out.add("object")
        return out or {"any"}


def _python_types(annotation: Any) -> set[str]:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_python_types(a) for a in typing.get_args(annotation)))
    if annotation is type(None):
        return {"null"}
    if annotation is Any:
        return {"any"}
    base = origin or annotation
    if base is str:
        return {"string"}
    if base in (int, float):
        return {"number"}
    if base is bool:
        return {"boolean"}
    if base is list:
        return {"array"}
    if base is dict or (isinstance(base, type) and issubclass(base, msgspec.Struct)):
        return {"object"}
    raise AssertionError(f"no JSON type for {annotation!r}")


def test_typed_shapes_match_the_pinned_schema(codex_schema):
    """Every field a Struct sends exists with a type the schema accepts, and
    every schema-required field is sent; every field a Struct reads exists,
    is required if the Struct has no default, and every type the schema may
    send there decodes."""
    schema = Schema(codex_schema)
    problems = []
    for struct in codex_wire.WIRE_STRUCTS:
        node = schema.resolve(schema.lookup(struct.__schema__))
        props, required = node.get("properties", {}), set(node.get("required", []))
        hints = typing.get_type_hints(struct)
        fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
        for wire_name, f in fields.items():
            where = f"{struct.__name__}.{wire_name} ({struct.__schema__})"
            if wire_name not in props:
                problems.append(f"{where}: not in the schema")
                continue
            ours, theirs = _python_types(hints[f.name]), schema.json_types(props[wire_name])
            if "any" in ours or "any" in theirs:
                continue
            if struct.__direction__ == "out":
                if not ours - {"null"} <= theirs:
                    problems.append(f"{where}: we send {sorted(ours)}, the schema takes {sorted(theirs)}")
            else:
                optional = wire_name not in required
                if not (theirs - {"null"}) <= ours:
                    problems.append(f"{where}: the schema sends {sorted(theirs)}, we read {sorted(ours)}")
                if "null" in theirs and "null" not in ours and f.required:
                    problems.append(f"{where}: the schema may send null, we cannot read it")
                if optional and f.required:
                    problems.append(f"{where}: optional in the schema, required by us")
        if struct.__direction__ == "out":
            for name in required - set(fields):
                problems.append(f"{struct.__name__}: the schema requires {name}, which we never send")
    assert not problems, "\n".join(problems)


def test_methods_exist_in_the_pinned_schema(codex_schema):
    defs = codex_schema["definitions"]

    def methods(kind: str) -> set[str]:
        return {m for v in defs[kind]["oneOf"] for m in v["properties"]["method"]["enum"]}

    assert set(codex_module.CLIENT_METHODS) <= methods("ClientRequest")
    assert set(codex_module.CLIENT_NOTIFICATIONS) <= methods("ClientNotification")
    assert set(codex_module.SERVER_REQUESTS) <= methods("ServerRequest")
    assert set(codex_module.SERVER_NOTIFICATIONS) <= methods("ServerNotification")
    assert set(codex_module.OPT_OUT_NOTIFICATIONS) <= methods("ServerNotification")
    item_types = {v["properties"]["type"]["enum"][0] for v in schema_items(defs)}
    assert set(codex_module.ITEM_TYPES) <= item_types


def schema_items(defs: dict[str, Any]) -> list[dict[str, Any]]:
    return defs["v2"]["ThreadItem"]["oneOf"]

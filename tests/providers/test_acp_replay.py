"""The ACP adapter's mapping of real agents' traffic, replayed (issue 25).

Each scenario drives ``AcpAdapter`` through its primitives and checks the
normalized events. ``tests/integration/test_acp_claude.py`` and
``test_acp_codex.py`` run the same scenarios against the real pinned
claude-agent-acp and codex-acp (recording each exchange); here they run
against the recordings in ``tests/fixtures/transcripts/acp_<agent>_*.ndjson``,
in milliseconds, without node or the binaries. Refresh them with ``AGENTD_RECORD_ACP=1 pytest tests/integration/test_acp_*.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
import trio

from agentd.actors.config import ProviderConfig
from agentd.actors.providers.acp import AcpAdapter
from agentd.actors.providers.base import (
    ItemCompleted,
    ProviderRuntimeError,
    ItemStarted,
    RequestOpened,
    TextDelta,
)
from agentd.actors.providers.transport import replaying
from tests.providers.test_claude_replay import Harness

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts"
#: where the recordings' workspace was (tests/integration/acp_worlds.SANITIZED_ROOT)
SANITIZED_WS = "/tmp/agentd-acp-test/ws"


async def scenario_plain(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    assert conn.initialized.agent_info.name == "@agentclientprotocol/claude-agent-acp"
    assert conn.initialized.agent_capabilities.load_session
    native = await conn.create_thread(cwd=cwd)
    assert native in conn.loaded_threads
    await conn.start_turn(native, text="hello there", attempt_id="att_1", cwd=cwd)
    done = await h.turn_end("att_1")
    assert (done.status, done.error) == ("completed", None)
    assert h.texts("att_1") == ["Reply 1: hello there"]
    assert len(h.of("att_1", TextDelta)) > 1, "the text streams in chunks"
    (message,) = [e for e in h.of("att_1", ItemCompleted) if e.item_type == "agent_message"]
    assert message.phase == "final_answer"
    assert conn._sessions[native].mapper.usage.get("used"), "usage_update is read (leniently)"
    await h.stop(conn)
    return {"session": native}


async def scenario_approval(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    native = await conn.create_thread(cwd=cwd)
    await conn.start_turn(native, text="please ASK_APPROVAL", attempt_id="att_1", cwd=cwd)
    asked = await h.wait_for(lambda e: isinstance(e, RequestOpened))
    assert "touch approved-by-user.txt" in asked.detail["command"]
    assert {o["kind"] for o in asked.detail["options"]} >= {"allow_once", "reject_once"}
    assert asked.decisions == ["accept", "decline"], "claude-agent-acp 0.101.0 offers no allow_always for this command"
    with pytest.raises(ProviderRuntimeError, match="takes decision accept, decline"):
        await conn.answer_request(asked.request_ref, {"decision": "acceptForSession"})
    (node,) = [e for e in h.of("att_1", ItemStarted) if e.item_id == asked.item_id]
    assert node.parent_item_id is not None and node.parent_item_id.startswith("tool:")
    await conn.answer_request(asked.request_ref, {"decision": "accept"})
    done = await h.turn_end("att_1")
    assert done.status == "completed"
    (command,) = [e for e in h.of("att_1", ItemCompleted) if e.item_type == "command_execution"]
    assert command.status == "completed" and "wrote-approved-file" in command.detail["output"]
    await h.stop(conn)
    return {"file": "approved-by-user.txt"}


async def scenario_write(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    native = await conn.create_thread(cwd=cwd)
    await conn.start_turn(native, text=f"please WRITE_FILE:{cwd}/new.txt now", attempt_id="att_1", cwd=cwd)
    asked = await h.wait_for(lambda e: isinstance(e, RequestOpened))
    assert asked.detail["kind"] == "file_change"
    await conn.answer_request(asked.request_ref, {"decision": "accept"})
    assert (await h.turn_end("att_1")).status == "completed"
    (change,) = [e for e in h.of("att_1", ItemCompleted) if e.item_type == "file_change"]
    (diff,) = change.detail["changes"]
    assert diff["kind"] == "add" and "+written by the fake model" in diff["diff"]
    await h.stop(conn)
    return {"file": "new.txt"}


async def scenario_interrupt(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    native = await conn.create_thread(cwd=cwd)
    turn = await conn.start_turn(native, text="GO_SLOW", attempt_id="att_1", cwd=cwd)
    await h.wait_for(lambda e: isinstance(e, TextDelta))
    await conn.interrupt_turn(native, turn)
    assert (await h.turn_end("att_1")).status == "interrupted"
    await conn.start_turn(native, text="are you back?", attempt_id="att_2", cwd=cwd)
    assert (await h.turn_end("att_2")).status == "completed"
    assert h.text("att_2").endswith("are you back?")
    await h.stop(conn)
    return {}


async def scenario_resume(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    native = await conn.create_thread(cwd=cwd)
    await conn.start_turn(native, text="remember pineapple", attempt_id="att_1", cwd=cwd)
    await h.turn_end("att_1")
    await h.stop(conn)
    fresh = await h.open()
    before = len(h.events)
    assert fresh.initialized.agent_capabilities.session_capabilities.get("resume") is not None
    info = await fresh.resume_thread(native, cwd=cwd)
    assert info.turn_count == 1 and len(h.events) == before, "session/resume: the daemon's count, and no events"
    await fresh.start_turn(native, text="which fruit?", attempt_id="att_2", cwd=cwd)
    assert (await h.turn_end("att_2")).status == "completed"
    assert h.text("att_2") == "Reply 2: which fruit?", "the resumed session had the earlier turn"
    await h.stop(fresh)
    return {}


async def scenario_steer(h: Harness, cwd: str) -> dict[str, Any]:
    """claude-agent-acp's ``_session/steering``: the message goes into the
    running turn, which then answers it — one turn, no restart."""
    conn = await h.open()
    assert h.adapter.capabilities.steer and conn.initialized.steering()
    native = await conn.create_thread(cwd=cwd)
    turn = await conn.start_turn(native, text="GO_SLOW:200", attempt_id="att_1", cwd=cwd)
    await h.wait_for(lambda e: isinstance(e, TextDelta))
    await conn.steer_turn(native, turn, text="change of plan")
    assert (await h.turn_end("att_1")).status == "completed"
    assert h.text("att_1").endswith("change of plan"), "the steered message was answered in the same turn"
    with pytest.raises(ProviderRuntimeError, match="is not running"):
        await conn.steer_turn(native, turn, text="too late")
    await h.stop(conn)
    return {}


async def scenario_fork(h: Harness, cwd: str) -> dict[str, Any]:
    """claude-agent-acp advertises ``sessionCapabilities.fork``: a native
    fork at the session's end; an earlier turn is refused (ACP forks the
    whole session)."""
    conn = await h.open()
    assert h.adapter.capabilities.native_fork, "advertised by the agent"
    native = await conn.create_thread(cwd=cwd)
    first = await conn.start_turn(native, text="the color is teal", attempt_id="att_1", cwd=cwd)
    assert (await h.turn_end("att_1")).status == "completed"
    fork = await conn.fork_thread(native, last_turn_id=first)
    assert fork != native and fork in conn.loaded_threads
    await conn.start_turn(fork, text="in the fork", attempt_id="att_2", cwd=cwd)
    assert (await h.turn_end("att_2")).status == "completed"
    assert h.text("att_2") == "Reply 2: in the fork", "the fork holds the source's turn"
    with pytest.raises(ProviderRuntimeError, match="forks a session at its end"):
        await conn.fork_thread(native, last_turn_id="acp_turn_not_the_latest")
    await h.stop(conn)
    return {"fork": fork}


# -- Codex through codex-acp (its answers are fake_openai's) --------------------------------


async def codex_plain(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    assert conn.initialized.agent_info.name == "codex-acp"
    assert [m.type for m in conn.initialized.auth_methods] == ["agent", "env_var", "env_var"], "reported, not hidden"
    native = await conn.create_thread(cwd=cwd)
    await conn.start_turn(native, text="hello there", attempt_id="att_1", cwd=cwd)
    assert (await h.turn_end("att_1")).status == "completed"
    assert h.texts("att_1") == ["You said: hello there (turn 1)"]
    await h.stop(conn)
    return {}


async def codex_approval(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    native = await conn.create_thread(cwd=cwd)
    await conn.start_turn(native, text="please ASK_APPROVAL", attempt_id="att_1", cwd=cwd)
    asked = await h.wait_for(lambda e: isinstance(e, RequestOpened))
    assert "touch approved.txt" in asked.detail["command"] and asked.detail["kind"] == "command_execution"
    assert [o["kind"] for o in asked.detail["options"]] == ["allow_once", "allow_always", "reject_once"]
    assert asked.decisions == ["accept", "acceptForSession", "decline"]
    await conn.answer_request(asked.request_ref, {"decision": "accept"})
    assert (await h.turn_end("att_1")).status == "completed"
    (command,) = [e for e in h.of("att_1", ItemCompleted) if e.item_type == "command_execution"]
    assert command.status == "completed"
    await h.stop(conn)
    return {"file": "approved.txt"}


async def codex_approval_always(h: Harness, cwd: str) -> dict[str, Any]:
    """codex-acp's ``allow_always`` ("don't ask again for commands that start
    with …") is the decision ``acceptForSession``: the same command in a later
    turn of the session runs without a permission (SPEC F15)."""
    conn = await h.open()
    native = await conn.create_thread(cwd=cwd)
    await conn.start_turn(native, text="please ASK_APPROVAL", attempt_id="att_1", cwd=cwd)
    asked = await h.wait_for(lambda e: isinstance(e, RequestOpened))
    assert asked.decisions == ["accept", "acceptForSession", "decline"]
    await conn.answer_request(asked.request_ref, {"decision": "acceptForSession"})
    assert (await h.turn_end("att_1")).status == "completed"
    await conn.start_turn(native, text="please ASK_APPROVAL again", attempt_id="att_2", cwd=cwd)
    assert (await h.turn_end("att_2")).status == "completed"
    assert not h.of("att_2", RequestOpened), "the agent did not ask again"
    (command,) = [e for e in h.of("att_2", ItemCompleted) if e.item_type == "command_execution"]
    assert command.status == "completed" and "touch approved.txt" in command.detail["command"]
    await h.stop(conn)
    return {"file": "approved.txt"}


async def codex_interrupt(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    native = await conn.create_thread(cwd=cwd)
    turn = await conn.start_turn(native, text="GO_SLOW", attempt_id="att_1", cwd=cwd)
    await h.wait_for(lambda e: isinstance(e, TextDelta))
    await conn.interrupt_turn(native, turn)
    assert (await h.turn_end("att_1")).status == "interrupted"
    await h.stop(conn)
    return {}


async def codex_resume(h: Harness, cwd: str) -> dict[str, Any]:
    conn = await h.open()
    native = await conn.create_thread(cwd=cwd)
    await conn.start_turn(native, text="remember pineapple", attempt_id="att_1", cwd=cwd)
    await h.turn_end("att_1")
    await h.stop(conn)
    fresh = await h.open()
    before = len(h.events)
    info = await fresh.resume_thread(native, cwd=cwd)
    assert info.turn_count == 1 and len(h.events) == before, "session/resume: the daemon's count, and no events"
    await fresh.start_turn(native, text="which fruit?", attempt_id="att_2", cwd=cwd)
    assert (await h.turn_end("att_2")).status == "completed"
    assert h.text("att_2") == "You said: which fruit? (turn 2)", "the resumed session had the earlier turn"
    await h.stop(fresh)
    return {}


Scenario = Callable[[Harness, str], Awaitable[dict[str, Any]]]
#: agent -> scenario name -> scenario; each agent's mode setting as its tests configure it
SCENARIOS: dict[str, dict[str, Scenario]] = {
    "claude": {"plain": scenario_plain, "approval": scenario_approval, "write": scenario_write,
               "interrupt": scenario_interrupt, "resume": scenario_resume, "fork": scenario_fork,
               "steer": scenario_steer},
    "codex": {"plain": codex_plain, "approval": codex_approval, "approval_always": codex_approval_always,
              "interrupt": codex_interrupt, "resume": codex_resume},
}
MODES = {"claude": "default", "codex": None}
ALL = [(agent, name) for agent in sorted(SCENARIOS) for name in sorted(SCENARIOS[agent])]


def transcript_paths(agent: str, name: str, directory: Path = TRANSCRIPTS) -> list[Path]:
    first = directory / f"acp_{agent}_{name}.ndjson"
    more = sorted(directory.glob(f"acp_{agent}_{name}.*.ndjson"), key=lambda p: int(p.suffixes[-2][1:]))
    return [first, *more]


def replay_adapter(agent: str, spawn) -> AcpAdapter:
    config = ProviderConfig(name=f"{agent}_acp", kind="acp", binary=sys.executable, mode=MODES[agent])
    return AcpAdapter(config, home=Path("/nonexistent/agentd-acp-replay"), request_timeout=5, spawn=spawn)


async def run_replay(agent: str, name: str, home: Path, *, directory: Path = TRANSCRIPTS) -> None:
    async with trio.open_nursery() as nursery:
        spawn, replays = replaying(transcript_paths(agent, name, directory), nursery)
        adapter = replay_adapter(agent, spawn)
        adapter.home = home
        await SCENARIOS[agent][name](Harness(nursery, adapter, live=False), SANITIZED_WS)
        for replay in replays:
            assert replay.mismatch is None, replay.mismatch
            assert replay.played.is_set(), "the adapter stopped before the transcript's end"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("agent", "name"), ALL)
async def test_replayed_acp_agent(agent, name, tmp_path):
    if not transcript_paths(agent, name)[0].exists():
        pytest.skip(f"no recording of acp_{agent}_{name} yet (AGENTD_RECORD_ACP=1 pytest tests/integration/test_acp_{agent}.py)")
    await run_replay(agent, name, tmp_path / "home")

"""The ACP adapter's mapping against a scripted ACP agent (issue 25).

The agent is ``tests/fixtures/acp_agent.py``, built on the official Python
SDK's agent side and run as a subprocess, so the adapter's own JSON-RPC (in
trio) is checked against another implementation of the protocol. What each
turn does is chosen by words in the prompt (see that file).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import trio

from agentd.actors.config import ProviderConfig
from agentd.actors.providers.acp import NATIVE_CAPABILITIES, AcpAdapter
from agentd.actors.providers.agentd_tool import AgentdTool
from agentd.actors.providers.base import (
    ItemCompleted,
    ItemStarted,
    NativeThreadMissing,
    PlanUpdated,
    ProviderRuntimeError,
    RequestOpened,
    RuntimeWarning_,
    TurnCompleted,
)
from tests.providers.test_claude_replay import Harness

AGENT = Path(__file__).resolve().parents[1] / "fixtures" / "acp_agent.py"


def config(tmp_path: Path, **changes) -> ProviderConfig:
    env = {"FAKE_ACP_STATE": str(tmp_path / "agent-state"), **changes.pop("env", {})}
    return ProviderConfig(name="fake", kind="acp", binary=sys.executable, args=[str(AGENT)], env=env, **changes)


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


async def session(h: Harness, workspace: Path):
    conn = await h.open()
    return conn, await conn.create_thread(cwd=str(workspace))


async def turn(h: Harness, conn, native: str, text: str, attempt: str, workspace: Path) -> TurnCompleted:
    await conn.start_turn(native, text=text, attempt_id=attempt, cwd=str(workspace))
    return await h.turn_end(attempt)


async def test_a_text_turn_streams_thoughts_plan_and_the_answer(tmp_path, workspace):
    adapter = AcpAdapter(config(tmp_path), home=tmp_path / "home")
    assert adapter.capabilities == NATIVE_CAPABILITIES
    async with trio.open_nursery() as nursery:
        h = Harness(nursery, adapter, live=True)
        conn, native = await session(h, workspace)
        assert native in conn.loaded_threads and conn.runtime_version == "1.2.3"
        done = await turn(h, conn, native, "hello THINK PLAN", "att_1", workspace)
        assert (done.status, done.error) == ("completed", None)
        kinds = [(type(e).__name__, getattr(e, "item_type", None)) for e in h.of("att_1")]
        assert kinds[0] == ("TurnStarted", None) and kinds[-1] == ("TurnCompleted", None)
        (thought,) = [e for e in h.of("att_1", ItemCompleted) if e.item_type == "reasoning"]
        assert thought.detail["text"] == "let me think"
        (plan,) = h.of("att_1", PlanUpdated)
        assert [(s["step"], s["status"]) for s in plan.plan] == [("read the code", "completed"), ("write the fix", "pending")]
        assert h.texts("att_1") == ["Echo: hello THINK PLAN"]
        (message,) = [e for e in h.of("att_1", ItemCompleted) if e.item_type == "agent_message"]
        assert message.phase == "final_answer", "the text that ends an end_turn turn is the answer (SPEC F3)"
        await h.stop(conn)


async def test_an_edit_is_a_file_change_with_its_diff_written_inside_the_workspace(tmp_path, workspace):
    (workspace / "a.txt").write_text("before\n")
    async with trio.open_nursery() as nursery:
        h = Harness(nursery, AcpAdapter(config(tmp_path), home=tmp_path / "home"), live=True)
        conn, native = await session(h, workspace)
        assert (await turn(h, conn, native, "EDIT a.txt", "att_1", workspace)).status == "completed"
        assert (workspace / "a.txt").read_text() == "before\nedited by the fake\n", "agentd wrote the agent's fs/write_text_file"
        (change,) = [e for e in h.of("att_1", ItemCompleted) if e.item_type == "file_change"]
        (diff,) = change.detail["changes"]
        assert diff["kind"] == "update" and "+edited by the fake" in diff["diff"] and "a/a.txt" in diff["diff"]
        done = await turn(h, conn, native, "OUTSIDE", "att_2", workspace)
        assert done.status == "completed" and not Path("/etc/agentd-acp-outside").exists()
        assert h.text("att_2").startswith("refused: ") and "outside this thread's workspace" in h.text("att_2"), \
            "the agent sees why agentd refused the path"
        await h.stop(conn)


async def test_a_command_asks_permission_and_runs_in_an_agentd_terminal(tmp_path, workspace):
    async with trio.open_nursery() as nursery:
        h = Harness(nursery, AcpAdapter(config(tmp_path), home=tmp_path / "home"), live=True)
        conn, native = await session(h, workspace)
        await conn.start_turn(native, text="RUN pwd; echo 0123456789abcdef LIMIT", attempt_id="att_1", cwd=str(workspace))
        asked = await h.wait_for(lambda e: isinstance(e, RequestOpened))
        assert asked.kind == "approval" and asked.detail["command"] == "pwd; echo 0123456789abcdef"
        assert [o["kind"] for o in asked.detail["options"]] == ["allow_once", "allow_always", "reject_once"]
        (node,) = [e for e in h.of("att_1", ItemStarted) if e.item_id == asked.item_id]
        assert node.item_type == "approval" and node.parent_item_id.startswith("tool:"), "the approval hangs under its command"
        await conn.answer_request(asked.request_ref, {"decision": "accept"})
        assert (await h.turn_end("att_1")).status == "completed"
        (command,) = [e for e in h.of("att_1", ItemCompleted) if e.item_type == "command_execution"]
        assert command.status == "completed" and command.detail["output"] == "789abcdef\n", "the terminal's output"
        assert h.text("att_1") == "exit 0: '789abcdef\\n' truncated=True", "outputByteLimit keeps the last bytes"

        await conn.start_turn(native, text="RUN touch nope", attempt_id="att_2", cwd=str(workspace))
        asked = await h.wait_for(lambda e: isinstance(e, RequestOpened) and e.attempt_id == "att_2")
        await conn.answer_request(asked.request_ref, {"decision": "decline"})
        assert (await h.turn_end("att_2")).status == "completed"
        assert h.text("att_2") == "not allowed" and not (workspace / "nope").exists()
        (command,) = [e for e in h.of("att_2", ItemCompleted) if e.item_type == "command_execution"]
        assert command.status == "failed"
        await h.stop(conn)


async def test_interrupt_is_session_cancel_and_the_turn_ends_interrupted(tmp_path, workspace):
    async with trio.open_nursery() as nursery:
        h = Harness(nursery, AcpAdapter(config(tmp_path), home=tmp_path / "home"), live=True)
        conn, native = await session(h, workspace)
        turn_id = await conn.start_turn(native, text="SLOW", attempt_id="att_1", cwd=str(workspace))
        await h.wait_for(lambda e: getattr(e, "delta", None) == "working")
        await conn.interrupt_turn(native, turn_id)
        done = await h.turn_end("att_1")
        assert done.status == "interrupted"
        (message,) = [e for e in h.of("att_1", ItemCompleted) if e.item_type == "agent_message"]
        assert message.phase is None, "a cancelled turn's text is not an answer"
        assert (await turn(h, conn, native, "again", "att_2", workspace)).status == "completed", "the session goes on"
        await h.stop(conn)


async def test_a_turn_the_agent_ends_otherwise_completes_with_the_reason(tmp_path, workspace):
    async with trio.open_nursery() as nursery:
        h = Harness(nursery, AcpAdapter(config(tmp_path), home=tmp_path / "home"), live=True)
        conn, native = await session(h, workspace)
        done = await turn(h, conn, native, "REFUSE", "att_1", workspace)
        assert (done.status, done.error) == ("completed", "the agent ended the turn: refusal")
        assert [w.message for w in h.of("att_1", RuntimeWarning_)] == ["the agent ended the turn: refusal"]
        await h.stop(conn)


@pytest.mark.parametrize(("word", "why"), [("GARBAGE", "not JSON"), ("BADID", "never sent (id 987654)")])
async def test_an_agent_that_breaks_the_protocol_fails_the_turn_and_is_stopped(tmp_path, workspace, word, why):
    async with trio.open_nursery() as nursery:
        h = Harness(nursery, AcpAdapter(config(tmp_path), home=tmp_path / "home"), live=True)
        conn, native = await session(h, workspace)
        done = await turn(h, conn, native, word, "att_1", workspace)
        assert done.status == "failed" and "broke the protocol" in done.error and why in done.error
        code, signal = await h.ended(conn)
        assert (code, signal) != (None, None), "the process is gone"
        with pytest.raises(ProviderRuntimeError):
            await conn.start_turn(native, text="more", attempt_id="att_2", cwd=str(workspace))


async def test_an_agent_that_exits_mid_turn_takes_the_crash_path(tmp_path, workspace):
    async with trio.open_nursery() as nursery:
        h = Harness(nursery, AcpAdapter(config(tmp_path), home=tmp_path / "home"), live=True)
        conn, native = await session(h, workspace)
        await conn.start_turn(native, text="DIE", attempt_id="att_1", cwd=str(workspace))
        assert await h.ended(conn) == (3, None)
        assert not h.of("att_1", TurnCompleted), "no turn end: SessionExited is the crash (SPEC F11)"


async def test_a_prompt_that_never_answers_after_cancel_is_ended_by_stopping(tmp_path, workspace):
    async with trio.open_nursery() as nursery:
        h = Harness(nursery, AcpAdapter(config(tmp_path), home=tmp_path / "home"), live=True)
        conn, native = await session(h, workspace)
        turn_id = await conn.start_turn(native, text="STUCK", attempt_id="att_1", cwd=str(workspace))
        await h.wait_for(lambda e: getattr(e, "delta", None) == "working")
        await conn.interrupt_turn(native, turn_id)
        # (the actor waits interrupt_grace, then stops the session: this is that stop)
        code, signal = await h.stop(conn)
        assert (code, signal) != (None, None) and not h.of("att_1", TurnCompleted)


async def test_resume_is_session_load_whose_replay_is_history_not_events(tmp_path, workspace):
    adapter = AcpAdapter(config(tmp_path), home=tmp_path / "home")
    async with trio.open_nursery() as nursery:
        h = Harness(nursery, adapter, live=True)
        conn, native = await session(h, workspace)
        await turn(h, conn, native, "remember pineapple", "att_1", workspace)
        await turn(h, conn, native, "and kiwi", "att_2", workspace)
        await h.stop(conn)
        before = len(h.events)
        fresh = await h.open()
        info = await fresh.resume_thread(native, cwd=str(workspace))
        assert info.turn_count == 2 and native in fresh.loaded_threads
        assert len(h.events) == before, "replayed updates are history, never new nodes"
        assert (await turn(h, fresh, native, "which fruit?", "att_3", workspace)).status == "completed"
        with pytest.raises(NativeThreadMissing):
            await fresh.resume_thread("fake_missing", cwd=str(workspace))
        await h.stop(fresh)


async def test_agentds_tool_is_among_the_mcp_servers_and_mode_is_set(tmp_path, workspace):
    import json

    from agentd.actors.providers.tool_credentials import ToolCredentials

    adapter = AcpAdapter(config(tmp_path, mode="plan"), home=tmp_path / "home")
    credentials = ToolCredentials(tmp_path / "credentials")
    credentials.reset()
    credentials.mcp_url = "http://127.0.0.1:9/mcp"
    await credentials.issue("pss_1")  # the harness's first session
    adapter.agentd_tool = AgentdTool(socket="/nonexistent.sock", credentials=credentials)
    async with trio.open_nursery() as nursery:
        h = Harness(nursery, adapter, live=True)
        conn, native = await session(h, workspace)
        state = json.loads((tmp_path / "agent-state" / f"{native}.json").read_text())
        assert state["mcpServers"] == ["agentd"]
        await turn(h, conn, native, "hi", "att_1", workspace)
        assert conn._sessions[native].mapper.mode == "plan", "session/set_mode, reported back as current_mode_update"
        await h.stop(conn)


async def test_probe_names_the_agent_and_a_login_makes_it_unusable(tmp_path, workspace):
    adapter = AcpAdapter(config(tmp_path), home=tmp_path / "home")
    probe = await adapter.probe()
    assert probe["usable"] and probe["agent"] == {"name": "fake-acp-agent", "version": "1.2.3", "title": "Fake ACP agent"}
    assert probe["agentCapabilities"]["loadSession"] is True
    assert adapter.describe()["agent"]["name"] == "fake-acp-agent"

    needs = AcpAdapter(config(tmp_path, env={"FAKE_ACP_AUTH": "1"}), home=tmp_path / "home2")
    async with trio.open_nursery() as nursery:
        h = Harness(nursery, needs, live=True)
        conn = await h.open()
        with pytest.raises(ProviderRuntimeError, match="session/new failed"):
            await conn.create_thread(cwd=str(workspace))
        await h.stop(conn)
    probe = await needs.probe()
    assert not probe["usable"] and "log in" in probe["why"]
    assert probe["authMethods"] == [{"id": "fake-login", "name": "Log in to the fake", "type": "agent"}]


def test_an_acp_provider_needs_an_executable_binary(tmp_path):
    with pytest.raises(ProviderRuntimeError, match="needs binary"):
        AcpAdapter(ProviderConfig(name="x", kind="acp"), home=tmp_path)
    with pytest.raises(ProviderRuntimeError, match="not an executable"):
        AcpAdapter(ProviderConfig(name="x", kind="acp", binary=os.devnull), home=tmp_path)


def test_agentd_providers_prints_the_agent_line():
    from agentd.commands_daemon import _agent_line

    listed = {"agent": {"name": "codex-acp", "title": "Codex", "version": "0.16.0"},
              "agentCapabilities": {"loadSession": True, "sessionCapabilities": {"list": {}, "resume": {}}},
              "authMethods": [{"id": "chatgpt", "name": "Login with ChatGPT", "type": "agent"}]}
    assert _agent_line(listed) == "Codex 0.16.0 (loadSession, session/list, session/resume); logins: Login with ChatGPT"


async def test_a_write_through_a_folder_swapped_for_a_symlink_after_the_check_is_refused(tmp_path):
    """Hostile agent: ``fs/write_text_file``'s path is checked inside the
    workspace, then its folder is swapped for a symlink to a folder outside
    before the write: the write is refused, nothing lands outside."""
    from agentd.actors.providers import acp_files

    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    (workspace / "sub").mkdir(parents=True)
    outside.mkdir()
    target = acp_files.confined(str(workspace), str(workspace / "sub" / "f.txt"))
    (workspace / "sub").rmdir()
    (workspace / "sub").symlink_to(outside)  # the swap, after the check
    with pytest.raises(acp_files.OutsideWorkspace):
        acp_files._write(os.path.realpath(workspace), target, "escaped?")
    assert list(outside.iterdir()) == []
    written = await acp_files.write_text(str(workspace), str(workspace / "new.txt"), "inside")
    assert (workspace / "new.txt").read_text() == "inside" and written.before is None


def test_a_form_elicitation_in_claude_agent_acps_shape_is_questions():
    """claude-agent-acp 0.101.0's AskUserQuestion form (askUserQuestionsToCreateRequest):
    a ``oneOf`` select with titles, an ``anyOf`` multi-select and optional "Other" fields."""
    from agentd.actors.providers import acp_elicitation

    schema = {"type": "object", "properties": {
        "question_0": {"type": "string", "title": "Colour", "description": "Which colour?",
                       "oneOf": [{"const": "red", "title": "red", "description": "warm"}, {"const": "blue", "title": "blue"}]},
        "question_0_custom": {"type": "string", "title": "Other", "description": "Type your own answer"},
        "question_1": {"type": "array", "title": "Sizes", "description": "Which sizes?",
                       "items": {"anyOf": [{"const": "S", "title": "small"}, {"const": "L", "title": "large"}]}},
        "ok": {"type": "boolean", "title": "Ready?"}}, "required": ["ok"]}
    form = acp_elicitation.form("Please answer the following questions.", schema)
    first, other, sizes, ok = form.questions
    assert first == {"id": "question_0", "question": "Which colour?", "header": "Colour", "options": ["red", "blue"],
                     "optionDetails": [{"label": "red", "description": "warm"}], "optional": True}
    assert other["optional"] and "options" not in other
    assert sizes["options"] == ["S", "L"] and sizes["multiple"] is True
    assert ok["options"] == ["true", "false"] and "optional" not in ok
    assert acp_elicitation.content(form, {"question_0": "red", "question_0_custom": "", "question_1": "L", "ok": "true"}) == \
        {"question_0": "red", "question_1": ["L"], "ok": True}
    with pytest.raises(ValueError, match="needs an answer"):
        acp_elicitation.content(form, {"question_0": "red"})
    with pytest.raises(acp_elicitation.Unsupported, match="without fields"):
        acp_elicitation.form("?", {"type": "object", "properties": {}})

"""An ACP agent as a provider, end to end through a real daemon's socket
(issue 25): ``[providers.fake] kind = "acp"`` runs the scripted ACP agent
``tests/fixtures/acp_agent.py`` (the official SDK's agent side).

A text turn (SPEC F3), a command's permission as an approval answered over
the socket (F15), a write through ``fs/write_text_file`` as a file change
with a checkpoint (F13), an interrupt (``session/cancel``), idle reap then
resume by ``session/load`` with the earlier turn still the agent's (F11), a
steer by the restart fallback, and an agent that breaks the protocol or
hangs after a cancel ending the run with a reason, never wedging the thread.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.launch import start_daemon
from agentd.protocol.errors import InvalidParams, NotResumable
from agentd.protocol.client import Client
from tests.helpers import answer_begun, daemon_for_module, send_and_wait, stored_events, wait_event, wait_run_terminal

AGENT = Path(__file__).resolve().parents[1] / "fixtures" / "acp_agent.py"


def provider_toml(name: str, state: Path, **extra: Any) -> str:
    table = {"kind": "acp", "binary": sys.executable, "args": [str(AGENT)], "env": {"FAKE_ACP_STATE": str(state)}, **extra}
    lines = [f"{k} = {json.dumps(v) if not isinstance(v, dict) else '{ ' + ', '.join(f'{a} = {json.dumps(b)}' for a, b in v.items()) + ' }'}"
             for k, v in table.items()]
    return f"[providers.{name}]\n" + "\n".join(lines) + "\n"


def agentd_config(tmp_path: Path) -> Path:
    """The config of the ``fake`` and ``fake_idle`` instances, their agent's state in ``tmp_path``."""
    state = tmp_path / "agent-state"
    config = tmp_path / "config.toml"
    config.write_text('[daemon]\ndefault_provider = "fake"\ninterrupt_grace = 2\n\n'
                      + provider_toml("fake", state) + "\n" + provider_toml("fake_idle", state, idle_timeout=1))
    return config


@pytest.fixture(scope="module")
def shared_daemon(module_paths):
    """One daemon for the module's tests of one thread each (issue 28 item
    13): they read only their own threads. The tests that read the fake
    agent's log of every prompt (``prompts``) start their own (``agentd``)."""
    data_dir, socket = module_paths
    with daemon_for_module(start_daemon, data_dir, socket, config=agentd_config(data_dir.parent)) as daemon:
        yield daemon


@pytest.fixture
async def client(shared_daemon):
    async with Client.connect(shared_daemon.socket) as c:
        yield c


@contextlib.asynccontextmanager
async def agentd(tmp_path: Path, socket: Path):
    """A daemon of the test's own, its fake agent's log in ``tmp_path``."""
    daemon = await start_daemon(tmp_path / "data", socket, config=agentd_config(tmp_path))
    try:
        async with Client.connect(daemon.socket) as client:
            yield client
    finally:
        code = await daemon.terminate()
        assert code == 0, daemon.log_text()[-3000:]


async def new_thread(client: Client, workspace: Path, provider: str = "fake") -> str:
    workspace.mkdir(exist_ok=True)
    return (await client.call("thread.create", provider=provider, workspace=str(workspace)))["threadId"]


async def event(client: Client, thread_id: str, type_: str) -> dict[str, Any]:
    return await wait_event(client, lambda e: e["type"] == type_, thread_id=thread_id, timeout=60)


async def assistant_texts(client: Client, thread_id: str) -> list[str]:
    return [m["text"] for m in (await client.call("thread.get", threadId=thread_id))["messages"] if m["role"] == "assistant"]


def prompts(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "agent-state" / "prompts.ndjson").read_text().splitlines()]


async def test_a_text_turn_and_the_provider_listing(client, tmp_path):
    thread_id = await new_thread(client, tmp_path / "ws")
    run = await send_and_wait(client, thread_id, "hello THINK")
    assert run["status"] == "completed"
    assert await assistant_texts(client, thread_id) == ["Echo: hello THINK"]
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    (thought,) = [n for n in nodes if n["kind"] == "reasoning"]
    assert thought["detail"]["text"] == "let me think" and thought["status"] == "completed"
    # The prompt answer's usage (the turn's tokens) lands on the run and the thread;
    # usage_update (the context window's fill) is not counted (issue 28).
    usage = (await client.call("run.get", runId=run["id"]))["run"]["usage"]
    assert (usage["inputTokens"], usage["outputTokens"]) == (20, 10), usage
    assert (await client.call("thread.get", threadId=thread_id))["thread"]["usage"]["inputTokens"] == 20
    listed = {p["name"]: p for p in (await client.call("providers.list"))["providers"]}
    fake = listed["fake"]
    assert fake["kind"] == "acp" and fake["usable"] is True and fake["version"] == "1.2.3"
    assert fake["agent"]["name"] == "fake-acp-agent" and fake["agentCapabilities"]["loadSession"] is True
    assert fake["capabilities"]["steer"] is False and fake["capabilities"]["emptyThreads"] is True


async def test_a_command_permission_is_an_approval_and_an_edit_a_file_change(client, tmp_path):
    workspace = tmp_path / "ws"
    thread_id = await new_thread(client, workspace)
    sent = await client.call("thread.message.send", threadId=thread_id, text="RUN echo from-the-terminal")
    requested = await event(client, thread_id, "approval.requested")
    request = requested["payload"]["request"]
    assert request["detail"]["command"] == "echo from-the-terminal"
    await client.call("approval.respond", requestId=request["id"], decision="accept")
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert run["status"] == "completed"
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    (command,) = [n for n in nodes if n["kind"] == "command_execution"]
    (approval,) = [n for n in nodes if n["kind"] == "approval"]
    assert approval["parentNodeId"] == command["id"] and approval["status"] == "completed"
    assert command["detail"]["output"] == "from-the-terminal\n"

    run = await send_and_wait(client, thread_id, "EDIT notes/a.txt")
    assert run["status"] == "completed" and (workspace / "notes" / "a.txt").read_text() == "edited by the fake\n"
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    (change,) = [n for n in nodes if n["kind"] == "file_change"]
    assert change["status"] == "completed" and "+edited by the fake" in change["detail"]["changes"][0]["diff"]
    checkpoints = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
    assert any(c.get("runId") == run["id"] for c in checkpoints), "the run that changed a file has its checkpoint"


async def test_interrupt_and_a_steer_by_restart(client, tmp_path):
    thread_id = await new_thread(client, tmp_path / "ws")
    sent = await client.call("thread.message.send", threadId=thread_id, text="SLOW")
    await answer_begun(client, thread_id, sent["runId"], timeout=60)
    await client.call("run.interrupt", runId=sent["runId"])
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert (run["status"], run["reason"]) == ("interrupted", "interrupted")
    types = [e["type"] for e in await stored_events(client, thread_id)]
    assert "session.stopped" not in types, "the agent ended the turn itself on session/cancel"

    sent = await client.call("thread.message.send", threadId=thread_id, text="SLOW again")
    await answer_begun(client, thread_id, sent["runId"])
    steer = await client.call("thread.message.send", threadId=thread_id, text="change of plan",
                              dispatchMode={"type": "steer_active", "targetRunId": sent["runId"]})
    assert steer["strategy"] == "steering_restart"
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert (run["status"], run["attemptCount"]) == ("completed", 2)
    assert (await assistant_texts(client, thread_id))[-1].endswith("change of plan")


async def test_idle_reap_then_session_load_resumes_the_same_session(tmp_path, short_dir):
    async with agentd(tmp_path, short_dir / "s.sock") as client:
        thread_id = await new_thread(client, tmp_path / "ws", "fake_idle")
        first = await send_and_wait(client, thread_id, "remember pineapple")
        stopped = await event(client, thread_id, "session.stopped")
        assert stopped["payload"]["session"]["reason"] == "idle_timeout"
        second = await send_and_wait(client, thread_id, "which fruit?")
        assert (first["status"], second["status"]) == ("completed", "completed")
        resumed = await event(client, thread_id, "provider_thread.resumed")
        assert resumed["payload"]["nativeTurnCount"] == 1
        sessions = {p["session"] for p in prompts(tmp_path)}
        assert len(sessions) == 1, "the second turn went to the same ACP session, loaded in a new process"
        assert await assistant_texts(client, thread_id) == ["Echo: remember pineapple", "Echo: which fruit?"], \
            "the replayed history made no new messages"


async def test_an_agent_that_breaks_the_protocol_fails_the_run_and_the_thread_goes_on(client, tmp_path):
    thread_id = await new_thread(client, tmp_path / "ws")
    run = await send_and_wait(client, thread_id, "GARBAGE")
    assert run["status"] == "failed" and "not JSON" in run["reason"], run
    nxt = await send_and_wait(client, thread_id, "still there?")
    assert nxt["status"] == "completed"
    assert (await assistant_texts(client, thread_id))[-1] == "Echo: still there?"


async def test_a_prompt_that_never_answers_a_cancel_is_stopped_after_the_grace(client, tmp_path):
    thread_id = await new_thread(client, tmp_path / "ws")
    sent = await client.call("thread.message.send", threadId=thread_id, text="STUCK")
    await answer_begun(client, thread_id, sent["runId"], timeout=60)
    await client.call("run.interrupt", runId=sent["runId"])
    with trio.fail_after(60):
        run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert run["status"] == "interrupted"
    assert (await send_and_wait(client, thread_id, "next"))["status"] == "completed"


async def test_a_fork_is_portable_and_a_rollback_rebuilt(tmp_path, short_dir):
    """ACP has no native fork at a point nor a rewind: SPEC F6's portable
    fork (a new ACP session given a handoff) and F14's rebuilt rollback."""
    async with agentd(tmp_path, short_dir / "s.sock") as client:
        thread_id = await new_thread(client, tmp_path / "ws")
        for text in ("one alpha", "two bravo", "three charlie"):
            assert (await send_and_wait(client, thread_id, text))["status"] == "completed"
        forked = await client.call("thread.fork", threadId=thread_id)
        run = await send_and_wait(client, forked["threadId"], "in the fork")
        assert run["status"] == "completed", run
        attempt = (await client.call("run.get", runId=run["id"]))["attempts"][-1]
        handoff = (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]
        assert "three charlie" in handoff["text"]
        fork_prompt = prompts(tmp_path)[-1]
        assert fork_prompt["texts"] == [handoff["text"], "in the fork"], "the handoff went in ahead of the message"

        answer = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
        assert answer["providerRollback"] == "rebuilt", answer
        run = await send_and_wait(client, thread_id, "four delta")
        assert run["status"] == "completed"
        texts = prompts(tmp_path)[-1]["texts"]
        assert texts[-1] == "four delta" and "one alpha" in texts[0] and "two bravo" not in texts[0]
        sessions = [p["session"] for p in prompts(tmp_path)]
        assert len(set(sessions)) == 3, "the source, the fork and the rebuilt thread are three ACP sessions"


async def test_allow_always_is_accept_for_session_and_the_agent_asks_no_more(client, tmp_path):
    """The permission's ``allow_always`` option is the decision
    ``acceptForSession`` the request offers (SPEC F15): chosen over the
    socket, the agent runs the same command again without asking."""
    thread_id = await new_thread(client, tmp_path / "ws")
    sent = await client.call("thread.message.send", threadId=thread_id, text="RUN echo again")
    request = (await event(client, thread_id, "approval.requested"))["payload"]["request"]
    assert request["decisions"] == ["accept", "acceptForSession", "decline"]
    await client.call("approval.respond", requestId=request["id"], decision="acceptForSession")
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert run["status"] == "completed"
    (approval,) = [n for n in (await client.call("run.get", runId=run["id"]))["nodes"] if n["kind"] == "approval"]
    assert approval["status"] == "completed" and approval["detail"]["decision"] == "acceptForSession"

    run = await send_and_wait(client, thread_id, "RUN echo again")
    assert run["status"] == "completed"
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    assert not [n for n in nodes if n["kind"] == "approval"], "the agent remembered: no approval this time"
    assert [n["detail"]["output"] for n in nodes if n["kind"] == "command_execution"] == ["again\n"]


async def test_an_elicitation_is_a_question_and_the_answers_go_back(client, tmp_path):
    """``elicitation/create`` (a form) is a ``user_input`` request (SPEC F15):
    its fields are the questions, the answers the form's content, typed as
    the form says; an optional field may be left out. A URL elicitation or a
    field agentd cannot ask is the agent's error, and an interrupt cancels a
    waiting form: the agent is never left waiting."""
    thread_id = await new_thread(client, tmp_path / "ws")
    sent = await client.call("thread.message.send", threadId=thread_id, text="ASK")
    requested = (await event(client, thread_id, "user_input.requested"))["payload"]
    request = requested["request"]
    assert request["detail"]["message"] == "Which color, and how many?"
    assert [(q["id"], q.get("options"), q.get("optional", False)) for q in request["detail"]["questions"]] == [
        ("color", ["red", "blue"], False), ("count", None, False), ("notes", None, True)]
    assert requested["artifact"]["kind"] == "questions"
    with pytest.raises(InvalidParams) as wrong:
        await client.call("user-input.respond", requestId=request["id"], answers={"color": "green", "count": "2"})
    assert wrong.value.data["field"] == "answers.color", "an answer that is not an option is refused first"
    await client.call("user-input.respond", requestId=request["id"], answers={"color": "blue", "count": "2"})
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert run["status"] == "completed"
    assert (await assistant_texts(client, thread_id))[-1] == 'accept: {"color": "blue", "count": 2}'
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    assert [n["status"] for n in nodes if n["kind"] == "user_input_request"] == ["completed"]

    for word, told in (("ASK_URL", "agentd answers form elicitations only"), ("ASK_ODD", "'_colour_wheel'")):
        run = await send_and_wait(client, thread_id, word)
        assert run["status"] == "completed"
        said = (await assistant_texts(client, thread_id))[-1]
        assert said.startswith("refused: ") and told in said, said

    sent = await client.call("thread.message.send", threadId=thread_id, text="ASK for a number")
    request = (await wait_event(client, lambda e: e["type"] == "user_input.requested" and e.get("runId") == sent["runId"],
                                thread_id=thread_id, timeout=60))["payload"]["request"]
    with pytest.raises(NotResumable, match="not an integer"):
        await client.call("user-input.respond", requestId=request["id"], answers={"color": "red", "count": "two"})
    assert (await wait_run_terminal(client, thread_id, sent["runId"], timeout=60))["status"] == "completed"
    said = (await assistant_texts(client, thread_id))[-1]
    assert said.startswith("refused: ") and "'two' to 'count' is not an integer" in said, "the agent was told, not left waiting"

    sent = await client.call("thread.message.send", threadId=thread_id, text="ASK again")
    await wait_event(client, lambda e: e["type"] == "user_input.requested" and e.get("runId") == sent["runId"],
                     thread_id=thread_id, timeout=60)
    await client.call("run.interrupt", runId=sent["runId"])
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert run["status"] == "interrupted"
    assert (await assistant_texts(client, thread_id))[-1] == "cancel: null", "the form was answered cancel"


@contextlib.asynccontextmanager
async def native_agentd(tmp_path: Path, socket: Path):
    """A daemon whose fake agent advertises ``session/resume`` and ``session/fork``."""
    state = tmp_path / "agent-state"
    env = {"FAKE_ACP_STATE": str(state), "FAKE_ACP_SESSION_CAPS": "resume,fork"}
    config = tmp_path / "config.toml"
    config.write_text('[daemon]\ndefault_provider = "fake"\ninterrupt_grace = 2\n\n'
                      + provider_toml("fake", state, env=env, idle_timeout=1))
    daemon = await start_daemon(tmp_path / "data", socket, config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            yield client
    finally:
        code = await daemon.terminate()
        assert code == 0, daemon.log_text()[-3000:]


def calls(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "agent-state" / "calls.ndjson").read_text().splitlines()]


async def test_session_resume_and_a_native_fork_where_the_agent_advertises_them(tmp_path, short_dir):
    """``sessionCapabilities.resume``: after an idle reap the session is
    resumed, not loaded (no replay; F11). ``sessionCapabilities.fork``: a
    fork at the latest run is the agent's ``session/fork`` with the whole
    history and no handoff; one at an earlier run stays portable (F6)."""
    async with native_agentd(tmp_path, short_dir / "s.sock") as client:
        thread_id = await new_thread(client, tmp_path / "ws")
        first = await send_and_wait(client, thread_id, "remember pineapple")
        assert first["status"] == "completed"
        assert (await event(client, thread_id, "session.stopped"))["payload"]["session"]["reason"] == "idle_timeout"
        assert (await send_and_wait(client, thread_id, "HISTORY"))["status"] == "completed"
        assert (await assistant_texts(client, thread_id))[-1] == "history: 1: remember pineapple"
        assert [c["method"] for c in calls(tmp_path)] == ["session/new", "session/resume"], "resumed, never loaded"
        assert (await event(client, thread_id, "provider_thread.resumed"))["payload"]["nativeTurnCount"] == 1
        listed = {p["name"]: p for p in (await client.call("providers.list"))["providers"]}
        assert listed["fake"]["capabilities"]["nativeFork"] is True

        forked = await client.call("thread.fork", threadId=thread_id)
        run = await send_and_wait(client, forked["threadId"], "HISTORY")
        assert run["status"] == "completed", run
        assert (await assistant_texts(client, forked["threadId"]))[-1] == "history: 2: remember pineapple | HISTORY"
        attempt = (await client.call("run.get", runId=run["id"]))["attempts"][-1]
        assert attempt.get("handoffId") is None, "the agent forked its own session: no handoff"
        (fork_call,) = [c for c in calls(tmp_path) if c["method"] == "session/fork"]
        source_session = prompts(tmp_path)[0]["session"]
        assert fork_call["session"] == source_session and prompts(tmp_path)[-1] == {"session": fork_call["fork"], "texts": ["HISTORY"]}

        early = await client.call("thread.fork", threadId=thread_id, sourcePoint={"type": "run", "runId": first["id"]})
        run = await send_and_wait(client, early["threadId"], "in the early fork")
        assert run["status"] == "completed", run
        attempt = (await client.call("run.get", runId=run["id"]))["attempts"][-1]
        handoff = (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]
        assert "remember pineapple" in handoff["text"] and len([c for c in calls(tmp_path) if c["method"] == "session/fork"]) == 1


async def test_a_native_fork_after_a_daemon_restart(tmp_path, short_dir):
    """After a restart the daemon has seen none of the agent's sessions in
    this process; a fork at the source's latest run is still the agent's own
    ``session/fork`` (the lineage checked the point from the store), working
    in the shared workspace, with the whole history (SPEC F6, F12)."""
    async with native_agentd(tmp_path, short_dir / "s.sock") as client:
        thread_id = await new_thread(client, tmp_path / "ws")
        assert (await send_and_wait(client, thread_id, "remember pineapple"))["status"] == "completed"
    async with native_agentd(tmp_path, short_dir / "s.sock") as client:
        # Another thread's session first: the agent said in ``initialize`` that it forks.
        other = await new_thread(client, tmp_path / "ws")
        assert (await send_and_wait(client, other, "hello"))["status"] == "completed"
        forked = await client.call("thread.fork", threadId=thread_id)
        run = await send_and_wait(client, forked["threadId"], "HISTORY")
        assert run["status"] == "completed", run
        assert (await assistant_texts(client, forked["threadId"]))[-1] == "history: 1: remember pineapple"
        attempt = (await client.call("run.get", runId=run["id"]))["attempts"][-1]
        assert attempt.get("handoffId") is None, "the agent forked its own session: no handoff"
        (fork_call,) = [c for c in calls(tmp_path) if c["method"] == "session/fork"]
        assert fork_call["session"] == prompts(tmp_path)[0]["session"]


@pytest.mark.parametrize("how", ["steering", "queue"])
async def test_a_native_steer_where_the_agent_takes_one(tmp_path, short_dir, how):
    """The agent's ``_session/steering`` extension, or its prompt queueing
    (claude-agent-acp 0.101.0 advertises both): a steer goes into the running
    turn — one attempt, no restart (SPEC F3)."""
    state = tmp_path / "agent-state"
    config = tmp_path / "config.toml"
    config.write_text('[daemon]\ndefault_provider = "fake"\ninterrupt_grace = 2\n\n'
                      + provider_toml("fake", state, env={"FAKE_ACP_STATE": str(state), "FAKE_ACP_STEER": how}))
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = await new_thread(client, tmp_path / "ws")
            assert (await send_and_wait(client, thread_id, "hello"))["status"] == "completed"
            listed = {p["name"]: p for p in (await client.call("providers.list"))["providers"]}
            assert listed["fake"]["capabilities"]["steer"] is True
            sent = await client.call("thread.message.send", threadId=thread_id, text="SLOW")
            await answer_begun(client, thread_id, sent["runId"])
            steer = await client.call("thread.message.send", threadId=thread_id, text="change of plan",
                                      dispatchMode={"type": "steer_active", "targetRunId": sent["runId"]})
            assert steer["strategy"] == "native_steer"
            run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
            assert (run["status"], run["attemptCount"]) == ("completed", 1)
            texts = await assistant_texts(client, thread_id)
            assert "steered: change of plan" in "".join(texts[1:]), texts
            if how == "steering":
                assert prompts(tmp_path)[-1] == {"session": prompts(tmp_path)[0]["session"], "steer": "change of plan"}
            else:
                assert [p["texts"] for p in prompts(tmp_path)[-2:]] == [["SLOW"], ["change of plan"]]
                assert "Echo: change of plan" in "".join(texts[1:]), "the queued prompt ran in the same turn"
    finally:
        assert await daemon.terminate() == 0

"""``agentd acp`` driven as an editor drives it: the official ACP SDK's client
side (``acp.connect_to_agent`` over the subprocess's stdio) against a real
daemon on the scripted agent (issue 26; F1, F2, F3, F6, F10, F12, F13, F14, F15).

The SDK is asyncio and the suite is trio: the editor runs on an asyncio loop
of its own in a worker thread (``Editor``), and each test awaits its calls
from trio. Nothing waits on time: every wait is for a message or an event.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
import trio

from acp import PROTOCOL_VERSION, RequestError, connect_to_agent, image_block, resource_block, text_block
from acp.schema import (
    AcceptElicitationResponse,
    BlobResourceContents,
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    EnvVariable,
    HttpHeader,
    HttpMcpServer,
    McpServerStdio,
    RequestPermissionResponse,
)

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError
from tests.helpers import script, wait_event, wait_run_terminal

WAIT = 60


class Editor:
    """An ACP client (what Zed or CodeCompanion is) with ``agentd acp`` as its agent.

    ``updates[session]`` holds every ``session/update`` in order;
    ``permissions`` every permission request; ``choose`` picks the answer to
    one (default: the first option).
    """

    def __init__(self, daemon: Any, stderr_path: Path) -> None:
        self.daemon = daemon
        self.stderr_path = stderr_path
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.updates: dict[str, list[Any]] = {}
        self.permissions: list[Any] = []
        self.choose: Callable[[Any], str | None] = lambda request: request.options[0].option_id
        self.elicitations: list[Any] = []
        #: the answer to a form elicitation: the first choice of each field
        self.elicit: Callable[[Any], dict[str, Any]] = lambda mode: {
            key: (prop.enum or ["typed"])[0] for key, prop in mode.requested_schema.properties.items()}
        #: when set, permission requests are answered only once it is
        self.gate: asyncio.Event | None = None
        self._changed: asyncio.Condition | None = None
        self.conn: Any = None
        self.process: Any = None

    # -- the SDK's Client interface ------------------------------------------------------
    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.setdefault(session_id, []).append(update)
        async with self._changed:
            self._changed.notify_all()

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any):
        request = type("Permission", (), {"session_id": session_id, "tool_call": tool_call, "options": options})()
        self.permissions.append(request)
        async with self._changed:
            self._changed.notify_all()
        if self.gate is not None:
            await self.gate.wait()
        chosen = self.choose(request)
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen))

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any):
        self.elicitations.append((message, mode))
        return AcceptElicitationResponse(action="accept", content=self.elicit(mode))

    def on_connect(self, conn: Any) -> None:
        pass

    # -- running it from trio ------------------------------------------------------------
    async def run(self, coro: Awaitable[Any]) -> Any:
        """Await ``coro`` on the editor's loop, from trio."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await trio.to_thread.run_sync(lambda: future.result(WAIT), abandon_on_cancel=True)

    async def start(self) -> None:
        self.thread.start()
        await self.run(self._start())

    async def _start(self) -> None:
        self._changed = asyncio.Condition()
        self._stderr = open(self.stderr_path, "wb")
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentd", "acp", "--data-dir", str(self.daemon.data_dir), "--socket",
            str(self.daemon.socket), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            env=dict(os.environ), limit=50 << 20)
        self.conn = connect_to_agent(self, self.process.stdin, self.process.stdout, use_unstable_protocol=True)

    async def stop(self) -> None:
        await self.run(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT)

    async def _stop(self) -> None:
        await self.conn.close()
        self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), WAIT)
        finally:
            if self.process.returncode is None:
                self.process.kill()
            self._stderr.close()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async def wait() -> None:
            async with self._changed:
                await asyncio.wait_for(self._changed.wait_for(predicate), WAIT)
        await self.run(wait())

    # -- what a test reads ---------------------------------------------------------------
    def kinds(self, session_id: str) -> list[str]:
        return [u.session_update for u in self.updates.get(session_id, [])]

    def text(self, session_id: str, kind: str = "agent_message_chunk") -> str:
        return "".join(u.content.text for u in self.updates.get(session_id, []) if u.session_update == kind)

    def tool_calls(self, session_id: str) -> dict[str, dict[str, Any]]:
        """Each tool call's final state (its start merged with its updates)."""
        calls: dict[str, dict[str, Any]] = {}
        for u in self.updates.get(session_id, []):
            if u.session_update in ("tool_call", "tool_call_update"):
                merged = calls.setdefault(u.tool_call_id, {})
                for key, value in u.model_dump(exclude_none=True).items():
                    merged[key] = value
        return calls


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (conftest's): these tests need only sessions of
    their own (issue 28 item 13); one about every session takes ``own_daemon``."""
    return module_daemon


async def _editor(daemon, tmp_path):
    editor = Editor(daemon, tmp_path / "acp.stderr")
    await editor.start()
    init = await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION,
                                                   client_capabilities=ClientCapabilities()))
    editor.init = init
    return editor


@contextlib.asynccontextmanager
async def _started_editor(daemon, tmp_path):
    """An editor of ``daemon`` for one test; stopped after it, its stderr free of tracebacks."""
    editor = await _editor(daemon, tmp_path)
    try:
        yield editor
    finally:
        await editor.stop()
        assert "Traceback" not in editor.stderr(), editor.stderr()


@pytest.fixture
async def editor(daemon, tmp_path):
    async with _started_editor(daemon, tmp_path) as started:
        yield started


@pytest.fixture
async def fresh_editor(own_daemon, tmp_path):
    async with _started_editor(own_daemon, tmp_path) as started:
        yield started


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "ws"
    path.mkdir()
    return path


async def new_session(editor: Editor, cwd: Path) -> str:
    return (await editor.run(editor.conn.new_session(cwd=str(cwd), mcp_servers=[]))).session_id


async def prompt(editor: Editor, session_id: str, text: str) -> str:
    answer = await editor.run(editor.conn.prompt(session_id=session_id, prompt=[text_block(text)]))
    return answer.stop_reason


async def test_initialize_says_what_agentd_can(editor):
    caps = editor.init.agent_capabilities
    assert editor.init.protocol_version == 1
    assert caps.load_session is True
    assert caps.session_capabilities.list is not None and caps.session_capabilities.resume is not None
    assert caps.session_capabilities.close is not None and caps.session_capabilities.fork is not None
    assert caps.prompt_capabilities.embedded_context is True and not caps.prompt_capabilities.audio
    # Images go on where the session's provider takes them (refused per message where not).
    assert caps.prompt_capabilities.image is True


async def test_a_session_is_a_thread_and_a_prompt_streams_its_run(editor, client, workspace):
    (workspace / "a.txt").write_text("old line\n")
    session = await new_session(editor, workspace)
    thread = (await client.call("thread.get", threadId=session))["thread"]
    assert thread["workspace"] == str(workspace)  # the ACP session id is the thread id (F1)
    stop = await prompt(editor, session, script(
        {"say": "hello ", "chunks": 3}, {"plan": [{"step": "edit a", "status": "in_progress"}]},
        {"write": {"path": "a.txt", "content": "new line\n"}}, {"command": {"argv": ["echo", "hi"]}},
        {"tool": {"name": "Grep"}}, {"say": "done"}))
    assert stop == "end_turn"
    assert editor.text(session).startswith("hello done") or editor.text(session) == "hello done"
    kinds = editor.kinds(session)
    assert "plan" in kinds and "available_commands_update" in kinds
    calls = editor.tool_calls(session)
    by_kind = {c["kind"]: c for c in calls.values()}
    assert by_kind["execute"]["status"] == "completed"
    assert "hi" in json.dumps(by_kind["execute"]["content"])
    assert by_kind["search"]["title"] == "Grep"
    # The file change is an edit whose diff comes from the run's checkpoint (F13).
    await editor.wait_for(lambda: any(c.get("content") for c in editor.tool_calls(session).values()
                                      if c.get("kind") == "edit"))
    edit = next(c for c in editor.tool_calls(session).values() if c["kind"] == "edit")
    diff = edit["content"][0]
    assert diff["type"] == "diff" and diff["path"] == str(workspace / "a.txt")
    assert diff["old_text"] == "old line\n" and diff["new_text"] == "new line\n"
    assert edit["locations"] == [{"path": str(workspace / "a.txt")}]


async def test_a_failed_run_says_why_and_ends_the_turn(editor, workspace):
    session = await new_session(editor, workspace)
    assert await prompt(editor, session, script({"say": "trying"}, {"fail": "boom"})) == "end_turn"
    assert "the run failed" in editor.text(session) and "boom" in editor.text(session)


async def test_approvals_and_questions_are_permission_requests(editor, workspace):
    session = await new_session(editor, workspace)
    editor.choose = lambda r: next(o.option_id for o in r.options if o.kind == "allow_always") \
        if r.options[0].option_id == "allow_once" else r.options[1].option_id
    once = ["accept", "decline"]  # the provider has no "allow for the session": agentd acp remembers
    stop = await prompt(editor, session, script(
        {"approval": {"kind": "command", "command": "make", "decisions": once}},
        {"approval": {"kind": "command", "command": "make install", "decisions": once}},
        {"ask": {"questions": [{"id": "color", "question": "Which color?", "options": ["red", "blue"]}]}}))
    assert stop == "end_turn"
    text = editor.text(session)
    assert text.count("approval: accept") == 2
    assert "color=blue" in text
    # "Allow always" was asked once: the second approval of a command was answered from it (F15).
    approvals = [p for p in editor.permissions if p.options[0].option_id == "allow_once"]
    assert len(approvals) == 1 and approvals[0].tool_call.kind == "execute"
    question = [p for p in editor.permissions if p not in approvals]
    assert [o.name for o in question[0].options] == ["red", "blue"]


async def test_allow_always_is_the_providers_accept_for_session_where_offered(editor, workspace):
    """The editor's "allow always" becomes ``acceptForSession`` when the
    request offers it (F15): the provider, not agentd acp, remembers — the
    same command is not asked again, another one is."""
    session = await new_session(editor, workspace)
    editor.choose = lambda r: next(o.option_id for o in r.options if o.kind == "allow_always")
    make = {"approval": {"kind": "command", "command": "make"}}
    stop = await prompt(editor, session, script(make, make, {"approval": {"kind": "command", "command": "make install"}}))
    assert stop == "end_turn"
    text = editor.text(session)
    assert "approval: acceptForSession (remembered)" in text and text.count("approval: acceptForSession") == 3
    assert [p.tool_call.raw_input["command"] for p in editor.permissions] == ["make", "make install"]


async def test_a_rejected_approval_is_declined(editor, workspace):
    session = await new_session(editor, workspace)
    editor.choose = lambda r: "reject"
    assert await prompt(editor, session, script({"approval": {"kind": "command", "command": "rm"}})) == "end_turn"
    assert "approval: decline" in editor.text(session)


async def test_cancel_interrupts_the_run(editor, client, workspace):
    session = await new_session(editor, workspace)
    future = asyncio.run_coroutine_threadsafe(
        editor.conn.prompt(session_id=session, prompt=[text_block(script({"say": "working"}, {"hang": True}))]),
        editor.loop)
    await editor.wait_for(lambda: "working" in editor.text(session))
    await editor.run(editor.conn.cancel(session_id=session))
    answer = await trio.to_thread.run_sync(lambda: future.result(WAIT))
    assert answer.stop_reason == "cancelled"
    runs = (await client.call("thread.get", threadId=session))["runs"]
    assert runs[-1]["status"] == "interrupted"  # F10


async def test_a_prompt_while_a_run_is_active_steers_it(editor, client, workspace):
    session = await new_session(editor, workspace)
    editor.gate = await editor.run(_event())
    first = asyncio.run_coroutine_threadsafe(
        editor.conn.prompt(session_id=session, prompt=[text_block(script(
            {"say": "busy"}, {"approval": {"kind": "command", "command": "make"}}, {"say": "after"}))]),
        editor.loop)
    await editor.wait_for(lambda: editor.permissions)
    # The scripted agent steers natively: the same run takes the new input (F3), and both prompts end with it.
    second = asyncio.run_coroutine_threadsafe(
        editor.conn.prompt(session_id=session, prompt=[text_block("and now this")]), editor.loop)
    await wait_event_of(client, session, "run.steer_requested")
    editor.loop.call_soon_threadsafe(editor.gate.set)
    assert (await trio.to_thread.run_sync(lambda: first.result(WAIT))).stop_reason == "end_turn"
    assert (await trio.to_thread.run_sync(lambda: second.result(WAIT))).stop_reason == "end_turn"
    assert "steered: and now this" in editor.text(session)
    runs = (await client.call("thread.get", threadId=session))["runs"]
    assert len(runs) == 1 and runs[0]["status"] == "completed"


async def _event() -> asyncio.Event:
    return asyncio.Event()


async def wait_event_of(client, thread_id, kind):
    return await wait_event(client, lambda e: e["type"] == kind, thread_id=thread_id)


async def _events(client, thread_id):
    target = (await client.call("daemon.status"))["lastSeq"]
    async with client.subscribe(thread_id=thread_id) as events:
        async for event in events:
            if not event.get("ephemeral"):
                yield event
            if event["seq"] >= target:
                break


async def test_bad_input_is_an_acp_error_never_a_hang(editor, workspace):
    with pytest.raises(RequestError) as unknown:
        await prompt(editor, "thr_nonexistent", "hi")
    assert unknown.value.code == -32602 and "no open session" in str(unknown.value)
    with pytest.raises(RequestError) as missing_dir:
        await new_session(editor, workspace / "missing")
    assert missing_dir.value.code == -32602
    with pytest.raises(RequestError) as malformed:
        await editor.run(editor.conn._conn.send_request("session/prompt", {"sessionId": 5}))
    assert malformed.value.code == -32602
    session = await new_session(editor, workspace)
    await editor.run(editor.conn.close_session(session_id=session))
    with pytest.raises(RequestError) as closed:
        await prompt(editor, session, "hi")
    assert "closed" in str(closed.value)
    with pytest.raises(RequestError) as unknown_load:
        await editor.run(editor.conn.load_session(cwd=str(workspace), session_id="thr_nonexistent", mcp_servers=[]))
    assert unknown_load.value.code == -32000 and (unknown_load.value.data or {}).get("kind") == "not_found"


async def test_load_replays_the_history_and_leaves_the_thread_idle(editor, client, workspace):
    """A thread made elsewhere (the CLI, another editor) opens with its history (seed 003: nothing runs)."""
    thread_id = (await client.call("thread.create", workspace=str(workspace)))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread_id, text=script(
        {"say": "made a file"}, {"write": {"path": "f.txt", "content": "x\n"}}))
    await wait_run_terminal(client, thread_id, sent["runId"])
    loaded = await editor.run(editor.conn.load_session(cwd=str(workspace), session_id=thread_id, mcp_servers=[]))
    assert loaded.modes.current_mode_id == "scripted"
    await editor.wait_for(lambda: "made a file" in editor.text(thread_id))
    assert "@script" in editor.text(thread_id, "user_message_chunk")
    calls = editor.tool_calls(thread_id)
    assert [c["status"] for c in calls.values() if c["kind"] == "edit"] == ["completed"]
    assert (await client.call("thread.get", threadId=thread_id))["thread"]["status"] == "idle"
    # …and it takes the next prompt as any session does.
    assert await prompt(editor, thread_id, "go on") == "end_turn"
    assert "You said: go on" in editor.text(thread_id)


async def test_list_filters_by_cwd_resume_attaches_without_replay(fresh_editor, workspace, tmp_path):
    editor = fresh_editor  # the listing of every session: no other test's in this daemon
    other = tmp_path / "other"
    other.mkdir()
    mine = await new_session(editor, workspace)
    await new_session(editor, other)
    listed = await editor.run(editor.conn.list_sessions(cwd=str(workspace)))
    assert [s.session_id for s in listed.sessions] == [mine]
    assert listed.sessions[0].cwd == str(workspace)
    everything = await editor.run(editor.conn.list_sessions())
    assert mine in [s.session_id for s in everything.sessions] and len(everything.sessions) == 2
    assert await prompt(editor, mine, "first") == "end_turn"
    before = len(editor.updates[mine])
    await editor.run(editor.conn.resume_session(cwd=str(workspace), session_id=mine, mcp_servers=[]))
    assert await prompt(editor, mine, "second") == "end_turn"
    replayed = [u for u in editor.updates[mine][before:] if u.session_update == "user_message_chunk"]
    assert replayed == []  # resume does not replay
    assert "You said: second" in editor.text(mine)


async def test_fork_is_a_thread_fork(editor, client, workspace):
    session = await new_session(editor, workspace)
    assert await prompt(editor, session, "remember alpha") == "end_turn"
    forked = await editor.run(editor.conn.fork_session(cwd=str(workspace), session_id=session, mcp_servers=[]))
    fork = (await client.call("thread.get", threadId=forked.session_id))["thread"]
    assert fork["parentThreadId"] == session and fork["relationshipToParent"] == "fork"  # F6
    assert await prompt(editor, forked.session_id, script({"recall": ["alpha"]})) == "end_turn"
    assert "alpha=native" in editor.text(forked.session_id)


async def test_slash_commands(editor, client, workspace):
    session = await new_session(editor, workspace)
    commands = next(u for u in editor.updates[session] if u.session_update == "available_commands_update")
    assert {c.name for c in commands.available_commands} >= {"fork", "rollback", "checkpoints", "diff", "switch",
                                                             "retry", "stop"}
    assert await prompt(editor, session, script({"write": {"path": "f.txt", "content": "one\n"}})) == "end_turn"
    assert await prompt(editor, session, script({"write": {"path": "f.txt", "content": "two\n"}})) == "end_turn"
    await prompt(editor, session, "/checkpoints")
    assert "after run 2: captured" in editor.text(session)
    await prompt(editor, session, "/diff")
    assert "+two" in editor.text(session) and "-one" in editor.text(session)
    # /rollback asks first (F14): kept when the editor says no…
    editor.choose = lambda r: "keep"
    await prompt(editor, session, "/rollback 1")
    assert "Not rolled back." in editor.text(session) and (workspace / "f.txt").read_text() == "two\n"
    editor.choose = lambda r: "rollback"
    await prompt(editor, session, "/rollback 1")
    assert (workspace / "f.txt").read_text() == "one\n"
    runs = (await client.call("thread.get", threadId=session))["runs"]
    assert [r["status"] for r in runs] == ["completed", "rolled_back"]
    await prompt(editor, session, "/fork")
    assert "Forked as session thr_" in editor.text(session)
    # /retry: the latest run failed once, its retry goes on (F2).
    assert await prompt(editor, session, script({"fail": "flaky", "once": True}, {"say": "second try"})) == "end_turn"
    assert await prompt(editor, session, "/retry") == "end_turn"
    assert "second try" in editor.text(session)


async def test_provider_instances_are_modes_and_switching_one_moves_the_thread(tmp_path, short_dir, workspace):
    config = tmp_path / "config.toml"
    config.write_text('[providers.basic]\nkind = "scripted"\n')
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    editor = Editor(daemon, tmp_path / "acp.stderr")
    try:
        await editor.start()
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION))
        created = await editor.run(editor.conn.new_session(cwd=str(workspace), mcp_servers=[]))
        session = created.session_id
        assert {m.id for m in created.modes.available_modes} == {"scripted", "basic"}
        assert await prompt(editor, session, "remember alpha") == "end_turn"
        await editor.run(editor.conn.set_session_mode(session_id=session, mode_id="basic"))
        assert "current_mode_update" in editor.kinds(session)
        assert await prompt(editor, session, script({"recall": ["alpha"]})) == "end_turn"
        assert "alpha=context" in editor.text(session)  # a switch with its handoff (F5)
        with pytest.raises(RequestError):
            await editor.run(editor.conn.set_session_mode(session_id=session, mode_id="nope"))
    finally:
        await editor.stop()
        await daemon.terminate()


async def test_the_provider_is_a_config_option_too(tmp_path, short_dir, workspace):
    """Issue 26: ``configOptions`` hold one select, ``provider`` (the
    instances, as the modes); ``session/set_config_option`` of it is the
    same switch with its handoff (F5), and the mode follows."""
    config = tmp_path / "config.toml"
    config.write_text('[providers.basic]\nkind = "scripted"\n')
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    editor = Editor(daemon, tmp_path / "acp.stderr")
    try:
        await editor.start()
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION))
        created = await editor.run(editor.conn.new_session(cwd=str(workspace), mcp_servers=[]))
        session = created.session_id
        (option,) = created.config_options
        assert option.id == "provider" and option.type == "select" and option.current_value == "scripted"
        assert {o.value for o in option.options} == {"scripted", "basic"}
        assert await prompt(editor, session, "remember alpha") == "end_turn"
        answer = await editor.run(editor.conn.set_config_option(config_id="provider", session_id=session, value="basic"))
        assert answer.config_options[0].current_value == "basic"
        assert {"current_mode_update", "config_option_update"} <= set(editor.kinds(session))
        assert await prompt(editor, session, script({"recall": ["alpha"]})) == "end_turn"
        assert "alpha=context" in editor.text(session)
        resumed = await editor.run(editor.conn.resume_session(cwd=str(workspace), session_id=session, mcp_servers=[]))
        assert resumed.config_options[0].current_value == "basic" and resumed.modes.current_mode_id == "basic"
        for config_id, value, field in (("model", "basic", "configId"), ("provider", "nope", "value"),
                                        ("provider", True, "value")):
            with pytest.raises(RequestError) as bad:
                await editor.run(editor.conn.set_config_option(config_id=config_id, session_id=session, value=value))
            assert bad.value.code == -32602 and bad.value.data["field"] == field
    finally:
        await editor.stop()
        await daemon.terminate()
    assert "Traceback" not in editor.stderr()


async def test_a_daemon_restart_cancels_the_prompt_it_cut_and_the_next_one_works(tmp_path, short_dir, workspace):
    data_dir, socket = tmp_path / "data", short_dir / "s.sock"
    daemon = await start_daemon(data_dir, socket)
    editor = Editor(daemon, tmp_path / "acp.stderr")
    try:
        await editor.start()
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION))
        session = await new_session(editor, workspace)
        cut = asyncio.run_coroutine_threadsafe(
            editor.conn.prompt(session_id=session, prompt=[text_block(script({"say": "working"}, {"hang": True}))]),
            editor.loop)
        await editor.wait_for(lambda: "working" in editor.text(session))
        await daemon.kill()  # F12
        answer = await trio.to_thread.run_sync(lambda: cut.result(WAIT))
        assert answer.stop_reason == "cancelled"
        assert "restarted" in editor.text(session)
        daemon = await start_daemon(data_dir, socket)
        assert await prompt(editor, session, "after the restart") == "end_turn"
        assert "You said: after the restart" in editor.text(session)
    finally:
        await editor.stop()
        await daemon.terminate()
    assert "Traceback" not in editor.stderr()


async def test_acp_starts_a_daemon_when_none_listens(tmp_path, short_dir, workspace):
    data_dir, socket = tmp_path / "data", short_dir / "s.sock"
    nobody = type("Where", (), {"data_dir": data_dir, "socket": socket})()
    editor = Editor(nobody, tmp_path / "acp.stderr")
    pid = None
    try:
        await editor.start()
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION))
        session = await new_session(editor, workspace)
        assert await prompt(editor, session, "hi") == "end_turn"
        from agentd.connection import DaemonConnection

        with DaemonConnection.open(socket) as daemon:
            pid = daemon.call("daemon.status")["pid"]
    finally:
        await editor.stop()
        if pid is not None:
            # It outlives the editor (its threads are the editor's sessions): stop it here, by its pid.
            from tests.helpers import wait_process_gone

            os.kill(pid, 15)
            await wait_process_gone(pid)
    assert pid is not None


async def test_a_free_text_question_is_answered_by_the_next_prompt(editor, workspace):
    session = await new_session(editor, workspace)
    first = asyncio.run_coroutine_threadsafe(editor.conn.prompt(session_id=session, prompt=[text_block(script(
        {"ask": {"questions": [{"id": "name", "question": "What name?"}]}}))]), editor.loop)
    await editor.wait_for(lambda: "What name?" in editor.text(session))
    assert await prompt(editor, session, "Ada") == "end_turn"
    assert (await trio.to_thread.run_sync(lambda: first.result(WAIT))).stop_reason == "end_turn"
    assert "name=Ada" in editor.text(session)


async def test_a_pending_approval_is_asked_again_when_the_session_is_loaded(editor, client, workspace):
    """The approval waited while no editor had the thread open (sent from the CLI): loading it asks (F15)."""
    thread_id = (await client.call("thread.create", workspace=str(workspace)))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread_id, text=script(
        {"approval": {"kind": "command", "command": "deploy"}}))
    await wait_event_of(client, thread_id, "approval.requested")
    await editor.run(editor.conn.load_session(cwd=str(workspace), session_id=thread_id, mcp_servers=[]))
    run = await wait_run_terminal(client, thread_id, sent["runId"])
    assert run["status"] == "completed"
    assert [p.tool_call.raw_input["command"] for p in editor.permissions] == ["deploy"]
    await editor.wait_for(lambda: "approval: accept" in editor.text(thread_id))


async def test_without_native_steer_a_second_prompt_is_queued(tmp_path, short_dir, workspace):
    config = tmp_path / "config.toml"
    config.write_text('[daemon]\ndefault_provider = "basic"\n\n[providers.basic]\nkind = "scripted"\n'
                      'capabilities = { steer = false }\n')
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    editor = Editor(daemon, tmp_path / "acp.stderr")
    try:
        await editor.start()
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION))
        session = await new_session(editor, workspace)
        editor.gate = await editor.run(_event())
        first = asyncio.run_coroutine_threadsafe(editor.conn.prompt(session_id=session, prompt=[text_block(script(
            {"approval": {"kind": "command", "command": "make"}}, {"say": "first done"}))]), editor.loop)
        await editor.wait_for(lambda: editor.permissions)
        second = asyncio.run_coroutine_threadsafe(
            editor.conn.prompt(session_id=session, prompt=[text_block("second")]), editor.loop)
        from agentd.protocol.client import Client

        async with Client.connect(daemon.socket) as client:
            queued = await wait_event(client, lambda e: e["type"] == "run.queued" and e["payload"]["run"]["ordinal"] == 2,
                                      thread_id=session)
            assert queued["payload"]["dispatchMode"] == "queue_after_active"  # F3: as `agentd send` does
            editor.loop.call_soon_threadsafe(editor.gate.set)
            assert (await trio.to_thread.run_sync(lambda: first.result(WAIT))).stop_reason == "end_turn"
            assert (await trio.to_thread.run_sync(lambda: second.result(WAIT))).stop_reason == "end_turn"
            runs = (await client.call("thread.get", threadId=session))["runs"]
        assert [r["status"] for r in runs] == ["completed", "completed"]
        assert editor.text(session).index("first done") < editor.text(session).index("You said: second")
    finally:
        await editor.stop()
        await daemon.terminate()
    assert "Traceback" not in editor.stderr()


async def test_two_editors_share_one_thread(editor, daemon, workspace, tmp_path):
    """The same conversation open in two editors (or the CLI): each sees what the other sent and got."""
    session = await new_session(editor, workspace)
    other = Editor(daemon, tmp_path / "other.stderr")
    await other.start()
    try:
        await other.run(other.conn.initialize(protocol_version=PROTOCOL_VERSION))
        await other.run(other.conn.resume_session(cwd=str(workspace), session_id=session, mcp_servers=[]))
        assert await prompt(editor, session, "from the first editor") == "end_turn"
        await other.wait_for(lambda: "You said: from the first editor" in other.text(session))
        assert other.text(session, "user_message_chunk") == "from the first editor"
        assert editor.text(session, "user_message_chunk") == ""  # its own prompt is not echoed back
    finally:
        await other.stop()
    assert "Traceback" not in other.stderr()


async def test_questions_are_a_form_where_the_editor_takes_elicitations(daemon, tmp_path, workspace):
    editor = Editor(daemon, tmp_path / "acp.stderr")
    await editor.start()
    try:
        capabilities = ClientCapabilities(elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities()))
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=capabilities))
        session = await new_session(editor, workspace)
        assert await prompt(editor, session, script({"ask": {"questions": [
            {"id": "color", "question": "Which color?", "options": ["red", "blue"]},
            {"id": "name", "question": "What name?"}]}})) == "end_turn"
        [(message, mode)] = editor.elicitations
        fields = mode.requested_schema.properties
        assert fields["color"].enum == ["red", "blue"] and fields["name"].enum is None
        assert "color=red" in editor.text(session) and "name=typed" in editor.text(session)
        assert editor.permissions == []
    finally:
        await editor.stop()
    assert "Traceback" not in editor.stderr()


async def test_reopening_sessions_holds_no_subscription_and_keeps_a_waiting_prompt(editor, workspace):
    """A connection holds at most 64 subscriptions: a closed session gives its one back."""
    session = await new_session(editor, workspace)
    for _ in range(70):
        await editor.run(editor.conn.close_session(session_id=session))
        await editor.run(editor.conn.resume_session(cwd=str(workspace), session_id=session, mcp_servers=[]))
    editor.gate = await editor.run(_event())
    waiting = asyncio.run_coroutine_threadsafe(editor.conn.prompt(session_id=session, prompt=[text_block(script(
        {"approval": {"kind": "command", "command": "make"}}))]), editor.loop)
    await editor.wait_for(lambda: editor.permissions)
    # The editor opens it again while the prompt waits: the same session goes on.
    await editor.run(editor.conn.load_session(cwd=str(workspace), session_id=session, mcp_servers=[]))
    editor.loop.call_soon_threadsafe(editor.gate.set)
    assert (await trio.to_thread.run_sync(lambda: waiting.result(WAIT))).stop_reason == "end_turn"
    assert "approval: accept" in editor.text(session)


async def test_stop_and_merge_back_commands(editor, client, workspace):
    session = await new_session(editor, workspace)
    hanging = asyncio.run_coroutine_threadsafe(editor.conn.prompt(session_id=session, prompt=[text_block(script(
        {"say": "working"}, {"hang": True}))]), editor.loop)
    await editor.wait_for(lambda: "working" in editor.text(session))
    assert await prompt(editor, session, "/stop") == "end_turn"  # the Stop button (F10)
    assert (await trio.to_thread.run_sync(lambda: hanging.result(WAIT))).stop_reason == "cancelled"
    assert "Stopped (interrupting run_" in editor.text(session)
    await client.call("thread.queue.release", threadId=session)
    assert await prompt(editor, session, "base work") == "end_turn"
    forked = await editor.run(editor.conn.fork_session(cwd=str(workspace), session_id=session, mcp_servers=[]))
    assert await prompt(editor, forked.session_id, "the fork found zeta") == "end_turn"
    # /merge-back FORK brings what the fork did home with the message (F7).
    assert await prompt(editor, session, f"/merge-back {forked.session_id} " + script({"recall": ["zeta"]})) == "end_turn"
    assert "zeta=context" in editor.text(session)
    with pytest.raises(RequestError) as unknown:
        await prompt(editor, session, "/switch nope")
    assert unknown.value.code == -32602 and "no provider instance 'nope'" in str(unknown.value)


#: a 1×1 PNG
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
GIF = b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00" \
      b"\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"


async def test_images_in_a_prompt_reach_the_provider_or_are_refused_saying_why(tmp_path, short_dir, workspace):
    """Issue 26: an image block (and an embedded image resource) of a prompt
    goes to the thread's provider — the scripted agent reads the files agentd
    keeps and says what it got — and is kept beside the store, not in it; an
    instance that takes no images refuses the message up front."""
    config = tmp_path / "config.toml"
    config.write_text('[providers.blind]\nkind = "scripted"\nargs = ["--no-images"]\n')
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    editor = Editor(daemon, tmp_path / "acp.stderr")
    try:
        await editor.start()
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION))
        session = await new_session(editor, workspace)
        gif = resource_block(BlobResourceContents(uri="file:///tmp/dot.gif", blob=base64.b64encode(GIF).decode(),
                                                  mime_type="image/gif"))
        answer = await editor.run(editor.conn.prompt(session_id=session, prompt=[
            text_block(script({"reportImages": True})), image_block(base64.b64encode(PNG).decode(), "image/png"), gif]))
        assert answer.stop_reason == "end_turn"
        said = editor.text(session)
        assert f"image image/png {len(PNG)} bytes sha256={hashlib.sha256(PNG).hexdigest()}" in said
        assert f"image image/gif {len(GIF)} bytes sha256={hashlib.sha256(GIF).hexdigest()}" in said
        async with Client.connect(daemon.socket) as client:
            (message,) = [m for m in (await client.call("thread.get", threadId=session))["messages"] if m["role"] == "user"]
            assert message["attachments"] == [
                {"type": "image", "mimeType": "image/png", "sha256": hashlib.sha256(PNG).hexdigest(), "size": len(PNG)},
                {"type": "image", "mimeType": "image/gif", "sha256": hashlib.sha256(GIF).hexdigest(), "size": len(GIF)}]
            kept = tmp_path / "data" / "attachments" / session / hashlib.sha256(PNG).hexdigest()
            assert kept.read_bytes() == PNG and kept.stat().st_mode & 0o777 == 0o600
            # Too many bytes together, or bytes that are not the type said: invalid_params, nothing stored.
            runs_before = len((await client.call("thread.get", threadId=session))["runs"])
            too_big = "A" * (((9 << 20) // 3 + 1) * 4)
            with pytest.raises(AgentdError) as big:
                await client.call("thread.message.send", threadId=session, text="look",
                                  attachments=[{"type": "image", "mimeType": "image/png", "data": too_big}])
            assert big.value.kind == "invalid_params" and big.value.data["field"] == "attachments"
            with pytest.raises(AgentdError) as fake:
                await client.call("thread.message.send", threadId=session, text="look",
                                  attachments=[{"type": "image", "mimeType": "image/jpeg",
                                                "data": base64.b64encode(PNG).decode()}])
            assert fake.value.kind == "invalid_params" and fake.value.data["field"] == "attachments[0].data"
            assert len((await client.call("thread.get", threadId=session))["runs"]) == runs_before
        # Loading the session again replays the images with the user's message.
        before = len(editor.updates[session])
        await editor.run(editor.conn.load_session(cwd=str(workspace), session_id=session, mcp_servers=[]))
        replayed = [u.content for u in editor.updates[session][before:] if u.session_update == "user_message_chunk"]
        assert [(c.type, getattr(c, "mime_type", None), getattr(c, "data", None)) for c in replayed[1:]] == [
            ("image", "image/png", base64.b64encode(PNG).decode()), ("image", "image/gif", base64.b64encode(GIF).decode())]
        # An instance that takes no images: the editor learns why, per message.
        await editor.run(editor.conn.set_session_mode(session_id=session, mode_id="blind"))
        with pytest.raises(RequestError) as refused:
            await editor.run(editor.conn.prompt(session_id=session, prompt=[
                text_block("what is this?"), image_block(base64.b64encode(PNG).decode(), "image/png")]))
        assert refused.value.data["kind"] == "unsupported" and "--no-images" in str(refused.value)
        assert await prompt(editor, session, "just text then") == "end_turn"
        assert "You said: just text then" in editor.text(session)
        # Deleting the thread takes its images with it.
        await editor.run(editor.conn.close_session(session_id=session))
        async with Client.connect(daemon.socket) as client:
            await client.call("thread.delete", threadId=session)
        assert not kept.parent.exists()
    finally:
        await editor.stop()
        await daemon.terminate()
    assert "Traceback" not in editor.stderr()


async def test_images_reach_an_acp_provider_that_takes_them(tmp_path, short_dir, workspace):
    """Issue 26: behind ``agentd acp``, an ACP provider instance gets the
    prompt's image as an ACP ``image`` block when its agent said
    ``promptCapabilities.image``; one whose agent did not refuses it up front."""
    from tests.supervisor.test_acp_provider import provider_toml, prompts

    state = tmp_path / "agent-state"
    config = tmp_path / "config.toml"
    config.write_text('[daemon]\ndefault_provider = "eyes"\n\n'
                      + provider_toml("eyes", state, env={"FAKE_ACP_STATE": str(state), "FAKE_ACP_IMAGES": "1"})
                      + "\n" + provider_toml("blind", state))
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    editor = Editor(daemon, tmp_path / "acp.stderr")
    try:
        await editor.start()
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION))
        session = await new_session(editor, workspace)
        answer = await editor.run(editor.conn.prompt(session_id=session, prompt=[
            text_block("look at this"), image_block(base64.b64encode(PNG).decode(), "image/png")]))
        assert answer.stop_reason == "end_turn"
        assert "Echo: look at this" in editor.text(session)
        (logged,) = [p for p in prompts(tmp_path) if p.get("images")]
        assert logged["images"] == [["image/png", hashlib.sha256(PNG).hexdigest()]]
        assert logged["texts"][-1] == "look at this"
        other = await new_session(editor, workspace)
        await editor.run(editor.conn.set_session_mode(session_id=other, mode_id="blind"))
        with pytest.raises(RequestError) as refused:
            await editor.run(editor.conn.prompt(session_id=other, prompt=[
                text_block("and this?"), image_block(base64.b64encode(PNG).decode(), "image/png")]))
        assert refused.value.data["kind"] == "unsupported"
        assert "promptCapabilities.image" in str(refused.value)
    finally:
        await editor.stop()
        await daemon.terminate()
    assert "Traceback" not in editor.stderr()


async def test_an_image_steers_the_running_turn(editor, client, workspace):
    """Issue 26: a prompt with an image while the session's run is going is a
    native steer on the scripted agent, and the image comes with it."""
    session = await new_session(editor, workspace)
    editor.gate = await editor.run(_event())
    first = asyncio.run_coroutine_threadsafe(editor.conn.prompt(session_id=session, prompt=[text_block(script(
        {"approval": {"kind": "command", "command": "make"}}, {"reportImages": True}))]), editor.loop)
    await editor.wait_for(lambda: editor.permissions)
    steer = asyncio.run_coroutine_threadsafe(editor.conn.prompt(session_id=session, prompt=[
        text_block("also this"), image_block(base64.b64encode(PNG).decode(), "image/png")]), editor.loop)
    await wait_event(client, lambda e: e["type"] == "message.steered", thread_id=session)
    editor.loop.call_soon_threadsafe(editor.gate.set)
    assert (await trio.to_thread.run_sync(lambda: first.result(WAIT))).stop_reason == "end_turn"
    assert (await trio.to_thread.run_sync(lambda: steer.result(WAIT))).stop_reason == "end_turn"
    assert f"image image/png {len(PNG)} bytes sha256={hashlib.sha256(PNG).hexdigest()}" in editor.text(session)


async def test_the_editors_mcp_servers_reach_the_provider_and_stay_with_the_thread(editor, client, workspace):
    """Issue 26: ``session/new {mcpServers}`` (stdio and http) goes to the
    thread's provider sessions — the scripted agent says what it was given —
    and is kept on the thread; one named as agentd's own tool is renamed;
    ``session/resume`` with other servers replaces them, at the next run."""
    caps = editor.init.agent_capabilities.mcp_capabilities
    assert caps.http is True and not caps.sse
    servers = [McpServerStdio(name="agentd", command="/bin/true", args=[], env=[]),
               McpServerStdio(name="files", command="/usr/bin/env", args=["files-mcp"],
                              env=[EnvVariable(name="TOKEN", value="s3cret")]),
               HttpMcpServer(type="http", name="web", url="http://127.0.0.1:9/mcp",
                             headers=[HttpHeader(name="Authorization", value="Bearer x")])]
    session = (await editor.run(editor.conn.new_session(cwd=str(workspace), mcp_servers=servers))).session_id
    kept = (await client.call("thread.get", threadId=session))["thread"]["mcpServers"]
    assert [(s["name"], s["type"]) for s in kept] == [("agentd-editor", "stdio"), ("files", "stdio"), ("web", "http")]
    # Their secrets' names only: the values are in no record (tests/actors/test_mcp_secrets.py).
    assert kept[1]["envNames"] == ["TOKEN"] and kept[2]["headerNames"] == ["Authorization"]
    assert "s3cret" not in json.dumps(kept)
    assert await prompt(editor, session, script({"reportMcp": True})) == "end_turn"
    assert ("mcp: agentd-editor (stdio /bin/true), files (stdio /usr/bin/env), web (http http://127.0.0.1:9/mcp)"
            in editor.text(session))
    # The values reach the provider from the thread's secrets file (the agent says their SHA-256).
    assert await prompt(editor, session, script({"reportMcpValues": True})) == "end_turn"
    assert f"mcp value files env TOKEN sha256={hashlib.sha256(b's3cret').hexdigest()}" in editor.text(session)
    assert f"mcp value web header Authorization sha256={hashlib.sha256(b'Bearer x').hexdigest()}" in editor.text(session)
    # Servers agentd refuses refuse the session: no thread is made for it.
    before = (await client.call("thread.list"))["threads"]
    with pytest.raises(RequestError):
        await editor.run(editor.conn.new_session(cwd=str(workspace), mcp_servers=[
            McpServerStdio(name="n" * 65, command="/bin/true", args=[], env=[])]))
    assert (await client.call("thread.list"))["threads"] == before
    # Opened again with other servers: the thread's provider gets those from its next run on.
    await editor.run(editor.conn.close_session(session_id=session))
    await editor.run(editor.conn.resume_session(cwd=str(workspace), session_id=session, mcp_servers=[servers[1]]))
    assert await prompt(editor, session, script({"reportMcp": True})) == "end_turn"
    assert editor.text(session).endswith("mcp: files (stdio /usr/bin/env)")
    # A fork gets the servers its editor names (the source's are inherited, then replaced).
    forked = await editor.run(editor.conn.fork_session(cwd=str(workspace), session_id=session, mcp_servers=[]))
    assert (await client.call("thread.get", threadId=forked.session_id))["thread"]["mcpServers"] is None
    forked = await editor.run(editor.conn.fork_session(cwd=str(workspace), session_id=session, mcp_servers=None))
    inherited = (await client.call("thread.get", threadId=forked.session_id))["thread"]["mcpServers"]
    assert [s["name"] for s in inherited] == ["files"]


async def test_the_editors_mcp_servers_reach_an_acp_provider(tmp_path, short_dir, workspace):
    """Issue 26: behind ``agentd acp``, an ACP provider instance's agent gets
    the editor's stdio server in its ``session/new {mcpServers}`` beside
    agentd's own, and not an http one, which it did not say it takes."""
    from tests.supervisor.test_acp_provider import provider_toml

    state = tmp_path / "agent-state"
    config = tmp_path / "config.toml"
    config.write_text('[daemon]\ndefault_provider = "fake"\n\n' + provider_toml("fake", state))
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    editor = Editor(daemon, tmp_path / "acp.stderr")
    try:
        await editor.start()
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION))
        servers = [McpServerStdio(name="files", command="/usr/bin/env", args=[],
                                  env=[EnvVariable(name="TOKEN", value="s3cret")]),
                   HttpMcpServer(type="http", name="web", url="http://127.0.0.1:9/mcp", headers=[])]
        session = (await editor.run(editor.conn.new_session(cwd=str(workspace), mcp_servers=servers))).session_id
        assert await prompt(editor, session, "hello") == "end_turn"
        (native,) = [json.loads(p.read_text()) for p in state.glob("fake_*.json")]
        assert "files" in native["mcpServers"] and "web" not in native["mcpServers"]
        # The value, kept out of agentd's records, reaches the agent from the thread's secrets file.
        assert native["mcpEnv"]["files"] == {"TOKEN": "s3cret"}
        assert "takes no http MCP servers: web not passed on" in daemon.log_text()
    finally:
        await editor.stop()
        await daemon.terminate()
    assert "Traceback" not in editor.stderr()

"""``agentd acp`` driven as an editor drives it: the official ACP SDK's client
side (``acp.connect_to_agent`` over the subprocess's stdio) against a real
daemon on the scripted agent (issue 26; F1, F2, F3, F6, F10, F12, F13, F14, F15).

The SDK is asyncio and the suite is trio: the editor runs on an asyncio loop
of its own in a worker thread (``Editor``), and each test awaits its calls
from trio. Nothing waits on time: every wait is for a message or an event.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Awaitable, Callable

import pytest
import trio

from acp import PROTOCOL_VERSION, RequestError, connect_to_agent, text_block
from acp.schema import AllowedOutcome, ClientCapabilities, DeniedOutcome, RequestPermissionResponse

from agentd.launch import start_daemon
from tests.helpers import script, wait_run_terminal

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
async def editor(daemon, tmp_path):
    editor = Editor(daemon, tmp_path / "acp.stderr")
    await editor.start()
    init = await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION,
                                                   client_capabilities=ClientCapabilities()))
    editor.init = init
    try:
        yield editor
    finally:
        await editor.stop()
        assert "Traceback" not in editor.stderr(), editor.stderr()


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
    assert caps.prompt_capabilities.embedded_context is True and not caps.prompt_capabilities.image


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
    stop = await prompt(editor, session, script(
        {"approval": {"kind": "command", "command": "make"}},
        {"approval": {"kind": "command", "command": "make install"}},
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
    from tests.helpers import wait_event

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

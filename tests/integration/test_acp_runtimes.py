"""``agentd acp`` on the real pinned Codex and Claude Code, offline (issue 26): an
editor (the ACP SDK's client side) prompts, sees the command as an ``execute``
tool call, and answers the runtime's approval through ``session/request_permission``.

The runtimes talk to the fake model servers of ``scripts/offline`` (see
tests/integration/test_codex.py and test_claude.py); skipped without them.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from acp import PROTOCOL_VERSION, image_block, text_block
from acp.schema import EnvVariable, McpServerStdio
from agentd.launch import start_daemon
from scripts.offline import claude as claude_world
from scripts.offline import codex as codex_world
from tests.cli.test_acp_agent import Editor, new_session, prompt
from tests.integration.shared import module_daemon, requests_in

MCP_ECHO = Path(__file__).resolve().parents[1] / "fixtures" / "mcp_echo.py"
#: per runtime: its world, and the command its fake model has it run for RUN_COMMAND
RUNTIMES = {
    "codex": (codex_world, "agentd-ran-this", "approved.txt"),
    "claude": (claude_world, "hello-from-bash", "approved-by-user.txt"),
}


@pytest.fixture(scope="module")
def runtime_daemons(tmp_path_factory):
    """Per installed runtime, the module's daemon whose default provider it is
    (``tests/integration/shared.py``), for the tests whose editor sessions
    are threads of their own; the one about the data dir's files after the
    daemon stopped starts its own. (Started before the module's tests, as
    pytest-trio runs each test in a ``trio.run`` of its own.)"""
    with contextlib.ExitStack() as stack:
        started = {}
        for kind, (offline, _, _) in RUNTIMES.items():
            if (offline.codex_binary() if kind == "codex" else offline.claude_binary()) is None:
                continue
            root = tmp_path_factory.mktemp(f"acp-{kind}")
            world = offline.make_world(root / kind)
            stack.callback(world.close)
            short = Path(tempfile.mkdtemp(prefix="ad-"))
            stack.callback(shutil.rmtree, short, True)
            started[kind] = stack.enter_context(module_daemon(
                (root / "data", short / "agentd.sock"), world.provider_toml(kind),
                daemon=f'default_provider = "{kind}"\ninterrupt_grace = 30', **{kind: world}))
        yield started


@pytest.mark.parametrize("kind", sorted(RUNTIMES))
async def test_an_editor_drives_a_real_runtime_through_agentd_acp(kind, tmp_path, runtime_daemons):
    offline, output, approved_file = RUNTIMES[kind]
    binary = offline.codex_binary() if kind == "codex" else offline.claude_binary()
    if binary is None:
        pytest.skip(offline.SKIP_REASON)
    shared = runtime_daemons[kind]
    world, daemon = shared.world, shared.process
    workspace = tmp_path / "ws"
    workspace.mkdir()
    editor = Editor(daemon, tmp_path / "acp.stderr")
    try:
        await editor.start()
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION))
        session = await new_session(editor, workspace)
        assert await prompt(editor, session, "RUN_COMMAND please") == "end_turn"
        calls = editor.tool_calls(session)
        executed = [c for c in calls.values() if c.get("kind") == "execute"]
        assert executed and executed[-1]["status"] == "completed", calls
        assert output in json.dumps(executed[-1]) + editor.text(session)
        assert await prompt(editor, session, "ASK_APPROVAL please") == "end_turn"
        assert editor.permissions, "the runtime's approval reached the editor"
        assert [o.kind for o in editor.permissions[0].options] == ["allow_once", "allow_always", "reject_once"]
        assert (workspace / approved_file).exists()
        assert requests_in(world.model_requests(), str(workspace)), "the fake model answered"
    finally:
        await editor.stop()
    assert "Traceback" not in editor.stderr()


#: a 1×1 PNG
PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def images_sent(kind: str, body: dict) -> list[str]:
    """The images of a model request's user messages, as the model got them:
    Codex's ``input_image`` data URLs, Claude's base64 ``image`` blocks."""
    found = []
    for item in body.get("input" if kind == "codex" else "messages") or []:
        content = item.get("content") if isinstance(item, dict) else None
        for part in content if isinstance(content, list) else []:
            if kind == "codex" and part.get("type") == "input_image":
                found.append(part.get("image_url", ""))
            elif kind == "claude" and part.get("type") == "image":
                found.append((part.get("source") or {}).get("data", ""))
    return found


@pytest.mark.parametrize("kind", sorted(RUNTIMES))
async def test_an_editors_image_reaches_the_real_runtimes_model(kind, tmp_path, runtime_daemons):
    """Issue 26: an image block of the editor's prompt goes through agentd to
    the real runtime (Codex: a ``localImage`` input of the file agentd keeps;
    Claude: a base64 ``image`` block) and on to its model's request."""
    offline = RUNTIMES[kind][0]
    binary = offline.codex_binary() if kind == "codex" else offline.claude_binary()
    if binary is None:
        pytest.skip(offline.SKIP_REASON)
    shared = runtime_daemons[kind]
    world, daemon = shared.world, shared.process
    workspace = tmp_path / "ws"
    workspace.mkdir()
    editor = Editor(daemon, tmp_path / "acp.stderr")
    try:
        await editor.start()
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION))
        session = await new_session(editor, workspace)
        answer = await editor.run(editor.conn.prompt(session_id=session, prompt=[
            text_block("what is in this picture?"), image_block(PNG_B64, "image/png")]))
        assert answer.stop_reason == "end_turn"
        own = requests_in(world.model_requests(), str(workspace))
        sent = [image for body in own for image in images_sent(kind, body)]
        assert sent, json.dumps(own)[:3000]
        assert all(PNG_B64 in image or image.startswith("data:image/") for image in sent), sent
        if kind == "claude":
            assert PNG_B64 in sent
    finally:
        await editor.stop()
    assert "Traceback" not in editor.stderr()


@pytest.mark.parametrize("kind", sorted(RUNTIMES))
async def test_the_editors_mcp_server_reaches_the_real_runtime(kind, tmp_path, short_dir):
    """Issue 26: an editor's stdio MCP server (``tests/fixtures/mcp_echo.py``)
    given in ``session/new`` is started by the real runtime (Codex: the
    thread's ``config`` ``mcp_servers.NAME``; Claude: a second
    ``--mcp-config``), and its tool is offered to the model."""
    offline = RUNTIMES[kind][0]
    binary = offline.codex_binary() if kind == "codex" else offline.claude_binary()
    if binary is None:
        pytest.skip(offline.SKIP_REASON)
    world = offline.make_world(tmp_path / kind)
    config = tmp_path / "config.toml"
    config.write_text(f'[daemon]\ndefault_provider = "{kind}"\n\n' + world.provider_toml(kind))
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    log = tmp_path / "mcp-echo.log"
    server = McpServerStdio(name="editor-tools", command=sys.executable, args=[str(MCP_ECHO)],
                            env=[EnvVariable(name="MCP_ECHO_LOG", value=str(log))])
    editor = Editor(daemon, tmp_path / "acp.stderr")
    try:
        await editor.start()
        await editor.run(editor.conn.initialize(protocol_version=PROTOCOL_VERSION))
        session = (await editor.run(editor.conn.new_session(cwd=str(workspace), mcp_servers=[server]))).session_id
        assert await prompt(editor, session, "hello there") == "end_turn"
        assert "tools/list" in log.read_text().split(), "the runtime started the editor's server and listed its tools"
        offered = json.dumps(world.model_requests())
        assert "editor_echo" in offered, "its tool was offered to the model"
        assert "delegate_task" in offered, "agentd's own tool is still there beside it"
        if kind == "claude":
            assert list((tmp_path / "data" / "providers").rglob("mcp/*.json")), "the session's --mcp-config file"
    finally:
        await editor.stop()
        await daemon.terminate()
        world.close()
    assert "Traceback" not in editor.stderr()
    # The file (it may hold secrets) ended with the session.
    assert not list((tmp_path / "data" / "providers").rglob("mcp/*.json"))

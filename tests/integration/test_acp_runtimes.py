"""``agentd acp`` on the real pinned Codex and Claude Code, offline (issue 26): an
editor (the ACP SDK's client side) prompts, sees the command as an ``execute``
tool call, and answers the runtime's approval through ``session/request_permission``.

The runtimes talk to the fake model servers of ``scripts/offline`` (see
tests/integration/test_codex.py and test_claude.py); skipped without them.
"""

from __future__ import annotations

import json

import pytest

from acp import PROTOCOL_VERSION
from agentd.launch import start_daemon
from scripts.offline import claude as claude_world
from scripts.offline import codex as codex_world
from tests.cli.test_acp_agent import Editor, new_session, prompt

#: per runtime: its world, and the command its fake model has it run for RUN_COMMAND
RUNTIMES = {
    "codex": (codex_world, "agentd-ran-this", "approved.txt"),
    "claude": (claude_world, "hello-from-bash", "approved-by-user.txt"),
}


@pytest.mark.parametrize("kind", sorted(RUNTIMES))
async def test_an_editor_drives_a_real_runtime_through_agentd_acp(kind, tmp_path, short_dir):
    offline, output, approved_file = RUNTIMES[kind]
    binary = offline.codex_binary() if kind == "codex" else offline.claude_binary()
    if binary is None:
        pytest.skip(offline.SKIP_REASON)
    world = offline.make_world(tmp_path / kind)
    config = tmp_path / "config.toml"
    config.write_text(f'[daemon]\ndefault_provider = "{kind}"\ninterrupt_grace = 30\n\n' + world.provider_toml(kind))
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
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
        assert world.model_requests(), "the fake model answered"
    finally:
        await editor.stop()
        await daemon.terminate()
        world.close()
    assert "Traceback" not in editor.stderr()

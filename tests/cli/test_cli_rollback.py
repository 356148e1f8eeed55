"""``agentd rollback THREAD ORDINAL`` against a real daemon (SPEC F14, issue 10):
it names what will be undone and asks at a terminal, needs ``--yes``
elsewhere, and prints how to undo it."""

from __future__ import annotations

import json
import os
import pty

import pytest

from agentd.protocol.client import Client
from tests.cli_helpers import run, spawn
from tests.helpers import script, send_and_wait


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (issue 28 item 13): each test's thread works in a
    folder of its own."""
    return module_daemon


async def _two_runs(daemon, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    async with Client.connect(daemon.socket) as client:
        thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
        for n in (1, 2):
            await send_and_wait(client, thread_id, script({"write": {"path": "a.txt", "content": f"{n}\n"}},
                                                          {"say": f"wrote version {n}"}))
    return ws, thread_id


async def test_rollback_asks_at_a_terminal_and_says_how_to_undo(daemon, tmp_path):
    ws, thread_id = await _two_runs(daemon, tmp_path)
    leader, follower = pty.openpty()
    try:
        async with spawn(daemon, "rollback", thread_id, "1", stdin=follower) as cmd:
            os.close(follower)
            await cmd.wait_for("Roll back? [y/N]")
            os.write(leader, b"n\n")
            assert await cmd.finish() == 1
    finally:
        os.close(leader)
    assert "run 2 (completed): @script" in cmd.err.decode()
    assert "nothing was rolled back" in cmd.err.decode()
    assert (ws / "a.txt").read_text() == "2\n"

    leader, follower = pty.openpty()
    try:
        async with spawn(daemon, "rollback", thread_id, "1", stdin=follower) as cmd:
            os.close(follower)
            await cmd.wait_for("Roll back? [y/N]")
            os.write(leader, b"yes\n")
            assert await cmd.finish() == 0
    finally:
        os.close(leader)
    out = cmd.out.decode()
    assert "rolled back 1 run(s); 1 file(s) restored; agent memory: native" in out
    assert "agentd restore ckp_" in out
    assert (ws / "a.txt").read_text() == "1\n"


async def test_rollback_needs_yes_without_a_terminal_and_reports_errors(daemon, tmp_path):
    ws, thread_id = await _two_runs(daemon, tmp_path)
    refused = await run(daemon, "rollback", thread_id, "1", check=False)
    assert refused.returncode == 2 and b"pass --yes" in refused.stderr
    assert (ws / "a.txt").read_text() == "2\n"
    done = json.loads((await run(daemon, "rollback", thread_id, "0", "--yes", "--json")).stdout)
    assert done["targetOrdinal"] == 0 and len(done["rolledBackRunIds"]) == 2
    assert not (ws / "a.txt").exists()
    again = await run(daemon, "rollback", thread_id, "2", "--yes", check=False)
    assert again.returncode == 1 and b"rolled back already" in again.stderr
    missing = await run(daemon, "rollback", thread_id, "9", "--yes", check=False)
    assert missing.returncode == 1 and b"has no run 9" in missing.stderr
    bad = await run(daemon, "rollback", thread_id, "two", "--yes", check=False)
    assert bad.returncode == 2

"""``agentd checkpoints / diff / restore`` against a real daemon."""

from __future__ import annotations

import json

import pytest

from agentd.checkpoint_cmds import colour_patch
from agentd.protocol.client import Client
from tests.helpers import script, send_and_wait
from tests.cli.test_cli import run


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (issue 28 item 13): each test's thread works in a
    folder of its own."""
    return module_daemon


async def test_checkpoints_diff_and_restore_commands(daemon, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("kept\n")
    async with Client.connect(daemon.socket) as client:
        thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
        run1 = await send_and_wait(client, thread_id, script({"write": {"path": "a.txt", "content": "one\n"}}))
        await send_and_wait(client, thread_id, script({"write": {"path": "a.txt", "content": "two\n"}},
                                                      {"delete": {"path": "keep.txt"}}))
    table = (await run(daemon, "checkpoints", thread_id)).stdout.decode().splitlines()
    assert len(table) == 3 and "baseline" in table[0]
    assert "the whole workspace (no checkpoint before it" in table[0], "a baseline is no '0 files' (issue 28 item 7)"
    assert run1["checkpointId"] in table[1] and "1 file +1 -0" in table[1]
    assert "2 files +1 -2" in table[2]
    listed = json.loads((await run(daemon, "checkpoints", thread_id, "--json")).stdout)["checkpoints"]
    run2_id = listed[2]["id"]
    patch = (await run(daemon, "diff", run2_id)).stdout.decode()
    assert "-one" in patch and "+two" in patch and "\033[" not in patch  # plain when piped
    assert "\033[32m+two\033[0m" in colour_patch(patch)
    restored = (await run(daemon, "restore", run1["checkpointId"])).stdout.decode()
    assert "restored 2 files" in restored and "undo with `agentd restore ckp_" in restored
    assert (ws / "a.txt").read_text() == "one\n" and (ws / "keep.txt").read_text() == "kept\n"
    missing = await run(daemon, "diff", "ckp_nope", check=False)
    assert missing.returncode == 1 and b"no checkpoint ckp_nope" in missing.stderr


async def test_diff_takes_a_run_for_its_checkpoint(daemon, tmp_path):
    """``agentd diff RUN`` (SPEC F13, issue 10): a run id resolves to the run's
    checkpoint, for the target and for ``--base``; a run without one says so."""
    ws = tmp_path / "ws"
    ws.mkdir()
    async with Client.connect(daemon.socket) as client:
        thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
        run1 = await send_and_wait(client, thread_id, script({"write": {"path": "a.txt", "content": "one\n"}}))
        run2 = await send_and_wait(client, thread_id, script({"write": {"path": "a.txt", "content": "two\n"}}))
        run3 = await send_and_wait(client, thread_id, script({"write": {"path": "b.txt", "content": "bee\n"}}))
        hang = await client.call("thread.message.send", threadId=thread_id, text=script({"hang": True}))
        queued = await client.call("thread.message.send", threadId=thread_id, text="later",
                                   dispatchMode={"type": "queue_after_active"})
        await client.call("queued-run.cancel", runId=queued["runId"])
        await client.call("thread.stop", threadId=thread_id)
    by_run = (await run(daemon, "diff", run2["id"])).stdout.decode()
    assert by_run == (await run(daemon, "diff", run2["checkpointId"])).stdout.decode()
    assert "-one" in by_run and "+two" in by_run
    files = json.loads((await run(daemon, "diff", run3["id"], "--base", run1["id"], "--json")).stdout)["files"]
    assert {(f["path"], f["change"]) for f in files} == {("a.txt", "modified"), ("b.txt", "added")}
    none = await run(daemon, "diff", queued["runId"], check=False)
    assert none.returncode == 1
    assert none.stderr.decode().strip() == (
        f"agentd: run {queued['runId']} has no checkpoint (it is cancelled: a run gets one when it ends after it started)")
    assert hang["runId"] != queued["runId"]
    unknown = await run(daemon, "diff", "run_nope", check=False)
    assert unknown.returncode == 1 and b"run_nope" in unknown.stderr

"""Folders nested as deep as the system allows never break a checkpoint
(SPEC F13/F14, F20): an agent's command can nest ~2,000 folders inside
PATH_MAX, and the engine's walks were recursions (Python's limit is 1,000):
the capture failed with ``internal: RecursionError`` and a restore failed
the whole thread. Each walk is a loop, and holds a bounded number of
descriptors open."""

from __future__ import annotations

import os
import subprocess

import pytest
import trio

from tests.helpers import script, send_and_wait


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (issue 28 item 13): each test's thread works in a
    folder of its own."""
    return module_daemon

DEPTH = 1100  # past Python's recursion limit (1,000), as deep as an agent needs to go


def deep_file(ws, name: str, content: str) -> str:
    """``ws/d/d/…/name`` DEPTH folders down (made with relative steps, as
    every absolute path of it would pass PATH_MAX); its relative path."""
    here = os.getcwd()
    try:
        os.chdir(ws)
        for _ in range(DEPTH):
            os.makedirs("d", exist_ok=True)
            os.chdir("d")
        with open(name, "w") as f:
            f.write(content)
    finally:
        os.chdir(here)
    return "/".join(["d"] * DEPTH + [name])


def files_named(ws, name: str) -> int:
    return int(subprocess.run(["sh", "-c", f"find . -name {name} | wc -l"], cwd=ws, capture_output=True,
                              text=True, check=True).stdout)


@pytest.mark.parametrize("repository", [False, True], ids=["folder", "git repository"])
async def test_a_capture_a_rollback_and_a_restore_through_1100_nested_folders(client, tmp_path, repository):
    ws = tmp_path / "ws"
    ws.mkdir()
    if repository:
        env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}
        (ws / "top.txt").write_text("top\n")
        deep_file(ws, "tracked.txt", "tracked at the bottom")
        for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "c"]):
            subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True)
    try:
        await _capture_rollback_restore(client, ws)
    finally:
        subprocess.run(["rm", "-rf", "--", str(ws)], check=True)  # pytest's own cleanup recurses


async def _capture_rollback_restore(client, ws) -> None:
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    first = await send_and_wait(client, thread_id, "before")
    deep = deep_file(ws, "deep.txt", "at the bottom")
    with trio.fail_after(120):
        second = await send_and_wait(client, thread_id, script({"say": "the deep file is there"}))
    checkpoints = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
    (run2,) = [c for c in checkpoints if c["runId"] == second["id"] and c["kind"] == "run"]
    assert run2["status"] == "captured", run2
    baseline = [c for c in checkpoints if c["runId"] == first["id"] and c["kind"] == "run"][0]
    diff = await client.call("checkpoint.diff", checkpointId=run2["id"], baseCheckpointId=baseline["id"])
    assert deep in [f["path"] for f in diff["files"]], "the file at the bottom is in the diff"
    with trio.fail_after(120):
        rolled = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
    assert files_named(ws, "deep.txt") == 0, "the rollback took it away"
    with trio.fail_after(120):
        back = await client.call("checkpoint.restore", checkpointId=rolled["safetyCheckpointId"])
    assert back["complete"], back
    assert files_named(ws, "deep.txt") == 1, "and the undo brought it back"
    assert (await send_and_wait(client, thread_id, "still fine"))["status"] == "completed"


def test_a_tree_that_deep_is_removed_and_its_copy_refused_clearly(tmp_path):
    """``remove_tree`` (a worktree's, a copy's, a deleted thread's folders)
    takes such a tree away; a delegated task's workspace copy of it is an
    ``invalid_params`` that says why, not a failed thread."""
    from agentd.actors.trees import remove_tree
    from agentd.protocol.errors import InvalidParams
    from agentd.supervisor import workspace_copy

    ws = tmp_path / "ws"
    ws.mkdir()
    deep_file(ws, "x.txt", "x")
    target = tmp_path / "copy"

    async def copy() -> None:
        await workspace_copy.copy_workspace(str(ws), target, limit=1 << 20)

    with pytest.raises(InvalidParams) as refused:
        trio.run(copy)
    assert "nest deeper" in str(refused.value)
    assert not target.exists(), "nothing partial is left"
    remove_tree(ws)
    assert not ws.exists()

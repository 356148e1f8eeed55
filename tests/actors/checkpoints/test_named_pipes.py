"""A named pipe (FIFO) an agent's command leaves in the workspace never hangs
a thread (SPEC F13/F14, F20): git opens ``.gitignore`` and ``.gitattributes``
files with a plain ``open``, which waits forever on a FIFO; agentd notices
that wait, stops git, and records the capture as an ``error`` naming the
pipe, so the run ends, Stop is answered and the thread goes on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from agentd.actors.checkpoints.fifowatch import fifo_wait
from tests.helpers import script, send_and_wait


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (issue 28 item 13): each test's thread works in a folder of
    its own."""
    return module_daemon


def mkfifos(*paths: str) -> dict:
    """A scripted step whose command (the agent's, run as the user) makes FIFOs."""
    return {"command": {"argv": ["sh", "-c", " && ".join(
        [f"mkdir -p {os.path.dirname(p)}" for p in paths if os.path.dirname(p)] + [f"mkfifo {p}" for p in paths])]}}


async def checkpoints(client, thread_id: str) -> list[dict]:
    return (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]


async def test_a_fifo_gitignore_made_by_the_agent_ends_the_run_with_a_capture_error(client, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    with trio.fail_after(60):
        run = await send_and_wait(client, thread_id, script(mkfifos(".gitignore", "sub/.gitattributes"),
                                                            {"say": "made them"}))
    assert run["status"] == "completed", "the run ends as it would have"
    (failed,) = [c for c in await checkpoints(client, thread_id) if c["runId"] == run["id"] and c["kind"] == "run"]
    assert (failed["status"], failed["reason"]) == ("error", "named_pipe")
    assert "named pipe" in failed["detail"] and ".gitignore" in failed["detail"], failed["detail"]
    # The actor answers at once: nothing of it waits on git.
    with trio.fail_after(10):
        await client.call("thread.stop", threadId=thread_id)
        await client.call("thread.queue.release", threadId=thread_id)
    for name in (".gitignore", "sub/.gitattributes"):
        (ws / name).unlink()
    (ws / "b.txt").write_text("b\n")
    with trio.fail_after(60):
        again = await send_and_wait(client, thread_id, "and now")
    assert again["status"] == "completed"
    (captured,) = [c for c in await checkpoints(client, thread_id) if c["runId"] == again["id"] and c["kind"] == "run"]
    assert captured["status"] == "captured", "with the pipes gone the next capture works"


async def test_a_fifo_gitattributes_does_not_hang_a_diff(client, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    run = await send_and_wait(client, thread_id, script({"write": {"path": "x.txt", "content": "x"}}))
    checkpoint_id = run["checkpointId"]
    os.mkfifo(ws / ".gitattributes")
    with trio.fail_after(30):
        try:
            await client.call("checkpoint.diff", checkpointId=checkpoint_id)
        except Exception as exc:  # noqa: BLE001 - what matters: an answer, and why
            assert "named pipe" in str(exc), exc
        else:
            raise AssertionError("a diff through a FIFO .gitattributes cannot have been read")


def test_fifo_wait_tells_a_fifo_open_from_other_waits(tmp_path: Path):
    """The watch judges only one wait: a process opening a FIFO (its path read
    from /proc), not one reading a pipe or sleeping."""
    import subprocess
    import time

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    opener = subprocess.Popen(["python3", "-c", f"open({str(fifo)!r})"])
    sleeper = subprocess.Popen(["sleep", "30"])
    reader = subprocess.Popen(["cat"], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while (found := fifo_wait(opener.pid)) is None:
            assert time.monotonic() < deadline, "the opener never showed its FIFO wait"
            time.sleep(0.05)
        assert found.path == str(fifo)
        assert fifo_wait(sleeper.pid) is None
        assert fifo_wait(reader.pid) is None
    finally:
        for process in (opener, sleeper, reader):
            process.kill()
            process.wait()


async def test_fifos_in_a_git_repository_and_its_index_never_hang_a_capture(client, tmp_path):
    """The seeded capture of a git workspace reads the user's index and copies
    the ignore files itself: a FIFO as either is refused, not waited on."""
    import subprocess

    ws = tmp_path / "repo"
    ws.mkdir()
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "c"]):
        (ws / "tracked.txt").write_text("t\n")
        subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True)
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    with trio.fail_after(60):
        first = await send_and_wait(client, thread_id, script(
            {"command": {"argv": ["sh", "-c", "rm .git/index && mkfifo .git/index .gitignore"]}}))
    assert first["status"] == "completed"
    with trio.fail_after(60):
        second = await send_and_wait(client, thread_id, "again")
    assert second["status"] == "completed", "the next run's baseline and capture end too"
    (after,) = [c for c in await checkpoints(client, thread_id) if c["runId"] == second["id"] and c["kind"] == "run"]
    assert (after["status"], after["reason"]) == ("error", "named_pipe"), after


def test_a_fork_compare_never_opens_a_fifo_or_reads_a_device(tmp_path: Path):
    """``filesDiffer`` of a merge-back compares files without following a
    symlink (one to /dev/zero would never end) or opening a FIFO."""
    from agentd.actors.executors import differing

    here, there = tmp_path / "here", tmp_path / "there"
    for folder in (here, there):
        folder.mkdir()
        (folder / "same.txt").write_bytes(b"x" * (3 << 20))
    (there / "other.txt").write_text("there")
    (here / "other.txt").write_text("here!")
    os.mkfifo(here / "pipe")
    os.mkfifo(there / "pipe")
    os.symlink("/dev/zero", here / "zero")
    (there / "zero").write_text("")
    assert differing(str(there), str(here), ["same.txt", "other.txt", "pipe", "zero", "missing"]) == ["other.txt", "zero"]

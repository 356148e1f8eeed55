"""Checkpoints wired into the daemon (SPEC F13/F14, issue 10), through the
socket with the scripted agent: per-run captures in the completion barrier,
checkpoint.list/diff/restore, a capture cut off by SIGKILL, git missing."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
from pathlib import Path

import lmdb
import pytest
import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import InvalidState, NotFound
from agentd.store.batch import DATABASES
from agentd.store.db import DEFAULT_MAP_SIZE
from agentd.store.reconcile import CHECKPOINT_CAPTURE
from agentd.store.records import decode_record
from tests.helpers import script, send_and_wait, stored_events, wait_event


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u",
           "GIT_COMMITTER_EMAIL": "u@x", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def user_repo(root: Path, *, repo: bool = True) -> Path:
    """A git workspace with a user commit, a stash entry, a staged and an
    untracked file (``repo=False``: the same files in a plain folder)."""
    ws = root / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("hello\n")
    (ws / ".gitignore").write_text("build/\n")
    (ws / "staged.txt").write_text("staged\n")
    if repo:
        (ws / "staged.txt").unlink()
        git(ws, "init", "-q", "-b", "main")
        git(ws, "add", "README.md", ".gitignore")
        git(ws, "commit", "-qm", "user commit")
        (ws / "README.md").write_text("hello stashed\n")
        git(ws, "stash", "-q")
        (ws / "staged.txt").write_text("staged\n")
        git(ws, "add", "staged.txt")
    (ws / "untracked.txt").write_text("untracked\n")
    (ws / "plain").mkdir()
    (ws / "plain" / "notes.txt").write_text("a folder of plain files\n")
    return ws


def dot_git_state(ws: Path) -> dict[str, bytes]:
    """HEAD, refs, index and stash of the user's repository, byte for byte."""
    out = {}
    for rel in ("HEAD", "index", "logs/refs/stash", "refs/stash", "refs/heads/main"):
        path = ws / ".git" / rel
        out[rel] = path.read_bytes() if path.exists() else b""
    return out


def files_of(ws: Path) -> dict[str, bytes]:
    out = {}
    for path in ws.rglob("*"):
        rel = path.relative_to(ws).as_posix()
        if path.is_file() and not rel.startswith(".git/"):
            out[rel] = path.read_bytes()
    return out


PNG = bytes(range(256)) * 4

RUN1 = script({"write": {"path": "src/app.py", "content": "print('one')\n"}},
              {"write": {"path": "logo.bin", "content": base64.b64encode(PNG).decode(), "binary": True}},
              {"say": "run one"})
RUN2 = script({"write": {"path": "src/app.py", "content": "print('two')\nprint('more')\n"}},
              {"delete": {"path": "untracked.txt"}}, {"say": "run two"})
RUN3 = script({"write": {"path": "docs/guide.md", "content": "# guide\n"}},
              {"delete": {"path": "plain/notes.txt"}}, {"say": "run three"})


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (issue 28 item 13): each test's thread works in a
    folder of its own; the git-missing and SIGKILL tests start their own."""
    return module_daemon


def checkpoint_events(events):
    return [e for e in events if e["type"].startswith("checkpoint.")]


async def test_three_runs_give_three_captured_checkpoints_with_the_run(client, tmp_path):
    ws = user_repo(tmp_path)
    before = dot_git_state(ws)
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    runs = [await send_and_wait(client, thread_id, text) for text in (RUN1, RUN2, RUN3)]
    assert [r["status"] for r in runs] == ["completed"] * 3
    assert all(r["checkpointId"] for r in runs)
    events = await stored_events(client, thread_id)
    captured = [e["payload"]["checkpoint"] for e in checkpoint_events(events)]
    assert [(c["kind"], c["ordinal"], c["status"]) for c in captured] == [
        ("baseline", 0, "captured"), ("run", 1, "captured"), ("run", 2, "captured"), ("run", 3, "captured")]
    # Committed with the run: the checkpoint event comes right before run.completed.
    types = [e["type"] for e in events]
    for run in runs:
        at = next(i for i, e in enumerate(events) if e["type"] == "run.completed" and e["runId"] == run["id"])
        assert types[at - 1] == "checkpoint.captured" and events[at - 1]["runId"] == run["id"]
        assert events[at - 1]["payload"]["checkpoint"]["id"] == run["checkpointId"]
        assert events[at - 1]["nodeId"] == run["rootNodeId"]
    s1, s2, s3 = (c["summary"] for c in captured[1:])
    assert (s1["filesChanged"], s1["insertions"], s1["deletions"]) == (2, 1, 0)
    assert (s2["filesChanged"], s2["insertions"], s2["deletions"]) == (2, 2, 2)
    assert (s3["filesChanged"], s3["insertions"], s3["deletions"]) == (2, 1, 1)
    assert dot_git_state(ws) == before


async def test_git_missing_gives_error_checkpoints_and_the_run_ends_normally(data_dir, socket_path, tmp_path):
    ws = tmp_path / "plain"
    ws.mkdir()
    env = {**os.environ, "AGENTD_CHECKPOINT_GIT": str(tmp_path / "no-such-git")}
    daemon = await start_daemon(data_dir, socket_path, env=env)
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
            run = await send_and_wait(client, thread_id, RUN1)
            assert run["status"] == "completed" and run["checkpointId"]
            events = checkpoint_events(await stored_events(client, thread_id))
            assert [e["type"] for e in events] == ["checkpoint.error", "checkpoint.error"]
            last = events[-1]["payload"]["checkpoint"]
            assert (last["id"], last["status"], last["reason"], last["commit"]) == (run["checkpointId"], "error", "git_missing", None)
            assert events[-1]["runId"] == run["id"]
            assert (ws / "src" / "app.py").read_text() == "print('one')\n"
    finally:
        await daemon.terminate()


@pytest.mark.parametrize("repo", [True, False], ids=["git-repository", "plain-folder"])
async def test_list_diff_restore_and_undo_through_the_safety_checkpoint(client, tmp_path, repo):
    ws = user_repo(tmp_path, repo=repo)
    assert (ws / ".git").exists() == repo
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(b"ignored build output")
    before = dot_git_state(ws)
    thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
    run1 = await send_and_wait(client, thread_id, RUN1)
    after1 = files_of(ws)
    run2 = await send_and_wait(client, thread_id, RUN2)
    run3 = await send_and_wait(client, thread_id, RUN3)
    after3 = files_of(ws)

    listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
    assert [(c["kind"], c["ordinal"], c["status"]) for c in listed] == [
        ("baseline", 0, "captured"), ("run", 1, "captured"), ("run", 2, "captured"), ("run", 3, "captured")]
    assert [c["id"] for c in listed[1:]] == [run1["checkpointId"], run2["checkpointId"], run3["checkpointId"]]
    assert [c["baseCheckpointId"] for c in listed[1:]] == [c["id"] for c in listed[:3]]

    diff1 = await client.call("checkpoint.diff", checkpointId=run1["checkpointId"])
    assert {(f["path"], f["change"], f["binary"]) for f in diff1["files"]} == {
        ("src/app.py", "added", False), ("logo.bin", "added", True)}
    diff2 = await client.call("checkpoint.diff", checkpointId=run2["checkpointId"])
    assert {(f["path"], f["change"], f["insertions"], f["deletions"]) for f in diff2["files"]} == {
        ("src/app.py", "modified", 2, 1), ("untracked.txt", "deleted", 0, 1)}
    assert "+print('two')" in diff2["patch"] and not diff2["truncated"]
    across = await client.call("checkpoint.diff", checkpointId=run3["checkpointId"],
                               baseCheckpointId=run1["checkpointId"], maxBytes=40)
    assert {f["path"] for f in across["files"]} == {"src/app.py", "untracked.txt", "docs/guide.md", "plain/notes.txt"}
    assert across["truncated"] and len(across["patch"].encode()) <= 40

    restored = await client.call("checkpoint.restore", checkpointId=run1["checkpointId"])
    assert restored["complete"] and not restored["notRestored"]
    assert set(restored["restored"]) == {"src/app.py", "untracked.txt", "plain/notes.txt", "docs/guide.md"}
    assert files_of(ws) == after1
    assert dot_git_state(ws) == before
    assert (ws / "build" / "out.o").read_bytes() == b"ignored build output"

    listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
    safety = next(c for c in listed if c["id"] == restored["safetyCheckpointId"])
    assert (safety["kind"], safety["scope"], safety["status"]) == ("pre_rollback", "pre_rollback", "captured")
    undo = await client.call("checkpoint.restore", checkpointId=safety["id"])
    assert undo["complete"] and files_of(ws) == after3
    assert dot_git_state(ws) == before
    # No run and no agent memory changed.
    runs = (await client.call("thread.get", threadId=thread_id))["runs"]
    assert [r["status"] for r in runs] == ["completed"] * 3

    # Refused while a run is active.
    sent = await client.call("thread.message.send", threadId=thread_id, text=script({"hang": True}))
    await wait_event(client, lambda e: e["type"] == "run.started" and e["runId"] == sent["runId"], thread_id=thread_id)
    with pytest.raises(InvalidState):
        await client.call("checkpoint.restore", checkpointId=run1["checkpointId"])
    with pytest.raises(NotFound):
        await client.call("checkpoint.diff", checkpointId="ckp_nope")
    await client.call("thread.stop", threadId=thread_id)
    assert files_of(ws) == after3


class StalledGit:
    """A git wrapper for the daemon (``env``) that stalls git once ``stall()``
    was called: at its ``at`` subcommand (``update-index``: in the middle of a
    capture; ``cat-file --batch``: a restore between its deletes and its
    writes) it writes its pid (that of the ``sleep`` it becomes) and sleeps,
    so the daemon can be killed part-way without racing it."""

    def __init__(self, tmp_path: Path, at: str = "update-index") -> None:
        self.flag, self.mark, self.wrapper = tmp_path / "stall.flag", tmp_path / "stall.pid", tmp_path / "git-wrapper"
        real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout.strip()
        self.wrapper.write_text(
            "#!/bin/sh\n"
            f'if [ -e "{self.flag}" ]; then case " $* " in *" {at} "*) echo $$ > "{self.mark}.tmp"; '
            f'mv "{self.mark}.tmp" "{self.mark}"; exec sleep 60;; esac; fi\n'
            f'exec "{real}" "$@"\n'
        )
        self.wrapper.chmod(0o755)
        self.pid: int | None = None

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "AGENTD_CHECKPOINT_GIT": str(self.wrapper)}

    def stall(self) -> None:
        """From now on a capture stalls."""
        self.flag.touch()

    async def stalled(self) -> None:
        """Wait until a capture has stalled (the wrapper wrote its pid)."""
        with trio.fail_after(30):
            while not self.mark.exists():  # an external process's state: polled
                await trio.sleep(0.05)
        self.pid = int(self.mark.read_text())

    async def kill_during(self, daemon, call) -> None:
        """Stall git, await ``call()`` and SIGKILL ``daemon`` once git has
        stalled under it (the call's own failure is expected: its daemon dies)."""
        self.stall()
        async with trio.open_nursery() as nursery:
            async def run() -> None:
                try:
                    await call()
                except Exception:  # noqa: BLE001 - the daemon is killed under it
                    pass
            nursery.start_soon(run)
            await self.stalled()
            await daemon.kill()
            nursery.cancel_scope.cancel()

    def release(self) -> None:
        """Stop stalling, and end the stalled ``sleep`` — only it, never a reused pid."""
        self.flag.unlink(missing_ok=True)
        if self.pid is None:
            return
        try:
            if Path(f"/proc/{self.pid}/cmdline").read_bytes().startswith(b"sleep\0"):
                os.kill(self.pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass


def _capture_entry_stored(data_dir: Path) -> bool:
    """Whether the daemon's store holds a pending ``checkpoint.capture``
    outbox entry (read by this process, while the daemon runs)."""
    env = lmdb.open(str(data_dir / "store"), map_size=DEFAULT_MAP_SIZE, max_dbs=len(DATABASES) + 8, readonly=True)
    try:
        with env.begin() as txn:
            for _key, value in txn.cursor(db=env.open_db(b"effects", txn=txn, create=False)):
                effect = decode_record("effects", value)
                if effect.kind == CHECKPOINT_CAPTURE and effect.status == "pending":
                    return True
        return False
    finally:
        env.close()


async def capture_entry_durable(data_dir: Path) -> None:
    """Wait until the run's capture entry is durable: it is committed while
    git reads the workspace (issue 24 §3), so a kill during git may come
    before it — the run then has no checkpoint, as one killed in its turn."""
    with trio.fail_after(30):
        while not _capture_entry_stored(data_dir):  # an external process's state: polled
            await trio.sleep(0.05)


async def test_sigkill_during_a_capture_gives_a_missing_checkpoint_never_recaptured(data_dir, socket_path, tmp_path):
    ws = user_repo(tmp_path)
    git = StalledGit(tmp_path)
    daemon = await start_daemon(data_dir, socket_path, env=git.env)
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
            sent = await client.call("thread.message.send", threadId=thread_id, text=script(
                {"write": {"path": "src/app.py", "content": "print('one')\n"}}, {"sleep": 0.5}))
            # The baseline is captured before the turn starts; stall only the run's capture.
            await wait_event(client, lambda e: e["type"] == "run.started", thread_id=thread_id)
            git.stall()
            await git.stalled()
            await capture_entry_durable(data_dir)
        await daemon.kill()
    finally:
        git.release()
        await daemon.terminate()
    # Changed after the kill: must not end up in any checkpoint of run 1.
    (ws / "src" / "app.py").write_text("print('edited after the crash')\n")

    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            run1 = (await client.call("run.get", runId=sent["runId"]))["run"]
            assert (run1["status"], run1["reason"]) == ("interrupted", "daemon_restart")
            listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
            assert [(c["kind"], c["ordinal"], c["status"], c["reason"]) for c in listed] == [
                ("baseline", 0, "captured", None), ("run", 1, "missing", "daemon_restart")]
            assert listed[1]["id"] == run1["checkpointId"] and listed[1]["runId"] == run1["id"]
            assert listed[1]["commit"] is None
            with pytest.raises(InvalidState):
                await client.call("checkpoint.diff", checkpointId=run1["checkpointId"])
            events = await stored_events(client, thread_id)
            missing = [e for e in events if e["type"] == "checkpoint.missing"]
            assert len(missing) == 1 and missing[0]["runId"] == run1["id"] and missing[0]["nodeId"] == run1["rootNodeId"]
            # The thread takes a new message; run 2 gets a fresh baseline and its own checkpoint.
            run2 = await send_and_wait(client, thread_id, script({"write": {"path": "two.txt", "content": "2\n"}}))
            assert run2["status"] == "completed"
            listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
            assert [(c["kind"], c["ordinal"], c["status"]) for c in listed] == [
                ("baseline", 0, "captured"), ("run", 1, "missing"), ("baseline", 1, "captured"), ("run", 2, "captured")]
            diff = await client.call("checkpoint.diff", checkpointId=run2["checkpointId"])
            assert [(f["path"], f["change"]) for f in diff["files"]] == [("two.txt", "added")]
            assert (await client.call("daemon.status"))["lastSeq"] > 0
    finally:
        await daemon.terminate()


async def test_a_run_cut_by_a_sigkill_shows_the_change_between_the_captures_around_it(data_dir, socket_path, tmp_path):
    """Issue 28 item 8 (SPEC F12, F13): a run the daemon was killed under has
    no checkpoint of its own, yet it wrote files. ``run.diff`` (and ``agentd
    diff RUN``) show the change from the capture it started from to the next
    capture after it — the next run's baseline — marked approximate."""
    from tests.cli_helpers import run as agentd

    ws = user_repo(tmp_path)
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
            run1 = await send_and_wait(client, thread_id, script({"write": {"path": "one.txt", "content": "1\n"}}))
            sent = await client.call("thread.message.send", threadId=thread_id, text=script(
                {"write": {"path": "cut.txt", "content": "written before the kill\n"}}, {"hang": True}))
            await wait_event(client, lambda e: e["type"] == "file_change.completed" and e["runId"] == sent["runId"],
                             thread_id=thread_id)
        await daemon.kill()
    finally:
        await daemon.terminate()

    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            cut = (await client.call("run.get", runId=sent["runId"]))["run"]
            assert (cut["status"], cut["reason"], cut["checkpointId"]) == ("interrupted", "daemon_restart", None)
            # Nothing captured after it yet: it says where its changes will show.
            with pytest.raises(InvalidState, match="nothing was captured after it yet"):
                await client.call("run.diff", runId=cut["id"])
            exact = await client.call("run.diff", runId=run1["id"])
            assert exact["approximate"] is None and exact["checkpointId"] == run1["checkpointId"]
            assert [(f["path"], f["change"]) for f in exact["files"]] == [("one.txt", "added")]

            run3 = await send_and_wait(client, thread_id, script({"write": {"path": "three.txt", "content": "3\n"}}))
            listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
            baseline = next(c for c in listed if c["kind"] == "baseline" and c["ordinal"] == 2)
            diff = await client.call("run.diff", runId=cut["id"])
            assert diff["approximate"] == "between_baselines" and diff["runId"] == cut["id"]
            assert (diff["baseCheckpointId"], diff["checkpointId"]) == (run1["checkpointId"], baseline["id"])
            assert [(f["path"], f["change"]) for f in diff["files"]] == [("cut.txt", "added")]
            assert "+written before the kill" in diff["patch"]
            # The run after it is exact, as ever.
            assert [(f["path"], f["change"]) for f in (await client.call("run.diff", runId=run3["id"]))["files"]] == [
                ("three.txt", "added")]
        shown = await agentd(daemon, "diff", cut["id"])
        assert "+written before the kill" in shown.stdout.decode()
        assert f"run {cut['id']} was cut off before its own checkpoint" in shown.stderr.decode()
    finally:
        await daemon.terminate()

"""A daemon SIGKILLed while it makes a fork's worktree or merges a fork's
files (issue 27; SPEC F12, F13, F14), with real processes: the user's
repository is never touched beyond git's worktree metadata and the fork's
branch, a half-made worktree is cleaned and made again at the fork's next
run, and a half-applied merge is reported with its safety checkpoint, which
puts the files back.

Each kill lands at a known point without racing the daemon: git (or a
filter git runs) stops there and says so in a file, and only then is the
daemon killed."""

from __future__ import annotations

import os
import shutil
import signal
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from tests.actors.checkpoints.test_checkpoints_daemon import StalledGit
from tests.actors.gitrepo import fingerprint, git, make_repo, tree_files
from tests.actors.test_worktrees import write
from tests.helpers import script, send_and_wait, stored_events


@asynccontextmanager
async def daemon_client(data: Path, sock: Path, env: dict[str, str] | None = None):
    daemon = await start_daemon(data, sock, env=env)
    try:
        async with Client.connect(daemon.socket) as client:
            yield daemon, client
    finally:
        await daemon.terminate()


class StalledCheckout:
    """A smudge filter in the user's repository (``*.stall``) that, once
    ``stall()`` was called, stops ``git worktree add`` in the middle of its
    checkout — git's worktree metadata made and locked (``initializing``),
    some files written — and writes the pids involved."""

    def __init__(self, tmp_path: Path, repo: Path) -> None:
        self.flag, self.mark = tmp_path / "checkout.flag", tmp_path / "checkout.pids"
        fil = tmp_path / "stall-filter"
        fil.write_text(
            "#!/bin/sh\n"
            f'if [ -e "{self.flag}" ]; then echo "$$ $PPID" > "{self.mark}.tmp"; mv "{self.mark}.tmp" "{self.mark}"; '
            "exec sleep 60; fi\n"
            "exec cat\n"
        )
        fil.chmod(0o755)
        (repo / ".gitattributes").write_text("*.stall filter=stall\n")
        (repo / "slow.stall").write_text("checked out through the filter\n")
        git(repo, "config", "filter.stall.smudge", str(fil))
        # Only these two paths: the user's staged change stays staged.
        git(repo, "add", ".gitattributes", "slow.stall")
        git(repo, "commit", "-q", "-m", "a filtered file", "--", ".gitattributes", "slow.stall")
        self.pids: list[int] = []

    def stall(self) -> None:
        self.flag.touch()

    async def stalled(self) -> None:
        """Wait until the checkout has stopped in the filter; note the
        filter, the ``git`` that runs it and the ``git worktree add`` above."""
        with trio.fail_after(30):
            while not self.mark.exists():  # an external process's state: polled
                await trio.sleep(0.05)
        sleeper, checkout = (int(p) for p in self.mark.read_text().split())
        add = int(Path(f"/proc/{checkout}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert b"worktree\0add" in Path(f"/proc/{add}/cmdline").read_bytes()
        self.pids = [add, checkout, sleeper]

    def kill_git(self) -> None:
        """SIGKILL the git processes too (they outlive their daemon; a crash
        of the machine or of the daemon's cgroup would take them)."""
        self.flag.unlink(missing_ok=True)
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("where", ["in git worktree add", "in git worktree add, before its folder",
                                   "while the fork point's files are carried over"])
async def test_sigkill_while_a_worktree_is_made_leaves_the_users_git_alone_and_the_next_run_makes_it(
        tmp_path, short_dir, where):
    """``before its folder``: git records (and locks) a worktree before it
    makes its folder; a kill between the two is played by removing the
    folder a kill in the checkout left."""
    repo = make_repo(tmp_path / "repo")
    data, sock = tmp_path / "data", short_dir / "s.sock"
    checkout = StalledCheckout(tmp_path, repo) if where.startswith("in git worktree add") else None
    carried = StalledGit(tmp_path, at="ls-files") if checkout is None else None
    async with daemon_client(data, sock, env=carried.env if carried else None) as (daemon, client):
        source = (await client.call("thread.create", title="main", workspace=str(repo)))["threadId"]
        assert (await send_and_wait(client, source, write("agent.txt", "source\n")))["status"] == "completed"
        user_git = fingerprint(repo)
        expected = tree_files(repo)
        forked = await client.call("thread.fork", threadId=source, workspace="worktree")
        fork, tree, branch = forked["threadId"], Path(forked["workspace"]), forked["workspaceSource"]["branch"]
        try:
            if checkout is not None:
                checkout.stall()
                cut = await client.call("thread.message.send", threadId=fork, text=write("fork.txt", "fork\n"))
                await checkout.stalled()
                await daemon.kill()
                checkout.kill_git()
                assert (repo / ".git" / "worktrees" / fork / "locked").read_text().strip() == "initializing"
            else:
                carried.stall()
                cut = await client.call("thread.message.send", threadId=fork, text=write("fork.txt", "fork\n"))
                await carried.stalled()
                await daemon.kill()
        finally:
            if carried is not None:
                carried.release()
    assert tree.is_dir() and not (tree / "agent.txt").exists(), "cut off half-made"
    if where.endswith("before its folder"):
        shutil.rmtree(tree)
    assert fingerprint(repo, besides=(f"refs/heads/{branch}",)) == user_git, "HEAD, index, stash, refs, config"

    async with daemon_client(data, sock) as (daemon, client):
        run = (await client.call("run.get", runId=cut["runId"]))["run"]
        # Cut before its turn started: never sent to the agent.
        assert run["status"] == "cancelled" and run["reason"].startswith("daemon_restart: never started"), run
        assert [e for e in await stored_events(client, fork) if e["type"] == "workspace.created"] == []
        again = await send_and_wait(client, fork, write("fork.txt", "fork, again\n"))
        assert again["status"] == "completed", again["reason"]
        got = tree_files(tree)
        assert got.pop("fork.txt") == b"fork, again\n"
        assert got == expected, "the fork point's files, exactly"
        (made,) = [e for e in await stored_events(client, fork) if e["type"] == "workspace.created"]
        assert made["runId"] == again["id"]
        assert git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == branch
        listed = git(repo, "worktree", "list", "--porcelain").split("\n\n")
        (entry,) = [e for e in listed if f"worktree {tree}\n" in e]
        assert "locked" not in entry, entry
        assert sorted(os.listdir(repo / ".git" / "worktrees")) == [fork], "one worktree, made again in place"
        assert fingerprint(repo, besides=(f"refs/heads/{branch}",)) == user_git
        assert await daemon.terminate() == 0, daemon.log_text()[-4000:]


async def test_sigkill_during_a_merge_of_files_reports_it_and_its_safety_checkpoint_puts_the_files_back(
        tmp_path, short_dir):
    """Killed after the merge deleted what the fork deleted and before it
    wrote anything (at the restore's ``cat-file --batch``): after the
    restart the ``pre_merge`` safety checkpoint is listed, an event says the
    merge's writing was cut off and names it, no message was sent, restoring
    it brings the workspace back byte for byte — and the merge can be sent again."""
    repo = make_repo(tmp_path / "repo")
    data, sock = tmp_path / "data", short_dir / "s.sock"
    stalled = StalledGit(tmp_path, at="cat-file --batch")
    async with daemon_client(data, sock, env=stalled.env) as (daemon, client):
        source = (await client.call("thread.create", title="main", workspace=str(repo)))["threadId"]
        await send_and_wait(client, source, write("agent.txt", "source\n"))
        fork = (await client.call("thread.fork", threadId=source, workspace="worktree"))["threadId"]
        run = await send_and_wait(client, fork, script(
            {"write": {"path": "feature.txt", "content": "new feature\n"}},
            {"write": {"path": "sub/c.txt", "content": "c by the fork\n"}},
            {"delete": {"path": "run.sh"}}))
        assert run["status"] == "completed", run
        user_git = fingerprint(repo, besides=("refs/heads/agentd",))
        before = tree_files(repo)
        try:
            await stalled.kill_during(daemon, partial(
                client.call, "thread.message.send", threadId=source, text="merged",
                mergeBack={"forkThreadId": fork, "files": True}))
        finally:
            stalled.release()
    assert not (repo / "run.sh").exists() and not (repo / "feature.txt").exists(), "cut off half-applied"

    async with daemon_client(data, sock) as (daemon, client):
        listed = (await client.call("checkpoint.list", threadId=source))["checkpoints"]
        (safety,) = [c for c in listed if c["kind"] == "pre_merge"]
        assert safety["status"] == "captured"
        (cut,) = [e for e in await stored_events(client, source) if e["type"] == "checkpoint.restore_interrupted"]
        assert cut["payload"]["safetyCheckpointId"] == safety["id"]
        message = cut["payload"]["message"]
        assert f"a merge-back of the files of fork {fork}" in message and "was not sent" in message, message
        assert f"agentd restore {safety['id']}" in message and "send the merge-back again" in message
        detail = await client.call("thread.get", threadId=source)
        assert len(detail["runs"]) == 1, "no run for the message"
        assert [t for t in (await client.call("thread.transfers", threadId=source))["transfers"]
                if t["type"] == "merge_back"] == [], "the message was not sent"
        assert fingerprint(repo, besides=("refs/heads/agentd",)) == user_git, "never the user's index"

        await client.call("checkpoint.restore", checkpointId=safety["id"])
        assert tree_files(repo) == before
        sent = await client.call("thread.message.send", threadId=source, text="merged",
                                 mergeBack={"forkThreadId": fork, "files": True})
        files = sent["mergeBack"]["files"]
        assert files["status"] == "merged" and files["deleted"] == ["run.sh"], files
        assert (repo / "feature.txt").read_text() == "new feature\n"
        assert await daemon.terminate() == 0, daemon.log_text()[-4000:]

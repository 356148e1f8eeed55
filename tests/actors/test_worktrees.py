"""Worktree forks through the socket (issue 27; SPEC F6, F13): a fork of a
thread in a git repository works in a git worktree of its own, made at its
first run, with the source's uncommitted state carried over; the user's
repository gains only git's worktree metadata and the fork's branch."""

from __future__ import annotations

import os
from pathlib import Path

import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from tests.actors.gitrepo import fingerprint, git, make_repo, tree_files
from tests.helpers import script, send_and_wait, stored_events, wait_run_terminal
import pytest


@pytest.fixture
async def repo_client(module_daemon, tmp_path):
    """A client of the module's daemon (issue 28 item 13), a git repository
    of the test's own and the daemon's data dir: each test's threads work in
    its own repository and their worktrees are named by their thread."""
    repo = make_repo(tmp_path / "repo")
    async with Client.connect(module_daemon.socket) as c:
        yield c, repo, module_daemon.data_dir


@pytest.fixture
async def own_repo_client(tmp_path, short_dir):
    """``repo_client`` with a daemon of the test's own, for a test that
    changes the daemon's data dir (its worktrees folder)."""
    repo = make_repo(tmp_path / "repo")
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock")
    try:
        async with Client.connect(daemon.socket) as c:
            yield c, repo, tmp_path / "data"
    finally:
        code = await daemon.terminate()
        assert code == 0, daemon.log_text()[-4000:]


def write(path: str, content: str) -> str:
    return script({"write": {"path": path, "content": content}})


async def fork_into_worktree(client: Client, source: str) -> dict:
    return await client.call("thread.fork", threadId=source, workspace="worktree")


async def test_f6_a_worktree_fork_carries_the_uncommitted_state_and_leaves_the_users_git_alone(repo_client):
    client, repo, data = repo_client
    head = git(repo, "rev-parse", "HEAD").strip()
    index_before = (repo / ".git" / "index").read_bytes()
    source = (await client.call("thread.create", title="main", workspace=str(repo)))["threadId"]
    run = await send_and_wait(client, source, write("agent.txt", "from the source agent\n"))
    assert run["status"] == "completed"
    user_git = fingerprint(repo)
    expected = tree_files(repo)

    forked = await fork_into_worktree(client, source)
    fork = forked["threadId"]
    planned = forked["workspaceSource"]
    short = fork[-12:]
    assert planned["kind"] == "worktree" and planned["branch"] == f"agentd/{short}" and planned["commit"] == head
    assert forked["workspace"] == planned["path"] == str(data / "worktrees" / fork)
    assert not Path(planned["path"]).exists(), "made lazily, at the fork's first run"
    assert planned["checkpointId"] == run["checkpointId"], "the fork point's checkpoint"

    first = await send_and_wait(client, fork, write("fork.txt", "fork only\n"))
    assert first["status"] == "completed", first
    tree = Path(planned["path"])
    got = tree_files(tree)
    assert got.pop("fork.txt") == b"fork only\n"
    assert got == expected, "tracked changes, deletions and untracked files exactly as at the fork point"
    assert not (tree / "debug.log").exists(), "an ignored file is not carried"
    assert os.stat(tree / "run.sh").st_mode & 0o777 == 0o755
    assert git(tree, "rev-parse", "HEAD").strip() == head
    assert git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == f"agentd/{short}"
    status = git(tree, "status", "--porcelain").splitlines()
    assert {" M a.txt", " M b.txt", " D gone.txt", "?? new.txt", "?? agent.txt", "?? fork.txt"} <= set(status), status

    assert not (repo / "fork.txt").exists(), "the fork writes only its own tree"
    assert fingerprint(repo, besides=(f"refs/heads/agentd/{short}",)) == user_git, "HEAD, index, stash, refs, hooks, config"
    assert (repo / ".git" / "index").read_bytes() == index_before
    assert git(repo, "stash", "list").count("\n") == 1
    assert git(repo, "diff", "--cached", "--name-only").split() == ["a.txt"], "the user's staging is kept"

    (made,) = [e for e in await stored_events(client, fork) if e["type"] == "workspace.created"]
    payload = made["payload"]
    assert payload["branch"] == f"agentd/{short}" and payload["repository"] == str(repo.resolve())
    assert set(payload["written"]) == {"a.txt", "b.txt", "new.txt", "agent.txt"} and payload["removed"] == ["gone.txt"]
    assert made["runId"] == first["id"]

    # Checkpoints, diffs and a rollback work in the worktree as in any workspace.
    diff = await client.call("checkpoint.diff", checkpointId=first["checkpointId"])
    assert [f["path"] for f in diff["files"]] == ["fork.txt"]
    await client.call("rollback.toRun", threadId=fork, targetOrdinal=0)
    assert not (tree / "fork.txt").exists() and (tree / "new.txt").read_text() == "untracked\n"


async def test_f6_two_worktree_forks_run_at_once_each_in_its_own_tree(repo_client):
    client, repo, data = repo_client
    source = (await client.call("thread.create", title="main", workspace=str(repo)))["threadId"]
    await send_and_wait(client, source, write("base.txt", "base\n"))
    forks = [(await fork_into_worktree(client, source))["threadId"] for _ in range(2)]
    sent = [await client.call("thread.message.send", threadId=fork, text=script(
        {"write": {"path": f"own-{n}.txt", "content": f"{n}\n"}}, {"sleep": 0.2},
        {"write": {"path": "same.txt", "content": f"fork {n}\n"}})) for n, fork in enumerate(forks)]
    runs = []
    async with trio.open_nursery() as nursery:
        async def wait(fork: str, run_id: str) -> None:
            runs.append(await wait_run_terminal(client, fork, run_id))
        for fork, answer in zip(forks, sent):
            nursery.start_soon(wait, fork, answer["runId"])
    assert [r["status"] for r in runs] == ["completed", "completed"]
    for n, fork in enumerate(forks):
        tree = data / "worktrees" / fork
        assert (tree / f"own-{n}.txt").exists() and not (tree / f"own-{1 - n}.txt").exists()
        assert (tree / "same.txt").read_text() == f"fork {n}\n"
        assert (tree / "base.txt").read_text() == "base\n"
    assert not (repo / "same.txt").exists()
    branches = git(repo, "for-each-ref", "--format=%(refname)", "refs/heads/agentd/").split()
    assert sorted(branches) == sorted(f"refs/heads/agentd/{fork[-12:]}" for fork in forks)


async def test_a_copy_fork_and_a_worktree_fork_outside_git_copy_the_folder(repo_client, tmp_path):
    client, _repo, data = repo_client
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "x.txt").write_text("x\n")
    source = (await client.call("thread.create", title="plain", workspace=str(plain)))["threadId"]
    for mode in ("worktree", "copy"):
        forked = await client.call("thread.fork", threadId=source, workspace=mode)
        assert forked["workspaceSource"]["kind"] == "copy" and forked["workspaceSource"]["branch"] is None
        run = await send_and_wait(client, forked["threadId"], write("y.txt", mode))
        assert run["status"] == "completed"
        tree = data / "worktrees" / forked["threadId"]
        assert (tree / "x.txt").read_text() == "x\n" and (tree / "y.txt").read_text() == mode
    assert not (plain / "y.txt").exists()


async def test_f9_a_task_delegated_with_workspace_worktree_works_in_a_worktree_of_its_own(repo_client):
    """A delegated task's ``workspace: worktree``: the parent's files as they
    are when the task starts (a capture: the parent is mid-turn), on a branch
    of its own; the parent's tree and the user's git are untouched."""
    client, repo, data = repo_client
    parent = (await client.call("thread.create", title="lead", workspace=str(repo)))["threadId"]
    user_git = fingerprint(repo)
    expected = tree_files(repo)
    made = await client.call("task.delegate", parentThreadId=parent, workspace="worktree",
                             instructions=write("task.txt", "by the task\n"))
    run = await wait_run_terminal(client, made["taskId"], made["runId"])
    assert run["status"] == "completed", run
    task = (await client.call("thread.get", threadId=made["taskId"]))["thread"]
    source = task["workspaceSource"]
    assert task["workspace"] == source["path"] == str(data / "worktrees" / made["taskId"])
    assert source["branch"] == f"agentd/{made['taskId'][-12:]}"
    got = tree_files(Path(task["workspace"]))
    assert got.pop("task.txt") == b"by the task\n" and got == expected
    assert not (repo / "task.txt").exists()
    assert fingerprint(repo, besides=(f"refs/heads/{source['branch']}",)) == user_git


async def test_a_fork_of_a_subfolder_workspace_with_no_run_yet_carries_its_files_as_they_are_at_its_first_run(repo_client):
    """A workspace below the repository's top level: the fork works in the
    same folder of its worktree; with no fork-point checkpoint (the source
    never ran) the source is captured when the fork first runs."""
    client, repo, data = repo_client
    (repo / "sub" / "c.txt").write_text("c changed, uncommitted\n")
    (repo / "sub" / "fresh.txt").write_text("untracked in sub\n")
    source = (await client.call("thread.create", title="sub", workspace=str(repo / "sub")))["threadId"]
    forked = await client.call("thread.fork", threadId=source, workspace="worktree")
    planned = forked["workspaceSource"]
    assert planned["prefix"] == "sub" and planned["checkpointId"] is None
    assert forked["workspace"] == str(data / "worktrees" / forked["threadId"] / "sub")
    (repo / "sub" / "later.txt").write_text("written before the fork's first run\n")
    run = await send_and_wait(client, forked["threadId"], write("x.txt", "x\n"))
    assert run["status"] == "completed", run
    sub = Path(forked["workspace"])
    assert (sub / "c.txt").read_text() == "c changed, uncommitted\n"
    assert (sub / "fresh.txt").exists() and (sub / "later.txt").exists() and (sub / "x.txt").exists()
    assert (sub.parent / "a.txt").read_text() == "a1\n", "outside the workspace: the commit's files"


async def test_a_worktree_git_cannot_make_fails_the_run_with_why_and_the_fork_stays_usable(own_repo_client):
    """Issue 27: ``git worktree add`` refused — here the data dir's
    ``worktrees`` folder cannot be made (a file is in its way) — fails the
    fork's run with reason ``workspace_failed: …`` naming the path and git's
    own words; nothing of the user's changes but the fork's branch, the fork
    is idle and readable, and once the cause is gone its next message makes
    the worktree and runs."""
    client, repo, data = own_repo_client  # its worktrees folder is blocked: a daemon of its own
    source = (await client.call("thread.create", title="main", workspace=str(repo)))["threadId"]
    assert (await send_and_wait(client, source, write("agent.txt", "source\n")))["status"] == "completed"
    user_git = fingerprint(repo)
    expected = tree_files(repo)
    forked = await fork_into_worktree(client, source)
    fork, tree, branch = forked["threadId"], Path(forked["workspace"]), forked["workspaceSource"]["branch"]
    (data / "worktrees").write_text("in the way\n")

    failed = await send_and_wait(client, fork, write("fork.txt", "fork\n"))
    assert failed["status"] == "failed", failed
    reason = failed["reason"]
    assert reason.startswith("workspace_failed: ") and str(tree) in reason and "Not a directory" in reason, reason
    assert fingerprint(repo, besides=(f"refs/heads/{branch}",)) == user_git
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1, "no worktree recorded"
    thread = (await client.call("thread.get", threadId=fork))["thread"]
    assert thread["status"] == "idle" and thread["activeRunId"] is None
    assert [e for e in await stored_events(client, fork) if e["type"] == "workspace.created"] == []

    (data / "worktrees").unlink()
    again = await send_and_wait(client, fork, write("fork.txt", "fork\n"))
    assert again["status"] == "completed", again["reason"]
    got = tree_files(tree)
    assert got.pop("fork.txt") == b"fork\n" and got == expected
    assert git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == branch


async def test_a_name_that_is_not_utf8_is_carried_into_the_worktree_byte_for_byte(repo_client):
    """F13 / F20: the source's untracked file whose name is not UTF-8 reaches
    the fork's worktree under its own bytes; ``workspace.created`` names it
    as the wire can (``\\xNN``), and the fork's run is not failed by it."""
    client, repo, _data = repo_client
    source = (await client.call("thread.create", workspace=str(repo)))["threadId"]
    name = b"untr\xff.txt"
    with open(os.path.join(os.fsencode(repo), name), "wb") as f:
        f.write(b"not utf-8\n")
    assert (await send_and_wait(client, source, write("agent.txt", "source\n")))["status"] == "completed"
    forked = await client.call("thread.fork", threadId=source, workspace="worktree")
    run = await send_and_wait(client, forked["threadId"], "in the worktree")
    assert run["status"] == "completed", run
    with open(os.path.join(os.fsencode(forked["workspace"]), name), "rb") as f:
        assert f.read() == b"not utf-8\n"
    (created,) = [e for e in await stored_events(client, forked["threadId"]) if e["type"] == "workspace.created"]
    assert "untr\\xff.txt" in created["payload"]["written"]

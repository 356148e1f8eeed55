"""Archiving through the socket (issue 27): an archived thread leaves
``thread.list``, its worktree goes after a final checkpoint (its branch
stays), files no checkpoint holds refuse it, and unarchiving brings the
thread and its worktree back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agentd.protocol.errors import AgentdError
from tests.actors.gitrepo import fingerprint, git
from tests.actors.test_worktrees import repo_client, write  # noqa: F401 - the fixture
from tests.helpers import send_and_wait, stored_events


async def listed(client, **params) -> list[str]:
    return [t["id"] for t in (await client.call("thread.list", **params))["threads"]]


async def test_archive_removes_the_worktree_after_a_final_checkpoint_and_unarchive_brings_it_back(repo_client):
    client, repo, _data = repo_client
    source = (await client.call("thread.create", title="main", workspace=str(repo)))["threadId"]
    await send_and_wait(client, source, write("agent.txt", "source\n"))
    forked = await client.call("thread.fork", threadId=source, workspace="worktree")
    fork, tree = forked["threadId"], Path(forked["workspace"])
    branch = forked["workspaceSource"]["branch"]
    await send_and_wait(client, fork, write("work.txt", "the fork's work\n"))
    (tree / "by-hand.txt").write_text("edited after the last run\n")
    before = {p.relative_to(tree).as_posix(): p.read_bytes() for p in tree.rglob("*") if p.is_file() and p.name != ".git"}
    user_git = fingerprint(repo, besides=(f"refs/heads/{branch}",))

    archived = await client.call("thread.archive", threadId=fork)
    assert archived["archived"] and archived["worktreeRemoved"] and archived["branch"] == branch
    assert not tree.exists(), "the worktree is removed"
    assert git(repo, "rev-parse", "--verify", branch).strip() == forked["workspaceSource"]["commit"], "its branch stays"
    assert str(tree) not in git(repo, "worktree", "list")
    assert fingerprint(repo, besides=(f"refs/heads/{branch}",)) == user_git
    assert fork not in await listed(client) and fork in await listed(client, includeArchived=True)
    assert (await client.call("thread.get", threadId=fork))["thread"]["archivedAt"] is not None, "still readable"
    final = next(c for c in (await client.call("checkpoint.list", threadId=fork))["checkpoints"]
                 if c["id"] == archived["checkpointId"])
    assert (final["kind"], final["status"]) == ("archive", "captured")
    with pytest.raises(AgentdError) as info:
        await client.call("thread.message.send", threadId=fork, text="hello")
    assert info.value.kind == "invalid_state" and "archived" in info.value.message

    back = await client.call("thread.unarchive", threadId=fork)
    assert back["worktreeRestored"] and back["checkpointId"] == archived["checkpointId"]
    after = {p.relative_to(tree).as_posix(): p.read_bytes() for p in tree.rglob("*") if p.is_file() and p.name != ".git"}
    assert after == before, "every file as the final checkpoint holds it, the hand edit too"
    assert git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == branch
    assert fork in await listed(client)
    types = [e["type"] for e in await stored_events(client, fork)]
    assert "thread.archived" in types and "thread.unarchived" in types
    run = await send_and_wait(client, fork, write("again.txt", "runs again\n"))
    assert run["status"] == "completed" and (tree / "again.txt").exists()


async def test_files_no_checkpoint_holds_refuse_the_archive_and_are_named(repo_client):
    client, repo, _data = repo_client
    source = (await client.call("thread.create", title="main", workspace=str(repo)))["threadId"]
    await send_and_wait(client, source, write("agent.txt", "source\n"))
    forked = await client.call("thread.fork", threadId=source, workspace="worktree")
    fork, tree = forked["threadId"], Path(forked["workspace"])
    await send_and_wait(client, fork, write("work.txt", "work\n"))
    nested = tree / "vendor" / "lib"
    nested.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=nested, check=True)
    (nested / "keep.c").write_text("int x;\n")
    with pytest.raises(AgentdError) as info:
        await client.call("thread.archive", threadId=fork)
    assert info.value.kind == "invalid_state"
    assert {"path": "vendor/lib/", "reason": "nested_repository"} in info.value.data["notCheckpointed"]
    assert "vendor/lib" in info.value.message
    assert tree.exists() and (nested / "keep.c").exists(), "nothing is lost"
    assert fork in await listed(client), "not archived"

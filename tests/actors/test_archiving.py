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


async def test_thread_list_pages_fill_past_archived_threads_and_include_archived_pages_them_too(client):
    """Issue 27 with ``thread.list``'s paging (SPEC F20): left out, archived threads
    never shorten a page — a page holds ``limit`` threads unless it is the
    last, and ``next`` goes on past the archived ones read — and with
    ``includeArchived`` the same pages hold them in their places."""
    made = [(await client.call("thread.create", title=f"t{n}"))["threadId"] for n in range(7)]
    archived = {made[1], made[4], made[5], made[6]}
    for thread_id in archived:
        await client.call("thread.archive", threadId=thread_id)

    async def pages(**params) -> list[list[str]]:
        out, before = [], None
        while True:
            page = await client.call("thread.list", limit=2, **({"before": before} if before else {}), **params)
            out.append([t["id"] for t in page["threads"]])
            before = page["next"]
            if before is None:
                return out

    newest_first = made[::-1]
    kept = [t for t in newest_first if t not in archived]
    assert await pages() == [kept[0:2], kept[2:3]], "full pages, the last one short"
    assert await pages(includeArchived=True) == [newest_first[0:2], newest_first[2:4], newest_first[4:6],
                                                 newest_first[6:7]]
    everything = await client.call("thread.list", includeArchived=True)
    assert [t["id"] for t in everything["threads"]] == made
    assert [t["id"] for t in (await client.call("thread.list"))["threads"]] == [t for t in made if t not in archived]
    # Past three archived threads and one more, to the oldest: the last page.
    three = await client.call("thread.list", limit=3)
    assert [t["id"] for t in three["threads"]] == kept[0:3] and three["next"] is None

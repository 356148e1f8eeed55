"""``agentd archive``, ``agentd unarchive`` and ``agentd threads --archived``
against a real daemon (issue 27, F20), as a person uses them."""

from __future__ import annotations

import json
import os

from tests.actors.gitrepo import make_repo
from tests.cli_helpers import run
from tests.helpers import script, send_and_wait


async def test_archive_hides_a_thread_that_threads_archived_shows_marked_and_unarchive_brings_back(daemon):
    kept = (await run(daemon, "new", "--title", "kept")).stdout.decode().strip()
    hidden = (await run(daemon, "new", "--title", "hidden")).stdout.decode().strip()

    said = (await run(daemon, "archive", hidden)).stdout.decode()
    assert f"thread {hidden} is archived" in said and f"agentd unarchive {hidden}" in said
    assert "worktree" not in said, "no worktree: nothing said of one"
    assert (await run(daemon, "threads", "--ids")).stdout.decode().split() == [kept]
    shown = (await run(daemon, "threads", "--archived")).stdout.decode().splitlines()
    (row,) = [line for line in shown if line.startswith(hidden)]
    assert row.endswith("ARCHIVED hidden"), row
    (other,) = [line for line in shown if line.startswith(kept)]
    assert "ARCHIVED" not in other and other.endswith("kept")
    listed = json.loads((await run(daemon, "threads", "--archived", "--json")).stdout)["threads"]
    assert [t["id"] for t in listed] == [kept, hidden] and listed[1]["archivedAt"] is not None
    again = json.loads((await run(daemon, "archive", hidden, "--json")).stdout)
    assert again["archived"] is True and again["worktreeRemoved"] is False, "archiving again changes nothing"

    said = (await run(daemon, "unarchive", hidden)).stdout.decode()
    assert f"thread {hidden} is listed again" in said
    assert sorted((await run(daemon, "threads", "--ids")).stdout.decode().split()) == sorted([kept, hidden])
    answer = json.loads((await run(daemon, "unarchive", hidden, "--json")).stdout)
    assert answer["archived"] is False and answer["worktreeRestored"] is False


async def test_archive_and_unarchive_of_a_worktree_fork_say_what_became_of_its_worktree(daemon, client, tmp_path):
    repo = make_repo(tmp_path / "repo")
    source = (await client.call("thread.create", workspace=str(repo)))["threadId"]
    await send_and_wait(client, source, script({"write": {"path": "agent.txt", "content": "source\n"}}))
    forked = await client.call("thread.fork", threadId=source, workspace="worktree")
    fork, branch = forked["threadId"], forked["workspaceSource"]["branch"]
    await send_and_wait(client, fork, script({"write": {"path": "work.txt", "content": "work\n"}}))

    said = (await run(daemon, "archive", fork)).stdout.decode()
    final = next(c["id"] for c in (await client.call("checkpoint.list", threadId=fork))["checkpoints"]
                 if c["kind"] == "archive")
    assert f"its worktree was removed after checkpoint {final}; branch {branch} stays" in said, said
    assert not os.path.exists(forked["workspace"])
    said = (await run(daemon, "unarchive", fork)).stdout.decode()
    assert f"its worktree was made again from checkpoint {final}" in said, said
    assert (await client.call("thread.get", threadId=fork))["thread"]["archivedAt"] is None

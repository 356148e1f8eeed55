"""Merge-back of files through the socket (issue 27; SPEC F7, F13): a
worktree fork's file changes come home as a three-way merge on the shadow
repositories — clean, conflicting (nothing written), with markers, undone by
the safety checkpoint, and again with only what changed since."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import InvalidState
from tests.actors.gitrepo import fingerprint, make_repo, tree_files
from tests.actors.test_worktrees import repo_client, write  # noqa: F401 - the fixture
from tests.helpers import script, send_and_wait, stored_events, wait_event, wait_run_terminal


async def merge(client: Client, source: str, fork: str, **files) -> dict:
    """Send a merge-back of ``fork``'s files; its answer, once its run ended."""
    sent = await client.call("thread.message.send", threadId=source, text="merged, go on",
                             mergeBack={"forkThreadId": fork, "files": True, **files})
    run = await wait_run_terminal(client, source, sent["runId"])
    assert run["status"] == "completed", run
    return sent


async def worktree_fork(client: Client, repo: Path) -> tuple[str, str, Path]:
    source = (await client.call("thread.create", title="main", workspace=str(repo)))["threadId"]
    assert (await send_and_wait(client, source, write("agent.txt", "source\n")))["status"] == "completed"
    forked = await client.call("thread.fork", threadId=source, workspace="worktree")
    return source, forked["threadId"], Path(forked["workspace"])


async def test_a_clean_merge_writes_the_forks_changes_and_its_safety_checkpoint_undoes_it(repo_client):
    client, repo, _data = repo_client
    source, fork, tree = await worktree_fork(client, repo)
    blob = bytes(range(256))
    run = await send_and_wait(client, fork, script(
        {"write": {"path": "feature.txt", "content": "new feature\n"}},
        {"write": {"path": "sub/c.txt", "content": "c by the fork\n"}},
        {"write": {"path": "img.bin", "content": base64.b64encode(blob).decode(), "binary": True}},
        {"delete": {"path": "run.sh"}}))
    assert run["status"] == "completed", run
    (repo / "a.txt").write_text("a edited by hand meanwhile\n")
    user_git = fingerprint(repo, besides=("refs/heads/agentd",))

    sent = await merge(client, source, fork)
    files = sent["mergeBack"]["files"]
    assert files["status"] == "merged" and files["conflicts"] == []
    assert sorted(files["written"]) == ["feature.txt", "img.bin", "sub/c.txt"] and files["deleted"] == ["run.sh"]
    assert (repo / "feature.txt").read_text() == "new feature\n" and (repo / "img.bin").read_bytes() == blob
    assert (repo / "sub" / "c.txt").read_text() == "c by the fork\n" and not (repo / "run.sh").exists()
    assert (repo / "a.txt").read_text() == "a edited by hand meanwhile\n", "ours kept"
    assert (repo / "debug.log").read_text() == "ignored\n"
    assert fingerprint(repo, besides=("refs/heads/agentd",)) == user_git, "never the user's index"
    (event,) = [e for e in await stored_events(client, source) if e["type"] == "merge_back.files"]
    assert event["payload"]["written"] == files["written"] and event["payload"]["transferId"] == sent["mergeBack"]["transferId"]
    (transfer,) = [t for t in (await client.call("thread.transfers", threadId=source))["transfers"]
                   if t["type"] == "merge_back"]
    handoff = (await client.call("handoff.get", handoffId=transfer["handoffId"]))["handoff"]
    assert "Files merged into this workspace" in handoff["text"] and "feature.txt (written)" in handoff["text"]
    safety = next(c for c in (await client.call("checkpoint.list", threadId=source))["checkpoints"]
                  if c["id"] == files["safetyCheckpointId"])
    assert (safety["kind"], safety["status"]) == ("pre_merge", "captured")

    await client.call("checkpoint.restore", checkpointId=files["safetyCheckpointId"])
    assert not (repo / "feature.txt").exists() and not (repo / "img.bin").exists()
    assert (repo / "run.sh").read_text() == "#!/bin/sh\necho hi\n" and (repo / "sub" / "c.txt").read_text() == "c1\n"
    assert (repo / "a.txt").read_text() == "a edited by hand meanwhile\n"


async def test_merging_again_brings_only_what_changed_since(repo_client):
    client, repo, _data = repo_client
    source, fork, _tree = await worktree_fork(client, repo)
    await send_and_wait(client, fork, write("feature.txt", "v1\n"))
    first = (await merge(client, source, fork))["mergeBack"]["files"]
    assert first["written"] == ["feature.txt"]
    (repo / "feature.txt").write_text("v1\nedited here after the merge\n")
    await send_and_wait(client, fork, write("other.txt", "later\n"))
    second = (await merge(client, source, fork))["mergeBack"]["files"]
    assert second["status"] == "merged" and second["written"] == ["other.txt"], second
    assert (repo / "feature.txt").read_text() == "v1\nedited here after the merge\n", "not merged again"
    assert second["baseCommit"] == first["theirsCommit"]


async def test_a_conflict_writes_nothing_unless_markers_are_asked(repo_client):
    client, repo, _data = repo_client
    source, fork, _tree = await worktree_fork(client, repo)
    await send_and_wait(client, fork, script({"write": {"path": "sub/c.txt", "content": "theirs\n"}},
                                             {"write": {"path": "clean.txt", "content": "clean\n"}}))
    (repo / "sub" / "c.txt").write_text("ours\n")
    sent = await merge(client, source, fork)
    files = sent["mergeBack"]["files"]
    assert files["status"] == "conflicts" and files["written"] == [] and files["deleted"] == []
    assert [c["path"] for c in files["conflicts"]] == ["sub/c.txt"]
    assert (repo / "sub" / "c.txt").read_text() == "ours\n" and not (repo / "clean.txt").exists(), "nothing written"
    (event,) = [e for e in await stored_events(client, source) if e["type"] == "merge_back.files"]
    assert [c["path"] for c in event["payload"]["conflicts"]] == ["sub/c.txt"]

    await send_and_wait(client, fork, script({"say": "still here"}))
    files = (await merge(client, source, fork, onConflict="markers"))["mergeBack"]["files"]
    assert files["status"] == "conflicts_marked" and [c["path"] for c in files["conflicts"]] == ["sub/c.txt"]
    marked = (repo / "sub" / "c.txt").read_text()
    assert "<<<<<<<" in marked and "ours" in marked and "theirs" in marked and ">>>>>>>" in marked
    assert (repo / "clean.txt").read_text() == "clean\n"
    await client.call("checkpoint.restore", checkpointId=files["safetyCheckpointId"])
    assert (repo / "sub" / "c.txt").read_text() == "ours\n" and not (repo / "clean.txt").exists()


async def test_a_fork_in_a_folder_of_its_own_is_merged_from_its_own_start(repo_client, tmp_path):
    """A fork given an absolute workspace (no fork-point checkpoint there):
    base and theirs are fetched from its shadow repository."""
    client, repo, _data = repo_client
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "b.txt").write_text("b2 unstaged\n")
    source = (await client.call("thread.create", title="main", workspace=str(repo)))["threadId"]
    await send_and_wait(client, source, write("agent.txt", "source\n"))
    fork = (await client.call("thread.fork", threadId=source, workspace=str(elsewhere)))["threadId"]
    await send_and_wait(client, fork, script({"write": {"path": "far.txt", "content": "from afar\n"}},
                                             {"write": {"path": "b.txt", "content": "b3 by the fork\n"}}))
    files = (await merge(client, source, fork))["mergeBack"]["files"]
    assert files["status"] == "merged" and sorted(files["written"]) == ["b.txt", "far.txt"]
    assert (repo / "far.txt").read_text() == "from afar\n" and (repo / "b.txt").read_text() == "b3 by the fork\n"


async def test_a_merge_is_refused_while_another_thread_runs_in_the_target_folder(repo_client):
    """Issue 27, SPEC F7/F14: the source workspace may be shared — here by a second fork
    that works in the same folder. A merge writes and deletes files there,
    so while that fork's run is active the merge is ``invalid_state`` naming
    its thread and run (``data.activeRuns``, as a restore's refusal), and
    nothing is written or recorded; once that run has ended it goes through."""
    client, repo, _data = repo_client
    source, fork, _tree = await worktree_fork(client, repo)
    await send_and_wait(client, fork, write("feature.txt", "from the worktree fork\n"))
    sharing = (await client.call("thread.fork", threadId=source))["threadId"]
    assert (await client.call("thread.get", threadId=sharing))["thread"]["workspace"] == str(repo)
    busy = await client.call("thread.message.send", threadId=sharing, text=script(
        {"write": {"path": "busy.txt", "content": "being written\n"}}, {"hang": True}))
    await wait_event(client, lambda e: e["type"] == "file_change.completed", thread_id=sharing)

    with pytest.raises(InvalidState) as refused:
        await client.call("thread.message.send", threadId=source, text="merged, go on",
                          mergeBack={"forkThreadId": fork, "files": True})
    message = str(refused.value)
    assert "merge-back of files" in message and sharing in message and busy["runId"] in message, message
    assert [(r["threadId"], r["runId"]) for r in refused.value.data["activeRuns"]] == [(sharing, busy["runId"])]
    assert not (repo / "feature.txt").exists() and (repo / "busy.txt").read_text() == "being written\n"
    checkpoints = (await client.call("checkpoint.list", threadId=source))["checkpoints"]
    assert [c for c in checkpoints if c["kind"] == "pre_merge"] == [], "nothing recorded"
    assert [t for t in (await client.call("thread.transfers", threadId=source))["transfers"]
            if t["type"] == "merge_back"] == [], "the message was not sent"

    await client.call("thread.stop", threadId=sharing)
    assert (await wait_run_terminal(client, sharing, busy["runId"]))["status"] == "interrupted"
    files = (await merge(client, source, fork))["mergeBack"]["files"]
    assert files["status"] == "merged" and files["written"] == ["feature.txt"]
    assert (repo / "busy.txt").read_text() == "being written\n", "ours kept"


async def test_a_file_over_the_checkpoint_size_cap_is_reported_not_merged(tmp_path, short_dir):
    """Issue 27, SPEC F7/F13: a file over ``[checkpoints] max_file_bytes`` is in no
    checkpoint, so a merge cannot carry it: the answer's ``notMerged`` and
    the ``merge_back.files`` event name it (``too_large``), the handoff says
    so, and it is not written here; the other files merge as usual."""
    repo = make_repo(tmp_path / "repo")
    config = tmp_path / "config.toml"
    config.write_text("[checkpoints]\nmax_file_bytes = 1000\n")
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            source, fork, tree = await worktree_fork(client, repo)
            run = await send_and_wait(client, fork, script(
                {"write": {"path": "big.dat", "content": "x" * 5000}},
                {"write": {"path": "small.txt", "content": "small\n"}}))
            assert run["status"] == "completed", run
            assert (tree / "big.dat").stat().st_size == 5000

            sent = await merge(client, source, fork)
            files = sent["mergeBack"]["files"]
            assert files["status"] == "merged" and files["written"] == ["small.txt"], files
            assert {"path": "big.dat", "reason": "too_large"} in files["notMerged"], files
            assert not (repo / "big.dat").exists(), "never merged"
            assert (repo / "small.txt").read_text() == "small\n"
            (event,) = [e for e in await stored_events(client, source) if e["type"] == "merge_back.files"]
            assert {"path": "big.dat", "reason": "too_large"} in event["payload"]["notMerged"]
            (transfer,) = [t for t in (await client.call("thread.transfers", threadId=source))["transfers"]
                           if t["type"] == "merge_back"]
            handoff = (await client.call("handoff.get", handoffId=transfer["handoffId"]))["handoff"]
            assert "big.dat (not merged: too_large)" in handoff["text"]
    finally:
        assert await daemon.terminate() == 0, daemon.log_text()[-4000:]


async def test_f9_a_task_delegated_with_a_worktree_of_its_own_merges_its_files_home(repo_client):
    """Issue 27: a delegated task with ``workspace: worktree`` is no fork,
    yet it worked on a copy of the parent's files in a tree of its own, so
    its parent merges its files back as a fork's (``forkThreadId``: the
    task): base its first baseline, theirs its latest checkpoint. The
    parent's tree is untouched until then; the handoff says it was delegated."""
    client, repo, _data = repo_client
    parent = (await client.call("thread.create", title="lead", workspace=str(repo)))["threadId"]
    before = tree_files(repo)
    made = await client.call("task.delegate", parentThreadId=parent, workspace="worktree", instructions=script(
        {"write": {"path": "task.txt", "content": "by the task\n"}}, {"delete": {"path": "gone-too.txt"}},
        {"write": {"path": "b.txt", "content": "b by the task\n"}}))
    run = await wait_run_terminal(client, made["taskId"], made["runId"])
    assert run["status"] == "completed", run
    assert tree_files(repo) == before, "the parent's tree is unchanged"

    sent = await merge(client, parent, made["taskId"])
    files = sent["mergeBack"]["files"]
    assert files["status"] == "merged" and sorted(files["written"]) == ["b.txt", "task.txt"], files
    assert (repo / "task.txt").read_text() == "by the task\n" and (repo / "b.txt").read_text() == "b by the task\n"
    (transfer,) = [t for t in (await client.call("thread.transfers", threadId=parent))["transfers"]
                   if t["type"] == "merge_back"]
    assert transfer["sourceThreadId"] == made["taskId"] and transfer["status"] == "consumed"
    handoff = (await client.call("handoff.get", handoffId=transfer["handoffId"]))["handoff"]
    assert "it was delegated" in handoff["text"] and "task.txt (written)" in handoff["text"]
    assert "A task delegated from this conversation" in handoff["text"] and "A fork of" not in handoff["text"]


async def test_a_file_name_that_is_not_utf8_merges_back_byte_for_byte(repo_client):
    """F13 / F20: a name git and the file system take but UTF-8 does not
    (written by the agent's own command in the fork's worktree) comes home
    under the same bytes, with the same content; the user's git is untouched."""
    client, repo, _data = repo_client
    source, fork, tree = await worktree_fork(client, repo)
    assert (await send_and_wait(client, fork, "make the worktree"))["status"] == "completed"
    name = b"caf\xe9 \xff.txt"
    with open(os.path.join(os.fsencode(tree), name), "wb") as f:
        f.write(b"from the fork\n")
    assert (await send_and_wait(client, fork, "its run-end checkpoint holds the file"))["status"] == "completed"
    user_git = fingerprint(repo, besides=("refs/heads/agentd",))
    files = (await merge(client, source, fork))["mergeBack"]["files"]
    assert files["status"] == "merged" and files["conflicts"] == [], files
    assert name in os.listdir(os.fsencode(repo))
    with open(os.path.join(os.fsencode(repo), name), "rb") as f:
        assert f.read() == b"from the fork\n"
    assert fingerprint(repo, besides=("refs/heads/agentd",)) == user_git, "never the user's index"

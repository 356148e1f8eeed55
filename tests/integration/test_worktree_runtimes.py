"""A task delegated with ``workspace: "worktree"`` on the real pinned Codex,
offline (issue 27; SPEC F7, F9): the child Codex works in a git worktree of
its own — proved by what Codex sent its (fake) model and by the file its
``apply_patch`` wrote there — the parent's tree and the user's git stay as
they were, and the child's change comes home with ``mergeBack {files: true}``,
which the parent Codex's next model request is told of.

Skipped when the binary is not installed (``npm ci --prefix tests/integration/runtimes``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.offline import codex as codex_world
from tests.actors.gitrepo import fingerprint, git, make_repo, tree_files
from tests.helpers import wait_run_terminal
from tests.integration.test_lineage_runtimes import agentd, needs_codex, send_and_wait

#: the fake model's answer to it: an ``apply_patch`` adding ``patched.txt``
PATCH_WORDS = "WRITE_FILE please"
PATCHED = b"patched by the fake model\n"


@needs_codex
async def test_f9_a_codex_task_in_a_worktree_of_its_own_merges_its_change_home(tmp_path: Path, short_dir, codex):
    repo = make_repo(tmp_path / "repo")
    async with agentd(tmp_path, short_dir, codex) as client:
        parent = (await client.call("thread.create", provider="codex", title="lead", workspace=str(repo)))["threadId"]
        first = await send_and_wait(client, parent, "hello alpha")
        assert first["status"] == "completed", first
        user_git = fingerprint(repo)
        before = tree_files(repo)

        made = await client.call("task.delegate", parentThreadId=parent, provider="codex", workspace="worktree",
                                 instructions=PATCH_WORDS)
        run = await wait_run_terminal(client, made["taskId"], made["runId"], timeout=120)
        assert run["status"] == "completed", run
        task = (await client.call("thread.get", threadId=made["taskId"]))["thread"]
        tree, branch = Path(task["workspace"]), task["workspaceSource"]["branch"]
        assert task["workspaceSource"]["kind"] == "worktree" and tree.parent.name == "worktrees"
        assert (tree / "patched.txt").read_bytes() == PATCHED, "Codex wrote in its own worktree"
        got = tree_files(tree)
        got.pop("patched.txt")
        assert got == before, "the parent's files as they were, carried over"
        assert git(tree, "rev-parse", "--abbrev-ref", "HEAD").strip() == branch
        assert tree_files(repo) == before and not (repo / "patched.txt").exists(), "the parent's tree is unchanged"
        assert fingerprint(repo, besides=(f"refs/heads/{branch}",)) == user_git
        diff = await client.call("checkpoint.diff", checkpointId=run["checkpointId"])
        assert [f["path"] for f in diff["files"]] == ["patched.txt"]

        sent = await client.call("thread.message.send", threadId=parent, text="merged, go on",
                                 mergeBack={"forkThreadId": made["taskId"], "files": True})
        files = sent["mergeBack"]["files"]
        assert files["status"] == "merged" and files["written"] == ["patched.txt"], files
        assert (repo / "patched.txt").read_bytes() == PATCHED
        merged = await wait_run_terminal(client, parent, sent["runId"], timeout=120)
        assert merged["status"] == "completed", merged
        assert fingerprint(repo, besides=(f"refs/heads/{branch}",)) == user_git, "never the user's index"

    requests = codex.model_requests()
    # The child's Codex was told it works in the worktree; the parent's, in the user's folder.
    child = [r for r in requests if f"<cwd>{tree}</cwd>" in json.dumps(r)]
    assert child and PATCH_WORDS in codex_world.user_texts(child[0])[-1]
    assert f"<cwd>{repo}</cwd>" in json.dumps(requests[-1]) and f"<cwd>{tree}</cwd>" not in json.dumps(requests[-1])
    # The parent's next request carries the merge-back handoff, which names the merged file.
    last = codex_world.user_texts(requests[-1])
    assert any("patched.txt (written)" in text for text in last), last

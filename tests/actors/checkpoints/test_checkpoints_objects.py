"""The commit objects and refs a capture writes without git (issue 10: two
git spawns fewer at a run end) are exactly what git writes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from agentd.actors.checkpoints import CheckpointExistsError
from agentd.actors.checkpoints import objects
from agentd.actors.checkpoints.gitproc import shadow_env


def git(repo: Path, *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> str:
    env = {**shadow_env(repo / ".git", repo), "HOME": str(repo), **(env or {})}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True,
                          input=stdin).stdout.decode().strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "--template=", str(repo)], check=True, env=shadow_env(repo / ".git", repo))
    return repo


@pytest.mark.parametrize("message", ["refs/agentd/thr_1/root/1", "two\nlines\n"])
def test_the_commit_is_byte_for_byte_what_commit_tree_writes(repo, message):
    tree = git(repo, "mktree", stdin=b"")
    when = 1_796_000_000
    dated = {"GIT_AUTHOR_DATE": f"@{when} +0000", "GIT_COMMITTER_DATE": f"@{when} +0000"}
    first = git(repo, "commit-tree", tree, "-m", "first", env=dated)
    theirs = git(repo, "commit-tree", tree, "-p", first, "-m", message, env=dated)
    ours = objects.write_loose_object(os.fsencode(repo / ".git"), "commit",
                                      objects.commit_body(tree, first, message, when))
    assert ours == theirs
    os.unlink(repo / ".git" / "objects" / theirs[:2] / theirs[2:])
    assert objects.write_loose_object(os.fsencode(repo / ".git"), "commit",
                                      objects.commit_body(tree, first, message, when)) == theirs
    git(repo, "fsck", "--strict", "--no-dangling")
    assert git(repo, "cat-file", "-t", theirs) == "commit"
    assert not [n for n in os.listdir(repo / ".git" / "objects" / theirs[:2]) if n.startswith("tmp_obj")]


def test_refs_are_create_only_loose_or_packed_and_a_stale_lock_is_replaced(repo):
    git_dir = os.fsencode(repo / ".git")
    tree = git(repo, "mktree", stdin=b"")
    commit = git(repo, "commit-tree", tree, "-m", "c")
    objects.create_ref(git_dir, "refs/agentd/t/root/1", commit)
    assert git(repo, "rev-parse", "refs/agentd/t/root/1") == commit
    with pytest.raises(CheckpointExistsError):
        objects.create_ref(git_dir, "refs/agentd/t/root/1", commit)
    git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "agentd" / "t" / "root" / "1").exists()
    with pytest.raises(CheckpointExistsError):
        objects.create_ref(git_dir, "refs/agentd/t/root/1", commit)
    assert not (repo / ".git" / "refs" / "agentd" / "t" / "root" / "1.lock").exists()
    stale = repo / ".git" / "refs" / "agentd" / "t" / "root" / "2.lock"
    stale.write_text("left by a killed writer\n")
    objects.create_ref(git_dir, "refs/agentd/t/root/2", commit)
    assert git(repo, "rev-parse", "refs/agentd/t/root/2") == commit and not stale.exists()
    git(repo, "update-ref", "-d", "refs/agentd/t/root/1")
    objects.create_ref(git_dir, "refs/agentd/t/root/1", commit)  # deleted: free again
    assert git(repo, "for-each-ref", "--format=%(refname)", "refs/agentd/") == "refs/agentd/t/root/1\nrefs/agentd/t/root/2"

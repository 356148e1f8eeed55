"""A user's git repository as the worktree tests need it (issue 27): a
commit, a staged change, an unstaged change, a deleted tracked file, an
untracked file, an ignored file and a stash entry — and a byte-for-byte
fingerprint of its ``.git`` to prove agentd changed nothing but what it
says it adds (git's worktree metadata and the fork's branch)."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")},
       "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x",
       "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def git(repo: Path | str, *args: str) -> str:
    """Run the user's git in ``repo``; its stdout."""
    return subprocess.run(["git", *args], cwd=repo, env=ENV, check=True, capture_output=True, text=True).stdout


def make_repo(repo: Path) -> Path:
    """The user's repository, in every state a worktree fork must respect."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitignore").write_text("*.log\nbuild/\n")
    (repo / "a.txt").write_text("a1\n")
    (repo / "b.txt").write_text("b1\n")
    (repo / "gone.txt").write_text("to be deleted\n")
    (repo / "sub").mkdir()
    (repo / "sub" / "c.txt").write_text("c1\n")
    (repo / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (repo / "run.sh").chmod(0o755)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "user commit")
    (repo / "a.txt").write_text("a-stashed\n")
    git(repo, "stash", "-q")
    (repo / "a.txt").write_text("a2 staged\n")
    git(repo, "add", "a.txt")
    (repo / "b.txt").write_text("b2 unstaged\n")
    (repo / "gone.txt").unlink()
    (repo / "new.txt").write_text("untracked\n")
    (repo / "debug.log").write_text("ignored\n")
    return repo


def fingerprint(repo: Path, *, besides: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file under ``repo/.git`` except ``worktrees/`` and the
    paths in ``besides`` (relative to ``.git``)."""
    out: dict[str, str] = {}
    root = repo / ".git"
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("worktrees") or any(rel == b or rel.startswith(b + "/") for b in besides):
            continue
        if path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def tree_files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but ``.git`` and ignored ones (``*.log``), as bytes."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(folder).parts and p.suffix != ".log"}

"""Worktree forks and merge-back of files (issue 27), beside what plain git
does, measured in the same run (ratios; interleaved rounds, so a busy
machine slows both alike).

1. Making a worktree fork of a 10,000-file repository with uncommitted
   changes (10 modified, 2 deleted, 10 untracked files), from a captured
   fork-point checkpoint — ``worktrees.materialize``: ``git worktree add``
   with hooks off, then the checkpoint's files carried over — against
   ``git worktree add`` alone (target: ≤ 1.5×). The fork's first baseline
   capture (its own shadow repository, made when its first run starts) is
   printed apart: it is the first capture of any new workspace.
2. A merge-back of 100 changed files (``checkpoints.merge.merge_files``:
   the ``pre_merge`` safety capture of the 10,000-file workspace, the
   fork's changes laid onto the base with their blobs copied, the three-way
   merge, the writes) against the plain-git alternative a person
   would type in the user's repository: ``git diff --binary`` of the fork's
   branch piped into ``git apply`` (no merge base, no safety checkpoint);
   and a capture of the workspace alone, the safety checkpoint's share.

    python scripts/bench_worktrees.py [--files 10000] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from agentd.actors import worktrees
from agentd.actors.checkpoints import CheckpointEngine
from agentd.actors.checkpoints.merge import merge_files
from agentd.actors.checkpoints.shadow import Shadow
from agentd.store.records import Checkpoint, WorkspaceSource

ENV = {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, "GIT_AUTHOR_NAME": "u",
       "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x",
       "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path | str, *args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, input=stdin).stdout


def make_repo(root: Path, files: int) -> Path:
    """A repository of ``files`` text files in nested folders, committed, then changed."""
    repo = root / "repo"
    for n in range(files):
        path = repo / f"src/pkg{n % 50:02d}/mod{n % 20:02d}/f{n}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"file {n}\n" + "line of text\n" * 40)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "user commit")
    for n in range(10):
        (repo / f"src/pkg{n:02d}/mod{n:02d}/f{n}.txt").write_text("changed\n")
    for n in range(10, 12):
        (repo / f"src/pkg{n:02d}/mod{n % 20:02d}/f{n}.txt").unlink()
    for n in range(10):
        (repo / f"untracked{n}.txt").write_text("new\n")
    return repo


class OneCheckpoint:
    """The store as ``materialize`` reads it: the fork point's checkpoint."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoint = checkpoint

    def get(self, _kind: Any, _id: str) -> Checkpoint:
        return self.checkpoint


async def fork_once(engine: CheckpointEngine, store: OneCheckpoint, repo: Path, root: Path, n: int) -> float:
    source = await worktrees.plan(engine.git, kind="worktree", source_thread_id="thr_source", source_workspace=str(repo),
                                  fork_thread_id=f"thr_fork{n:08d}", root=str(root), checkpoint_id="ckp_point")
    start = time.perf_counter()
    await worktrees.materialize(engine, store, f"thr_fork{n:08d}", source)
    return (time.perf_counter() - start) * 1000


def plain_add_once(repo: Path, root: Path, n: int) -> float:
    start = time.perf_counter()
    git(repo, "worktree", "add", "--quiet", "-b", f"plain{n}", str(root / f"plain{n}"), "HEAD")
    return (time.perf_counter() - start) * 1000


async def merge_once(engine: CheckpointEngine, repo: Path, fork_tree: Path, n: int, base_here: str) -> float:
    """The fork changes 100 files after its baseline; merge them back."""
    await engine.capture(str(fork_tree), f"refs/agentd/thr_fork/baseline/{n}")
    for k in range(100):
        (fork_tree / f"src/pkg{k % 50:02d}/mod{k % 20:02d}/f{1000 + k}.txt").write_text(f"fork change {n}\n")
    await engine.capture(str(fork_tree), f"refs/agentd/thr_fork/root/{n}")
    real = engine.workspace_key(str(fork_tree))
    fork_git_dir = os.path.join(Shadow.folder(engine.root, real), b"shadow.git")

    async def nothing(_capture: Any) -> None:
        return None

    start = time.perf_counter()
    async with engine.locked(str(repo)) as locked:
        await merge_files(locked.shadow, fork_git_dir=fork_git_dir, fork_base=f"refs/agentd/thr_fork/baseline/{n}",
                          fork_theirs=f"refs/agentd/thr_fork/root/{n}", base_here=base_here,
                          base_ref=f"refs/agentd/thr_source/merged/{n}-base",
                          theirs_ref=f"refs/agentd/thr_source/merged/{n}-theirs", safety_ref=f"refs/agentd/thr_source/pre_merge/{n}", max_file_bytes=engine.max_file_bytes,
                          markers=False, before_files=nothing)
    return (time.perf_counter() - start) * 1000


def plain_apply_once(repo: Path, plain_tree: Path, n: int) -> float:
    """The same 100 changes committed on the plain worktree's branch, applied to the user's files."""
    for k in range(100):
        (plain_tree / f"src/pkg{k % 50:02d}/mod{k % 20:02d}/f{2000 + k}.txt").write_text(f"plain change {n}\n")
    git(plain_tree, "add", "-A")
    git(plain_tree, "commit", "-qm", f"plain {n}")
    start = time.perf_counter()
    patch = git(plain_tree, "diff", "--binary", "HEAD~1", "HEAD")
    git(repo, "apply", stdin=patch)
    return (time.perf_counter() - start) * 1000


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


async def main(files: int, rounds: int) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench-wt-"))
    try:
        repo = make_repo(root, files)
        engine = CheckpointEngine(root / "checkpoints", refused=())
        point = await engine.capture(str(repo), "refs/agentd/thr_source/root/1")
        store = OneCheckpoint(Checkpoint(id="ckp_point", thread_id="thr_source", commit=point.commit,
                                         ref=point.ref, workspace=str(repo)))
        forks, plain, baseline = [], [], []
        for n in range(rounds):
            plain.append(plain_add_once(repo, root, n))
            forks.append(await fork_once(engine, store, repo, root / "worktrees", n))
            start = time.perf_counter()
            await engine.capture(str(root / "worktrees" / f"thr_fork{n:08d}"), "refs/agentd/thr_fork/baseline/first")
            baseline.append((time.perf_counter() - start) * 1000)
        merges, applies, captures = [], [], []
        fork_tree = root / "worktrees" / "thr_fork00000000"
        for n in range(rounds):
            applies.append(plain_apply_once(repo, root / "plain0", n))
            start = time.perf_counter()
            await engine.capture(str(repo), f"refs/agentd/thr_source/alone/{n}")
            captures.append((time.perf_counter() - start) * 1000)
            # The first merge's base is the fork point; each later one's the last merge's theirs.
            base_here = point.commit if n == 0 else f"refs/agentd/thr_source/merged/{n - 1}-theirs"
            merges.append(await merge_once(engine, repo, fork_tree, n, base_here))
        out = {"files": files, "rounds": rounds,
               "worktree_fork_ms": summary(forks), "git_worktree_add_ms": summary(plain),
               "fork_ratio": statistics.median(forks) / statistics.median(plain),
               "fork_first_baseline_ms": summary(baseline),
               "merge_back_100_files_ms": summary(merges), "git_diff_apply_100_files_ms": summary(applies),
               "merge_ratio": statistics.median(merges) / statistics.median(applies),
               "safety_capture_alone_ms": summary(captures),
               "merge_over_capture_ms": statistics.median(merges) - statistics.median(captures)}
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def show(out: dict[str, Any]) -> None:
    def line(name: str, key: str) -> None:
        s = out[key]
        print(f"{name:<44} {s['median']:9.1f} ms  ({s['min']:.1f}–{s['max']:.1f})")

    print(f"{out['files']} files, {out['rounds']} interleaved rounds")
    line("worktree fork (add + carry the checkpoint)", "worktree_fork_ms")
    line("git worktree add alone", "git_worktree_add_ms")
    print(f"{'ratio (target <= 1.5)':<44} {out['fork_ratio']:9.2f}x  {'met' if out['fork_ratio'] <= 1.5 else 'NOT met'}")
    line("the fork's first baseline capture (apart)", "fork_first_baseline_ms")
    line("merge-back of 100 files (safety+merge+write)", "merge_back_100_files_ms")
    line("git diff --binary | git apply, 100 files", "git_diff_apply_100_files_ms")
    print(f"{'ratio':<44} {out['merge_ratio']:9.2f}x")
    line("of which: a capture of the workspace alone", "safety_capture_alone_ms")
    print(f"{'merge-back minus that capture':<44} {out['merge_over_capture_ms']:9.1f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = trio.run(main, args.files, args.rounds)
    print(json.dumps(result, indent=2)) if args.json else show(result)

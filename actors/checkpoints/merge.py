"""A three-way merge of a fork's files into its source workspace (issue 27,
SPEC F7), entirely on the shadow repositories: the user's index is never
read or written.

- ours: the source workspace now, captured first as the safety checkpoint
  (restoring it undoes the merge);
- base and theirs: checkpoints of the fork, fetched from the fork's shadow
  repository into this one under ``fetch_prefix`` refs (base may already be
  here: the theirs of the previous merge of the same fork, so that merging
  again brings only what changed since);
- git 2.39's ``merge-tree --write-tree`` has no ``--merge-base``: the three
  trees get throwaway commits (ours and theirs children of base) so that git
  finds base as their merge base; they are reachable from no ref and go at
  the next compaction.

Clean — or conflicting with ``markers`` — the merged tree becomes a commit
whose files ``restore.apply`` writes (atomic per file, deletions first,
recorded modes: the restore's own guarantees), after ``before_files`` made
the safety checkpoint durable. Conflicting without markers: nothing is
written.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .capture import capture
from .modes import Modes
from .rawdiff import parse_raw_numstat
from .restore import GITLINK, Plan, apply
from .results import CaptureResult, RestoreResult
from .shadow import Shadow


@dataclass
class MergeOutcome:
    """What ``merge_files`` did.

    Attributes:
        safety: the capture of the workspace before the merge (ours).
        conflicts: conflicting paths and git's kind of conflict (``contents``, ``modify/delete``, …).
        applied: the restore that wrote the merged files (None: nothing written).
        base, theirs: the commits merged (here, in this shadow).
    """

    safety: CaptureResult
    base: str
    theirs: str
    conflicts: dict[str, str] = field(default_factory=dict)
    applied: RestoreResult | None = None


async def _commit(shadow: Shadow, tree: str, message: str, *parents: str) -> str:
    args = ["commit-tree", tree, "-m", message]
    for parent in parents:
        args += ["-p", parent]
    return (await shadow.run(args)).stdout.decode().strip()


async def _tree(shadow: Shadow, commit: str) -> str:
    return (await shadow.run(["rev-parse", "--verify", "-q", f"{commit}^{{tree}}"])).stdout.decode().strip()


def parse_merge_tree(out: bytes) -> tuple[str, dict[str, str]]:
    """``merge-tree --write-tree -z`` output: the tree, and each conflicting
    path with the kind of its conflict (from git's messages)."""
    head, _sep, messages = out.partition(b"\0\0")
    fields = head.split(b"\0")
    tree = fields[0].decode()
    conflicts: dict[str, str] = {}
    for entry in fields[1:]:
        if entry:
            conflicts.setdefault(os.fsdecode(entry.partition(b"\t")[2]), "contents")
    parts = messages.split(b"\0")
    at = 0
    while at < len(parts) and parts[at].isdigit():
        count = int(parts[at])
        paths = parts[at + 1:at + 1 + count]
        kind = parts[at + 1 + count].decode(errors="replace") if at + 1 + count < len(parts) else ""
        at += count + 3
        if kind.startswith("CONFLICT"):
            why = kind[kind.find("(") + 1:kind.find(")")] if "(" in kind else kind
            for path in paths:
                if os.fsdecode(path) in conflicts or not kind.startswith("CONFLICT (rename"):
                    conflicts[os.fsdecode(path)] = why
    return tree, conflicts


async def merge_files(shadow: Shadow, *, fork_git_dir: bytes, fetch: list[tuple[str, str]], base: str, theirs: str,
                      safety_ref: str, max_file_bytes: int, markers: bool,
                      before_files: Callable[[CaptureResult], Awaitable[None]]) -> MergeOutcome:
    """Merge ``theirs`` into the workspace, ``base`` their common ancestor
    (this shadow's locks held).

    Args:
        fork_git_dir: the fork's shadow repository.
        fetch: ``(fork ref, ref here)`` pairs to fetch first.
        base, theirs: refs here once fetched.
        safety_ref: the create-only ref of the ``pre_merge`` safety capture.
        markers: on a conflict, write the merged files with git's conflict markers.
        before_files: awaited with the safety capture before any file is
            written (the caller makes it durable there); always called.

    Raises:
        CheckpointError: a git step failed (nothing was written).
    """
    safety = await capture(shadow, safety_ref, base=None, max_file_bytes=max_file_bytes,
                           message=f"{safety_ref}\n\nbefore merging {theirs}")
    if fetch:
        await shadow.run(["fetch", "--no-tags", "--no-write-fetch-head", "--quiet", os.fsdecode(fork_git_dir),
                          *(f"+{src}:{dst}" for src, dst in fetch)])
    base_commit = (await shadow.run(["rev-parse", "--verify", "-q", f"{base}^{{commit}}"])).stdout.decode().strip()
    theirs_commit = (await shadow.run(["rev-parse", "--verify", "-q", f"{theirs}^{{commit}}"])).stdout.decode().strip()
    b = await _commit(shadow, await _tree(shadow, base_commit), "merge base")
    o = await _commit(shadow, safety.tree, "ours", b)
    t = await _commit(shadow, await _tree(shadow, theirs_commit), "theirs", b)
    merged = await shadow.run(["merge-tree", "--write-tree", "-z", o, t], ok=(0, 1))
    tree, conflicts = parse_merge_tree(merged.stdout)
    outcome = MergeOutcome(safety=safety, base=base_commit, theirs=theirs_commit, conflicts=conflicts)
    await before_files(safety)
    if conflicts and not markers:
        return outcome
    body = (await shadow.run(["cat-file", "commit", safety.commit])).stdout
    commit = await _commit(shadow, tree, f"merge of {theirs_commit}\n\n{Modes.parse(body).encode().decode()}",
                           safety.commit)
    diff = await shadow.run(["diff", "--raw", "-z", "--no-renames", "--no-abbrev", safety.commit, commit])
    entries = [e for e in parse_raw_numstat(diff.stdout)[0] if GITLINK not in (e.old_mode, e.new_mode)]
    outcome.applied = await apply(shadow, Plan(target=commit, safety=safety, entries=entries))
    return outcome

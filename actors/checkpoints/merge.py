"""A three-way merge of a fork's files into its source workspace (issue 27,
SPEC F7), entirely on the shadow repositories: the user's index is never
read or written.

- ours: the source workspace now, captured first as the safety checkpoint
  (restoring it undoes the merge);
- base: the fork point's checkpoint here (or the theirs of the previous
  merge of the same fork, so that merging again brings only what changed
  since); theirs: the fork's changes since its own start (or since that
  merge) — git's diff between two checkpoints of the fork's shadow
  repository — laid onto base in a temporary index, with only the changed
  blobs copied (a fork's whole tree is never fetched when base is here; when
  it is not, both are copied from the fork's shadow, borrowed objects too);
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

import contextlib
import os
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..regular_files import read_regular
from .capture import capture
from .gitproc import shadow_env
from .modes import Modes
from .rawdiff import parse_raw_numstat
from .restore import GITLINK, Plan, apply
from .results import CaptureResult, RestoreResult
from .shadow import Shadow, ShadowState


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


def _changes(out: bytes) -> list[tuple[str, str, str]]:
    """``diff-tree -r -z`` raw output as ``(mode, oid, path)``; a deletion has mode ``0``."""
    fields = out.split(b"\0")
    found = []
    for at in range(0, len(fields) - 1, 2):
        meta = fields[at].lstrip(b":").split(b" ")
        if len(meta) < 5:
            continue
        mode, oid, status = meta[1].decode(), meta[3].decode(), meta[4].decode()
        if GITLINK in (meta[0].decode(), mode):
            continue
        found.append(("0", "0" * len(oid), os.fsdecode(fields[at + 1])) if status.startswith("D")
                     else (mode, oid, os.fsdecode(fields[at + 1])))
    return found


def _fork_env(fork_git_dir: bytes) -> dict[str, str]:
    """git's environment in the fork's shadow repository — with the user's
    object directories it still borrows (``seed``: a worktree fork's first
    captures take the objects of the user's commit from there until its
    compaction copies them), or its checkpoints' files would be missing."""
    folder = os.path.dirname(fork_git_dir)
    env = shadow_env(fork_git_dir, folder)
    try:
        borrowed = ShadowState.decode(read_regular(os.path.join(folder, b"state.json"), follow_symlinks=True)).borrowed
    except FileNotFoundError:
        borrowed = []
    if borrowed:
        env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = ":".join(map(os.fsdecode, borrowed))
    return env


async def bring_changes(shadow: Shadow, fork_git_dir: bytes, fork_base: str, fork_theirs: str, base_here: str,
                        theirs_ref: str) -> str:
    """Theirs, made here without fetching the fork's whole tree: the fork's
    changes from ``fork_base`` to ``fork_theirs`` (git's diff in its shadow)
    laid onto ``base_here``'s tree in a temporary index, with only the new
    blobs copied over (one pack). ``theirs_ref`` names the commit; its id."""
    fork_env = _fork_env(fork_git_dir)
    diff = await shadow.gitbin.run(["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", fork_base, fork_theirs],
                                   env=fork_env, cwd=os.path.dirname(fork_git_dir))
    changes = _changes(diff.stdout)
    blobs = sorted({oid for mode, oid, _path in changes if mode != "0"})
    if blobs:
        pack = await shadow.gitbin.run(["pack-objects", "--stdout", "-q"], env=fork_env, cwd=os.path.dirname(fork_git_dir),
                                       stdin="".join(f"{oid}\n" for oid in blobs).encode())
        await shadow.run(["index-pack", "--stdin", "--fix-thin"], stdin=pack.stdout)
    index = os.path.join(shadow.git_dir, b"agentd-merge-index-" + secrets.token_hex(6).encode())
    env = {**shadow.env, "GIT_INDEX_FILE": os.fsdecode(index)}
    cwd = shadow.layout.top
    try:
        await shadow.gitbin.run(["read-tree", f"{base_here}^{{tree}}"], env=env, cwd=cwd)
        # The paths as the file system's bytes (``fsdecode``d: a name that is not UTF-8 stays itself).
        lines = b"".join(f"{mode} {oid}\t".encode() + os.fsencode(path) + b"\0" for mode, oid, path in changes)
        await shadow.gitbin.run(["update-index", "-z", "--index-info"], env=env, cwd=cwd, stdin=lines)
        tree = (await shadow.gitbin.run(["write-tree"], env=env, cwd=cwd)).stdout.decode().strip()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(index)
    base_commit = (await shadow.run(["rev-parse", "--verify", "-q", f"{base_here}^{{commit}}"])).stdout.decode().strip()
    commit = await _commit(shadow, tree, f"theirs: {fork_theirs} onto {base_commit}", base_commit)
    await shadow.run(["update-ref", theirs_ref, commit])
    return commit


async def _ends(shadow: Shadow, *, fork_git_dir: bytes, fork_base: str, fork_theirs: str, base_here: str | None,
                base_ref: str, theirs_ref: str) -> tuple[str, str]:
    """``(base, theirs)`` commits here: laid onto ``base_here`` when there is
    one (cheap), else both copied from the fork's shadow (their whole trees)."""
    if base_here is not None:
        theirs = await bring_changes(shadow, fork_git_dir, fork_base, fork_theirs, base_here, theirs_ref)
        base = (await shadow.run(["rev-parse", "--verify", "-q", f"{base_here}^{{commit}}"])).stdout.decode().strip()
        return base, theirs
    # Not ``git fetch``: the upload-pack it runs in the fork's shadow would
    # not see the objects that shadow borrows. One pack of both commits with
    # everything they reach, borrowed objects included, read in here.
    fork_env, fork_cwd = _fork_env(fork_git_dir), os.path.dirname(fork_git_dir)
    commits = [(await shadow.gitbin.run(["rev-parse", "--verify", "-q", f"{ref}^{{commit}}"], env=fork_env,
                                        cwd=fork_cwd)).stdout.decode().strip() for ref in (fork_base, fork_theirs)]
    pack = await shadow.gitbin.run(["pack-objects", "--revs", "--stdout", "-q"], env=fork_env, cwd=fork_cwd,
                                   stdin="".join(f"{c}\n" for c in commits).encode())
    await shadow.run(["index-pack", "--stdin", "--fix-thin"], stdin=pack.stdout)
    for ref, commit in zip((base_ref, theirs_ref), commits):
        await shadow.run(["update-ref", ref, commit])
    return commits[0], commits[1]


async def merge_files(shadow: Shadow, *, fork_git_dir: bytes, fork_base: str, fork_theirs: str,
                      base_here: str | None, base_ref: str, theirs_ref: str, safety_ref: str, max_file_bytes: int,
                      markers: bool, before_files: Callable[[CaptureResult], Awaitable[None]]) -> MergeOutcome:
    """Merge the fork's changes from ``fork_base`` to ``fork_theirs`` (refs
    of its shadow) into the workspace (this shadow's locks held).

    Args:
        fork_git_dir: the fork's shadow repository.
        base_here: the base as a commit (or ref) here — the fork point's
            checkpoint, or the last merge's theirs; None: copy ``fork_base`` here.
        base_ref, theirs_ref: refs made here (``base_ref`` only when copied).
        safety_ref: the create-only ref of the ``pre_merge`` safety capture.
        markers: on a conflict, write the merged files with git's conflict markers.
        before_files: awaited with the safety capture before any file is
            written (the caller makes it durable there); always called.

    Raises:
        CheckpointError: a git step failed (nothing was written).
    """
    safety = await capture(shadow, safety_ref, base=None, max_file_bytes=max_file_bytes,
                           message=f"{safety_ref}\n\nbefore merging {fork_theirs}")
    base_commit, theirs_commit = await _ends(shadow, fork_git_dir=fork_git_dir, fork_base=fork_base,
                                             fork_theirs=fork_theirs, base_here=base_here, base_ref=base_ref,
                                             theirs_ref=theirs_ref)
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

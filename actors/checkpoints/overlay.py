"""Carrying a checkpoint's files onto a fresh checkout (issue 27: a worktree
fork starts with its source's uncommitted state).

A new git worktree holds the files of its commit; the checkpoint of the
source workspace holds the files as they were at the fork point (tracked
changes, untracked non-ignored files). ``overlay`` writes into the new tree
exactly the paths whose content or git mode differs from the checkout — the
blobs come from the source's shadow repository through one ``cat-file
--batch`` — and removes the tracked paths the checkpoint lacks, except the
ones the checkpoint could not hold (ignored, over the size cap, inside a
nested repository): those keep the commit's version and are reported. The
new tree is agentd's own folder, so plain file operations suffice here; the
user's index is never read or written (the worktree's own index stays the
commit's, so ``git status`` there shows the carried changes as changes).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import trio

from .catfile import stream_blobs
from .gitproc import Git, scrubbed_env
from .modes import Modes
from .shadow import Shadow

GITLINK = "160000"
SYMLINK = "120000"
#: (git mode, blob id) of a path
Entry = tuple[str, str]


@dataclass
class Overlaid:
    """What ``overlay`` did: paths written and removed (workspace-relative),
    and the paths it left as the commit has them, with why."""

    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)


def parse_entries(out: bytes, *, staged: bool) -> dict[bytes, Entry]:
    """``ls-tree -r -z`` (``staged``: ``ls-files -s -z``) output as path → entry."""
    entries: dict[bytes, Entry] = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _tab, path = record.partition(b"\t")
        parts = meta.split(b" ")
        oid = parts[1] if staged else parts[2]
        entries[path] = (parts[0].decode(), oid.decode())
    return entries


async def checkpoint_entries(shadow: Shadow, commit: str) -> tuple[dict[bytes, Entry], Modes]:
    """The files of checkpoint ``commit`` (workspace-relative) and its recorded modes."""
    listed = await shadow.run(["ls-tree", "-r", "-z", "--full-tree", commit])
    body = await shadow.run(["cat-file", "commit", commit])
    return parse_entries(listed.stdout, staged=False), Modes.parse(body.stdout)


async def checkout_entries(git: Git, workspace: str) -> dict[bytes, Entry]:
    """The files the new worktree's index has under ``workspace`` (relative to it)."""
    listed = await git.run(["ls-files", "-s", "-z"], env=scrubbed_env(), cwd=workspace)
    return parse_entries(listed.stdout, staged=True)


async def _ignored(git: Git, workspace: str, paths: list[bytes]) -> set[bytes]:
    if not paths:
        return set()
    found = await git.run(["check-ignore", "-z", "--no-index", "--stdin"], env=scrubbed_env(), cwd=workspace,
                          stdin=b"\0".join(paths) + b"\0", ok=(0, 1))
    return {p for p in found.stdout.split(b"\0") if p}


def _under(path: bytes, folders: Iterable[bytes]) -> bool:
    return any(path == f or path.startswith(f.rstrip(b"/") + b"/") for f in folders)


def _remove(root: bytes, rel: bytes) -> None:
    os.unlink(os.path.join(root, rel))
    parent = os.path.dirname(rel)
    while parent:
        try:
            os.rmdir(os.path.join(root, parent))
        except OSError:
            return
        parent = os.path.dirname(parent)


def _write(root: bytes, rel: bytes, mode: str, content: bytes, modes: Modes) -> None:
    target = os.path.join(root, rel)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.lexists(target) and (os.path.islink(target) or not os.path.isdir(target)):
        os.unlink(target)
    if mode == SYMLINK:
        os.symlink(content, target)
        return
    executable = mode == "100755"
    bits = modes.file_mode(rel, executable) or (0o755 if executable else 0o644)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view):]
        os.fchmod(fd, bits)
    finally:
        os.close(fd)


async def overlay(git: Git, shadow: Shadow, commit: str, workspace: str, *,
                  not_held: Iterable[str] = ()) -> Overlaid:
    """Make ``workspace`` (a fresh checkout) hold the files of ``shadow``'s
    checkpoint ``commit``; ``not_held``: paths (and folders) the checkpoint
    skipped, which keep the checkout's version. Returns what it did."""
    wanted, modes = await checkpoint_entries(shadow, commit)
    present = await checkout_entries(git, workspace)
    skipped = [os.fsencode(p) for p in not_held]
    done = Overlaid()
    gone = [p for p, entry in present.items()
            if p not in wanted and entry[0] != GITLINK and not _under(p, skipped)]
    ignored = await _ignored(git, workspace, gone)
    for path in sorted(ignored):
        done.kept[os.fsdecode(path)] = "ignored"
    for path in (p for p in present if p not in wanted and _under(p, skipped)):
        done.kept[os.fsdecode(path)] = "not_checkpointed"
    root = os.fsencode(workspace)
    removing = sorted(p for p in gone if p not in ignored)
    def remove_all() -> None:
        for path in removing:
            _remove(root, path)

    await trio.to_thread.run_sync(remove_all)
    done.removed = [os.fsdecode(p) for p in removing]
    changed = sorted(p for p, entry in wanted.items() if entry[0] != GITLINK and present.get(p) != entry)
    oids = [wanted[p][1] for p in changed]

    async def consume(index: int, content: bytes) -> None:
        path = changed[index]
        await trio.to_thread.run_sync(_write, root, path, wanted[path][0], content, modes)

    await stream_blobs(shadow, oids, consume)
    done.written = [os.fsdecode(p) for p in changed]
    return done

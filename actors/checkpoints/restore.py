"""Restore: put the files of a checkpoint back (CHECKPOINTS.md recipe e3b).

1. A safety capture S of the workspace as it is now (returned: restoring it
   undoes the restore).
2. ``diff --raw -z --no-renames --no-abbrev S T`` says what differs.
3. Deletes first (``os.remove``; empty parents ``rmdir``-ed up to the
   workspace; never ``rmtree``).
4. Writes: blobs from one ``cat-file --batch`` into ``.agentd-tmp-*`` files
   next to their targets, then ``os.replace`` (atomic per file; 644/755 under
   the umask; symlinks). A path the target adds that already exists on disk
   (its bytes are in no checkpoint: ignored or over the size cap) or that a
   non-empty directory occupies is left alone and reported.
5. ``update-index --add --remove --replace`` for the touched paths only.

Never ``git clean``, ``reset --hard``, ``checkout`` or ``read-tree -u``:
ignored files are neither stored nor removed, nested repositories and the
user's ``.git`` are never touched. A failure part-way reports exactly which
paths were and were not restored.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
from dataclasses import dataclass

import trio

from .capture import capture
from .catfile import stream_blobs
from .diff import resolve
from .errors import CheckpointError, GitCommandError
from .paths import PathGuard
from .rawdiff import RawEntry, parse_raw_numstat
from .results import NotRestored, NotRestoredReason, RestoreResult
from .shadow import TEMP_PREFIX, Shadow

#: blobs gathered before a worker thread writes them
BATCH_BYTES = 8 << 20
GITLINK = "160000"
#: in the shadow folder while a restore writes: the workspace folders that may hold its temp files
JOURNAL = b"restore.journal"

log = logging.getLogger(__name__)


def sweep_interrupted(shadow: Shadow) -> int:
    """Remove the temp files a restore that never finished (a killed daemon)
    left in the workspace; called with the workspace's locks held. Returns
    how many were removed."""
    journal = os.path.join(shadow.dir, JOURNAL)
    try:
        with open(journal, "rb") as f:
            folders = f.read().split(b"\0")
    except FileNotFoundError:
        return 0
    removed = 0
    for folder in set(folders):
        full = os.path.join(shadow.layout.workspace, folder)
        try:
            names = os.listdir(full)
        except OSError:
            continue
        for name in names:
            if name.startswith(TEMP_PREFIX):
                try:
                    os.unlink(os.path.join(full, name))
                    removed += 1
                except OSError:
                    pass
    os.unlink(journal)
    if removed:
        log.warning("removed %d temp files of a restore of %s that did not finish", removed,
                    os.fsdecode(shadow.layout.workspace))
    return removed


@dataclass
class _Progress:
    written: list[bytes]
    deleted: list[bytes]
    not_restored: list[tuple[bytes, NotRestoredReason, str | None]]


def _refusal(status: tuple[str, bytes]) -> NotRestoredReason:
    return "nested_repository" if status[0] == "nested" else "parent_not_directory"


def delete_paths(root: bytes, paths: list[bytes], progress: _Progress) -> None:
    """Step 3 (blocking): remove ``paths`` (workspace-relative) and the
    parents they leave empty."""
    guard = PathGuard(root)
    parents: set[bytes] = set()
    for rel in paths:
        status = guard.of(rel)
        if status is not None:
            progress.not_restored.append((rel, _refusal(status), None))
            continue
        try:
            os.remove(os.path.join(root, rel))
        except FileNotFoundError:
            pass
        except OSError as exc:
            progress.not_restored.append((rel, "delete_failed", exc.strerror or str(exc)))
            continue
        progress.deleted.append(rel)
        parents.add(os.path.dirname(rel))
    for directory in sorted(parents, key=lambda d: d.count(b"/"), reverse=True):
        while directory:
            try:
                os.rmdir(os.path.join(root, directory))
            except OSError:
                break
            directory = os.path.dirname(directory)


def plan_writes(root: bytes, entries: list[RawEntry], progress: _Progress) -> list[RawEntry]:
    """Step 4's checks (blocking): the entries that may be written."""
    guard = PathGuard(root)
    planned = []
    for entry in entries:
        rel = entry.path
        status = guard.of(rel)
        if status is not None:
            progress.not_restored.append((rel, _refusal(status), None))
            continue
        try:
            st = os.lstat(os.path.join(root, rel))
        except (FileNotFoundError, NotADirectoryError):
            planned.append(entry)
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                os.rmdir(os.path.join(root, rel))  # an empty directory is no content
            except OSError:
                progress.not_restored.append((rel, "directory_in_the_way", None))
                continue
        elif entry.status == "A":
            progress.not_restored.append((rel, "exists_unstored", f"{st.st_size} bytes on disk are in no checkpoint"))
            continue
        planned.append(entry)
    return planned


def write_files(root: bytes, batch: list[tuple[bytes, str, bytes]], fsync: bool, progress: _Progress) -> None:
    """Write each (path, mode, content) atomically (blocking)."""
    for rel, mode, content in batch:
        full = os.path.join(root, rel)
        directory = os.path.dirname(full)
        tmp = os.path.join(directory, TEMP_PREFIX + secrets.token_hex(6).encode())
        try:
            os.makedirs(directory, exist_ok=True)
            if mode == "120000":
                os.symlink(content, tmp)
            else:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                             0o777 if mode == "100755" else 0o666)
                try:
                    view = memoryview(content)
                    while view:
                        view = view[os.write(fd, view):]
                    if fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(tmp, full)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            progress.not_restored.append((rel, "write_failed", exc.strerror or str(exc)))
            continue
        progress.written.append(rel)


async def restore(shadow: Shadow, target: str, *, safety_ref: str, safety_base: str | None,
                  max_file_bytes: int, fsync: bool = False) -> RestoreResult:
    """Restore the workspace of ``shadow`` (its locks held) to ``target``.

    Args:
        target: a checkpoint commit (or ref) of this shadow.
        safety_ref: the create-only ref of the safety checkpoint.
        safety_base: the safety checkpoint's base (default: the target, so its
            summary is what the restore takes back).
        max_file_bytes: the capture size cap (for the safety capture).
        fsync: fsync each written file before it replaces the old one.

    Raises:
        UnknownCheckpointError: ``target`` is not a commit of this shadow.
        CheckpointError: the safety capture failed (nothing was touched).
    """
    (commit,) = await resolve(shadow, target)
    safety = await capture(shadow, safety_ref, base=safety_base or commit, max_file_bytes=max_file_bytes,
                           message=f"{safety_ref}\n\nbefore restoring {commit}")
    diff = await shadow.run(["diff", "--raw", "-z", "--no-renames", "--no-abbrev", safety.commit, commit])
    entries = [e for e in parse_raw_numstat(diff.stdout)[0] if GITLINK not in (e.old_mode, e.new_mode)]
    root = shadow.layout.workspace
    progress = _Progress([], [], [])
    error: str | None = None
    planned: list[RawEntry] = []
    try:
        await trio.to_thread.run_sync(delete_paths, root, [e.path for e in entries if e.status == "D"], progress)
        planned = await trio.to_thread.run_sync(plan_writes, root, [e for e in entries if e.status != "D"], progress)
        if planned:
            with open(os.path.join(shadow.dir, JOURNAL), "wb") as f:
                f.write(b"\0".join(sorted({os.path.dirname(e.path) for e in planned})))
        batch: list[tuple[bytes, str, bytes]] = []
        size = 0

        async def flush() -> None:
            nonlocal batch, size
            todo, batch, size = batch, [], 0
            await trio.to_thread.run_sync(write_files, root, todo, fsync, progress)

        async def consume(index: int, content: bytes) -> None:
            nonlocal size
            entry = planned[index]
            batch.append((entry.path, entry.new_mode, content))
            size += len(content)
            if size >= BATCH_BYTES:
                await flush()

        await stream_blobs(shadow, [e.new_oid for e in planned], consume)
        await flush()
    except (CheckpointError, OSError) as exc:
        error = str(exc)
        done = {*progress.written, *progress.deleted, *(p for p, _, _ in progress.not_restored)}
        progress.not_restored.extend((e.path, "aborted", error) for e in entries if e.path not in done)
    finally:
        try:  # this restore's temp files are gone (each write removes its own on failure)
            os.unlink(os.path.join(shadow.dir, JOURNAL))
        except FileNotFoundError:
            pass
        touched = [shadow.layout.to_top(p) for p in progress.written + progress.deleted]
        if touched:
            shadow.index_tree = None
            with trio.CancelScope(shield=True), trio.move_on_after(60):
                try:
                    await shadow.run(["update-index", "--add", "--remove", "--replace", "-z", "--stdin"],
                                     stdin=b"".join(p + b"\0" for p in touched))
                except GitCommandError:
                    pass  # the index is a cache: the next capture compares the files again
    return RestoreResult(
        target=commit, safety=safety,
        written=[os.fsdecode(p) for p in progress.written], deleted=[os.fsdecode(p) for p in progress.deleted],
        not_restored=[NotRestored(path=os.fsdecode(p), reason=r, detail=d) for p, r, d in progress.not_restored],
        complete=not progress.not_restored and error is None, error=error,
    )

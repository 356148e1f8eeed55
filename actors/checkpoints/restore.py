"""Restore: put the files of a checkpoint back (CHECKPOINTS.md recipe e3b).

1. A safety capture S of the workspace as it is now (returned: restoring it
   undoes the restore). ``before_files`` is called with it before any file
   is touched, so the caller can make it durable first.
2. ``diff --raw -z --no-renames --no-abbrev S T`` says what differs.
3. Deletes first (``unlink``; empty parents ``rmdir``-ed up to the
   workspace; never ``rmtree``).
4. Writes: blobs from one ``cat-file --batch`` into ``.agentd-tmp-*`` files
   next to their targets (created ``0600``, then set to the checkpoint's
   recorded mode, ``modes``), then renamed over the target (atomic per file;
   symlinks). A path the target adds that already exists on disk with other
   bytes (its bytes are in no checkpoint: ignored or over the size cap) or
   that a non-empty directory occupies is left alone and reported.
5. Modes only: a file or folder whose content is the same but whose recorded
   mode is narrower than it is now is narrowed.
6. The shadow index is not updated: the next capture's listing finds every
   touched path (its stat changed) and stores it again.

Every file operation resolves its path at that moment from the workspace's
own directory descriptor without following symlinks (``beneath``): a folder
swapped for a symlink between a check and a write is refused and reported
(``parent_not_directory``), never followed, so a restore never writes,
deletes or chmods outside the workspace. A file that exists keeps a narrower
mode than the checkpoint's (a restore never widens a mode); a new one gets
the checkpoint's, and is never more readable than that while it is written.

Never ``git clean``, ``reset --hard``, ``checkout`` or ``read-tree -u``:
ignored files are neither stored nor removed, nested repositories (unless
the caller names them in ``include``) and the user's ``.git`` are never
touched. A failure part-way reports exactly which paths were and were not
restored.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import stat
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import trio

from ..regular_files import NotRegularFile, read_regular
from .beneath import Refused, Workspace, umask
from .capture import capture
from .catfile import stream_blobs
from .diff import resolve
from .errors import CheckpointError
from .modes import PERMISSIONS, Modes, narrowed
from .names import clean, exact, exact_map, shown
from .paths import PathGuard
from .rawdiff import RawEntry, parse_raw_numstat
from .results import CaptureResult, NotRestored, NotRestoredReason, RestoreResult
from .shadow import TEMP_PREFIX, Shadow

#: blobs gathered before a worker thread writes them
BATCH_BYTES = 8 << 20
GITLINK = "160000"
SYMLINK = "120000"
EXECUTABLE = "100755"
#: in the shadow folder while a restore writes: the workspace folders that may hold its temp files
JOURNAL = b"restore.journal"

log = logging.getLogger(__name__)


def sweep_interrupted(shadow: Shadow) -> int:
    """Remove the temp files a restore that never finished (a killed daemon)
    left in the workspace; called with the workspace's locks held. Returns
    how many were removed. Each folder is reached without following a
    symlink, like a restore's own writes."""
    journal = os.path.join(shadow.dir, JOURNAL)
    try:
        folders = read_regular(journal, follow_symlinks=True).split(b"\0")
    except FileNotFoundError:
        return 0
    except NotRegularFile:
        os.unlink(journal)  # not a journal this engine wrote: nothing it names is ours to sweep
        return 0
    removed = 0
    try:
        ws = Workspace(shadow.layout.workspace)
    except OSError:
        os.unlink(journal)
        return 0
    with ws:
        for folder in set(folders):
            try:
                fd = ws.open_folder(folder)
            except (OSError, Refused):
                continue
            try:
                listing = os.open(b".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
                try:
                    names = os.listdir(listing)
                finally:
                    os.close(listing)
                for name in names:
                    if os.fsencode(name).startswith(TEMP_PREFIX):
                        try:
                            os.unlink(name, dir_fd=fd)
                            removed += 1
                        except OSError:
                            pass
            except OSError:
                pass
            finally:
                if fd != ws.fd:
                    os.close(fd)
    os.unlink(journal)
    if removed:
        log.warning("removed %d temp files of a restore of %s that did not finish", removed,
                    os.fsdecode(shadow.layout.workspace))
    return removed


@dataclass
class _Progress:
    written: list[bytes] = field(default_factory=list)
    deleted: list[bytes] = field(default_factory=list)
    #: the ``st_mode`` each written regular file has now
    modes: dict[bytes, int] = field(default_factory=dict)
    not_restored: list[tuple[bytes, NotRestoredReason, str | None]] = field(default_factory=list)

    def refused(self, rel: bytes, status: tuple[str, bytes]) -> None:
        kind, folder = status
        if kind == "nested":
            self.not_restored.append((rel, "nested_repository", f"{shown(folder)} is a nested repository (it holds "
                                      "a .git); name it in include to restore its files"))
        else:
            self.not_restored.append((rel, "parent_not_directory",
                                      f"{shown(folder)} is a symlink or a file where a folder should be; not followed"))


@dataclass
class Plan:
    """What ``restore`` is about to do, known before any file is touched."""

    #: the checkpoint commit being restored
    target: str
    #: the safety checkpoint of the workspace as it was before
    safety: CaptureResult
    #: the raw diff entries S → T (gitlinks left out)
    entries: list[RawEntry]


def _default_mode(executable: bool) -> int:
    return (0o777 if executable else 0o666) & ~umask()


def _folder_mode(modes: Modes) -> Callable[[bytes], int]:
    def mode(folder: bytes) -> int:
        found = modes.folder_mode(folder)
        return found if found is not None else 0o777 & ~umask()
    return mode


def delete_paths(ws: Workspace, guard: PathGuard, paths: list[bytes], progress: _Progress) -> None:
    """Step 3 (blocking): remove ``paths`` (workspace-relative) and the
    parents they leave empty."""
    parents: set[bytes] = set()
    for rel in paths:
        status = guard.of(rel)
        if status is not None:
            progress.refused(rel, status)
            continue
        try:
            with ws.parent(rel) as fd:
                os.unlink(os.path.basename(rel), dir_fd=fd)
        except FileNotFoundError:
            pass  # gone already (or its folder is)
        except Refused as exc:
            progress.not_restored.append((rel, "parent_not_directory", exc.detail))
            continue
        except OSError as exc:
            progress.not_restored.append((rel, "delete_failed", clean(exc.strerror or str(exc))))
            continue
        progress.deleted.append(rel)
        parents.add(os.path.dirname(rel))
    for directory in sorted(parents, key=lambda d: d.count(b"/"), reverse=True):
        while directory:
            try:
                with ws.parent(directory) as fd:
                    os.rmdir(os.path.basename(directory), dir_fd=fd)
            except (OSError, Refused):
                break
            directory = os.path.dirname(directory)


def _same_blob(ws: Workspace, rel: bytes, entry: RawEntry, size: int) -> bool:
    """Whether the regular file at ``rel`` already holds ``entry``'s blob (SHA-1 shadows)."""
    if len(entry.new_oid) != 40 or entry.new_mode == SYMLINK or size > 64 << 20:
        return False
    try:
        with ws.parent(rel) as fd:
            # a FIFO swapped in since the lstat is refused, not waited on
            data = read_regular(os.path.basename(rel), dir_fd=fd, limit=size)
    except (OSError, Refused):
        return False
    digest = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's object id
    return digest == entry.new_oid


def plan_writes(ws: Workspace, guard: PathGuard, entries: list[RawEntry], progress: _Progress) -> list[RawEntry]:
    """Step 4's checks (blocking): the entries that may be written. (The
    writes resolve every path again: these checks only spare reading blobs
    that cannot be written.)"""
    planned = []
    for entry in entries:
        rel = entry.path
        status = guard.of(rel)
        if status is not None:
            progress.refused(rel, status)
            continue
        try:
            with ws.parent(rel) as fd:
                st = os.stat(os.path.basename(rel), dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            planned.append(entry)
            continue
        except Refused as exc:
            progress.not_restored.append((rel, "parent_not_directory", exc.detail))
            continue
        if stat.S_ISDIR(st.st_mode):
            planned.append(entry)  # an empty directory is no content: the write removes it, else refuses
        elif entry.status == "A":
            if stat.S_ISREG(st.st_mode) and (st.st_mode & 0o100 != 0) == (entry.new_mode == EXECUTABLE) \
                    and _same_blob(ws, rel, entry, st.st_size):
                progress.written.append(rel)  # already as the checkpoint has it
                progress.modes[rel] = st.st_mode
            else:
                progress.not_restored.append((rel, "exists_unstored",
                                              f"{st.st_size} bytes on disk are in no checkpoint"))
        else:
            planned.append(entry)
    return planned


def write_files(ws: Workspace, batch: list[tuple[bytes, str, bytes]], modes: Modes, fsync: bool,
                progress: _Progress) -> None:
    """Write each (path, git mode, content) atomically (blocking)."""
    folder_mode = _folder_mode(modes)
    for rel, mode, content in batch:
        name = os.path.basename(rel)
        tmp = TEMP_PREFIX + secrets.token_hex(6).encode()
        try:
            with ws.parent(rel, create=True, folder_mode=folder_mode) as fd:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    st = None
                if st is not None and stat.S_ISDIR(st.st_mode):
                    try:
                        os.rmdir(name, dir_fd=fd)  # an empty directory is no content
                    except OSError:
                        progress.not_restored.append((rel, "directory_in_the_way", None))
                        continue
                    st = None
                try:
                    written_mode = _write_one(fd, tmp, name, rel, mode, content, modes, st, fsync)
                except OSError:
                    try:
                        os.unlink(tmp, dir_fd=fd)
                    except OSError:
                        pass
                    raise
        except Refused as exc:
            progress.not_restored.append((rel, "parent_not_directory", exc.detail))
            continue
        except OSError as exc:
            progress.not_restored.append((rel, "write_failed", clean(exc.strerror or str(exc))))
            continue
        progress.written.append(rel)
        if written_mode is not None:
            progress.modes[rel] = stat.S_IFREG | written_mode


def _write_one(fd: int, tmp: bytes, name: bytes, rel: bytes, mode: str, content: bytes, modes: Modes,
               st: os.stat_result | None, fsync: bool) -> int | None:
    """Write one file as ``tmp`` in the folder ``fd`` and rename it over
    ``name``; returns the permission bits it got (None for a symlink)."""
    wanted = None
    if mode == SYMLINK:
        os.symlink(content, tmp, dir_fd=fd)
    else:
        executable = mode == EXECUTABLE
        wanted = modes.file_mode(rel, executable)
        if wanted is None:
            wanted = _default_mode(executable)
        if st is not None and stat.S_ISREG(st.st_mode):
            wanted = narrowed(st.st_mode & PERMISSIONS, wanted)  # never more open than the file is now
        # 0600 while it is written: never readable by others before its mode is set
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(out, view):]
            os.fchmod(out, wanted)
            if fsync:
                os.fsync(out)
        finally:
            os.close(out)
    os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    return wanted


def narrow_modes(ws: Workspace, guard: PathGuard, before: Modes, target: Modes, skip: set[bytes],
                 progress: _Progress) -> None:
    """Step 5 (blocking): files and folders whose recorded mode in ``target``
    is narrower than on disk, while their content did not change (``skip``:
    the paths the diff has), are narrowed to it. Never widened."""
    if not target.recorded:
        return
    candidates: list[tuple[bytes, int, bool]] = []
    for path in set(before.files) | set(target.files):
        if path in skip:
            continue
        executable = bool((before.files.get(path, target.files.get(path, 0))) & 0o100)
        wanted = target.file_mode(path, executable)
        if wanted is not None:
            candidates.append((path, wanted, False))
    for folder in set(before.folders) | set(target.folders):
        wanted = target.folder_mode(folder)
        if wanted is not None:
            candidates.append((folder, wanted, True))
    for path, wanted, is_folder in candidates:
        if guard.of(path) is not None:
            continue
        try:
            with ws.parent(path) as fd:
                name = os.path.basename(path)
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not (stat.S_ISDIR(st.st_mode) if is_folder else stat.S_ISREG(st.st_mode)):
                    continue
                current = st.st_mode & PERMISSIONS
                new = narrowed(current, wanted)
                if new == current:
                    continue
                os.chmod(name, new, dir_fd=fd, follow_symlinks=False)
        except (OSError, Refused, NotImplementedError):
            continue
        if not is_folder:
            progress.written.append(path)
            progress.modes[path] = stat.S_IFREG | new


async def prepare(shadow: Shadow, target: str, *, safety_ref: str, safety_base: str | None,
                  max_file_bytes: int) -> Plan:
    """Steps 1–2: the safety capture and the diff; nothing is touched yet.

    Raises:
        UnknownCheckpointError: ``target`` is not a commit of this shadow.
        CheckpointError: the safety capture failed.
    """
    (commit,) = await resolve(shadow, target)
    safety = await capture(shadow, safety_ref, base=safety_base or commit, max_file_bytes=max_file_bytes,
                           message=f"{safety_ref}\n\nbefore restoring {commit}")
    diff = await shadow.run(["diff", "--raw", "-z", "--no-renames", "--no-abbrev", safety.commit, commit])
    entries = [e for e in parse_raw_numstat(diff.stdout)[0] if GITLINK not in (e.old_mode, e.new_mode)]
    return Plan(target=commit, safety=safety, entries=entries)


async def restore(shadow: Shadow, target: str, *, safety_ref: str, safety_base: str | None,
                  max_file_bytes: int, fsync: bool = False, include: Iterable[bytes] = (),
                  before_files: Callable[[CaptureResult], Awaitable[None]] | None = None) -> RestoreResult:
    """Restore the workspace of ``shadow`` (its locks held) to ``target``.

    Args:
        target: a checkpoint commit (or ref) of this shadow.
        safety_ref: the create-only ref of the safety checkpoint.
        safety_base: the safety checkpoint's base (default: the target, so its
            summary is what the restore takes back).
        max_file_bytes: the capture size cap (for the safety capture).
        fsync: fsync each written file before it replaces the old one.
        include: workspace-relative folders that are nested repositories now
            whose files are restored anyway (their ``.git`` is never touched).
        before_files: awaited with the safety capture before any file is
            touched (an exception from it ends the restore with nothing changed).

    Raises:
        UnknownCheckpointError: ``target`` is not a commit of this shadow.
        CheckpointError: the safety capture failed (nothing was touched).
    """
    plan = await prepare(shadow, target, safety_ref=safety_ref, safety_base=safety_base, max_file_bytes=max_file_bytes)
    if before_files is not None:
        await before_files(plan.safety)
    return await apply(shadow, plan, fsync=fsync, include=include)


async def apply(shadow: Shadow, plan: Plan, *, fsync: bool = False, include: Iterable[bytes] = ()) -> RestoreResult:
    """Steps 3–6 for a ``prepare``-d plan (the workspace's locks held since)."""
    entries = plan.entries
    root = shadow.layout.workspace
    progress = _Progress()
    error: str | None = None
    included = {p.strip(b"/") for p in include}
    target_modes = await shadow.commit_modes(plan.target)
    safety_modes = await shadow.commit_modes(plan.safety.commit)
    ws = await trio.to_thread.run_sync(Workspace, root)
    guard = PathGuard(root, allow_nested=included)
    try:
        await trio.to_thread.run_sync(delete_paths, ws, guard, [e.path for e in entries if e.status == "D"], progress)
        planned = await trio.to_thread.run_sync(plan_writes, ws, guard, [e for e in entries if e.status != "D"], progress)
        if planned:
            with open(os.path.join(shadow.dir, JOURNAL), "wb") as f:
                f.write(b"\0".join(sorted({os.path.dirname(e.path) for e in planned})))
        batch: list[tuple[bytes, str, bytes]] = []
        size = 0

        async def flush() -> None:
            nonlocal batch, size
            todo, batch, size = batch, [], 0
            await trio.to_thread.run_sync(write_files, ws, todo, target_modes, fsync, progress)

        async def consume(index: int, content: bytes) -> None:
            nonlocal size
            entry = planned[index]
            batch.append((entry.path, entry.new_mode, content))
            size += len(content)
            if size >= BATCH_BYTES:
                await flush()

        await stream_blobs(shadow, [e.new_oid for e in planned], consume)
        await flush()
        await trio.to_thread.run_sync(narrow_modes, ws, guard, safety_modes, target_modes,
                                      {e.path for e in entries}, progress)
    except (CheckpointError, OSError) as exc:
        error = clean(str(exc))
        done = {*progress.written, *progress.deleted, *(p for p, _, _ in progress.not_restored)}
        progress.not_restored.extend((e.path, "aborted", error) for e in entries if e.path not in done)
    finally:
        ws.close()
        try:  # this restore's temp files are gone (each write removes its own on failure)
            os.unlink(os.path.join(shadow.dir, JOURNAL))
        except FileNotFoundError:
            pass
        if progress.written or progress.deleted:
            # The index is left as the safety capture wrote it: every path this restore wrote or removed
            # has another stat now (a new inode, or none), so the next capture's ``diff-files`` lists it
            # and hashes it again, as it would have here — one full read and write of the index fewer
            # (100,000 entries: 10 MB). The modes that capture starts from are the safety capture's, and
            # it reads those paths' modes again; the ones written within git's one-second blind spot
            # are read again anyway (``modes.recent``).
            shadow.index_tree = None
            shadow.modes_recent |= set(progress.modes)
    written = list(dict.fromkeys(progress.written))
    return RestoreResult(
        target=plan.target, safety=plan.safety,
        written=[shown(p) for p in written], deleted=[shown(p) for p in progress.deleted],
        not_restored=[NotRestored(path=shown(p), reason=r, detail=d, path_bytes=exact(p))
                      for p, r, d in progress.not_restored],
        complete=not progress.not_restored and error is None, error=error,
        path_bytes=exact_map([*written, *progress.deleted]),
    )

"""What a small workspace looked like at its last capture, so that the next
capture can tell from ``lstat`` alone whether anything was created, deleted or
renamed since (issue 24 §3, §4).

A capture of a small workspace (``capture.SMALL_TREE``) lists it with one
``git ls-files`` spawn: 5–15 ms of a run's end on a loaded machine, most of
it for a turn that changed no file. A ``Snapshot`` holds the status of every
folder of the workspace (its inode, size, mtime and ctime) and of every file
the shadow index stores. A name is added to, removed from or renamed within a
folder only by changing that folder's ctime and mtime, so while every folder
reads as recorded, the workspace holds exactly the names it held: the files
stored then, and what the capture then left out — ignored files, which stay
ignored while the ignore rules stay as they were (the capture checks them),
and nested repositories, which it never reads. The stored files whose status
changed are the only candidates for a change; they go to ``update-index`` as
``ls-files -m`` would have sent them. Anything else — a folder that changed,
an ignore file among the changed files, a folder that can no longer be
opened — and the capture lists the workspace with git, as before.

Why ``lstat`` is enough: every change of a file's content, mode or name
sets its ctime (and its folder's) to the current time, and nobody can set a
ctime back. The one blind spot is a second change within the timestamp's
granularity of the recorded one: the status would read the same. So a
snapshot is kept only if everything it records was last changed at least
``MARGIN`` before the capture that records it started (git's own "racy" rule,
with the capture's one-second margin for clocks that tick apart): a later
change then gets a ctime no recorded one can equal. A file system whose times
are whole seconds gets no snapshot: there the margin is not enough. A workspace with more
than ``MAX_FOLDERS`` folders (an ignored ``node_modules``, say: its folders
are watched like the others, nothing inside them is read) gets no snapshot.

Folders are opened beneath the workspace one component at a time without
following symlinks (``seedscan._Folders``): a folder swapped for a symlink
reads as changed, and nothing outside the workspace is read. An ignore file
that is not stored (one the rules ignore) would change what is ignored
without changing a stored file: such a workspace gets no snapshot.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from .seedscan import _Folders

#: git's per-folder ignore file
IGNORE_FILE = b".gitignore"
#: a status recorded at least this many seconds before its capture began is trusted
MARGIN = 1.0
#: more folders than this, and the workspace gets no snapshot
MAX_FOLDERS = 512

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: (type and mode, inode, device, size, mtime ns, ctime ns, owner, group)
Status = tuple[int, int, int, int, int, int, int, int]


def status(st: os.stat_result) -> Status:
    """The fields of ``st`` a snapshot compares."""
    return (st.st_mode, st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_uid, st.st_gid)


@dataclass(frozen=True)
class Snapshot:
    """A small workspace at the end of a capture (paths workspace-relative)."""

    #: the status of every folder (``b""``: the workspace itself), nested repositories' own folders included
    folders: Mapping[bytes, Status]
    #: the status of every file the shadow index stores for the workspace
    files: Mapping[bytes, Status]
    #: the shadow index file's ``Shadow.index_stat`` once the capture was done
    index_stat: tuple[int, int, int] | None
    #: ``Shadow.refresh_excludes``' fingerprint of the ignore rules no listing shows
    excludes: str
    #: the nested repositories (top-relative), which the capture excluded
    nested: tuple[bytes, ...]


def unseen_by_git(old: Status, new: Status) -> bool:
    """Whether a file whose status went from ``old`` to ``new`` changed in a
    way git's own stat check misses: git 2.39 compares ctime and mtime in whole
    seconds, so an edit of the same size that puts the mtime back (``touch
    -r``, ``cp -p``, an extracted archive) within the second of the last
    recorded ctime reads as unchanged to ``ls-files -m``, ``diff-files`` and
    ``update-index`` alike. Such a file must be taken out of the index
    before ``update-index`` so that git reads it again."""
    if new == old:
        return False
    same = (new[0] == old[0] and new[1:4] == old[1:4] and new[6:] == old[6:]
            and new[4] // 1_000_000_000 == old[4] // 1_000_000_000
            and new[5] // 1_000_000_000 == old[5] // 1_000_000_000)
    return same


def settled(statuses: Mapping[bytes, Status], began: float) -> bool:
    """Whether every status in ``statuses`` was last changed ``MARGIN``
    before ``began`` (the capture's start, ``time.time()``), on a file
    system that keeps sub-second times: one that keeps whole seconds (FAT's
    two, some network and FUSE file systems') could give a later change the
    very ctime recorded, and its clock may not be this one."""
    limit = int((began - MARGIN) * 1_000_000_000)
    return all(entry[5] < limit and entry[5] % 1_000_000_000 for entry in statuses.values())


@contextmanager
def _beneath(workspace: bytes) -> Iterator[tuple[int, _Folders]]:
    """The workspace's descriptor and its folders' (``seedscan._Folders``),
    closed after the block (``OSError`` if it cannot be opened)."""
    root_fd = os.open(workspace, _DIR_FLAGS)
    folders = _Folders(root_fd)
    try:
        yield root_fd, folders
    finally:
        folders.close()
        os.close(root_fd)


def walk(workspace: bytes, nested: Collection[bytes]) -> tuple[dict[bytes, Status], list[bytes]] | None:
    """The status of every folder beneath ``workspace`` (blocking), not
    entering ``.git`` or the nested repositories (``nested``,
    workspace-relative), whose own folders are recorded; and the ignore files
    (``.gitignore``) found in them. None when there are more than
    ``MAX_FOLDERS`` folders or one cannot be read."""
    try:
        return _walk(workspace, nested)
    except OSError:
        return None


def _walk(workspace: bytes, nested: Collection[bytes]) -> tuple[dict[bytes, Status], list[bytes]] | None:
    found: dict[bytes, Status] = {}
    rules: list[bytes] = []
    with _beneath(workspace) as (root_fd, folders):
        found[b""] = status(os.fstat(root_fd))
        pending = [b""]
        while pending:
            folder = pending.pop()
            fd = folders.fd(folder)
            if fd is None:
                return None
            with os.scandir(fd) as entries:
                for entry in entries:
                    name = os.fsencode(entry.name)
                    path = folder + b"/" + name if folder else name
                    if name == IGNORE_FILE:
                        rules.append(path)
                    if name == b".git" or not entry.is_dir(follow_symlinks=False):
                        continue
                    found[path] = status(entry.stat(follow_symlinks=False))
                    if len(found) > MAX_FOLDERS:
                        return None
                    if path not in nested:
                        pending.append(path)
    return found, rules


def folders_now(workspace: bytes, recorded: Collection[bytes]) -> dict[bytes, Status] | None:
    """The status now of the ``recorded`` folders (workspace-relative;
    blocking). None when one of them is gone or no longer a folder."""
    try:
        return _folders_now(workspace, recorded)
    except OSError:
        return None


def _folders_now(workspace: bytes, recorded: Collection[bytes]) -> dict[bytes, Status] | None:
    found: dict[bytes, Status] = {}
    with _beneath(workspace) as (root_fd, folders):
        for path in sorted(recorded):
            if not path:
                found[path] = status(os.fstat(root_fd))
                continue
            parent, _, name = path.rpartition(b"/")
            fd = folders.fd(parent)
            if fd is None:
                return None
            st = os.lstat(name, dir_fd=fd)
            if not stat.S_ISDIR(st.st_mode):
                return None
            found[path] = status(st)
    return found

"""One pass over the workspace's tracked files: the seeded capture's
(issue 24 §2), and a small workspace's (``scan_tracked``).

A seeded first capture needs, for every file the copied index holds, its
permission bits (git keeps only 644/755: ``modes``) and whether it may
have changed since the user's git recorded it (what ``git diff-files``
says). Both come from one ``lstat`` per file here, so the files are not
walked twice (once by git, once by Python).

The comparison is git's own stat check, made stricter, never looser: an
entry counts as unchanged only if the file is still of its type and exec
bit, and its ctime, mtime (to the nanosecond where the index has them),
inode, owner, group and size are the ones recorded, and the entry is not
*racy* (recorded within a second of the index file's own mtime, when the
file could have changed again within the same timestamp). Everything else
is listed as changed, and the capture hashes it again from disk, as it does
for what ``diff-files`` lists: a file this pass lists that git would not have
only costs a hash. (git compares the device only when built with
``USE_STDEV``, off by default; neither does this.)

Each folder is opened beneath the workspace without following symlinks, so
a file behind a folder that is now a symlink (or a file) is listed as
changed, and the capture's ``classify`` drops it as it drops what
``diff-files`` lists there.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence

from .modes import PERMISSIONS, Modes, _common, folder_modes, parents
from .userindex import STAT_DATA

_MASK = 0xFFFFFFFF
_NS = 1_000_000_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_REGULAR, _EXECUTABLE, _SYMLINK = 0o100644, 0o100755, 0o120000


class _Folders:
    """Folder descriptors beneath the workspace, opened one component at a
    time without following symlinks; only the current folder and its first
    ``KEEP`` ancestors stay open (an agent's command can nest folders
    ~2,000 deep: neither a recursion nor a descriptor per level)."""

    #: ancestors deeper than this are opened on the way down and closed again
    KEEP = 32

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        self.open: dict[bytes, int] = {}

    def fd(self, folder: bytes) -> int | None:
        """The descriptor of ``folder`` (workspace-relative), None when a
        component is missing, a symlink or not a folder."""
        if not folder:
            return self.root_fd
        found = self.open.get(folder)
        if found is not None:
            return found
        for name in [n for n in self.open if not folder.startswith(n + b"/")]:
            os.close(self.open.pop(name))
        parts = folder.split(b"/")
        depth, current, transient = 0, self.root_fd, False
        for level in range(len(parts) - 1, 0, -1):  # the nearest ancestor still open
            held = self.open.get(b"/".join(parts[:level]))
            if held is not None:
                depth, current = level, held
                break
        for level in range(depth, len(parts)):
            try:
                child: int | None = os.open(parts[level], _DIR_FLAGS, dir_fd=current)
            except OSError:
                child = None
            if transient:
                os.close(current)
            if child is None:
                return None
            transient = level >= self.KEEP and level != len(parts) - 1
            if not transient:
                self.open[b"/".join(parts[:level + 1])] = child
            current = child
        return current

    def close(self) -> None:
        for fd in self.open.values():
            os.close(fd)
        self.open.clear()


def scan(workspace: bytes, paths: Sequence[bytes], index: bytes, starts: Sequence[int], index_mtime_ns: int,
         since: float) -> tuple[Modes, set[bytes], list[int], list[int]]:
    """One ``lstat`` of each of ``paths`` (workspace-relative, as the index
    orders them) whose entries start at ``starts`` in the user's ``index``
    (their stat data: ``userindex.STAT_DATA``): returns the modes of the
    regular files and their folders (as ``modes.scan``), the files whose
    status changed at or after ``since``, the positions in ``paths`` of
    the entries that may have changed, and of those the ones git's own
    check would take as unchanged (``update-index`` would not read them:
    the capture takes them out of the index first) (blocking)."""
    files: dict[bytes, int] = {}
    executables: set[bytes] = set()
    fresh: set[bytes] = set()
    changed: list[int] = []
    forced: list[int] = []
    index_sec = index_mtime_ns // _NS
    racy_from = index_mtime_ns // _NS - 1  # git's seconds, and a margin for clocks that tick apart
    since_ns = int(since * _NS) if since != float("inf") else None
    recorded_at = STAT_DATA.unpack_from
    root_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    folders = _Folders(root_fd)
    last_folder, folder_fd = None, None
    lstat = os.lstat
    try:
        for position, path in enumerate(paths):
            folder, _, name = path.rpartition(b"/")
            if folder != last_folder:
                last_folder, folder_fd = folder, folders.fd(folder)
            if folder_fd is None:
                changed.append(position)
                continue
            try:
                st = lstat(name, dir_fd=folder_fd)
            except OSError:
                changed.append(position)
                continue
            st_mode = st.st_mode
            kind = st_mode >> 12
            ctime = st.st_ctime_ns
            if kind == 0o10:  # a regular file
                git_mode = _EXECUTABLE if st_mode & 0o100 else _REGULAR
                files[path] = st_mode & PERMISSIONS
                if st_mode & 0o100:
                    executables.add(path)
                if since_ns is not None and ctime >= since_ns:
                    fresh.add(path)
            elif kind == 0o12:  # a symlink
                git_mode = _SYMLINK
            else:
                changed.append(position)
                continue
            c_sec, c_nsec, m_sec, m_nsec, _dev, ino, mode, uid, gid, size = recorded_at(index, starts[position])
            mtime = st.st_mtime_ns
            if (mode != git_mode or size != st.st_size & _MASK
                    or m_sec != mtime // _NS or c_sec != ctime // _NS or ino != st.st_ino & _MASK
                    or uid != st.st_uid or gid != st.st_gid):
                changed.append(position)
            # Nanoseconds only where the index has them (a writer without them records 0). git compares
            # them only when built with USE_NSEC, and takes an entry recorded in the index's own second as racy.
            elif (m_sec >= racy_from or (m_nsec and m_nsec != mtime % _NS)
                    or (c_nsec and c_nsec != ctime % _NS)):
                changed.append(position)
                if m_sec < index_sec:
                    forced.append(position)
    finally:
        folders.close()
        os.close(root_fd)
    return _modes(workspace, files, executables), fresh, changed, forced


def scan_tracked(workspace: bytes, paths: Sequence[bytes], since: float,
                 found: dict[bytes, os.stat_result] | None = None) -> tuple[Modes, set[bytes], list[int]]:
    """A small workspace's tracked files (workspace-relative, sorted), read
    as ``scan`` reads them but with nothing to compare: the modes, the files
    whose status changed at or after ``since``, and the positions of the
    paths behind a folder that is now a symlink or a file, or gone
    (``ls-files`` follows such a folder; ``diff-files`` would list them)
    (blocking). ``found``, when given, gets each file's ``lstat`` (for
    ``quiet``)."""
    files: dict[bytes, int] = {}
    executables: set[bytes] = set()
    fresh: set[bytes] = set()
    unreachable: list[int] = []
    root_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    folders = _Folders(root_fd)
    last_folder, folder_fd = None, None
    try:
        for position, path in enumerate(paths):
            folder, _, name = path.rpartition(b"/")
            if folder != last_folder:
                last_folder, folder_fd = folder, folders.fd(folder)
            if folder_fd is None:
                unreachable.append(position)
                continue
            try:
                st = os.lstat(name, dir_fd=folder_fd)
            except OSError:
                continue  # gone: ``ls-files -d`` lists it
            if found is not None:
                found[path] = st
            if st.st_mode >> 12 == 0o10:
                files[path] = st.st_mode & PERMISSIONS
                if st.st_mode & 0o100:
                    executables.add(path)
                if st.st_ctime >= since:
                    fresh.add(path)
    finally:
        folders.close()
        os.close(root_fd)
    return _modes(workspace, files, executables), fresh, unreachable


def _modes(workspace: bytes, files: dict[bytes, int], executables: set[bytes]) -> Modes:
    """The ``Modes`` of ``files`` (path -> permission bits) and their folders, as ``modes.scan`` makes them."""
    folders_found = folder_modes(workspace, parents(files))
    file_default = _common(Counter(m for p, m in files.items() if p not in executables), 0o644)
    exec_default = _common(Counter(files[p] for p in executables), 0o755)
    folder_default = _common(Counter(folders_found.values()), 0o755)
    return Modes(
        file_default=file_default, exec_default=exec_default, folder_default=folder_default,
        files={p: m for p, m in files.items() if m != (exec_default if p in executables else file_default)},
        folders=folders_found,
    )

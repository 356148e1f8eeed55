"""The permission bits of a checkpoint's files and folders.

git keeps a file's mode only as 644 or 755 (and none for a folder), so a
restore from git alone would bring a private ``0600`` file back as ``0644``.
Each checkpoint therefore records the real bits in its own commit: a section
at the end of the shadow commit's message (the commit is the checkpoint, so
the modes live and die with it, compaction included)::

    agentd-modes: 1
    defaults 644 755 755          the usual mode of files, executables, folders
    f 600 c2VjcmV0LmVudg==        each file (f) or folder (d) that differs, its
    d 700 cHJpdmF0ZQ==            name in base64 (any bytes, newlines included)

Only the files that differ from the defaults are listed (the defaults are
the most common modes of this checkpoint, so a workspace made under ``umask
077`` costs one line), and every folder that holds a stored file. A checkpoint written before this has no section: its
files are restored with the old defaults (0666/0777 under the umask).
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

MARKER = b"agentd-modes: 1"
#: the bits a restore sets (no set-id or sticky bits: those are not brought back)
PERMISSIONS = 0o777


@dataclass
class Modes:
    """Permission bits by workspace-relative path; ``None`` from a lookup
    means the checkpoint did not record them."""

    file_default: int | None = None
    exec_default: int | None = None
    folder_default: int | None = None
    #: files whose mode is not their default
    files: dict[bytes, int] = field(default_factory=dict)
    #: every folder that holds a stored file
    folders: dict[bytes, int] = field(default_factory=dict)

    @property
    def recorded(self) -> bool:
        """Whether the checkpoint recorded its modes at all."""
        return self.file_default is not None

    def file_mode(self, path: bytes, executable: bool) -> int | None:
        """The recorded mode of the file ``path`` (git's exec bit picks the default)."""
        found = self.files.get(path)
        if found is not None:
            return found
        return self.exec_default if executable else self.file_default

    def folder_mode(self, path: bytes) -> int | None:
        """The recorded mode of the folder ``path``."""
        found = self.folders.get(path)
        return found if found is not None else self.folder_default

    def copy(self) -> Modes:
        """An independent copy (to update for the next checkpoint)."""
        return Modes(self.file_default, self.exec_default, self.folder_default, dict(self.files), dict(self.folders))

    def set_file(self, path: bytes, st_mode: int) -> None:
        """Record the file ``path`` with the mode ``st_mode`` (from lstat)."""
        mode = st_mode & PERMISSIONS
        default = self.exec_default if st_mode & 0o100 else self.file_default
        if mode == default:
            self.files.pop(path, None)
        else:
            self.files[path] = mode

    def forget(self, path: bytes) -> None:
        """``path`` is no longer stored."""
        self.files.pop(path, None)

    def encode(self) -> bytes:
        """The commit message section (empty when nothing was recorded)."""
        if not self.recorded:
            return b""
        defaults = [self.file_default, self.exec_default, self.folder_default]
        lines = [MARKER, b"defaults " + b" ".join(b"%o" % (d if d is not None else 0o644) for d in defaults)]
        lines += [b"f %o %s" % (m, base64.b64encode(p)) for p, m in sorted(self.files.items())]
        lines += [b"d %o %s" % (m, base64.b64encode(p)) for p, m in sorted(self.folders.items())]
        return b"\n".join(lines) + b"\n"

    @classmethod
    def parse(cls, commit: bytes) -> Modes:
        """The modes recorded in a commit object's content (none: ``Modes()``)."""
        at = commit.rfind(b"\n" + MARKER + b"\n")
        if at < 0:
            return cls()
        out = cls()
        for line in commit[at + len(MARKER) + 2:].splitlines():
            parts = line.split(b" ")
            try:
                if parts[0] == b"defaults" and len(parts) == 4:
                    out.file_default, out.exec_default, out.folder_default = (int(p, 8) & PERMISSIONS for p in parts[1:])
                elif parts[0] in (b"f", b"d") and len(parts) == 3:
                    (out.files if parts[0] == b"f" else out.folders)[base64.b64decode(parts[2], validate=True)] = \
                        int(parts[1], 8) & PERMISSIONS
            except (ValueError, binascii.Error):
                continue  # a line this version does not understand
        return out


def _common(counter: Counter[int], fallback: int) -> int:
    return counter.most_common(1)[0][0] if counter else fallback


def folder_modes(root: bytes, folders: Iterable[bytes]) -> dict[bytes, int]:
    """The modes of ``folders`` (workspace-relative) that are folders now (blocking)."""
    out: dict[bytes, int] = {}
    for folder in folders:
        try:
            st = os.lstat(os.path.join(root, folder))
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            out[folder] = st.st_mode & PERMISSIONS
    return out


def parents(paths: Iterable[bytes]) -> set[bytes]:
    """Every folder (below the root) that holds one of ``paths``."""
    out: set[bytes] = set()
    last = None
    for path in paths:
        folder = path.rpartition(b"/")[0]
        if folder == last:  # sorted paths: most share the previous one's folder
            continue
        last = folder
        while folder and folder not in out:
            out.add(folder)
            folder = os.path.dirname(folder)
    return out


def update(previous: Modes, root: bytes, changed: dict[bytes, int], removed: Iterable[bytes],
           recheck: Iterable[bytes], since: float) -> tuple[Modes, set[bytes]]:
    """``previous`` with what changed since (blocking): ``changed`` maps the
    files lstat-ed anew to their ``st_mode``, ``removed`` the paths no longer
    stored, ``recheck`` the files read again anyway (see ``recent``); every
    folder is read again (folders are few, and a ``chmod`` of one shows in no
    file's status). Returns the modes and the files whose status changed at
    or after ``since``: git compares a file's ctime to its index entry's only
    to the second, so a ``chmod`` in the same second as the capture that last
    read a file shows in no later ``diff-files`` — the next capture reads
    those files again (its ``recheck``)."""
    out = previous.copy()
    gone = set(removed)
    for path in gone:
        out.forget(path)
    for path, st_mode in changed.items():
        out.set_file(path, st_mode)
    recent: set[bytes] = set()
    for path in recheck:
        if path in changed or path in gone:  # (no longer stored: e.g. behind a folder that became a symlink)
            continue
        try:
            st = os.lstat(os.path.join(root, path))
        except OSError:
            out.forget(path)
            continue
        if stat.S_ISREG(st.st_mode):
            out.set_file(path, st.st_mode)
            if st.st_ctime >= since:
                recent.add(path)
    out.folders = folder_modes(root, set(previous.folders) | parents(changed))
    return out, recent


def scan(root: bytes, paths: Iterable[bytes], since: float = float("inf")) -> tuple[Modes, set[bytes]]:
    """The modes of the files ``paths`` (workspace-relative) and of every
    folder that holds one, as they are on disk now (blocking: lstat calls),
    and the files whose status changed at or after ``since`` (see ``update``).
    Symlinks and files gone meanwhile are left out."""
    files: dict[bytes, int] = {}
    executables: set[bytes] = set()
    fresh: set[bytes] = set()
    for path in paths:
        try:
            st = os.lstat(os.path.join(root, path))
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        files[path] = st.st_mode & PERMISSIONS
        if st.st_mode & 0o100:
            executables.add(path)
        if st.st_ctime >= since:
            fresh.add(path)
    folders = folder_modes(root, parents(files))
    file_default = _common(Counter(m for p, m in files.items() if p not in executables), 0o644)
    exec_default = _common(Counter(files[p] for p in executables), 0o755)
    folder_default = _common(Counter(folders.values()), 0o755)
    return Modes(
        file_default=file_default, exec_default=exec_default, folder_default=folder_default,
        files={p: m for p, m in files.items() if m != (exec_default if p in executables else file_default)},
        folders=folders,
    ), fresh


def narrowed(current: int, wanted: int) -> int:
    """``wanted`` without any read or write bit ``current`` lacks: a restore
    never makes a file that exists more readable or writable than it is
    (a class may get the exec bit ``wanted`` has only where it can read)."""
    return wanted & (current | ((current & 0o444) >> 2)) & PERMISSIONS

"""Opening a file that another process of the user may have replaced: only a
regular file, and never a wait.

An agent's commands run as the user, so between agentd's look at a path and
its ``open`` the agent can put a named pipe (FIFO) in the file's place. A plain
``open`` of a FIFO waits for the other end forever: a worker thread lost, a
capture or a message that never ends. With ``O_NONBLOCK`` that ``open``
returns at once (for writing with nobody reading: ``ENXIO``), and the
``fstat`` after it refuses whatever is not a regular file (a FIFO, a device, a
socket). A regular file ignores ``O_NONBLOCK``; it is cleared anyway.
"""

from __future__ import annotations

import errno
import os
import stat

Path = str | bytes | os.PathLike[str] | os.PathLike[bytes]


class NotRegularFile(OSError):
    """The path names something other than a regular file (a FIFO, a device, a
    socket, a folder): agentd does not read or write it as one."""

    def __init__(self, path: Path, mode: int) -> None:
        kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        super().__init__(errno.EINVAL, f"{kind}, not a regular file", os.fsdecode(path))


def open_regular(path: Path, flags: int = os.O_RDONLY, mode: int = 0o600, *, dir_fd: int | None = None,
                 follow_symlinks: bool = False) -> int:
    """``os.open`` of a regular file, without waiting on a FIFO; the descriptor.

    Args:
        path: the file (relative to ``dir_fd`` when given).
        flags: ``os.O_*`` flags (``O_NONBLOCK``, ``O_CLOEXEC`` and, unless
            ``follow_symlinks``, ``O_NOFOLLOW`` are added).
        mode: the mode of a file ``O_CREAT`` makes.
        follow_symlinks: a symlink in the path's last place is followed (a
            person's own argument); by default it is refused (``ELOOP``).

    Raises:
        NotRegularFile: it is a FIFO, a device, a socket or a folder.
        OSError: it cannot be opened.
    """
    flags |= os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    fd = os.open(path, flags, mode, dir_fd=dir_fd)
    try:
        found = os.fstat(fd).st_mode
        if not stat.S_ISREG(found):
            raise NotRegularFile(path, found)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: Path, *, limit: int | None = None, dir_fd: int | None = None,
                 follow_symlinks: bool = False) -> bytes:
    """The bytes of a regular file (see :func:`open_regular`), blocking.

    Args:
        limit: read at most ``limit + 1`` bytes, so that a caller can tell
            a file over its cap (and a file that grows while it is read is
            never read without end).

    Raises:
        NotRegularFile, OSError: see :func:`open_regular`.
    """
    fd = open_regular(path, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
    with os.fdopen(fd, "rb") as f:
        return f.read() if limit is None else f.read(limit + 1)


def replace_durably(folder: str | os.PathLike[str], name: str, data: bytes) -> None:
    """Make ``folder/name`` hold ``data``, durably and atomically: a new file
    (0600, ``O_EXCL | O_NOFOLLOW``: never through a symlink) beside it is
    written and synced, renamed over whatever stood at the name (a symlink or
    a FIFO included), and the folder synced; blocking."""
    folder = os.fspath(folder)
    temporary = os.path.join(folder, f".{name}.{os.getpid()}.tmp")  # one a killed write left is replaced
    _write_new(temporary, data, sync=True)
    os.replace(temporary, os.path.join(folder, name))
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def write_new(path: str | os.PathLike[str], data: bytes) -> None:
    """Make ``path`` a new file (0600) holding ``data``: whatever another
    process put at the name — a symlink, a FIFO, a hard link to a file of the
    user's — is removed first, never written through (not synced: for files
    only this daemon's life needs); blocking."""
    _write_new(path, data, sync=False)


def _write_new(path: str | os.PathLike[str], data: bytes, *, sync: bool) -> None:
    """Remove what is at ``path``, then write ``data`` to a new 0600 file
    there (``O_EXCL | O_NOFOLLOW``), the whole buffer, synced if asked."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)

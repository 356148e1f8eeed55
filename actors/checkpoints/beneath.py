"""Reaching a workspace's files without ever following a symlink.

A restore writes and deletes inside a folder that other processes (the
agent's, the person's) may change at the same moment. Checking a path first
and then using it by name is a race: a folder swapped for a symlink between
the check and the write sends the write wherever the symlink points. So every
path is resolved at the moment it is used, from a descriptor of the workspace
folder itself, one component at a time, without following symlinks:

- ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` where the kernel has it
  (Linux 5.6+: one system call for the whole parent path), else
- ``openat(O_NOFOLLOW | O_DIRECTORY)`` per component from the workspace's fd.

The caller then writes, renames and unlinks relative to the parent's
descriptor (``dir_fd=``), so the final component is never followed either:
``rename`` replaces a symlink found there, ``unlink`` removes it. A component
that is a symlink or a file is refused (``Refused``), never followed.

Blocking calls: use from a worker thread. Linux only, like the daemon.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: a directory we only use as ``dir_fd`` (no read permission needed)
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SYS_OPENAT2 = 437  # the same number on every Linux architecture (asm-generic)
_RESOLVE_NO_MAGICLINKS, _RESOLVE_NO_SYMLINKS, _RESOLVE_BENEATH = 0x02, 0x04, 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class _Openat2:
    """``openat2`` through libc's ``syscall``, or None when the kernel (or a
    seccomp filter) does not offer it."""

    def __init__(self) -> None:
        self.available = True
        try:
            self._syscall = ctypes.CDLL(None, use_errno=True).syscall
        except (OSError, AttributeError):  # pragma: no cover - no libc syscall()
            self.available = False
        self._how = _OpenHow(_DIR_FLAGS & ~os.O_NOFOLLOW, 0,
                             _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)

    def open_dir(self, dir_fd: int, path: bytes) -> int | None:
        """A descriptor of the directory ``path`` beneath ``dir_fd``; None when
        the fast path cannot say (missing, a symlink, not a directory, …): the
        caller walks the components to find out which and why."""
        if not self.available:
            return None
        fd: int = self._syscall(_SYS_OPENAT2, dir_fd, path, ctypes.byref(self._how), ctypes.sizeof(self._how))
        if fd >= 0:
            return fd
        if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            self.available = False  # not here: use the component walk from now on
        return None


_OPENAT2 = _Openat2()


class Refused(Exception):
    """A parent folder of the path cannot be used: it is a symlink or a file.

    Attributes:
        folder: the workspace-relative folder that is not a folder.
        what: ``symlink`` or ``file`` (or another type's name).
    """

    def __init__(self, folder: bytes, what: str) -> None:
        super().__init__(f"{folder!r} is a {what}")
        self.folder = folder
        self.what = what

    @property
    def detail(self) -> str:
        """The sentence for a person (the folder shown with ``\\xNN`` escapes)."""
        shown = self.folder.decode("utf-8", "backslashreplace")
        return f"{shown} is a {self.what} where a folder should be; it was not followed"


def _kind(mode: int) -> str:
    return "symlink" if stat.S_ISLNK(mode) else "file" if stat.S_ISREG(mode) else "special file"


def chmod_fd(fd: int, mode: int) -> None:
    """Set the mode of the file or directory ``fd`` names (also an ``O_PATH`` fd)."""
    try:
        os.fchmod(fd, mode)
    except OSError as exc:
        if exc.errno != errno.EBADF:
            raise
        os.chmod(f"/proc/self/fd/{fd}", mode)  # an O_PATH fd: through its magic link, which is that inode


class Workspace:
    """The folder ``root``, opened once; paths below it are resolved from that
    descriptor at each use (``parent``). Close it (or use ``with``).

    Args:
        root: the workspace's real path.
    """

    def __init__(self, root: bytes) -> None:
        self.root = root
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def close(self) -> None:
        """Close the workspace's descriptor."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def parent(self, rel: bytes, *, create: bool = False,
               folder_mode: Callable[[bytes], int] | None = None) -> Iterator[int]:
        """A descriptor of the folder holding ``rel`` (workspace-relative),
        resolved now without following any symlink, for the block.

        Args:
            rel: the path whose parent is wanted.
            create: make missing folders (mode 0700 first, never wider, then
                ``folder_mode(folder)``); else a missing one raises
                FileNotFoundError.
            folder_mode: the mode of a folder this call makes (default: 0777
                under the umask).

        Raises:
            Refused: a component is a symlink or a file.
            FileNotFoundError: a folder is missing and ``create`` is False.
        """
        folder = os.path.dirname(rel)
        fd = self.open_folder(folder, create=create, folder_mode=folder_mode)
        try:
            yield fd
        finally:
            if fd != self.fd:
                os.close(fd)

    def open_folder(self, folder: bytes, *, create: bool = False,
                    folder_mode: Callable[[bytes], int] | None = None) -> int:
        """A new descriptor of ``folder`` (the workspace's own for ``b""``;
        the caller closes any other). See ``parent``."""
        if not folder:
            return self.fd
        fast = _OPENAT2.open_dir(self.fd, folder)
        if fast is not None:
            return fast
        return self._walk(folder, create, folder_mode)

    def _walk(self, folder: bytes, create: bool, folder_mode: Callable[[bytes], int] | None) -> int:
        fd = self.fd
        done: list[bytes] = []
        try:
            for name in folder.split(b"/"):
                if not name or name in (b".", b".."):
                    raise Refused(b"/".join([*done, name]), "name that leaves the folder")
                done.append(name)
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    child = self._make(fd, name, b"/".join(done), folder_mode)
                except (NotADirectoryError, OSError) as exc:
                    if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                        raise
                    raise Refused(b"/".join(done), self._what(fd, name)) from None
                if fd != self.fd:
                    os.close(fd)
                fd = child
        except BaseException:
            if fd != self.fd:
                os.close(fd)
            raise
        return fd

    @staticmethod
    def _what(fd: int, name: bytes) -> str:
        try:
            return _kind(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
        except OSError:
            return "symlink"

    def _make(self, fd: int, name: bytes, folder: bytes, folder_mode: Callable[[bytes], int] | None) -> int:
        try:
            os.mkdir(name, 0o700, dir_fd=fd)
        except FileExistsError:
            made = False  # made meanwhile by someone else: use it if it is a folder
        else:
            made = True
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)  # a symlink swapped in since the mkdir: refused
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            raise Refused(folder, self._what(fd, name)) from None
        if made:
            mode = folder_mode(folder) if folder_mode is not None else 0o777 & ~umask()
            chmod_fd(child, mode)
        return child


_UMASK: int | None = None


def umask() -> int:
    """The process's umask, read without changing it (``os.umask`` sets it
    process-wide, a race with every other thread that creates files)."""
    global _UMASK
    if _UMASK is None:
        try:
            with open("/proc/self/status", "rb") as f:
                for line in f:
                    if line.startswith(b"Umask:"):
                        _UMASK = int(line.split()[1], 8)
                        break
        except OSError:  # pragma: no cover - no /proc
            pass
        if _UMASK is None:  # pragma: no cover
            _UMASK = 0o022
    return _UMASK

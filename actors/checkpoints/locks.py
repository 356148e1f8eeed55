"""Per-workspace serialization: one in-process ``trio.Lock`` per workspace
real path plus ``flock`` on the shadow's ``lock`` file for other processes.

There is no global lock: two workspaces capture at the same time. The flock is
taken without blocking the event loop (non-blocking attempts with a growing
pause between them). Under both locks nothing else uses the shadow, so a left
over ``index.lock`` (a git killed mid-write) is stale and is removed.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from .errors import WorkspaceBusyError

log = logging.getLogger(__name__)

#: lock files git leaves behind when killed, relative to the shadow's git dir
STALE_LOCKS = (b"index.lock", b"packed-refs.lock", b"HEAD.lock", b"config.lock")


class WorkspaceLocks:
    """The locks of every workspace an engine touches.

    Args:
        timeout: seconds to wait for another process's flock before
            ``WorkspaceBusyError``.
    """

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._locks: dict[bytes, trio.Lock] = {}

    def held(self, workspace: bytes) -> bool:
        """Whether this process holds the workspace's lock now."""
        lock = self._locks.get(workspace)
        return lock is not None and lock.locked()

    @asynccontextmanager
    async def hold(self, workspace: bytes, lock_file: bytes, git_dir: bytes | None = None) -> AsyncIterator[None]:
        """Hold the workspace's locks for the block.

        Args:
            workspace: the workspace's real path (the in-process key).
            lock_file: the shadow's ``lock`` file (created if missing).
            git_dir: the shadow's git dir, whose stale lock files are removed once locked.

        Raises:
            WorkspaceBusyError: another process kept the flock past the timeout.
        """
        lock = self._locks.setdefault(workspace, trio.Lock())
        async with lock:
            fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                await _flock(fd, lock_file, self.timeout)
                if git_dir is not None:
                    remove_stale_locks(git_dir)
                yield
            finally:
                os.close(fd)  # releases the flock


async def _flock(fd: int, lock_file: bytes, timeout: float) -> None:
    pause = 0.002
    with trio.move_on_after(timeout):
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
            await trio.sleep(pause)
            pause = min(pause * 2, 0.1)
    raise WorkspaceBusyError(f"another process has held the checkpoint lock {os.fsdecode(lock_file)} for {timeout:g}s")


def remove_stale_locks(git_dir: bytes) -> None:
    """Remove the lock files a killed git left in ``git_dir`` (only ever
    called with the workspace's locks held)."""
    for name in STALE_LOCKS:
        path = os.path.join(git_dir, name)
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue
        log.warning("removed a stale %s left by a git that did not finish", os.fsdecode(path))

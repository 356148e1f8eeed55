"""The process guard: agent runtimes die with the daemon, however it dies.

A SIGKILLed daemon runs no cleanup, and ``PR_SET_PDEATHSIG`` cannot help:
Linux fires it when the *thread* that forked the child exits, and trio forks
from worker threads that come and go. So the daemon starts one small guard
process at start and tells it, one line each, about every runtime it spawns.
The guard keeps a pidfd per runtime (a pid reused later cannot fool it) and
watches its stdin, whose other end only the daemon holds: at end of file —
the daemon closed it at shutdown, or the kernel did because the daemon died —
it SIGKILLs the runtimes still alive and exits.

It kills the runtime processes only, never their process groups: what a
runtime started (a dev server, a build) is the person's, not agentd's to end
(F12); the next start reports such processes instead.

The guard process is ``guard_process`` (standard library only, started with
``python -I -S``: no trio, no site); the daemon side is ``ProcessGuard``.
"""

from __future__ import annotations

import logging
import os
import subprocess
from contextlib import asynccontextmanager
from typing import AsyncIterator

import trio

from . import guard_process
from .procinfo import process_start_ticks

log = logging.getLogger(__name__)


class ProcessGuard:
    """The daemon's handle on its guard process."""

    def __init__(self, process: trio.Process, pipe: int) -> None:
        self.process = process
        self._pipe: int | None = pipe

    @classmethod
    async def start(cls) -> ProcessGuard:
        read_end, write_end = os.pipe()
        try:
            process = await trio.lowlevel.open_process(
                guard_process.command(),
                stdin=read_end, stdout=subprocess.DEVNULL, start_new_session=True,
            )
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        return cls(process, write_end)

    def watch(self, pid: int) -> None:
        """Have the guard kill ``pid`` if the daemon dies while it lives."""
        if self._pipe is None:
            return
        ticks = process_start_ticks(pid)
        if ticks is None:
            return  # already gone
        try:
            os.write(self._pipe, f"{pid} {ticks}\n".encode())
        except OSError as exc:  # the guard died: runtimes are unguarded, not lost
            log.warning("the process guard is gone (%s); agent runtimes will not die with a killed daemon", exc)
            self._close_pipe()

    def _close_pipe(self) -> None:
        if self._pipe is not None:
            os.close(self._pipe)
            self._pipe = None

    async def close(self) -> None:
        """End the guard (it kills any runtime still alive, then exits)."""
        self._close_pipe()
        with trio.move_on_after(10):
            await self.process.wait()
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()


#: the guard of this daemon process, if one was started (see ``guarding``)
_current: ProcessGuard | None = None


def watch_spawned(pid: int) -> None:
    """Called for every runtime process the daemon spawns."""
    if _current is not None:
        _current.watch(pid)


@asynccontextmanager
async def guarding() -> AsyncIterator[ProcessGuard]:
    """Guard the runtimes spawned inside the block (one guard per daemon)."""
    global _current
    guard = _current = await ProcessGuard.start()
    try:
        yield guard
    finally:
        _current = None
        with trio.CancelScope(shield=True):
            await guard.close()

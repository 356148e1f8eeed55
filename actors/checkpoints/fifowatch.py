"""Noticing a git that waits to open a named pipe, which it would do forever.

git opens ``.gitignore`` and ``.gitattributes`` files (in every folder it
walks) with a plain ``open``; when one of them is a named pipe (FIFO), that
``open`` waits for a writer that never comes. An agent's command can make such
a file (``mkfifo .gitignore`` runs as the user), and then every capture, diff
and restore of that workspace would hang, and with it the thread's actor: not
even a Stop would get through.

So while git runs, the watch (:class:`Watched`) looks at it now and then through ``/proc``:
a git blocked in ``open``/``openat`` whose kernel wait is the FIFO's
(``wait_for_partner``) is killed, and the command fails with
:class:`NamedPipeError`, naming the pipe where ``/proc`` lets us read the path
git passed (the checkpoint then records the error and the run goes on). A git
that is merely slow is never touched: only that one wait is. Where ``/proc``
does not say (another kernel, hidden wait channels), nothing is watched.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass

import trio

from .errors import CheckpointError

#: a git is looked at once it has run this long, and then this often (almost
#: every git of a capture has ended by then: it is never looked at)
FIRST_LOOK = 0.5
#: kernel functions a process waits in while it opens a FIFO nobody writes to
#: (``wait_for_partner`` since Linux 2.6; ``fifo_open`` / ``pipe_wait`` on some)
FIFO_WAITS = frozenset({"wait_for_partner", "fifo_open", "pipe_wait"})
#: open syscalls per machine: number → index of the path argument
_OPENS = {
    "x86_64": {2: 0, 257: 1, 437: 1},   # open, openat, openat2
    "aarch64": {56: 1, 437: 1},         # openat, openat2
}.get(platform.machine(), {})
_AT_FDCWD = -100


class NamedPipeError(CheckpointError):
    """git waited to open a named pipe (FIFO) in the workspace and was stopped.

    Attributes:
        path: the pipe's path as git passed it (absolute where it could be
            resolved), or None when ``/proc`` did not say.
    """

    reason = "named_pipe"

    def __init__(self, path: str | None) -> None:
        self.path = path
        where = f"{path}, a named pipe (FIFO)" if path else "a named pipe (FIFO) in the workspace"
        super().__init__(
            f"git waited to open {where}, which it would have done forever (git reads .gitignore and "
            ".gitattributes files with a plain open); agentd stopped it. Remove the pipe or make it a "
            "regular file, and the next checkpoint works")


@dataclass(frozen=True)
class FifoWait:
    """A git found waiting to open a FIFO."""

    path: str | None


def fifo_wait(pid: int) -> FifoWait | None:
    """Whether process ``pid`` waits to open a FIFO now (and which, where
    ``/proc`` lets us read it); None when it does not, or cannot be seen."""
    try:
        with open(f"/proc/{pid}/wchan", "rb") as f:
            channel = f.read().decode("ascii", "replace").strip()
        if channel not in FIFO_WAITS:
            return None
        with open(f"/proc/{pid}/syscall", "rb") as f:
            fields = f.read().split()
    except OSError:
        return None
    try:
        number = int(fields[0])
        args = [int(field, 16) for field in fields[1:7]]
    except (IndexError, ValueError):
        return None  # "running" (not in a syscall) or an unexpected shape
    at = _OPENS.get(number)
    if at is None:
        return None  # waiting on a pipe, but not to open one (e.g. a read): not ours to judge
    return FifoWait(_opened_path(pid, args, at))


def _opened_path(pid: int, args: list[int], at: int) -> str | None:
    """The path argument of the open ``pid`` is in, resolved against its
    folder (``dirfd`` or its working directory); None if unreadable."""
    try:
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            mem.seek(args[at])
            raw = mem.read(4096).split(b"\0", 1)[0]
        if not raw:
            return None
        if raw.startswith(b"/"):
            return os.fsdecode(raw)
        dirfd = args[0] if at == 1 else _AT_FDCWD
        if dirfd >= 1 << 31:
            dirfd -= 1 << 32  # the register holds the int's 32 bits
        folder = os.readlink(f"/proc/{pid}/cwd" if dirfd == _AT_FDCWD else f"/proc/{pid}/fd/{dirfd}")
        return os.path.join(folder, os.fsdecode(raw))
    except (OSError, ValueError, OverflowError):
        return None


class Watched:
    """One git under the watch: give it to ``trio.run_process`` as its
    ``task_status`` (it is told the process once started) and call
    :meth:`done` when the process has ended. ``found`` is set when the watch
    killed it.

    One watch task serves every git of the run (no task and no timer per
    spawn: a capture's gits mostly end in milliseconds, before any look).
    """

    def __init__(self) -> None:
        self.process: trio.Process | None = None
        self.found: FifoWait | None = None

    def started(self, value: trio.Process | None = None) -> None:
        self.process = value
        if value is not None and _OPENS:
            _the_watch().add(self)

    def done(self) -> None:
        if self.process is not None and _OPENS:
            _the_watch().live.pop(self, None)


class _Watch:
    """The gits of one trio run that are still running, since when."""

    def __init__(self) -> None:
        self.live: dict[Watched, float] = {}
        self.someone = trio.Event()

    def add(self, watched: Watched) -> None:
        self.live[watched] = trio.current_time()
        self.someone.set()

    async def run(self) -> None:
        while True:
            if not self.live:
                self.someone = trio.Event()
                await self.someone.wait()
            await trio.sleep(FIRST_LOOK)
            now = trio.current_time()
            for watched, since in list(self.live.items()):
                process = watched.process
                if process is None or process.returncode is not None or now - since < FIRST_LOOK:
                    continue
                try:
                    wait = fifo_wait(process.pid)  # a few small reads of /proc: they never wait
                except Exception:  # noqa: BLE001 - a watch that cannot look must not end the run
                    wait = None
                if wait is not None:
                    watched.found = wait
                    self.live.pop(watched, None)
                    process.kill()


_WATCH: trio.lowlevel.RunVar[_Watch] = trio.lowlevel.RunVar("agentd_fifowatch")


def _the_watch() -> _Watch:
    try:
        return _WATCH.get()
    except LookupError:
        watch = _Watch()
        _WATCH.set(watch)
        trio.lowlevel.spawn_system_task(watch.run, name="agentd git FIFO watch")
        return watch

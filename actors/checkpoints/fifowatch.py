"""Noticing a git that waits to open a named pipe, which it would do forever.

git opens ``.gitignore`` and ``.gitattributes`` files (in every folder it
walks) with a plain ``open``; when one of them is a named pipe (FIFO), that
``open`` waits for a writer that never comes. An agent's command can make such
a file (``mkfifo .gitignore`` runs as the user), and then every capture, diff
and restore of that workspace would hang, and with it the thread's actor: not
even a Stop would get through.

So while git runs, :func:`watch` looks at it now and then through ``/proc``:
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

#: the first look comes this long after git started (almost every git of a
#: capture has ended by then, so the watch costs a sleeping task, no reads)
FIRST_LOOK = 0.5
#: then the looks come at most this far apart
MAX_GAP = 2.0
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


async def watch(process: trio.Process, found: list[FifoWait]) -> None:
    """Look at ``process`` now and then until cancelled; when it waits to open
    a FIFO, append what was found to ``found`` and kill it."""
    if not _OPENS:
        return
    gap = FIRST_LOOK
    while True:
        await trio.sleep(gap)
        if process.returncode is not None:
            return
        wait = fifo_wait(process.pid)  # a few small reads of /proc: they never wait
        if wait is not None:
            found.append(wait)
            process.kill()
            return
        gap = min(gap * 2, MAX_GAP)

"""The process guard's own process (see ``guard.py``): standard library only.

It is started at every daemon start, so it imports nothing but what it uses
(importing trio, as the daemon side does, was ~110 ms of its ~250 ms CPU),
and runs as ``python -I -S`` of this file's folder: no ``site``, no agentd
package. It reads ``PID START_TICKS`` lines on stdin until end of file, then
SIGKILLs every process it was told of that still lives.
"""

from __future__ import annotations

import os
import select
import signal
import sys


def _start_ticks(pid: int) -> int | None:
    """/proc/PID/stat field 22 (as ``procinfo.process_start_ticks``), None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return int(data[data.rfind(b")") + 2:].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def run_guard() -> None:
    """Read ``PID START_TICKS`` lines until end of file, then kill what lives."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the daemon's
    poller = select.poll()
    poller.register(0, select.POLLIN)
    pidfds: dict[int, int] = {}  # pidfd -> pid
    pending = b""
    while True:
        for fd, _mask in poller.poll():
            if fd != 0:  # a runtime exited: forget it
                poller.unregister(fd)
                os.close(fd)
                pidfds.pop(fd, None)
                continue
            data = os.read(0, 65536)
            if not data:
                for pidfd in pidfds:
                    try:
                        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                return
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                try:
                    pid, ticks = (int(part) for part in line.split())
                    pidfd = os.pidfd_open(pid)
                except (ValueError, OSError):
                    continue
                if _start_ticks(pid) != ticks:  # not the process the daemon meant
                    os.close(pidfd)
                    continue
                pidfds[pidfd] = pid
                poller.register(pidfd, select.POLLIN)


def command() -> list[str]:
    """The guard's command line: this file's module, imported from its folder."""
    folder = os.path.dirname(os.path.abspath(__file__))
    return [sys.executable, "-I", "-S", "-c",
            f"import sys; sys.path.append({folder!r}); import guard_process; guard_process.run_guard()"]


if __name__ == "__main__":
    run_guard()

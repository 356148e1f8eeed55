"""Which socket peers are agents' processes (hostile-round item 11).

Agents run as the person's uid, so every command an agent runs can reach the
daemon's socket. What sets them apart is the process tree: each runtime
agentd starts is a child subreaper (``actors/providers/subreaper.py``), so
everything it starts — a shell, a build, a double-forked daemon, ``agentd
mcp`` — has that runtime among its ancestors for as long as the runtime
lives. ``AgentProcesses.identify`` walks a peer's parent chain from the pid
SO_PEERCRED gave up to such a runtime (or to the daemon itself, whose other
children are no person's clients either).

The walk is a few reads of ``/proc/PID/stat``, once per connection (at its
first call that is not open to everyone). It guards against pid reuse with
start times: the peer is checked against the pidfd it connected with (a pid
cannot be reused while that process lives), each parent must have started
no later than its child, and a runtime counts only with the start time its
session recorded. It stops at the first ancestor older than the daemon:
nothing that started before the daemon can descend from it. What cannot be
told — the peer exited, its chain broke while being read — is treated as an
agent's: refused, never trusted.
"""

from __future__ import annotations

import os
import signal
from typing import Callable, Iterable

from agentd.actors.providers.procinfo import process_parent_and_start, process_start_ticks
from agentd.protocol.peers import Peer

#: a runtime agentd started: ``(session id, pid, start ticks)``
Runtime = tuple[str, int, int]

#: parent links followed before giving up (a chain that deep is refused, not trusted)
MAX_DEPTH = 256
#: times a chain is read again when a parent exits while it is being read
MAX_REREADS = 8

_PERSON = "a client agentd did not start"


class AgentProcesses:
    """Tells agents' processes from the person's.

    Args:
        runtimes: the live runtimes, read at each identification (the
            session manager's ``runtime_processes``).
        daemon_pid: the daemon's own pid (default: this process).
    """

    def __init__(self, runtimes: Callable[[], Iterable[Runtime]], *, daemon_pid: int | None = None) -> None:
        self._runtimes = runtimes
        self.daemon_pid = daemon_pid or os.getpid()
        self.daemon_ticks = process_start_ticks(self.daemon_pid) or 0

    def identify(self, pid: int, pidfd: int | None = None) -> Peer:
        """Who process ``pid`` (the peer of a connection) is.

        Args:
            pid: the peer's pid from SO_PEERCRED.
            pidfd: a pidfd of that peer (SO_PEERPIDFD), when the kernel has it:
                the walk is trusted only if the peer is still alive after it.
        """
        roots = {(root_pid, ticks): session_id for session_id, root_pid, ticks in self._runtimes()}
        peer = self._walk(pid, roots)
        if pidfd is not None and not _alive(pidfd):
            # The pid may name another process by now: what was read is not the peer's.
            return _unknown(pid, "a process that exited before agentd could tell whose it was")
        return peer

    def _walk(self, pid: int, roots: dict[tuple[int, int], str]) -> Peer:
        current = pid
        stat = process_parent_and_start(current)
        if stat is None:
            return _unknown(pid, "a process that exited before agentd could tell whose it was")
        rereads = 0
        for _ in range(MAX_DEPTH):
            parent_pid, ticks = stat
            session_id = roots.get((current, ticks))
            if session_id is not None:
                what = "an agent's runtime" if current == pid else f"a process of an agent's runtime (pid {current})"
                return Peer(pid=pid, agent_process=True, session_id=session_id,
                            why=f"{what}, agent session {session_id} (pid {pid})")
            if current == self.daemon_pid and ticks == self.daemon_ticks:
                if current == pid:
                    # The daemon's own process (a daemon run inside a program that is also its client).
                    return Peer(pid=pid, why="agentd's own process")
                return Peer(pid=pid, agent_process=True, why=f"a process agentd itself started (pid {pid})")
            if ticks < self.daemon_ticks or current <= 1:
                return Peer(pid=pid, why=_PERSON)
            parent = process_parent_and_start(parent_pid)
            if parent is None or parent[1] > ticks:
                # The parent exited meanwhile (its pid may already be another
                # process's, which started after this one): this process has
                # been reparented — read its link again.
                again = process_parent_and_start(current)
                rereads += 1
                if again is None or again[1] != ticks or again[0] == parent_pid or rereads > MAX_REREADS:
                    return _unknown(pid, "a process whose parent chain agentd could not read")
                stat = again
                continue
            current, stat = parent_pid, parent
        return _unknown(pid, "a process whose parent chain is too deep to follow")


def _alive(pidfd: int) -> bool:
    try:
        signal.pidfd_send_signal(pidfd, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM cannot happen for our own uid; anything else says nothing of its life
    return True


def _unknown(pid: int, why: str) -> Peer:
    return Peer(pid=pid, agent_process=True, why=why)

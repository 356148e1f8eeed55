"""``ReadPoller``: one task that waits for input on every Unix-socket
connection at once.

With a reader task per connection, each request costs a trio wake-up of
that task and two ``epoll_ctl`` calls (trio registers a descriptor one-shot
for each wait). Under many busy clients that scheduling was the largest
share of the event loop's time (scripts/README.md). Here the connections'
descriptors stay registered in an epoll set of our own, level-triggered, and
one task waits for that set's descriptor with ``trio.lowlevel.wait_readable``
(an epoll descriptor is itself readable while any of its members is ready):
one wake-up serves every connection that has input, each with one read.

The poller only reads and calls back; what a connection does with its bytes,
and when it stops reading (``pause``) to wait for something, is the
connection's business (``server._PolledInput``).
"""

from __future__ import annotations

import logging
import select
from collections.abc import Callable

import trio

log = logging.getLogger(__name__)

#: ready descriptors taken per wake-up; the rest are served at the next one
MAX_EVENTS = 1024


class ReadPoller:
    """Calls ``on_readable()`` for each registered descriptor that has input
    (or has hung up), from one task (``run``).

    Each pass calls every ready descriptor's callback once and then yields to
    the scheduler, so one client that floods requests cannot hold the loop:
    each callback reads at most one chunk.
    """

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._paused: set[int] = set()

    def add(self, fd: int, on_readable: Callable[[], None]) -> None:
        """Watch ``fd`` for input; ``on_readable`` must not block."""
        self._callbacks[fd] = on_readable
        self._epoll.register(fd, select.EPOLLIN)

    def pause(self, fd: int) -> None:
        """Stop watching ``fd`` until ``resume`` (its input stays in the kernel).

        The descriptor leaves the set: epoll reports a hang-up or an error
        of a member whatever it was asked for, so a member with no events
        asked for would still be called back (and, level-triggered, at every
        pass).

        Pausing a paused descriptor does nothing: a connection may find,
        after a wait, that the next request must wait too."""
        if fd in self._callbacks and fd not in self._paused:
            self._epoll.unregister(fd)
            self._paused.add(fd)

    def resume(self, fd: int) -> None:
        """Watch ``fd`` again (nothing if it is not paused, or was removed)."""
        if fd in self._paused:
            self._paused.discard(fd)
            if fd in self._callbacks:
                self._epoll.register(fd, select.EPOLLIN)

    def remove(self, fd: int) -> None:
        """Stop watching ``fd`` for good; call before the descriptor is closed."""
        if self._callbacks.pop(fd, None) is not None and fd not in self._paused:
            try:
                self._epoll.unregister(fd)
            except (OSError, ValueError):  # already closed: epoll dropped it itself
                pass
        self._paused.discard(fd)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve the registered descriptors until cancelled."""
        task_status.started()
        try:
            while True:
                await trio.lowlevel.wait_readable(self._epoll.fileno())
                for fd, _events in self._epoll.poll(0, MAX_EVENTS):
                    callback = self._callbacks.get(fd)
                    if callback is None:
                        continue
                    try:
                        callback()
                    except Exception:  # noqa: BLE001 - one connection's bug must not stop the others
                        log.exception("serving input of descriptor %d failed; dropping it", fd)
                        self.remove(fd)
        finally:
            trio.lowlevel.notify_closing(self._epoll.fileno())
            self._epoll.close()

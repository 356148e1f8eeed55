"""Bounds that keep the daemon's memory and descriptors finite, whatever its
clients do: clients that stop reading, send endless lines, open thousands of
connections or subscriptions.

One ``ServerLimits`` is shared by every transport of a daemon, so the bounds
hold across the Unix socket and the WebSocket together.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import socket
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

#: bytes queued for one client (responses and events not yet written); a
#: message waits for room (one larger than this goes out alone)
OUTBOUND_BYTES_PER_CONNECTION = 2 << 20
#: bytes of events queued for one client (being written included): a
#: subscription's next event waits for room below it (one larger goes out
#: alone), and is not held encoded meanwhile, so a stalled reader costs about
#: this much, while a reader that reads gets a write's worth at a time
EVENT_BYTES_PER_CONNECTION = 1 << 20
#: bytes of events queued for all clients together; an event past it ends
#: its subscription with ``events.resync``
OUTBOUND_BYTES_TOTAL = 64 << 20
#: a connection holding no more than this still gets events when the shared
#: budget is spent: stalled readers cannot starve the ones that read
READER_FLOOR_BYTES = 256 << 10
#: bytes of unfinished request lines buffered for all clients together
INPUT_BYTES_TOTAL = 64 << 20
MAX_SUBSCRIPTIONS_PER_CONNECTION = 64
MAX_SUBSCRIPTIONS_TOTAL = 4096
#: descriptors kept for the store, provider processes, logs and git
DESCRIPTOR_RESERVE = 256
MAX_CONNECTIONS = 4096


class ByteBudget:
    """A count of bytes held against a limit, shared by many holders."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        """Hold ``size`` more bytes; False (and nothing held) past the limit."""
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def force(self, size: int) -> None:
        """Hold ``size`` bytes even past the limit (a reply that must go)."""
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size


@dataclass
class ServerLimits:
    """The bounds of one daemon's servers, and what they currently hold."""

    max_connections: int = MAX_CONNECTIONS
    outbound_per_connection: int = OUTBOUND_BYTES_PER_CONNECTION
    events_per_connection: int = EVENT_BYTES_PER_CONNECTION
    reader_floor: int = READER_FLOOR_BYTES
    subscriptions_per_connection: int = MAX_SUBSCRIPTIONS_PER_CONNECTION
    subscriptions_total: int = MAX_SUBSCRIPTIONS_TOTAL
    outbound: ByteBudget = field(default_factory=lambda: ByteBudget(OUTBOUND_BYTES_TOTAL))
    inbound: ByteBudget = field(default_factory=lambda: ByteBudget(INPUT_BYTES_TOTAL))
    connections: int = 0

    @classmethod
    def for_this_process(cls) -> ServerLimits:
        """Limits sized to the descriptors this process may open, after
        raising its soft ``RLIMIT_NOFILE`` to the hard limit."""
        descriptors = raise_descriptor_limit()
        return cls(max_connections=max(16, min(MAX_CONNECTIONS, descriptors - DESCRIPTOR_RESERVE)))


def raise_descriptor_limit() -> int:
    """Raise the soft descriptor limit to the hard one; return the soft limit
    now in force (the usual 1,024 is too few for a daemon with many clients)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("could not raise the descriptor limit from %s to %s: %s", soft, target, exc)
    return soft


def return_freed_memory_promptly(threshold: int = 256 << 10) -> None:
    """Have glibc map buffers of ``threshold`` bytes or more on their own, so
    that freeing them gives the memory back to the system at once.

    glibc raises its mmap threshold each time a large block is freed, after
    which megabyte-sized event lines come from the heap and stay in the
    process after their clients leave (630 MB in one measurement). A fixed
    threshold stops that. No-op where glibc's ``mallopt`` is not available.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    M_MMAP_THRESHOLD = -3
    if not libc.mallopt(M_MMAP_THRESHOLD, threshold):
        log.debug("mallopt(M_MMAP_THRESHOLD) was refused")


class ReserveDescriptor:
    """One descriptor held back so that a server out of descriptors can still
    tell a client so (the classic reserve-descriptor trick).

    With the descriptor limit reached (``EMFILE``; ``ENFILE`` system-wide),
    ``accept`` fails and the client would wait in the listen backlog with no
    answer. ``turn_away`` gives the reserve back, accepts that client on the
    freed number, sends it one line and closes it, then takes the reserve
    again. The reserve is opened early, so its number is a low one: lowering
    the limit later (``prlimit``) leaves it under the limit.
    """

    def __init__(self) -> None:
        self._fd: int | None = None
        self.take()

    def take(self) -> bool:
        """Hold the reserve again (after ``turn_away``, or when it could not
        be taken before); False while no descriptor is free."""
        if self._fd is None:
            try:
                self._fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return False
        return True

    def close(self) -> None:
        """Give the reserve back for good."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def turn_away(self, listener_fd: int, line: bytes) -> bool:
        """Accept one waiting client of the listening socket ``listener_fd``
        on the reserve's number, send it ``line`` (as much as the socket
        takes at once: it is short) and close it. False if there is no
        reserve to give (it could not be taken back since) or nobody to
        accept; the reserve is held again either way, if it can be.
        """
        if self._fd is None and not self.take():
            return False
        reserve, self._fd = self._fd, None
        assert reserve is not None, "held, or just taken"
        os.close(reserve)
        try:
            listener = socket.socket(fileno=listener_fd)
            try:
                client, _ = listener.accept()
            finally:
                listener.detach()  # the server's listening socket stays open
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.ECONNABORTED, errno.EMFILE, errno.ENFILE):
                log.warning("turning a client away failed: %s", exc)
            self.take()
            return False
        try:
            client.send(line, socket.MSG_DONTWAIT)
            # What it sent already is read and dropped: closing with unread
            # input would make its next read a reset instead of our line's end.
            while client.recv(65536, socket.MSG_DONTWAIT):
                pass
        except OSError:
            pass  # it left, its buffer is full, or nothing more is waiting: the close tells it anyway
        finally:
            client.close()
            self.take()
        return True


def descriptor_limit() -> int:
    """The soft descriptor limit now in force (it can be changed from outside)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]

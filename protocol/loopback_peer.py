"""The processes at the other end of a loopback TCP connection (Linux /proc).

A WebSocket client has no SO_PEERCRED, but on loopback its socket is on this
machine: ``/proc/net/tcp`` names the inode of the client's socket (the row
whose local address is the client's and whose remote one is ours), and the
processes holding it have a ``socket:[INODE]`` link among their
``/proc/PID/fd``. Only the daemon's own uid's processes can be looked into —
which are the ones that matter: a client of another uid is no agent of the
person's. The scan reads every readable process's descriptors, so it runs
in a worker thread, once per connection.
"""

from __future__ import annotations

import os
import socket
import struct


def _hex_address(address: tuple) -> str:
    """An address as ``/proc/net/tcp`` (IPv4) or ``tcp6`` writes it: the
    address in 32-bit words of host byte order, then the port
    (``0100007F:1F4B`` is 127.0.0.1:8011)."""
    host, port = address[0], address[1]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    packed = socket.inet_pton(family, host)
    words = "".join(f"{struct.unpack('<I', packed[i:i + 4])[0]:08X}" for i in range(0, len(packed), 4))
    return f"{words}:{port:04X}"


def socket_inode(client: tuple, server: tuple) -> int | None:
    """The inode of the client's end of the connection ``client`` → ``server``."""
    local, remote = _hex_address(client), _hex_address(server)
    table_path = "/proc/net/tcp6" if ":" in client[0] else "/proc/net/tcp"
    try:
        with open(table_path, encoding="ascii") as table:
            next(table, None)  # the header
            for row in table:
                fields = row.split()
                if len(fields) > 9 and fields[1] == local and fields[2] == remote:
                    return int(fields[9]) or None
    except (OSError, ValueError):
        return None
    return None


def socket_holders(inode: int) -> list[int]:
    """Pids of the processes (of this uid) that hold socket ``inode``."""
    holders = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _holds(int(entry.name), inode):
            holders.append(int(entry.name))
    return holders


def _holds(pid: int, inode: int) -> bool:
    target = f"socket:[{inode}]"
    try:
        with os.scandir(f"/proc/{pid}/fd") as fds:
            return any(_link(fd.path) == target for fd in fds)
    except OSError:
        return False  # gone, or another user's


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def loopback_peers(client: tuple, server: tuple) -> list[tuple[int, int]]:
    """``(pid, pidfd)`` of each process at the client end of a loopback
    connection (the caller closes the pidfds; empty: none found — it closed,
    or it is not this uid's). A pid is kept only if, once its pidfd is open,
    it still holds the socket: the pidfd names that process, not a later
    one that reuses its pid."""
    try:
        inode = socket_inode(client, server)
    except (OSError, ValueError):  # not an address this can read
        return []
    if inode is None:
        return []
    found = []
    for pid in socket_holders(inode):
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        if _holds(pid, inode):
            found.append((pid, pidfd))
        else:
            os.close(pidfd)
    return found

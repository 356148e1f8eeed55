"""The processes at the other end of a loopback TCP connection (Linux /proc).

A WebSocket client has no SO_PEERCRED, but on loopback its socket is on this
machine: the kernel's socket table (``/proc/net/tcp``, ``tcp6``, read by
``peer_uid``) names the inode of the client's socket, and the
processes holding it have a ``socket:[INODE]`` link among their
``/proc/PID/fd``. Only the daemon's own uid's processes can be looked into —
which are the ones that matter: a client of another uid is no agent of the
person's. The scan reads every readable process's descriptors, so it runs
in a worker thread, once per connection.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import trio

from .peer_uid import peer_socket_row
from .peers import UNIDENTIFIED_PEER, Peer

#: a TCP socket's address as ``getsockname``/``getpeername`` give it: (host, port), or
#: (host, port, flowinfo, scope_id) for IPv6
Address = tuple[Any, ...]


def socket_inode(client: Address, server: Address) -> int | None:
    """The inode of the client's end of the connection ``client`` → ``server``
    (its row of the kernel's socket table, ``peer_uid.peer_socket_row``)."""
    row = peer_socket_row(server, client)
    try:
        return (int(row[9]) or None) if row is not None else None
    except ValueError:
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


def loopback_peers(client: Address, server: Address) -> list[tuple[int, int]]:
    """``(pid, pidfd)`` of each process at the client end of a loopback
    connection (the caller closes the pidfds; empty: none found — it closed,
    or it is not this uid's). A pid is kept only if, once its pidfd is open,
    it still holds the socket: the pidfd names that process, not a later
    one that reuses its pid."""
    inode = socket_inode(client, server)
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


async def stream_peer(identify_peer: Callable[[int, int | None], Peer] | None, stream: trio.SocketStream,
                      what: str) -> Peer:
    """Who the client of a loopback TCP connection is (a WebSocket's, the
    MCP endpoint's): its connection's client end is looked up in /proc (in a
    worker thread: it reads every process's descriptors) and each process
    holding it is identified as a Unix-socket peer would be
    (``identify_peer``; None: every peer is the person's). An agent's
    process among them makes the connection an agent's; none found (it
    closed, it is another uid's) is refused like one."""
    if identify_peer is None:
        return UNIDENTIFIED_PEER
    try:
        client, server = stream.socket.getpeername(), stream.socket.getsockname()
    except OSError:
        client = server = None
    holders = await trio.to_thread.run_sync(loopback_peers, client, server) if client else []
    try:
        peers: list[Peer] = [identify_peer(pid, pidfd) for pid, pidfd in holders]
    finally:
        for _pid, pidfd in holders:
            os.close(pidfd)
    if not peers:
        return Peer(pid=None, agent_process=True, why=f"{what} whose process agentd could not find")
    return next((peer for peer in peers if peer.agent_process), peers[0])

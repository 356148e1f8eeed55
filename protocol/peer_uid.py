"""Which user holds the other end of a loopback TCP connection.

A Unix socket says who its peer is (``SO_PEERCRED``); TCP does not. On
Linux the kernel's socket table (``/proc/net/tcp``, ``/proc/net/tcp6``)
lists every TCP socket of this network namespace with the uid that owns
it, so the peer of a loopback connection is the row whose local address
is the peer's and whose remote address is ours.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

TABLES = {socket.AF_INET: "/proc/net/tcp", socket.AF_INET6: "/proc/net/tcp6"}


def _hex_address(host: str, port: int) -> str:
    """An address as the kernel's table spells it: the address's 32-bit
    words in host byte order, then the port, in hex."""
    if ":" in host:
        words = struct.unpack("=4I", socket.inet_pton(socket.AF_INET6, host))
        return "".join(f"{w:08X}" for w in words) + f":{port:04X}"
    return f"{struct.unpack('=I', socket.inet_aton(host))[0]:08X}:{port:04X}"


def peer_socket_row(local: Any, peer: Any) -> list[str] | None:
    """The kernel table's row (its fields) of the peer's socket of the TCP
    connection from ``peer`` to ``local`` (both as ``getsockname`` gives
    them), or None when it cannot be found (not Linux, another network
    namespace, gone). Blocking (it reads a file): call it in a worker thread."""
    family = socket.AF_INET6 if ":" in local[0] else socket.AF_INET
    try:
        theirs, ours = _hex_address(peer[0], peer[1]), _hex_address(local[0], local[1])
        with open(TABLES[family]) as table:
            next(table, None)  # the header
            for row in table:
                fields = row.split()
                if len(fields) > 9 and fields[1] == theirs and fields[2] == ours:
                    return fields
    except (OSError, ValueError):
        return None
    return None


def of_loopback_tcp(local: Any, peer: Any) -> int | None:
    """The uid owning the peer's socket of the TCP connection from ``peer``
    to ``local``, or None when it cannot be found (see ``peer_socket_row``).
    Blocking: call it in a worker thread."""
    row = peer_socket_row(local, peer)
    try:
        return int(row[7]) if row is not None else None
    except ValueError:
        return None

"""Who is on the other end of a connection, as far as agentd can tell.

The daemon runs agents as the person's own uid, so the socket's SO_PEERCRED
uid check lets every agent's command in too. What tells them apart is where
the peer sits in the process tree: a runtime agentd started, or anything that
runtime started (``supervisor/peers.py`` walks the peer's parent chain). The
protocol layer only carries the answer: ``Connection.peer`` asks once per
connection (a Unix-socket one at its first call that is not open to
everyone, a WebSocket one when it is accepted), and the server refuses
``control`` methods to an agent's process (``Forbidden``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peer:
    """What agentd knows of a connected client.

    Attributes:
        pid: the process that connected (SO_PEERCRED; over the WebSocket, a
            process holding the client's end of the loopback connection).
        agent_process: the peer is an agent's runtime or descends from one —
            or agentd could not tell it from one (it exited before it was
            asked about, its chain could not be read): refused like one.
        session_id: the provider session whose runtime the peer is or
            descends from (None: not an agent's, or not known whose).
        why: how agentd sees it, in words, for error messages.
    """

    pid: int | None
    agent_process: bool = False
    session_id: str | None = None
    why: str = "a client agentd did not start"


#: a client of a router that cannot tell who its peers are (one without
#: ``identify_peer``, as in tests of the server alone): the person's
UNIDENTIFIED_PEER = Peer(pid=None, why="a client of a server that does not identify its peers")

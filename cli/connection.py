"""A blocking connection to the daemon's socket, for the commands that ask
and print (``threads``, ``show``, ``stop``, …).

These commands make a few calls and exit; importing trio alone costs more
than their whole budget (~130 ms of a 100 ms target on a small machine), so
they speak the protocol (JSON-RPC 2.0, one JSON object per line,
protocol/README.md) with the standard library. Commands that stream or
wait on events (``send``, ``events``, ``demo``) use the async
``agentd.protocol.client.Client``.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any, Iterable

# The socket module's own import builds its enums (~2.5 ms, a tenth of what
# these commands may spend above Python's start); its C core has all a
# blocking client uses.
import _socket as socket

from agentd.protocol.errors import AgentdError, error_from_wire

#: requests written before their answers are read (``call_all``); far below
#: what the socket's buffers hold, so writing never waits on reading
PIPELINE = 64


class ConnectionLost(AgentdError):
    """The daemon closed the connection (as ``agentd.protocol.client`` says it)."""

    kind = "connection_lost"


class DaemonConnection:
    """One connection to the daemon; calls are answered in turn.

    ``with DaemonConnection.open(path) as daemon: daemon.call("thread.list")``
    """

    def __init__(self, sock: socket.socket) -> None:  # type: ignore[name-defined]
        self._sock = sock
        self._ids = itertools.count(1)
        self._buffer = bytearray()
        self._answers: dict[int, dict[str, Any]] = {}

    @classmethod
    def open(cls, path: str | os.PathLike) -> DaemonConnection:
        """Connect to the socket at ``path`` (raises OSError as ``connect`` does)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(os.fspath(path))
        except BaseException:
            sock.close()
            raise
        return cls(sock)

    def __enter__(self) -> DaemonConnection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    def call(self, method: str, **params: Any) -> Any:
        """Call ``method`` with camelCase ``params``; return its result.

        Raises:
            AgentdError: the daemon's error, as the matching subclass.
        """
        return self.call_all([(method, params)])[0]

    def call_all(self, calls: Iterable[tuple[str, dict[str, Any]]]) -> list[Any]:
        """Make several calls at once (written together, answered in any
        order); return their results in the order of ``calls``.

        Raises:
            AgentdError: the first call's error that failed, in that order.
        """
        calls = list(calls)
        results: list[Any] = []
        for start in range(0, len(calls), PIPELINE):
            ids = []
            lines = []
            for method, params in calls[start:start + PIPELINE]:
                ids.append(next(self._ids))
                lines.append(json.dumps({"jsonrpc": "2.0", "id": ids[-1], "method": method, "params": params}))
            self._send(("\n".join(lines) + "\n").encode())
            answers = [self._answer(request_id) for request_id in ids]
            for answer in answers:
                if "error" in answer:
                    raise error_from_wire(answer["error"])
                results.append(answer["result"])
        return results

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            # The daemon closed first; a refusal it sent (``overloaded``) may
            # still be unread, and is the better answer than "lost".
            while True:
                try:
                    line = self._line()
                except ConnectionLost:
                    raise ConnectionLost("the daemon closed the connection") from None
                self._raise_refusal(line)

    @staticmethod
    def _raise_refusal(line: bytes) -> None:
        """Raise the error of ``line`` if it is one without an id: the
        daemon's refusal of the whole connection (sent just before closing)."""
        try:
            message = json.loads(line)
        except ValueError:
            return
        if isinstance(message, dict) and "error" in message and message.get("id") is None:
            raise error_from_wire(message["error"])

    def _answer(self, request_id: int) -> dict[str, Any]:
        """The answer to request ``request_id``, reading until it comes
        (notifications and other answers on the way are kept or dropped)."""
        while request_id not in self._answers:
            line = self._line()
            if not line.strip():
                continue
            message = json.loads(line)
            if isinstance(message, dict) and "error" in message and message.get("id") is None:
                raise error_from_wire(message["error"])  # the connection was refused (``overloaded``)
            if isinstance(message, dict) and "method" not in message and isinstance(message.get("id"), int):
                self._answers[message["id"]] = message
        return self._answers.pop(request_id)

    def _line(self) -> bytes:
        """The next line from the daemon (a long answer is searched for its
        end once, not once per chunk)."""
        searched = 0
        while (end := self._buffer.find(b"\n", searched)) < 0:
            searched = len(self._buffer)
            try:
                chunk = self._sock.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise ConnectionLost("the daemon closed the connection")
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[:end + 1]
        return line

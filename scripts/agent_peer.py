"""A hostile command an agent runs: it tries to drive agentd's control plane.

Run by an agent (the scripted agent's ``command`` step) with the environment
an agent's command gets (``AGENTD_SOCKET``, ``AGENTD_SESSION_ID``), it
connects to the daemon's socket as a raw client and tries, against one
thread, what only the person may do — answer the thread's pending approval,
stop it, interrupt its run, roll it back, send it a message, make a thread as
the person's — plus a read and a thread made as an agent's (which an agent
may do) and agentd's tool methods without a credential, or
with another session's (which it may not). It reports what each call got
(``ok`` or the error's ``data.kind``) as one JSON object: on stdout, and to
the Unix socket ``--report`` names when given (the test or probe listening
there needs no polling).

``--websocket PORT TOKEN_FILE`` goes through the daemon's WebSocket instead,
with the token read from its file (the agent runs as the person's uid, so it
can read it). ``--detach`` first daemonises it the classic way — fork, ``setsid``, fork
again, the middle process exits — so the process that connects has been
reparented away from the command that started it; the report says to which
pid (``ppid``). Used by ``tests/supervisor/test_control_plane.py`` and
``scripts/probe_control_plane.py``; it imports nothing of agentd.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import select
import socket
import struct
import sys
from pathlib import Path
from typing import Any

#: seconds any one read from the daemon may take
TIMEOUT = 30.0

CALLS = ("approve", "stop", "interrupt", "rollback", "send", "create", "create-as-agent", "read", "delegate", "steal")


class Daemon:
    """A raw JSON-RPC connection to the daemon, one line per message."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(path)
        self.buffer = b""
        self.next_id = 0

    def read(self) -> dict[str, Any]:
        while b"\n" not in self.buffer:
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the daemon closed the connection")
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """The whole response to one request (notifications on the way are skipped)."""
        self.next_id += 1
        request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.send(request)
        while True:
            message = self.read()
            if message.get("id") == self.next_id:
                return message

    def pending_approval(self, thread_id: str) -> tuple[str, str]:
        """``(request id, run id)`` of the thread's approval, once it is asked
        (the subscription replays what happened before it)."""
        self.call("events.subscribe", threadId=thread_id)
        while True:
            message = self.read()
            params = message.get("params") or {}
            if message.get("method") == "event" and params.get("type") == "approval.requested":
                return params["payload"]["request"]["id"], params["runId"]


class WebSocketDaemon(Daemon):
    """The same over agentd's WebSocket (one JSON-RPC message per text
    frame), with the token an agent's process can read from the data dir."""

    def __init__(self, port: int, token: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.next_id = 0
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            data = self.sock.recv(1)
            if not data:
                raise EOFError("the daemon closed the connection during the handshake")
            head += data
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(f"the WebSocket handshake was refused: {head.splitlines()[0]!r}")

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise EOFError("the daemon closed the connection")
            data += chunk
        return data

    def read(self) -> dict[str, Any]:
        payload = b""
        while True:
            first, second = self._exactly(2)
            size = second & 0x7F
            if size == 126:
                size = struct.unpack(">H", self._exactly(2))[0]
            elif size == 127:
                size = struct.unpack(">Q", self._exactly(8))[0]
            data = self._exactly(size)
            if first & 0x0F in (0x8, 0x9, 0xA):  # close, ping, pong: nothing this client needs
                if first & 0x0F == 0x8:
                    raise EOFError("the daemon closed the WebSocket")
                continue
            payload += data
            if first & 0x80:
                return json.loads(payload)

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode()
        mask = os.urandom(4)
        size = len(data)
        header = bytes([0x81]) + (bytes([0x80 | size]) if size < 126 else bytes([0x80 | 126]) + struct.pack(">H", size))
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def outcome(response: dict[str, Any]) -> str:
    """``ok``, or the error's kind."""
    if "result" in response:
        return "ok"
    return str(response.get("error", {}).get("data", {}).get("kind", "error"))


def detach() -> None:
    """Fork, ``setsid``, fork, and let go of the command's stdio (as a daemon
    does; the command's output ends when the first process exits): only the
    grandchild returns, once the middle process is gone, so it has been
    reparented by then."""
    if os.fork() != 0:
        os.wait()  # the middle process, which exits at once
        os._exit(0)
    os.setsid()
    middle = os.getpid()
    if os.fork() != 0:
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    try:
        pidfd = os.pidfd_open(middle)  # a zombie can still be opened: its exit is what we wait for
    except ProcessLookupError:
        return  # gone and reaped already
    select.select([pidfd], [], [], TIMEOUT)
    os.close(pidfd)


def attack(thread_id: str, calls: list[str], steal: tuple[str, Path] | None,
           websocket: tuple[int, Path] | None = None) -> dict[str, Any]:
    session_id = os.environ.get("AGENTD_SESSION_ID")
    if websocket is not None:
        port, token_file = websocket
        daemon: Daemon = WebSocketDaemon(port, token_file.read_text().strip())
    else:
        daemon = Daemon(os.environ["AGENTD_SOCKET"])
    request_id, run_id = daemon.pending_approval(thread_id)
    results: dict[str, str] = {}
    attempts = {
        "approve": lambda: daemon.call("approval.respond", requestId=request_id, decision="accept"),
        "stop": lambda: daemon.call("thread.stop", threadId=thread_id),
        "interrupt": lambda: daemon.call("run.interrupt", runId=run_id),
        "rollback": lambda: daemon.call("rollback.toRun", threadId=thread_id, targetOrdinal=0),
        "send": lambda: daemon.call("thread.message.send", threadId=thread_id, text="injected by a command"),
        "create": lambda: daemon.call("thread.create", title="made by a command"),
        "create-as-agent": lambda: daemon.call("thread.create", title="made by a command", createdBy="agent"),
        "read": lambda: daemon.call("thread.get", threadId=thread_id),
        "delegate": lambda: daemon.call("task.delegate", instructions="spawned by a command",
                                        **({"sessionId": session_id} if session_id else {"parentThreadId": thread_id})),
    }
    if steal is not None:
        victim, directory = steal
        credential = (directory / victim).read_text().strip()
        attempts["steal"] = lambda: daemon.call("task.delegate", instructions="as another session",
                                                sessionId=victim, credential=credential)
    for name in calls:
        if name in attempts:
            results[name] = outcome(attempts[name]())
    # Still pending? (A read: what the approval's state is after all that.)
    pending = daemon.call("thread.requests", threadId=thread_id)["result"]["requests"]
    return {"pid": os.getpid(), "ppid": os.getppid(), "requestId": request_id, "results": results,
            "stillPending": any(r["id"] == request_id for r in pending)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--thread", required=True, help="the thread whose pending approval to attack")
    parser.add_argument("--calls", default=",".join(c for c in CALLS if c != "steal"),
                        help=f"comma-separated, of {', '.join(CALLS)}")
    parser.add_argument("--detach", action="store_true", help="daemonise first (double fork)")
    parser.add_argument("--report", help="a Unix socket to send the report to")
    parser.add_argument("--steal", nargs=2, metavar=("SESSION", "CREDENTIAL_DIR"),
                        help="also call task.delegate with that session's credential, read from its file")
    parser.add_argument("--websocket", nargs=2, metavar=("PORT", "TOKEN_FILE"),
                        help="go through the daemon's WebSocket on 127.0.0.1:PORT, with the token read from its file")
    args = parser.parse_args(argv)
    if args.detach:
        detach()
    try:
        steal = (args.steal[0], Path(args.steal[1])) if args.steal else None
        websocket = (int(args.websocket[0]), Path(args.websocket[1])) if args.websocket else None
        report: dict[str, Any] = attack(args.thread, args.calls.split(","), steal, websocket)
    except Exception as exc:  # noqa: BLE001 - whatever happened is the report
        report = {"pid": os.getpid(), "ppid": os.getppid(), "error": f"{type(exc).__name__}: {exc}"}
    line = json.dumps(report)
    print(line, flush=True)
    if args.report:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as out:
            out.settimeout(TIMEOUT)
            out.connect(args.report)
            out.sendall(line.encode() + b"\n")
    return 0 if "error" not in report else 1


if __name__ == "__main__":
    sys.exit(main())

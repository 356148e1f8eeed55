#!/usr/bin/env python3
"""Probe (hostile round item 12b): clients of a daemon whose descriptor limit
is lowered while it runs (what ``prlimit --pid PID --nofile=N:N`` does).

    python scripts/probe_descriptors.py                 # 200 clients past a limit of open + 8
    python scripts/probe_descriptors.py --clients 500 --headroom 4 --json

A real daemon (``agentd.launch.start_daemon``, with the WebSocket on a free
loopback port) runs on a fresh temp data dir. Its soft ``RLIMIT_NOFILE`` is
set to the descriptors it has open plus ``--headroom``; then ``--clients``
Unix-socket clients connect one after another, each sending
``daemon.status`` and waiting (at most ``--wait`` s) for an answer, keeping
the connections that were served. Reported: served, told ``overloaded`` (and
closed), hanging (no answer within the wait), and the same for a few
WebSocket-port clients (an HTTP status, 503 when turned away); the daemon's
CPU time over the attack (a spinning accept loop would burn it); whether the
connected clients are still served; and whether a new client is served once
the limit is raised back. On the unfixed daemon every client past the limit
hung.

Bounded (every wait has a timeout); loopback only. It prints figures and
asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import trio  # noqa: E402

import hostile  # noqa: E402
from agentd.launch import start_daemon  # noqa: E402

STATUS = {"jsonrpc": "2.0", "id": 1, "method": "daemon.status", "params": {}}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def unix_client(path: Path, wait: float) -> tuple[str, hostile.RawConnection | None]:
    """``served`` (the connection is kept), ``overloaded``, ``closed`` or ``hanging``."""
    try:
        conn = await hostile.RawConnection.open(path, timeout=wait)
    except trio.TooSlowError:
        return "hanging", None  # not even connected: the backlog is full
    await conn.send(STATUS)
    reply = None
    with trio.move_on_after(wait) as waited:
        reply = await conn.receive()
    if waited.cancelled_caught:
        await conn.aclose()
        return "hanging", None
    if reply is not None and "result" in reply:
        return "served", conn
    await conn.aclose()
    kind = ((reply or {}).get("error") or {}).get("data", {}).get("kind")
    return kind or "closed", None


async def websocket_status(port: int, wait: float) -> str:
    """The HTTP status line's code a plain upgrade attempt gets, or ``hanging``."""
    with trio.move_on_after(wait):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            answer = b""
            while b"\r\n" not in answer and (chunk := await stream.receive_some(4096)):
                answer += chunk
            return answer.split()[1].decode() if answer else "closed"
    return "hanging"


async def main(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="probe-fd-"))
    port = hostile.free_port()
    daemon = await start_daemon(work / "data", work / "agentd.sock", extra_args=["--websocket-port", str(port)])
    held: list[hostile.RawConnection] = []
    soft, hard = resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE)
    try:
        open_now = len(os.listdir(f"/proc/{daemon.pid}/fd"))
        limit = open_now + args.headroom
        resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (limit, hard))
        cpu_before = cpu_seconds(daemon.pid)
        told: dict[str, int] = {}
        for _ in range(args.clients):
            how, conn = await unix_client(daemon.socket, args.wait)
            told[how] = told.get(how, 0) + 1
            if conn is not None:
                held.append(conn)
        websocket: dict[str, int] = {}
        for _ in range(args.websocket_clients):
            status = await websocket_status(port, args.wait)
            websocket[status] = websocket.get(status, 0) + 1
        cpu_attack = cpu_seconds(daemon.pid) - cpu_before
        still_served = 0
        for conn in held:
            await conn.send(STATUS)
            with trio.move_on_after(args.wait):
                if "result" in (await conn.receive() or {}):
                    still_served += 1
        resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (soft, hard))
        how, conn = await unix_client(daemon.socket, args.wait)
        if conn is not None:
            await conn.aclose()
        return {"openDescriptors": open_now, "limit": limit, "clients": args.clients, "unix": told,
                "websocket": websocket, "daemonCpuSecondsDuringAttack": round(cpu_attack, 3),
                "connectedStillServed": f"{still_served}/{len(held)}", "afterLimitRaised": how,
                "daemonAlive": daemon.process.returncode is None}
    finally:
        with trio.CancelScope(shield=True):
            for conn in held:
                await conn.aclose()
            if daemon.process.returncode is None:
                resource.prlimit(daemon.pid, resource.RLIMIT_NOFILE, (soft, hard))
            await daemon.terminate()
        shutil.rmtree(work, ignore_errors=True)


def table(r: dict) -> str:
    return "\n".join([
        f"daemon with {r['openDescriptors']} descriptors open, limit lowered to {r['limit']}: {r['clients']} Unix-socket "
        f"clients -> {r['unix']}; WebSocket port -> {r['websocket']}",
        f"daemon CPU during the attack {r['daemonCpuSecondsDuringAttack']} s; connected clients still served "
        f"{r['connectedStillServed']}; after the limit was raised a new client was {r['afterLimitRaised']}; "
        f"daemon alive: {r['daemonAlive']}",
    ])


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--websocket-clients", type=int, default=5)
    parser.add_argument("--headroom", type=int, default=8, help="descriptors over those open the limit allows")
    parser.add_argument("--wait", type=float, default=5.0, help="seconds a client waits for its answer")
    parser.add_argument("--json", action="store_true", help="print the JSON line only")
    args = parser.parse_args()
    hostile.report(trio.run(main, args), table, json_only=args.json)


if __name__ == "__main__":
    cli()

#!/usr/bin/env python3
"""Probe (hostile round items 12c, 12d, 12e): what a real daemon accepts as a
``commandId``, as a workspace, and as a request head with repeated headers.

    python scripts/probe_refusals.py           # a table, then one JSON line
    python scripts/probe_refusals.py --json

A real daemon (``agentd serve --web`` on a free loopback port) runs on a
fresh temp data dir, with ``allow_broad_workspaces`` on (so only the
pseudo-filesystem rule can refuse ``/proc`` and the like).

* 12c: ``thread.create`` with ``commandId`` ``"a" + chr(c) + "b"`` for every
  c in 0x00..0x7f and a few non-ASCII ones, and lengths 128/129: which are
  accepted (the contract: 1-128 printable ASCII, 0x20..0x7e).
* 12d: ``thread.create`` with workspaces on kernel pseudo-filesystems
  (``/proc``, ``/sys``, ``/dev``, ``/proc/self/cwd``, a symlink to it, ...)
  and ordinary folders: accepted, or the refusal's message.
* 12e: request heads that repeat ``Origin``, ``Host`` or ``Authorization``
  on the WebSocket upgrade and on the console's page, and the same heads
  without the repeat: the HTTP status of each.

Bounded (every exchange has a timeout); loopback and the Unix socket only.
It prints figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import os
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


async def create(conn: hostile.RawConnection, params: dict, request_id: int) -> dict:
    await conn.request("thread.create", params, request_id)
    with trio.fail_after(10):
        while True:
            reply = await conn.receive()
            if reply is None:
                raise ConnectionError("the daemon closed the connection")
            if reply.get("id") == request_id:
                return reply


def ranges(codes: list[int]) -> str:
    """``[0x20-0x7e]`` for a sorted list of code points."""
    out, start, prev = [], None, None
    for c in codes + [None]:
        if start is None:
            start = prev = c
        elif c is not None and c == prev + 1:
            prev = c
        else:
            out.append(f"0x{start:02x}" if start == prev else f"0x{start:02x}-0x{prev:02x}")
            start = prev = c
    return ", ".join(out) or "none"


async def command_ids(conn: hostile.RawConnection) -> dict:
    accepted, refused = [], []
    candidates = list(range(0x80)) + [0xe9, 0x2028, 0x1F600]
    for n, c in enumerate(candidates):
        reply = await create(conn, {"title": "cid", "commandId": f"a{chr(c)}b"}, 1000 + n)
        (accepted if "result" in reply else refused).append(c)
    lengths = {}
    for length in (1, 128, 129):
        reply = await create(conn, {"title": "len", "commandId": "x" * length}, 2000 + length)
        lengths[str(length)] = "accepted" if "result" in reply else reply["error"]["data"]["kind"]
    newline = await create(conn, {"commandId": "ab\n"}, 2500)
    return {"acceptedChars": ranges([c for c in accepted if c < 0x80]),
            "refusedChars": ranges([c for c in refused if c < 0x80]),
            "nonAsciiAccepted": [hex(c) for c in accepted if c >= 0x80],
            "lengths": lengths, "trailingNewline": "accepted" if "result" in newline else "refused"}


async def workspaces(conn: hostile.RawConnection, work: Path) -> dict:
    project = work / "project"
    project.mkdir()
    (work / "to-proc-cwd").symlink_to("/proc/self/cwd")
    (work / "to-sys").symlink_to("/sys/kernel")
    candidates = ["/proc", "/proc/self/cwd", "/proc/1", "/sys", "/sys/kernel", "/sys/fs/cgroup", "/dev", "/dev/pts",
                  "/dev/mqueue", str(work / "to-proc-cwd"), str(work / "to-sys"), "/dev/shm", "/tmp", str(project)]
    out = {}
    for n, workspace in enumerate(candidates):
        if not os.path.isdir(workspace):
            continue
        reply = await create(conn, {"workspace": workspace}, 3000 + n)
        out[workspace] = "accepted" if "result" in reply else reply["error"]["message"]
    return out


async def status_of(port: int, head: str) -> str:
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(head.replace("\n", "\r\n").encode() + b"\r\n")
            answer = b""
            while b"\r\n" not in answer and (chunk := await stream.receive_some(4096)):
                answer += chunk
    return answer.split(b"\r\n", 1)[0].decode() if answer else "closed"


async def repeated_headers(port: int, token: str) -> dict:
    upgrade = (f"GET / HTTP/1.1\nHost: 127.0.0.1:{port}\nUpgrade: websocket\nConnection: Upgrade\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\nSec-WebSocket-Version: 13\n")
    origin, bearer = f"Origin: http://127.0.0.1:{port}\n", f"Authorization: Bearer {token}\n"
    page = f"GET / HTTP/1.1\nHost: 127.0.0.1:{port}\n"
    heads = {
        "upgrade, each header once": upgrade + origin + bearer,
        "upgrade, allowed Origin then evil Origin": upgrade + origin + "Origin: http://evil.example\n" + bearer,
        "upgrade, evil Origin then allowed Origin": upgrade + "Origin: http://evil.example\n" + origin + bearer,
        "upgrade, good Authorization then a wrong one": upgrade + origin + bearer + "Authorization: Bearer wrong\n",
        "upgrade, two Host headers": upgrade + origin + bearer + "Host: evil.example\n",
        "page, one Host": page,
        "page, two Host headers": page + "Host: evil.example\n",
        "page, two Origin headers": page + origin + "Origin: http://evil.example\n",
    }
    return {what: await status_of(port, head) for what, head in heads.items()}


async def main(_args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="probe-ref-"))
    port = hostile.free_port()
    config = work / "config.toml"
    config.write_text("[daemon]\nallow_broad_workspaces = true\n")
    daemon = await start_daemon(work / "data", work / "agentd.sock", config=config,
                                extra_args=["--web", "--websocket-port", str(port)])
    try:
        conn = await hostile.RawConnection.open(daemon.socket)
        try:
            result = {"commandId": await command_ids(conn), "workspaces": await workspaces(conn, work)}
        finally:
            await conn.aclose()
        token = (daemon.data_dir / "websocket.token").read_text().strip()
        result["repeatedHeaders"] = await repeated_headers(port, token)
        result["tracebacksInLog"] = daemon.log_text().count("Traceback")
        return result
    finally:
        with trio.CancelScope(shield=True):
            await daemon.terminate()
        shutil.rmtree(work, ignore_errors=True)


def table(r: dict) -> str:
    c = r["commandId"]
    lines = [f"commandId: accepted {c['acceptedChars']}; refused {c['refusedChars']}; non-ASCII accepted "
             f"{c['nonAsciiAccepted'] or 'none'}; lengths {c['lengths']}; a trailing newline {c['trailingNewline']}"]
    lines.append("workspaces:")
    lines += [f"  {w}: {how}" for w, how in r["workspaces"].items()]
    lines.append("repeated headers:")
    lines += [f"  {what}: {status}" for what, status in r["repeatedHeaders"].items()]
    lines.append(f"tracebacks in the daemon's log: {r['tracebacksInLog']}")
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the JSON line only")
    args = parser.parse_args()
    hostile.report(trio.run(main, args), table, json_only=args.json)


if __name__ == "__main__":
    cli()

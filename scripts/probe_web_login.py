#!/usr/bin/env python3
"""Probe (hostile round item 5): does ``agentd web`` put the WebSocket token
where other local users can read it, and can its one-time login code be
used twice, late, from another origin or by another user?

    python scripts/probe_web_login.py            # ~65 s: it waits out a code's 60 s
    python scripts/probe_web_login.py --no-expiry --json

A real daemon (``agentd serve --web`` on a free loopback port) runs on a
fresh temp data dir. ``agentd web`` runs as at a desktop (a pty, ``DISPLAY``
set) with ``$BROWSER`` naming a stand-in browser that records its argv.
Reported: whether the token is in that argv or in any process's
``/proc/PID/cmdline`` meanwhile; the HTTP status of ``POST /login`` with the
opened code — first, second, from another origin, from another user (as
root: uid 65534, then the owner again), and with a code older than its TTL.

Bounded (every step has a timeout); loopback only. It prints figures and
asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
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
from agentd.protocol.client import Client  # noqa: E402
from agentd.protocol.login import CODE_TTL  # noqa: E402


def login_request(port: int, code: str, origin: str | None = None) -> bytes:
    body = code.encode()
    return (f"POST /login HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: {origin or f'http://127.0.0.1:{port}'}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def exchange(port: int, data: bytes) -> int:
    """The HTTP status the port answers ``data`` with."""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(data)
            answer = b""
            while b"\r\n" not in answer and (chunk := await stream.receive_some(4096)):
                answer += chunk
    return int(answer.split()[1]) if answer else 0


def cmdlines_holding(secret: str) -> list[int]:
    """Pids whose command line holds ``secret`` (what any local user can read)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if secret.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


async def run_agentd_web(daemon, work: Path) -> tuple[list[str], list[int]]:
    """``agentd web`` at a desktop; the stand-in browser's argv, and the pids
    whose command line held the token while it ran."""
    recorded = work / "browser-argv.json"
    browser = work / "browser"
    token = (daemon.data_dir / "websocket.token").read_text().strip()
    # The stand-in browser also looks for the token in every command line while it "runs".
    browser.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                       f"found = [p for p in os.listdir('/proc') if p.isdigit() and "
                       f"{token!r}.encode() in open(f'/proc/{{p}}/cmdline', 'rb').read()]\n"
                       f"open({str(recorded)!r}, 'w').write(json.dumps({{'argv': sys.argv, 'found': found}}))\n")
    browser.chmod(0o700)
    env = {**os.environ, "DISPLAY": ":99", "BROWSER": f"{browser} %s"}
    env.pop("WAYLAND_DISPLAY", None)
    master, terminal = pty.openpty()
    try:
        with trio.fail_after(60):
            await trio.run_process([sys.executable, "-m", "agentd", "web", "--data-dir", str(daemon.data_dir),
                                    "--socket", str(daemon.socket)], stdin=terminal, stdout=terminal,
                                   capture_stderr=True, env=env, check=False)
    finally:
        os.close(master)
        os.close(terminal)
    seen = json.loads(recorded.read_text())
    return seen["argv"], [int(p) for p in seen["found"]]


async def other_user_status(port: int, code: str) -> int | None:
    """``POST /login`` from uid 65534 (needs root and /usr/bin/python3), else None."""
    if os.getuid() != 0 or not os.path.exists("/usr/bin/python3"):
        return None
    sender = ("import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])));"
              "s.sendall(sys.stdin.buffer.read()); sys.stdout.buffer.write(s.recv(4096))")
    with trio.fail_after(30):
        done = await trio.run_process(["/usr/bin/python3", "-I", "-c", sender, str(port)], user=65534, cwd="/",
                                      stdin=login_request(port, code), capture_stdout=True, check=False)
    return int(done.stdout.split()[1]) if done.stdout else 0


async def main(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="probe-web-"))
    port = hostile.free_port()
    daemon = await start_daemon(work / "data", work / "agentd.sock", extra_args=["--web", "--websocket-port", str(port)])
    try:
        token = (daemon.data_dir / "websocket.token").read_text().strip()
        argv, found_meanwhile = await run_agentd_web(daemon, work)
        match = re.search(r"#code=([A-Za-z0-9_-]+)", argv[-1])
        result: dict = {"browserArgv": [a.replace(token, "<TOKEN>") for a in argv],
                        "tokenInBrowserArgv": any(token in a for a in argv),
                        "cmdlinesWithTokenWhileBrowserRan": len(found_meanwhile),
                        "cmdlinesWithTokenAfter": len(cmdlines_holding(token))}
        if match:
            code = match.group(1)
            result["crossOrigin"] = await exchange(port, login_request(port, code, origin="http://evil.example"))
            result["otherUser"] = await other_user_status(port, code)
            result["first"] = await exchange(port, login_request(port, code))
            result["second"] = await exchange(port, login_request(port, code))
        if args.expiry:
            async with Client.connect(daemon.socket) as client:
                late = (await client.call("web.loginCode"))["code"]
            await trio.sleep(CODE_TTL + 1)
            result["afterTtl"] = await exchange(port, login_request(port, late))
        return result
    finally:
        with trio.CancelScope(shield=True):
            await daemon.terminate()
        shutil.rmtree(work, ignore_errors=True)


def table(r: dict) -> str:
    lines = [f"browser argv: {r['browserArgv']} (token in it: {r['tokenInBrowserArgv']}); command lines holding "
             f"the token: {r['cmdlinesWithTokenWhileBrowserRan']} while the browser ran, "
             f"{r['cmdlinesWithTokenAfter']} after"]
    if "first" in r:
        lines.append(f"POST /login with the opened code: other origin {r['crossOrigin']}, other user "
                     f"{r['otherUser'] if r['otherUser'] is not None else 'n/a (not root)'}, then the owner "
                     f"{r['first']}, again {r['second']}")
    if "afterTtl" in r:
        lines.append(f"a code used after {CODE_TTL:.0f} s: {r['afterTtl']}")
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-expiry", dest="expiry", action="store_false",
                        help=f"skip waiting {CODE_TTL:.0f} s for a code to expire")
    parser.add_argument("--json", action="store_true", help="print the JSON line only")
    args = parser.parse_args()
    hostile.report(trio.run(main, args), table, json_only=args.json)


if __name__ == "__main__":
    cli()

#!/usr/bin/env python3
"""Probe (hostile round item 1): pipelined bursts of slot-holding requests
against a real daemon.

    python scripts/probe_pipeline.py                        # 4 bursts of 600
    python scripts/probe_pipeline.py --requests 2000 --bursts 6 --json

A real daemon (``agentd.launch.start_daemon``) runs on a fresh temp data dir
with a run in progress (a scripted tool that hangs). Each burst is one raw
Unix-socket connection writing ``--requests`` requests in one write —
``providers.list`` and ``thread.create`` in turn, the requests that hold a
slot of the connection's 256 while they run — and reading every answer.
Meanwhile another client calls ``daemon.status`` in a loop. Reported per
burst: answered (results, ``overloaded`` errors, other errors), missing,
whether the connection was dropped, and the other client's slowest answer;
then whether the daemon is the same process, and whether the run is still
running. On the unfixed daemon the first burst dropped every client, and
four made it exit (``SupervisorGaveUp``).

Bounded: every burst has ``--timeout`` seconds (default 60); loopback Unix
socket only. It asserts nothing; it prints figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import trio  # noqa: E402

import hostile  # noqa: E402
from agentd.launch import start_daemon  # noqa: E402
from agentd.protocol.client import Client  # noqa: E402

HANG = '@script\n[{"tool": {"name": "probe-hang", "hang": true}}]'


def burst_lines(count: int) -> bytes:
    """``count`` requests, ids 1..count, alternating the two slot holders."""
    out = []
    for i in range(1, count + 1):
        if i % 2:
            request = {"jsonrpc": "2.0", "id": i, "method": "providers.list", "params": {}}
        else:
            request = {"jsonrpc": "2.0", "id": i, "method": "thread.create", "params": {"title": f"burst {i}"}}
        out.append(json.dumps(request).encode() + b"\n")
    return b"".join(out)


async def one_burst(socket: Path, count: int, timeout: float) -> dict:
    try:
        conn = await hostile.RawConnection.open(socket, timeout=10)
    except (OSError, trio.TooSlowError) as exc:
        return {"requests": count, "result": 0, "overloaded": 0, "other_error": 0, "missing": count,
                "dropped": True, "seconds": 0.0, "connectFailed": f"{type(exc).__name__}: {exc}"}
    answered = {"result": 0, "overloaded": 0, "other_error": 0}
    ids: set[int] = set()
    dropped = False
    started = time.monotonic()
    try:
        try:
            await conn.stream.send_all(burst_lines(count))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # dropped while writing: what was answered is read below
        with trio.move_on_after(timeout):
            while len(ids) < count:
                message = await conn.receive()
                if message is None:
                    dropped = True
                    break
                ids.add(message.get("id"))
                if "result" in message:
                    answered["result"] += 1
                elif message.get("error", {}).get("data", {}).get("kind") == "overloaded":
                    answered["overloaded"] += 1
                else:
                    answered["other_error"] += 1
    finally:
        await conn.aclose()
    return {"requests": count, **answered, "missing": count - len(ids & set(range(1, count + 1))),
            "dropped": dropped, "seconds": round(time.monotonic() - started, 2)}


async def other_client(socket: Path, stop: trio.Event, latencies: list[float], failures: list[str]) -> None:
    """``daemon.status`` in a loop on its own connection, until ``stop``."""
    try:
        async with Client.connect(socket) as client:
            while not stop.is_set():
                started = time.monotonic()
                await client.call("daemon.status")
                latencies.append(time.monotonic() - started)
                await trio.sleep(0.01)
    except Exception as exc:  # noqa: BLE001 - a dropped bystander is the figure
        failures.append(f"{type(exc).__name__}: {exc}")


async def main(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="probe-pipe-"))
    socket = work / "agentd.sock"
    daemon = await start_daemon(work / "data", socket, timeout=60)
    try:
        async with Client.connect(socket) as client:
            thread = (await client.call("thread.create", title="running"))["threadId"]
            run_id = (await client.call("thread.message.send", threadId=thread, text=HANG))["runId"]
            with trio.fail_after(30):  # the run in progress: its tool started
                while (await client.call("run.get", runId=run_id))["run"]["status"] != "running":
                    await trio.sleep(0.05)
            pid = (await client.call("daemon.status"))["pid"]
            bursts = []
            for _ in range(args.bursts):
                latencies: list[float] = []
                failures: list[str] = []
                stop = trio.Event()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(other_client, socket, stop, latencies, failures)
                    bursts.append(await one_burst(socket, args.requests, args.timeout))
                    stop.set()
                bursts[-1]["otherClient"] = {"calls": len(latencies), "failures": failures,
                                             "slowestMs": round(max(latencies, default=0) * 1000, 1)}
        after: dict = {"alive": daemon.process.returncode is None}
        try:
            with trio.fail_after(30):
                async with Client.connect(socket) as client:
                    status = await client.call("daemon.status")
                    run = (await client.call("run.get", runId=run_id))["run"]
                    after.update(samePid=status["pid"] == pid, runStatus=run["status"], runReason=run.get("reason"))
                    if run["status"] == "running":
                        await client.call("run.interrupt", runId=run_id)
        except (OSError, trio.TooSlowError, ConnectionError) as exc:
            after.update(answering=False, why=f"{type(exc).__name__}: {exc}")
        return {"bursts": bursts, "daemon": after}
    finally:
        with trio.CancelScope(shield=True):
            await daemon.terminate()
        shutil.rmtree(work, ignore_errors=True)


def table(result: dict) -> str:
    lines = []
    for n, b in enumerate(result["bursts"], 1):
        lines.append(
            f"burst {n}: {b['requests']} pipelined: {b['result'] + b['overloaded'] + b['other_error']} answered "
            f"({b['result']} results, {b['overloaded']} overloaded, {b['other_error']} other errors), "
            f"{b['missing']} missing, {'DROPPED' if b['dropped'] else 'not dropped'}, {b['seconds']} s; "
            f"other client: {b['otherClient']['calls']} calls, slowest {b['otherClient']['slowestMs']} ms, "
            f"{len(b['otherClient']['failures'])} failures" + (f"; connect failed: {b['connectFailed']}"
                                                                if b.get("connectFailed") else ""))
    d = result["daemon"]
    if "samePid" in d:
        lines.append(f"daemon alive: {d['alive']}, same pid: {d['samePid']}, the run in progress: {d['runStatus']}"
                     + (f" ({d['runReason']})" if d.get("runReason") else ""))
    else:
        lines.append(f"daemon alive: {d['alive']}, not answering: {d['why']}")
    return "\n".join(lines)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--bursts", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds each burst may take")
    parser.add_argument("--json", action="store_true", help="print the JSON line only")
    args = parser.parse_args()
    hostile.report(trio.run(main, args), table, json_only=args.json)


if __name__ == "__main__":
    cli()

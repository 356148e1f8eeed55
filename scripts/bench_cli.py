"""How long the client commands a person types most take, wall-clock, from
spawn to exit (issue 24, section 5: ``agentd --version``, ``agentd threads``
and ``agentd show`` <= 100 ms with bytecode cached), beside the floor: a
bare ``python -c pass`` of the same interpreter, measured in the same run.

A real daemon is started on a fresh data dir and given a few threads with a
few runs each (one of them with a file-writing tool call, so ``show`` draws
nodes); then each round runs the floor and every command once, one after
another, so that a busy machine slows them all alike. The first round warms
the bytecode cache and is not counted (the commands run without
``PYTHONDONTWRITEBYTECODE``, so that their bytecode is cached as on a
person's machine).

    python scripts/bench_cli.py [--rounds 15] [--threads 5] [--runs 3] [--agentd CMD] [--json]

``--agentd`` measures another build, e.g. an older tree on PYTHONPATH:
``--agentd "env PYTHONPATH=/tmp/old/pkg python3 -m agentd"``.

Prints median / min / max per command, the median above the floor, and
whether the median met the target; exits 1 if one did not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client

TARGET_MS = 100.0
SCRIPT = '@script\n[{"say": "writing"}, {"write": {"path": "notes.txt", "content": "x\\n"}}, {"say": "done"}]'


def agentd_command() -> list[str]:
    """``agentd`` as a person runs it: the installed console script next to
    this interpreter, else ``python -m agentd``."""
    script = Path(sys.executable).with_name("agentd")
    return [str(script)] if script.exists() else [sys.executable, "-m", "agentd"]


async def fill(socket: Path, threads: int, runs: int) -> str:
    """Threads with runs to list and show; returns the one ``show`` draws."""
    async with Client.connect(socket) as client:
        shown = ""
        for index in range(threads):
            thread_id = (await client.call("thread.create", title=f"bench {index}"))["threadId"]
            shown = shown or thread_id
            for number in range(runs):
                after = (await client.call("daemon.status"))["lastSeq"]
                async with client.subscribe(thread_id=thread_id, after_seq=after) as events:
                    text = SCRIPT if number == 0 else f"message {number}"
                    run_id = (await client.call("thread.message.send", threadId=thread_id, text=text))["runId"]
                    async for event in events:
                        if event["type"] in ("run.completed", "run.failed") and event.get("runId") == run_id:
                            break
        return shown


#: the commands' environment: bytecode is written and read, as a person's Python does
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "AGENTD_DEBUG")}


def timed(argv: list[str]) -> tuple[float, float]:
    """Spawn ``argv`` and wait for its exit (it must exit 0): the wall-clock
    ms, and the CPU ms (user + system) the child used, which a loaded
    machine inflates much less."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    elapsed = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode(errors='replace')}")
    cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return elapsed, cpu


def measure(commands: dict[str, list[str]], rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Every command once per round, interleaved; the first round is warm-up."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
    for round_ in range(rounds + 1):
        for name, argv in commands.items():
            took = timed(argv)
            if round_:
                times[name].append(took)
    return times


def report(times: dict[str, list[tuple[float, float]]], as_json: bool) -> bool:
    floor = statistics.median(wall for wall, _ in times["floor"])
    rows, met = [], True
    for name, values in times.items():
        walls = [wall for wall, _ in values]
        median = statistics.median(walls)
        ok = name == "floor" or median <= TARGET_MS
        met &= ok
        rows.append({"command": name, "median": round(median, 1), "min": round(min(walls), 1),
                     "max": round(max(walls), 1), "aboveFloor": round(median - floor, 1),
                     "cpuMedian": round(statistics.median(cpu for _, cpu in values), 1),
                     "target": None if name == "floor" else TARGET_MS, "met": ok, "runs": len(values)})
    if as_json:
        print(json.dumps({"rows": rows, "met": met, "loadAverage": os.getloadavg()[0]}))
        return met
    print(f"{'command':22} {'median':>7} {'min':>7} {'max':>7} {'-floor':>7} {'cpu':>7}  target")
    for row in rows:
        target = "" if row["target"] is None else f"<= {row['target']:.0f} ms {'ok' if row['met'] else 'MISSED'}"
        print(f"{row['command']:22} {row['median']:7.1f} {row['min']:7.1f} {row['max']:7.1f} {row['aboveFloor']:7.1f} "
              f"{row['cpuMedian']:7.1f}  {target}")
    print(f"ms: wall-clock median/min/max, the median above the floor, the child's CPU median; "
          f"{rows[0]['runs']} interleaved runs each after one warm-up round; load average {os.getloadavg()[0]:.1f}")
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="measured runs of each command (default 15)")
    parser.add_argument("--threads", type=int, default=5, help="threads in the daemon (default 5)")
    parser.add_argument("--runs", type=int, default=3, help="runs in each thread (default 3)")
    parser.add_argument("--agentd", metavar="CMD", help="the agentd command to measure (default: the one installed here)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="agentd-bench-cli-"))
    socket = Path(tempfile.mkdtemp(prefix="abc-")) / "s.sock"

    async def start():
        return await start_daemon(data_dir, socket)

    daemon = trio.run(start)
    try:
        thread_id = trio.run(fill, socket, args.threads, args.runs)
        where = ["--data-dir", str(data_dir), "--socket", str(socket)]
        agentd = shlex.split(args.agentd) if args.agentd else agentd_command()
        commands = {
            "floor": [sys.executable, "-c", "pass"],
            "agentd --version": [*agentd, "--version"],
            "agentd threads": [*agentd, "threads", *where],
            "agentd show THREAD": [*agentd, "show", thread_id, *where],
        }
        met = report(measure(commands, args.rounds), args.json)
    finally:
        trio.run(daemon.terminate)
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(socket.parent, ignore_errors=True)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

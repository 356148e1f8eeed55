"""Benchmark agentd's durable command path against the disk's fsync floor.

Every command agentd acknowledges is durable: its records, events and receipt
reach the disk (LMDB with ``sync=True``) before the client gets its answer.
The obvious way to do that costs one fsync per command, so a disk that can
do N synced transactions a second caps the daemon at N commands a second:
that is **the floor**, measured here as raw LMDB puts, one synced write
transaction each, with the same environment flags as ``store/db.py``.

agentd does better with **group commit** (``store/writer.py``): while one
transaction is being synced, the batches of other commands queue up, and the
writer thread then commits all of them in one transaction with one fsync.
With many concurrent clients, many commands share each fsync, so throughput
should rise well above the floor; with one client there is nothing to share,
and the round trip (socket, JSON, actor, writer thread, fsync, back) is what
a single user feels.

One run measures, on a fresh temp dir on the chosen disk:

1. the floor: synced LMDB puts per second (~300-byte values);
2. ``thread.create`` throughput through a real daemon child process
   (``agentd.launch.start_daemon``) with 1 and with 64 concurrent clients,
   each its own connection, closed loop (one request in flight: send a line,
   read a line);
3. round-trip latency (p50, p99, mean) at 1 client.

The clients run in separate load-generator processes (``multiprocessing``,
spawn), each an epoll loop over plain non-blocking sockets that checks only
that a response line carries a ``"result"``: the load generator stays cheap
so the daemon is what gets measured (its CPU share is reported). Each
scenario warms up first, then counts the responses that arrive within a
fixed window; any error response fails the bench.

It prints one JSON object, with the targets and whether each was met; a
target not met is a finding, not a failure (exit 0). Only Unix sockets are
used: nothing leaves the machine.

    python scripts/bench.py            # ~3 s per scenario
    python scripts/bench.py --quick    # ~1 s per scenario, a smoke run
    python scripts/bench.py --dir /path/on/other/disk --seconds 5
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import selectors
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import lmdb  # noqa: E402
import trio  # noqa: E402

from agentd.protocol.client import Client  # noqa: E402
from agentd.launch import DaemonProcess, start_daemon  # noqa: E402
from agentd.store.batch import DATABASES  # noqa: E402
from agentd.store.db import DEFAULT_MAP_SIZE  # noqa: E402

TARGET_64_CLIENTS_PER_S = 5000
TARGET_RATIO_VS_FLOOR = 3
TARGET_P50_MS = 1.0

FLOOR_VALUE_BYTES = 300
REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"thread.create","params":{"title":"bench"}}\n'
STALL_TIMEOUT = 30.0  # seconds without any response: the daemon is stuck


class BenchError(RuntimeError):
    """The bench could not measure (an error response, a stuck daemon, ...)."""


# -- the floor: one fsync per put --------------------------------------------------


def measure_floor(path: Path, *, warmup: float, seconds: float) -> float:
    """Synced LMDB puts per second, one write transaction per put, opened
    exactly as ``store.db.Store`` opens its environment."""
    path.mkdir(parents=True, mode=0o700)
    env = lmdb.open(
        str(path),
        map_size=DEFAULT_MAP_SIZE,
        max_dbs=len(DATABASES) + 8,
        sync=True,
        metasync=True,
        max_readers=512,
    )
    try:
        db = env.open_db(b"floor")
        value = os.urandom(FLOOR_VALUE_BYTES)
        key = 0

        def put_until(deadline: float) -> int:
            nonlocal key
            count = 0
            while time.perf_counter() < deadline:
                key += 1
                with env.begin(write=True) as txn:
                    txn.put(key.to_bytes(8, "big"), value, db=db)
                count += 1
            return count

        put_until(time.perf_counter() + warmup)
        start = time.perf_counter()
        count = put_until(start + seconds)
        return count / (time.perf_counter() - start)
    finally:
        env.close()


# -- the load generator (runs in its own process) ----------------------------------------


@dataclass
class _Conn:
    sock: socket.socket
    buffer: bytearray = field(default_factory=bytearray)
    sent_at: float = 0.0


def load_worker(socket_path: str, connections: int, pipe: Any) -> None:
    """Entry point of one load-generator process; reports over ``pipe``."""
    try:
        result = _drive(socket_path, connections, pipe)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails loudly
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
    else:
        pipe.send(("done", result))
    finally:
        pipe.close()


def _drive(socket_path: str, connections: int, pipe: Any) -> dict[str, Any]:
    """Closed-loop clients: each connection keeps one ``thread.create`` in flight.

    Handshake: connect everything, send ``ready``, receive the window
    ``(start, end)`` on the system-wide monotonic clock, run until ``end``,
    let the in-flight requests finish, return the counts.
    """
    conns = []
    for _ in range(connections):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(socket_path)
        sock.setblocking(False)
        conns.append(_Conn(sock))
    pipe.send(("ready", None))
    _go, window_start, window_end = pipe.recv()

    selector = selectors.DefaultSelector()
    cpu_before = _own_cpu_seconds()
    wall_before = time.monotonic()
    for conn in conns:
        selector.register(conn.sock, selectors.EVENT_READ, conn)
        conn.sent_at = time.perf_counter()
        conn.sock.sendall(REQUEST)
    in_flight = len(conns)
    completed = 0
    latencies: list[float] = []
    while in_flight:
        ready = selector.select(timeout=STALL_TIMEOUT)
        if not ready:
            raise BenchError(f"no response for {STALL_TIMEOUT:.0f} s with {in_flight} requests in flight")
        for key, _mask in ready:
            conn = key.data
            chunk = conn.sock.recv(65536)
            if not chunk:
                raise BenchError("the daemon closed a connection")
            conn.buffer += chunk
            end = conn.buffer.find(b"\n")
            if end < 0:
                continue  # a partial line; the rest follows
            received_at = time.perf_counter()
            line = bytes(conn.buffer[:end])
            if end + 1 != len(conn.buffer):
                raise BenchError(f"more than one line for one request: {bytes(conn.buffer)[:300]!r}")
            conn.buffer.clear()
            if b'"result":' not in line:
                raise BenchError(f"thread.create failed: {line[:500].decode(errors='replace')}")
            completed += 1
            now = time.monotonic()
            if window_start <= now < window_end:
                latencies.append(received_at - conn.sent_at)
            if now < window_end:
                conn.sent_at = time.perf_counter()
                conn.sock.sendall(REQUEST)
            else:
                selector.unregister(conn.sock)
                in_flight -= 1
    cpu = _own_cpu_seconds() - cpu_before
    wall = time.monotonic() - wall_before
    selector.close()
    for conn in conns:
        conn.sock.close()
    return {"latencies": latencies, "completed": completed, "cpu_seconds": cpu, "wall_seconds": wall}


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the daemon side --------------------------------------------------------------------


def daemon_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds the daemon used so far: its event-loop (main) thread and
    all its other threads (the LMDB writer, trio's worker threads)."""
    ticks = os.sysconf("SC_CLK_TCK")
    main = other = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:
            continue  # the thread ended meanwhile
        fields = stat.rsplit(")", 1)[1].split()
        seconds = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        if task.name == str(pid):
            main += seconds
        else:
            other += seconds
    return {"event_loop_thread": main, "other_threads": other}


async def commit_stats(socket_path: Path) -> dict[str, int]:
    async with Client.connect(socket_path) as client:
        status = await client.call("daemon.status")
    return status["commits"]


def batches_per_transaction(batches: int, transactions: int) -> float | None:
    return round(batches / transactions, 2) if transactions else None


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def latency_summary_ms(latencies: list[float]) -> dict[str, float]:
    values = sorted(latencies)
    return {
        "p50": round(percentile(values, 0.50) * 1000, 3),
        "p99": round(percentile(values, 0.99) * 1000, 3),
        "mean": round(sum(values) / len(values) * 1000, 3),
    }


async def run_scenario(
    daemon: DaemonProcess, *, clients: int, workers: int, warmup: float, seconds: float
) -> dict[str, Any]:
    """Drive ``clients`` closed-loop connections from ``workers`` processes
    for ``warmup`` + ``seconds``; return throughput, latency and costs."""
    workers = max(1, min(workers, clients))
    shares = [clients // workers + (1 if i < clients % workers else 0) for i in range(workers)]
    context = multiprocessing.get_context("spawn")
    processes, pipes = [], []
    for share in shares:
        parent_end, child_end = context.Pipe()
        process = context.Process(target=load_worker, args=(str(daemon.socket), share, child_end), daemon=True)
        process.start()
        child_end.close()
        processes.append(process)
        pipes.append(parent_end)
    try:
        for pipe in pipes:
            _expect(await trio.to_thread.run_sync(_receive, pipe), "ready")
        before = await commit_stats(daemon.socket)
        cpu_before = daemon_cpu_seconds(daemon.pid)
        window_start = time.monotonic() + warmup
        window_end = window_start + seconds
        for pipe in pipes:
            pipe.send(("go", window_start, window_end))
        results = [_expect(await trio.to_thread.run_sync(_receive, pipe), "done") for pipe in pipes]
        cpu_after = daemon_cpu_seconds(daemon.pid)
        after = await commit_stats(daemon.socket)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join()
        for pipe in pipes:
            pipe.close()

    latencies = [x for r in results for x in r["latencies"]]
    if not latencies:
        raise BenchError(f"no thread.create completed within the {seconds} s window at {clients} clients")
    completed = sum(r["completed"] for r in results)  # warm-up and drain included, like the CPU deltas
    batches = after["batches"] - before["batches"]
    transactions = after["transactions"] - before["transactions"]
    loadgen_cpu = sum(r["cpu_seconds"] for r in results)
    loadgen_wall = max(r["wall_seconds"] for r in results)
    return {
        "clients": clients,
        "load_processes": workers,
        "throughput_per_s": round(len(latencies) / seconds, 1),
        "latency_ms": latency_summary_ms(latencies),
        "commits": {
            "batches": batches,
            "transactions": transactions,
            "batches_per_transaction": batches_per_transaction(batches, transactions),
        },
        "daemon_cpu_us_per_command": {
            name: round((cpu_after[name] - cpu_before[name]) / completed * 1e6, 1) for name in cpu_after
        },
        "loadgen_cpu_cores": round(loadgen_cpu / loadgen_wall, 2),
    }


def _receive(pipe: Any) -> tuple[str, Any]:
    try:
        return pipe.recv()
    except EOFError:
        return ("error", "a load-generator process died without a report")


def _expect(message: tuple[str, Any], kind: str) -> Any:
    got, payload = message
    if got == "error":
        raise BenchError(f"load generator failed: {payload}")
    if got != kind:
        raise BenchError(f"load generator said {got!r}, expected {kind!r}")
    return payload


async def bench_daemon(data_dir: Path, socket_path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Start a daemon, run the 1- and 64-client scenarios, stop it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}  # no stray config
    daemon = await start_daemon(data_dir, socket_path, env=env)
    try:
        one = await run_scenario(daemon, clients=1, workers=1, warmup=args.warmup, seconds=args.seconds)
        many = await run_scenario(
            daemon, clients=args.clients, workers=args.workers, warmup=args.warmup, seconds=args.seconds
        )
        totals = await commit_stats(daemon.socket)
    finally:
        code = await daemon.terminate()
    if code != 0:
        raise BenchError(f"the daemon exited with {code} on SIGTERM:\n{daemon.log_text()[-4000:]}")
    return {"one": one, "many": many, "totals": totals}


# -- the report ---------------------------------------------------------------------------------


def report(floor: float, runs: dict[str, Any], args: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    one, many, totals = runs["one"], runs["many"], runs["totals"]
    t1, t64 = one["throughput_per_s"], many["throughput_per_s"]
    ratio_64 = round(t64 / floor, 2)
    return {
        "floor_tx_per_s": round(floor, 1),
        "throughput_1_client": t1,
        "throughput_64_clients": t64,
        "latency_ms": one["latency_ms"],
        "ratio_64_vs_floor": ratio_64,
        "ratio_1_vs_floor": round(t1 / floor, 2),
        "commits": {
            "batches": totals["batches"],
            "transactions": totals["transactions"],
            "batches_per_transaction": batches_per_transaction(totals["batches"], totals["transactions"]),
        },
        "cpu_count": os.cpu_count(),
        "target_64_clients_per_s": TARGET_64_CLIENTS_PER_S,
        "target_ratio_vs_floor": TARGET_RATIO_VS_FLOOR,
        "target_p50_ms": TARGET_P50_MS,
        "met_64_clients_per_s": t64 >= TARGET_64_CLIENTS_PER_S,
        "met_ratio_vs_floor": ratio_64 >= TARGET_RATIO_VS_FLOOR,
        "met_p50_ms": one["latency_ms"]["p50"] <= TARGET_P50_MS,
        "scenarios": {"1_client": one, f"{many['clients']}_clients": many},
        "settings": {
            "seconds": args.seconds,
            "warmup_seconds": args.warmup,
            "load_processes": args.workers,
            "dir": str(data_dir.parent),
        },
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=None, help="measured seconds per scenario (default 3)")
    parser.add_argument("--warmup", type=float, default=None, help="warm-up seconds per scenario (default 0.5)")
    parser.add_argument("--quick", action="store_true", help="a ~1 s-per-scenario smoke run")
    parser.add_argument("--dir", type=Path, default=None, help="make the temp data dir here (default: under /tmp)")
    parser.add_argument("--clients", type=int, default=64, help="concurrent clients of the big scenario (default 64)")
    parser.add_argument("--workers", type=int, default=2, help="load-generator processes (default 2)")
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 1.0 if args.quick else 3.0
    if args.warmup is None:
        args.warmup = 0.25 if args.quick else 0.5
    if args.seconds <= 0 or args.warmup < 0 or args.clients < 1 or args.workers < 1:
        parser.error("--seconds must be > 0, --warmup >= 0, --clients and --workers >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="agentd-bench-", dir=args.dir))
    socket_dir = Path(tempfile.mkdtemp(prefix="ab-"))  # short: sun_path holds 107 bytes
    try:
        floor = measure_floor(base / "floor", warmup=args.warmup, seconds=args.seconds)
        runs = trio.run(bench_daemon, base / "daemon", socket_dir / "agentd.sock", args)
        print(json.dumps(report(floor, runs, args, base), indent=2))
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(socket_dir, ignore_errors=True)


if __name__ == "__main__":
    main()

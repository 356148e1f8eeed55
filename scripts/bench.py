"""Benchmark agentd's request path and durable writes against this machine's
floor, measured in the same run (issue 14's table, every row).

Every command agentd acknowledges is durable (LMDB with ``sync=True``), so
the disk's synced transactions are the floor: **the floor** here is raw LMDB
puts, one synced write transaction each, opened exactly as ``store/db.py``
opens its environment, with the commit's own latency. The **echo round trip**
is a minimal trio line-echo server on a Unix socket, in its own process: what
one request costs with no agentd in it. agentd beats the floor with group
commit (``store/writer.py``): batches of concurrent commands share one fsync.

One run measures, on fresh temp dirs on the chosen disk, against a real
daemon child process (``agentd.launch.start_daemon``):

1. the floor (synced puts/s, commit p50) and the echo round trip (p50);
2. ``thread.create`` at 1 client (p50), 64 clients and 256 clients
   (throughput, p99), and ``daemon.status`` (a read) at 64 clients: the
   durable ÷ non-durable ratio;
3. a 10,000-delta answer of the scripted agent: how many durable appends it
   became, and first delta → completed through agentd (a subscriber's
   ``message.delta`` → ``run.completed``) ÷ the same driving the agent
   process directly (``item/agentMessage/delta`` → ``turn/completed``);
4. a long answer (``--long-answer MB``, default 8): bytes written per answer
   byte, from LMDB's own stats (``env.info()``: ``last_pgno``; ``stat()`` of
   every database: pages in use) and from the kernel (the daemon's
   ``/proc/PID/io``: ``wchar``, every byte it handed to ``write``/``pwrite``,
   LMDB's page writes included; ``write_bytes``, what reached the disk).

Clients run in load-generator processes (``multiprocessing``, spawn), each an
epoll loop over plain non-blocking sockets, closed loop (one request in
flight per connection); each scenario warms up, then counts the responses
within a fixed window; any error response fails the bench. It prints one JSON
object: each row of the table with its figure, its target and whether it was
met — a target not met is a finding, not a failure (exit 0). Only Unix sockets
are used: nothing leaves the machine. The machine's load (``/proc/loadavg``)
is printed with the figures: report ratios against the floor of the same run.

    python scripts/bench.py                   # ~3 s per scenario
    python scripts/bench.py --quick           # ~1 s per scenario, a smoke run
    python scripts/bench.py --long-answer 10  # only the long-answer row, 10 MB
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
import subprocess
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
import msgspec  # noqa: E402
import trio  # noqa: E402

from agentd.protocol.client import Client  # noqa: E402
from agentd.launch import DaemonProcess, start_daemon  # noqa: E402
from agentd.store.batch import DATABASES  # noqa: E402
from agentd.store.db import DEFAULT_MAP_SIZE  # noqa: E402

#: issue 14's targets
TARGET_RATIO_VS_FLOOR = 4.0  # thread.create at 64 clients ÷ the floor
TARGET_DURABLE_VS_READ = 0.7  # thread.create ÷ daemon.status, 64 clients
TARGET_P50_MS = 0.45  # thread.create at 1 client
TARGET_P50_VS_ECHO_COMMIT = 2.0  # ... ÷ (echo round trip + one LMDB commit)
TARGET_P99_256_MS = 25.0  # thread.create at 256 clients, with throughput >= 64 clients'
TARGET_STREAM_RATIO = 1.3  # first delta -> completed, through agentd ÷ direct
TARGET_BYTES_PER_ANSWER_BYTE = 3.0

FLOOR_VALUE_BYTES = 300
REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"thread.create","params":{"title":"bench"}}\n'
READ_REQUEST = b'{"jsonrpc":"2.0","id":1,"method":"daemon.status"}\n'
STREAM_DELTAS = 10_000
STALL_TIMEOUT = 30.0  # seconds without any response: the daemon is stuck


class BenchError(RuntimeError):
    """The bench could not measure (an error response, a stuck daemon, ...)."""


# -- the floor: one fsync per put --------------------------------------------------


def measure_floor(path: Path, *, warmup: float, seconds: float) -> tuple[float, float]:
    """Synced LMDB puts per second, one write transaction per put, opened
    exactly as ``store.db.Store`` opens its environment; and the median
    commit (one such transaction) in ms."""
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

        times: list[float] = []

        def put_until(deadline: float) -> int:
            nonlocal key
            count = 0
            now = time.perf_counter()
            while now < deadline:
                key += 1
                with env.begin(write=True) as txn:
                    txn.put(key.to_bytes(8, "big"), value, db=db)
                count += 1
                then, now = now, time.perf_counter()
                times.append(now - then)
            return count

        put_until(time.perf_counter() + warmup)
        times.clear()
        start = time.perf_counter()
        count = put_until(start + seconds)
        rate = count / (time.perf_counter() - start)
        return rate, percentile(sorted(times), 0.5) * 1000

    finally:
        env.close()


# -- the load generator (runs in its own process) ----------------------------------------


@dataclass
class _Conn:
    sock: socket.socket
    buffer: bytearray = field(default_factory=bytearray)
    sent_at: float = 0.0


def load_worker(socket_path: str, connections: int, pipe: Any, request: bytes = REQUEST, echo: bool = False) -> None:
    """Entry point of one load-generator process; reports over ``pipe``."""
    try:
        result = _drive(socket_path, connections, pipe, request, echo)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails loudly
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))
    else:
        pipe.send(("done", result))
    finally:
        pipe.close()


def _drive(socket_path: str, connections: int, pipe: Any, request: bytes, echo: bool) -> dict[str, Any]:
    """Closed-loop clients: each connection keeps one ``request`` in flight
    (an echo server's answer is the request itself).

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
        conn.sock.sendall(request)
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
            if not echo and b'"result":' not in line:
                raise BenchError(f"request failed: {line[:500].decode(errors='replace')}")
            completed += 1
            now = time.monotonic()
            if window_start <= now < window_end:
                latencies.append(received_at - conn.sent_at)
            if now < window_end:
                conn.sent_at = time.perf_counter()
                conn.sock.sendall(request)
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
    for attempt in range(50):
        try:
            async with Client.connect(socket_path) as client:
                status = await client.call("daemon.status")
            return status["commits"]
        except (OSError, trio.BrokenResourceError):
            # Connecting while hundreds of clients connect: the listen queue
            # may be full, and a Unix socket then refuses rather than waits.
            await trio.sleep(0.1)
    raise BenchError("cannot reach the daemon for its commit counts")


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
    daemon: DaemonProcess | None, *, clients: int, workers: int, warmup: float, seconds: float,
    request: bytes = REQUEST, socket_path: Path | None = None, at_start: Any = None,
) -> dict[str, Any]:
    """Drive ``clients`` closed-loop connections from ``workers`` processes
    for ``warmup`` + ``seconds``; return throughput, latency and costs. With
    no daemon, an echo server at ``socket_path`` is driven."""
    echo = daemon is None
    socket_path = socket_path if echo else daemon.socket
    workers = max(1, min(workers, clients))
    shares = [clients // workers + (1 if i < clients % workers else 0) for i in range(workers)]
    context = multiprocessing.get_context("spawn")
    processes, pipes = [], []
    for share in shares:
        parent_end, child_end = context.Pipe()
        process = context.Process(target=load_worker, args=(str(socket_path), share, child_end, request, echo),
                                  daemon=True)
        process.start()
        child_end.close()
        processes.append(process)
        pipes.append(parent_end)
    try:
        for pipe in pipes:
            _expect(await trio.to_thread.run_sync(_receive, pipe), "ready")
        before = await commit_stats(daemon.socket) if not echo else None
        cpu_before = daemon_cpu_seconds(daemon.pid) if not echo else None
        window_start = time.monotonic() + warmup
        window_end = window_start + seconds
        if at_start is not None:
            at_start()
        for pipe in pipes:
            pipe.send(("go", window_start, window_end))
        results = [_expect(await trio.to_thread.run_sync(_receive, pipe), "done") for pipe in pipes]
        cpu_after = daemon_cpu_seconds(daemon.pid) if not echo else None
        after = await commit_stats(daemon.socket) if not echo else None
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join()
        for pipe in pipes:
            pipe.close()

    latencies = [x for r in results for x in r["latencies"]]
    if not latencies:
        raise BenchError(f"no request completed within the {seconds} s window at {clients} clients")
    completed = sum(r["completed"] for r in results)  # warm-up and drain included, like the CPU deltas
    if echo:
        return {"clients": clients, "throughput_per_s": round(len(latencies) / seconds, 1),
                "latency_ms": latency_summary_ms(latencies)}
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


# -- the echo round trip ---------------------------------------------------------------------


def echo_server(socket_path: str, pipe: Any) -> None:
    """A minimal trio server in its own process: every chunk read is written
    back (a closed-loop client's line). What a round trip costs with nothing
    of agentd in it."""

    async def serve() -> None:
        async def handle(stream: trio.SocketStream) -> None:
            try:
                while chunk := await stream.receive_some(65536):
                    await stream.send_all(chunk)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.bind(socket_path)
        sock.listen(512)
        pipe.send("ready")
        await trio.serve_listeners(handle, [trio.SocketListener(sock)])

    trio.run(serve)


async def measure_echo(socket_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    path = socket_dir / "echo.sock"
    context = multiprocessing.get_context("spawn")
    parent_end, child_end = context.Pipe()
    process = context.Process(target=echo_server, args=(str(path), child_end), daemon=True)
    process.start()
    try:
        if await trio.to_thread.run_sync(parent_end.recv) != "ready":
            raise BenchError("the echo server did not start")
        return await run_scenario(None, clients=1, workers=1, warmup=args.warmup, seconds=args.seconds,
                                  request=REQUEST, socket_path=path)
    finally:
        process.terminate()
        process.join()


# -- a streamed answer: through agentd and directly ------------------------------------------------


def stream_script(deltas: int) -> str:
    """A scripted-agent message answered in ``deltas`` deltas of 10 characters."""
    return "@script\n" + json.dumps([{"say": "0123456789" * deltas, "chunks": deltas}])


async def stream_through_agentd(socket_path: Path, deltas: int) -> dict[str, Any]:
    """First ``message.delta`` → ``run.completed`` as a subscriber sees them,
    and how many durable appends the answer became."""
    async with Client.connect(socket_path) as client:
        thread = (await client.call("thread.create", title="bench stream"))["threadId"]
        after = (await client.call("daemon.status"))["lastSeq"]
        first = done = None
        appended = 0
        async with client.subscribe(thread_id=thread, after_seq=after) as events:
            run = await client.call("thread.message.send", threadId=thread, text=stream_script(deltas))
            async for event in events:
                kind = event["type"]
                if kind == "message.delta" and first is None:
                    first = time.perf_counter()
                elif kind == "message.appended":
                    appended += 1
                elif kind.startswith("run.") and event["runId"] == run["runId"] and event["payload"]["run"]["status"] in (
                        "completed", "failed", "interrupted", "cancelled"):
                    done = time.perf_counter()
                    if event["payload"]["run"]["status"] != "completed":
                        raise BenchError(f"the streamed run ended {event['payload']['run']['status']}")
                    break
    return {"seconds": done - first, "durable_appends": appended}


async def stream_direct(home: Path, deltas: int) -> float:
    """First ``item/agentMessage/delta`` → ``turn/completed`` driving the
    scripted agent process over its stdio, parsing every line as agentd does."""
    home.mkdir(parents=True, exist_ok=True)
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "agentd.actors.providers.scripted_agent", "--home", str(home)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    decoder = msgspec.json.Decoder()
    buffer = bytearray()

    async def lines():
        while True:
            end = buffer.find(b"\n")
            while end < 0:
                chunk = await process.stdout.receive_some(65536)
                if not chunk:
                    raise BenchError("the scripted agent exited")
                buffer.extend(chunk)
                end = buffer.find(b"\n")
            line = bytes(buffer[:end])
            del buffer[:end + 1]
            yield decoder.decode(line)

    async def call(reader, request_id: int, method: str, params: dict) -> dict:
        await process.stdin.send_all(json.dumps({"id": request_id, "method": method, "params": params}).encode() + b"\n")
        async for message in reader:
            if message.get("id") == request_id:
                return message["result"]
        raise BenchError("no answer")

    try:
        reader = lines()
        await call(reader, 1, "initialize", {})
        native = (await call(reader, 2, "thread/start", {"cwd": str(home)}))["threadId"]
        await process.stdin.send_all(json.dumps({"id": 3, "method": "turn/start", "params": {
            "threadId": native, "input": stream_script(deltas)}}).encode() + b"\n")
        first = None
        async for message in reader:
            method = message.get("method")
            if method == "item/agentMessage/delta" and first is None:
                first = time.perf_counter()
            elif method == "turn/completed":
                return time.perf_counter() - first
        raise BenchError("the turn did not complete")
    finally:
        process.kill()
        await process.wait()


# -- a long answer: bytes written ------------------------------------------------------------------------


def lmdb_pages(store_dir: Path) -> dict[str, int]:
    """LMDB's own view of the store: its high-water page (``env.info()``)
    and the pages every database holds (``stat()``), read by a second reader."""
    env = lmdb.open(str(store_dir), max_dbs=len(DATABASES) + 8, readonly=True, map_size=DEFAULT_MAP_SIZE)
    try:
        info = env.info()
        used = 0
        with env.begin() as txn:
            psize = env.stat()["psize"]
            for name in DATABASES:
                try:
                    stat = txn.stat(env.open_db(name.encode(), txn=txn, create=False))
                except lmdb.NotFoundError:
                    continue
                used += stat["branch_pages"] + stat["leaf_pages"] + stat["overflow_pages"]
        return {"psize": psize, "last_pgno": info["last_pgno"], "pages_used": used}
    finally:
        env.close()


def process_io(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


async def long_answer(daemon: DaemonProcess, store_dir: Path, megabytes: float) -> dict[str, Any]:
    """Stream a ``megabytes`` MB answer (64 KiB deltas, no subscriber) and
    count the bytes written for it."""
    repeat = min(1024, max(1, round(megabytes * 1e6 / 65_536)))  # the agent repeats its text at most 1024 times
    text = ("long answer " * 6000)[:65_536]
    script = "@script\n" + json.dumps([{"say": text, "repeat": repeat, "chunks": repeat}])
    answer_bytes = len(text) * repeat
    async with Client.connect(daemon.socket) as client:
        thread = (await client.call("thread.create", title="bench long answer"))["threadId"]
        pages_before, io_before = lmdb_pages(store_dir), process_io(daemon.pid)
        started = time.perf_counter()
        run = await client.call("thread.message.send", threadId=thread, text=script)
        while (await client.call("run.get", runId=run["runId"]))["run"]["status"] not in (
                "completed", "failed", "interrupted", "cancelled"):
            await trio.sleep(0.05)
        seconds = time.perf_counter() - started
        pages_after, io_after = lmdb_pages(store_dir), process_io(daemon.pid)
        messages = (await client.call("thread.get", threadId=thread))["messages"]
    stored = [m for m in messages if m["role"] == "assistant"]
    if not stored or len(stored[-1]["text"]) != answer_bytes:
        raise BenchError("the long answer was not stored whole")
    psize = pages_after["psize"]

    def per_byte(value: int) -> float:
        return round(value / answer_bytes, 2)

    return {
        "answer_bytes": answer_bytes,
        "seconds": round(seconds, 2),
        "lmdb_pages_used_growth_per_answer_byte": per_byte((pages_after["pages_used"] - pages_before["pages_used"]) * psize),
        "lmdb_last_pgno_growth_per_answer_byte": per_byte((pages_after["last_pgno"] - pages_before["last_pgno"]) * psize),
        "daemon_wchar_per_answer_byte": per_byte(io_after["wchar"] - io_before["wchar"]),
        "daemon_write_bytes_per_answer_byte": per_byte(io_after["write_bytes"] - io_before["write_bytes"]),
    }


# -- the profile: py-spy on the daemon during the 64-client thread.create ------------------------------


def start_profile(pid: int, path: Path, seconds: float) -> subprocess.Popen:
    """``py-spy record`` of the daemon (every thread, on-CPU samples only, as
    folded stacks) for ``seconds``."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return subprocess.Popen(
        [py_spy, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))), "--rate", "250",
         "--threads", "--nonblocking", "--format", "raw", "--output", str(path)],
        stdout=subprocess.DEVNULL, stderr=open(f"{path}.log", "w"),
    )


#: where a sampled function belongs, by its frame (first match wins)
PROFILE_AREAS = (
    ("trio scheduling and I/O", ("trio/", "outcome/")),
    ("socket read/write syscalls", ("try_write", "<locals>.receive (")),
    ("request parse and answer (server, framing)", ("protocol/",)),
    ("store (batch, encode, writer hand-off, ids)", ("store/",)),
    ("handlers (registry, actors, supervisor)", ("actors/", "supervisor/")),
)


def _area(frame: str) -> str:
    for area, marks in PROFILE_AREAS:
        if any(mark in frame for mark in marks):
            return area
    return "other"


def top_functions(path: Path, seconds: float, count: int = 15) -> dict[str, Any]:
    """The event-loop thread's busy share, where its samples fall (by area)
    and its top functions by own samples and by samples anywhere below them,
    from folded stacks."""
    own: dict[str, int] = {}
    total: dict[str, int] = {}
    areas: dict[str, int] = {}
    threads: dict[str, int] = {}
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {"error": "py-spy wrote no profile (is it installed, may it trace this process?)"}
    for line in lines:
        stack, _, samples = line.rpartition(" ")
        thread, *frames = stack.split(";")
        n = int(samples)
        threads[thread] = threads.get(thread, 0) + n
        if "MainThread" not in thread or not frames:
            continue
        own[frames[-1]] = own.get(frames[-1], 0) + n
        area = _area(frames[-1])
        areas[area] = areas.get(area, 0) + n
        for frame in set(frames):
            total[frame] = total.get(frame, 0) + n
    loop = sum(n for t, n in threads.items() if "MainThread" in t)

    def top(table: dict[str, int], limit: int) -> list[str]:
        ranked = sorted(table.items(), key=lambda item: -item[1])[:limit]
        return [f"{round(100 * n / max(1, loop), 1)}% {name}" for name, n in ranked]

    return {
        "samples_per_thread": threads,
        "event_loop_busy_share": round(loop / (250 * seconds), 2),
        "event_loop_by_area": top(areas, len(areas)),
        "top_self": top(own, count),
        # the frames every sample shares (runpy, main, trio.run) say nothing
        "top_inclusive": top({k: v for k, v in total.items() if v < 0.9 * loop}, count),
        "file": str(path),
    }


# -- one run ------------------------------------------------------------------------------------


async def bench_daemon(data_dir: Path, socket_path: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Start a daemon, run every scenario, stop it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}  # no stray config
    daemon = await start_daemon(data_dir, socket_path, env=env)
    out: dict[str, Any] = {}
    try:
        if not args.only_long_answer:
            scenario = {"warmup": args.warmup, "seconds": args.seconds}
            out["create_1"] = await run_scenario(daemon, clients=1, workers=1, **scenario)
            profilers = []

            def profile() -> None:
                profilers.append(start_profile(daemon.pid, args.profile, args.warmup + args.seconds))

            out["create_64"] = await run_scenario(daemon, clients=64, workers=args.workers,
                                                  at_start=profile if args.profile else None, **scenario)
            for profiler in profilers:
                await trio.to_thread.run_sync(profiler.wait)
            if profilers:
                out["profile"] = top_functions(args.profile, args.warmup + args.seconds)
            out["read_64"] = await run_scenario(daemon, clients=64, workers=args.workers, request=READ_REQUEST, **scenario)
            out["create_256"] = await run_scenario(daemon, clients=256, workers=args.workers, **scenario)
            streams = []
            for i in range(args.stream_rounds):
                stream_profile = Path(f"{args.profile}.stream") if args.profile and i == 0 else None
                profiler = start_profile(daemon.pid, stream_profile, 4.0) if stream_profile else None
                through = await stream_through_agentd(daemon.socket, STREAM_DELTAS)
                if profiler is not None:
                    await trio.to_thread.run_sync(profiler.wait)
                    out["profile_stream"] = top_functions(stream_profile, 4.0)
                direct = await stream_direct(data_dir.parent / f"direct-{i}", STREAM_DELTAS)
                streams.append({**through, "direct_seconds": direct})
            out["stream"] = streams
        out["long_answer"] = await long_answer(daemon, data_dir / "store", args.long_answer)
        out["totals"] = await commit_stats(daemon.socket)
    finally:
        code = await daemon.terminate()
    if code != 0:
        raise BenchError(f"the daemon exited with {code} on SIGTERM:\n{daemon.log_text()[-4000:]}")
    return out


# -- the report ---------------------------------------------------------------------------------


def row(figure: float | None, target: str, met: bool | None, **detail: Any) -> dict[str, Any]:
    return {"figure": figure, "target": target, "met": met, **detail}


def report(floor: tuple[float, float], echo: dict[str, Any] | None, runs: dict[str, Any], args: argparse.Namespace,
           base: Path) -> dict[str, Any]:
    floor_rate, commit_ms = floor
    out: dict[str, Any] = {
        "load_average": open("/proc/loadavg").read().split()[:3],
        "cpu_count": os.cpu_count(),
        "floor": {"synced_tx_per_s": round(floor_rate, 1), "commit_p50_ms": round(commit_ms, 3)},
    }
    rows: dict[str, Any] = {}
    if "create_64" in runs:
        c1, c64, r64, c256 = runs["create_1"], runs["create_64"], runs["read_64"], runs["create_256"]
        echo_ms = echo["latency_ms"]["p50"]
        out["floor"]["echo_round_trip_p50_ms"] = echo_ms
        ratio = round(c64["throughput_per_s"] / floor_rate, 2)
        rows["create_64_clients"] = row(c64["throughput_per_s"], f">= {TARGET_RATIO_VS_FLOOR}x the floor",
                                        ratio >= TARGET_RATIO_VS_FLOOR, ratio_vs_floor=ratio)
        durable = round(c64["throughput_per_s"] / r64["throughput_per_s"], 2)
        rows["durable_vs_read_64_clients"] = row(durable, f">= {TARGET_DURABLE_VS_READ}", durable >= TARGET_DURABLE_VS_READ,
                                                 read_per_s=r64["throughput_per_s"])
        p50 = c1["latency_ms"]["p50"]
        bound = round(TARGET_P50_VS_ECHO_COMMIT * (echo_ms + commit_ms), 3)
        rows["create_p50_1_client_ms"] = row(
            p50, f"<= {TARGET_P50_MS} ms and <= {TARGET_P50_VS_ECHO_COMMIT}x (echo + commit) = {bound} ms",
            p50 <= TARGET_P50_MS and p50 <= bound, ratio_vs_echo_plus_commit=round(p50 / (echo_ms + commit_ms), 2))
        rows["create_256_clients"] = row(
            c256["throughput_per_s"], f">= the 64-client figure, p99 <= {TARGET_P99_256_MS} ms",
            c256["throughput_per_s"] >= c64["throughput_per_s"] and c256["latency_ms"]["p99"] <= TARGET_P99_256_MS,
            p99_ms=c256["latency_ms"]["p99"], vs_64_clients=round(c256["throughput_per_s"] / c64["throughput_per_s"], 2))
        streams = runs["stream"]
        ratios = sorted(s["seconds"] / s["direct_seconds"] for s in streams)
        median = round(ratios[len(ratios) // 2], 2)
        rows["stream_10000_deltas"] = row(
            median, f"<= {TARGET_STREAM_RATIO}x driving the agent directly (median of {len(ratios)})",
            median <= TARGET_STREAM_RATIO,
            durable_appends=[s["durable_appends"] for s in streams],
            through_agentd_ms=[round(s["seconds"] * 1000, 1) for s in streams],
            direct_ms=[round(s["direct_seconds"] * 1000, 1) for s in streams])
        out["scenarios"] = {k: runs[k] for k in ("create_1", "create_64", "read_64", "create_256")}
    long = runs["long_answer"]
    figure = long["daemon_wchar_per_answer_byte"]
    rows["bytes_written_per_answer_byte"] = row(
        figure, f"<= {TARGET_BYTES_PER_ANSWER_BYTE} (daemon wchar; LMDB's growth beside it)",
        figure <= TARGET_BYTES_PER_ANSWER_BYTE and long["lmdb_pages_used_growth_per_answer_byte"] <= TARGET_BYTES_PER_ANSWER_BYTE,
        **long)
    out["rows"] = rows
    for name in ("profile", "profile_stream"):
        if name in runs:
            out[name] = runs[name]
    out["commits"] = {
        "batches": runs["totals"]["batches"], "transactions": runs["totals"]["transactions"],
        "batches_per_transaction": batches_per_transaction(runs["totals"]["batches"], runs["totals"]["transactions"]),
    }
    out["settings"] = {"seconds": args.seconds, "warmup_seconds": args.warmup, "load_processes": args.workers,
                       "long_answer_mb": args.long_answer, "dir": str(base)}
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=None, help="measured seconds per scenario (default 3)")
    parser.add_argument("--warmup", type=float, default=None, help="warm-up seconds per scenario (default 0.5)")
    parser.add_argument("--quick", action="store_true", help="a ~1 s-per-scenario smoke run")
    parser.add_argument("--dir", type=Path, default=None, help="make the temp data dir here (default: under /tmp)")
    parser.add_argument("--workers", type=int, default=2, help="load-generator processes (default 2)")
    parser.add_argument("--stream-rounds", type=int, default=3, help="10,000-delta answers each way (default 3)")
    parser.add_argument("--profile", type=Path, default=None, metavar="PATH",
                        help="py-spy the daemon during the 64-client thread.create into PATH (folded stacks), "
                             "and during the first streamed answer into PATH.stream (4 s)")
    parser.add_argument("--long-answer", type=float, default=None, metavar="MB",
                        help="only the long-answer row, with an answer of MB megabytes (in a full run: 8)")
    args = parser.parse_args(argv)
    args.only_long_answer = args.long_answer is not None
    if args.long_answer is None:
        args.long_answer = 8.0
    if args.seconds is None:
        args.seconds = 1.0 if args.quick else 3.0
    if args.warmup is None:
        args.warmup = 0.25 if args.quick else 0.5
    if args.seconds <= 0 or args.warmup < 0 or args.workers < 1 or args.stream_rounds < 1 or args.long_answer <= 0:
        parser.error("--seconds and --long-answer must be > 0, --warmup >= 0, --workers and --stream-rounds >= 1")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="agentd-bench-", dir=args.dir))
    socket_dir = Path(tempfile.mkdtemp(prefix="ab-"))  # short: sun_path holds 107 bytes
    try:
        floor = measure_floor(base / "floor", warmup=args.warmup, seconds=args.seconds)
        echo = None if args.only_long_answer else trio.run(measure_echo, socket_dir, args)
        runs = trio.run(bench_daemon, base / "daemon", socket_dir / "agentd.sock", args)
        print(json.dumps(report(floor, echo, runs, args, base), indent=2))
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(socket_dir, ignore_errors=True)


if __name__ == "__main__":
    main()

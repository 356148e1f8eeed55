"""Benchmark a streamed answer the way a model streams it (issue 24, part 3).

A real model streams small deltas (4–20 bytes) at 50–200 a second; the
project's ``bench.py`` streams large deltas in a burst, the one shape that
hides the per-delta and per-second costs. This script streams, through a real
daemon child and its scripted agent (``say`` with ``perSecond``):

* ``paced``: an answer in 20-byte deltas at 200 deltas/s (``--rate``);
* ``burst``: the same answer with no pacing at all;

for each answer size (``--sizes``, KiB: 100 and 1024 by default; a paced
1 MiB answer takes ~4.5 minutes a run, so ``--paced-sizes`` picks which
sizes are also paced, 100 by default), and prints for each shape, beside the
floor measured in the same run (the scripted agent driven directly over a
pipe, no agentd, parsing every line as agentd does):

* ``write_bytes_per_byte`` / ``wchar_per_byte``: what the daemon wrote per
  answer byte, from its ``/proc/PID/io`` — ``write_bytes`` (the page-cache
  pages it dirtied: what goes to disk) and ``wchar`` (the bytes it handed to
  write(2)/pwrite(2): LMDB's page writes and the log; trio sends on sockets
  with send(2), which ``wchar`` does not count). Both count a child's
  writes once it is reaped (git; an agent whose session stopped — the
  scripted agent saves its thread, its answer included), and on Linux 6.x
  ``write_bytes`` counts a whole large folio of the page cache for each
  page dirtied in it, which the disk does not see;
* ``device_write_bytes_per_byte`` (``--device-bytes``): what reached the
  block device holding ``--dir`` (its sectors written, after a ``syncfs``
  at each end of the run), the file system's journal and metadata included
  — every writer of that device, so put ``--dir`` on a file system of its
  own; beside it, the direct run's (the agent's own writes);
* ``synced_commits``: the daemon's write transactions (each one synced)
  from the send until ``run.<status>`` is seen;
* ``stored_per_byte``: LMDB's growth per answer byte (pages in use, and the
  high-water page), read by a second reader;
* ``cpu_us_per_delta``: the daemon's CPU (every thread, ``/proc/PID/task/*/stat``)
  per delta, beside the direct reader's own CPU per delta;
* ``delta_p99_ms``: how late a subscriber's ``message.delta`` is against
  the agent's schedule (delta i is due i/rate after the first; the lateness
  of the most punctual delta is taken as zero, the same way for both);
* ``completion_ms``: the last delta → ``run.completed`` as the subscriber
  sees it, beside the last delta → ``turn/completed`` directly: the
  difference (``completion_added_ms``) is what agentd adds to the end of a
  turn; ``completion_close_ms`` / ``completion_end_ms`` split it at the
  message's ``message.completed`` (its last text durable) and the run's end
  (the run's checkpoint capture and the barrier's commit), and the run's end
  again where its capture ends (``completion_turn_to_capture_ms``: the
  turn's end taken → the capture's outbox commit and git done;
  ``completion_capture_to_seen_ms``: → the barrier's commit published and
  seen; from the events' own stamps, wall clocks of one host); one synced LMDB
  commit on the same disk (``floor_synced_commit_p50_ms``, as ``bench.py``
  measures it) is printed as the floor of any durable step.

Each run's window ends with a ``thread.search`` of the thread, which waits
for the search index to take the run in (the index may otherwise write it
a moment later, in another run's window).

Runs are interleaved (agentd, [the baseline daemon,] direct, … for each shape,
``--runs`` times, 3 by default) and each figure is printed as min / median /
max; ``load_average`` is printed with them. It exits 0 whatever the figures:
a target not met is a finding.

    python scripts/bench_stream.py                    # ~3 minutes
    python scripts/bench_stream.py --quick            # 10 KiB answers, 1 run (a smoke run)
    python scripts/bench_stream.py --paced-sizes 100,1024   # and the paced 1 MiB answer
    python scripts/bench_stream.py --baseline-python /path/to/main/venv/bin/python  # before/after, interleaved
    python scripts/bench_stream.py --device-bytes --dir /mnt/own-fs   # and what reached that device
    python scripts/bench_stream.py --steady           # a live session's next message, not a new thread's first
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
import trio  # noqa: E402

from agentd.launch import DaemonProcess, start_daemon  # noqa: E402
from agentd.actors.checkpoints import quiet  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import BenchError, daemon_cpu_seconds, lmdb_pages, measure_floor, process_io  # noqa: E402

DELTA_BYTES = 20
OVERHEAD = "run_overhead_one_delta"
TERMINAL = ("completed", "failed", "interrupted", "cancelled")
_decoder = msgspec.json.Decoder()


def script(size: int, rate: float | None) -> tuple[str, int]:
    """The ``@script`` of an answer of ``size`` bytes in DELTA_BYTES deltas
    (``rate`` a second, or a burst), and its delta count."""
    unit = "abcdefghijklmnopqrs "  # 20 bytes: text a model could have written
    wanted = max(1, size // DELTA_BYTES)
    # The agent repeats a short text (as many times as it may), so that the
    # user's message — the script — is small and stores next to nothing.
    repeat = min(1024, wanted)
    deltas = -(-wanted // repeat) * repeat
    step: dict[str, Any] = {"say": unit * (deltas // repeat), "repeat": repeat, "chunks": deltas}
    if rate is not None:
        step["perSecond"] = rate
    return "@script\n" + json.dumps([step]), deltas


def lateness_p99_ms(arrivals: list[float], rate: float | None) -> float | None:
    """p99 of how late each delta arrived against a schedule of ``rate`` a
    second (the most punctual delta counts as on time); None for a burst."""
    if rate is None or len(arrivals) < 2:
        return None
    late = [t - i / rate for i, t in enumerate(arrivals)]
    base = min(late)
    ordered = sorted(x - base for x in late)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 2)


class Lines:
    """JSON lines from a trio stream."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self._stream = stream
        self._buffer = bytearray()

    async def next(self) -> Any:
        while (end := self._buffer.find(b"\n")) < 0:
            chunk = await self._stream.receive_some(1 << 16)
            if not chunk:
                raise BenchError("the stream ended")
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[:end + 1]
        return _decoder.decode(line)


async def _rpc(stream: trio.SocketStream, lines: Lines, request_id: int, method: str, **params: Any) -> Any:
    await stream.send_all(json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
                          + b"\n")
    while True:
        message = await lines.next()
        if message.get("id") == request_id:
            if "error" in message:
                raise BenchError(f"{method}: {message['error']}")
            return message["result"]


def device_written(path: Path) -> int | None:
    """Bytes written so far to the block device holding ``path``, after its
    file system's dirty pages were written out (``syncfs``): what reached the
    device, the file system's metadata and journal included — from every
    writer of that device, so meaningful only on one of the bench's own
    (``--dir`` on a dedicated file system, e.g. a loop device). None when the
    device's counters cannot be read."""
    import ctypes

    fd = os.open(path, os.O_RDONLY)
    try:
        ctypes.CDLL(None, use_errno=True).syncfs(fd)
        dev = os.fstat(fd).st_dev
    finally:
        os.close(fd)
    try:
        fields = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/stat").read_text().split()
    except OSError:
        return None
    return int(fields[6]) * 512  # sectors written, of 512 bytes whatever the device's own


async def through_agentd(daemon: DaemonProcess, store_dir: Path, size: int, rate: float | None,
                         device: bool = False, thread: str | None = None) -> dict[str, Any]:
    """One answer through the daemon, seen by a subscriber on a raw socket:
    in a new thread, or as the next message of ``thread``."""
    text, deltas = script(size, rate)
    stream = await trio.open_unix_socket(str(daemon.socket))
    lines = Lines(stream)
    try:
        if thread is None:
            thread = (await _rpc(stream, lines, 1, "thread.create", title="bench stream"))["threadId"]
        await _rpc(stream, lines, 2, "events.subscribe", threadId=thread)
        commits0 = (await _rpc(stream, lines, 9, "daemon.status"))["commits"]["transactions"]
        device0 = device_written(store_dir) if device else None
        pages0, io0, cpu0 = lmdb_pages(store_dir), process_io(daemon.pid), daemon_cpu_seconds(daemon.pid)
        run_id = (await _rpc(stream, lines, 3, "thread.message.send", threadId=thread, text=text))["runId"]
        arrivals: list[float] = []
        captured_at: float | None = None
        while True:
            message = await lines.next()
            params = message.get("params") or {}
            kind = params.get("type")
            if kind == "message.delta":
                arrivals.append(time.perf_counter())
            elif kind == "message.completed":
                closed = time.perf_counter()
            elif kind == "checkpoint.captured" and params.get("runId") == run_id:
                captured_at = params["payload"]["checkpoint"]["createdAt"]  # the daemon's clock, after git
            elif kind and kind.startswith("run.") and params.get("runId") == run_id and \
                    params["payload"]["run"]["status"] in TERMINAL:
                done, done_wall = time.perf_counter(), time.time()
                # the end batch's stamp: when the actor took the provider's turn/completed
                turn_at = params["at"]
                if params["payload"]["run"]["status"] != "completed":
                    raise BenchError(f"the streamed run ended {params['payload']['run']['status']}")
                break
        # What the run wrote includes the search index taking it in (a search
        # waits for that; the index may otherwise write it a moment later).
        await _rpc(stream, lines, 4, "thread.search", query="abcdefghijklmnopqrs", threadId=thread)
        pages1, io1, cpu1 = lmdb_pages(store_dir), process_io(daemon.pid), daemon_cpu_seconds(daemon.pid)
        device1 = device_written(store_dir) if device else None
        commits1 = (await _rpc(stream, lines, 10, "daemon.status"))["commits"]["transactions"]
    finally:
        await stream.aclose()
    if len(arrivals) != deltas:
        raise BenchError(f"the subscriber saw {len(arrivals)} of {deltas} deltas")
    answer = deltas * DELTA_BYTES
    psize = pages1["psize"]
    cpu = sum(cpu1.values()) - sum(cpu0.values())
    loop = cpu1["event_loop_thread"] - cpu0["event_loop_thread"]
    return {
        "answer_bytes": answer,
        "write_bytes_kb": round((io1["write_bytes"] - io0["write_bytes"]) / 1000, 1),
        "write_bytes_per_byte": round((io1["write_bytes"] - io0["write_bytes"]) / answer, 2),
        "wchar_per_byte": round((io1["wchar"] - io0["wchar"]) / answer, 2),
        "device_write_bytes_kb": None if device0 is None or device1 is None else round((device1 - device0) / 1000, 1),
        "device_write_bytes_per_byte": None if device0 is None or device1 is None
        else round((device1 - device0) / answer, 2),
        # the daemon's write transactions (each one synced) from the send to run.<status> seen
        "synced_commits": commits1 - commits0,
        "stored_per_byte": round((pages1["pages_used"] - pages0["pages_used"]) * psize / answer, 2),
        "stored_high_water_per_byte": round((pages1["last_pgno"] - pages0["last_pgno"]) * psize / answer, 2),
        "cpu_us_per_delta": round(cpu / deltas * 1e6, 1),
        "cpu_us_per_delta_event_loop": round(loop / deltas * 1e6, 1),
        "delta_p99_ms": lateness_p99_ms(arrivals, rate),
        "completion_ms": round((done - arrivals[-1]) * 1000, 2),
        # of which: the message's close (its last text durable), then the
        # run's end (the checkpoint's capture and the barrier's commit)
        "completion_close_ms": round((closed - arrivals[-1]) * 1000, 2),
        "completion_end_ms": round((done - closed) * 1000, 2),
        # of the run's end: the turn's end taken → the capture done (the
        # capture's outbox commit and git), then → run.completed seen (the
        # barrier's commit and its publishing); same host, wall clocks
        "completion_turn_to_capture_ms": round((captured_at - turn_at) * 1000, 2) if captured_at else None,
        "completion_capture_to_seen_ms": round((done_wall - captured_at) * 1000, 2) if captured_at else None,
        "stream_ms": round((arrivals[-1] - arrivals[0]) * 1000, 1),
        "thread_id": thread,
    }


class DirectAgent:
    """The scripted agent over its stdio, no agentd: one process and one
    native thread, for one answer or (``--steady``) for every run."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.process: trio.Process | None = None
        self.lines: Lines | None = None
        self.native = ""
        self.next_id = 0

    async def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        self.process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "agentd.actors.providers.scripted_agent", "--home", str(self.home)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        self.lines = Lines(self.process.stdout)
        await self.call("initialize", {})
        self.native = (await self.call("thread/start", {"cwd": str(self.home)}))["threadId"]

    async def send(self, method: str, params: dict[str, Any]) -> int:
        assert self.process is not None and self.process.stdin is not None
        self.next_id += 1
        await self.process.stdin.send_all(
            json.dumps({"id": self.next_id, "method": method, "params": params}).encode() + b"\n")
        return self.next_id

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        request_id = await self.send(method, params)
        assert self.lines is not None
        while (message := await self.lines.next()).get("id") != request_id:
            pass
        return message["result"]

    async def answer(self, size: int, rate: float | None, device: bool = False) -> dict[str, Any]:
        """One answer: the floor's figures."""
        assert self.lines is not None
        text, deltas = script(size, rate)
        device0 = device_written(self.home) if device else None
        cpu0 = time.process_time()
        await self.send("turn/start", {"threadId": self.native, "input": text})
        arrivals: list[float] = []
        while True:
            method = (await self.lines.next()).get("method")
            if method == "item/agentMessage/delta":
                arrivals.append(time.perf_counter())
            elif method == "turn/completed":
                done = time.perf_counter()
                break
        cpu = time.process_time() - cpu0
        device1 = device_written(self.home) if device else None
        return {
            # the agent's own writes (it saves its thread): the floor of what a run writes
            "device_write_bytes_kb": None if device0 is None or device1 is None else round((device1 - device0) / 1000, 1),
            "cpu_us_per_delta": round(cpu / deltas * 1e6, 1),
            "delta_p99_ms": lateness_p99_ms(arrivals, rate),
            "completion_ms": round((done - arrivals[-1]) * 1000, 2),
            "stream_ms": round((arrivals[-1] - arrivals[0]) * 1000, 1),
        }

    async def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            await self.process.wait()


async def direct(home: Path, size: int, rate: float | None, device: bool = False,
                 agent: DirectAgent | None = None) -> dict[str, Any]:
    """The same answer from the scripted agent over its stdio, no agentd: a
    new process and thread, or the next turn of ``agent``'s."""
    if agent is not None:
        return await agent.answer(size, rate, device)
    fresh = DirectAgent(home)
    try:
        await fresh.start()
        return await fresh.answer(size, rate, device)
    finally:
        await fresh.close()


def shapes(args: argparse.Namespace) -> list[tuple[str, int, float | None]]:
    # A one-delta answer: what a run costs whatever its answer (its records,
    # its ~13 synced commits), so each shape's streaming cost can be told apart.
    out: list[tuple[str, int, float | None]] = [(OVERHEAD, DELTA_BYTES, None)]
    for kib in args.sizes:
        if kib in args.paced_sizes:
            out.append((f"{kib}KiB_paced_{args.rate:g}_per_s", kib * 1024, args.rate))
        out.append((f"{kib}KiB_burst", kib * 1024, None))
    return out


async def _start(base: Path, name: str, python: str, steady: bool = False) -> tuple[DaemonProcess, Path, str | None]:
    """A daemon child run by ``python`` (another checkout's venv, for the
    baseline), with its own data dir and socket; with ``steady``, the thread
    every run's message goes to, in a workspace of its own older than the
    capture's trust margin (``checkpoints.quiet.MARGIN``), as a person's
    project is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}  # no stray config
    socket_dir = Path(tempfile.mkdtemp(prefix="abs-"))  # short: sun_path holds 107 bytes
    own, sys.executable = sys.executable, python  # start_daemon runs sys.executable
    try:
        daemon = await start_daemon(base / name, socket_dir / "agentd.sock", env=env)
    finally:
        sys.executable = own
    # The first answer makes the store's pages and the agent's imports warm.
    await through_agentd(daemon, base / name / "store", 10 * 1024, None)
    if not steady:
        return daemon, socket_dir, None
    workspace = base / f"{name}-workspace"
    (workspace / "src").mkdir(parents=True)
    for i in range(20):
        (workspace / "src" / f"m{i}.py").write_text(f"module {i}\n")
    stream = await trio.open_unix_socket(str(daemon.socket))
    try:
        thread = (await _rpc(stream, Lines(stream), 1, "thread.create", title="bench steady",
                             workspace=str(workspace)))["threadId"]
    finally:
        await stream.aclose()
    await trio.sleep(quiet.MARGIN)  # the setting, not a wait for state: a real project is older than this
    for _ in range(2):  # the session's start, then a live session's turn
        await through_agentd(daemon, base / name / "store", 10 * 1024, None, thread=thread)
    return daemon, socket_dir, thread


async def bench(base: Path, args: argparse.Namespace) -> dict[str, Any]:
    pythons = {"agentd": sys.executable}
    if args.baseline_python:
        pythons["baseline"] = args.baseline_python
    daemons = {name: await _start(base, name, python, args.steady) for name, python in pythons.items()}
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    steady: DirectAgent | None = None
    if args.steady:  # the floor's thread has the same history as the daemons' (two warm answers)
        steady = DirectAgent(base / "direct-steady")
        await steady.start()
        for _ in range(2):
            await steady.answer(10 * 1024, None)
    try:
        for run in range(args.runs):
            for name, size, rate in shapes(args):
                shape = results.setdefault(name, {"direct": [], **{who: [] for who in daemons}})
                for who, (daemon, _socket_dir, thread) in daemons.items():
                    shape[who].append(await through_agentd(daemon, base / who / "store", size, rate,
                                                           args.device_bytes, thread))
                shape["direct"].append(await direct(base / f"direct-{run}-{name}", size, rate, args.device_bytes,
                                                    steady))
    finally:
        if steady is not None:
            await steady.close()
        codes = {who: await daemon.terminate() for who, (daemon, _socket_dir, _thread) in daemons.items()}
        for _daemon, socket_dir, _thread in daemons.values():
            shutil.rmtree(socket_dir, ignore_errors=True)
    for who, code in codes.items():
        if code != 0:
            raise BenchError(f"the {who} daemon exited with {code} on SIGTERM:\n{daemons[who][0].log_text()[-4000:]}")
    return results


def spread(values: list[Any]) -> str | None:
    """``min / median / max`` of the figures that exist."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return f"{min(present):g} / {round(statistics.median(present), 2):g} / {max(present):g}"


def report(results: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, runs in results.items():
        floor = runs["direct"]
        row: dict[str, Any] = {}
        for key in runs["agentd"][0]:
            if key in ("answer_bytes", "thread_id"):
                continue
            for who in runs:
                if who != "direct":
                    row[key if who == "agentd" else f"{key}_{who}"] = spread([r[key] for r in runs[who]])
            if key in floor[0]:
                row[f"{key}_direct"] = spread([r[key] for r in floor])
        for who in runs:
            if who != "direct":
                suffix = "" if who == "agentd" else f"_{who}"
                row[f"completion_added_ms{suffix}"] = spread(
                    [round(a["completion_ms"] - d["completion_ms"], 2) for a, d in zip(runs[who], floor)])
        if name != OVERHEAD:
            for who in runs:
                if who != "direct":
                    fixed = statistics.median(r["write_bytes_kb"] for r in results[OVERHEAD][who])
                    row["write_bytes_per_byte_beyond_run_overhead" + ("" if who == "agentd" else f"_{who}")] = spread(
                        [round((r["write_bytes_kb"] - fixed) * 1000 / r["answer_bytes"], 2) for r in runs[who]])
                    if all(r["device_write_bytes_kb"] is not None for r in results[OVERHEAD][who] + runs[who]):
                        fixed = statistics.median(r["device_write_bytes_kb"] for r in results[OVERHEAD][who])
                        row["device_write_bytes_per_byte_beyond_run_overhead"
                            + ("" if who == "agentd" else f"_{who}")] = spread(
                            [round((r["device_write_bytes_kb"] - fixed) * 1000 / r["answer_bytes"], 2)
                             for r in runs[who]])
        out[name] = row
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100,1024", help="answer sizes in KiB (default 100,1024)")
    parser.add_argument("--paced-sizes", default="100", help="which of them are also paced (default 100)")
    parser.add_argument("--rate", type=float, default=200.0, help="paced deltas a second (default 200)")
    parser.add_argument("--runs", type=int, default=3, help="interleaved runs of each shape (default 3)")
    parser.add_argument("--quick", action="store_true", help="10 KiB answers, 1 run")
    parser.add_argument("--dir", default=None, help="where the data dirs go (default: the temp dir)")
    parser.add_argument("--baseline-python", default=None,
                        help="also run a daemon with this interpreter (another checkout's venv), interleaved")
    parser.add_argument("--device-bytes", action="store_true",
                        help="also count what reached the block device holding --dir (syncfs, then its sectors "
                             "written): put --dir on a file system of its own, e.g. a loop device")
    parser.add_argument("--steady", action="store_true",
                        help="every run is the next message of one thread per daemon (a live session, in an old "
                             "workspace of 20 files), not the first message of a new thread")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.paced_sizes, args.runs = "10", "10", 1
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.paced_sizes = [int(s) for s in args.paced_sizes.split(",") if s]
    if args.runs < 1 or args.rate <= 0 or not args.sizes:
        parser.error("--runs must be >= 1, --rate > 0, --sizes not empty")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="agentd-bench-stream-", dir=args.dir))
    try:
        _rate, commit_ms = measure_floor(base / "floor", warmup=0.5, seconds=2.0)
        results = trio.run(bench, base, args)
        print(json.dumps({"load_average": Path("/proc/loadavg").read_text().split()[:3], "delta_bytes": DELTA_BYTES,
                          "floor_synced_commit_p50_ms": round(commit_ms, 2), "shapes": report(results)}, indent=2))
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()

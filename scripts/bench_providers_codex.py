#!/usr/bin/env python3
"""What agentd adds to a Codex turn's latency, measured offline.

Both paths drive the real pinned ``codex app-server`` against the fake model
(``scripts/offline/fake_openai.py``) in the same private world as the
integration tests (``scripts/offline/codex.py``: private
CODEX_HOME/HOME, a loopback-only network namespace where ``unshare -rn``
works), one thread, ``turns`` plain turns after a warm-up:

* **direct** — a minimal JSON-lines client of our own (not the adapter) on
  the runtime's stdio: ``turn/start`` → first ``item/agentMessage/delta``,
  and → ``turn/completed``;
* **agentd** — a real daemon child (``agentd.launch.start_daemon``) and a
  socket client: ``thread.message.send`` → first ``message.delta`` event, and
  → ``run.completed``.

Two ways to compare them, both reported:

* *submit-anchored*: the difference of the medians of submit → first delta
  and submit → end (includes run-to-run noise of codex and the model);
* *model-anchored*: the fake model logs the wall-clock time it wrote the
  first ``response.output_text.delta`` and ``response.completed`` of each
  response; "first delta written → client sees it" and "response completed
  → client sees the end" are measured on both paths, and the difference of
  their medians is agentd's share — codex's own work between the model and
  its stdout is in both and cancels out. For the end this is, on the agentd
  path, codex's ``turn/completed`` → the client's ``run.completed`` plus the
  same codex-internal step the direct path has.

A third, exact measurement of agentd's own share (``agentdInProcess``): the
daemon runs in the bench's process with a tap on the Codex connection, and
"adapter reads codex's first delta → client gets ``message.delta``" and
"adapter reads ``turn/completed`` → client gets ``run.completed``" are timed
on one clock (see ``bench_agentd_in_process``).

Targets: ≤ 5 ms added to the first delta, ≤ 2 ms to completion.

    python scripts/bench_providers_codex.py [--turns 20]

Used by the providers benchmark through ``run(turns)`` (returns the dict this
prints). Needs the pinned codex (``npm ci --prefix tests/integration/runtimes``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from agentd.actors.providers.codex import OPT_OUT_NOTIFICATIONS, CodexAdapter  # noqa: E402
from agentd.protocol.client import Client  # noqa: E402
from scripts.bench_turns import TARGET_COMPLETION_MS, TARGET_FIRST_DELTA_MS, WARMUP, median_ms, ms  # noqa: E402
from agentd.launch import start_daemon  # noqa: E402
from scripts.offline.codex import CodexWorld, make_world  # noqa: E402

# -- (a) codex app-server directly -------------------------------------------------------------


class DirectClient:
    """Just enough of the app-server protocol to run turns and time them."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.ids = itertools.count(1)
        self.buffer = b""
        self.backlog: list[tuple[float, float, dict[str, Any]]] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.process.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def request(self, method: str, params: dict[str, Any]) -> Any:
        request_id = next(self.ids)
        await self.send({"id": request_id, "method": method, "params": params})
        while True:
            arrival = await self._read()
            message = arrival[2]
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self.backlog.append(arrival)

    async def next(self) -> tuple[float, float, dict[str, Any]]:
        """The next message with its (perf_counter, wall clock) arrival time."""
        if self.backlog:
            return self.backlog.pop(0)
        return await self._read()

    async def _read(self) -> tuple[float, float, dict[str, Any]]:
        while b"\n" not in self.buffer:
            chunk = await self.process.stdout.receive_some(65536)
            if not chunk:
                raise RuntimeError("codex exited")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return time.perf_counter(), time.time(), json.loads(line)


async def bench_direct(world: CodexWorld, turns: int, workspace: Path) -> list[dict[str, float]]:
    adapter = CodexAdapter(world.provider_config(), home=world.root / "direct-home")
    stderr = open(world.root / "direct-stderr.log", "ab")
    process = await trio.lowlevel.open_process(
        adapter.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=adapter.environment(),
    )
    samples = []
    try:
        client = DirectClient(process)
        await client.request("initialize", {
            "clientInfo": {"name": "bench", "version": "0"},
            "capabilities": {"experimentalApi": True, "optOutNotificationMethods": OPT_OUT_NOTIFICATIONS},
        })
        await client.send({"method": "initialized", "params": {}})
        thread = (await client.request("thread/start", {"cwd": str(workspace)}))["thread"]["id"]
        for n in range(WARMUP + turns):
            start = time.perf_counter()
            turn_id = (await client.request("turn/start", {
                "threadId": thread, "input": [{"type": "text", "text": f"turn {n}"}],
            }))["turn"]["id"]
            first = None
            while True:
                at, wall, message = await client.next()
                method = message.get("method")
                if method == "item/agentMessage/delta" and first is None:
                    first = (at, wall)
                if method == "turn/completed" and message["params"]["turn"]["id"] == turn_id:
                    end = (at, wall)
                    break
            if n >= WARMUP:
                samples.append({"firstDelta": first[0] - start, "end": end[0] - start,
                                "firstDeltaWall": first[1], "endWall": end[1]})
    finally:
        await process.stdin.aclose()
        with trio.move_on_after(10):
            await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()
        stderr.close()
    return samples


# -- (b) through agentd's socket --------------------------------------------------------------------


async def bench_agentd(world: CodexWorld, turns: int, data_dir: Path, socket: Path) -> list[dict[str, float]]:
    config = data_dir.parent / "agentd-bench.toml"
    config.write_text('[daemon]\ndefault_provider = "codex"\n\n' + world.provider_toml("codex"))
    daemon = await start_daemon(data_dir, socket, config=config)
    samples = []
    try:
        async with Client.connect(socket) as client:
            thread_id = (await client.call("thread.create", provider="codex"))["threadId"]
            async with client.subscribe(thread_id=thread_id) as events:
                for n in range(WARMUP + turns):
                    start = time.perf_counter()
                    sent = await client.call("thread.message.send", threadId=thread_id, text=f"turn {n}")
                    first = None
                    async for event in events:
                        if event.get("runId") != sent["runId"]:
                            continue
                        if event["type"] == "message.delta" and first is None:
                            first = (time.perf_counter(), time.time())
                        if event["type"] in ("run.completed", "run.failed", "run.interrupted"):
                            end = (time.perf_counter(), time.time())
                            if event["type"] != "run.completed":
                                raise RuntimeError(f"turn {n} ended {event['type']}: {event['payload']['run'].get('reason')}")
                            break
                    if n >= WARMUP:
                        samples.append({"firstDelta": first[0] - start, "end": end[0] - start,
                                        "firstDeltaWall": first[1], "endWall": end[1]})
    finally:
        code = await daemon.terminate()
        if code != 0:
            print(daemon.log_text()[-2000:], file=sys.stderr)
    return samples


async def bench_agentd_in_process(world: CodexWorld, turns: int, root: Path) -> list[dict[str, float]]:
    """agentd's own share, measured exactly: the daemon runs in this process
    (same code, same socket protocol) with a tap on the Codex connection that
    notes when the adapter reads the first ``item/agentMessage/delta`` and
    ``turn/completed`` of each turn; the client notes when the matching
    ``message.delta`` and ``run.completed`` reach it. The client shares the
    daemon's event loop here, so this includes a little of the client's own
    cost, and none of a separate process's scheduling."""
    from agentd.actors.providers import codex as codex_module
    from agentd.actors.config import load_config
    from agentd.supervisor.daemon import Daemon, DaemonOptions
    from agentd.supervisor.paths import Paths

    taps: dict[str, float] = {}
    original = codex_module.CodexConnection._on_notification

    async def tapped(self, method: str, params: dict[str, Any]) -> None:
        if method == "item/agentMessage/delta":
            taps.setdefault("firstDelta", time.perf_counter())
        elif method == "turn/completed":
            taps["turnCompleted"] = time.perf_counter()
        await original(self, method, params)

    config = root / "agentd-inproc.toml"
    config.write_text('[daemon]\ndefault_provider = "codex"\n\n' + world.provider_toml("codex"))
    paths = Paths.resolve(root / "data-inproc", root / "i.sock")
    daemon = Daemon(DaemonOptions(paths=paths, config=load_config(config)))
    samples = []
    codex_module.CodexConnection._on_notification = tapped
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.serve)
            try:
                async with Client.connect(paths.socket) as client:
                    thread_id = (await client.call("thread.create", provider="codex"))["threadId"]
                    async with client.subscribe(thread_id=thread_id) as events:
                        for n in range(WARMUP + turns):
                            taps.clear()
                            sent = await client.call("thread.message.send", threadId=thread_id, text=f"turn {n}")
                            first = None
                            async for event in events:
                                if event.get("runId") != sent["runId"]:
                                    continue
                                if event["type"] == "message.delta" and first is None:
                                    first = time.perf_counter()
                                if event["type"] == "run.completed":
                                    end = time.perf_counter()
                                    break
                            if n >= WARMUP:
                                samples.append({"firstDelta": first - taps["firstDelta"], "end": end - taps["turnCompleted"]})
            finally:
                daemon.request_shutdown()
    finally:
        codex_module.CodexConnection._on_notification = original
    return samples


# -- putting it together ------------------------------------------------------------------------------


def _anchored(samples: list[dict[str, float]], timings: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Client arrival minus the fake model's write time, per measured turn."""
    measured = timings[WARMUP : WARMUP + len(samples)]
    return {
        "firstDelta": [s["firstDeltaWall"] - t["firstDeltaAt"] for s, t in zip(samples, measured)],
        "end": [s["endWall"] - t["completedAt"] for s, t in zip(samples, measured)],
    }


def summarize(direct: list[dict[str, float]], agentd: list[dict[str, float]],
              direct_timings: list[dict[str, Any]], agentd_timings: list[dict[str, Any]], namespaced: bool) -> dict[str, Any]:
    d_anchor, a_anchor = _anchored(direct, direct_timings), _anchored(agentd, agentd_timings)
    out: dict[str, Any] = {
        "turns": len(direct),
        "networkNamespace": namespaced,
        "direct": {
            "submitToFirstDeltaMs": median_ms([s["firstDelta"] for s in direct]),
            "submitToTurnCompletedMs": median_ms([s["end"] for s in direct]),
            "modelFirstDeltaToClientMs": median_ms(d_anchor["firstDelta"]),
            "modelCompletedToTurnCompletedMs": median_ms(d_anchor["end"]),
        },
        "agentd": {
            "submitToFirstDeltaMs": median_ms([s["firstDelta"] for s in agentd]),
            "submitToRunCompletedMs": median_ms([s["end"] for s in agentd]),
            "modelFirstDeltaToClientMs": median_ms(a_anchor["firstDelta"]),
            "modelCompletedToRunCompletedMs": median_ms(a_anchor["end"]),
        },
    }
    added = {
        "firstDeltaMs": round(out["agentd"]["modelFirstDeltaToClientMs"] - out["direct"]["modelFirstDeltaToClientMs"], 3),
        "completionMs": round(out["agentd"]["modelCompletedToRunCompletedMs"] - out["direct"]["modelCompletedToTurnCompletedMs"], 3),
        "firstDeltaSubmitAnchoredMs": round(out["agentd"]["submitToFirstDeltaMs"] - out["direct"]["submitToFirstDeltaMs"], 3),
        "completionSubmitAnchoredMs": round(out["agentd"]["submitToRunCompletedMs"] - out["direct"]["submitToTurnCompletedMs"], 3),
    }
    out["added"] = added
    out["targets"] = {
        "firstDeltaMs": TARGET_FIRST_DELTA_MS, "completionMs": TARGET_COMPLETION_MS,
        "firstDeltaMet": added["firstDeltaMs"] <= TARGET_FIRST_DELTA_MS,
        "completionMet": added["completionMs"] <= TARGET_COMPLETION_MS,
    }
    return out


async def run_async(turns: int = 20) -> dict[str, Any]:
    if turns < 1:
        raise ValueError("turns must be at least 1")
    with tempfile.TemporaryDirectory(prefix="agentd-bench-codex-") as tmp:
        root = Path(tmp)
        direct_world = make_world(root / "direct")
        agentd_world = make_world(root / "agentd")
        try:
            workspace = root / "ws"
            workspace.mkdir()
            direct = await bench_direct(direct_world, turns, workspace)
            agentd = await bench_agentd(agentd_world, turns, root / "data", root / "s.sock")
            summary = summarize(direct, agentd, direct_world.timings(), agentd_world.timings(), direct_world.namespaced)
            inproc_world = make_world(root / "inproc")
            try:
                inproc = await bench_agentd_in_process(inproc_world, turns, root)
            finally:
                inproc_world.close()
            summary["agentdInProcess"] = {
                "adapterFirstDeltaToClientMs": median_ms([s["firstDelta"] for s in inproc]),
                "adapterTurnCompletedToRunCompletedMs": median_ms([s["end"] for s in inproc]),
                "p90AdapterFirstDeltaToClientMs": ms(sorted(s["firstDelta"] for s in inproc)[int(len(inproc) * 0.9)]),
                "p90AdapterTurnCompletedToRunCompletedMs": ms(sorted(s["end"] for s in inproc)[int(len(inproc) * 0.9)]),
            }
            return summary
        finally:
            direct_world.close()
            agentd_world.close()


def run(turns: int = 20) -> dict[str, Any]:
    """Run both paths and return the summary (what ``main`` prints)."""
    return trio.run(run_async, turns)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="measured turns per path (after a warm-up of 2)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.turns), indent=2))


if __name__ == "__main__":
    main()

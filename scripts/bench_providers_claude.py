#!/usr/bin/env python3
"""What agentd adds to a Claude Code turn's latency, measured offline.

Every path drives the real pinned ``claude -p`` (stream-json) against the
fake Messages API (``scripts/offline/fake_anthropic.py``) in the same
private world as the integration tests (``scripts/offline/claude.py``:
private CLAUDE_CONFIG_DIR/HOME, a loopback-only network namespace where
``unshare -rn`` works), one session, ``turns`` plain turns after a warm-up:

* **direct** — a minimal stream-json client of our own (not the adapter) on
  claude's stdio: user message → first ``text_delta`` stream event, and → the
  ``result`` line;
* **agentd** — a real daemon child (``agentd.launch.start_daemon``) and a
  socket client: ``thread.message.send`` → first ``message.delta`` event, and
  → ``run.completed``.

Three ways to compare them, all reported:

* *submit-anchored*: the difference of the medians of submit → first delta
  and submit → end on the two paths (includes claude's and the model's
  run-to-run noise, which is much larger than what is being measured);
* *model-anchored*: the fake model logs the wall-clock time it wrote the
  first ``text_delta`` and ``message_stop`` of each response; "model wrote it
  → client sees it" is measured on both paths, and the difference of the
  medians is agentd's share (claude's own work between the model and its
  stdout is in both and cancels out);
* *in process, exact* (``agentdInProcess``): the daemon runs in this process
  with a tap on the Claude connection that notes when the adapter reads
  claude's first ``text_delta`` line and its ``result`` line; the client
  notes when the matching ``message.delta`` and ``run.completed`` arrive —
  "claude's delta → client ``message.delta``" and "claude's ``result`` →
  client ``run.completed``" on one clock. This is the number the targets are
  about (≤ 5 ms to the first delta, ≤ 2 ms to completion).

    python scripts/bench_providers_claude.py [--turns 20]

Used by the providers benchmark through ``run(turns)`` (returns the dict this
prints). Needs the pinned claude (``npm ci --prefix tests/integration/runtimes``).
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

from agentd.actors.providers.claude import ClaudeAdapter  # noqa: E402
from agentd.protocol.client import Client  # noqa: E402
from scripts.bench_turns import TARGET_COMPLETION_MS, TARGET_FIRST_DELTA_MS, WARMUP, median_ms, p90_ms  # noqa: E402
from agentd.launch import start_daemon  # noqa: E402
from scripts.offline.claude import ClaudeWorld, make_world  # noqa: E402

# -- (a) claude directly -----------------------------------------------------------------------------


class DirectClient:
    """Just enough of claude's stream-json protocol to run turns and time them."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.ids = itertools.count(1)
        self.buffer = b""

    async def send(self, message: dict[str, Any]) -> None:
        await self.process.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def next(self) -> tuple[float, float, dict[str, Any]]:
        """The next line with its (perf_counter, wall clock) arrival time."""
        while b"\n" not in self.buffer:
            chunk = await self.process.stdout.receive_some(65536)
            if not chunk:
                raise RuntimeError("claude exited")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return time.perf_counter(), time.time(), json.loads(line)

    async def initialize(self) -> None:
        request_id = f"bench_{next(self.ids)}"
        await self.send({"type": "control_request", "request_id": request_id, "request": {"subtype": "initialize"}})
        while True:
            _, _, message = await self.next()
            if message.get("type") == "control_response" and message["response"].get("request_id") == request_id:
                return


def _is_text_delta(message: dict[str, Any]) -> bool:
    return message.get("type") == "stream_event" and (message.get("event") or {}).get("delta", {}).get("type") == "text_delta"


async def bench_direct(world: ClaudeWorld, turns: int, workspace: Path) -> list[dict[str, float]]:
    adapter = ClaudeAdapter(world.provider_config(), home=world.root / "direct-home")
    stderr = open(world.root / "direct-stderr.log", "ab")
    process = await trio.lowlevel.open_process(
        [*world.wrapper, *adapter.claude_command()], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
        env=adapter.environment(), cwd=str(workspace),
    )
    samples = []
    try:
        client = DirectClient(process)
        await client.initialize()
        for n in range(WARMUP + turns):
            start = time.perf_counter()
            await client.send({"type": "user", "message": {"role": "user", "content": [{"type": "text", "text": f"turn {n}"}]}})
            first = None
            while True:
                at, wall, message = await client.next()
                if first is None and _is_text_delta(message):
                    first = (at, wall)
                if message.get("type") == "result":
                    end = (at, wall)
                    if message.get("subtype") != "success":
                        raise RuntimeError(f"turn {n} ended {message.get('subtype')}: {message.get('errors')}")
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


# -- (b) through agentd's socket ------------------------------------------------------------------------


async def _drive_agentd(client: Client, turns: int) -> list[dict[str, float]]:
    samples = []
    thread_id = (await client.call("thread.create", provider="claude"))["threadId"]
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
    return samples


def _config_text(world: ClaudeWorld) -> str:
    return '[daemon]\ndefault_provider = "claude"\n\n' + world.provider_toml("claude")


async def bench_agentd(world: ClaudeWorld, turns: int, data_dir: Path, socket: Path) -> list[dict[str, float]]:
    config = data_dir.parent / "agentd-bench.toml"
    config.write_text(_config_text(world))
    daemon = await start_daemon(data_dir, socket, config=config)
    try:
        async with Client.connect(socket) as client:
            return await _drive_agentd(client, turns)
    finally:
        code = await daemon.terminate()
        if code != 0:
            print(daemon.log_text()[-2000:], file=sys.stderr)


async def bench_agentd_in_process(world: ClaudeWorld, turns: int, root: Path) -> list[dict[str, float]]:
    """agentd's own share, exactly: the daemon runs in this process (same code,
    same socket protocol) with a tap on ``ClaudeConnection._dispatch`` noting
    when the adapter reads claude's first ``text_delta`` line and its
    ``result`` line of each turn; the client notes when the matching
    ``message.delta`` and ``run.completed`` reach it. The client shares the
    daemon's event loop here, so this includes a little of the client's own
    decoding, and none of a separate process's scheduling."""
    from agentd.actors.providers import claude as claude_module
    from agentd.actors.config import load_config
    from agentd.supervisor.daemon import Daemon, DaemonOptions
    from agentd.supervisor.paths import Paths

    taps: dict[str, float] = {}
    original = claude_module.ClaudeConnection._dispatch

    async def tapped(self, line: bytes) -> None:
        if b'"text_delta"' in line:
            taps.setdefault("firstDelta", time.perf_counter())
        elif b'"type":"result"' in line:
            taps["result"] = time.perf_counter()
        await original(self, line)

    config = root / "agentd-inproc.toml"
    config.write_text(_config_text(world))
    paths = Paths.resolve(root / "data-inproc", root / "i.sock")
    daemon = Daemon(DaemonOptions(paths=paths, config=load_config(config)))
    samples: list[dict[str, float]] = []
    claude_module.ClaudeConnection._dispatch = tapped
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.serve)
            try:
                async with Client.connect(paths.socket) as client:
                    thread_id = (await client.call("thread.create", provider="claude"))["threadId"]
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
                                if event["type"] in ("run.completed", "run.failed", "run.interrupted"):
                                    end = time.perf_counter()
                                    if event["type"] != "run.completed":
                                        raise RuntimeError(f"turn {n} ended {event['type']}")
                                    break
                            if n >= WARMUP:
                                samples.append({"firstDelta": first - taps["firstDelta"], "end": end - taps["result"]})
            finally:
                daemon.request_shutdown()
    finally:
        claude_module.ClaudeConnection._dispatch = original
    return samples


# -- putting it together ------------------------------------------------------------------------------


def _anchored(samples: list[dict[str, float]], timings: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Client arrival minus the fake model's write time, per measured turn."""
    measured = timings[WARMUP : WARMUP + len(samples)]
    if len(measured) != len(samples):
        return {"firstDelta": [], "end": []}
    return {
        "firstDelta": [s["firstDeltaWall"] - t["firstDeltaAt"] for s, t in zip(samples, measured)],
        "end": [s["endWall"] - t["completedAt"] for s, t in zip(samples, measured)],
    }


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def summarize(direct: list[dict[str, float]], agentd: list[dict[str, float]], inproc: list[dict[str, float]],
              direct_timings: list[dict[str, Any]], agentd_timings: list[dict[str, Any]], namespaced: bool) -> dict[str, Any]:
    d_anchor, a_anchor = _anchored(direct, direct_timings), _anchored(agentd, agentd_timings)
    out: dict[str, Any] = {
        "provider": "claude",
        "turns": len(direct),
        "networkNamespace": namespaced,
        "direct": {
            "submitToFirstDeltaMs": median_ms([s["firstDelta"] for s in direct]),
            "submitToResultMs": median_ms([s["end"] for s in direct]),
            "modelFirstDeltaToClientMs": median_ms(d_anchor["firstDelta"]),
            "modelStopToResultMs": median_ms(d_anchor["end"]),
        },
        "agentd": {
            "submitToFirstDeltaMs": median_ms([s["firstDelta"] for s in agentd]),
            "submitToRunCompletedMs": median_ms([s["end"] for s in agentd]),
            "modelFirstDeltaToClientMs": median_ms(a_anchor["firstDelta"]),
            "modelStopToRunCompletedMs": median_ms(a_anchor["end"]),
        },
        "agentdInProcess": {
            "claudeFirstDeltaToClientMs": median_ms([s["firstDelta"] for s in inproc]),
            "claudeResultToRunCompletedMs": median_ms([s["end"] for s in inproc]),
            "p90ClaudeFirstDeltaToClientMs": p90_ms([s["firstDelta"] for s in inproc]),
            "p90ClaudeResultToRunCompletedMs": p90_ms([s["end"] for s in inproc]),
        },
    }
    added = {
        # the numbers the targets are about: agentd's own share, one clock
        "firstDeltaMs": out["agentdInProcess"]["claudeFirstDeltaToClientMs"],
        "completionMs": out["agentdInProcess"]["claudeResultToRunCompletedMs"],
        # cross-checks across processes
        "firstDeltaModelAnchoredMs": _diff(out["agentd"]["modelFirstDeltaToClientMs"], out["direct"]["modelFirstDeltaToClientMs"]),
        "completionModelAnchoredMs": _diff(out["agentd"]["modelStopToRunCompletedMs"], out["direct"]["modelStopToResultMs"]),
        "firstDeltaSubmitAnchoredMs": _diff(out["agentd"]["submitToFirstDeltaMs"], out["direct"]["submitToFirstDeltaMs"]),
        "completionSubmitAnchoredMs": _diff(out["agentd"]["submitToRunCompletedMs"], out["direct"]["submitToResultMs"]),
    }
    out["added"] = added
    out["targets"] = {
        "firstDeltaMs": TARGET_FIRST_DELTA_MS, "completionMs": TARGET_COMPLETION_MS,
        "firstDeltaMet": added["firstDeltaMs"] is not None and added["firstDeltaMs"] <= TARGET_FIRST_DELTA_MS,
        "completionMet": added["completionMs"] is not None and added["completionMs"] <= TARGET_COMPLETION_MS,
    }
    return out


async def run_async(turns: int = 20) -> dict[str, Any]:
    if turns < 1:
        raise ValueError("turns must be at least 1")
    with tempfile.TemporaryDirectory(prefix="agentd-bench-claude-") as tmp:
        root = Path(tmp)
        worlds = [make_world(root / name) for name in ("direct", "agentd", "inproc")]
        direct_world, agentd_world, inproc_world = worlds
        try:
            workspace = root / "ws"
            workspace.mkdir()
            direct = await bench_direct(direct_world, turns, workspace)
            agentd = await bench_agentd(agentd_world, turns, root / "data", root / "s.sock")
            inproc = await bench_agentd_in_process(inproc_world, turns, root)
            return summarize(direct, agentd, inproc, direct_world.timings(), agentd_world.timings(), direct_world.namespaced)
        finally:
            for world in worlds:
                world.close()


def run(turns: int = 20) -> dict[str, Any]:
    """Run every path and return the summary (what ``main`` prints)."""
    return trio.run(run_async, turns)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="measured turns per path (after a warm-up of 2)")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.turns), indent=2))


if __name__ == "__main__":
    main()

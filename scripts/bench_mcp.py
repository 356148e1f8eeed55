#!/usr/bin/env python3
"""What agentd's MCP tool costs a new session (issue 24, section 1), beside
the alternative measured in the same run.

1. ``agentd mcp --thread T`` (the stdio relay) from spawn to its answer to
   ``initialize`` — target ≤ 300 ms (median of ≥ 5) — beside the floor, a
   bare ``python3 -c pass`` from spawn to exit, and beside what the old
   stdio server paid before it could answer: importing the ``mcp`` SDK's
   server (``python3 -c "import mcp.server.mcpserver"``). Interleaved, one
   of each per round; each child's CPU time too (a loaded machine inflates
   it far less than wall time).
2. The first delta of a fresh Codex and a fresh Claude session (pinned
   0.171.0 / 2.1.332 against the offline fake models, ``scripts/offline/``):
   ``thread.message.send`` on a new thread → its first ``message.delta``,
   with agentd's tool on (``agentd_tool = "ask"``, the default) and off
   (``"off"``): two instances of one runtime in one daemon, a fresh thread
   (so a fresh session) on each per round, interleaved — target: on ≤ 1.1×
   off (median of ≥ 4).

    python scripts/bench_mcp.py [--rounds 5] [--sessions 4] [--only relay|codex|claude] [--json]

Needs the pinned runtimes for part 2 (``npm ci --prefix tests/integration/runtimes``);
a runtime that is missing is reported as skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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

from agentd.launch import start_daemon  # noqa: E402
from agentd.protocol.client import Client  # noqa: E402

RELAY_TARGET_MS = 300.0
SESSION_TARGET_RATIO = 1.1
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}).encode()


def _cpu_ms(process: subprocess.Popen[bytes]) -> float:
    """The exited child's CPU time (user + system): a loaded machine inflates it far less than wall time."""
    _pid, _status, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    return (usage.ru_utime + usage.ru_stime) * 1000


def spawn_to_exit_ms(argv: list[str]) -> tuple[float, float]:
    """(wall ms from spawn to exit, CPU ms)."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    cpu = _cpu_ms(process)
    return (time.perf_counter() - start) * 1000, cpu


def relay_initialize_ms(socket: Path, thread_id: str) -> tuple[float, float]:
    """Spawn the relay, write ``initialize``, time its answer's line (and its CPU time, to its exit)."""
    start = time.perf_counter()
    relay = subprocess.Popen([sys.executable, "-m", "agentd", "mcp", "--thread", thread_id], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env={**os.environ, "AGENTD_SOCKET": str(socket)})
    assert relay.stdin is not None and relay.stdout is not None
    relay.stdin.write(INITIALIZE + b"\n")
    relay.stdin.flush()
    line = relay.stdout.readline()
    elapsed = (time.perf_counter() - start) * 1000
    relay.stdin.close()
    cpu = _cpu_ms(relay)
    if b'"serverInfo"' not in line:
        raise RuntimeError(f"the relay answered {line!r}")
    return elapsed, cpu


def stats(values: list[float]) -> dict[str, Any]:
    return {"medianMs": round(statistics.median(values), 1), "minMs": round(min(values), 1),
            "maxMs": round(max(values), 1), "runsMs": [round(v, 1) for v in values]}


async def bench_relay(rounds: int, root: Path) -> dict[str, Any]:
    config = root / "relay.toml"
    config.write_text("")
    daemon = await start_daemon(root / "relay-data", root / "r.sock", config=config)
    floor: list[tuple[float, float]] = []
    sdk: list[tuple[float, float]] = []
    relay: list[tuple[float, float]] = []
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", title="bench"))["threadId"]
        await trio.to_thread.run_sync(relay_initialize_ms, daemon.socket, thread_id)  # warm the bytecode cache
        for _ in range(rounds):
            floor.append(await trio.to_thread.run_sync(spawn_to_exit_ms, [sys.executable, "-c", "pass"]))
            sdk.append(await trio.to_thread.run_sync(spawn_to_exit_ms, [sys.executable, "-c", "import mcp.server.mcpserver"]))
            relay.append(await trio.to_thread.run_sync(relay_initialize_ms, daemon.socket, thread_id))
    finally:
        await daemon.terminate()
    out: dict[str, Any] = {}
    for name, runs in (("floorPythonPass", floor), ("oldServerSdkImport", sdk), ("relaySpawnToInitialize", relay)):
        out[name] = {**stats([wall for wall, _ in runs]), "cpuMedianMs": round(statistics.median(c for _, c in runs), 1)}
    median = out["relaySpawnToInitialize"]["medianMs"]
    out["relayAboveFloorMs"] = round(median - out["floorPythonPass"]["medianMs"], 1)
    out["target"] = {"ms": RELAY_TARGET_MS, "met": median <= RELAY_TARGET_MS}
    return out


async def first_delta_ms(client: Client, provider: str) -> float:
    """A new thread on ``provider``, one message: send → first delta."""
    thread_id = (await client.call("thread.create", provider=provider, title="bench"))["threadId"]
    async with client.subscribe(thread_id=thread_id) as events:
        start = time.perf_counter()
        sent = await client.call("thread.message.send", threadId=thread_id, text="hello")
        first = None
        async for event in events:
            if event.get("runId") != sent["runId"]:
                continue
            if event["type"] == "message.delta" and first is None:
                first = (time.perf_counter() - start) * 1000
            if event["type"] in ("run.completed", "run.failed", "run.interrupted"):
                if event["type"] != "run.completed" or first is None:
                    raise RuntimeError(f"{provider}: the run ended {event['type']}")
                break
    await client.call("thread.stop", threadId=thread_id)
    return first


async def bench_sessions(kind: str, sessions: int, root: Path) -> dict[str, Any]:
    from scripts.offline import claude as claude_world
    from scripts.offline import codex as codex_world

    module = codex_world if kind == "codex" else claude_world
    binary = module.codex_binary() if kind == "codex" else module.claude_binary()  # type: ignore[attr-defined]
    if binary is None:
        return {"skipped": module.SKIP_REASON}
    world = module.make_world(root / kind)
    try:
        config = root / f"{kind}.toml"
        config.write_text(world.provider_toml("on", agentd_tool="ask") + "\n" + world.provider_toml("off", agentd_tool="off"))
        daemon = await start_daemon(root / f"{kind}-data", root / f"{kind[:2]}.sock", config=config)
        on, off = [], []
        try:
            async with Client.connect(daemon.socket) as client:
                await first_delta_ms(client, "off")  # warm: the binary's pages, the fake model
                for index in range(sessions):
                    # Interleaved, and alternating which goes first.
                    for provider in (("on", "off") if index % 2 == 0 else ("off", "on")):
                        (on if provider == "on" else off).append(await first_delta_ms(client, provider))
        finally:
            await daemon.terminate()
    finally:
        world.close()
    out = {"toolOn": stats(on), "toolOff": stats(off)}
    ratio = out["toolOn"]["medianMs"] / out["toolOff"]["medianMs"]
    out["ratio"] = round(ratio, 2)
    out["target"] = {"ratio": SESSION_TARGET_RATIO, "met": ratio <= SESSION_TARGET_RATIO}
    return out


async def run(rounds: int, sessions: int, only: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": rounds, "sessions": sessions}
    with tempfile.TemporaryDirectory(prefix="agentd-bench-mcp-") as tmp:
        root = Path(tmp)
        if only in (None, "relay"):
            out["relay"] = await bench_relay(rounds, root)
        for kind in ("codex", "claude"):
            if only in (None, kind):
                try:
                    out[kind] = await bench_sessions(kind, sessions, root)
                except Exception as exc:  # noqa: BLE001 - reported, not hidden
                    out[kind] = {"skipped": f"{type(exc).__name__}: {exc}"}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="relay rounds (≥ 5)")
    parser.add_argument("--sessions", type=int, default=4, help="fresh sessions per runtime and configuration (≥ 4)")
    parser.add_argument("--only", choices=("relay", "codex", "claude"))
    parser.add_argument("--json", action="store_true", help="print the JSON only")
    args = parser.parse_args()
    if args.rounds < 5 or args.sessions < 4:
        parser.error("the medians need at least 5 relay rounds and 4 sessions")
    out = trio.run(run, args.rounds, args.sessions, args.only)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

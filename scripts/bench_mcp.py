#!/usr/bin/env python3
"""What agentd's MCP tool costs a new session (issue 24, section 1), beside
the alternative measured in the same run.

1. The stdio relay from spawn to its answer to ``initialize`` — target ≤ 300
   ms (median of ≥ 5) — started three ways: ``agentd mcp --thread T`` (the
   console script, what a person's MCP client runs), ``python -m agentd mcp``,
   and the relay's file as agentd gives it to an ACP agent (``python -I -S -c
   "…; import mcp_relay; …"``, ``mcp_relay.command``) and as a script (``python
   -I -S …/agentd/protocol/mcp_relay.py``, compiled at each start); beside the floors, a bare ``python3 -c
   pass`` and ``python3 -I -S -c pass`` from spawn to exit, and beside what
   the old stdio server paid before it could answer: importing the ``mcp``
   SDK's server. ``--other LABEL=PYTHON`` adds another venv's ``agentd
   mcp`` and ``python -m agentd mcp`` (before/after, or a wheel's, in the same rounds).
   Interleaved, one of each per round; each child's CPU time too (a loaded
   machine inflates it far less than wall time).
2. The first delta of a fresh Codex and a fresh Claude session (pinned
   0.171.0 / 2.1.332 against the offline fake models, ``scripts/offline/``):
   ``thread.message.send`` on a new thread → its first ``message.delta``,
   with agentd's tool on (``agentd_tool = "ask"``, the default) and off
   (``"off"``): two instances of one runtime in one daemon, a fresh thread
   (so a fresh session) on each per round, interleaved — target: on ≤ 1.1×
   off (median of ≥ 4). Twice: ``…Direct``, the runtime on the host's
   loopback as a person's daemon runs it, and ``…Namespaced``, in the
   integration tests' loopback-only namespace, where a tool-on session's
   wrapper first starts a bridge to the endpoint's Unix socket.

``--profile``: part 2 as timelines instead (``bench_mcp_profile.py``: the
daemon in this process, the runtime's requests, the MCP requests' arrival and
handling, the model's first request), to tell the daemon's share from the
runtime's.

    python scripts/bench_mcp.py [--rounds 5] [--sessions 4] [--only relay|codex|claude] [--profile]
                                [--where direct|namespaced|both] [--other LABEL=PYTHON] [--json]

Needs the pinned runtimes for part 2 (``npm ci --prefix tests/integration/runtimes``);
a runtime that is missing is reported as skipped. The load average is printed
before and after.
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


def relay_initialize_ms(argv: list[str], socket: Path, thread_id: str) -> tuple[float, float]:
    """Spawn the relay (``argv`` then ``--thread``), write ``initialize``,
    time its answer's line (and its CPU time, to its exit)."""
    start = time.perf_counter()
    relay = subprocess.Popen([*argv, "--thread", thread_id], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "AGENTD_SOCKET": str(socket)})
    assert relay.stdin is not None and relay.stdout is not None
    relay.stdin.write(INITIALIZE + b"\n")
    relay.stdin.flush()
    line = relay.stdout.readline()
    elapsed = (time.perf_counter() - start) * 1000
    relay.stdin.close()
    cpu = _cpu_ms(relay)
    if b'"serverInfo"' not in line:
        raise RuntimeError(f"{argv}: the relay answered {line!r}")
    return elapsed, cpu


def stats(values: list[float]) -> dict[str, Any]:
    return {"medianMs": round(statistics.median(values), 1), "minMs": round(min(values), 1),
            "maxMs": round(max(values), 1), "runsMs": [round(v, 1) for v in values]}


def load_average() -> str:
    """``/proc/loadavg``'s three averages (what shared the machine)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def relay_commands(others: dict[str, str] | None) -> dict[str, list[str]]:
    """The ways to start the relay, by name: the ``agentd`` console script
    beside this Python (what a person's MCP client runs), ``python -m agentd
    mcp``, and the relay's file in isolated mode without ``site`` (what
    agentd gives an ACP agent: ``AgentdTool.relay_command``); for each of
    ``others`` (a label and another venv's Python: main's, a wheel's), its
    first two too."""
    commands = {"pythonMAgentdMcp": [sys.executable, "-m", "agentd", "mcp"]}
    script = Path(sys.executable).with_name("agentd")
    if script.exists():
        commands["agentdMcp"] = [str(script), "mcp"]
    try:
        from agentd.actors.providers.agentd_tool import relay_command
    except ImportError:  # an agentd from before the relay was a file of its own
        pass
    else:
        if "-S" in (isolated := relay_command()):
            commands["isolatedRelayFile"] = isolated  # imported: its bytecode cached
            from agentd.protocol import mcp_relay

            commands["isolatedRelayScript"] = [sys.executable, "-I", "-S", mcp_relay.__file__]
    for label, python in (others or {}).items():
        commands[f"{label}PythonMAgentdMcp"] = [python, "-m", "agentd", "mcp"]
        if (script := Path(python).with_name("agentd")).exists():
            commands[f"{label}AgentdMcp"] = [str(script), "mcp"]
    return commands


async def bench_relay(rounds: int, root: Path, others: dict[str, str] | None = None) -> dict[str, Any]:
    config = root / "relay.toml"
    config.write_text("")
    daemon = await start_daemon(root / "relay-data", root / "r.sock", config=config)
    floors = {"floorPythonPass": [sys.executable, "-c", "pass"],
              "floorPythonIsolatedNoSite": [sys.executable, "-I", "-S", "-c", "pass"],
              "oldServerSdkImport": [sys.executable, "-c", "import mcp.server.mcpserver"],
              **{f"{label}FloorPythonPass": [python, "-c", "pass"] for label, python in (others or {}).items()}}
    commands = relay_commands(others)
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in [*floors, *commands]}
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", title="bench"))["threadId"]
        for argv in commands.values():  # warm the bytecode cache
            await trio.to_thread.run_sync(relay_initialize_ms, argv, daemon.socket, thread_id)
        for _ in range(rounds):
            for name, argv in floors.items():
                runs[name].append(await trio.to_thread.run_sync(spawn_to_exit_ms, argv))
            for name, argv in commands.items():
                runs[name].append(await trio.to_thread.run_sync(relay_initialize_ms, argv, daemon.socket, thread_id))
    finally:
        await daemon.terminate()
    out: dict[str, Any] = {"commands": {name: " ".join(argv) for name, argv in commands.items()}}
    for name, samples in runs.items():
        out[name] = {**stats([wall for wall, _ in samples]), "cpuMedianMs": round(statistics.median(c for _, c in samples), 1)}
    floor = out["floorPythonPass"]["medianMs"]
    for name in commands:
        out[name]["aboveFloorMs"] = round(out[name]["medianMs"] - floor, 1)
        out[name]["target"] = {"ms": RELAY_TARGET_MS, "met": out[name]["medianMs"] <= RELAY_TARGET_MS}
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


async def bench_sessions(kind: str, sessions: int, root: Path, namespace: bool) -> dict[str, Any]:
    from scripts.offline import claude as claude_world
    from scripts.offline import codex as codex_world

    module = codex_world if kind == "codex" else claude_world
    binary = module.codex_binary() if kind == "codex" else module.claude_binary()  # type: ignore[attr-defined]
    if binary is None:
        return {"skipped": module.SKIP_REASON}
    if namespace and module.namespace_problem() is not None:
        return {"skipped": f"no network namespace here: {module.namespace_problem()}"}
    name = f"{kind}-{'ns' if namespace else 'direct'}"
    world = module.make_world(root / name, namespace=namespace)
    try:
        config = root / f"{name}.toml"
        config.write_text(world.provider_toml("on", agentd_tool="ask") + "\n" + world.provider_toml("off", agentd_tool="off"))
        daemon = await start_daemon(root / f"{name}-data", root / f"{kind[:2]}{'n' if namespace else 'd'}.sock", config=config)
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


async def run(rounds: int, sessions: int, only: str | None, profile: bool, others: dict[str, str] | None,
              where: str = "both") -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": rounds, "sessions": sessions, "loadAverageBefore": load_average()}
    with tempfile.TemporaryDirectory(prefix="agentd-bench-mcp-") as tmp:
        root = Path(tmp)
        if only in (None, "relay") and not profile:
            out["relay"] = await bench_relay(rounds, root, others)
        for kind in ("codex", "claude"):
            if only not in (None, kind):
                continue
            # As a person's daemon runs the runtime (on the host's loopback), and as the
            # integration tests do (a loopback-only namespace per runtime: the tool's
            # endpoint is bridged in by a Python process the wrapper starts first).
            for namespace in {"direct": (False,), "namespaced": (True,), "both": (False, True)}[where]:
                key = f"{kind}{'Namespaced' if namespace else 'Direct'}"
                try:
                    if profile:
                        from scripts.bench_mcp_profile import profile as profile_sessions

                        out[key] = await profile_sessions(kind, sessions, root, namespace)
                    else:
                        out[key] = await bench_sessions(kind, sessions, root, namespace)
                except Exception as exc:  # noqa: BLE001 - reported, not hidden
                    out[key] = {"skipped": f"{type(exc).__name__}: {exc}"}
    out["loadAverageAfter"] = load_average()
    return out


def summary(out: dict[str, Any]) -> list[str]:
    """One line per figure: median (min–max), CPU, beside the floor or the alternative."""
    lines = [f"load average before {out['loadAverageBefore']}, after {out['loadAverageAfter']}"]
    relay = out.get("relay", {})
    for name, figure in relay.items():
        if isinstance(figure, dict) and "medianMs" in figure:
            extra = f", {figure['aboveFloorMs']:+.1f} ms on the floor, target {'met' if figure['target']['met'] else 'missed'}" \
                if "target" in figure else ""
            lines.append(f"relay {name}: {figure['medianMs']:.0f} ms ({figure['minMs']:.0f}–{figure['maxMs']:.0f}), "
                         f"CPU {figure['cpuMedianMs']:.0f} ms{extra}")
    for name, figure in out.items():
        if isinstance(figure, dict) and "toolOn" in figure and "ratio" in figure:
            on, off = figure["toolOn"], figure["toolOff"]
            lines.append(f"{name}: tool on {on['medianMs']:.0f} ms ({on['minMs']:.0f}–{on['maxMs']:.0f}), off "
                         f"{off['medianMs']:.0f} ({off['minMs']:.0f}–{off['maxMs']:.0f}): {figure['ratio']}×")
        elif isinstance(figure, dict) and "skipped" in figure:
            lines.append(f"{name}: skipped ({figure['skipped']})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="relay rounds (≥ 5)")
    parser.add_argument("--sessions", type=int, default=4, help="fresh sessions per runtime and configuration (≥ 4)")
    parser.add_argument("--only", choices=("relay", "codex", "claude"))
    parser.add_argument("--profile", action="store_true",
                        help="the sessions' timelines instead (a daemon in this process with taps: bench_mcp_profile.py)")
    parser.add_argument("--other", action="append", default=[], metavar="LABEL=PYTHON",
                        help="also start the relay of another venv's agentd (its Python and its agentd script), "
                             "interleaved: e.g. baseline=/path/to/main-venv/bin/python")
    parser.add_argument("--where", choices=("direct", "namespaced", "both"), default="both",
                        help="the sessions on the host's loopback, in the tests' namespace, or both (default)")
    parser.add_argument("--json", action="store_true", help="print the JSON only")
    args = parser.parse_args()
    if args.rounds < 5 or args.sessions < 4:
        parser.error("the medians need at least 5 relay rounds and 4 sessions")
    others = dict(other.split("=", 1) for other in args.other if "=" in other)
    if len(others) != len(args.other):
        parser.error("--other takes LABEL=PYTHON")
    out = trio.run(run, args.rounds, args.sessions, args.only, args.profile, others, args.where)
    if not args.json:
        print("\n".join(summary(out)))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

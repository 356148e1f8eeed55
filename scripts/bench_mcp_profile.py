"""Where a fresh session's first delta goes with agentd's tool on and off
(issue 24, section 1): ``bench_mcp.py --profile``.

The daemon runs in this process (the same code and socket protocol as a
daemon child) with taps that note, on one wall clock (``time.time()``, the
fake models' clock too):

- the runtime's spawn (``trio.lowlevel.open_process`` of the provider's
  command, its namespace wrapper included);
- each request agentd makes of the runtime and its answer (Codex's
  ``initialize``, ``thread/start``, ``turn/start``; Claude's control
  ``initialize``) — ``RequestCorrelator.call``;
- each connection to agentd's MCP endpoint, and each request on it from its
  arrival (its head and body read) to its answer written (``McpFront._respond``),
  with its JSON-RPC method;
- the fake model's first request (its own log's ``at``) and the client's
  first ``message.delta``;
- how late the event loop wakes a 1 ms sleeper meanwhile (``LoopLag``):
  what the process ran without yielding, or waited for a core.

Printed per configuration, as medians over the sessions of each mark's
offset from ``thread.message.send``, beside the MCP requests' own handling
times: what the daemon spends on the tool versus what the runtime does
around it.
"""

from __future__ import annotations

import json
import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import trio

from agentd.protocol.client import Client

Marks = list[tuple[float, str, float | None]]


@contextmanager
def taps(marks: Marks) -> Iterator[None]:
    """Note (time, label, duration) into ``marks`` while inside."""
    from agentd.actors.providers import jsonl
    from agentd.protocol import mcp_http

    original_open = trio.lowlevel.open_process
    original_call = jsonl.RequestCorrelator.call
    original_respond = mcp_http.McpFront._respond
    original_connection = mcp_http.McpFront.handle_connection

    async def open_process(command: Any, *args: Any, **kwargs: Any) -> Any:
        argv = [str(a) for a in command] if isinstance(command, (list, tuple)) else [str(command)]
        if any(name in " ".join(argv) for name in ("codex", "claude")):
            marks.append((time.time(), "spawn", None))
        return await original_open(command, *args, **kwargs)

    async def call(self: Any, what: str, send: Any, *, timeout: float | None = None) -> Any:
        start = time.time()
        try:
            return await original_call(self, what, send, timeout=timeout)
        finally:
            marks.append((start, f"runtime {what}", (time.time() - start) * 1000))

    async def respond(self: Any, conn: Any, stream: Any, head: Any, body: bytes, peer: Any) -> None:
        start = time.time()
        try:
            method = json.loads(body).get("method", "?") if head.method == "POST" else head.method
        except (ValueError, AttributeError):
            method = "?"
        try:
            await original_respond(self, conn, stream, head, body, peer)
        finally:
            marks.append((start, f"mcp {method}", (time.time() - start) * 1000))

    async def handle_connection(self: Any, stream: Any) -> None:
        marks.append((time.time(), "mcp connection", None))
        await original_connection(self, stream)

    trio.lowlevel.open_process = open_process  # type: ignore[assignment]
    jsonl.RequestCorrelator.call = call  # type: ignore[method-assign]
    mcp_http.McpFront._respond = respond  # type: ignore[method-assign]
    mcp_http.McpFront.handle_connection = handle_connection  # type: ignore[method-assign]
    try:
        yield
    finally:
        trio.lowlevel.open_process = original_open
        jsonl.RequestCorrelator.call = original_call  # type: ignore[method-assign]
        mcp_http.McpFront._respond = original_respond  # type: ignore[method-assign]
        mcp_http.McpFront.handle_connection = original_connection  # type: ignore[method-assign]


class LoopLag:
    """How late the event loop wakes a 1 ms sleeper: the longest stretches
    something in the process (the daemon, or the bench's client) ran without
    yielding — or the process waited for a core."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.scope = trio.CancelScope()

    async def run(self) -> None:
        with self.scope:
            while True:
                before = trio.current_time()
                await trio.sleep(0.001)
                self.lags.append((trio.current_time() - before - 0.001) * 1000)


async def one_session(client: Client, provider: str, marks: Marks, world: Any, lag: LoopLag) -> dict[str, Any]:
    """A fresh thread's first message, and its marks relative to the send."""
    thread_id = (await client.call("thread.create", provider=provider, title="profile"))["threadId"]
    async with client.subscribe(thread_id=thread_id) as events:
        marks.clear()
        lag.lags.clear()
        start = time.time()
        sent = await client.call("thread.message.send", threadId=thread_id, text="hello")
        first = None
        async for event in events:
            if event.get("runId") != sent["runId"]:
                continue
            if event["type"] == "message.delta" and first is None:
                first = time.time()
            if event["type"] in ("run.completed", "run.failed", "run.interrupted"):
                break
    await client.call("thread.stop", threadId=thread_id)
    model = min((r["at"] for r in world.requests() if r["at"] >= start and r.get("body")), default=None)
    timeline: dict[str, Any] = {}
    mcp: list[dict[str, Any]] = []
    for at, label, took in sorted(marks):
        offset = round((at - start) * 1000, 1)
        if label.startswith("mcp "):
            mcp.append({"what": label[4:], "atMs": offset, "tookMs": None if took is None else round(took, 2)})
            continue
        key = label if label not in timeline else f"{label} (again)"
        timeline[key] = offset if took is None else {"atMs": offset, "tookMs": round(took, 1)}
    timeline["model's first request"] = None if model is None else round((model - start) * 1000, 1)
    timeline["first delta"] = None if first is None else round((first - start) * 1000, 1)
    lags = sorted(lag.lags) or [0.0]
    return {"timeline": timeline, "mcp": mcp,
            "loopLagMs": {"max": round(lags[-1], 1), "p99": round(lags[int(len(lags) * 0.99)], 1),
                          "over5msTotal": round(sum(x for x in lags if x > 5), 1)}}


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of each mark's offset, and of the MCP requests' handling."""
    keys: dict[str, list[float]] = {}
    for sample in samples:
        for key, value in sample["timeline"].items():
            if value is not None:
                keys.setdefault(key, []).append(value["atMs"] if isinstance(value, dict) else value)
                if isinstance(value, dict):
                    keys.setdefault(f"{key}: took", []).append(value["tookMs"])
    out: dict[str, Any] = {key: round(statistics.median(values), 1) for key, values in keys.items()}
    for name in ("max", "p99", "over5msTotal"):
        out[f"loop lag {name}, median ms"] = round(statistics.median(s["loopLagMs"][name] for s in samples), 1)
    handled = [m["tookMs"] for s in samples for m in s["mcp"] if m["tookMs"] is not None]
    if handled:
        spans = [max(m["atMs"] + (m["tookMs"] or 0) for m in s["mcp"]) - min(m["atMs"] for m in s["mcp"])
                 for s in samples if s["mcp"]]
        out["mcp requests per session"] = statistics.median(
            len([m for m in s["mcp"] if m["what"] != "connection"]) for s in samples)
        out["mcp connections per session"] = statistics.median(
            len([m for m in s["mcp"] if m["what"] == "connection"]) for s in samples)
        out["mcp handling per request, median / max ms"] = [round(statistics.median(handled), 2), round(max(handled), 2)]
        out["mcp first arrival → last answer, median ms"] = round(statistics.median(spans), 1)
    return out


async def profile(kind: str, sessions: int, root: Path, namespace: bool | None) -> dict[str, Any]:
    """``sessions`` fresh sessions of each configuration (tool on, off),
    interleaved, in a daemon in this process."""
    from agentd.actors.config import load_config
    from agentd.supervisor.daemon import Daemon, DaemonOptions
    from agentd.supervisor.paths import Paths
    from scripts.offline import claude as claude_world
    from scripts.offline import codex as codex_world

    module: Any = codex_world if kind == "codex" else claude_world
    binary = module.codex_binary() if kind == "codex" else module.claude_binary()
    if binary is None:
        return {"skipped": module.SKIP_REASON}
    world = module.make_world(root / f"{kind}-profile", namespace=namespace)
    marks: Marks = []
    samples: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    try:
        config = root / f"{kind}-profile.toml"
        config.write_text(world.provider_toml("on", agentd_tool="ask") + "\n" + world.provider_toml("off", agentd_tool="off"))
        paths = Paths.resolve(root / f"{kind}-profile-data", root / f"{kind[:2]}p.sock")
        daemon = Daemon(DaemonOptions(paths=paths, config=load_config(config)))
        with taps(marks):
            async with trio.open_nursery() as nursery:
                await nursery.start(daemon.serve)
                lag = LoopLag()
                nursery.start_soon(lag.run)
                try:
                    async with Client.connect(paths.socket) as client:
                        await one_session(client, "off", marks, world, lag)  # warm
                        for index in range(sessions):
                            for provider in (("on", "off") if index % 2 == 0 else ("off", "on")):
                                samples[provider].append(await one_session(client, provider, marks, world, lag))
                finally:
                    lag.scope.cancel()
                    daemon.request_shutdown()
    finally:
        world.close()
    return {"namespaced": world.namespaced, "toolOn": summarize(samples["on"]), "toolOff": summarize(samples["off"]),
            "sessions": samples}

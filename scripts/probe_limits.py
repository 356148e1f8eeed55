"""Attack a real daemon's limits from outside and print what happened
(hostile-round issue items 8, 9 and 10).

Each probe starts its own ``agentd serve`` on a temporary data dir and
socket (nothing reaches the network; everything is removed afterwards),
drives it only through the documented protocol, and is bounded in count and
time (``--timeout`` seconds per probe):

* ``fork`` (item 8): ``--calls`` concurrent ``task.delegate {workspace:
  fork}`` from one thread whose workspace holds ``--workspace-mib`` MiB,
  against the default fan-out (8): tasks made, copies on disk, refusals, and
  copies left over without a task; then one fork of a workspace over
  ``[daemon] delegate_max_copy_bytes``: refused, and what it left on disk.
* ``tree`` (item 9): a 3 x 3 delegation tree driven by the scripted agent's
  ``delegate`` step (through ``agentd mcp``, as Codex and Claude call it)
  under ``[daemon] max_sessions`` (``--max-sessions``): sessions, refusals,
  the daemon's descendant processes and their peak resident memory; then
  the root's Stop, and the sessions still live once the tasks ended.
* ``rollback`` (item 10): thread B runs in the same folder as thread A and
  has written a new file; ``rollback.toRun`` and ``checkpoint.restore`` of A
  are tried: refused or not, and whether B's file is still there.

    python scripts/probe_limits.py                 # all three
    python scripts/probe_limits.py fork rollback   # some
    python scripts/probe_limits.py --json          # one JSON line per probe

It prints figures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import trio  # noqa: E402

import hostile  # noqa: E402
from agentd.launch import start_daemon  # noqa: E402
from agentd.protocol.client import Client  # noqa: E402
from agentd.protocol.errors import AgentdError, InvalidState, LimitExceeded  # noqa: E402

MiB = hostile.MiB
TERMINAL = ("completed", "failed", "interrupted", "cancelled", "rolled_back")
CONFIG = """
[daemon]
{daemon}

[providers.basic]
kind = "scripted"
capabilities = {{ nativeFork = false }}
"""


def script(*steps: dict[str, Any]) -> str:
    """A scripted-agent message performing ``steps``."""
    return "@script\n" + json.dumps(list(steps))


class Probe:
    """A daemon of its own on a temp dir, with ``[daemon]`` lines ``daemon``."""

    def __init__(self, daemon_lines: str = "") -> None:
        self.work = Path(tempfile.mkdtemp(prefix="pl-"))
        self.config = self.work / "config.toml"
        self.config.write_text(CONFIG.format(daemon=daemon_lines))
        self.daemon: Any = None

    async def __aenter__(self) -> Probe:
        self.daemon = await start_daemon(self.work / "data", self.work / "s.sock", config=self.config, timeout=60)
        return self

    async def __aexit__(self, *exc: object) -> None:
        with trio.CancelScope(shield=True):
            await self.daemon.terminate()
        shutil.rmtree(self.work, ignore_errors=True)

    def copies(self) -> list[Path]:
        where = self.work / "data" / "workspaces"
        return sorted(p for p in where.iterdir() if p.name.startswith("task-")) if where.exists() else []


async def wait_event(client: Client, predicate, *, thread_id: str | None = None) -> dict[str, Any]:
    async with client.subscribe(thread_id=thread_id) as events:
        async for event in events:
            if predicate(event):
                return event
    raise RuntimeError("the event stream ended")


async def wait_run_terminal(client: Client, thread_id: str, run_id: str) -> dict[str, Any]:
    return (await wait_event(client, lambda e: e.get("runId") == run_id and (e["payload"].get("run") or {}).get(
        "status") in TERMINAL, thread_id=thread_id))["payload"]["run"]


def tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# -- item 8: fork copies ------------------------------------------------------------------


async def probe_fork(args: argparse.Namespace) -> dict[str, Any]:
    cap = 2 * args.workspace_mib * MiB
    async with Probe(f"delegate_max_copy_bytes = {cap}") as probe:
        workspace = probe.work / "project"
        workspace.mkdir()
        (workspace / "data.bin").write_bytes(os.urandom(args.workspace_mib * MiB))
        async with Client.connect(probe.daemon.socket) as client:
            parent = (await client.call("thread.create", title="lead", workspace=str(workspace)))["threadId"]
            made: list[dict] = []
            refused: dict[str, int] = {}

            async def one() -> None:
                try:
                    made.append(await client.call("task.delegate", parentThreadId=parent, provider="basic",
                                                  workspace="fork", instructions=script({"hang": True})))
                except LimitExceeded as exc:
                    refused[exc.data.get("limit", "?")] = refused.get(exc.data.get("limit", "?"), 0) + 1

            async with trio.open_nursery() as nursery:
                for _ in range(args.calls):
                    nursery.start_soon(one)
            task_workspaces = {(await client.call("thread.get", threadId=m["taskId"]))["thread"]["workspace"]
                               for m in made}
            copies = probe.copies()
            copy_bytes = sum(tree_size(c) for c in copies)
            left_over = [c for c in copies if str(c) not in task_workspaces]
            await client.call("thread.stop", threadId=parent)

            # One fork over the cap, from another thread on the project (the
            # first one's fan-out is full): it grows past delegate_max_copy_bytes.
            (workspace / "more.bin").write_bytes(os.urandom(2 * args.workspace_mib * MiB))
            other = (await client.call("thread.create", title="other", workspace=str(workspace)))["threadId"]
            before = len(probe.copies())
            big_refusal = None
            try:
                await client.call("task.delegate", parentThreadId=other, provider="basic", workspace="fork",
                                  instructions=script({"say": "never"}))
            except LimitExceeded as exc:
                big_refusal = {"limit": exc.data.get("limit"), "size": exc.data.get("size"), "value": exc.data.get("value")}
            return {
                "calls": args.calls, "tasks": len(made), "copies": len(copies), "copyMiB": round(copy_bytes / MiB, 1),
                "refused": refused, "leftOver": len(left_over),
                "overCap": {"workspaceMiB": round(tree_size(workspace) / MiB, 1), "capMiB": round(cap / MiB, 1),
                            "refusal": big_refusal, "copiesAdded": len(probe.copies()) - before},
            }


def fork_line(r: dict[str, Any]) -> str:
    refused = ", ".join(f"{n} {k}" for k, n in r["refused"].items()) or "none"
    big = r["overCap"]
    said = (f"refused ({big['refusal']['limit']}: {big['refusal']['size']} bytes counted > {big['refusal']['value']})"
            if big["refusal"] else "NOT refused")
    return (f"fork: {r['calls']} concurrent fork delegations: {r['tasks']} tasks, {r['copies']} copies "
            f"({r['copyMiB']} MiB), refused: {refused}, {r['leftOver']} left over\n"
            f"      a {big['workspaceMiB']} MiB workspace over a {big['capMiB']} MiB cap: {said}, "
            f"{big['copiesAdded']} copies added")


# -- item 9: a delegation tree under max_sessions -----------------------------------------------


def descendants(root: int) -> list[int]:
    """Every live descendant process of ``root`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


class TreeWatch:
    """Peak count and summed resident memory of the daemon and its descendants."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_processes = 0
        self.peak_rss = 0

    def sample(self) -> None:
        procs = descendants(self.pid)
        rss = sum(m.rss for p in [self.pid, *procs] if (m := hostile.memory_of(p)) is not None)
        self.peak_processes = max(self.peak_processes, len(procs))
        self.peak_rss = max(self.peak_rss, rss)

    async def run(self) -> None:
        while True:
            await trio.to_thread.run_sync(self.sample)
            await trio.sleep(0.25)


async def probe_tree(args: argparse.Namespace) -> dict[str, Any]:
    width = 3
    leaf = script({"say": "leaf working"}, {"hang": True})
    middle = script(*[{"delegate": {"provider": "basic", "instructions": leaf, "wait": False}}] * width,
                    {"say": "middle delegated"}, {"hang": True})
    root = script(*[{"delegate": {"provider": "basic", "instructions": middle, "wait": False}}] * width,
                  {"say": "root delegated"}, {"hang": True})
    async with Probe(f"max_sessions = {args.max_sessions}") as probe, \
            Client.connect(probe.daemon.socket) as client:
        watch = TreeWatch(probe.daemon.pid)
        lead = (await client.call("thread.create", title="lead"))["threadId"]
        sent = await client.call("thread.message.send", threadId=lead, text=root)
        said: list[str] = []
        with trio.move_on_after(args.timeout) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch.run)
                # Every agent of the tree says one line once it delegated (or was refused);
                # the tree is complete when root, middles and leaves have all spoken.
                expected = 1 + width + width * width
                async with client.subscribe() as events:
                    async for event in events:
                        # A short answer becomes durable in one message.appended, at offset 0.
                        if event["type"] == "message.appended" and event["payload"].get("offset") == 0:
                            text = event["payload"].get("text", "")
                            if text.startswith(("root delegated", "middle delegated", "leaf working")):
                                said.append(text)
                            elif text.startswith("delegate failed"):
                                said.append(text)
                        leaves_refused = sum(1 for t in said if "max_sessions" in t)
                        spoken = sum(1 for t in said if not t.startswith("delegate failed"))
                        if spoken + leaves_refused >= expected:
                            break
                watch.sample()
                nursery.cancel_scope.cancel()
        sessions_at_peak = len((await client.call("daemon.status"))["sessions"])
        refusals = [t for t in said if t.startswith("delegate failed")]
        await client.call("thread.stop", threadId=lead)
        await wait_run_terminal(client, lead, sent["runId"])
        # Every task's run ends through the Stop cascade; their sessions stop at once.
        tasks = [t for t in (await client.call("thread.list"))["threads"] if t["relationshipToParent"] == "delegated_task"]
        for task in tasks:
            run = (await client.call("thread.get", threadId=task["id"]))["runs"][0]
            if run["status"] not in TERMINAL:
                await wait_run_terminal(client, task["id"], run["id"])
        with trio.move_on_after(30):
            while any(s["threadId"] != lead for s in (await client.call("daemon.status"))["sessions"]):
                await wait_event(client, lambda e: e["type"] in ("session.stopped", "session.error"))
        after = (await client.call("daemon.status"))["sessions"]
        return {
            "maxSessions": args.max_sessions, "complete": not scope.cancelled_caught, "tasks": len(tasks),
            "sessionsAtPeak": sessions_at_peak, "refused": len(refusals),
            "refusedFor": sorted({("max_sessions" if "max_sessions" in t else t[:80]) for t in refusals}),
            "peakProcesses": watch.peak_processes, "peakRssMiB": round(watch.peak_rss / MiB, 1),
            "sessionsAfterStop": len(after), "taskSessionsAfterStop": sum(1 for s in after if s["threadId"] != lead),
        }


def tree_line(r: dict[str, Any]) -> str:
    return (f"tree: 3x3 delegation tree under max_sessions {r['maxSessions']}"
            f"{'' if r['complete'] else ' (timed out before complete)'}: {r['tasks']} tasks made, "
            f"{r['sessionsAtPeak']} sessions live, {r['refused']} delegations refused ({', '.join(r['refusedFor']) or '-'}); "
            f"peak {r['peakProcesses']} processes under the daemon, peak RSS {r['peakRssMiB']} MiB (daemon + them)\n"
            f"      after the root's Stop: {r['sessionsAfterStop']} sessions live, "
            f"{r['taskSessionsAfterStop']} of them tasks'")


# -- item 10: a rollback while another thread writes ---------------------------------------------


async def probe_rollback(args: argparse.Namespace) -> dict[str, Any]:
    async with Probe() as probe, Client.connect(probe.daemon.socket) as client:
        ws = probe.work / "ws"
        ws.mkdir()
        (ws / "README.md").write_text("hello\n")
        a = (await client.call("thread.create", workspace=str(ws)))["threadId"]
        sent = await client.call("thread.message.send", threadId=a, text=script({"write": {"path": "a.txt", "content": "a\n"}}))
        run = await wait_run_terminal(client, a, sent["runId"])
        b = (await client.call("thread.create", workspace=str(ws)))["threadId"]
        b_sent = await client.call("thread.message.send", threadId=b, text=script(
            {"write": {"path": "b-new.txt", "content": "b is writing\n"}}, {"hang": True}))
        await wait_event(client, lambda e: e["type"] == "file_change.completed", thread_id=b)
        outcome: dict[str, Any] = {}
        for method, params in (("rollback.toRun", {"threadId": a, "targetOrdinal": 0}),
                               ("checkpoint.restore", {"checkpointId": run["checkpointId"]})):
            try:
                await client.call(method, **params)
                outcome[method] = "went through"
            except InvalidState as exc:
                named = [r["threadId"] for r in exc.data.get("activeRuns", [])]
                outcome[method] = f"refused (invalid_state, names {'B' if b in named else named})"
            except AgentdError as exc:
                outcome[method] = f"{type(exc).__name__}: {exc}"
        kept = (ws / "b-new.txt").exists()
        await client.call("thread.stop", threadId=b)
        await wait_run_terminal(client, b, b_sent["runId"])
        return {"attempts": outcome, "bFileKept": kept}


def rollback_line(r: dict[str, Any]) -> str:
    tried = "; ".join(f"{m} while thread B runs: {o}" for m, o in r["attempts"].items())
    return f"rollback: {tried}; B's new file {'kept' if r['bFileKept'] else 'DELETED'}"


PROBES = {"fork": (probe_fork, fork_line), "tree": (probe_tree, tree_line), "rollback": (probe_rollback, rollback_line)}


async def main(args: argparse.Namespace) -> None:
    for name in args.probes or list(PROBES):
        run, line = PROBES[name]
        with trio.fail_after(args.timeout + 120):
            result = await run(args)
        print(json.dumps({name: result}) if args.json else line(result), flush=True)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("probes", nargs="*", metavar="PROBE", help=f"which: {', '.join(PROBES)} (default: all)")
    parser.add_argument("--calls", type=int, default=20, help="concurrent fork delegations (default 20)")
    parser.add_argument("--workspace-mib", type=int, default=20, help="MiB in the forked workspace (default 20)")
    parser.add_argument("--max-sessions", type=int, default=8, help="[daemon] max_sessions for the tree (default 8)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a probe may take (default 300)")
    parser.add_argument("--json", action="store_true", help="one JSON line per probe")
    args = parser.parse_args()
    unknown = [p for p in args.probes if p not in PROBES]
    if unknown:
        parser.error(f"unknown probe(s) {', '.join(unknown)}; choose from {', '.join(PROBES)}")
    trio.run(main, args)


if __name__ == "__main__":
    cli()

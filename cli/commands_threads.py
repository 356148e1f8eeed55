"""Commands that make and read threads: ``new``, ``threads``, ``show``,
``requests`` and ``events``.

All but ``events`` ask and print on a blocking connection (connection.py);
``events`` follows the log on the async client.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import TYPE_CHECKING, Any

from .common import CliError, print_json, run_with_client, with_daemon
from .connection import DaemonConnection
from .lineage_cmds import lineage_lines
from .render import (
    cost_text,
    count,
    event_line,
    held_run_ids,
    message_lines,
    plan_lines,
    queue_lines,
    render_tree,
    request_lines,
    stalled_text,
)

if TYPE_CHECKING:
    from agentd.protocol.client import Client


def cmd_new(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        params = {k: v for k, v in (("title", args.title), ("workspace", args.workspace), ("provider", args.provider)) if v}
        if params.get("workspace"):
            params["workspace"] = os.path.abspath(params["workspace"])
        result = daemon.call("thread.create", **params)
        print_json(result) if args.json else print(result["threadId"])
        return 0

    return with_daemon(args, go)


def cmd_threads(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        listed = daemon.call("thread.list", **({"includeArchived": True} if getattr(args, "archived", False) else {}))
        if args.json:
            print_json(listed)
            return 0
        threads = listed["threads"]
        if args.ids:
            print("".join(f"{t['id']}\n" for t in threads), end="")
            return 0
        if not threads:
            print("no threads yet; `agentd new` makes one")
            return 0
        # Only a busy or held thread can have runs waiting.
        busy = [t for t in threads if not t.get("corrupt") and (t["status"] != "idle" or t["queueHeld"])]
        details = daemon.call_all([("thread.get", {"threadId": t["id"]}) for t in busy])
        runs = {t["id"]: detail["runs"] for t, detail in zip(busy, details)}
        print(f"{'THREAD':30} {'STATUS':8} {'PROVIDER':10} {'RUNS':>4}  {'ACTIVE RUN':30} {'QUEUED':12} {'TOKENS':>13} "
              f"{'COST':>9} TITLE")
        for t in threads:
            print(thread_row(t, runs.get(t["id"], [])))
        return 0

    return with_daemon(args, go)


def thread_row(thread: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """One line of ``agentd threads``: ``runs`` are its runs, if it can have queued ones."""
    t = thread
    if t.get("corrupt"):  # its stored record cannot be decoded (agentd doctor lists it)
        return f"{t['id']:30} {'CORRUPT':8} {'-':10} {'-':>4}  {'-':30} {'-':12} {'-':>13} {'-':>9} unreadable record: {t['reason']}"
    waiting = [r for r in runs if r["status"] == "queued"]
    held = len([r for r in waiting if r["id"] in held_run_ids(t)])
    queued = f"{len(waiting)}" + (f" ({held} held)" if held else "") if waiting else ""
    usage = t.get("usage")
    tokens = f"{count(usage['inputTokens'])} / {count(usage['outputTokens'])}" if usage else "-"
    # Its active run's agent went quiet (run.stalled): said before the title, the columns stay put.
    stalled = "STALLED " if any(stalled_text(r, 0.0) for r in runs if r["id"] == t["activeRunId"]) else ""
    # Listed only with --archived (issue 27): said as plainly.
    archived = "ARCHIVED " if t.get("archivedAt") is not None else ""
    return (f"{t['id']:30} {t['status']:8} {t['provider']:10} {t['runCount']:>4}  {t['activeRunId'] or '-':30} "
            f"{queued or '-':12} {tokens:>13} {cost_text(t.get('cost')) or '-':>9} {archived}{stalled}{t['title']}")


def cmd_show(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        detail = daemon.call("thread.get", threadId=args.thread)
        *runs, requested = daemon.call_all([*(("run.get", {"runId": r["id"]}) for r in detail["runs"]),
                                            ("thread.requests", {"threadId": args.thread})])
        requests = requested["requests"]
        if args.json:
            # thread.get's answer as it is, with what the other calls add under keys of their own
            print_json({**detail, "runDetails": runs, "requests": requests})
            return 0
        print("\n".join(show_lines(daemon, detail, runs, requests)))
        return 0

    return with_daemon(args, go)


def show_lines(daemon: DaemonConnection, detail: dict[str, Any], runs: list[dict[str, Any]],
               requests: list[dict[str, Any]]) -> list[str]:
    """``agentd show``: the tree, the queue, requests, lineage, messages, plans, what is unreadable."""
    thread = detail["thread"]
    lines = render_tree(thread, runs, now=time.time())
    lines[1:1] = [f"  {line}" for line in queue_lines(thread, detail["runs"])]
    for request in requests:
        lines += [f"  {line}" for line in request_lines(request)]
    lineage = lineage_lines(daemon, thread["id"], detail=detail, with_runs=False)[1:]
    if lineage:
        lines += ["lineage:", *lineage]
    lines += message_lines(detail["messages"], detail["runs"])
    lines += plan_lines([a for run in runs for a in run["artifacts"]])
    if detail.get("quarantine"):
        q = detail["quarantine"]
        lines.append(f"QUARANTINED after failures (first incident {q['firstIncidentId']}: {q['reason']}); "
                     f"`agentd unquarantine {thread['id']}` lifts it")
    unreadable = detail.get("unreadable", []) + [u for run in runs for u in run.get("unreadable", [])]
    lines += [f"unreadable {u['kind']} record {u['id']}: {u['reason']} (left out above; `agentd doctor` lists all)"
              for u in unreadable]
    return lines


def cmd_requests(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        result = daemon.call("thread.requests", threadId=args.thread)
        if args.json:
            print_json(result)
        elif not result["requests"]:
            print(f"nothing waits for an answer on thread {args.thread}")
        for request in [] if args.json else result["requests"]:
            print("\n".join(request_lines(request)))
        return 0

    return with_daemon(args, go)


def cmd_events(args: argparse.Namespace) -> int:
    async def go(client: Client) -> int:
        last = args.after
        if args.thread is not None:
            await client.call("thread.get", threadId=args.thread)  # a thread that does not exist is an error
        # Without --follow the log is read up to its current end, which may be
        # another thread's event: the thread is then filtered here.
        thread = args.thread if args.follow else None
        async with client.subscribe(thread_id=thread, after_seq=args.after) as events:
            target = (await client.call("daemon.status"))["lastSeq"]
            if not args.follow and target <= args.after:
                return 0
            async for event in events:
                if args.thread is not None and event.get("threadId") != args.thread:
                    pass
                elif args.json:
                    print(json.dumps(event, ensure_ascii=False), flush=True)
                elif not event.get("ephemeral"):
                    print(event_line(event), flush=True)
                if not event.get("ephemeral"):
                    last = event["seq"]
                    if not args.follow and last >= target:
                        return 0
            if events.resync_after is not None:
                raise CliError(f"fell behind the daemon; resume with `agentd events --after {events.resync_after}`")
            raise CliError(f"the daemon closed the connection after seq {last}; "
                           f"resume with `agentd events --follow --after {last}` once it is back")

    return run_with_client(args, go)

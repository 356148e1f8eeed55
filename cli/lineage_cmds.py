"""Lineage commands of the ``agentd`` command line (SPEC F5, F6, F8):

    agentd fork THREAD [--from RUN|latest] [--side] [--title T] [--worktree|--copy]   prints the fork's thread id
    agentd lineage THREAD       where a thread comes from, its forks, merge-backs, children and every handoff
    agentd handoff HANDOFF      the exact text an agent was given

Their arguments are in commands.py; each asks on a blocking connection.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentd.protocol.errors import NotFound

from .common import print_json, with_daemon
from .connection import DaemonConnection


def cmd_fork(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        params: dict[str, Any] = {"threadId": args.thread, "sideChat": args.side}
        if args.source and args.source != "latest":
            params["sourcePoint"] = {"type": "run", "runId": args.source}
        if args.title is not None:
            params["title"] = args.title
        if args.own is not None:
            params["workspace"] = args.own
        result = daemon.call("thread.fork", **params)
        print_json(result) if args.json else print(result["threadId"])
        source = result.get("workspaceSource")
        if source is not None and not args.json:
            # Said where it is made: what agentd will add to the user's repository.
            where = (f"a git worktree at {source['path']} on a new branch {source['branch']} of {source['repository']}"
                     if source["kind"] == "worktree" else f"a copy at {source['path']}")
            print(f"agentd: the fork will work in {where}, made at its first message", file=sys.stderr)
        return 0

    return with_daemon(args, go)


def cmd_handoff(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        result = daemon.call("handoff.get", handoffId=args.handoff)
        if args.json:
            print_json(result)
        else:
            print(result["handoff"]["text"])
        return 0

    return with_daemon(args, go)


def _size(handoff: dict[str, Any]) -> str:
    dropped = f", {len(handoff['droppedRunIds'])} run(s) dropped" if handoff.get("droppedRunIds") else ""
    return f"{handoff['strategy']} {handoff['size']:,} chars (cap {handoff['cap']:,}){dropped}"


#: how a transfer into a thread is named, by type
INCOMING = {"fork": "fork of", "merge_back": "merge-back from", "subagent_spawn": "spawned by",
            "subagent_result": "result from"}


def lineage_lines(daemon: DaemonConnection, thread_id: str, *, detail: dict[str, Any] | None = None,
                        with_runs: bool = True) -> list[str]:
    """A thread's lineage as text: its parent and fork point, the transfers it
    takes part in with their handoffs (strategy and size), its forks, its
    merge-backs, its delegated and subagent children, and — ``with_runs`` —
    who ran each run."""
    detail = detail or daemon.call("thread.get", threadId=thread_id)
    thread = detail["thread"]
    transfers = (daemon.call("thread.transfers", threadId=thread_id))["transfers"]
    wanted = list(dict.fromkeys(t["handoffId"] for t in transfers if t.get("handoffId")))
    handoffs = {h: got["handoff"] for h, got in zip(wanted, daemon.call_all(("handoff.get", {"handoffId": h}) for h in wanted))}
    ordinals = {run["id"]: run["ordinal"] for run in detail["runs"]}
    lines = [f"{thread['id']} \"{thread['title']}\" created by {thread['createdBy']}"]
    if thread.get("parentThreadId"):
        side = ", side chat" if thread.get("sideChat") else ""
        gone = ", deleted" if not _exists(daemon, thread["parentThreadId"]) else ""
        lines.append(f"  parent {thread['parentThreadId']} ({thread['relationshipToParent']}{side}{gone}), "
                     f"root {thread['rootThreadId']}")
    incoming = [t for t in transfers if t["targetThreadId"] == thread_id and t["type"] != "provider_handoff"]
    outgoing = [t for t in transfers if t["sourceThreadId"] == thread_id and t["targetThreadId"] != thread_id]
    switches = [t for t in transfers if t["type"] == "provider_handoff"]
    for transfer in incoming:
        point = transfer["sourcePoint"]
        name = INCOMING.get(transfer["type"], transfer["type"] + " of")
        into = f" into run {ordinals[transfer['runId']]}" if transfer.get("runId") in ordinals and transfer["type"] != "fork" else ""
        lines.append(f"  {name} {transfer['sourceThreadId']} at {point['type']} {point.get('runId') or ''}".rstrip()
                     + f"{into}: {_status(transfer, handoffs)}")
    for transfer in switches:
        run = ordinals.get(transfer.get("runId") or "", "?")
        lines.append(f"  run {run}: {transfer['sourceProvider']} → {transfer['targetProvider']} "
                     f"({transfer['reason']}): {_status(transfer, handoffs)}")
    drawn = set()
    for transfer in outgoing:
        point = transfer["sourcePoint"]
        at = f"run {ordinals[point['runId']]}" if point.get("runId") in ordinals else point["type"]
        target = transfer["targetThreadId"]
        if transfer["type"] == "fork":
            drawn.add(target)
            lines.append(f"  forked at {at} → {target} ({transfer['status']})")
        elif transfer["type"] == "merge_back":
            lines.append(f"  merged back into {target} at {at}: {_status(transfer, handoffs)}")
        else:
            drawn.add(target)
            lines.append(f"  {transfer['type']} at {at} → {target}: {_status(transfer, handoffs)}")
    for child in _children(daemon, thread_id):
        if child["id"] in drawn:
            continue
        how = child.get("relationshipToParent") or "child"
        lines.append(f"  {how} child → {child['id']} \"{child['title']}\" (created by {child['createdBy']}, "
                     f"{child['status']}, {child['runCount']} run(s))")
    if with_runs:
        for run in detail["runs"]:
            lines.append(f"  run {run['ordinal']} on {run['provider']}: {run['status']}")
    return lines


def _exists(daemon: DaemonConnection, thread_id: str) -> bool:
    """Whether the thread is still there (``thread.delete`` leaves its forks naming it)."""
    try:
        daemon.call("thread.get", threadId=thread_id)
    except NotFound:
        return False
    return True


def _children(daemon: DaemonConnection, thread_id: str) -> list[dict[str, Any]]:
    """The threads whose parent is ``thread_id`` (forks, delegated tasks,
    subagents, …), oldest first."""
    threads = (daemon.call("thread.list"))["threads"]
    return [t for t in threads if t.get("parentThreadId") == thread_id]


def _status(transfer: dict[str, Any], handoffs: dict[str, dict[str, Any]]) -> str:
    text = transfer["status"] + (f" ({transfer['resolution']})" if transfer.get("resolution") else "")
    handoff = handoffs.get(transfer.get("handoffId") or "")
    if handoff is not None:
        text += f", handoff {handoff['id']} {_size(handoff)}"
    if transfer.get("error"):
        text += f"; error: {transfer['error']}"
    return text


def cmd_lineage(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        if args.json:
            print_json(daemon.call("thread.transfers", threadId=args.thread))
            return 0
        for line in lineage_lines(daemon, args.thread):
            print(line)
        return 0

    return with_daemon(args, go)

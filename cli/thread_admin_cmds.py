"""``agentd search``, ``agentd export``, ``agentd rename`` and ``agentd rm``
(issue 28: ``thread.search``, ``thread.export``, ``thread.update``,
``thread.delete``). Their arguments are in commands.py."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .common import EXIT_OK, EXIT_USAGE, CliError, print_json, with_daemon
from .connection import DaemonConnection
from .rollback_cmd import confirm


def _hit_line(hit: dict[str, Any]) -> str:
    where = hit["threadId"] + (f" {hit['runId']}" if hit.get("runId") else "")
    snippet = " ".join(hit["snippet"].split())
    return f"{where} [{hit['kind']}] {snippet}"


def cmd_search(args: argparse.Namespace) -> int:
    """Print the best matches, one a line: thread, run, what matched, the snippet."""
    def go(daemon: DaemonConnection) -> int:
        params: dict[str, Any] = {"query": args.query, "limit": args.limit}
        if args.thread:
            params["threadId"] = args.thread
        result: dict[str, Any] = daemon.call("thread.search", **params)
        if args.json:
            print_json(result)
        elif not result["hits"]:
            print(f"nothing matches {args.query!r}", file=sys.stderr)
        else:
            for hit in result["hits"]:
                print(_hit_line(hit))
        return EXIT_OK

    return with_daemon(args, go)


def cmd_export(args: argparse.Namespace) -> int:
    """Write the thread as Markdown or JSON to stdout (or ``--output FILE``)."""
    def go(daemon: DaemonConnection) -> int:
        result: dict[str, Any] = daemon.call("thread.export", threadId=args.thread, format=args.format)
        if args.format == "json":
            text = json.dumps(result["document"], indent=2, ensure_ascii=False) + "\n"
        else:
            text = result["markdown"]
        if args.output:
            try:
                Path(args.output).write_text(text, encoding="utf-8")
            except OSError as exc:
                raise CliError(f"cannot write {args.output}: {exc.strerror or exc}") from None
            print(f"wrote {args.output}", file=sys.stderr)
        else:
            sys.stdout.write(text)
        return EXIT_OK

    return with_daemon(args, go)


def cmd_rename(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        result: dict[str, Any] = daemon.call("thread.update", threadId=args.thread, title=args.title)
        if args.json:
            print_json(result)
        elif result["changed"]:
            print(f"thread {args.thread} is now titled {result['thread']['title']!r}")
        else:
            print(f"thread {args.thread} already has that title")
        return EXIT_OK

    return with_daemon(args, go)


def _describe(daemon: DaemonConnection, thread_id: str) -> None:
    got = daemon.call("thread.get", threadId=thread_id)
    thread = got["thread"]
    print(f"Delete thread {thread_id} ({thread['title'] or 'untitled'}): {len(got['runs'])} run(s), "
          f"{len(got['messages'])} message(s), its checkpoints and search entries.", file=sys.stderr)
    print("Forks of it keep their own history. This cannot be undone.", file=sys.stderr)


def cmd_rm(args: argparse.Namespace) -> int:
    """Delete a thread; at a terminal it asks first, elsewhere ``--yes`` is required."""
    if not args.yes and not sys.stdin.isatty():
        raise CliError("rm deletes the thread for good: pass --yes to confirm when not at a terminal", EXIT_USAGE)

    def go(daemon: DaemonConnection) -> int:
        if not args.yes:
            _describe(daemon, args.thread)
            if not confirm("Delete it? [y/N] "):
                raise CliError("nothing was deleted")
        result: dict[str, Any] = daemon.call("thread.delete", threadId=args.thread)
        if args.json:
            print_json(result)
        else:
            kept = f"; {len(result['childThreadIds'])} child thread(s) keep their history" if result["childThreadIds"] else ""
            print(f"deleted thread {args.thread}: {result['runs']} run(s), {result['messages']} message(s), "
                  f"{result['checkpoints']} checkpoint(s){kept}")
        return EXIT_OK

    return with_daemon(args, go)

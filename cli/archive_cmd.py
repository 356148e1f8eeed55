"""``agentd archive THREAD`` and ``agentd unarchive THREAD`` (issue 27): a
thread leaves ``agentd threads`` (``--archived`` shows it) and its git
worktree is removed after a final checkpoint; unarchiving brings both back."""

from __future__ import annotations

import argparse
from typing import Any

from .common import EXIT_OK, print_json, with_daemon
from .connection import DaemonConnection


def cmd_archive(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        result: dict[str, Any] = daemon.call("thread.archive", threadId=args.thread)
        if args.json:
            print_json(result)
            return EXIT_OK
        print(f"thread {args.thread} is archived (`agentd unarchive {args.thread}` brings it back)")
        if result["worktreeRemoved"]:
            print(f"its worktree was removed after checkpoint {result['checkpointId']}; branch {result['branch']} stays")
        return EXIT_OK

    return with_daemon(args, go)


def cmd_unarchive(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        result: dict[str, Any] = daemon.call("thread.unarchive", threadId=args.thread)
        if args.json:
            print_json(result)
            return EXIT_OK
        print(f"thread {args.thread} is listed again")
        if result["worktreeRestored"]:
            print(f"its worktree was made again from checkpoint {result['checkpointId']}")
        return EXIT_OK

    return with_daemon(args, go)

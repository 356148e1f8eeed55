"""``agentd archive THREAD`` and ``agentd unarchive THREAD`` (issue 27): a
thread leaves ``agentd threads`` (``--archived`` shows it) and its git
worktree is removed after a final checkpoint; unarchiving brings both back."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .common import EXIT_OK, print_json, with_daemon
from .connection import DaemonConnection


def _archived_lines(thread: str, result: dict[str, Any]) -> list[str]:
    lines = [f"thread {thread} is archived (`agentd unarchive {thread}` brings it back)"]
    if result["worktreeRemoved"]:
        lines.append(f"its worktree was removed after checkpoint {result['checkpointId']}; branch {result['branch']} stays")
    return lines


def _unarchived_lines(thread: str, result: dict[str, Any]) -> list[str]:
    lines = [f"thread {thread} is listed again"]
    if result["worktreeRestored"]:
        lines.append(f"its worktree was made again from checkpoint {result['checkpointId']}")
    return lines


Lines = Callable[[str, dict[str, Any]], list[str]]


def _command(method: str, lines: Lines) -> Callable[[argparse.Namespace], int]:
    """The command that calls ``method`` on ``THREAD`` and prints its answer
    (``--json``) or what ``lines`` says of it."""

    def command(args: argparse.Namespace) -> int:
        def go(daemon: DaemonConnection) -> int:
            result: dict[str, Any] = daemon.call(method, threadId=args.thread)
            if args.json:
                print_json(result)
            else:
                print("\n".join(lines(args.thread, result)))
            return EXIT_OK

        return with_daemon(args, go)

    command.__doc__ = f"``{method}`` of THREAD."
    return command


cmd_archive = _command("thread.archive", _archived_lines)
cmd_unarchive = _command("thread.unarchive", _unarchived_lines)

"""``agentd rollback THREAD ORDINAL``: take a thread back to the state after one
of its runs — files and the agent's memory (SPEC F14, ``rollback.toRun``).

At a terminal it first says what will be undone and asks; ``--yes`` skips
the question, and without a terminal ``--yes`` is required (a destructive
command never runs because a script happened to pipe something in).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import EXIT_USAGE, CliError, print_json, with_daemon
from .connection import DaemonConnection

UNDOABLE = ("completed", "failed", "interrupted", "cancelled")


def what_is_undone(runs: list[dict[str, Any]], ordinal: int) -> list[dict[str, Any]]:
    """The runs a rollback to ``ordinal`` would mark ``rolled_back``."""
    return [r for r in runs if r["ordinal"] > ordinal and r["status"] in UNDOABLE]


def _first_line(text: str, width: int = 60) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def confirm(prompt: str) -> bool:
    """Ask a yes/no question on the terminal; Ctrl-D or anything but yes is no."""
    try:
        answer = input(prompt)
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def cmd_rollback(args: argparse.Namespace) -> int:
    interactive = sys.stdin.isatty()
    if not args.yes and not interactive:
        raise CliError("rollback undoes runs: pass --yes to confirm when not at a terminal", EXIT_USAGE)
    box: dict[str, Any] = {}

    def go(daemon: DaemonConnection) -> int:
        if not args.yes:
            got = daemon.call("thread.get", threadId=args.thread)
            undone = what_is_undone(got["runs"], args.ordinal)
            texts = {m["id"]: m["text"] for m in got["messages"]}
            target = "before its first run" if args.ordinal == 0 else f"after run {args.ordinal}"
            print(f"Roll thread {args.thread} back to the state {target}.", file=sys.stderr)
            if undone:
                print(f"This undoes {len(undone)} run(s) — their file changes and what the agent remembers of them:",
                      file=sys.stderr)
                for run in undone:
                    print(f"  run {run['ordinal']} ({run['status']}): {_first_line(texts.get(run['userMessageId'], ''))}",
                          file=sys.stderr)
            else:
                print("No run is undone; the files go back to that run's checkpoint.", file=sys.stderr)
            print("Your files as they are now are saved first (undo with `agentd restore`).", file=sys.stderr)
            if not confirm("Roll back? [y/N] "):
                raise CliError("nothing was rolled back")
        box.update(daemon.call("rollback.toRun", threadId=args.thread, targetOrdinal=args.ordinal,
                               allowRebuild=args.allow_rebuild))
        return 0

    with_daemon(args, go)
    if args.json:
        print_json(box)
        return 0
    print(f"rolled back {len(box['rolledBackRunIds'])} run(s); {len(box['restoredFiles'])} file(s) restored; "
          f"agent memory: {box['providerRollback']}")
    print(f"undo the file changes with `agentd restore {box['safetyCheckpointId']}`")
    return 0

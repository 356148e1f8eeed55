"""``agentd doctor`` (every corrupt record of a data dir, changing nothing)
and ``agentd unquarantine THREAD`` (commands reach a thread that failed too
often again). Their arguments are in commands.py."""

from __future__ import annotations

import argparse
from typing import Any

from .common import EXIT_ERROR, EXIT_OK, CliError, paths, print_json, with_daemon
from .connection import DaemonConnection


def cmd_doctor(args: argparse.Namespace) -> int:
    """Read the whole store read-only; exit 0 when every record decodes, 1 when some do not."""
    from agentd.store.doctor import scan

    store_dir = paths(args).store
    try:
        found, count = scan(store_dir)
    except FileNotFoundError as exc:
        raise CliError(f"{exc} (is --data-dir right?)") from None
    if args.json:
        print_json({"store": str(store_dir), "records": count, "corrupt": [f.to_wire() for f in found]})
    elif not found:
        print(f"{count} records in {store_dir}: no corrupt records")
    else:
        for item in found:
            what = "written by a newer agentd" if item.newer else "corrupt"
            print(f"{item.kind} {item.id}: {what}: {item.reason}")
        print(f"{len(found)} of {count} records cannot be read; agentd skips and reports them, and changed none")
    return EXIT_ERROR if found else EXIT_OK


def cmd_unquarantine(args: argparse.Namespace) -> int:
    def go(daemon: DaemonConnection) -> int:
        result: dict[str, Any] = daemon.call("thread.unquarantine", threadId=args.thread)
        if args.json:
            print_json(result)
        elif result["wasQuarantined"]:
            print(f"thread {args.thread} takes commands again")
        else:
            print(f"thread {args.thread} was not quarantined")
        return EXIT_OK

    return with_daemon(args, go)

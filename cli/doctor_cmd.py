"""``agentd doctor`` (every corrupt record of a data dir, changing nothing)
and ``agentd unquarantine THREAD`` (commands reach a thread that failed too
often again). ``add_doctor_commands`` is the one hook in the parser."""

from __future__ import annotations

import argparse
from typing import Any

from agentd.protocol.client import Client

from .common import EXIT_ERROR, EXIT_OK, CliError, paths, print_json, run_with_client


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
    async def go(client: Client) -> int:
        result: dict[str, Any] = await client.call("thread.unquarantine", threadId=args.thread)
        if args.json:
            print_json(result)
        elif result["wasQuarantined"]:
            print(f"thread {args.thread} takes commands again")
        else:
            print(f"thread {args.thread} was not quarantined")
        return EXIT_OK

    return run_with_client(args, go)


def add_doctor_commands(sub: Any, results: argparse.ArgumentParser, thread_id: Any) -> None:
    p = sub.add_parser("doctor", parents=[results],
                       help="list every record of the data dir that cannot be read (changes nothing)")
    p.set_defaults(fn=cmd_doctor)
    p = sub.add_parser("unquarantine", parents=[results],
                       help="let commands reach a thread whose actor failed too often again")
    p.add_argument("thread", type=thread_id, metavar="THREAD", help="the quarantined thread")
    p.set_defaults(fn=cmd_unquarantine)

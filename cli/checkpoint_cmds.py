"""``agentd checkpoints THREAD``, ``agentd diff CHECKPOINT|RUN``, ``agentd
restore CHECKPOINT``: a thread's workspace checkpoints from the command line
(SPEC F13).

Kept apart from main.py, which only calls ``add_checkpoint_commands``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentd.protocol.client import Client

from .common import CliError, print_json, run_with_client

GREEN, RED, CYAN, BOLD, RESET = "\033[32m", "\033[31m", "\033[36m", "\033[1m", "\033[0m"


def _run(args: argparse.Namespace, method: str, **params: Any) -> dict[str, Any]:
    """Call ``method`` through the CLI's one client path (its errors become
    one line and an exit code in main); print the result with ``--json``."""
    box: dict[str, Any] = {}

    async def go(client: Client) -> int:
        box.update(await client.call(method, **params))
        return 0

    run_with_client(args, go)  # an error is raised, and main reports it
    if args.json:
        print_json(box)
    return box


def checkpoint_rows(checkpoints: list[dict[str, Any]]) -> list[str]:
    """One line per checkpoint: ordinal, kind, status, id, counts or reason."""
    lines = []
    for c in checkpoints:
        s = c.get("summary") or {}
        if c["status"] in ("captured", "stale"):  # a stale one still holds its files
            what = f"{s.get('filesChanged', 0)} files +{s.get('insertions', 0)} -{s.get('deletions', 0)}"
            if s.get("skipped"):
                what += f" ({len(s['skipped'])} skipped)"
        else:
            what = c.get("reason") or ""
        run = c.get("runId") or "-"
        lines.append(f"{c['ordinal']:>3} {c['kind']:12} {c['status']:8} {c['id']}  run={run}  {what}")
    return lines


def colour_patch(patch: str) -> str:
    """A git patch with added lines green, removed red, hunks cyan."""
    out = []
    for line in patch.splitlines(keepends=True):
        if line.startswith(("+++", "---", "diff ", "index ")):
            out.append(BOLD + line.rstrip("\n") + RESET + "\n" * line.endswith("\n"))
        elif line.startswith("+"):
            out.append(GREEN + line.rstrip("\n") + RESET + "\n" * line.endswith("\n"))
        elif line.startswith("-"):
            out.append(RED + line.rstrip("\n") + RESET + "\n" * line.endswith("\n"))
        elif line.startswith("@@"):
            out.append(CYAN + line.rstrip("\n") + RESET + "\n" * line.endswith("\n"))
        else:
            out.append(line)
    return "".join(out)


def cmd_checkpoints(args: argparse.Namespace) -> int:
    result = _run(args, "checkpoint.list", threadId=args.thread)
    if not args.json:
        for line in checkpoint_rows(result["checkpoints"]):
            print(line)
    return 0


#: a run's id starts so (store/ids.py ``new_id("run")``); a checkpoint's with ``ckp_``
RUN_PREFIX = "run_"


async def run_checkpoint(client: Client, run_id: str) -> str:
    """The checkpoint of run ``run_id`` (``Run.checkpointId``).

    Raises:
        CliError: the run has none (it never started, or ended before checkpoints).
    """
    run = (await client.call("run.get", runId=run_id))["run"]
    if not run.get("checkpointId"):
        raise CliError(f"run {run_id} has no checkpoint (it is {run['status']}: "
                       "a run gets one when it ends after it started)")
    return run["checkpointId"]


def cmd_diff(args: argparse.Namespace) -> int:
    box: dict[str, Any] = {}

    async def go(client: Client) -> int:
        # A run id resolves to the run's checkpoint, on the same connection.
        checkpoint = args.checkpoint
        if checkpoint.startswith(RUN_PREFIX):
            checkpoint = await run_checkpoint(client, checkpoint)
        params: dict[str, Any] = {"checkpointId": checkpoint}
        if args.base:
            params["baseCheckpointId"] = (await run_checkpoint(client, args.base)
                                          if args.base.startswith(RUN_PREFIX) else args.base)
        box.update(await client.call("checkpoint.diff", **params))
        return 0

    run_with_client(args, go)
    result = box
    if args.json:
        print_json(result)
    if not args.json:
        patch = result["patch"]
        sys.stdout.write(colour_patch(patch) if sys.stdout.isatty() else patch)
        if result["truncated"]:
            print("agentd: the patch was cut; see `--json` for the file list", file=sys.stderr)
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"checkpointId": args.checkpoint}
    if args.include:
        params["include"] = args.include
    result = _run(args, "checkpoint.restore", **params)
    if not args.json:
        print(f"restored {len(result['restored'])} files from {result['checkpointId']}; "
              f"undo with `agentd restore {result['safetyCheckpointId']}`")
        for item in result["notRestored"]:
            detail = f": {item['detail']}" if item.get("detail") else ""
            print(f"  not restored: {item['path']} ({item['reason']}{detail})")
    return 0 if result["complete"] else 1


def add_checkpoint_commands(sub: Any, results: argparse.ArgumentParser) -> None:
    """Add ``checkpoints``, ``diff`` and ``restore`` to the ``agentd`` parser."""
    p = sub.add_parser("checkpoints", parents=[results], help="a thread's workspace checkpoints")
    p.add_argument("thread", help="the thread's id")
    p.set_defaults(fn=cmd_checkpoints)

    p = sub.add_parser("diff", parents=[results],
                       help="what a checkpoint or a run changed (a coloured patch at a terminal)")
    p.add_argument("checkpoint", metavar="CHECKPOINT|RUN",
                   help="a checkpoint's id (agentd checkpoints THREAD lists them), or a run's: its checkpoint")
    p.add_argument("--base", metavar="CHECKPOINT|RUN",
                   help="diff against this checkpoint or run's checkpoint (default: the one it was captured against)")
    p.set_defaults(fn=cmd_diff)

    p = sub.add_parser("restore", parents=[results],
                       help="put a checkpoint's files back (after a safety checkpoint that undoes it)")
    p.add_argument("checkpoint", help="the checkpoint whose files to put back")
    p.add_argument("--include", action="append", metavar="FOLDER",
                   help="also restore the files of this folder although it is a nested repository now "
                        "(its .git is never touched; repeat for more)")
    p.set_defaults(fn=cmd_restore)

"""``agentd checkpoints THREAD``, ``agentd diff CHECKPOINT|RUN``, ``agentd
restore CHECKPOINT``: a thread's workspace checkpoints from the command line
(SPEC F13).

Their arguments are in commands.py; each asks on a blocking connection.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import CliError, print_json, with_daemon
from .connection import DaemonConnection
from .messages import in_cli_terms

GREEN, RED, CYAN, BOLD, RESET = "\033[32m", "\033[31m", "\033[36m", "\033[1m", "\033[0m"


def _run(args: argparse.Namespace, method: str, **params: Any) -> dict[str, Any]:
    """Call ``method`` through the CLI's one client path (its errors become
    one line and an exit code in main); print the result with ``--json``."""
    box: dict[str, Any] = {}

    def go(daemon: DaemonConnection) -> int:
        box.update(daemon.call(method, **params))
        return 0

    with_daemon(args, go)  # an error is raised, and main reports it
    if args.json:
        print_json(box)
    return box


def checkpoint_rows(checkpoints: list[dict[str, Any]]) -> list[str]:
    """One line per checkpoint: ordinal, kind, status, id, counts or reason."""
    lines = []
    for c in checkpoints:
        s = c.get("summary") or {}
        if c["status"] in ("captured", "stale") and not c.get("baseCheckpointId"):
            # Nothing before it to count against (issue 28 item 7): its diff is the whole workspace.
            what = "the whole workspace (no checkpoint before it; its diff lists every file)"
        elif c["status"] in ("captured", "stale"):  # a stale one still holds its files
            n = s.get("filesChanged", 0)
            what = f"{n} {'file' if n == 1 else 'files'} +{s.get('insertions', 0)} -{s.get('deletions', 0)}"
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


def run_checkpoint(daemon: DaemonConnection, run_id: str) -> str:
    """The checkpoint of run ``run_id`` (``Run.checkpointId``).

    Raises:
        CliError: the run has none (it never started, or ended before checkpoints).
    """
    run = daemon.call("run.get", runId=run_id)["run"]
    if not run.get("checkpointId"):
        raise CliError(f"run {run_id} has no checkpoint (it is {run['status']}: "
                       "a run gets one when it ends after it started)")
    return run["checkpointId"]


def cmd_diff(args: argparse.Namespace) -> int:
    box: dict[str, Any] = {}

    def go(daemon: DaemonConnection) -> int:
        checkpoint = args.checkpoint
        if checkpoint.startswith(RUN_PREFIX) and not args.base:
            # What the run changed: its checkpoint, or the captures around a run cut off (run.diff).
            box.update(daemon.call("run.diff", runId=checkpoint))
            return 0
        # A run id resolves to the run's checkpoint, on the same connection.
        if checkpoint.startswith(RUN_PREFIX):
            checkpoint = run_checkpoint(daemon, checkpoint)
        params: dict[str, Any] = {"checkpointId": checkpoint}
        if args.base:
            params["baseCheckpointId"] = run_checkpoint(daemon, args.base) if args.base.startswith(RUN_PREFIX) else args.base
        box.update(daemon.call("checkpoint.diff", **params))
        return 0

    with_daemon(args, go)
    result = box
    if args.json:
        print_json(result)
    if result.get("approximate") == "between_baselines":
        print(f"agentd: run {result['runId']} was cut off before its own checkpoint; this is the change from "
              f"{result['baseCheckpointId']} (before it) to {result['checkpointId']} (the next capture after it), "
              "so anything else that changed the folder in between is in it too", file=sys.stderr)
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
            detail = f": {in_cli_terms(item['detail'])}" if item.get("detail") else ""
            print(f"  not restored: {item['path']} ({item['reason']}{detail})")
    return 0 if result["complete"] else 1

"""Commands that control runs and answer requests: ``stop``, ``interrupt``,
``release``, ``cancel``, ``reorder``, ``approve``, ``answer`` and
``implement``. Each prints what the daemon did in one line (``--json``: the
daemon's answer)."""

from __future__ import annotations

import argparse
from typing import Any, Callable

from agentd.protocol.errors import AgentdError

from .common import EXIT_USAGE, CliError, print_json, with_daemon
from .connection import DaemonConnection
from .render import answer_command, plural


def simple_call(method: str, build: Callable[[argparse.Namespace], dict[str, Any]],
                show: Callable[[dict[str, Any]], str]) -> Callable[[argparse.Namespace], int]:
    """A command that makes one call and prints its answer."""

    def command(args: argparse.Namespace) -> int:
        params = build(args)

        def go(daemon: DaemonConnection) -> int:
            result = daemon.call(method, **params)
            print_json(result) if args.json else print(show(result))
            return 0

        return with_daemon(args, go)

    return command


def _stopped(r: dict[str, Any]) -> str:
    what = f"interrupt requested for {r['interruptedRunId']}" if r["interruptedRunId"] else "no run was active"
    return f"stopped: {what}; runs queued before now are held (`agentd release {r['threadId']}` starts them)"


cmd_stop = simple_call("thread.stop", lambda a: {"threadId": a.thread}, _stopped)
_interrupt_run = simple_call(
    "run.interrupt", lambda a: {"runId": a.run, "holdQueue": a.hold_queue},
    lambda r: f"interrupt requested for {r['runId']}" + (" (queue held)" if r["queueHeld"] else ""),
)


def _node_interrupted(r: dict[str, Any]) -> str:
    how = ("its runtime was asked" if r["via"] == "provider"
           else f"cancelling the {plural(len(r['taskIds']), 'task')} it delegated: {', '.join(r['taskIds'])}")
    return f"interrupt requested for node {r['nodeId']} ({how}); run {r['runId']} goes on"


_interrupt_node = simple_call("node.interrupt", lambda a: {"nodeId": a.run}, _node_interrupted)


def cmd_interrupt(args: argparse.Namespace) -> int:
    """``agentd interrupt RUN`` interrupts a run; ``agentd interrupt NODE``
    (a ``nod_`` id) one running node of it (a tool, a subagent)."""
    if args.run.startswith("nod_"):
        if args.hold_queue:
            raise SystemExit("agentd interrupt: --hold-queue is for a run, not a node")
        return _interrupt_node(args)
    return _interrupt_run(args)
cmd_retry = simple_call(
    "run.retry", lambda a: {"runId": a.run},
    lambda r: f"run {r['runId']} retried as attempt {r['attemptNumber']} ({r['attemptId']}); "
    "`agentd events` follows it",
)
cmd_release = simple_call(
    "thread.queue.release", lambda a: {"threadId": a.thread},
    lambda r: f"queue released on {r['threadId']}: held runs start in order"
    + (f" ({plural(len(r['queuedRunIds']), 'run')} still queued)" if r["queuedRunIds"] else ""),
)
cmd_cancel = simple_call("queued-run.cancel", lambda a: {"runId": a.run}, lambda r: f"{r['runId']} {r['status']}")
cmd_reorder = simple_call(
    "queued-run.reorder", lambda a: {"threadId": a.thread, "runIds": a.runs},
    lambda r: "queue: " + (", ".join(r["queuedRunIds"]) or "empty"),
)
cmd_implement = simple_call(
    "plan.implement", lambda a: {"planId": a.plan, "mode": "new_thread" if a.new_thread else "new_run"},
    lambda r: (f"run {r['runId']} implements {r['planId']} on {r['threadId']}" if r.get("runId")
               else f"thread {r['threadId']} implements {r['planId']}")
    + f"; `agentd show {r['threadId']}` follows it",
)


# -- answering requests ------------------------------------------------------------------


def find_request(daemon: DaemonConnection, request_id: str) -> dict[str, Any] | None:
    """A pending request by id (only threads that wait can have one)."""
    waiting = [t["id"] for t in daemon.call("thread.list")["threads"] if t.get("status") == "waiting"]
    for found in daemon.call_all(("thread.requests", {"threadId": t}) for t in waiting):
        for request in found["requests"]:
            if request["id"] == request_id:
                return request
    return None


def _respond(daemon: DaemonConnection, args: argparse.Namespace, method: str, params: dict[str, Any]) -> int:
    try:
        result = daemon.call(method, **params)
    except AgentdError as exc:
        if exc.kind != "invalid_params" or exc.data.get("field") != "requestId":
            raise
        # The request is of the other kind: say which command answers it.
        request = find_request(daemon, args.request)
        if method == "approval.respond":
            command = answer_command(request) if request else f"agentd answer {args.request} KEY=VALUE…"
            raise CliError(f"request {args.request} is a question, not an approval; answer it with `{command}`") from None
        command = answer_command(request) if request else f"agentd approve {args.request}"
        raise CliError(f"request {args.request} is an approval, not a question; answer it with `{command}`") from None
    print_json(result) if args.json else print(f"{result['requestId']} {result['status']}")
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    decision = "decline" if args.deny else "acceptForSession" if args.always else "accept"
    params = {"requestId": args.request, "decision": decision}
    return with_daemon(args, lambda daemon: _respond(daemon, args, "approval.respond", params))


def parse_answers(pairs: list[str], request_id: str) -> dict[str, str | list[str]]:
    """``key=value`` pairs; a key given twice has a list of values."""
    answers: dict[str, str | list[str]] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(f"answers are KEY=VALUE, not {pair!r}: e.g. `agentd answer {request_id} color=blue` "
                           "(`agentd requests THREAD` shows the keys)", EXIT_USAGE)
        if key in answers:
            previous = answers[key]
            answers[key] = [*previous, value] if isinstance(previous, list) else [previous, value]
        else:
            answers[key] = value
    return answers


def cmd_answer(args: argparse.Namespace) -> int:
    params = {"requestId": args.request, "answers": parse_answers(args.answers, args.request)}
    return with_daemon(args, lambda daemon: _respond(daemon, args, "user-input.respond", params))

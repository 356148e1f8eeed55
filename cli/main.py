"""The ``agentd`` command line: the daemon itself and a client for people.

    agentd serve                     run the daemon in the foreground
    agentd demo                      a short end-to-end tour on the scripted agent
    agentd new [--title T] [--workspace DIR] [--provider P]
    agentd send THREAD TEXT [--steer|--restart|--queue]   stream the answer until the run ends
    agentd stop THREAD | interrupt RUN [--hold-queue] | approve REQUEST [--deny] | answer REQUEST k=v…
    agentd threads | show THREAD | events [--thread T] [--after SEQ] [--follow] | status
    agentd fork THREAD [--from RUN|latest] [--side] | lineage THREAD | handoff HANDOFF   (lineage_cmds.py)

``--json`` makes read commands print JSON for scripts.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

import trio

from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError

from .lineage_cmds import add_lineage_commands

TERMINAL_RUN = ("completed", "failed", "interrupted", "cancelled", "rolled_back")


def _paths(args: argparse.Namespace, config: str | None = None):
    from agentd.supervisor.paths import Paths  # the daemon side, only where needed

    return Paths.resolve(args.data_dir, args.socket, config)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


# -- serve ------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    from agentd.actors.config import ConfigError, load_config
    from agentd.supervisor.daemon import DaemonAlreadyRunning, DaemonOptions, run_daemon

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    paths = _paths(args, args.config)
    try:
        config = load_config(paths.config, optional=paths.config_is_default)
        paths.check_socket()
        if args.idle_timeout is not None and args.idle_timeout <= 0:
            raise ValueError("--idle-timeout must be a positive number of seconds")
    except (ConfigError, ValueError) as exc:
        print(f"agentd: {exc}", file=sys.stderr)
        return 2

    def on_ready(daemon) -> None:
        where = f"{paths.socket}" + (f" and {daemon.router.websocket_url}" if daemon.router.websocket_url else "")
        print(f"agentd {os.getpid()} listening on {where}", file=sys.stderr, flush=True)
        if args.ready_fd is not None:
            os.write(args.ready_fd, b"ready\n")
            os.close(args.ready_fd)

    try:
        options = DaemonOptions(paths=paths, config=config, idle_timeout=args.idle_timeout,
                                websocket_port=args.websocket_port, lifeline_fd=_take_lifeline())
        trio.run(run_daemon, options, on_ready)
    except (DaemonAlreadyRunning, OSError) as exc:
        print(f"agentd: {exc}", file=sys.stderr)
        return 1
    return 0


def _take_lifeline() -> int | None:
    """The read end of a launcher's lifeline (``agentd.launch``), if this
    daemon was started by one; kept from the agents this daemon starts."""
    from agentd.launch import LIFELINE_ENV

    value = os.environ.pop(LIFELINE_ENV, None)
    if value is None:
        return None
    fd = int(value)
    os.set_inheritable(fd, False)
    os.set_blocking(fd, False)
    return fd


# -- client commands ------------------------------------------------------------------


async def _with_client(args: argparse.Namespace, fn) -> int:
    socket = _paths(args).socket
    try:
        async with Client.connect(socket) as client:
            return await fn(client)
    except (FileNotFoundError, ConnectionRefusedError):
        print(f"agentd: no daemon is listening on {socket}; start one with `agentd serve`", file=sys.stderr)
        return 1
    except AgentdError as exc:
        print(f"agentd: {exc.message}", file=sys.stderr)
        return 1


def cmd_new(args: argparse.Namespace) -> int:
    async def go(client: Client) -> int:
        params = {k: v for k, v in (("title", args.title), ("workspace", args.workspace), ("provider", args.provider)) if v}
        if params.get("workspace"):
            params["workspace"] = os.path.abspath(params["workspace"])
        result = await client.call("thread.create", **params)
        _print_json(result) if args.json else print(result["threadId"])
        return 0

    return trio.run(_with_client, args, go)


class AnswerPrinter:
    """Prints a run's assistant text as it streams, from live deltas and the
    durable appends alike, each character once."""

    def __init__(self, out=sys.stdout) -> None:
        self.out = out
        self.printed: dict[str, int] = {}
        self.last_message: str | None = None

    def text(self, message_id: str, offset: int, text: str) -> None:
        done = self.printed.get(message_id, 0)
        if offset + len(text) <= done or offset > done:
            return  # already shown, or a gap the durable append will fill
        if self.last_message is not None and self.last_message != message_id and message_id not in self.printed:
            self.out.write("\n")
        self.out.write(text[done - offset :])
        self.out.flush()
        self.printed[message_id] = offset + len(text)
        self.last_message = message_id


def describe_request(request: dict[str, Any]) -> str:
    detail = request.get("detail", {})
    if request["kind"] == "approval":
        return f"approval needed: {detail.get('command') or detail.get('kind') or 'an action'}"
    questions = "; ".join(q.get("question", "") for q in detail.get("questions", []))
    return f"question: {questions}"


def describe_node_event(event: dict[str, Any]) -> str | None:
    """A one-line description of an activity, or None for events not shown."""
    kind, _, phase = event["type"].rpartition(".")
    node = event["payload"].get("node")
    if node is None or kind in ("root_turn", "approval", "user_input_request") or "request" in event["payload"]:
        return None
    title = node.get("title") or kind
    return f"[{kind}] {title}: {phase}"


async def ask_person(request: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """Ask at the terminal; return the params of the answer, or None to skip."""
    detail = request.get("detail", {})
    if kind == "approval":
        what = detail.get("command") or detail.get("kind") or "an action"
        reply = await trio.to_thread.run_sync(input, f"approve {what}? [y/N] ")
        return {"requestId": request["id"], "decision": "accept" if reply.strip().lower() in ("y", "yes") else "decline"}
    answers = {}
    for question in detail.get("questions", []):
        options = f" ({'/'.join(map(str, question.get('options', [])))})" if question.get("options") else ""
        answers[question["id"]] = (await trio.to_thread.run_sync(input, f"{question['question']}{options} ")).strip()
    return {"requestId": request["id"], "answers": answers}


async def stream_run(
    client: Client, thread_id: str, text: str, *, after_seq: int, out=sys.stdout,
    dispatch_mode: dict[str, Any] | None = None, interactive: bool = False,
) -> dict[str, Any]:
    """Send ``text`` and print the answer until its run ends; return the run.
    Approvals and questions are shown inline, and answered here when
    ``interactive`` (a terminal is attached)."""
    printer = AnswerPrinter(out)
    async with client.subscribe(thread_id=thread_id, after_seq=after_seq) as events:
        params: dict[str, Any] = {"threadId": thread_id, "text": text}
        if dispatch_mode is not None:
            params["dispatchMode"] = dispatch_mode
        sent = await client.call("thread.message.send", **params)
        run_id = sent["runId"]
        async for event in events:
            if event.get("runId") != run_id:
                continue
            kind = event["type"]
            payload = event["payload"]
            if kind in ("message.delta", "message.appended"):
                printer.text(payload["messageId"], payload["offset"], payload["text"])
                continue
            if printer.last_message is not None and kind != "message.created":
                out.write("\n")
                printer.last_message = None
            if kind in ("approval.requested", "user_input.requested"):
                request = payload["request"]
                out.write(f"[{describe_request(request)}] {request['id']}\n")
                out.flush()
                if interactive:
                    answer = await ask_person(request, request["kind"])
                    method = "approval.respond" if request["kind"] == "approval" else "user-input.respond"
                    await client.call(method, **answer)
                else:
                    verb = "agentd approve ID [--deny]" if request["kind"] == "approval" else "agentd answer ID key=value…"
                    out.write(f"  answer with: {verb}\n")
            elif (line := describe_node_event(event)) is not None:
                out.write(line + "\n")
                out.flush()
            elif kind.startswith("run.") and payload.get("run", {}).get("status") in TERMINAL_RUN:
                out.flush()
                return payload["run"]
        raise AgentdError(f"the event stream ended before run {run_id} finished (resync after {events.resync_after})")


def cmd_send(args: argparse.Namespace) -> int:
    async def go(client: Client) -> int:
        status = await client.call("daemon.status")
        mode = None
        if args.queue:
            mode = {"type": "queue_after_active"}
        elif args.steer or args.restart:
            thread = (await client.call("thread.get", threadId=args.thread))["thread"]
            if not thread["activeRunId"]:
                print(f"agentd: thread {args.thread} has no active run to steer", file=sys.stderr)
                return 1
            mode = {"type": "steer_active" if args.steer else "restart_active", "targetRunId": thread["activeRunId"]}
        run = await stream_run(client, args.thread, args.text, after_seq=status["lastSeq"], dispatch_mode=mode,
                               interactive=sys.stdin.isatty())
        reason = f" ({run['reason']})" if run.get("reason") else ""
        print(f"run {run['ordinal']} {run['status']}{reason}", file=sys.stderr)
        return 0 if run["status"] == "completed" else 1

    return trio.run(_with_client, args, go)


def _simple_call(method: str, build, show) -> Any:
    def command(args: argparse.Namespace) -> int:
        async def go(client: Client) -> int:
            result = await client.call(method, **build(args))
            _print_json(result) if args.json else print(show(result))
            return 0

        return trio.run(_with_client, args, go)

    return command


cmd_stop = _simple_call(
    "thread.stop", lambda a: {"threadId": a.thread},
    lambda r: f"stopped: queue held, interrupt requested for {r['interruptedRunId'] or 'no active run'}",
)
cmd_interrupt = _simple_call(
    "run.interrupt", lambda a: {"runId": a.run, "holdQueue": a.hold_queue},
    lambda r: f"interrupt requested for {r['runId']}" + (" (queue held)" if r["queueHeld"] else ""),
)
cmd_approve = _simple_call(
    "approval.respond", lambda a: {"requestId": a.request, "decision": "decline" if a.deny else "accept"},
    lambda r: f"{r['requestId']} {r['status']}",
)


def _answers(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"agentd: answers are key=value, not {pair!r}")
        out[key] = value
    return out


cmd_answer = _simple_call(
    "user-input.respond", lambda a: {"requestId": a.request, "answers": _answers(a.answers)},
    lambda r: f"{r['requestId']} {r['status']}",
)


def cmd_threads(args: argparse.Namespace) -> int:
    async def go(client: Client) -> int:
        threads = (await client.call("thread.list"))["threads"]
        if args.json:
            _print_json(threads)
        for t in [] if args.json else threads:
            print(f"{t['id']}  {t['status']:8} {t['provider']:10} runs={t['runCount']:<4} {t['title']}")
        return 0

    return trio.run(_with_client, args, go)


def render_tree(thread: dict[str, Any], runs: list[dict[str, Any]]) -> list[str]:
    """The thread, its runs, attempts and nodes as an indented tree."""
    lines = [f"{thread['id']} \"{thread['title']}\" provider={thread['provider']} status={thread['status']}"]
    for r_index, detail in enumerate(runs):
        run = detail["run"]
        last_run = r_index == len(runs) - 1
        branch, stem = ("└─", "   ") if last_run else ("├─", "│  ")
        reason = f" reason={run['reason']}" if run.get("reason") else ""
        lines.append(f"{branch} run {run['ordinal']} {run['id']} {run['status']}{reason}")
        children = [("attempt", a) for a in detail["attempts"]]
        nodes = detail["nodes"]
        by_parent: dict[str | None, list[dict]] = {}
        for node in nodes:
            by_parent.setdefault(node.get("parentNodeId"), []).append(node)
        children += [("node", n) for n in by_parent.get(None, [])]
        for c_index, (what, item) in enumerate(children):
            last = c_index == len(children) - 1
            b = "└─" if last else "├─"
            if what == "attempt":
                pt = f" providerThread={item['providerThreadId']}" if item.get("providerThreadId") else ""
                lines.append(f"{stem}{b} attempt {item['number']} ({item['reason']}) {item['status']}{pt}")
            else:
                _render_node(lines, item, by_parent, stem + b, stem + ("   " if last else "│  "))
    return lines


def _render_node(lines: list[str], node: dict, by_parent: dict, head: str, stem: str) -> None:
    summary = f" — {node['summary']}" if node.get("summary") else ""
    lines.append(f"{head} {node['kind']} {node['title']} {node['status']}{summary}")
    kids = by_parent.get(node["id"], [])
    for index, child in enumerate(kids):
        last = index == len(kids) - 1
        _render_node(lines, child, by_parent, stem + ("└─" if last else "├─"), stem + ("   " if last else "│  "))


def cmd_show(args: argparse.Namespace) -> int:
    async def go(client: Client) -> int:
        detail = await client.call("thread.get", threadId=args.thread)
        runs = [await client.call("run.get", runId=r["id"]) for r in detail["runs"]]
        if args.json:
            _print_json({**detail, "runs": runs})
            return 0
        for line in render_tree(detail["thread"], runs):
            print(line)
        for message in detail["messages"]:
            print(f"  {message['role']:>9} [{message['status']}]: {message['text'][:200]}")
        return 0

    return trio.run(_with_client, args, go)


def cmd_events(args: argparse.Namespace) -> int:
    async def go(client: Client) -> int:
        async with client.subscribe(thread_id=args.thread, after_seq=args.after) as events:
            target = (await client.call("daemon.status"))["lastSeq"]
            if not args.follow and target <= args.after:
                return 0
            async for event in events:
                if args.json:
                    print(json.dumps(event), flush=True)
                elif not event.get("ephemeral"):
                    print(f"{event['seq']:>8} {event['type']:24} {event.get('threadId') or '-'} {event.get('runId') or '-'}", flush=True)
                if not args.follow and not event.get("ephemeral") and event["seq"] >= target:
                    return 0
            if events.resync_after is not None:
                print(f"agentd: fell behind; resume with --after {events.resync_after}", file=sys.stderr)
                return 1
        return 0

    return trio.run(_with_client, args, go)


def cmd_status(args: argparse.Namespace) -> int:
    async def go(client: Client) -> int:
        status = await client.call("daemon.status")
        if args.json:
            _print_json(status)
            return 0
        print(f"agentd {status['version']} pid {status['pid']} up {status['uptime']:.0f}s, last seq {status['lastSeq']}")
        print(f"loaded threads: {len(status['loadedActors'])}, subscribers: {status['subscribers']}")
        for session in status["sessions"]:
            print(f"  session {session['id']} {session['provider']} {session['status']} pid={session['pid']} thread={session['threadId']}")
        return 0

    return trio.run(_with_client, args, go)


def cmd_providers(args: argparse.Namespace) -> int:
    async def go(client: Client) -> int:
        providers = (await client.call("providers.list"))["providers"]
        if args.json:
            _print_json(providers)
            return 0
        for p in providers:
            state = f"{p.get('version', '?')} at {p.get('binary', '?')}" if p["usable"] else f"UNUSABLE: {p.get('why')}"
            off = [k for k, v in p["capabilities"].items() if not v]
            print(f"{p['name']:12} {p['kind']:9} {state}" + (f"  (off: {', '.join(off)})" if off else ""))
        return 0

    return trio.run(_with_client, args, go)


def cmd_demo(args: argparse.Namespace) -> int:
    from agentd.demo import run_demo

    return run_demo(args)


# -- parser -------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """Each command takes only the options it uses: ``--config`` is the
    daemon's (``serve``), ``--json`` belongs to commands that print a result."""
    daemon = argparse.ArgumentParser(add_help=False)  # where the daemon is (every command but demo)
    daemon.add_argument("--data-dir", help="state directory (default $AGENTD_DATA_DIR or $XDG_STATE_HOME/agentd)")
    daemon.add_argument("--socket", help="Unix socket path (default $XDG_RUNTIME_DIR/agentd/agentd.sock)")
    results = argparse.ArgumentParser(add_help=False, parents=[daemon])  # client commands that print a result
    results.add_argument("--json", action="store_true", help="print the result as JSON")
    parser = argparse.ArgumentParser(prog="agentd", description="A local daemon that runs coding agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("serve", parents=[daemon], help="run the daemon in the foreground")
    p.add_argument("--config", help="config file (default $AGENTD_CONFIG or <data-dir>/config.toml)")
    p.add_argument("--ready-fd", type=int, help="write 'ready' to this fd once listening")
    p.add_argument("--idle-timeout", type=float, help="seconds an idle provider session lives (default 600)")
    p.add_argument("--websocket-port", type=int, help="also serve on ws://127.0.0.1:PORT/ (0: any free port)")
    p.add_argument("-v", "--verbose", action="store_true")
    p.set_defaults(fn=cmd_serve)

    p = sub.add_parser("demo", help="a short end-to-end demo on a fresh daemon")
    p.add_argument("--data-dir", help="the demo daemon's state directory, kept afterwards (default: a temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the demo's data dir")
    p.set_defaults(fn=cmd_demo)

    p = sub.add_parser("new", parents=[results], help="create a thread")
    p.add_argument("--title")
    p.add_argument("--workspace")
    p.add_argument("--provider")
    p.set_defaults(fn=cmd_new)

    p = sub.add_parser("send", parents=[daemon], help="send a message and stream the answer")
    p.add_argument("thread")
    p.add_argument("text")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--steer", action="store_true", help="steer the active run (native, or by restart)")
    how.add_argument("--restart", action="store_true", help="restart the active run with this message")
    how.add_argument("--queue", action="store_true", help="run after the active run (the default when busy)")
    p.set_defaults(fn=cmd_send)

    p = sub.add_parser("stop", parents=[results], help="the Stop button: hold the queue, interrupt, stop delegated tasks")
    p.add_argument("thread")
    p.set_defaults(fn=cmd_stop)

    p = sub.add_parser("interrupt", parents=[results], help="interrupt a running run")
    p.add_argument("run")
    p.add_argument("--hold-queue", action="store_true", help="also hold the thread's queue")
    p.set_defaults(fn=cmd_interrupt)

    p = sub.add_parser("approve", parents=[results], help="answer an approval request")
    p.add_argument("request")
    p.add_argument("--deny", action="store_true")
    p.set_defaults(fn=cmd_approve)

    p = sub.add_parser("answer", parents=[results], help="answer a user-input request")
    p.add_argument("request")
    p.add_argument("answers", nargs="+", metavar="key=value")
    p.set_defaults(fn=cmd_answer)

    p = sub.add_parser("threads", parents=[results], help="list threads")
    p.set_defaults(fn=cmd_threads)

    p = sub.add_parser("show", parents=[results], help="a thread's runs, attempts and nodes as a tree")
    p.add_argument("thread")
    p.set_defaults(fn=cmd_show)

    p = sub.add_parser("events", parents=[results], help="print the event log")
    p.add_argument("--thread")
    p.add_argument("--after", type=int, default=0)
    p.add_argument("--follow", action="store_true")
    p.set_defaults(fn=cmd_events)

    p = sub.add_parser("providers", parents=[results], help="provider instances, their binaries and capabilities")
    p.set_defaults(fn=cmd_providers)

    p = sub.add_parser("status", parents=[results], help="daemon status")
    p.set_defaults(fn=cmd_status)

    add_lineage_commands(sub, results=results)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

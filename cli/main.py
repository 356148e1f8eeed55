"""The ``agentd`` command line: the daemon itself and a client for people.

    agentd serve                     run the daemon in the foreground
    agentd mcp [--thread THREAD]     agentd's MCP server on stdio (what agents delegate through)
    agentd demo                      a short end-to-end tour on the scripted agent
    agentd new [--title T] [--workspace DIR] [--provider P]
    agentd send THREAD TEXT|-|--file PATH [--steer|--restart|--queue] [--detach] [--merge-back FORK]
    agentd stop THREAD | interrupt RUN [--hold-queue] | release THREAD
    agentd cancel RUN | reorder THREAD RUN… | implement PLAN [--new-thread]
    agentd requests THREAD | approve REQUEST [--deny] | answer REQUEST KEY=VALUE…
    agentd threads | show THREAD | events [--thread T] [--after SEQ] [--follow] | status | providers
    agentd fork THREAD [--from RUN|latest] [--side] | lineage THREAD | handoff HANDOFF
    agentd checkpoints THREAD | diff CHECKPOINT|RUN [--base CHECKPOINT|RUN] | restore CHECKPOINT
    agentd rollback THREAD ORDINAL [--yes]
    agentd web [--no-open]           the web console's URL (`agentd serve --web` serves it)
    agentd doctor | unquarantine THREAD   corrupt records of the data dir; a quarantined thread
    agentd schema                    the protocol as one JSON Schema document

This module is the parser and the one place errors become exit codes
(common.py says which); the commands live by job in commands_*.py and
stream.py (``send``), their text output in render.py.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap

from agentd import __version__

from .commands_daemon import cmd_demo, cmd_providers, cmd_serve, cmd_status
from .commands_runs import cmd_answer, cmd_approve, cmd_cancel, cmd_implement, cmd_interrupt, cmd_release, cmd_reorder, cmd_stop
from .commands_threads import cmd_events, cmd_new, cmd_requests, cmd_show, cmd_threads
from .common import EXIT_USAGE, report
from .render import render_tree
from .stream import cmd_send, stream_run

from .lineage_cmds import add_lineage_commands
from .web_cmd import add_web_command
from .doctor_cmd import add_doctor_commands
from .schema_cmd import add_schema_command

#: ``render_tree`` and ``stream_run`` stay importable from here, as before the split
__all__ = ["build_parser", "main", "render_tree", "stream_run"]

SOCKET_HELP = ("the daemon's Unix socket (default: $AGENTD_SOCKET, else $XDG_RUNTIME_DIR/agentd/agentd.sock, "
               "else <data-dir>/run/agentd.sock)")
DATA_DIR_HELP = "the daemon's state directory (default: $AGENTD_DATA_DIR, else $XDG_STATE_HOME/agentd, else ~/.local/state/agentd)"


class HelpFormatter(argparse.HelpFormatter):
    """Wraps help text without breaking ``<data-dir>`` at its hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """Usage errors are one line too, with where to read more; exit 2."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"agentd: {message}; see `{self.prog} --help`\n")


def non_empty(what: str):
    def check(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"the {what} id is empty")
        return value

    check.__name__ = f"{what} id"
    return check


def cmd_mcp(args: argparse.Namespace) -> int:
    from .mcp_server import serve

    return serve(args.socket, args.session, args.thread)


def build_parser() -> argparse.ArgumentParser:
    """Each command takes only the options it uses: ``--config`` is the
    daemon's (``serve``), ``--json`` belongs to commands that print a result."""
    daemon = Parser(add_help=False)  # where the daemon is (every command but demo)
    daemon.add_argument("--data-dir", metavar="DIR", help=DATA_DIR_HELP)
    daemon.add_argument("--socket", metavar="PATH", help=SOCKET_HELP)
    results = Parser(add_help=False, parents=[daemon])  # client commands that print a result
    results.add_argument("--json", action="store_true", help="print the daemon's answer as JSON, for scripts")
    parser = Parser(prog="agentd", description="A local daemon that runs coding agents, and its command line.")
    parser.add_argument("--version", action="version", version=f"agentd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    thread_id, run_id = non_empty("thread"), non_empty("run")

    p = sub.add_parser("serve", parents=[daemon], help="run the daemon in the foreground")
    p.add_argument("--config", metavar="FILE", help="config file (default: $AGENTD_CONFIG, else <data-dir>/config.toml)")
    p.add_argument("--ready-fd", type=int, metavar="FD", help="write 'ready' to this descriptor once listening")
    p.add_argument("--idle-timeout", type=float, metavar="SECONDS", help="how long an idle provider session lives (default 600)")
    p.add_argument("--websocket-port", type=int, metavar="PORT", help="also serve on ws://127.0.0.1:PORT/ (0: any free port)")
    p.add_argument("--web", action="store_true",
                   help="also serve the web console on the WebSocket's port (default port 7311); `agentd web` opens it")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages too")
    p.set_defaults(fn=cmd_serve)

    p = sub.add_parser("demo", help="a short end-to-end demo on a fresh daemon")
    p.add_argument("--data-dir", metavar="DIR", help="the demo daemon's state directory, kept afterwards (default: a temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the demo's data dir")
    p.set_defaults(fn=cmd_demo)

    p = sub.add_parser("new", parents=[results], help="create a thread; prints its id")
    p.add_argument("--title", help="the thread's title")
    p.add_argument("--workspace", metavar="DIR", help="the directory the agent works in (default: a new one under the data dir)")
    p.add_argument("--provider", help="the provider instance to use (see `agentd providers`)")
    p.set_defaults(fn=cmd_new)

    p = sub.add_parser("send", parents=[daemon], help="send a message and stream the answer until the run ends")
    p.add_argument("thread", type=thread_id, help="the thread's id")
    p.add_argument("text", nargs="?", help="the message; - reads it from stdin")
    p.add_argument("--file", metavar="PATH", help="read the message from PATH (up to 1,048,576 characters)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--steer", action="store_true", help="steer the active run (native, or by restart)")
    how.add_argument("--restart", action="store_true", help="restart the active run with this message")
    how.add_argument("--queue", action="store_true", help="run after the active run (the default when busy)")
    p.add_argument("--detach", action="store_true", help="return once the run is accepted, printing its id")
    p.add_argument("--provider", metavar="NAME",
                   help="run this message on another configured provider; the thread moves to it with a context handoff")
    p.add_argument("--clean-context", action="store_true",
                   help="start on a fresh provider thread given a summary of the whole thread")
    p.add_argument("--merge-back", metavar="FORK", type=thread_id,
                   help="bring what FORK (a fork of THREAD) concluded and changed since its fork point (or its last "
                        "merge-back) with this message; no files are copied")
    p.set_defaults(fn=cmd_send)

    p = sub.add_parser("stop", parents=[results], help="the Stop button: interrupt, hold what is queued, stop delegated tasks")
    p.add_argument("thread", type=thread_id, help="the thread's id")
    p.set_defaults(fn=cmd_stop)

    p = sub.add_parser("interrupt", parents=[results], help="interrupt a running run")
    p.add_argument("run", type=run_id, help="the run's id")
    p.add_argument("--hold-queue", action="store_true", help="also hold the thread's queued runs (as stop does)")
    p.set_defaults(fn=cmd_interrupt)

    p = sub.add_parser("release", parents=[results], help="start the runs a stop held")
    p.add_argument("thread", type=thread_id, help="the thread's id")
    p.set_defaults(fn=cmd_release)

    p = sub.add_parser("cancel", parents=[results], help="cancel a queued run (its text is kept)")
    p.add_argument("run", type=run_id, help="the queued run's id")
    p.set_defaults(fn=cmd_cancel)

    p = sub.add_parser("reorder", parents=[results], help="set the order queued runs start in")
    p.add_argument("thread", type=thread_id, help="the thread's id")
    p.add_argument("runs", nargs="+", type=run_id, metavar="RUN", help="every queued run of the thread, in the new order")
    p.set_defaults(fn=cmd_reorder)

    p = sub.add_parser("requests", parents=[results], help="what waits for an answer on a thread, and how to answer")
    p.add_argument("thread", type=thread_id, help="the thread's id")
    p.set_defaults(fn=cmd_requests)

    p = sub.add_parser("approve", parents=[results], help="answer an approval request")
    p.add_argument("request", type=non_empty("request"), help="the request's id")
    p.add_argument("--deny", action="store_true", help="decline instead of accept")
    p.set_defaults(fn=cmd_approve)

    p = sub.add_parser("answer", parents=[results], help="answer a question (a user-input request)")
    p.add_argument("request", type=non_empty("request"), help="the request's id")
    p.add_argument("answers", nargs="+", metavar="KEY=VALUE", help="one answer per question (a key twice: several values)")
    p.set_defaults(fn=cmd_answer)

    p = sub.add_parser("implement", parents=[results], help="start work from a proposed plan")
    p.add_argument("plan", type=non_empty("plan"), help="the plan's id (see `agentd show THREAD`)")
    p.add_argument("--new-thread", action="store_true", help="in a new child thread instead of a new run here")
    p.set_defaults(fn=cmd_implement)

    p = sub.add_parser("threads", parents=[results], help="list threads with their status and queues")
    p.set_defaults(fn=cmd_threads)

    p = sub.add_parser("show", parents=[results], help="a thread: runs, attempts and nodes as a tree, then its messages")
    p.add_argument("thread", type=thread_id, help="the thread's id")
    p.set_defaults(fn=cmd_show)

    p = sub.add_parser("events", parents=[results], help="print the event log")
    p.add_argument("--thread", type=thread_id, help="only this thread's events")
    p.add_argument("--after", type=int, default=0, metavar="SEQ", help="start after this sequence number")
    p.add_argument("--follow", action="store_true", help="keep printing new events until Ctrl-C")
    p.set_defaults(fn=cmd_events)

    p = sub.add_parser("providers", parents=[results], help="provider instances, their binaries and capabilities")
    p.set_defaults(fn=cmd_providers)

    p = sub.add_parser("status", parents=[results], help="the daemon's pid, socket, WebSocket and sessions")
    p.set_defaults(fn=cmd_status)

    from agentd.checkpoint_cmds import add_checkpoint_commands  # checkpoints, diff, restore

    add_checkpoint_commands(sub, results)
    from agentd.rollback_cmd import add_rollback_command

    add_rollback_command(sub, results)

    add_lineage_commands(sub, results=results)
    add_web_command(sub, results)
    add_doctor_commands(sub, results, thread_id)
    add_schema_command(sub)
    p = sub.add_parser("mcp", help="agentd's MCP server on stdio (delegate_task, task_result) for agents (SPEC F9)")
    p.add_argument("--socket", metavar="PATH", help="the daemon's Unix socket (default: $AGENTD_SOCKET)")
    p.add_argument("--session", metavar="SESSION",
                   help="the provider session that delegates (default: $AGENTD_SESSION_ID; its credential comes from "
                        "the file $AGENTD_TOOL_CREDENTIAL names)")
    p.add_argument("--thread", metavar="THREAD", type=non_empty("thread"),
                   help="delegate from this thread (for an MCP client agentd did not start)")
    p.set_defaults(fn=cmd_mcp)
    return parser


def check_utf8(argv: list[str]) -> str | None:
    """A usage error for the first argument that is not UTF-8, or None."""
    for index, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return f"argument {index} ({os.fsencode(arg)!r}) is not valid UTF-8; agentd takes UTF-8 text"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    problem = check_utf8(argv)
    if problem is not None:
        print(f"agentd: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        args = build_parser().parse_args(argv)
        return args.fn(args)
    except BaseException as exc:  # noqa: BLE001 - every error ends here, as one line and an exit code
        return report(exc)


if __name__ == "__main__":
    sys.exit(main())

"""The ``agentd`` command line: the daemon itself and a client for people.

    agentd serve                     run the daemon in the foreground
    agentd mcp [--thread THREAD]     agentd's MCP tools on stdio (a relay to the daemon's endpoint)
    agentd acp                       agentd as an editor's ACP agent on stdio (Zed, JetBrains, Neovim)
    agentd demo                      a short end-to-end tour on the scripted agent
    agentd new [--title T] [--workspace DIR] [--provider P]
    agentd send THREAD TEXT|-|--file PATH [--steer|--restart|--queue] [--detach] [--merge-back FORK [--files [--markers]]]
    agentd stop THREAD | interrupt RUN [--hold-queue] | retry RUN | release THREAD
    agentd cancel RUN | reorder THREAD RUN… | implement PLAN [--new-thread]
    agentd requests THREAD | approve REQUEST [--deny|--always] | answer REQUEST KEY=VALUE…
    agentd threads | show THREAD | events [--thread T] [--after SEQ] [--follow] | status | providers
    agentd fork THREAD [--from RUN|latest] [--side] | lineage THREAD | handoff HANDOFF
    agentd checkpoints THREAD | diff CHECKPOINT|RUN [--base CHECKPOINT|RUN] | restore CHECKPOINT
    agentd rollback THREAD ORDINAL [--yes]
    agentd web [--no-open]           the web console's URL (`agentd serve --web` serves it)
    agentd doctor | unquarantine THREAD   corrupt records of the data dir; a quarantined thread
    agentd archive THREAD | unarchive THREAD   hide a thread (its worktree goes after a checkpoint) and back
    agentd completion bash|zsh|fish  a shell completion script
    agentd schema                    the protocol as one JSON Schema document

Options go anywhere on a command's line. This module is the parser's root
and the one place errors become exit codes (common.py says which); the
commands and their arguments are in commands.py, by group, and each loads
its implementation only when it runs (commands_*.py, stream.py for
``send``, …; their text output in render.py): ``agentd --version``,
``agentd threads`` and ``agentd show`` never import trio or the daemon.
"""

from __future__ import annotations

import os
import sys

from agentd import __version__

TYPE_CHECKING = False  # not typing's: `agentd mcp` starts without loading it
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

__all__ = ["build_parser", "main"]

#: the exit code of a usage error (parser.EXIT_USAGE, which loads argparse)
EXIT_USAGE = 2


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``agentd`` parser: every command of every group, or — ``only``
    — just that command, if there is one of that name (what one run parses)."""
    from .commands import GROUPS
    from .parser import CommandParser, Options, Parser, Subcommands

    parser = Parser(prog="agentd", description="A local daemon that runs coding agents, and its command line.")
    parser.add_argument("--version", action="version", version=f"agentd {__version__}")
    action = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=CommandParser)
    options = Options()
    for add_group in GROUPS:
        add_group(Subcommands(action, only), options)
    if only is not None and only not in action.choices:
        return build_parser()  # not a command: the error lists them all
    return parser


def cmd_mcp(args: argparse.Namespace) -> int:
    from .mcp_server import serve

    return serve(args.socket, args.session, args.thread)


def mcp_relay_args(argv: list[str]) -> Callable[[], int] | None:
    """``agentd mcp`` with plain arguments, run before argparse and the
    commands load (the relay's start is what an MCP client waits for); None
    for any other arguments (``--help``, a mistake), which the parser takes."""
    from agentd.protocol import mcp_relay

    args = mcp_relay.parse_args(argv)
    if args is None:
        return None

    def relay() -> int:
        from .mcp_server import serve

        return serve(args.get("socket_path"), args.get("session_id"), args.get("thread_id"))

    return relay


def check_utf8(argv: list[str]) -> str | None:
    """A usage error for the first argument that is not UTF-8, or None."""
    for index, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return f"argument {index} ({os.fsencode(arg)!r}) is not valid UTF-8; agentd takes UTF-8 text"
    return None


#: options of (nearly) every command that may come before its name too:
#: ``agentd --socket S threads`` as ``agentd threads --socket S``
LEADING = {"--data-dir": 1, "--socket": 1, "--json": 0}


def command_first(argv: list[str]) -> list[str]:
    """``argv`` with the LEADING options before the command's name moved after it."""
    moved: list[str] = []
    index = 0
    while index < len(argv):
        name = argv[index].partition("=")[0]
        takes = LEADING.get(name)
        if takes is None:
            break
        width = 1 if "=" in argv[index] else 1 + takes
        moved += argv[index:index + width]
        index += width
    if not moved or index >= len(argv) or argv[index].startswith("-"):
        return argv  # nothing to move, or no command after them: argparse says what is wrong
    return [argv[index], *moved, *argv[index + 1:]]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    problem = check_utf8(argv)
    if problem is not None:
        print(f"agentd: {problem}", file=sys.stderr)
        return EXIT_USAGE
    argv = command_first(argv)
    if argv[:1] == ["mcp"] and (relay := mcp_relay_args(argv[1:])) is not None:
        return relay()
    if argv[:1] not in (["mcp"], ["acp"], ["serve"]):  # the protocols' stdio, and the daemon's log, stay as they are
        from .terminal_text import guard_terminal

        guard_terminal()  # an agent's escape codes are shown, not obeyed, at a terminal
    try:
        command = next((arg for arg in argv if not arg.startswith("-")), None)
        args = build_parser(command).parse_args(argv)
        return args.fn(args)
    except SystemExit:
        raise  # --help, --version and usage errors: argparse has printed them
    except BaseException as exc:  # noqa: BLE001 - every error ends here, as one line and an exit code
        from .common import report  # loaded once there is something to report

        return report(exc)


if __name__ == "__main__":
    sys.exit(main())

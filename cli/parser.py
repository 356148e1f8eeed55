"""The machinery of the ``agentd`` parser: one-line usage errors, options
anywhere on a command's line, argument types that refuse nonsense as usage
errors, and commands that load their implementation only when they run.

The commands themselves and their arguments are in commands.py, by group.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Sequence
from typing import Any

#: the exit code of a usage error (common.py lists them all; not imported
#: from there, which would load what the commands share)
EXIT_USAGE = 2

SOCKET_HELP = ("the daemon's Unix socket (default: $AGENTD_SOCKET, else $XDG_RUNTIME_DIR/agentd/agentd.sock, "
               "else <data-dir>/run/agentd.sock)")
DATA_DIR_HELP = "the daemon's state directory (default: $AGENTD_DATA_DIR, else $XDG_STATE_HOME/agentd, else ~/.local/state/agentd)"


class HelpFormatter(argparse.HelpFormatter):
    """Wraps help text without breaking ``<data-dir>`` at its hyphen."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap  # only --help wraps text (argparse, too, loads it only then)

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """Usage errors are one line too, with where to read more; exit 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"agentd: {message}; see `{self.prog} --help`\n")


class CommandParser(Parser):
    """A command's parser: its options may come anywhere among its
    arguments, as git's do (``agentd send T --steer "use ninja"``).

    argparse alone binds positionals greedily: after ``send T --steer`` it
    has already decided that TEXT is absent. Intermixed parsing takes the
    options out first and then the positionals, in order.
    """

    _intermixing = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        # parse_known_intermixed_args calls parse_known_args itself (twice,
        # on Python 3.11): those inner calls must be the plain ones.
        if self._intermixing:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


class Command:
    """A command's implementation, named ``module:function`` (a module of
    this package) and imported only when the command runs: ``agentd
    --version`` or ``agentd threads`` never load what ``agentd serve`` needs."""

    def __init__(self, target: str) -> None:
        self.module, _, self.function = target.partition(":")

    def __call__(self, args: argparse.Namespace) -> int:
        module = importlib.import_module(f"agentd.{self.module}")
        return getattr(module, self.function)(args)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Command) and (self.module, self.function) == (other.module, other.function)

    def __hash__(self) -> int:
        return hash((self.module, self.function))

    def __repr__(self) -> str:
        return f"Command({self.module}:{self.function})"


#: the longest id the protocol takes (``Id`` in protocol/wire.py, not imported: it loads msgspec)
MAX_ID = 128


def non_empty(what: str) -> Any:
    """An argument type: an id that is not blank, nor longer than any id."""

    def check(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(f"the {what} id is empty")
        if len(value) > MAX_ID:
            raise argparse.ArgumentTypeError(f"the {what} id is {len(value)} characters; an id has at most {MAX_ID}")
        return value

    check.__name__ = f"{what} id"
    return check


#: the longest title and search query the protocol takes (``Title`` and ``MAX_QUERY`` in protocol/wire.py)
MAX_TITLE = 500
MAX_QUERY = 1_000


def bounded_text(what: str, max_length: int, *, blank: bool = False) -> Any:
    """An argument type: text of at most ``max_length`` characters (a title,
    a search query), refused before it reaches the daemon with words a person
    reads rather than the protocol's; blank only where ``blank``."""

    def check(value: str) -> str:
        if not blank and not value.strip():
            raise argparse.ArgumentTypeError(f"the {what} is empty")
        if len(value) > max_length:
            raise argparse.ArgumentTypeError(f"the {what} is {len(value):,} characters; it may have at most {max_length:,}")
        return value

    check.__name__ = what
    return check


def counting_number(value: str) -> int:
    """An argument type: 0, 1, 2, … (a sequence number, a run's ordinal)."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; it counts from 0")
    return number


counting_number.__name__ = "number"


class Options:
    """The option sets commands share, as argparse parents: ``daemon``
    (where the daemon is: every command but ``demo``) and ``results``
    (``daemon`` and ``--json``: client commands that print a result)."""

    def __init__(self) -> None:
        self.daemon = Parser(add_help=False)
        self.daemon.add_argument("--data-dir", metavar="DIR", help=DATA_DIR_HELP)
        self.daemon.add_argument("--socket", metavar="PATH", help=SOCKET_HELP)
        self.results = Parser(add_help=False, parents=[self.daemon])
        self.results.add_argument("--json", action="store_true",
                                  help="print the daemon's answer (the method's result object) as JSON, for scripts")
        self.thread_id = non_empty("thread")
        self.run_id = non_empty("run")


class Subcommands:
    """The commands being added to the parser; with ``only``, the one
    command this run parses (building all ~30 costs ~4 ms of a 100 ms budget)."""

    def __init__(self, action: Any, only: str | None = None) -> None:
        self.action = action
        self.only = only


class Unused:
    """The parser of a command this run does not parse: its arguments are dropped."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        return None

    def add_mutually_exclusive_group(self, *args: Any, **kwargs: Any) -> Unused:
        return self


def add_command(sub: Subcommands, name: str, target: str, help: str,
                parents: Sequence[argparse.ArgumentParser] = ()) -> Any:
    """Add command ``name``, run by ``target`` (``module:function``); its
    parser, to add its arguments to."""
    if sub.only is not None and name != sub.only:
        return Unused()
    parser = sub.action.add_parser(name, parents=list(parents), help=help)
    parser.set_defaults(fn=Command(target))
    return parser

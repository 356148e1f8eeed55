"""What every client command shares: where the daemon is, one connection per
command, errors as one line a person can act on, and the exit codes.

Exit codes: 0 done; 1 an error (the daemon's sentence, or no daemon); 2 a
usage error (the command line itself is wrong); 130 interrupted with Ctrl-C;
141 the reader of the output went away (``agentd events | head``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from agentd.protocol.errors import AgentdError

from .connection import DaemonConnection
from .messages import in_cli_terms

if TYPE_CHECKING:
    from agentd.protocol.client import Client

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

TERMINAL_RUN = ("completed", "failed", "interrupted", "cancelled", "rolled_back")


class CliError(Exception):
    """An error to print as one ``agentd: …`` line, exiting with ``code``."""

    def __init__(self, message: str, code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def paths(args: argparse.Namespace, config: str | None = None):
    from agentd.supervisor.paths import Paths  # the daemon side, only where needed

    return Paths.resolve(args.data_dir, args.socket, config)


def print_json(value: dict[str, Any]) -> None:
    """``--json``: one object, the method's result as the socket answers it
    (the one rule for every command's ``--json``)."""
    assert isinstance(value, dict), "--json prints an object"
    print(json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False))


def say(line: str) -> None:
    """A status line for the person, on stderr (stdout is for results)."""
    print(line, file=sys.stderr, flush=True)


def with_daemon(args: argparse.Namespace, fn: Callable[[DaemonConnection], int]) -> int:
    """Connect to the daemon, run ``fn(daemon)`` on a blocking connection
    (connection.py: no trio to import) and return its exit code."""
    socket = paths(args).socket
    try:
        daemon = DaemonConnection.open(socket)
    except OSError as exc:
        raise _not_connected(socket, exc) from None
    with daemon:
        return fn(daemon)


def run_with_client(args: argparse.Namespace, fn: Callable[[Client], Awaitable[int]]) -> int:
    """Connect to the daemon, run ``fn(client)`` on the async client (for
    commands that stream or wait on events) and return its exit code."""
    import trio

    return trio.run(_with_client, args, fn)


async def _with_client(args: argparse.Namespace, fn: Callable[[Client], Awaitable[int]]) -> int:
    from agentd.protocol.client import Client

    socket = paths(args).socket
    connected = False
    try:
        async with Client.connect(socket) as client:
            connected = True
            return await fn(client)
    except OSError as exc:
        if connected:
            raise
        raise _not_connected(socket, exc) from None


def _not_connected(socket: Any, exc: OSError) -> CliError:
    if isinstance(exc, (FileNotFoundError, ConnectionRefusedError)):
        return CliError(f"no daemon is listening on {socket}; start one with `agentd serve`")
    return CliError(f"cannot connect to {socket}: {exc.strerror or exc}")


# -- errors as one line ---------------------------------------------------------------

#: what to do when an id names nothing, by the id's field in the error's data
NOT_FOUND_HINTS = {
    # Most specific first: "no run 9 in thread T" also names the thread.
    "targetOrdinal": "`agentd show THREAD` lists a thread's runs",
    "threadId": "`agentd threads` lists the threads",
    "runId": "`agentd show THREAD` lists a thread's runs",
    "requestId": "`agentd requests THREAD` lists what waits for an answer",
    "planId": "`agentd show THREAD` lists a thread's proposed plans",
    "messageId": "`agentd show THREAD` lists a thread's messages",
    "checkpointId": "`agentd checkpoints THREAD` lists a thread's checkpoints",
    "handoffId": "`agentd lineage THREAD` shows a thread's handoffs",
}


def describe_error(exc: AgentdError) -> str:
    """The daemon's sentence, with what to do in ``agentd`` terms where the
    daemon's own hint names a protocol method."""
    message = exc.message
    if exc.kind == "not_found":
        field = next((f for f in NOT_FOUND_HINTS if f in exc.data), None)
        if field == "threadId":
            return f"no thread {exc.data[field]}; {NOT_FOUND_HINTS[field]}"
        if field is not None:
            return f"{message.split('; ')[0]}; {NOT_FOUND_HINTS[field]}"
    if exc.kind == "connection_lost":
        return "the daemon closed the connection (did it stop?); `agentd status` tells whether it is back"
    if exc.kind == "invalid_params" and exc.data.get("field") == "text" and "length" in message:
        return "the message is too long: the limit is 1,048,576 characters"
    return in_cli_terms(message, exc.data)


def sole_error(exc: BaseException) -> BaseException:
    """The one error inside (nested) exception groups, else ``exc`` itself."""
    trio = sys.modules.get("trio")  # without trio loaded there is no trio.Cancelled to skip
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if trio is None or not isinstance(e, trio.Cancelled)]
        if len(inner) != 1:
            return exc
        exc = inner[0]
    return exc


def report(exc: BaseException) -> int:
    """Print ``exc`` as one line (or nothing, for Ctrl-C and a closed pipe)
    and return the exit code."""
    exc = sole_error(exc)
    if isinstance(exc, SystemExit):
        raise exc
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, BrokenPipeError):
        quiet_stdout()
        return EXIT_BROKEN_PIPE
    if isinstance(exc, CliError):
        line = exc.message
    elif isinstance(exc, AgentdError):
        line = describe_error(exc)
    elif isinstance(exc, Exception):
        if os.environ.get("AGENTD_DEBUG"):
            raise exc
        line = f"unexpected error ({type(exc).__name__}: {exc}); AGENTD_DEBUG=1 shows where"
    else:
        raise exc
    try:
        print(f"agentd: {line}", file=sys.stderr, flush=True)
    except BrokenPipeError:
        pass
    return exc.code if isinstance(exc, CliError) else EXIT_ERROR


def quiet_stdout() -> None:
    """After the reader closed stdout: point it at /dev/null, so that the
    interpreter's last flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass

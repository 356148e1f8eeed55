"""The Claude adapter's process lifecycle: a launcher bound late to a session,
and a fresh launcher when a resume finds nothing.

**One process, bound late.** Claude binds a process to one session at start
(``--resume`` is a command-line flag; there is no control request to switch
sessions), but ``ProviderAdapter.open`` runs before anyone knows whether the
session will start a new conversation, resume one or fork one. So ``open``
starts a *launcher*: a few lines of Python (``sys.executable -I -S -c``) that
block reading one line from stdin, ``{"type": "agentd_launch", "args": [...],
"cwd": ...}``, then ``chdir`` and ``exec`` claude with the base command plus
those args. The first primitive that knows (``start_first_turn``: no extra
args; ``resume_thread``: ``--resume ID``; ``fork_thread``: ``--resume ID
--fork-session --session-id NEW``) writes that line, and the rest of stdin is
Claude's. Because ``exec`` keeps the pid, the pid the session manager records
at ``session.ready`` (``daemon.status``, orphan cleanup after a daemon crash)
is Claude's own, and ``config.wrapper`` (e.g. ``unshare -rn …``) still goes in
front of everything. The process serves the one session it is bound to; a
second launch on the same process is refused (agentd runs one session per
thread).

**Respawn.** When a resume finds no session, Claude exits: a fresh launcher
then takes its place in the same agentd session before the launch raises
``NativeThreadMissing``, so the caller's fallback (``start_first_turn`` with a
context handoff) works on the same connection. That replacement process has a
new pid, which the session record (written once, at ``session.ready``) does
not learn; it only happens on that failure path. Claude writes a session's
file only when its first turn has ended: a crash during the first turn leaves
nothing to resume, so recovery takes this path too.

The launcher is the daemon's own Python, so a ``wrapper`` must leave it
reachable (``unshare``, ``nice``, ``env``, ``systemd-run`` do; a wrapper that
runs claude in another filesystem, e.g. a container, is not supported).

Every write and wait is bounded by the timeout; a launch that runs out of
time kills the process (the session ends, and the next message gets a fresh
one instead of a half-started one).
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any, Awaitable, Callable

import msgspec
import trio

from .base import NativeThreadMissing, ProviderRuntimeError
from .jsonl import RequestTimeout, runtime_lines, stop_process
from .runtime import StderrLog
from .transport import ProcessLike, exit_status

log = logging.getLogger(__name__)

#: reads one JSON line byte by byte (the rest of stdin is Claude's), then chdir + exec
LAUNCHER = (
    "import json,os,sys\n"
    "line=b''\n"
    "while not line.endswith(b'\\n'):\n"
    " c=os.read(0,1)\n"
    " if not c: sys.exit(0)\n"
    " line+=c\n"
    "m=json.loads(line)\n"
    "os.chdir(m['cwd'])\n"
    "a=sys.argv[1:]+m['args']\n"
    "os.execvp(a[0],a)\n"
)

#: how long the output may keep flowing after the process exited (a grandchild may hold the pipe)
DRAIN_AFTER_EXIT = 1.0
#: what Claude says (in its errors or on stderr) when there is no session to resume
_MISSING_PATTERNS = ("no conversation found", "session id", "not a uuid")
SESSION_ID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

_encoder = msgspec.json.Encoder()


def launcher_command(wrapper: list[str], claude_command: list[str]) -> list[str]:
    """``wrapper``, then the launcher (the daemon's own Python), then the
    claude command it will exec (the launch line's args go after it)."""
    return [*wrapper, sys.executable, "-I", "-S", "-c", LAUNCHER, *claude_command]


class ClaudeProcess:
    """One agentd session's claude: the launcher waiting for its launch line,
    the claude it becomes, and its replacement when a resume found nothing.

    Args:
        start: starts a launcher process (spawning :func:`launcher_command`
            with stderr to ``stderr.path``).
        stderr: the instance's stderr log (quoted when a process exits).
        timeout: bound on every write and wait (None: unbounded).
    """

    def __init__(
        self, start: Callable[[], Awaitable[ProcessLike]], *, stderr: StderrLog, timeout: float | None,
    ) -> None:
        self._start = start
        self.stderr = stderr
        self.timeout = timeout
        self.process: ProcessLike | None = None
        self.exit_status: tuple[int | None, int | None] = (None, None)
        #: the Claude session the process serves, once known
        self.session: str | None = None
        #: None: only the launcher runs; else how it was launched: "new" | "resume" | "fork"
        self.mode: str | None = None
        #: claude answered ``initialize``
        self.initialized = False
        #: why the current process takes no more input (None: it does)
        self.closed: str | None = None
        #: what claude reported before any turn (e.g. no session to resume)
        self.early_errors: list[str] = []
        self._send_lock = trio.Lock()
        self._respawn_wanted = False
        self._respawned = trio.Event()
        self._exited = trio.Event()
        self._exit_was_missing = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def bound(self) -> float:
        """The timeout as a number of seconds (infinite when unbounded)."""
        return float("inf") if self.timeout is None else self.timeout

    def bind(self, session: str) -> None:
        """Record the Claude session this process serves."""
        self.session = session

    # -- the process, and its replacement ---------------------------------------------------

    async def spawn(self) -> None:
        """Start a fresh launcher (not yet bound to any session).

        Raises:
            ProviderRuntimeError: the process could not be started.
        """
        self.stderr.mark()
        try:
            self.process = await self._start()
        except OSError as exc:
            raise ProviderRuntimeError(f"claude could not be started: {exc}") from exc
        self.mode = None
        self.initialized = False
        self.closed = None
        self.early_errors = []
        self._exited = trio.Event()

    async def run(
        self,
        *,
        name: str,
        started: Callable[[], None],
        on_line: Callable[[bytes], Awaitable[None]],
        on_exit: Callable[[str], None],
        grace: float,
    ) -> None:
        """Serve an agentd session from its first launcher to its end.

        Starts a launcher, calls ``started``, then hands each output line of
        each process to ``on_line`` until the process exits; when a resume
        found no session, a fresh launcher takes over. Returns once the last
        process has been stopped (``exit_status`` is set); never raises after
        ``started``. ``on_exit(why)`` is called at each exit and once more at
        the end, to fail whatever still waits on the process.

        Args:
            name: the agentd session id, for logs.
            grace: the shutdown ladder's grace at the end.

        Raises:
            ProviderRuntimeError: the first launcher could not be started.
        """
        await self.spawn()
        try:
            started()
            while True:
                await self._serve(on_line, on_exit)
                if not self._respawn_wanted:
                    break
                self._respawn_wanted = False
                try:
                    await self.spawn()
                except ProviderRuntimeError as exc:
                    log.warning("claude session %s: no replacement launcher: %s", name, exc)
                    break
                self._respawned.set()
        finally:
            process = self.process
            assert process is not None, "spawn() started one before the try"
            await stop_process(process, polite=self.polite_stop, grace=grace)
            self.exit_status = exit_status(process.returncode)
            on_exit("the claude session ended")
            self._respawned.set()

    async def _serve(self, on_line: Callable[[bytes], Awaitable[None]], on_exit: Callable[[str], None]) -> None:
        """Read the current process's output until it has exited."""
        process = self.process
        assert process is not None
        output_done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_output, process, on_line, output_done)
            await process.wait()
            with trio.move_on_after(DRAIN_AFTER_EXIT):
                await output_done.wait()
            nursery.cancel_scope.cancel()
        why = self._exit_reason(process)
        self.closed = why
        missing = self.mode in ("resume", "fork") and not self.initialized and self._missing_session()
        on_exit(why)
        self._exit_was_missing = missing
        if missing:
            # Claude found no session to resume: keep the agentd session with a
            # fresh launcher, so the caller can start a replacement on it.
            self._respawn_wanted = True
            self._respawned = trio.Event()
            self.session = None
        self._exited.set()

    @staticmethod
    async def _read_output(
        process: ProcessLike, on_line: Callable[[bytes], Awaitable[None]], done: trio.Event,
    ) -> None:
        try:
            async for line in runtime_lines(process.stdout, "claude"):
                await on_line(line)
        finally:
            done.set()

    def _exit_reason(self, process: ProcessLike) -> str:
        code, sig = exit_status(process.returncode)
        how = f"exit code {code}" if code is not None else f"signal {sig}"
        detail = "; ".join(self.early_errors) or self.stderr.tail(500)
        return f"claude exited ({how})" + (f": {detail}" if detail else "")

    def _missing_session(self) -> bool:
        text = ("; ".join(self.early_errors) + " " + self.stderr.tail(500)).lower()
        return any(p in text for p in _MISSING_PATTERNS)

    # -- writing and launching ---------------------------------------------------------------

    async def write(self, message: dict[str, Any]) -> None:
        """Write one JSON line to the process's stdin (bounded).

        Raises:
            RequestTimeout: the process did not read it in time.
            ProviderRuntimeError: the process takes no more input.
        """
        if self.closed:
            raise ProviderRuntimeError(f"cannot write to claude: {self.closed}")
        data = _encoder.encode(message) + b"\n"
        with trio.move_on_after(self.bound) as scope:
            async with self._send_lock:
                process = self.process  # the current one, once the lock is ours (a respawn may replace it)
                assert process is not None, "not closed: a process was started"
                try:
                    await process.stdin.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    raise ProviderRuntimeError(f"claude's input is closed ({exc.__class__.__name__})") from exc
        if scope.cancelled_caught:
            raise RequestTimeout(f"claude did not read its input within {self.timeout:g}s")

    async def launch(self, mode: str, args: list[str], cwd: str, *, initialize: Callable[[], Awaitable[Any]]) -> None:
        """Exec claude in the waiting launcher with ``args`` in ``cwd``, then
        ``initialize`` the control protocol.

        Raises:
            RequestTimeout: claude did not answer in time (the process is killed).
            ProviderRuntimeError: the process is already launched, or claude refused.
        """
        if self.mode is not None:
            bound = self.session or "a new session"
            raise ProviderRuntimeError(f"this claude process is already running {bound}; one session per process")
        self.mode = mode
        try:
            await self.write({"type": "agentd_launch", "args": args, "cwd": cwd})
            await initialize()
        except RequestTimeout:
            self.abandon()
            raise
        self.initialized = True

    async def launch_existing(
        self, mode: str, session: str, args: list[str], cwd: str, *, initialize: Callable[[], Awaitable[Any]],
    ) -> None:
        """:meth:`launch` for a resume or fork of ``session``.

        Raises:
            NativeThreadMissing: ``session`` is not a session id, or Claude
                has no such session (a fresh launcher is then waiting).
        """
        if not SESSION_ID.fullmatch(session):
            raise NativeThreadMissing(f"{session!r} is not a Claude session id")
        exited = self._exited  # this process's exit, whatever replaces it meanwhile
        try:
            await self.launch(mode, args, cwd, initialize=initialize)
        except RequestTimeout:
            raise
        except ProviderRuntimeError as exc:
            # Claude refused and is exiting: wait until its exit is handled,
            # and for the replacement launcher, so the caller's fallback finds one.
            with trio.move_on_after(min(self.bound, 10.0)):
                await exited.wait()
            if not (exited.is_set() and self._exit_was_missing):
                raise
            with trio.move_on_after(self.bound):
                await self._respawned.wait()
            detail = "; ".join(self.early_errors) or str(exc)
            raise NativeThreadMissing(f"claude cannot resume session {session}: {detail}") from exc

    # -- ending ------------------------------------------------------------------------------

    def abandon(self) -> None:
        """End a process left in an unknown state (a bounded wait ran out), so
        the session ends and the next message gets a fresh one instead of this
        half-started one."""
        process = self.process
        if process is not None and process.returncode is None:
            try:
                process.kill()
            except ProcessLookupError:
                pass

    async def polite_stop(self) -> None:
        """End of input: the launcher exits, and so does an idle Claude."""
        if self.process is not None:
            await self.process.stdin.aclose()

    async def stop(self, *, grace: float = 2.0) -> None:
        """The shutdown ladder for the current process."""
        if self.process is not None:
            await stop_process(self.process, polite=self.polite_stop, grace=grace)

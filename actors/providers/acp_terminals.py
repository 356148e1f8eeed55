"""agentd as an ACP client: the agent's ``terminal/*`` requests.

``terminal/create`` starts the command as a process agentd supervises like
a runtime's (its own session and process group, under the daemon's process
guard so it dies with the daemon, and stopped when the agent releases it or
its session ends); ``cwd`` must lie in the workspace. Its stdout and stderr
are one output, of which at most ``outputByteLimit`` bytes are kept — the
oldest dropped first, at a character boundary, as the schema says.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
from dataclasses import dataclass, field

import trio

from .acp_files import confined
from .acp_wire import CreateTerminalRequest, TerminalExitStatus, TerminalOutputResponse
from .base import ProviderRuntimeError
from .guard import watch_spawned

#: what a terminal keeps when the agent sets no limit
DEFAULT_OUTPUT_LIMIT = 1 << 20


@dataclass(eq=False)
class Terminal:
    """One command the agent runs through agentd."""

    id: str
    command: list[str]
    process: trio.Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    exited: trio.Event = field(default_factory=trio.Event)

    def append(self, data: bytes | bytearray) -> None:
        self.output += data
        if len(self.output) > self.limit:
            cut = len(self.output) - self.limit
            # Never start inside a UTF-8 sequence: skip continuation bytes.
            while cut < len(self.output) and (self.output[cut] & 0xC0) == 0x80:
                cut += 1
            del self.output[:cut]
            self.truncated = True

    def text(self) -> str:
        return self.output.decode("utf-8", errors="replace")

    def exit_status(self) -> TerminalExitStatus | None:
        code = self.process.returncode
        if code is None:
            return None
        if code < 0:
            return TerminalExitStatus(signal=signal.Signals(-code).name)
        return TerminalExitStatus(exit_code=code)

    def kill(self) -> None:
        if self.process.returncode is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Terminals:
    """The terminals of one agent process, run in ``nursery``."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._ids = (f"term_{n}" for n in itertools.count(1))
        self._by_id: dict[str, Terminal] = {}

    def get(self, terminal_id: str) -> Terminal:
        terminal = self._by_id.get(terminal_id)
        if terminal is None:
            raise ProviderRuntimeError(f"no terminal {terminal_id} (released, or never created)")
        return terminal

    async def create(self, request: CreateTerminalRequest, root: str) -> Terminal:
        """Start the command in ``request.cwd`` (default: ``root``, the workspace)."""
        cwd = confined(root, request.cwd) if request.cwd else confined(root, root)
        env = dict(os.environ)
        env.update({v.name: v.value for v in request.env})
        argv = [request.command, *request.args]
        try:
            process = await trio.lowlevel.open_process(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=str(cwd), env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise ProviderRuntimeError(f"cannot run {request.command}: {exc.strerror or exc}") from exc
        watch_spawned(process.pid)
        limit = request.output_byte_limit if request.output_byte_limit is not None else DEFAULT_OUTPUT_LIMIT
        terminal = Terminal(id=next(self._ids), command=argv, process=process, limit=max(limit, 0))
        self._by_id[terminal.id] = terminal
        self._nursery.start_soon(self._pump, terminal)
        return terminal

    async def _pump(self, terminal: Terminal) -> None:
        stdout = terminal.process.stdout
        assert stdout is not None, "opened with stdout=PIPE"
        try:
            try:
                while data := await stdout.receive_some(65536):
                    terminal.append(data)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass
            await terminal.process.wait()
        except trio.Cancelled:
            # The agent's session is ending: nothing it started outlives it.
            terminal.kill()
            with trio.CancelScope(shield=True):
                await terminal.process.wait()
            raise
        finally:
            terminal.exited.set()

    def output(self, terminal_id: str) -> TerminalOutputResponse:
        terminal = self.get(terminal_id)
        return TerminalOutputResponse(output=terminal.text(), truncated=terminal.truncated, exit_status=terminal.exit_status())

    async def wait_for_exit(self, terminal_id: str) -> TerminalExitStatus:
        terminal = self.get(terminal_id)
        await terminal.exited.wait()
        status = terminal.exit_status()
        assert status is not None, "exited is set after the process was reaped"
        return status

    def kill(self, terminal_id: str) -> None:
        self.get(terminal_id).kill()

    def release(self, terminal_id: str) -> Terminal:
        """Kill (if running) and forget; the terminal is returned for its output."""
        terminal = self.get(terminal_id)
        terminal.kill()
        del self._by_id[terminal_id]
        return terminal

    def peek(self, terminal_id: str) -> Terminal | None:
        return self._by_id.get(terminal_id)

    def close(self) -> None:
        """The agent's session ends: every command it left running is killed."""
        for terminal in self._by_id.values():
            terminal.kill()
        self._by_id.clear()

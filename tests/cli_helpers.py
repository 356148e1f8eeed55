"""Driving the ``agentd`` command as a person does: a real subprocess whose
output is read as it comes, waited on by content (never by time)."""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import trio

WAIT = 60  # seconds any one wait may take


def agentd_argv(daemon: Any, *args: str) -> list[str]:
    """``agentd ARGS`` against ``daemon`` (anything with data_dir and socket)."""
    return [sys.executable, "-m", "agentd", *args, "--data-dir", str(daemon.data_dir), "--socket", str(daemon.socket)]


def assert_no_traceback(*outputs: bytes | str) -> None:
    for output in outputs:
        text = output.decode(errors="replace") if isinstance(output, bytes) else output
        assert "Traceback" not in text, f"a traceback in CLI output:\n{text}"


async def run(daemon: Any, *args: str, check: bool = True, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """Run ``agentd ARGS`` to its end; no traceback may appear in its output."""
    with trio.fail_after(WAIT):
        result = await trio.run_process(agentd_argv(daemon, *args), stdin=stdin or b"", capture_stdout=True,
                                        capture_stderr=True, check=False)
    assert_no_traceback(result.stdout, result.stderr)
    if check and result.returncode != 0:
        raise AssertionError(f"agentd {' '.join(args)} exited {result.returncode}:\n{result.stdout.decode()}\n{result.stderr.decode()}")
    return result


def first_line(output: bytes) -> str:
    return output.decode().splitlines()[0] if output.strip() else ""


class Running:
    """An ``agentd`` command still running; its stdout and stderr so far."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self.out = b""
        self.err = b""
        self._closed = 0  # streams at their end
        self._changed = trio.Event()

    async def _read(self, stream: trio.abc.ReceiveStream, which: str) -> None:
        while chunk := await stream.receive_some(65536):
            setattr(self, which, getattr(self, which) + chunk)
            self._wake()
        self._closed += 1
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, text: str, *, on: str = "out") -> str:
        """Wait until ``text`` appears on stdout (``on="err"``: stderr); return that stream so far."""
        with trio.fail_after(WAIT):
            while text.encode() not in getattr(self, on):
                if self._closed == 2:
                    raise AssertionError(f"agentd ended its output before printing {text!r}:\n"
                                         f"{self.out.decode()}\n{self.err.decode()}")
                await self._changed.wait()
        return getattr(self, on).decode()

    def interrupt(self) -> None:
        """Ctrl-C."""
        self.process.send_signal(2)

    async def finish(self) -> int:
        """Wait for the exit; no traceback may have appeared."""
        with trio.fail_after(WAIT):
            code = await self.process.wait()
            while self._closed < 2:
                await self._changed.wait()
        assert_no_traceback(self.out, self.err)
        return code


@asynccontextmanager
async def spawn(daemon: Any, *args: str, stdin: int | None = subprocess.DEVNULL) -> AsyncIterator[Running]:
    """Start ``agentd ARGS``; its output is read while the block runs, and
    checked for tracebacks when it ends (the process is killed if it is
    still running)."""
    process = await trio.lowlevel.open_process(agentd_argv(daemon, *args), stdin=stdin,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    running = Running(process)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(running._read, process.stdout, "out")
        nursery.start_soon(running._read, process.stderr, "err")
        try:
            yield running
        finally:
            if process.returncode is None:
                process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    assert_no_traceback(running.out, running.err)


def env_without_agentd() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}

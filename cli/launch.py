"""Start ``agentd serve`` as a child process and wait until it listens.

Used by ``agentd demo``, the tests and the scripts: readiness is a line the
daemon writes on an inherited pipe once its socket accepts connections, so
nobody polls or sleeps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import trio



def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started us
    dies (Linux), so a killed test run or demo leaves no daemon behind."""
    try:
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


class DaemonStartError(RuntimeError):
    """The daemon exited or stayed silent instead of becoming ready."""


@dataclass
class DaemonProcess:
    process: trio.Process
    data_dir: Path
    socket: Path
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    async def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for the orderly shutdown; SIGKILL if it takes too long."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            with trio.move_on_after(timeout):
                await self.process.wait()
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()
        return self.process.returncode

    async def kill(self) -> None:
        """SIGKILL: the daemon gets no chance to clean up."""
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


async def start_daemon(
    data_dir: Path,
    socket: Path,
    *,
    config: Path | None = None,
    extra_args: list[str] = (),
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> DaemonProcess:
    """Start a daemon child and return once it is listening.

    Raises:
        DaemonStartError: it exited first or did not get ready within ``timeout``.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "daemon.log"
    read_fd, write_fd = os.pipe()
    args = [sys.executable, "-m", "agentd", "serve", "--data-dir", str(data_dir), "--socket", str(socket),
            "--ready-fd", str(write_fd), *extra_args]
    if config is not None:
        args += ["--config", str(config)]
    child_env = dict(os.environ if env is None else env)
    with open(log_path, "ab") as log:
        try:
            process = await trio.lowlevel.open_process(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_fd,), env=child_env,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        finally:
            os.close(write_fd)
    daemon = DaemonProcess(process, data_dir, Path(socket), log_path)
    ready = trio.lowlevel.FdStream(read_fd)
    try:
        with trio.move_on_after(timeout):
            data = await ready.receive_some(64)
            if data.startswith(b"ready"):
                return daemon
    finally:
        await ready.aclose()
    await daemon.kill()
    raise DaemonStartError(f"agentd did not start (exit {process.returncode}):\n{daemon.log_text()[-4000:]}")

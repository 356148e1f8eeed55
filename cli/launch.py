"""Start ``agentd serve`` as a child process and wait until it listens.

Used by ``agentd demo``, the tests and the scripts: readiness is a line the
daemon writes on an inherited pipe once its socket accepts connections, so
nobody polls or sleeps.

The daemon's life is tied to its launcher by a second pipe, the lifeline: the
launcher holds the write end, the daemon watches the read end, and when the
launcher closes it or dies (the kernel closes it then, whatever thread
started the child) the daemon shuts down in order. ``PR_SET_PDEATHSIG`` was
not that: Linux fires it when the *thread* that forked the child exits, and
trio forks from worker threads that exit after 10 s idle.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import trio

#: names the daemon's end of the lifeline (see the module docstring)
LIFELINE_ENV = "AGENTD_LIFELINE_FD"


class DaemonStartError(RuntimeError):
    """The daemon exited or stayed silent instead of becoming ready."""


@dataclass
class DaemonProcess:
    process: trio.Process
    data_dir: Path
    socket: Path
    log_path: Path
    #: the launcher's end of the lifeline; closing it shuts the daemon down
    lifeline: int | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def release(self) -> None:
        """Close the launcher's end of the lifeline: the daemon shuts down in
        order (the same happens when the launcher's process ends)."""
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None

    async def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait for the orderly shutdown; SIGKILL if it takes too long."""
        try:
            if self.process.returncode is None:
                self.process.send_signal(signal.SIGTERM)
                with trio.move_on_after(timeout):
                    await self.process.wait()
                if self.process.returncode is None:
                    self.process.kill()
                    await self.process.wait()
        finally:
            self.release()
        code = self.process.returncode
        assert code is not None, "waited for above"
        return code

    async def kill(self) -> None:
        """SIGKILL: the daemon gets no chance to clean up."""
        try:
            if self.process.returncode is None:
                self.process.kill()
            await self.process.wait()
        finally:
            self.release()


async def start_daemon(
    data_dir: Path,
    socket: Path,
    *,
    config: Path | None = None,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
    wrapper: Sequence[str] = (),
) -> DaemonProcess:
    """Start a daemon child and return once it is listening.

    ``wrapper`` is a command the daemon's command line is appended to, one
    that execs it in the same process (``prlimit --nofile=512:512 --``,
    ``nsenter -t PID -U -m --``): the daemon keeps the child's pid and the
    inherited ready and lifeline pipes. Scripts use it to start a daemon under
    tighter limits or in another mount namespace.

    Raises:
        DaemonStartError: it exited first or did not get ready within ``timeout``.
    """
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = data_dir / "daemon.log"
    read_fd, write_fd = os.pipe()
    life_read, life_write = os.pipe()
    args = [*wrapper, sys.executable, "-m", "agentd", "serve", "--data-dir", str(data_dir), "--socket", str(socket),
            "--ready-fd", str(write_fd), *extra_args]
    if config is not None:
        args += ["--config", str(config)]
    child_env = dict(os.environ if env is None else env)
    child_env[LIFELINE_ENV] = str(life_read)
    with open(log_path, "ab") as log:
        try:
            process = await trio.lowlevel.open_process(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_fd, life_read), env=child_env,
            )
        except BaseException:
            os.close(life_write)
            raise
        finally:
            os.close(write_fd)
            os.close(life_read)
    daemon = DaemonProcess(process, data_dir, Path(socket), log_path, lifeline=life_write)
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

"""What every adapter of an external agent runtime needs from its binary:
finding it, asking its version, and quoting its stderr in error messages.

One :class:`RuntimeBinary` per runtime kind (``codex``, ``claude``) names the
executable and the versions its adapter was checked against. The lookup order
is the same for all of them: the config's ``binary`` (a path, or a name looked
up on the runtime's ``PATH``), else the name on ``PATH``, else the
project-local pinned install that ``.ci/run`` makes
(``npm ci --prefix tests/integration/runtimes``).

A runtime's stderr goes to ``stderr.log`` in the instance's home (see
``transport.spawn_process``); :class:`StderrLog` remembers where a process's
share of that file starts and reads it back when the process fails.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import trio

from ..regular_files import open_regular
from .base import ProviderRuntimeError

_REPO_ROOT = Path(__file__).resolve().parents[2]
#: where ``.ci/run`` installs the pinned runtimes (``npm ci --prefix tests/integration/runtimes``)
PROJECT_LOCAL_BIN = _REPO_ROOT / "tests" / "integration" / "runtimes" / "node_modules" / ".bin"

Version = tuple[int, int, int]


def parse_version(text: str) -> Version | None:
    """The first ``X.Y.Z`` in a ``--version`` output, or None."""
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", text)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def _executable(path: str | Path) -> bool:
    return Path(path).is_file() and os.access(path, os.X_OK)


@dataclass(frozen=True)
class RuntimeBinary:
    """One kind of runtime's executable and the versions agentd supports.

    Args:
        name: the executable's name on PATH and in messages (``codex``).
        supported: versions the adapter was checked against, as an inclusive
            lower and an exclusive upper bound.
        supported_text: the same for people (``"0.169–0.171"``).
    """

    name: str
    supported: tuple[Version, Version]
    supported_text: str

    @property
    def project_local(self) -> Path:
        """The pinned install's executable (it may not exist)."""
        return PROJECT_LOCAL_BIN / self.name

    def find_binary(self, configured: str | None, env: Mapping[str, str] | None = None) -> Path:
        """``configured`` (a path, or a name on ``env``'s PATH), else the
        runtime's name on PATH, else the project-local pinned install.

        Args:
            configured: the config's ``binary``, if any.
            env: the runtime's environment (its PATH is searched; default: the daemon's).

        Raises:
            ProviderRuntimeError: none of them is an executable file.
        """
        search_path = (os.environ if env is None else env).get("PATH")
        if configured:
            found = shutil.which(configured, path=search_path) if os.sep not in configured else configured
            if found and _executable(found):
                return Path(found)
            raise ProviderRuntimeError(
                f"{self.name} binary not found: {configured} (from the provider's binary setting)"
            )
        found = shutil.which(self.name, path=search_path)
        if found:
            return Path(found)
        if _executable(self.project_local):
            return self.project_local
        raise ProviderRuntimeError(
            f"{self.name} binary not found: not configured, no {self.name} on PATH, and no {self.project_local} "
            "(install it with: npm ci --prefix tests/integration/runtimes, or set binary in [providers.NAME])"
        )

    def version_problem(self, version: Version | None) -> str | None:
        """Why ``version`` cannot be used, or None if it is supported."""
        if version is None:
            return f"could not tell which {self.name} version this is"
        low, high = self.supported
        text = ".".join(map(str, version))
        if version < low:
            return (
                f"{self.name} {text} is not a supported version: older than this agentd supports "
                f"({self.supported_text}); upgrade {self.name}"
            )
        if version >= high:
            return (
                f"{self.name} {text} is not a supported version: newer than this agentd was checked against "
                f"({self.supported_text}); pin a supported {self.name}"
            )
        return None

    async def probe(self, executable: Path, *, env: Mapping[str, str], timeout: float) -> dict[str, Any]:
        """Run ``executable --version`` as a child process (the event loop
        keeps running), bounded by ``timeout``.

        Returns:
            ``{"usable": bool, "version": str, "why": str}`` — ``version``
            when the binary answered, ``why`` when it is not usable.
        """
        try:
            with trio.fail_after(timeout):
                result = await trio.run_process(
                    [str(executable), "--version"], capture_stdout=True, capture_stderr=True, env=dict(env), check=False,
                )
        except trio.TooSlowError:
            return {"usable": False, "why": f"{self.name} --version did not answer within {timeout:g}s"}
        except OSError as exc:
            return {"usable": False, "why": f"{self.name} cannot be run: {exc}"}
        output = (result.stdout or b"").decode(errors="replace").strip()
        if result.returncode != 0:
            lines = (result.stderr or b"").decode(errors="replace").strip().splitlines()
            detail = lines[-1] if lines else output
            return {"usable": False, "why": f"{self.name} --version failed (exit {result.returncode}): {detail[:200]}"}
        version = parse_version(output)
        info: dict[str, Any] = {"version": ".".join(map(str, version)) if version else output}
        problem = self.version_problem(version)
        if problem:
            return {**info, "usable": False, "why": problem}
        return {**info, "usable": True}


#: how much of a process's stderr a tail reads at most
TAIL_READ = 64 * 1024
#: lines that say nothing in an error message (a Rust backtrace of unsymbolized frames)
_NOISE = re.compile(r"Stack backtrace|\s*\d+: <unknown>")


class StderrLog:
    """A runtime's ``stderr.log`` in the instance's home, which every process
    of the instance appends to.

    Args:
        home: the instance's directory.
    """

    def __init__(self, home: Path) -> None:
        self.path = Path(home) / "stderr.log"
        self.offset = 0

    def mark(self) -> None:
        """Remember where the file ends now: call it before starting a
        process, and :meth:`tail` quotes only what that process wrote."""
        try:
            self.offset = self.path.stat().st_size
        except OSError:
            self.offset = 0

    def tail(self, limit: int = 2000, *, start_at: str | None = None) -> str:
        """What the runtime wrote since :meth:`mark`, for an error message:
        blank lines and unsymbolized backtrace frames dropped, the last
        ``limit`` characters; empty if there is nothing (or no file).

        Args:
            start_at: a line prefix (e.g. ``"Error"``): when a line starts
                with it, the tail starts at the first such line.
        """
        try:
            # a FIFO in its place would stop the event loop in this open: refused instead
            with os.fdopen(open_regular(self.path), "rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(self.offset, size - TAIL_READ))
                text = f.read(TAIL_READ).decode(errors="replace")
        except OSError:
            return ""
        lines = [line for line in text.splitlines() if line.strip() and not _NOISE.match(line)]
        if start_at is not None:
            first = next((i for i, line in enumerate(lines) if line.startswith(start_at)), None)
            if first is not None:
                lines = lines[first:]
        return "\n".join(lines)[-limit:]

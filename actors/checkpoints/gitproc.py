"""Running git: the scrubbed environment and the awaited subprocess.

Every git command of the engine is a child process awaited with
``trio.run_process`` (or ``trio.lowlevel.open_process`` for streams), so the
event loop keeps running while git works. Nothing of the caller's git
environment leaks in: all ``GIT_*`` variables are dropped (an inherited
``GIT_INDEX_FILE`` or ``GIT_DIR`` would otherwise point the shadow at the
user's repository), system and global config are off, hooks and optional locks
are off, and the messages are in the C locale.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import trio

from .fifowatch import NamedPipeError, Watched
from .errors import GitCommandError, GitUnavailableError

#: git 2.32 is the first to honour GIT_CONFIG_GLOBAL
MIN_GIT = (2, 32)

Arg = str | bytes

#: the identity of checkpoint commits
IDENTITY = {
    "GIT_AUTHOR_NAME": "agentd",
    "GIT_AUTHOR_EMAIL": "agentd@localhost",
    "GIT_COMMITTER_NAME": "agentd",
    "GIT_COMMITTER_EMAIL": "agentd@localhost",
}


def scrubbed_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default ``os.environ``) without any ``GIT_*`` variable, plus
    the settings that hold for every git the engine runs, user-facing or not:
    no terminal prompt, no optional locks (git would otherwise refresh the
    index of a nested repository), C locale. ``PATH`` and ``HOME`` are kept."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("GIT_")}
    env.update(GIT_OPTIONAL_LOCKS="0", GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    return env


def shadow_env(git_dir: str | bytes, work_tree: str | bytes, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a git command on a shadow repository: the scrubbed
    environment with the shadow's ``GIT_DIR`` and ``GIT_WORK_TREE``, no system
    or global config and no system attributes, and the checkpoint identity."""
    env = scrubbed_env(base)
    env.update(
        GIT_DIR=os.fsdecode(git_dir),
        GIT_WORK_TREE=os.fsdecode(work_tree),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_ATTR_NOSYSTEM="1",
        **IDENTITY,
    )
    return env


@dataclass(frozen=True)
class GitResult:
    """What a finished git command left: exit status and both outputs."""

    returncode: int
    stdout: bytes
    stderr: bytes


class Git:
    """The git executable the engine runs, checked once.

    Args:
        executable: a path or a name looked up on ``PATH``; default ``git``.
    """

    def __init__(self, executable: str | None = None) -> None:
        self.name = executable or "git"
        self._path: str | None = None
        self.version: tuple[int, ...] | None = None

    async def path(self) -> str:
        """The checked executable path.

        Raises:
            GitUnavailableError: git is not found, cannot run, or is older than 2.32.
        """
        if self._path is not None:
            return self._path
        found = shutil.which(self.name)
        if found is None:
            raise GitUnavailableError(f"checkpoints need git, and {self.name!r} was not found on PATH")
        try:
            result = await trio.run_process([found, "--version"], capture_stdout=True, capture_stderr=True,
                                            check=False, env=scrubbed_env())
        except OSError as exc:
            raise GitUnavailableError(f"checkpoints need git, and {found} cannot be run: {exc}") from exc
        match = re.search(rb"(\d+)\.(\d+)(?:\.(\d+))?", result.stdout)
        if result.returncode != 0 or match is None:
            raise GitUnavailableError(f"checkpoints need git, and {found} --version failed: "
                                      f"{(result.stderr or result.stdout).decode(errors='replace').strip()[:200]}")
        version = tuple(int(g) for g in match.groups() if g is not None)
        if version < MIN_GIT:
            raise GitUnavailableError(
                f"checkpoints need git {'.'.join(map(str, MIN_GIT))} or newer; {found} is {'.'.join(map(str, version))}",
                reason="git_too_old")
        self.version = version
        self._path = found
        return found

    async def run(self, args: Sequence[Arg], *, env: Mapping[str, str], cwd: str | bytes,
                  stdin: bytes | None = None, ok: Sequence[int] = (0,)) -> GitResult:
        """Run ``git ARGS`` and wait for it without blocking the event loop.

        Args:
            args: the arguments after ``git``.
            env: the full environment (see ``shadow_env``, ``scrubbed_env``).
            cwd: the working directory.
            stdin: bytes fed to standard input (else it reads nothing).
            ok: the exit statuses that are not an error.

        Raises:
            GitCommandError: the exit status is not in ``ok``.
            GitUnavailableError: git cannot be run any more.
            NamedPipeError: git waited to open a named pipe and was stopped
                (``fifowatch``).
        """
        path = await self.path()
        watched = Watched()
        try:
            result = await trio.run_process(
                [path, *args], stdin=stdin if stdin is not None else b"", capture_stdout=True,
                capture_stderr=True, check=False, env=dict(env), cwd=cwd, task_status=watched,
            )
        except FileNotFoundError as exc:
            if not os.path.isdir(cwd):
                raise
            self._path = None
            raise GitUnavailableError(f"checkpoints need git, and {path} is gone: {exc}") from exc
        finally:
            watched.done()
        if watched.found is not None:
            raise NamedPipeError(watched.found.path)
        if result.returncode not in ok:
            raise GitCommandError(list(args), result.returncode, result.stderr)
        return GitResult(result.returncode, result.stdout, result.stderr)

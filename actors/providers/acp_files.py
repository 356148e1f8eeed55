"""agentd as an ACP client: the agent's ``fs/read_text_file`` and
``fs/write_text_file``, confined to the session's workspace.

A path is the agent's absolute path; it is resolved (symlinks followed, for a
new file its folder's) and must then lie inside the workspace the session was
opened in (``session/new {cwd}``), else the request is refused with an error
the agent sees — agentd is not a way out of the thread's folder. A write
reports the file's text before and after, so the adapter can make it a
``file_change`` with its diff (:func:`unified_diff`).
"""

from __future__ import annotations

import contextlib
import difflib
import errno
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

import trio

from ..checkpoints.beneath import Refused, Workspace, umask
from ..regular_files import open_regular, read_regular
from .base import ProviderRuntimeError

#: a file larger than this is not read for the agent (it asks for text)
MAX_READ_BYTES = 16 << 20
#: a diff longer than this is cut in a node's detail
MAX_DIFF_CHARS = 64 * 1024


class OutsideWorkspace(ProviderRuntimeError):
    """The agent named a path outside its workspace (or a relative one)."""


def confined(root: str, path: str) -> Path:
    """``path`` resolved, if it lies inside ``root`` (also resolved).

    Raises:
        OutsideWorkspace: it is relative, or outside ``root`` once resolved.
    """
    if not os.path.isabs(path):
        raise OutsideWorkspace(f"agentd takes absolute paths only, not {path!r}")
    base = os.path.realpath(root)
    target = os.path.realpath(path)
    if target != base and not target.startswith(base.rstrip(os.sep) + os.sep):
        raise OutsideWorkspace(f"{path} is outside this thread's workspace {root}; agentd refuses it")
    return Path(target)


def _read(base: str, path: Path, line: int | None, limit: int | None) -> str:
    """Read ``path`` (resolved inside ``base``) from a descriptor of ``base``,
    as :func:`_write` writes: a folder swapped for a symlink since the check is
    refused, and so is a FIFO (its open would wait forever) or a device."""
    rel = os.fsencode(os.path.relpath(path, base))
    if rel == b".":
        raise IsADirectoryError(errno.EISDIR, "the workspace itself is a folder", str(path))
    try:
        with Workspace(os.fsencode(base)) as ws, ws.parent(rel) as folder:
            data = read_regular(os.path.basename(rel), dir_fd=folder, limit=MAX_READ_BYTES)
    except Refused as exc:
        raise OutsideWorkspace(f"{path}: {exc.detail}; agentd does not read through it") from None
    if len(data) > MAX_READ_BYTES:
        raise ProviderRuntimeError(f"{path} is larger than {MAX_READ_BYTES} bytes; agentd does not read it as text")
    text = data.decode("utf-8", errors="replace")
    if line is None and limit is None:
        return text
    lines = text.splitlines(keepends=True)
    start = max((line or 1) - 1, 0)
    end = start + limit if limit is not None else len(lines)
    return "".join(lines[start:end])


async def read_text(root: str, path: str, *, line: int | None = None, limit: int | None = None) -> str:
    """The text of ``path`` (from 1-based ``line``, at most ``limit`` lines).

    Raises:
        OutsideWorkspace: see :func:`confined`.
        ProviderRuntimeError: it cannot be read.
    """
    target = confined(root, path)
    try:
        return await trio.to_thread.run_sync(_read, os.path.realpath(root), target, line, limit)
    except OSError as exc:
        raise ProviderRuntimeError(f"cannot read {path}: {exc.strerror or exc}") from exc


@dataclass(frozen=True)
class Written:
    """A write the agent made: the path and the text before (None: a new file) and after."""

    path: str
    before: str | None
    after: str

    @property
    def kind(self) -> str:
        return "add" if self.before is None else "update"

    def change(self, root: str) -> dict[str, str]:
        """The write as a file change of a node's detail: ``{path, kind, diff}``."""
        return {"path": self.path, "kind": self.kind, "diff": unified_diff(self.path, self.before, self.after, root)}


def _write(base: str, target: Path, content: str) -> str | None:
    """Write ``target`` (resolved inside ``base`` by :func:`confined`) from a
    descriptor of ``base``, never following a symlink: a folder the agent
    swaps for a symlink after the check is refused, not written through.

    The new content goes to a new file that replaces the old one (its mode
    kept), never into the old file: the old name may be a hard link the agent
    made to a file outside the workspace (``ln ~/.bashrc x`` needs no more
    than the workspace a sandbox lets it write), which an in-place write would
    change. A FIFO in the file's place is refused, not waited on."""
    rel = os.fsencode(os.path.relpath(target, base))
    name = os.path.basename(rel)
    try:
        with Workspace(os.fsencode(base)) as ws, ws.parent(rel, create=True) as folder:
            try:
                fd = open_regular(name, dir_fd=folder)
            except FileNotFoundError:
                before: str | None = None
                mode = 0o666 & ~umask()
            else:
                with os.fdopen(fd, "rb") as old:
                    mode = stat.S_IMODE(os.fstat(fd).st_mode)
                    before = old.read().decode("utf-8", errors="replace")
            temporary = b".agentd-write-" + secrets.token_hex(6).encode()
            out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                          dir_fd=folder)
            try:
                with os.fdopen(out, "wb") as new:
                    new.write(content.encode("utf-8"))
                    os.fchmod(new.fileno(), mode)
                os.rename(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=folder)
                raise
    except Refused as exc:
        raise OutsideWorkspace(f"{target}: {exc.detail}; agentd does not write through it") from None
    return before


async def write_text(root: str, path: str, content: str) -> Written:
    """Write ``content`` to ``path`` (its folders made as needed).

    Raises:
        OutsideWorkspace: see :func:`confined`.
        ProviderRuntimeError: it cannot be written.
    """
    target = confined(root, path)
    try:
        before = await trio.to_thread.run_sync(_write, os.path.realpath(root), target, content)
    except OSError as exc:
        raise ProviderRuntimeError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return Written(path=path, before=before, after=content)


def unified_diff(path: str, before: str | None, after: str | None, root: str) -> str:
    """A unified diff of one file (paths relative to the workspace), cut at MAX_DIFF_CHARS."""
    name = os.path.relpath(path, root) if os.path.isabs(path) else path
    old = (before or "").splitlines(keepends=True)
    new = (after or "").splitlines(keepends=True)
    diff = "".join(difflib.unified_diff(old, new, "/dev/null" if before is None else f"a/{name}", f"b/{name}"))
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + f"\n… [{len(diff) - MAX_DIFF_CHARS} more characters]"
    return diff

"""A delegated task's ``workspace: fork``: a bounded copy of its parent's
workspace (hostile-round issue item 8, SPEC F9).

The copy is measured before anything is written — a walk that stops as soon
as the bytes counted pass ``[daemon] delegate_max_copy_bytes`` — and counted
again while it is written, since files may grow in between. A copy that is
refused or fails part-way is removed: nothing partial is left. All of it runs
in a worker thread, never on the event loop. Files are cloned (reflinks)
where the file system has them, and copied elsewhere.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
from pathlib import Path

import trio

from agentd.actors.regular_files import NotRegularFile, open_regular
from agentd.actors.trees import remove_tree
from agentd.protocol.errors import InvalidParams, LimitExceeded

#: the config key that bounds a copy, as errors name it
LIMIT_KEY = "delegate_max_copy_bytes"


class _TooLarge(Exception):
    """The bytes counted passed the limit (not an OSError: copytree must not
    collect it and go on copying)."""

    def __init__(self, counted: int) -> None:
        super().__init__(counted)
        self.counted = counted


def _entry_bytes(path: str) -> int:
    """What an entry adds to a copy: a regular file its size; a symlink
    (copied as a link) or anything else nothing worth counting."""
    st = os.lstat(path)
    return st.st_size if stat.S_ISREG(st.st_mode) else 0


#: Linux's ``FICLONE`` ioctl: a copy-on-write clone of a whole file (btrfs, XFS, bcachefs…)
FICLONE = 0x40049409


def clone_or_copy(src: str, dst: str) -> str:
    """``dst`` as a reflink of ``src`` where the file system can clone
    files (as ``cp --reflink=auto``), else a plain ``copy2``. A named pipe (an
    agent's ``mkfifo``: opening it would wait forever), a device or a socket
    is not copied: the copy holds regular files, folders and symlinks."""
    try:
        source = open_regular(src)
    except NotRegularFile:
        return dst
    try:
        with open(dst, "wb") as target:
            fcntl.ioctl(target.fileno(), FICLONE, source)
        shutil.copystat(src, dst)
        return dst
    except OSError:
        with os.fdopen(os.dup(source), "rb") as reading, open(dst, "wb") as target:
            shutil.copyfileobj(reading, target)
        shutil.copystat(src, dst)
        return dst
    finally:
        os.close(source)


def measure(source: str, limit: int) -> int:
    """The bytes of the regular files under ``source`` (symlinks not followed).

    Raises:
        _TooLarge: as soon as the count passes ``limit``.
    """
    total = 0
    for root, _dirs, files in os.walk(source, followlinks=False):
        for name in files:
            try:
                total += _entry_bytes(os.path.join(root, name))
            except OSError:
                continue  # gone meanwhile: nothing to copy
            if total > limit:
                raise _TooLarge(total)
    return total


def _copy_within(source: str, target: Path, limit: int) -> int:
    """Measure, then copy ``source`` to ``target`` counting again; on any
    failure remove what was written. Returns the bytes copied."""
    measure(source, limit)
    copied = 0

    def copy_file(src: str, dst: str) -> str:
        nonlocal copied
        copied += _entry_bytes(src)
        if copied > limit:
            raise _TooLarge(copied)
        return clone_or_copy(src, dst)

    try:
        shutil.copytree(source, target, symlinks=True, copy_function=copy_file)
    except BaseException:
        remove_tree(target)
        raise
    return copied


async def copy_workspace(source: str, target: Path, *, limit: int) -> int:
    """Copy ``source`` to ``target`` (in a worker thread); the bytes copied.

    Raises:
        LimitExceeded: ``source`` holds more than ``limit`` bytes
            (``data.limit``: ``delegate_max_copy_bytes``, ``data.value``, ``data.size``:
            the bytes counted when the copy was stopped, ``data.workspace``).
        InvalidParams: it could not be copied (``field: workspace``).
    """
    try:
        return await trio.to_thread.run_sync(_copy_within, source, target, limit)
    except _TooLarge as too_large:
        raise LimitExceeded(
            f"workspace {source} is too large to copy for a delegated task: it holds at least {too_large.counted} "
            f"bytes (counting stopped there), over the limit of {limit} bytes ([daemon] {LIMIT_KEY}); nothing "
            "was copied. Delegate with workspace same or new, or raise the limit", limit=LIMIT_KEY, value=limit, size=too_large.counted, workspace=source,
        ) from None
    except (OSError, shutil.Error) as exc:
        raise InvalidParams(f"could not copy workspace {source} for the task: {exc}", field="workspace") from None
    except RecursionError:
        # Python's copy and walk recurse once per folder level; an agent can nest ~2,000.
        raise InvalidParams(f"could not copy workspace {source} for the task: its folders nest deeper than agentd "
                            "copies (about 900 levels); delegate with workspace same or new", field="workspace") from None


async def remove_copy(target: Path) -> None:
    """Remove a copy no task uses (in a worker thread; shielded: it runs when
    a call is being cancelled too)."""
    with trio.CancelScope(shield=True):
        await trio.to_thread.run_sync(remove_tree, target)

"""Diff of two checkpoints: the changed files with line counts (one
``diff --raw --numstat -z -M`` spawn) and the patch, read as a stream and cut
at ``max_bytes`` (the rest of git's output is never read)."""

from __future__ import annotations

import os
import subprocess

import trio

from .fifowatch import NamedPipeError, Watched
from .errors import GitCommandError, UnknownCheckpointError
from .refs import check_commitish
from .rawdiff import EMPTY_TREE, file_changes
from .results import DiffResult
from .shadow import Shadow

DIFF_FLAGS = ["-M", "--no-ext-diff", "--no-textconv", "--no-color"]


async def resolve(shadow: Shadow, *commitishes: str) -> list[str]:
    """The commit ids of checkpoint commits or refs (one spawn).

    Raises:
        UnknownCheckpointError: one is not a commit of this shadow.
    """
    for commitish in commitishes:
        check_commitish(commitish)
    found = await shadow.run(["rev-parse", *(f"{c}^{{commit}}" for c in commitishes)], ok=(0, 1, 128))
    ids = found.stdout.decode().split()
    if found.returncode != 0 or len(ids) != len(commitishes):
        raise UnknownCheckpointError(
            f"{' or '.join(commitishes)} is not a checkpoint of {os.fsdecode(shadow.layout.workspace)}")
    return ids


async def read_patch(shadow: Shadow, base: str, target: str, max_bytes: int) -> tuple[bytes, bool]:
    """The patch from ``base`` to ``target``, at most ``max_bytes`` of it, and
    whether it was cut."""
    path = await shadow.gitbin.path()
    process = await trio.lowlevel.open_process(
        [path, "diff", *DIFF_FLAGS, base, target], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL, env=shadow.env, cwd=shadow.layout.top,
    )
    assert process.stdout is not None
    # git reads the work tree's .gitattributes for a diff: one that is a FIFO would stall it
    watched = Watched()
    watched.started(process)
    chunks = bytearray()
    truncated = False
    try:
        while True:
            data = await process.stdout.receive_some(1 << 16)
            if not data:
                break
            chunks += data
            if len(chunks) > max_bytes:
                truncated = True
                del chunks[max_bytes:]
                process.kill()
                break
    finally:
        with trio.CancelScope(shield=True):
            await process.stdout.aclose()  # a git still writing gets SIGPIPE
            await process.wait()
        watched.done()
    if watched.found is not None:
        raise NamedPipeError(watched.found.path)
    if not truncated and process.returncode not in (0, 1):
        raise GitCommandError(["diff", base, target], process.returncode or -1, b"")
    return bytes(chunks), truncated


def _cut_utf8(data: bytes) -> bytes:
    """``data`` without a UTF-8 sequence cut in half at its end."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # a lead byte: keep it only if its sequence is whole
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data


async def diff(shadow: Shadow, target: str, base: str | None, max_bytes: int) -> DiffResult:
    """Files and patch from ``base`` (None: nothing, every file added) to ``target``.

    Raises:
        UnknownCheckpointError: either is not a commit of this shadow.
    """
    if base is None:
        (target_id,), base_id = await resolve(shadow, target), None
    else:
        target_id, base_id = await resolve(shadow, target, base)
    against = base_id or EMPTY_TREE
    raw = await shadow.run(["diff", "--raw", "--numstat", "-z", *DIFF_FLAGS, against, target_id])
    patch, truncated = await read_patch(shadow, against, target_id, max_bytes)
    if truncated:
        patch = _cut_utf8(patch)
    return DiffResult(base=base_id, target=target_id, files=file_changes(raw.stdout),
                      patch=patch.decode(errors="replace"), truncated=truncated)

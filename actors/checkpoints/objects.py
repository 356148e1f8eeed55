"""A checkpoint's commit object and its create-only ref, written by Python
instead of ``git commit-tree`` and ``git update-ref`` (two git spawns fewer
at every run end: on a loaded machine a spawn costs 5–30 ms).

Both are written as git writes them: the commit as a zlib-compressed loose
object ``objects/xx/yyyy…`` (written to a temp file, then linked into place,
so a reader never sees half an object), the ref through ``<ref>.lock``
(``O_EXCL``) renamed over the ref, after checking that neither a loose nor a
packed ref of that name exists (refs are create-only). Called in a worker
thread with the workspace's locks held, so a ``<ref>.lock`` found is stale.
Only SHA-1 repositories (what the engine's ``git init`` makes); a SHA-256
shadow keeps using git (``supported``).
"""

from __future__ import annotations

import hashlib
import os
import time
import zlib

from ..regular_files import read_regular
from .errors import CheckpointExistsError
from .gitproc import IDENTITY

#: loose objects are compressed as git's ``core.looseCompression`` default does
LOOSE_COMPRESSION = 1
_SHA1_HEX = 40


def supported(tree: str) -> bool:
    """True when the shadow's objects are SHA-1 (a tree id of 40 hex digits)."""
    return len(tree) == _SHA1_HEX


def commit_body(tree: str, parent: str | None, message: str, when: int | None = None) -> bytes:
    """The commit object's content, as ``git commit-tree TREE [-p PARENT] -m MESSAGE``
    writes it with the engine's identity (UTC)."""
    stamp = f"{int(time.time()) if when is None else when} +0000"
    author = f"{IDENTITY['GIT_AUTHOR_NAME']} <{IDENTITY['GIT_AUTHOR_EMAIL']}> {stamp}"
    committer = f"{IDENTITY['GIT_COMMITTER_NAME']} <{IDENTITY['GIT_COMMITTER_EMAIL']}> {stamp}"
    lines = [f"tree {tree}", *([f"parent {parent}"] if parent else []), f"author {author}", f"committer {committer}"]
    return ("\n".join(lines) + "\n\n" + message.rstrip("\n") + "\n").encode()


def write_loose_object(git_dir: bytes, kind: str, body: bytes) -> str:
    """Write a loose object (if it is not there yet) and return its id."""
    data = f"{kind} {len(body)}\0".encode() + body
    oid = hashlib.sha1(data).hexdigest()  # noqa: S324 - git's object id, not a security use
    folder = os.path.join(git_dir, b"objects", oid[:2].encode())
    final = os.path.join(folder, oid[2:].encode())
    if os.path.exists(final):
        return oid
    os.makedirs(folder, exist_ok=True)
    temp = os.path.join(folder, f"tmp_obj_{os.getpid()}_{time.monotonic_ns()}".encode())
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        os.write(fd, zlib.compress(data, LOOSE_COMPRESSION))
    finally:
        os.close(fd)
    try:
        os.link(temp, final)
    except FileExistsError:
        pass  # written meanwhile: the same bytes
    finally:
        os.unlink(temp)
    return oid


def _packed(git_dir: bytes, ref: str) -> bool:
    try:
        packed = read_regular(os.path.join(git_dir, b"packed-refs"), follow_symlinks=True)
        return any(line.endswith(b" " + ref.encode()) for line in packed.split(b"\n"))
    except FileNotFoundError:
        return False


def create_ref(git_dir: bytes, ref: str, oid: str) -> None:
    """Create ``ref`` pointing at ``oid``, as ``update-ref REF OID 0000…`` does.

    Raises:
        CheckpointExistsError: the ref exists already (nothing was written).
    """
    path = os.path.join(git_dir, os.fsencode(ref))
    lock = path + b".lock"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        os.unlink(lock)  # stale: a git or agentd killed mid-write (the locks are held)
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        try:
            os.write(fd, f"{oid}\n".encode())
        finally:
            os.close(fd)
        if os.path.lexists(path) or _packed(git_dir, ref):
            raise CheckpointExistsError(f"checkpoint {ref} already exists")
        os.rename(lock, path)
    except BaseException:
        if os.path.lexists(lock):
            os.unlink(lock)
        raise


def commit_and_ref(git_dir: bytes, ref: str, tree: str, parent: str | None, message: str,
                   commit: str | None = None) -> str:
    """Write the commit of ``tree`` (unless ``commit`` is given: reuse it)
    and create ``ref`` to it; returns the commit id. Blocking: call it in a
    worker thread."""
    if commit is None:
        commit = write_loose_object(git_dir, "commit", commit_body(tree, parent, message))
    create_ref(git_dir, ref, commit)
    return commit

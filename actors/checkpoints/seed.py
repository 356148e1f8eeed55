"""Seeding a shadow's first capture from the user's repository (issue 24 §2).

A first capture from nothing hashes and compresses every file of the
workspace (seconds on 10,000 files, a minute and more on 100,000). In a git
repository most of them are already in the user's object store, and the
user's index says which: its entries carry each file's blob id and the stat
data that tells git, without reading the file, that it has not changed
since. So a first capture in a repository:

1. copies the user's index (``Layout.user_index``: this worktree's, read,
   never written) as the shadow's index, with the original's mtime, so git's
   racy-entry check sees exactly what it sees for the user;
2. drops from the copy what the shadow never stores as the user's git does
   (``plan``): entries outside the workspace, submodules (gitlinks) and the
   files of nested repositories (both become nested repositories, excluded
   and reported, as without a seed), files over the size cap (then listed as
   untracked and reported), and entries git would not compare with the disk
   as it is (assume-unchanged, skip-worktree, intent-to-add, unmerged: they
   are hashed again from disk like new files);
3. reads the user's object directory as an alternate (``Shadow.borrow``),
   so the capture that follows — the usual one: ``diff-files`` lists the
   changed files, ``ls-files -o`` the untracked ones, only those are hashed —
   needs none of the unchanged blobs copied.

Exactness: the result is the capture of the files on disk, as without a
seed (the user's index only spares reading files whose stat data matches; a
file whose stat changed is read again).

Never writing the user's repository: the index is copied; git commands that
write objects never see the user's store (``Shadow._set_envs``: git would
touch the mtime of a user's pack that holds an object it was about to write);
only reads do.

Borrowing ends at the shadow's next compaction (``CheckpointEngine.compact``,
queued by the ``Compactor`` right after a seed): ``repack -A -d`` with the
alternate copies every object a checkpoint or the index reaches into the
shadow's own pack, then the shadow stops reading the user's store. Until
then a checkpoint relies on objects the user's index held at capture time,
which the user's ``gc`` keeps while the index or a ref reaches them; only a
history rewrite followed by an expired reflog and ``gc --prune=now`` inside
that window (30 s by default) could take one away.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field

import trio

from ..regular_files import open_regular
from .rulesmirror import MIRROR, is_ignore_file
from .rulesmirror import remove as remove_mirror
from .shadow import Shadow
from .userindex import IndexEntries, UnreadableIndex, filtered, read_index

#: up to this many dropped entries ``update-index --force-remove`` takes them
#: out (it keeps the cache tree; each removal moves the entries after it);
#: beyond, the index is cut in Python (``userindex.filtered``)
GIT_DROP_LIMIT = 2000


@dataclass
class SeedPlan:
    """What ``plan`` decided for a copy of the user's index."""

    #: the bytes of the shadow's new index (the user's, or a cut of it)
    index: bytes
    #: the user index's (atime, mtime) in nanoseconds, given to the copy
    times: tuple[int, int]
    #: work-tree-relative paths ``update-index --force-remove`` takes out
    drop: list[bytes] = field(default_factory=list)
    #: the trees the copied index's cache tree names (copied into the shadow, see ``seed``)
    trees: list[str] = field(default_factory=list)
    #: the work-tree-relative paths of the seeded entries (files and symlinks)
    paths: list[bytes] = field(default_factory=list)
    #: where their entries start in ``source`` (their stat data: ``userindex.STAT_DATA``)
    starts: list[int] = field(default_factory=list)
    #: the user's index as read
    source: bytes = b""
    #: the ignore files the user's index holds (work-tree-relative), whatever the seed keeps
    ignore_files: list[bytes] = field(default_factory=list)


def _nested_dirs(top: bytes, paths: list[bytes]) -> list[bytes]:
    """The folders holding an indexed file that hold a ``.git`` too (blocking)."""
    folders: set[bytes] = set()
    last = None
    for path in paths:
        folder = path.rpartition(b"/")[0]
        if folder == last:  # the index is sorted: most paths share the previous one's folder
            continue
        last = folder
        while folder and folder not in folders:
            folders.add(folder)
            folder = os.path.dirname(folder)
    return sorted(f for f in folders if os.path.lexists(os.path.join(top, f, b".git")))


def _dropped(entries: IndexEntries, top: bytes, prefix: bytes, max_file_bytes: int) -> list[bool]:
    """For each of ``entries.paths``: whether the seed leaves it out (blocking)."""
    inside = prefix + b"/"
    out = [(bool(prefix) and not path.startswith(inside)) or size > max_file_bytes
           for path, size in zip(entries.paths, entries.sizes)]
    nested = tuple(n + b"/" for n in _nested_dirs(top, entries.paths))
    if nested:
        out = [gone or path.startswith(nested) for gone, path in zip(out, entries.paths)]
    return out


def read_user_index(user_index: bytes) -> tuple[bytes, tuple[int, int]] | None:
    """The bytes of the user's index (with git's checksum) and its (atime,
    mtime) in nanoseconds, None when it cannot be read (blocking)."""
    try:
        # The user's repository is the agent's to change too: a FIFO there is refused, not waited on.
        with os.fdopen(open_regular(user_index, follow_symlinks=True), "rb") as f:
            st = os.fstat(f.fileno())
            data = f.read()
    except OSError:
        return None
    if len(data) >= 32 and data[-20:] == bytes(20):
        # A newer git's ``index.skipHash`` leaves the checksum out; an older one refuses such a file.
        data = data[:-20] + hashlib.sha1(data[:-20]).digest()  # noqa: S324 - git's index checksum
    return data, (st.st_atime_ns, st.st_mtime_ns)


PINNED = b"index.agentd-pinned"


def sweep(folder: bytes, git_dir: bytes) -> None:
    """Remove what a seeded capture cut off (a killed daemon) left in the
    shadow: the pinned index copy and the ignore-files mirror (blocking; a
    few ``lstat`` calls when there is nothing)."""
    try:
        os.unlink(os.path.join(git_dir, PINNED))
    except FileNotFoundError:
        pass
    mirror = os.path.join(folder, MIRROR)
    if os.path.lexists(mirror):
        remove_mirror(mirror)


def pin(git_dir: bytes, data: bytes) -> bytes:
    """Write ``data`` (the user's index as read) as a file of the shadow, for
    git commands that must see exactly what the seed saw (blocking)."""
    path = os.path.join(git_dir, PINNED)
    with open(path, "wb") as f:
        f.write(data)
    return path


def plan(data: bytes, times: tuple[int, int], top: bytes, prefix: bytes, max_file_bytes: int) -> SeedPlan | None:
    """Decide the seed from the user's index ``data`` (``read_user_index``;
    blocking); None when it cannot seed (an index this module cannot read)."""
    try:
        entries = read_index(data)
    except UnreadableIndex:
        return None
    dropped = _dropped(entries, top, prefix, max_file_bytes)
    ignore_files = [p for p in (*entries.paths, *entries.flagged) if p.endswith(b".gitignore") and is_ignore_file(p)]
    extra = [*dict.fromkeys(entries.flagged), *entries.gitlinks]
    count = sum(dropped)
    starts = [start for start, _ in entries.spans]
    if count:
        kept = [p for p, gone in zip(entries.paths, dropped) if not gone]
        starts = [s for s, gone in zip(starts, dropped) if not gone]
    else:
        kept = entries.paths
    if count + len(extra) <= GIT_DROP_LIMIT:
        return SeedPlan(data, times, [p for p, gone in zip(entries.paths, dropped) if gone] + extra, entries.trees,
                        kept, starts, data, ignore_files)
    try:
        cut = filtered(data, entries, [i for i, gone in enumerate(dropped) if not gone])
    except UnreadableIndex:
        return None
    return SeedPlan(cut, times, paths=kept, starts=starts, source=data, ignore_files=ignore_files)


def install(git_dir: bytes, seed_plan: SeedPlan) -> None:
    """Write the planned index as the shadow's (blocking; atomic)."""
    final = os.path.join(git_dir, b"index")
    temp = final + b".agentd-seed"
    with open(temp, "wb") as f:
        f.write(seed_plan.index)
    os.utime(temp, ns=seed_plan.times)
    os.replace(temp, final)


def can_seed(shadow: Shadow) -> bool:
    """Whether a capture now would seed: the shadow has no index yet and the
    workspace is in a SHA-1 repository whose object directory git can be
    given as an alternate."""
    layout = shadow.layout
    objects = layout.user_objects
    if layout.user_index is None or objects is None or b":" in objects or objects.startswith(b'"'):
        return False
    return not os.path.lexists(os.path.join(shadow.git_dir, b"index")) and os.path.isdir(objects)


def would_seed(shadow: Shadow) -> bool:
    """``can_seed``, looked up here at each call (tests and benchmarks turn seeding off on this module)."""
    return can_seed(shadow)


async def seed(shadow: Shadow, max_file_bytes: int, read: tuple[bytes, tuple[int, int]] | None = None
               ) -> SeedPlan | None:
    """Make the shadow's index a copy of the user's (see the module's
    docstring; ``read``: its bytes as ``read_user_index`` gave them, else
    read here), under the workspace's locks; what it seeded, None if it did not."""
    found = await prepare(shadow, max_file_bytes, read)
    if found is not None:
        await apply(shadow, found)
    return found


async def prepare(shadow: Shadow, max_file_bytes: int, read: tuple[bytes, tuple[int, int]] | None = None
                  ) -> SeedPlan | None:
    """``seed``'s plan (nothing written yet); None: no seed."""
    if not can_seed(shadow):
        return None
    layout = shadow.layout
    assert layout.user_index is not None and layout.user_objects is not None  # can_seed
    if read is None:
        read = await trio.to_thread.run_sync(read_user_index, layout.user_index)
        if read is None:
            return None
    return await trio.to_thread.run_sync(plan, read[0], read[1], layout.top, layout.prefix, max_file_bytes)


async def apply(shadow: Shadow, found: SeedPlan) -> None:
    """``seed``'s writes: borrow the user's objects, install the planned index, drop what it leaves out."""
    assert shadow.layout.user_objects is not None  # can_seed
    shadow.borrow(shadow.layout.user_objects)  # recorded before any checkpoint can need it
    await trio.to_thread.run_sync(install, shadow.git_dir, found)
    shadow.index_tree = None
    if found.drop:
        await shadow.run(["update-index", "--force-remove", "-z", "--stdin"],
                         stdin=b"".join(p + b"\0" for p in found.drop), writes=True)


async def copy_trees(shadow: Shadow, seeded: SeedPlan) -> None:
    """Copy the trees the seeded index's cache tree names into the shadow
    (one pack): ``write-tree`` takes a cached tree as it is only if the
    shadow has its object (it cannot look in the user's store, see
    ``Shadow._set_envs``). It reads objects only, so it runs beside the
    capture's listing; ``write-tree`` waits for it."""
    if seeded.trees:
        await shadow.run(["pack-objects", "-q", os.path.join(shadow.git_dir, b"objects", b"pack", b"pack")],
                         stdin="".join(t + "\n" for t in seeded.trees).encode(), ok=(0, 128))

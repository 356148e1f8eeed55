"""Capture: the workspace as it is now, as a shadow commit under a create-only
ref (CHECKPOINTS.md recipe b8).

1. ``diff-files --name-only`` (tracked files whose status changed, content
   or not: a ``chmod`` shows there) beside ``ls-files -z -t -o
   --exclude-standard`` (new files, and ``path/`` for each nested
   repository) list what differs from the shadow's persistent index. A
   small workspace (``SMALL_TREE``) is listed by one ``ls-files -c -m -d
   -o`` and a Python read of every tracked file's mode
   (``_small_listing``) — or, when its last capture left a ``quiet``
   snapshot and every folder still reads as it did, by an ``lstat`` of its
   stored files alone, without git (``_quiet_listing``); a seeded first
   capture by ``ls-files -o`` and one Python ``lstat`` of every seeded file
   (``_seeded``, ``seedscan``).
2. Python sorts it (``classify``): nested repositories are excluded and
   reported; files over the size cap, unreadable or special files are skipped
   and reported (and dropped from the index if they were in it); tracked paths
   that became a directory or lie behind a symlink are dropped from the index.
3. When the ignore rules changed, tracked files they now ignore are dropped too.
4. ``update-index --add --remove --replace -z --stdin`` with the kept paths.
5. ``write-tree`` (``--prefix`` = the workspace; skipped when the index is
   untouched since the last one) and the summary, ``diff --raw --numstat -z
   -M`` from the base: at the same time when the index changed (``--cached``:
   the base against the index), else only when the tree differs from the
   base's.
6. The modes of the stored files and folders (``modes``): the previous
   capture's, updated with the files step 2 lstat-ed, while the index is the
   one that capture left; otherwise (a first capture in this process, a
   restore or another process changed the index) read from disk for every
   stored file.
7. The commit object (its message ends with the modes) and the create-only
   ref ``REF``, written by Python in a worker thread (``objects``: two git
   spawns fewer): no change, modes included, reuses the base's commit.

At a run end with changes that is five git spawns, three in a row
(``diff-files`` beside ``ls-files``, ``update-index``, then ``write-tree``
beside ``diff``); four in a small workspace (one ``ls-files`` first), three
when its snapshot holds; none when nothing changed and the snapshot holds.

Nested repositories are never modified: git runs with optional locks off and
never looks inside them (their ``.git/index`` keeps its mtime).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import trio

from .errors import CheckpointExistsError, GitCommandError, UnknownCheckpointError
from .modes import Modes
from .modes import scan as scan_modes
from .modes import update as update_modes
from .objects import commit_and_ref
from .objects import supported as objects_supported
from .names import exact, exact_map, shown
from .layout import Layout
from .paths import PathGuard
from .quiet import Snapshot, Status, folders_now, settled, walk
from .quiet import status as status_of
from .quiet import unseen_by_git
from .rawdiff import file_changes
from .refs import ZERO_OID, check_commitish, check_ref
from .results import CaptureResult, CheckpointSummary, FileChange, SkippedFile, SkipReason
from .seed import SeedPlan
from .seed import apply as apply_seed
from .seed import copy_trees, pin, read_user_index, would_seed
from .seed import prepare as prepare_seed
from .rulesmirror import MIRROR
from .rulesmirror import NAME as IGNORE_FILE
from .rulesmirror import is_ignore_file
from .rulesmirror import make as make_mirror
from .rulesmirror import remove as remove_mirror
from .seedscan import scan as seed_scan
from .seedscan import scan_tracked
from .shadow import Shadow


T = TypeVar("T")

#: awaited before a capture makes its ref (``capture``'s ``before_ref``)
BeforeRef = Callable[[], Awaitable[None]]

#: blocking work on at most this many paths (a few dozen ``lstat`` calls) runs
#: on the event loop: a worker thread's handoff would cost more CPU than it
BLOCKING_INLINE = 64
#: a workspace whose index holds at most this many files is listed in one
#: git spawn (``_small_listing``): below it, reading every file's mode in
#: Python costs less than a second spawn
SMALL_TREE = 256


@dataclass
class Sorted:
    """The listing of step 1, sorted by ``classify`` (work-tree-relative paths)."""

    #: for ``update-index --add --remove --replace``
    keep: list[bytes] = field(default_factory=list)
    #: for ``update-index --force-remove``
    drop: list[bytes] = field(default_factory=list)
    skipped: list[tuple[bytes, SkipReason, int | None]] = field(default_factory=list)
    nested: list[bytes] = field(default_factory=list)
    #: a ``.gitignore`` is among the changes
    ignore_rules_touched: bool = False
    #: ``st_mode`` of each kept regular file (work-tree-relative)
    modes: dict[bytes, int] = field(default_factory=dict)
    #: listed paths that are gone from disk
    gone: list[bytes] = field(default_factory=list)
    #: kept regular files whose status changed at or after ``started`` − 1 s (see ``modes.recent``)
    recent: list[bytes] = field(default_factory=list)
    #: when the listing began (``time.time()``)
    started: float = 0.0


def parse_listing(out: bytes, tracked: bytes = b"") -> dict[bytes, bool]:
    """``ls-files -z -t`` output as {path: tracked}, with the tracked paths
    of ``diff-files --name-only -z`` output (``tracked``); a path listed
    twice appears once."""
    entries: dict[bytes, bool] = dict.fromkeys(filter(None, tracked.split(b"\0")), True)
    for token in out.split(b"\0"):
        if token:
            entries[token[2:]] = entries.get(token[2:], False) or token[:1] != b"?"
    return entries


async def list_changes(shadow: Shadow) -> dict[bytes, bool]:
    """Step 1: the changed paths, {path: tracked} (two git spawns at once)."""
    spec = shadow.layout.pathspec()
    out: dict[str, bytes] = {}

    async def tracked() -> None:
        out["tracked"] = (await shadow.run(["diff-files", "--name-only", "-z", "--", *spec])).stdout

    async def others() -> None:
        out["others"] = (await shadow.run(["ls-files", "-z", "-t", "-o", "--exclude-standard", "--", *spec])).stdout

    await both(tracked, others)
    return parse_listing(out["others"], out["tracked"])


@dataclass
class Looked:
    """What a small workspace's listing saw besides the listing (for ``quiet``)."""

    #: the ``lstat`` of every file the index held (workspace-relative), read before ``update-index``
    files: dict[bytes, os.stat_result]
    #: the status of every folder, when the listing read them (``folders_now``)
    folders: dict[bytes, Status] | None = None
    #: listed files git would take as unchanged (``quiet.unseen_by_git``; work-tree-relative)
    forced: list[bytes] = field(default_factory=list)

    def force_unseen(self, layout: Layout, before: Mapping[bytes, Status], entries: dict[bytes, bool]) -> None:
        """List and force the files whose status changed since ``before`` in a way git misses."""
        for path, st in self.files.items():
            old = before.get(path)
            if old is not None and unseen_by_git(old, status_of(st)):
                entries[layout.to_top(path)] = True
                self.forced.append(layout.to_top(path))


def statuses(looked: Looked) -> dict[bytes, Status]:
    """The ``quiet.status`` of each file ``looked`` read."""
    return {path: status_of(st) for path, st in looked.files.items()}


async def _small_listing(shadow: Shadow, since: float
                         ) -> tuple[dict[bytes, bool], tuple[Modes, set[bytes]], Looked]:
    """Step 1 of a small workspace (``SMALL_TREE``) in one git spawn
    instead of two: ``ls-files -c -m -d -o`` lists the tracked files, those
    whose content or exec bit changed, the deleted and the untracked ones;
    Python reads every tracked file's mode (``seedscan.scan_tracked``: a
    ``chmod`` that leaves git's 644/755 alone shows in no ``ls-files``) and
    lists the files behind a folder that is no longer one. Returns the
    listing ({path: tracked}), the tracked files' modes and recent files,
    and their ``lstat``."""
    layout = shadow.layout
    out = (await shadow.run(["ls-files", "-z", "-t", "-c", "-m", "-d", "-o", "--exclude-standard", "--",
                             *layout.pathspec()])).stdout
    entries: dict[bytes, bool] = {}
    tracked: list[bytes] = []
    for token in out.split(b"\0"):
        tag, path = token[:1], token[2:]
        if tag == b"?":
            entries.setdefault(path, False)
        elif tag in (b"C", b"R"):  # changed, removed
            entries[path] = True
        elif token:
            tracked.append(path)
    paths = [layout.from_top(p) for p in tracked] if layout.prefix else tracked
    looked = Looked({})
    modes, fresh, unreachable = await blocking(len(paths), scan_tracked, layout.workspace, paths, since, looked.files)
    for position in unreachable:
        entries[tracked[position]] = True
    if shadow.seen is not None and shadow.seen[0] == shadow.index_stat():
        looked.force_unseen(layout, shadow.seen[1], entries)
    shadow.tracked_count = len(tracked) + sum(1 for known in entries.values() if not known)
    return entries, (modes, fresh), looked


async def _quiet_listing(shadow: Shadow, snapshot: Snapshot | None, excludes: str, since: float
                         ) -> tuple[dict[bytes, bool], tuple[Modes, set[bytes]], Looked] | None:
    """Step 1 of a small workspace without git, when its last capture's
    ``snapshot`` still holds: every folder reads as it did, so the stored
    files are the only candidates; those whose status changed are listed (as
    ``_small_listing`` would list them). None: list with git."""
    layout = shadow.layout
    if (snapshot is None or snapshot.index_stat != shadow.index_stat() or snapshot.excludes != excludes
            or snapshot.nested != tuple(shadow.state.nested)):
        return None
    folders = await blocking(len(snapshot.folders), folders_now, layout.workspace, snapshot.folders)
    if folders != snapshot.folders:
        return None
    paths = sorted(snapshot.files)
    looked = Looked({}, folders)
    modes, fresh, unreachable = await blocking(len(paths), scan_tracked, layout.workspace, paths, since, looked.files)
    if unreachable or len(looked.files) != len(paths):
        return None
    changed = [p for p in paths if status_of(looked.files[p]) != snapshot.files[p]]
    if any(os.path.basename(p) == IGNORE_FILE for p in changed):
        return None  # the rules changed: what they ignored may be the workspace's now
    entries = {layout.to_top(p): True for p in changed}
    looked.force_unseen(layout, snapshot.files, entries)
    return entries, (modes, fresh), looked


def _snapshot(shadow: Shadow, entries: dict[bytes, bool], found: Sorted, looked: Looked,
              excludes: str) -> Snapshot | None:
    """The ``Snapshot`` this capture leaves (its ``index_stat`` is set
    once the capture is done), if it may: a small workspace where no file was
    added, removed, skipped or dropped and no ignore file changed, whose
    folders (read now if the listing did not) and files were all last changed
    ``quiet.MARGIN`` before the capture began (blocking)."""
    if found.gone or found.drop or found.skipped or found.nested or found.ignore_rules_touched or not all(entries.values()):
        return None
    layout = shadow.layout
    folders = looked.folders
    if folders is None:
        nested = {layout.from_top(p) for p in shadow.state.nested if not layout.prefix or p.startswith(layout.prefix + b"/")}
        walked = walk(layout.workspace, nested)
        if walked is None or not all(rule in looked.files for rule in walked[1]):
            return None  # too many folders, or an ignore file that is not stored
        folders = walked[0]
    files = statuses(looked)
    if not (settled(folders, found.started) and settled(files, found.started)):
        return None
    return Snapshot(folders=folders, files=files, index_stat=None, excludes=excludes,
                    nested=tuple(shadow.state.nested))


def classify(top: bytes, prefix: bytes, entries: dict[bytes, bool], max_file_bytes: int, started: float = 0.0) -> Sorted:
    """Step 2 (blocking: lstat calls; run it in a worker thread)."""
    out = Sorted(started=started)
    guard = PathGuard(top, prefix)
    for path, tracked in entries.items():
        if os.path.basename(path.rstrip(b"/")) == b".gitignore":
            out.ignore_rules_touched = True
        if path.endswith(b"/"):
            out.nested.append(path[:-1])
            continue
        status = guard.of(path)
        if status is not None:
            if status[0] == "nested" and status[1] not in out.nested:
                out.nested.append(status[1])
            if tracked:
                out.drop.append(path)
            continue
        try:
            st = os.lstat(os.path.join(top, path))
        except (FileNotFoundError, NotADirectoryError):
            out.keep.append(path)  # deleted: --remove takes it out of the index
            out.gone.append(path)
            continue
        reason: SkipReason | None = None
        if stat.S_ISDIR(st.st_mode):
            if tracked:
                out.drop.append(path)  # a file became a directory; its files are listed on their own
            continue
        if stat.S_ISREG(st.st_mode):
            if st.st_size > max_file_bytes:
                reason = "too_large"
            elif not os.access(os.path.join(top, path), os.R_OK):
                reason = "unreadable"
        elif not stat.S_ISLNK(st.st_mode):
            reason = "unsupported_type"
        if reason is None:
            out.keep.append(path)
            if stat.S_ISREG(st.st_mode):
                out.modes[path] = st.st_mode
                if st.st_ctime >= out.started - 1.0:
                    out.recent.append(path)
        else:
            out.skipped.append((path, reason, st.st_size if reason == "too_large" else None))
            if tracked:
                out.drop.append(path)
    return out


def skipped_file(path: bytes, reason: SkipReason, size: int | None = None) -> SkippedFile:
    """The summary entry of a workspace-relative ``path`` left out of a checkpoint."""
    return SkippedFile(path=shown(path), reason=reason, size=size, path_bytes=exact(path))


def _z(paths: list[bytes]) -> bytes:
    return b"".join(p + b"\0" for p in paths)


def _under(path: bytes, dirs: list[bytes]) -> bool:
    return any(path.startswith(d + b"/") for d in dirs)


async def capture(shadow: Shadow, ref: str, *, base: str | None, max_file_bytes: int,
                  message: str | None = None, before_ref: BeforeRef | None = None) -> CaptureResult:
    """Capture the workspace of ``shadow`` (its locks held) as ``ref``.

    Args:
        shadow: the opened shadow.
        ref: the new, create-only ref.
        base: the commit to diff against and to use as parent; None for a
            first baseline (no diff is computed: the summary counts nothing).
        max_file_bytes: files larger than this are skipped and reported.
        message: the commit message (default: the ref).
        before_ref: awaited after the workspace is read and its objects
            written, before the ref is made: what must be durable before a
            checkpoint exists (the run's outbox entry) can be committed
            meanwhile. If it raises, no ref is made and the error propagates.

    Raises:
        CheckpointExistsError: ``ref`` already exists.
        GitCommandError: a git command failed.
    """
    check_ref(ref)
    if base is not None:
        check_commitish(base)
    if os.path.lexists(os.path.join(shadow.git_dir, os.fsencode(ref))):
        raise CheckpointExistsError(f"checkpoint {ref} already exists")
    staged = await stage(shadow, max_file_bytes)
    tree, files, now_modes = await tree_and_modes(shadow, base, staged)
    commit = await _commit_capture(shadow, ref, tree, base, files, now_modes, message, before_ref)
    if staged.snapshot is not None:
        shadow.quiet = dataclasses.replace(staged.snapshot, index_stat=shadow.index_stat())
    if staged.looked is not None:
        seen = staged.snapshot.files if staged.snapshot is not None else statuses(staged.looked)
        shadow.seen = shadow.index_stat(), dict(seen)
    return CaptureResult(ref=ref, commit=commit, tree=tree, base=base, changed=base is None or bool(files),
                         summary=_summary(shadow, files, staged.skipped), files=files)


@dataclass
class Staged:
    """What steps 1–4 put in the shadow index, and left out of it."""

    found: Sorted
    #: work-tree-relative paths taken out of the index
    drop: list[bytes]
    skipped: list[SkippedFile]
    #: the index file's stat before this capture touched it (``Shadow.index_stat``)
    index_before: tuple[int, int, int] | None
    #: the modes of a seeded index's files and the recent ones (``_seeded_listing``), None without a seed
    seed_modes: tuple[Modes, set[bytes]] | None = None
    #: the workspace as the next capture may trust it (``quiet``), once this one is done
    snapshot: Snapshot | None = None
    #: what a small workspace's listing saw (its files' status becomes ``Shadow.seen``)
    looked: Looked | None = None


async def stage(shadow: Shadow, max_file_bytes: int) -> Staged:
    """Steps 1–4: list and sort what changed, drop what the ignore rules now
    ignore, and update the shadow index (and its state) to match."""
    layout, state = shadow.layout, shadow.state
    # Nested repositories that are gone are no longer excluded: their files are the workspace's now.
    state.nested = [p for p in state.nested if os.path.lexists(os.path.join(layout.top, p, b".git"))]
    fingerprint = shadow.refresh_excludes()
    started = time.time()
    seeded = await _seeded(shadow, max_file_bytes, started - 1.0)
    index_before = shadow.index_stat()
    forced: list[bytes] = []
    ignored: bytes | None = None
    seed_modes: tuple[Modes, set[bytes]] | None = None
    looked: Looked | None = None
    snapshot, shadow.quiet = shadow.quiet, None  # a capture that fails leaves no snapshot behind
    if seeded is not None:
        _, entries, ignored, seed_modes, forced = seeded
        shadow.tracked_count = len(seeded[0].paths)
    elif shadow.tracked_count is not None and shadow.tracked_count <= SMALL_TREE:
        entries, seed_modes, looked = (await _quiet_listing(shadow, snapshot, fingerprint, started - 1.0)
                                       or await _small_listing(shadow, started - 1.0))
        forced = looked.forced
    else:
        entries = await list_changes(shadow)
    found = await blocking(len(entries), classify, layout.top, layout.prefix, entries, max_file_bytes, started)
    new_nested = [p for p in found.nested if p not in state.nested]
    if new_nested:
        state.nested.extend(new_nested)
        fingerprint = shadow.refresh_excludes()
    drop = list(found.drop)
    skipped = [skipped_file(layout.from_top(p), r, s) for p, r, s in found.skipped]
    if ignored is not None:
        # A seed's ignored files came from the user's index, not from a checkpoint: nothing to report.
        drop.extend(filter(None, ignored.split(b"\0")))
    elif fingerprint != state.excludes_fingerprint or found.ignore_rules_touched:
        await _drop_ignored(shadow, drop, skipped)
    await _update_index(shadow, found.keep, drop, forced)
    if state.excludes_fingerprint != fingerprint:
        state.excludes_fingerprint = fingerprint
        shadow.save_state()
    elif new_nested:
        shadow.save_state()
    after = None
    if looked is not None and not (drop or skipped or new_nested):
        after = await blocking(len(looked.files), _snapshot, shadow, entries, found, looked, fingerprint)
    return Staged(found, drop, skipped, index_before, seed_modes, after, looked)


async def _seeded(shadow: Shadow, max_file_bytes: int, since: float
                  ) -> tuple[SeedPlan, dict[bytes, bool], bytes, tuple[Modes, set[bytes]], list[bytes]] | None:
    """Steps 1 and 3 of a seeded capture (None: no seed), each part as soon
    as what it needs is there:

    - step 3's listing, the tracked files the ignore rules ignore, on a copy
      of the very bytes of the user's index the seed reads (a ``git add`` by
      the user meanwhile changes neither): at the repository's top, once the
      untracked ignore files are known, in a work tree of the ignore files
      alone (``rulesmirror``: git ``lstat``-s every tracked file for it);
      below the top, at once, in the real one;
    - once the seed is planned: one ``lstat`` of every seeded file
      (``seedscan``: their modes, and which may have changed since the
      user's git recorded them, in place of ``diff-files``, which would walk
      them a second time);
    - once the seeded index is installed: the untracked files (``ls-files
      -o``) and the copy of its cache tree's trees (``seed.copy_trees``).

    Returns the seed, the listing ({path: tracked}), the ignored files, the
    modes and recent files, and the listed files ``update-index`` would take
    as unchanged (``seedscan``)."""
    layout = shadow.layout
    if not would_seed(shadow):
        return None
    assert layout.user_index is not None  # can_seed
    read = await trio.to_thread.run_sync(read_user_index, layout.user_index)
    if read is None:
        return None
    spec = layout.pathspec()
    pinned = await trio.to_thread.run_sync(pin, shadow.git_dir, read[0])
    out: dict[str, object] = {}

    async def rules(work_tree: bytes | None = None) -> None:
        # The user's index also holds what the seed drops (dropped again: harmless).
        found = await shadow.run(["ls-files", "-z", "-c", "-i", "--exclude-standard", "--", *spec], index=pinned,
                                 work_tree=work_tree, ok=(0, 128))
        out["ignored"] = found.stdout if found.returncode == 0 else None

    async def mirrored_rules(seeded: SeedPlan, others: bytes) -> None:
        # At the top: against a mirror of the ignore files (``rulesmirror``), once the untracked ones are known.
        untracked = [t[2:] for t in others.split(b"\0") if t.endswith(IGNORE_FILE) and is_ignore_file(t[2:])]
        mirror = os.path.join(shadow.dir, MIRROR)
        await trio.to_thread.run_sync(remove_mirror, mirror)
        await trio.to_thread.run_sync(make_mirror, layout.top, [*seeded.ignore_files, *untracked], mirror)
        try:
            await rules(mirror)
        finally:
            await trio.to_thread.run_sync(remove_mirror, mirror)

    async def seeding() -> None:
        seeded = out["seeded"] = await prepare_seed(shadow, max_file_bytes, read)
        if seeded is None:
            return

        async def installed() -> None:
            await apply_seed(shadow, seeded)

            async def others() -> None:
                found = out["others"] = (await shadow.run(["ls-files", "-z", "-t", "-o", "--exclude-standard", "--",
                                                           *spec])).stdout
                if not layout.prefix:
                    await mirrored_rules(seeded, found)

            async def trees() -> None:
                await copy_trees(shadow, seeded)

            await both(others, trees)

        async def scanning() -> None:
            paths = [layout.from_top(p) for p in seeded.paths] if layout.prefix else seeded.paths
            out["scan"] = await trio.to_thread.run_sync(seed_scan, layout.workspace, paths, seeded.source,
                                                        seeded.starts, seeded.times[1], since)

        await both(installed, scanning)

    async def early_rules() -> None:
        if layout.prefix:  # below the top: the ignore files above the workspace apply too, on the real work tree
            await rules()

    out["ignored"] = None
    try:
        await both(early_rules, seeding)
    finally:
        os.unlink(pinned)
    seeded = cast("SeedPlan | None", out["seeded"])
    if seeded is None:
        return None
    ignored = cast("bytes | None", out["ignored"])
    if ignored is None:
        ignored = (await shadow.run(["ls-files", "-z", "-c", "-i", "--exclude-standard", "--", *spec])).stdout
    modes, recent, changed, forced = cast("tuple[Modes, set[bytes], list[int], list[int]]", out["scan"])
    tracked = b"".join(seeded.paths[i] + b"\0" for i in changed)
    return (seeded, parse_listing(cast(bytes, out["others"]), tracked), ignored, (modes, recent),
            [seeded.paths[i] for i in forced])


async def _drop_ignored(shadow: Shadow, drop: list[bytes], skipped: list[SkippedFile]) -> None:
    """Step 3: tracked files the ignore rules now ignore leave the shadow
    (added to ``drop``, and reported in ``skipped`` unless a nested
    repository holds them): ignored files are never stored."""
    layout, nested = shadow.layout, shadow.state.nested
    ignored = await shadow.run(["ls-files", "-z", "-c", "-i", "--exclude-standard", "--", *layout.pathspec()])
    for path in filter(None, ignored.stdout.split(b"\0")):
        drop.append(path)
        if not _under(path, nested):
            skipped.append(skipped_file(layout.from_top(path), "ignored"))


async def _update_index(shadow: Shadow, keep: list[bytes], drop: list[bytes],
                        forced: Sequence[bytes] = ()) -> None:
    """Step 4: ``drop`` out of the index, ``keep`` into it (added, updated or
    removed); ``forced`` (kept paths git would take as unchanged) out first,
    so that it reads them again."""
    if drop or keep:
        shadow.index_tree = None
    if drop or forced:
        await shadow.run(["update-index", "--force-remove", "-z", "--stdin"], stdin=_z([*drop, *forced]), writes=True)
    if drop:
        # A tracked file the ignore rules now ignore leaves the index even when it changed too.
        dropped = set(drop)
        keep = [p for p in keep if p not in dropped]
    if keep:
        await shadow.run(["update-index", "--add", "--remove", "--replace", "-z", "--stdin"], stdin=_z(keep),
                         writes=True)


async def tree_and_modes(shadow: Shadow, base: str | None, staged: Staged) -> tuple[str, list[FileChange], Modes]:
    """Steps 5 and 6 at once: the index's tree, what changed from ``base``,
    and the modes of what the index holds."""
    found_modes: list[Modes] = []
    found_tree: list[tuple[str, list[FileChange]]] = []

    async def tree_step() -> None:
        found_tree.append(await tree_and_changes(shadow, base))

    async def modes_step() -> None:
        found_modes.append(await modes_after(shadow, staged.found, staged.drop, staged.index_before,
                                             staged.seed_modes))

    await both(tree_step, modes_step)
    (tree, files), (now_modes,) = found_tree[0], found_modes
    shadow.remember_index_tree(tree)
    if base is not None and not files:
        shadow.trees[base] = tree  # nothing changed: the base's commit is this checkpoint's
    return tree, files, now_modes


async def _commit_capture(shadow: Shadow, ref: str, tree: str, base: str | None, files: list[FileChange],
                          now_modes: Modes, message: str | None, before_ref: BeforeRef | None = None) -> str:
    """Step 7: the checkpoint's commit (its message ends with the modes) under ``ref``."""
    # Nothing changed, modes included: the base's commit is this checkpoint's.
    unchanged = base is not None and not files and await shadow.commit_modes(base) == now_modes
    body = (message or ref).rstrip("\n") + "\n\n" + now_modes.encode().decode("ascii")
    if before_ref is not None:
        await before_ref()
    commit = await _commit_and_ref(shadow, ref, tree, base, body, reuse=base if unchanged else None)
    shadow.modes[commit] = now_modes
    shadow.remember_modes(now_modes)
    return commit


def _summary(shadow: Shadow, files: list[FileChange], skipped: list[SkippedFile]) -> CheckpointSummary:
    nested = [shadow.layout.from_top(p) + b"/" for p in shadow.state.nested]
    return CheckpointSummary(
        files_changed=len(files), insertions=sum(f.insertions for f in files),
        deletions=sum(f.deletions for f in files), skipped=skipped,
        nested_repos=[shown(p) for p in nested], path_bytes=exact_map(nested),
    )


async def modes_after(shadow: Shadow, found: Sorted, drop: list[bytes],
                      index_before: tuple[int, int, int] | None,
                      seed_modes: tuple[Modes, set[bytes]] | None = None) -> Modes:
    """Step 6: the modes of what the index now holds. The previous capture's
    modes updated with this capture's listing when the index is still the one
    it (or a restore since) left (its ``diff-files`` lists every file whose
    status changed since, a ``chmod`` included); else every stored file is
    read (``modes_now``)."""
    layout = shadow.layout
    since = found.started - 1.0  # git's seconds, and a margin for clocks that tick apart
    previous = None
    if seed_modes is not None:
        previous, shadow.modes_recent = seed_modes
    elif shadow.modes_index_stat == index_before is not None:
        previous = shadow.modes_current
    if previous is None or not previous.recorded:
        now, shadow.modes_recent = await modes_now(shadow, since)
        return now
    dropped = set(drop)
    changed = {layout.from_top(p): m for p, m in found.modes.items() if p not in dropped}
    removed = [layout.from_top(p) for p in (*drop, *found.gone)]
    work = len(changed) + len(removed) + len(shadow.modes_recent) + len(previous.folders)
    updated, recent = await blocking(work, update_modes, previous, layout.workspace, changed, removed,
                                     shadow.modes_recent, since)
    shadow.modes_recent = recent | {layout.from_top(p) for p in found.recent}
    return updated


async def modes_now(shadow: Shadow, since: float) -> tuple[Modes, set[bytes]]:
    """The modes of the files the index holds for the workspace (its tracked
    files, as just updated) and of their folders, read from disk now, and the
    files whose status changed since ``since``."""
    layout = shadow.layout
    listed = await shadow.run(["ls-files", "-z", "-c", "--", *layout.pathspec()])
    paths = [layout.from_top(p) for p in listed.stdout.split(b"\0") if p]
    shadow.tracked_count = len(paths)
    return await trio.to_thread.run_sync(scan_modes, layout.workspace, paths, since)


async def tree_and_changes(shadow: Shadow, base: str | None) -> tuple[str, list[FileChange]]:
    """Step 5: the index's tree and what changed from ``base`` (nothing for a
    first baseline). When the index changed and the workspace is the work
    tree's top, ``write-tree`` and the summary (``diff --cached``: the base
    against the index) run at once; otherwise the summary diffs the trees,
    and only when they differ."""
    cached = shadow.cached_index_tree()
    if cached is None and base is not None and not shadow.layout.prefix:
        box: list[str] = []
        files: list[FileChange] = []

        async def write() -> None:
            box.append(await write_tree(shadow))

        async def diff() -> None:
            files.extend(await summarize(shadow, base, cached_index=True))

        await both(write, diff)
        return box[0], files
    tree = cached or await write_tree(shadow)
    if base is None or shadow.trees.get(base) == tree:
        return tree, []
    return tree, await summarize(shadow, base, tree)


async def summarize(shadow: Shadow, base: str, tree: str | None = None, *, cached_index: bool = False) -> list[FileChange]:
    """``diff --raw --numstat -z -M`` from ``base`` to ``tree`` (or to the index).

    Raises:
        UnknownCheckpointError: ``base`` is not a commit of this shadow.
    """
    # ``diff --cached BASE`` shows BASE as the old side and the index as the new one.
    sides = ["--cached", base] if cached_index else [base, tree]
    diff = await shadow.run(["diff", "--raw", "--numstat", "-z", "-M", "--no-ext-diff", "--no-textconv", *sides],
                            ok=(0, 128))
    if diff.returncode != 0:
        raise UnknownCheckpointError(f"the base {base} is not a checkpoint of {os.fsdecode(shadow.layout.workspace)}")
    return file_changes(diff.stdout)


async def _commit_and_ref(shadow: Shadow, ref: str, tree: str, parent: str | None, message: str, *,
                          reuse: str | None) -> str:
    """Step 6: the commit (``reuse``: an existing one) and the create-only
    ref, written in a worker thread (``objects``); git does it for a
    repository whose object ids are not SHA-1."""
    if objects_supported(tree):
        commit = await trio.to_thread.run_sync(commit_and_ref, shadow.git_dir, ref, tree, parent, message, reuse)
    else:
        commit = reuse or await _commit(shadow, tree, parent, message)
        try:
            await shadow.run(["update-ref", ref, commit, ZERO_OID])
        except GitCommandError as exc:
            if "exists" in exc.stderr:
                raise CheckpointExistsError(f"checkpoint {ref} already exists") from exc
            raise
    shadow.trees[commit] = tree
    return commit


async def _commit(shadow: Shadow, tree: str, parent: str | None, message: str) -> str:
    args = ["commit-tree", tree, *(["-p", parent] if parent else []), "-m", message]
    commit = (await shadow.run(args, writes=True)).stdout.strip().decode()
    shadow.trees[commit] = tree
    return commit


async def blocking(size: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, blocking work on about ``size`` paths: in a worker
    thread, unless it is small (``BLOCKING_INLINE``)."""
    if size <= BLOCKING_INLINE:
        return fn(*args)
    return await trio.to_thread.run_sync(fn, *args)


async def both(first: Callable[[], Awaitable[None]], second: Callable[[], Awaitable[None]]) -> None:
    """Run two steps at once; the first error is raised as it is (not in an ExceptionGroup)."""
    errors: list[Exception] = []

    async def guarded(step: Callable[[], Awaitable[None]], scope: trio.CancelScope) -> None:
        try:
            await step()
        except Exception as exc:
            errors.append(exc)
            scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(guarded, first, nursery.cancel_scope)
        nursery.start_soon(guarded, second, nursery.cancel_scope)
    if errors:
        raise errors[0]


async def write_tree(shadow: Shadow) -> str:
    """The tree of the shadow index's workspace part (the empty tree when the
    workspace holds nothing that is stored)."""
    prefix = shadow.layout.prefix
    # Borrowing, git writes without seeing the user's objects (``Shadow._set_envs``), so it cannot check
    # that the entries it did not hash exist: they are the user's index's, read from its object store.
    args: list[str | bytes] = ["write-tree", *(["--missing-ok"] if shadow.borrowing else [])]
    if prefix:
        args.append(b"--prefix=" + prefix + b"/")
    result = await shadow.run(args, ok=(0, 128), writes=True)
    if result.returncode == 0:
        return result.stdout.strip().decode()
    if b"not found" not in result.stderr:
        raise GitCommandError(["write-tree"], result.returncode, result.stderr)
    return (await shadow.run(["mktree", "-z"], stdin=b"", writes=True)).stdout.strip().decode()

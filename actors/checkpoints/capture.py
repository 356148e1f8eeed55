"""Capture: the workspace as it is now, as a shadow commit under a create-only
ref (CHECKPOINTS.md recipe b8).

1. ``ls-files -z -t -m -d -o --exclude-standard`` lists what differs from the
   shadow's persistent index (and ``path/`` for each nested repository).
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
6. The commit object and the create-only ref ``REF``, written by Python in a
   worker thread (``objects``: two git spawns fewer): no change reuses the
   base's commit.

At a run end with changes that is four git spawns, three in a row
(``ls-files``, ``update-index``, then ``write-tree`` beside ``diff``).

Nested repositories are never modified: git runs with optional locks off and
never looks inside them (their ``.git/index`` keeps its mtime).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from . import modes, objects
from .errors import CheckpointExistsError, GitCommandError, UnknownCheckpointError
from .modes import Modes
from .names import exact, exact_map, shown
from .paths import PathGuard
from .rawdiff import file_changes
from .refs import ZERO_OID, check_commitish, check_ref
from .results import CaptureResult, CheckpointSummary, FileChange, SkippedFile, SkipReason
from .shadow import Shadow


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


def parse_listing(out: bytes) -> dict[bytes, bool]:
    """``ls-files -z -t`` output as {path: tracked}; a path both modified and
    deleted appears once."""
    entries: dict[bytes, bool] = {}
    for token in out.split(b"\0"):
        if token:
            entries[token[2:]] = entries.get(token[2:], False) or token[:1] != b"?"
    return entries


def classify(top: bytes, prefix: bytes, entries: dict[bytes, bool], max_file_bytes: int) -> Sorted:
    """Step 2 (blocking: lstat calls; run it in a worker thread)."""
    out = Sorted()
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
                  message: str | None = None) -> CaptureResult:
    """Capture the workspace of ``shadow`` (its locks held) as ``ref``.

    Args:
        shadow: the opened shadow.
        ref: the new, create-only ref.
        base: the commit to diff against and to use as parent; None for a
            first baseline (no diff is computed: the summary counts nothing).
        max_file_bytes: files larger than this are skipped and reported.
        message: the commit message (default: the ref).

    Raises:
        CheckpointExistsError: ``ref`` already exists.
        GitCommandError: a git command failed.
    """
    check_ref(ref)
    if base is not None:
        check_commitish(base)
    layout, state = shadow.layout, shadow.state
    if os.path.lexists(os.path.join(shadow.git_dir, os.fsencode(ref))):
        raise CheckpointExistsError(f"checkpoint {ref} already exists")
    # Nested repositories that are gone are no longer excluded: their files are the workspace's now.
    state.nested = [p for p in state.nested if os.path.lexists(os.path.join(layout.top, p, b".git"))]
    fingerprint = shadow.refresh_excludes()
    spec = layout.pathspec()
    listing = await shadow.run(["ls-files", "-z", "-t", "-m", "-d", "-o", "--exclude-standard", "--", *spec])
    entries = parse_listing(listing.stdout)
    found = await trio.to_thread.run_sync(classify, layout.top, layout.prefix, entries, max_file_bytes)
    new_nested = [p for p in found.nested if p not in state.nested]
    if new_nested:
        state.nested.extend(new_nested)
        fingerprint = shadow.refresh_excludes()
    drop = list(found.drop)
    skipped = [skipped_file(layout.from_top(p), r, s) for p, r, s in found.skipped]
    if fingerprint != state.excludes_fingerprint or found.ignore_rules_touched:
        # Tracked files the ignore rules now ignore leave the shadow: ignored files are never stored.
        ignored = await shadow.run(["ls-files", "-z", "-c", "-i", "--exclude-standard", "--", *spec])
        for path in filter(None, ignored.stdout.split(b"\0")):
            drop.append(path)
            if not _under(path, state.nested):
                skipped.append(skipped_file(layout.from_top(path), "ignored"))
    if drop or found.keep:
        shadow.index_tree = None
    if drop:
        await shadow.run(["update-index", "--force-remove", "-z", "--stdin"], stdin=_z(drop))
    if found.keep:
        await shadow.run(["update-index", "--add", "--remove", "--replace", "-z", "--stdin"], stdin=_z(found.keep))
    if state.excludes_fingerprint != fingerprint:
        state.excludes_fingerprint = fingerprint
        shadow.save_state()
    elif new_nested:
        shadow.save_state()

    found_modes: list[Modes] = []
    found_tree: list[tuple[str, list[FileChange]]] = []

    async def tree_step() -> None:
        found_tree.append(await tree_and_changes(shadow, base))

    async def modes_step() -> None:
        found_modes.append(await modes_now(shadow))

    await both(tree_step, modes_step)
    (tree, files), (now_modes,) = found_tree[0], found_modes
    shadow.remember_index_tree(tree)
    changed = base is None or bool(files)
    if base is not None and not files:
        shadow.trees[base] = tree  # nothing changed: the base's commit is this checkpoint's
    # Nothing changed, modes included: the base's commit is this checkpoint's.
    reuse = base if not changed and await shadow.commit_modes(base) == now_modes else None
    body = (message or ref).rstrip("\n") + "\n\n" + now_modes.encode().decode("ascii")
    commit = await _commit_and_ref(shadow, ref, tree, base, body, reuse=reuse)
    shadow.modes[commit] = now_modes
    nested = [layout.from_top(p) + b"/" for p in state.nested]
    summary = CheckpointSummary(
        files_changed=len(files), insertions=sum(f.insertions for f in files),
        deletions=sum(f.deletions for f in files), skipped=skipped,
        nested_repos=[shown(p) for p in nested], path_bytes=exact_map(nested),
    )
    return CaptureResult(ref=ref, commit=commit, tree=tree, base=base, changed=changed, summary=summary, files=files)


async def modes_now(shadow: Shadow) -> Modes:
    """The modes of the files the index holds for the workspace (its tracked
    files, as just updated) and of their folders, read from disk now."""
    layout = shadow.layout
    listed = await shadow.run(["ls-files", "-z", "-c", "--", *layout.pathspec()])
    paths = [layout.from_top(p) for p in listed.stdout.split(b"\0") if p]
    return await trio.to_thread.run_sync(modes.scan, layout.workspace, paths)


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

        async def tree() -> None:
            box.append(await write_tree(shadow))

        async def summary() -> None:
            files.extend(await summarize(shadow, base, cached_index=True))

        await both(tree, summary)
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
    if objects.supported(tree):
        commit = await trio.to_thread.run_sync(objects.commit_and_ref, shadow.git_dir, ref, tree, parent, message, reuse)
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
    commit = (await shadow.run(args)).stdout.strip().decode()
    shadow.trees[commit] = tree
    return commit


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
    result = await shadow.run(["write-tree", *([b"--prefix=" + prefix + b"/"] if prefix else [])], ok=(0, 128))
    if result.returncode == 0:
        return result.stdout.strip().decode()
    if b"not found" not in result.stderr:
        raise GitCommandError(["write-tree"], result.returncode, result.stderr)
    return (await shadow.run(["mktree", "-z"], stdin=b"")).stdout.strip().decode()

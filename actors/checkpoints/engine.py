"""``CheckpointEngine``: the one object the daemon holds to capture, diff and
restore workspace checkpoints, each workspace in its own shadow repository
under ``root`` and serialized on that workspace only."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager

from .capture import BeforeRef
from .capture import capture as capture_workspace
from .diff import diff as diff_checkpoints
from .restore import apply as apply_restore
from .restore import prepare as prepare_restore
from .restore import sweep_interrupted
from .seed import sweep as sweep_seed
from .gitproc import Git
from .layout import default_refused, discover, nearest_dotgit, resolve_workspace
from .locks import WorkspaceLocks
from .refs import PREFIX, check_ref
from .results import CaptureResult, DiffResult, RestoreResult
from .shadow import Shadow

#: files larger than this are skipped (and reported) unless configured otherwise
DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
#: patch bytes ``diff`` returns unless asked otherwise
DEFAULT_MAX_PATCH_BYTES = 1024 * 1024

PathLike = str | bytes | os.PathLike[str]


class CheckpointEngine:
    """Shadow-git checkpoints of workspaces.

    Args:
        root: the folder holding one shadow per workspace (``<data>/checkpoints``).
        git: the git executable (default: ``git`` on ``PATH``).
        max_file_bytes: files over this size are skipped and reported.
        refused: folders that are never a checkpointed workspace (default:
            ``/``, ``$HOME``, ``~/Desktop``, ``~/Documents``, ``~/Downloads``);
            ``()`` refuses none.
        lock_timeout: seconds to wait for another process's lock on a workspace.
        fsync: a restore fsyncs each file before it replaces the old one.

    Every method may raise ``GitUnavailableError`` (git missing or older than
    2.32), ``WorkspaceError``, ``WorkspaceRefusedError``,
    ``ShadowMismatchError``, ``WorkspaceBusyError`` or ``GitCommandError``, all
    ``CheckpointError`` with a ``reason`` code.
    """

    def __init__(self, root: PathLike, *, git: str | None = None, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                 refused: Iterable[PathLike] | None = None, lock_timeout: float = 60.0, fsync: bool = False) -> None:
        self.root = os.path.abspath(os.fsencode(root))
        self.git = Git(git)
        self.max_file_bytes = max_file_bytes
        self.refused = [os.fsencode(p) for p in (default_refused() if refused is None else refused)]
        self.locks = WorkspaceLocks(lock_timeout)
        self.fsync = fsync
        self._shadows: dict[bytes, Shadow] = {}
        #: called with the workspace's real path after each capture (the
        #: compactor's count; must not block)
        self.on_capture: Callable[[bytes], None] | None = None
        #: called with it after a capture seeded from the user's repository
        #: (``seed``): its compaction copies the borrowed objects (must not block)
        self.on_seed: Callable[[bytes], None] | None = None

    def workspace_key(self, workspace: PathLike) -> bytes:
        """The workspace's real path, checked (no git run).

        Raises:
            WorkspaceError, WorkspaceRefusedError.
        """
        return resolve_workspace(workspace, self.refused)

    @asynccontextmanager
    async def locked(self, workspace: PathLike) -> AsyncIterator[LockedWorkspace]:
        """Hold the workspace's locks (in-process and flock) for the block, so
        that a larger step (an ownership change, a capture and what the caller
        records with it) is atomic for this workspace. Use the yielded object's
        methods inside: the engine's own methods would wait for the lock
        (trio refuses to re-acquire it from the same task)."""
        real = self.workspace_key(workspace)
        await self.git.path()
        lock_file = Shadow.lock_file(self.root, real)
        async with self.locks.hold(real, lock_file, os.path.join(os.path.dirname(lock_file), b"shadow.git")):
            shadow = await self._open(real)
            sweep_interrupted(shadow)
            sweep_seed(shadow.dir, shadow.git_dir)
            yield LockedWorkspace(self, shadow, real)

    async def _open(self, real: bytes) -> Shadow:
        cached = self._shadows.get(real)
        if (cached is not None and cached.layout.marker == nearest_dotgit(real)
                and os.path.exists(os.path.join(cached.git_dir, b"HEAD"))):
            return cached
        shadow = await Shadow.open(self.git, self.root, await discover(self.git, real))
        self._shadows[real] = shadow
        return shadow

    async def capture(self, workspace: PathLike, ref: str, *, base: str | None = None,
                      message: str | None = None, before_ref: BeforeRef | None = None) -> CaptureResult:
        """Capture the workspace as the new checkpoint ``ref``.

        Args:
            workspace: the workspace folder.
            ref: ``checkpoint_ref(thread, scope, n)``; refs are create-only.
            base: the checkpoint commit to diff against (the previous one of
                the scope); None for a first baseline, whose summary counts nothing.
            message: the shadow commit's message (default: the ref).
            before_ref: awaited once the workspace is read and stored, before
                the ref is made (what must be durable before a checkpoint
                exists is committed meanwhile); if it raises, no ref is made.

        Returns:
            The commit (the base's own when nothing changed), the changed files
            and the summary (counts, skipped files, nested repositories).

        Raises:
            CheckpointExistsError: ``ref`` exists already.
        """
        check_ref(ref)
        async with self.locked(workspace) as locked:
            return await locked.capture(ref, base=base, message=message, before_ref=before_ref)

    async def diff(self, workspace: PathLike, target: str, base: str | None = None, *,
                   max_bytes: int = DEFAULT_MAX_PATCH_BYTES) -> DiffResult:
        """Files and patch from ``base`` to ``target`` (commits or refs of this
        workspace; ``base`` None: against nothing). Reads objects only, so it
        does not wait for a capture of the same workspace.

        Raises:
            UnknownCheckpointError: either is not a checkpoint of this workspace.
        """
        real = self.workspace_key(workspace)
        shadow = self._shadows.get(real)
        if shadow is None:
            async with self.locked(workspace) as locked:
                shadow = locked.shadow
        return await diff_checkpoints(shadow, target, base, max_bytes)

    async def restore(self, workspace: PathLike, target: str, *, safety_ref: str,
                      safety_base: str | None = None, include: Iterable[bytes] = (),
                      before_files: Callable[[CaptureResult], Awaitable[None]] | None = None) -> RestoreResult:
        """Put the files of checkpoint ``target`` back, after a safety capture
        ``safety_ref`` of the workspace as it is now (restoring that one
        undoes this). Paths the restore leaves alone are reported with the
        reason; ignored files, files over the size cap, nested repositories
        and the user's ``.git`` are never touched.

        Args:
            target: a checkpoint commit or ref of this workspace.
            safety_ref: the create-only ref of the safety checkpoint.
            safety_base: the safety checkpoint's base (default: ``target``).
            include: workspace-relative folders that are nested repositories
                now whose files are restored anyway (their ``.git`` is never touched).
            before_files: awaited with the safety capture, under the lock,
                before any file is touched: the caller records it durably
                there, so that a restore cut off part-way (a killed daemon)
                still has its way back. If it raises, nothing is touched.

        Raises:
            UnknownCheckpointError: ``target`` is not a checkpoint of this workspace.
            CheckpointExistsError: ``safety_ref`` exists already (nothing was touched).
        """
        check_ref(safety_ref)
        async with self.locked(workspace) as locked:
            return await locked.restore(target, safety_ref=safety_ref, safety_base=safety_base, include=include,
                                        before_files=before_files)

    async def refs(self, workspace: PathLike, under: str = PREFIX) -> dict[str, str]:
        """The checkpoint refs under ``under`` (e.g. ``refs/agentd/<thread>/``) and their commits."""
        async with self.locked(workspace) as locked:
            out = await locked.shadow.run(["for-each-ref", "--format=%(refname) %(objectname)", under])
        return dict(line.split(" ", 1) for line in out.stdout.decode().splitlines())

    async def delete_refs(self, workspace: PathLike, refs: Iterable[str]) -> None:
        """Delete checkpoint refs (their objects go at the next ``compact``)."""
        lines = "".join(f"delete {check_ref(ref)}\n" for ref in refs)
        if lines:
            async with self.locked(workspace) as locked:
                await locked.shadow.run(["update-ref", "--stdin"], stdin=lines.encode())

    async def compact(self, workspace: PathLike) -> None:
        """Repack the shadow into one pack and drop the objects no ref and no
        index entry reaches (commits made for an unchanged tree, deleted
        refs' checkpoints). Run it when the workspace is quiet (``Compactor``).

        The repack runs without the workspace's lock, so a capture never
        waits for it: git's repack is safe beside writers (objects written
        meanwhile stay loose; ``-A`` makes unreachable packed objects loose
        instead of dropping them, so an object a capture is about to reuse
        survives). Only the prune, which deletes, takes the lock: then no
        capture is between writing an object and the ref that reaches it.
        A shadow seeded from the user's repository stops reading the user's
        objects here: the repack copied those its checkpoints need."""
        real = self.workspace_key(workspace)
        shadow = self._shadows.get(real)
        if shadow is None or shadow.borrowing:
            # Borrowing: wait for a seed in progress to have its ref, so that the repack packs what it needs.
            async with self.locked(workspace) as locked:
                shadow = locked.shadow
        # A seed that starts after this counts one more: then the shadow keeps borrowing (below).
        seeds = shadow.state.seeds
        # With the user's objects borrowed (``seed``), the repack reads them and packs every one a
        # checkpoint or the index reaches: afterwards the shadow needs none of them.
        await shadow.run(["repack", "-A", "-d", "-q"])
        async with self.locked(workspace) as locked:
            await locked.shadow.run(["prune", "--expire=now"])
            # What this process remembers of trees and commits may name pruned objects.
            locked.shadow.trees.clear()
            locked.shadow.index_tree = None
            # A seed during the repack may rely on objects it did not pack: borrow until the next one.
            if locked.shadow.borrowing and locked.shadow.state.seeds == seeds:
                locked.shadow.stop_borrowing()


class LockedWorkspace:
    """A workspace whose locks ``CheckpointEngine.locked`` holds: the same
    operations as the engine's, without taking the locks again.

    Attributes:
        shadow: the opened shadow repository.
    """

    def __init__(self, engine: CheckpointEngine, shadow: Shadow, real: bytes | None = None) -> None:
        self.engine = engine
        self.shadow = shadow
        self.real = real

    def _captured(self) -> None:
        if self.engine.on_capture is not None and self.real is not None:
            self.engine.on_capture(self.real)

    async def capture(self, ref: str, *, base: str | None = None, message: str | None = None,
                      before_ref: BeforeRef | None = None) -> CaptureResult:
        """See ``CheckpointEngine.capture``."""
        seeds = self.shadow.state.seeds
        result = await capture_workspace(self.shadow, check_ref(ref), base=base,
                                        max_file_bytes=self.engine.max_file_bytes, message=message,
                                        before_ref=before_ref)
        self._captured()
        if self.shadow.state.seeds != seeds and self.engine.on_seed is not None and self.real is not None:
            self.engine.on_seed(self.real)
        return result

    async def restore(self, target: str, *, safety_ref: str, safety_base: str | None = None,
                      include: Iterable[bytes] = (),
                      before_files: Callable[[CaptureResult], Awaitable[None]] | None = None) -> RestoreResult:
        """See ``CheckpointEngine.restore``."""
        plan = await prepare_restore(self.shadow, target, safety_ref=check_ref(safety_ref), safety_base=safety_base,
                                      max_file_bytes=self.engine.max_file_bytes)
        self._captured()  # its safety capture
        if before_files is not None:
            await before_files(plan.safety)
        return await apply_restore(self.shadow, plan, fsync=self.engine.fsync, include=include)

    async def diff(self, target: str, base: str | None = None, *,
                   max_bytes: int = DEFAULT_MAX_PATCH_BYTES) -> DiffResult:
        """See ``CheckpointEngine.diff``."""
        return await diff_checkpoints(self.shadow, target, base, max_bytes)

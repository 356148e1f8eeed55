"""A fork's own workspace: a git worktree of its source's repository, or a
copy (issue 27) — the world side.

``plan`` runs when the fork is made (``thread.fork {workspace: "worktree"}``,
``task.delegate {workspace: "worktree"}``): it reads, never writes, the
user's repository — its top level, the workspace's place in it and the
commit ``HEAD`` is at — and names the fork's folder
(``<data>/worktrees/<thread id>``) and branch (``agentd/<short id>``).
Nothing is made yet: forks stay cheap.

``materialize`` runs at the fork's first run, before its baseline: ``git
worktree add --no-track -b BRANCH PATH COMMIT`` with the user's hooks off
(``core.hooksPath=/dev/null`` on the command line: no config is written),
then the source's uncommitted state carried over from the fork point's
checkpoint (``checkpoints.overlay``). The only additions to the user's
repository are git's own worktree metadata (``.git/worktrees/<thread id>``)
and the branch ref; its HEAD, index, stash, other refs, hooks and config are
untouched. Not a git repository (or ``kind: copy``): a copy of the source
folder, with reflinks where the file system has them (``cp
--reflink=auto``). A marker under ``<data>/worktrees/.ready`` says it was
made; a daemon killed part-way leaves none, and the next run makes it again
— removing first what was half made, git's locked record of it too.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import trio

from agentd.store.records import AppThread, Checkpoint, WorkspaceSource

from .regular_files import open_regular
from .trees import remove_tree
from .checkpoints.errors import CheckpointError, GitCommandError
from .checkpoints import names
from .checkpoints.gitproc import Git, scrubbed_env
from .checkpoints.overlay import Overlaid, overlay
from .checkpoints.refs import checkpoint_ref
from .graph import ThreadBatch
from .own_workspace import BRANCH_PREFIX, own_workspace, short_id

if TYPE_CHECKING:
    from .checkpoints import CheckpointEngine
    from .effects import PlanWorkspace
    from .host import ActorHost

#: git configuration given on the command line of the one git that writes
#: to the user's repository: no hooks, no reflog of the new branch, no gc
QUIET = ["-c", "core.hooksPath=/dev/null", "-c", "core.logAllRefUpdates=false", "-c", "gc.auto=0"]


class WorkspaceFailed(Exception):
    """The fork's workspace could not be made (the run fails with why)."""


def worktrees_root(workspaces_folder: str) -> str:
    """``<data>/worktrees``, beside the threads' own ``<data>/workspaces``."""
    return os.path.join(os.path.dirname(os.path.abspath(workspaces_folder)), "worktrees")


async def _repository(git: Git, real: str) -> tuple[str, str, str] | None:
    """``(top level, prefix, HEAD commit)`` of the repository ``real`` is
    in, or None (no repository, or one with no commit yet)."""
    env = scrubbed_env()
    found = await git.run(["rev-parse", "--path-format=absolute", "--show-toplevel", "--show-prefix"],
                          env=env, cwd=real, ok=(0, 128))
    lines = found.stdout.decode(errors="surrogateescape").split("\n")
    if found.returncode != 0 or len(lines) < 2 or not lines[0]:
        return None
    head = await git.run(["rev-parse", "--verify", "-q", "HEAD^{commit}"], env=env, cwd=real, ok=(0, 1, 128))
    if head.returncode != 0:
        return None
    return os.path.realpath(lines[0]), lines[1].rstrip("/"), head.stdout.decode().strip()


async def plan(git: Git, *, kind: str, source_thread_id: str, source_workspace: str, fork_thread_id: str,
               root: str, checkpoint_id: str | None) -> WorkspaceSource:
    """Where the fork ``fork_thread_id`` of ``source_workspace`` will work
    (read-only). ``kind: worktree`` outside a repository (or in one with no
    commit) becomes a ``copy``."""
    path = os.path.join(root, fork_thread_id)
    base = WorkspaceSource(kind="copy", source_thread_id=source_thread_id, source_workspace=source_workspace,
                           path=path, checkpoint_id=checkpoint_id)
    real = await trio.to_thread.run_sync(os.path.realpath, source_workspace)
    if kind != "worktree" or not await trio.to_thread.run_sync(os.path.isdir, real):
        return base
    try:
        repo = await _repository(git, real)
    except (CheckpointError, OSError):
        repo = None
    if repo is None:
        return base
    top, prefix, commit = repo
    return WorkspaceSource(kind="worktree", source_thread_id=source_thread_id, source_workspace=source_workspace,
                           path=path, repository=top, prefix=prefix, branch=BRANCH_PREFIX + short_id(fork_thread_id),
                           commit=commit, checkpoint_id=checkpoint_id)


def _marker(source: WorkspaceSource) -> str:
    return os.path.join(os.path.dirname(source.path), ".ready", os.path.basename(source.path))


def _mark(source: WorkspaceSource) -> None:
    marker = _marker(source)
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    try:
        os.close(open_regular(marker, os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError:
        # Not the marker this makes (a FIFO or a symlink an agent put there): made anew.
        os.unlink(marker)
        os.close(open_regular(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _unmark(source: WorkspaceSource) -> None:
    try:
        os.unlink(_marker(source))
    except FileNotFoundError:
        pass


def is_made(source: WorkspaceSource) -> bool:
    """Whether the fork's workspace was made (blocking: two stats)."""
    return os.path.exists(_marker(source)) and os.path.isdir(source.path)


@dataclass
class Made:
    """What ``materialize`` made: the fork point's checkpoint commit it carried, and what it wrote."""

    commit: str | None
    checkpoint_id: str | None
    carried: Overlaid = field(default_factory=Overlaid)


async def _fork_point(engine: CheckpointEngine | None, store: Any, source: WorkspaceSource,
                      thread_id: str) -> tuple[str | None, list[str]]:
    """The checkpoint commit the fork starts from and the paths it skipped:
    the fork point's, else a capture of the source workspace now (a fork of
    a thread with no checkpoint yet, a delegated task)."""
    if source.checkpoint_id is not None:
        found = store.get(Checkpoint, source.checkpoint_id)
        if found is not None and found.commit and found.status in ("captured", "stale"):
            summary = found.summary
            skipped = [s["path"] for s in summary.get("skipped", [])] + [
                p.rstrip("/") for p in summary.get("nestedRepos", [])]
            return found.commit, skipped
    if engine is None:
        return None, []
    ref = checkpoint_ref(thread_id, "fork_point", os.urandom(6).hex())
    captured = await engine.capture(source.source_workspace, ref)
    summary = captured.summary
    return captured.commit, [s.path for s in summary.skipped] + [p.rstrip("/") for p in summary.nested_repos]


async def _clear(git: Git, source: WorkspaceSource) -> None:
    """A worktree of this fork cut off part-way earlier goes — git's record
    of it and its folder; the branch stays. ``--force`` twice: a ``git
    worktree add`` killed in the middle of its checkout leaves its worktree
    locked (``initializing``), which one ``--force`` does not remove (and
    then no ``worktree add`` at that path succeeds)."""
    assert source.repository is not None
    await git.run([*QUIET, "worktree", "remove", "--force", "--force", source.path], env=scrubbed_env(),
                  cwd=source.repository, ok=(0, 128))
    await trio.to_thread.run_sync(remove_tree, source.path)


async def _checkout(git: Git, source: WorkspaceSource) -> None:
    """``git worktree add``: on the fork's branch when it exists (made by an
    earlier, cut-off attempt, or kept by archiving), else on a new one at
    the planned commit."""
    assert source.repository is not None and source.branch is not None and source.commit is not None
    env = scrubbed_env()
    top = source.repository
    exists = await git.run(["rev-parse", "--verify", "-q", f"refs/heads/{source.branch}"], env=env, cwd=top, ok=(0, 1))
    if exists.returncode == 0:
        args = ["worktree", "add", "-f", "--quiet", source.path, source.branch]
    else:
        args = ["worktree", "add", "--quiet", "--no-track", "-b", source.branch, source.path, source.commit]
    await git.run([*QUIET, *args], env=env, cwd=top)


async def _add_worktree(git: Git, source: WorkspaceSource) -> None:
    cleared = await trio.to_thread.run_sync(os.path.lexists, source.path)
    if cleared:
        await _clear(git, source)
    try:
        await _checkout(git, source)
    except GitCommandError:
        if cleared:
            raise
        # git's record of a worktree whose folder it had not made yet when
        # it was cut off ("a missing but locked worktree"): cleared, then once more.
        await _clear(git, source)
        await _checkout(git, source)


def _copy(source: str, target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    remove_tree(target)
    if os.path.isdir(source):
        subprocess.run(["cp", "-a", "--reflink=auto", "--", source, target], check=True, capture_output=True)
    else:
        os.makedirs(target, mode=0o700)


async def materialize(engine: CheckpointEngine | None, store: Any, thread_id: str,
                      source: WorkspaceSource) -> Made:
    """Make the fork's worktree (or copy) and carry the fork point's files
    over; then mark it made.

    Raises:
        WorkspaceFailed: git or the file system refused (the message says which).
    """
    git = engine.git if engine is not None else Git(os.environ.get("AGENTD_CHECKPOINT_GIT"))
    try:
        if source.kind != "worktree":
            await trio.to_thread.run_sync(_copy, source.source_workspace, source.path)
            made = Made(None, source.checkpoint_id)
        else:
            commit, skipped = await _fork_point(engine, store, source, thread_id)
            await _add_worktree(git, source)
            made = Made(commit, source.checkpoint_id)
            if commit is not None and engine is not None:
                async with engine.locked(source.source_workspace) as locked:
                    made.carried = await overlay(git, locked.shadow, commit, own_workspace(source), not_held=skipped)
        await trio.to_thread.run_sync(_mark, source)
        return made
    except (CheckpointError, OSError, subprocess.CalledProcessError) as exc:
        detail = getattr(exc, "stderr", None)
        why = detail.decode(errors="replace").strip() if isinstance(detail, bytes) and detail else str(exc)
        raise WorkspaceFailed(f"the fork's {source.kind} at {source.path} could not be made: {why}") from exc


async def plan_fork_workspace(host: ActorHost, effect: PlanWorkspace) -> WorkspaceSource:
    """The ``PlanWorkspace`` effect: ``plan`` with the daemon's git and data dir."""
    git = host.checkpoints.git if host.checkpoints is not None else Git(os.environ.get("AGENTD_CHECKPOINT_GIT"))
    return await plan(git, kind=effect.kind, source_thread_id=effect.source_thread_id,
                      source_workspace=effect.source_workspace, fork_thread_id=effect.fork_thread_id,
                      root=worktrees_root(host.workspaces_folder), checkpoint_id=effect.checkpoint_id)


async def ensure_made(host: ActorHost, thread: AppThread, run_id: str, node_id: str) -> None:
    """Before a fork's run starts in a workspace of its own: make it if it
    is not made yet, and say so (``workspace.created``, committed: what was
    added to the user's repository, the files carried over).

    Raises:
        WorkspaceFailed: it could not be made (the attempt fails with why).
    """
    source = thread.workspace_source
    if source is None or await trio.to_thread.run_sync(is_made, source):
        return
    made = await materialize(host.checkpoints, host.store, thread.id, source)
    batch = ThreadBatch(thread_id=thread.id, now=host.wall_clock())
    carried = made.carried
    batch.emit("workspace.created", run_id=run_id, node_id=node_id, kind=source.kind, path=source.path,
               workspace=own_workspace(source), repository=source.repository, branch=source.branch,
               commit=source.commit, checkpointId=made.checkpoint_id, checkpointCommit=made.commit,
               written=_shown(carried.written), removed=_shown(carried.removed),
               kept=[{"path": _shown([path])[0], "reason": why} for path, why in sorted(carried.kept.items())])
    await host.store.commit(batch)


def _shown(paths: list[str]) -> list[str]:
    """Paths as the wire and the store take them: a name that is not UTF-8
    (``fsdecode``d, so holding surrogates) shown with ``\\xNN`` (``names.shown``)."""
    return [names.shown(os.fsencode(path)) for path in paths]


def _git(engine: CheckpointEngine | None) -> Git:
    return engine.git if engine is not None else Git(os.environ.get("AGENTD_CHECKPOINT_GIT"))


async def remove(engine: CheckpointEngine | None, source: WorkspaceSource) -> None:
    """Remove the fork's worktree (archiving; its final checkpoint was
    recorded first): ``git worktree remove --force``, which changes only git's
    worktree metadata — the branch stays. No marker is left: ``is_made`` says no."""
    await trio.to_thread.run_sync(_unmark, source)
    if source.repository is not None:
        await _git(engine).run([*QUIET, "worktree", "remove", "--force", source.path], env=scrubbed_env(),
                               cwd=source.repository, ok=(0, 128))
    await trio.to_thread.run_sync(remove_tree, source.path)


async def recreate(engine: CheckpointEngine | None, source: WorkspaceSource, commit: str) -> Overlaid:
    """The fork's worktree again, on its branch, with the files of ``commit``
    — a checkpoint in the worktree's own shadow repository (the same folder,
    so the same shadow) — carried over (unarchiving).

    Raises:
        WorkspaceFailed: git or the file system refused.
    """
    if engine is None:
        raise WorkspaceFailed("the worktree is made again from its final checkpoint, and checkpoints are off")
    try:
        await _add_worktree(engine.git, source)
        workspace = own_workspace(source)
        async with engine.locked(workspace) as locked:
            carried = await overlay(engine.git, locked.shadow, commit, workspace)
        await trio.to_thread.run_sync(_mark, source)
        return carried
    except (CheckpointError, OSError) as exc:
        raise WorkspaceFailed(f"the fork's worktree at {source.path} could not be made again: {exc}") from exc

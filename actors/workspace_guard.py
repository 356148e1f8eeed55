"""One thread's restore must not overwrite what another thread is writing
(hostile-round issue item 10; SPEC F13, F14).

``checkpoint.restore``, ``rollback.toRun`` and ``rollback.node`` put a
checkpoint's files back: files the checkpoint lacks are removed. Each one
already refuses while a run of its own thread is active; ``refuse_if_shared``,
called at their entry, also refuses while a run of *another* thread is active
in the same folder — the same resolved path, or one inside the other (a
delegated task with ``workspace: same``, a second thread a person opened on
the project, a thread on a subfolder). The method table wraps the three
handlers with it (``refusing_while_shared``), so the restore code itself is
untouched.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING, Any

import trio

from agentd.protocol.errors import InvalidState
from agentd.store.records import Checkpoint

if TYPE_CHECKING:
    from .messages import Command, Handler
    from .thread_actor import ThreadActor


def overlaps(a: str, b: str) -> bool:
    """Whether resolved folders ``a`` and ``b`` are the same or one holds the other."""
    return a == b or a.startswith(os.path.join(b, "")) or b.startswith(os.path.join(a, ""))


def restored_workspace(actor: ThreadActor, checkpoint_id: str | None) -> str:
    """The folder a restore of ``checkpoint_id`` writes to (the thread's
    workspace when none is given or it names nothing; the handler reports that)."""
    checkpoint = actor.store.get(Checkpoint, checkpoint_id) if checkpoint_id else None
    if checkpoint is not None and checkpoint.workspace:
        return checkpoint.workspace
    return actor.state.thread.workspace


class RestoringFolders:
    """The folders restores are writing right now (resolved paths), so that
    a run of another thread that starts meanwhile waits for them to end
    instead of working — and taking its baseline — in a half-restored tree."""

    def __init__(self) -> None:
        self._folders: dict[int, str] = {}
        self._next = 0
        self._changed = trio.Event()

    def add(self, folder: str) -> int:
        self._next += 1
        self._folders[self._next] = folder
        return self._next

    def remove(self, token: int) -> None:
        self._folders.pop(token, None)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until_free(self, folder: str) -> None:
        """Return once no restore writes in ``folder`` (resolved) or around it."""
        while any(overlaps(folder, other) for other in self._folders.values()):
            await self._changed.wait()


async def refuse_if_shared(actor: ThreadActor, method: str, *, checkpoint_id: str | None = None) -> int:
    """Refuse ``method`` while another thread runs in the folder it restores;
    else mark the folder as being restored (the returned token ends that).

    The folder is marked *before* the other threads' runs are looked at: a
    run that became active earlier is seen and refuses the restore; one that
    becomes active later finds the mark when it starts, and waits.

    Raises:
        InvalidState: naming every other thread and run active there
            (``data.activeRuns``: ``threadId``, ``runId``, ``status``, ``workspace``).
    """
    workspace = restored_workspace(actor, checkpoint_id)
    # realpath touches the disk (symlinks): in a worker thread.
    mine = await trio.to_thread.run_sync(os.path.realpath, workspace)
    restoring = actor.registry.restoring
    token = restoring.add(mine)
    try:
        others = [run for run in actor.registry.active_runs() if run[0] != actor.thread_id]

        def resolve() -> list[tuple[str, str, str, str]]:
            return [run for run in others if overlaps(mine, os.path.realpath(run[3]))]

        busy = await trio.to_thread.run_sync(resolve) if others else []
    except BaseException:
        restoring.remove(token)
        raise
    if not busy:
        return token
    restoring.remove(token)
    named = "; ".join(f"thread {thread_id} (run {run_id}, {status}, in {where})" for thread_id, run_id, status, where in busy)
    raise InvalidState(
        f"{method} would overwrite files in {workspace} while another thread works there: {named}. "
        "Wait for its run to end or stop it (thread.stop), then try again",
        threadId=actor.thread_id, workspace=workspace,
        activeRuns=[{"threadId": t, "runId": r, "status": s, "workspace": w} for t, r, s, w in busy],
    )


async def wait_while_restored(actor: ThreadActor, workspace: str) -> None:
    """Before a run starts in ``workspace``: wait for any restore writing there to end."""
    folder = await trio.to_thread.run_sync(os.path.realpath, workspace)
    await actor.registry.restoring.wait_until_free(folder)


def refusing_while_shared(handler: Handler) -> Handler:
    """``handler`` (a method that restores a checkpoint's files; its params
    may name the checkpoint, ``checkpointId``) with ``refuse_if_shared`` at
    its entry, the folder marked as being restored while it runs."""

    @functools.wraps(handler)
    async def guarded(actor: ThreadActor, command: Command) -> dict[str, Any]:
        token = await refuse_if_shared(actor, command.method, checkpoint_id=getattr(command.params, "checkpoint_id", None))
        try:
            return await handler(actor, command)
        finally:
            actor.registry.restoring.remove(token)

    return guarded

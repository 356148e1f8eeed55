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
untouched: the guard is the ``GuardRestore`` effect (executors.py), which
marks the folder (restoring_folders.py) before it looks at the other
threads' runs, and ``EndRestore`` ends the mark.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from agentd.protocol.errors import InvalidState
from agentd.store.records import Checkpoint

from .effects import Commit, Decision, EndRestore, GuardRestore, Transition

if TYPE_CHECKING:
    from .context import ThreadContext
    from .messages import Command, Handler


def overlaps(a: str, b: str) -> bool:
    """Whether resolved folders ``a`` and ``b`` are the same or one holds the other."""
    return a == b or a.startswith(os.path.join(b, "")) or b.startswith(os.path.join(a, ""))


def restored_workspace(ctx: ThreadContext, checkpoint_id: str | None) -> str:
    """The folder a restore of ``checkpoint_id`` writes to (the thread's
    workspace when none is given or it names nothing; the handler reports that)."""
    checkpoint = ctx.store.get(Checkpoint, checkpoint_id) if checkpoint_id else None
    if checkpoint is not None and checkpoint.workspace:
        return checkpoint.workspace
    return ctx.state.thread.workspace


def shared_refusal(method: str, workspace: str, thread_id: str, busy: list[tuple[str, str, str, str]]) -> InvalidState:
    """The refusal of ``method`` while other threads run in ``workspace``:
    naming every other thread and run active there (``data.activeRuns``:
    ``threadId``, ``runId``, ``status``, ``workspace``)."""
    named = "; ".join(f"thread {other} (run {run_id}, {status}, in {where})" for other, run_id, status, where in busy)
    return InvalidState(
        f"{method} would overwrite files in {workspace} while another thread works there: {named}. "
        "Wait for its run to end or stop it (thread.stop), then try again",
        threadId=thread_id, workspace=workspace,
        activeRuns=[{"threadId": t, "runId": r, "status": s, "workspace": w} for t, r, s, w in busy],
    )


def refusing_while_shared(handler: Handler) -> Handler:
    """``handler`` (a method that restores a checkpoint's files; its params
    may name the checkpoint, ``checkpointId``) refused while another thread
    runs in the folder it restores, and the folder marked as being restored
    while it runs."""

    @functools.wraps(handler)
    def guarded(ctx: ThreadContext, command: Command) -> Transition:
        workspace = restored_workspace(ctx, getattr(command.params, "checkpoint_id", None))
        token = yield GuardRestore(command.method, workspace)
        try:
            outcome = handler(ctx, command)
            if isinstance(outcome, Generator):
                outcome = yield from outcome
            if isinstance(outcome, Decision) and outcome.batch is not None:
                # The outcome is durable before the folder is let go.
                committed = yield Commit(outcome.batch)
                reply = outcome.reply
                if outcome.seq and isinstance(reply, dict):
                    reply = {**reply, "seq": committed.seq}
                outcome = Decision(reply=reply, effects=outcome.effects)
            return outcome
        finally:
            yield EndRestore(token)

    return guarded

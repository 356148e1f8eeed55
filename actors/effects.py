"""What a transition decides, and the effects it asks for (SPEC F2, F18).

A transition (steering.py, run_control.py, turns.py and the other feature
modules) is a function of the thread's state and one input. It never awaits:
it builds the write batch and the in-memory state, and says what must happen
in the world as values of this module. Two kinds:

- an effect it *yields* is carried out at once by the actor, in the thread's
  lock, and its result (or the error it raised) is sent back into the
  transition as an input — ``result = yield Capture(...)``. That is how a
  transition waits for git, the provider or a commit before it decides on.
- the ``Decision`` it *returns* ends it: the actor commits its batch, answers
  the command with its reply (plus the commit's ``seq``), then carries out its
  effects in order.

Transitions are generators so that both read top to bottom as the old
handlers did; a transition with nothing to wait for is a plain function that
returns a Decision (or nothing). This module imports neither trio nor the
actor: effects are plain data, interpreted by the actor (its own timers,
tasks and queue) and by ``executors.py`` (the store, the session host, the
checkpoint engine, other threads).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec

if TYPE_CHECKING:
    from agentd.store.records import ConversationMessage, WorkspaceSource

    from .checkpoints import CaptureResult
    from .graph import ThreadBatch
    from .messages import Timer
    from .providers.base import SessionClaim
    from .state import ActiveRun


# -- the end of a transition ----------------------------------------------------------------


class Decision(msgspec.Struct):
    """What a transition decided: commit ``batch`` (None: nothing to write),
    answer with ``reply`` (a method's result Struct, ``protocol/results.py``;
    with ``seq``, the commit's sequence number goes into it: ``with_seq``),
    then carry out ``effects``. A ``lazy`` batch is bookkeeping that rides
    with the next commit instead of a synced commit of its own (no ``seq``
    for the reply; see ``Store.commit_lazy``): only for records a crash may
    take back without losing what a person or an agent did."""

    batch: ThreadBatch | None = None
    reply: Any = None
    effects: list[Any] = []
    seq: bool = True
    lazy: bool = False


#: a transition: yields effects (each answered with its result), returns a Decision or a reply
Transition: TypeAlias = Generator[Any, Any, Any]

#: what a result Struct carries as ``seq`` until its batch is committed
NO_SEQ = 0


def with_seq(reply: Any, seq: int) -> Any:
    """``reply`` (a method's result Struct, or a mapping) with the ``seq`` of
    the commit that made it durable."""
    if isinstance(reply, msgspec.Struct) and "seq" in reply.__struct_fields__:
        return msgspec.structs.replace(reply, seq=seq)
    if isinstance(reply, dict):
        return {**reply, "seq": seq}
    return reply


# -- effects the actor carries out itself (its loop, timers and tasks) ----------------------


class Commit(msgspec.Struct, frozen=True):
    """Make ``batch`` durable now (its events are published first); answers
    with the store's ``CommitResult``."""

    batch: ThreadBatch


class StartNext(msgspec.Struct, frozen=True):
    """Start the first queued run no hold keeps, if nothing runs."""


class Activate(msgspec.Struct, frozen=True):
    """Make ``active`` the running attempt and start its starter task."""

    active: ActiveRun


class StopAttemptTasks(msgspec.Struct, frozen=True):
    """Cancel the attempt's starter and its timers (the attempt is closing)."""

    attempt_id: str


class StartTimer(msgspec.Struct, frozen=True):
    """Handle ``timer`` in ``delay`` seconds, unless it is already pending."""

    timer: Timer
    delay: float


class RestartTimer(msgspec.Struct, frozen=True):
    """Handle ``timer`` in ``delay`` seconds from now, pending or not (a
    deadline that moves with every sign of life: ``stalls.py``)."""

    timer: Timer
    delay: float


class CancelTimer(msgspec.Struct, frozen=True):
    """Forget ``timer`` if it is pending."""

    timer: Timer


class PublishDelta(msgspec.Struct, frozen=True):
    """Publish a streamed ``message.delta`` at once (ephemeral: the text is
    made durable by a later flush)."""

    run_id: str
    node_id: str | None
    message_id: str
    offset: int
    text: str


class MarkBusy(msgspec.Struct, frozen=True):
    """Tell the session host whether the thread's session is in use."""

    busy: bool


class PeekMailbox(msgspec.Struct, frozen=True):
    """The items waiting in the thread's mailbox now, oldest first, without
    taking them (they are handled next, in order): what the provider said
    while the transition waited."""


# -- the provider session -------------------------------------------------------------------


class StopSession(msgspec.Struct, frozen=True):
    """Stop the thread's provider session (in a task of its own), with ``reason``."""

    reason: str


class SendSteer(msgspec.Struct, frozen=True):
    """Give ``message`` to the running native turn (in a task); the outcome
    comes back as ``SteerDelivered`` or ``SteerFailed``."""

    message: ConversationMessage
    native_thread_id: str | None
    native_turn_id: str | None


class InterruptTurn(msgspec.Struct, frozen=True):
    """Ask the provider to interrupt the native turn (in a task); a refusal
    comes back as ``InterruptRefused``."""

    attempt_id: str
    native_thread_id: str
    native_turn_id: str | None


class AnswerRequest(msgspec.Struct, frozen=True):
    """Answer a provider's request through the live session ``session_id``;
    raises ``ProviderRuntimeError`` when it cannot (no such session: the error
    says so)."""

    session_id: str | None
    request_ref: str
    response: dict[str, Any]


class ClaimSession(msgspec.Struct, frozen=True):
    """Hold a place among ``[daemon] max_sessions`` for the thread's next
    run; answers with the ``SessionClaim`` (raises ``overloaded``)."""


class ReleaseClaim(msgspec.Struct, frozen=True):
    """Give back a ``ClaimSession``'s place."""

    claim: SessionClaim


class ProbeProvider(msgspec.Struct, frozen=True):
    """Whether provider instance ``provider`` can run here (its adapter's
    probe, as ``providers.list`` shows it): ``{"usable": bool, "why"?: str}``;
    a probe that does not answer at once counts as usable."""

    provider: str


class SaveAttachments(msgspec.Struct, frozen=True):
    """Decode and store a message's images as files (``providers/images.py``),
    durably, before the message is committed; answers with the
    ``MessageAttachment``s its record keeps (raises ``invalid_params`` for
    one that is not base64 of an image of its type)."""

    attachments: tuple[Any, ...]


class SaveMcpSecrets(msgspec.Struct, frozen=True):
    """Keep the values of the thread's MCP servers' environment variables
    and headers in its secrets file (``providers/mcp_secrets.py``), durably,
    before the record naming them is committed; answers whether that changed
    what was kept (raises ``invalid_state`` for a folder it will not write in)."""

    secrets: dict[str, dict[str, dict[str, str]]]
    #: the values kept already that ``secrets`` do not replace stay beside them
    #: (before the commit; ``PruneMcpSecrets`` after it drops them)
    beside_old: bool = False


class PruneMcpSecrets(msgspec.Struct, frozen=True):
    """After the commit of the record naming ``secrets``: the thread's
    secrets file holds them only (a failure is logged, never raised)."""

    secrets: dict[str, dict[str, dict[str, str]]]


class ReadMcpSecrets(msgspec.Struct, frozen=True):
    """The values the thread's secrets file keeps (``providers/mcp_secrets.py``);
    raises ``OSError`` for a folder or file it will not read."""


class CopyMcpSecrets(msgspec.Struct, frozen=True):
    """Give thread ``target_thread_id`` (a fork being made) a copy of this
    thread's secrets file, durably, before its record is committed."""

    target_thread_id: str


class AllowRecovery(msgspec.Struct, frozen=True):
    """Ask the session host whether a crashed session may be restarted for
    a new attempt (its crash budget); answers with its ``RecoveryDecision``."""

    crash: str


class ListNativeTurns(msgspec.Struct, frozen=True):
    """The native turns of ``native_thread_id`` on ``provider`` (the session
    is opened and the thread resumed as needed), as the adapter lists them."""

    provider: str
    native_thread_id: str
    cwd: str


class RollbackNative(msgspec.Struct, frozen=True):
    """Cut the native thread's history before ``before_turn_id``."""

    provider: str
    native_thread_id: str
    before_turn_id: str


# -- other threads --------------------------------------------------------------------------


class Wake(msgspec.Struct, frozen=True):
    """Load thread ``thread_id``'s actor, which starts its queued runs."""

    thread_id: str


class SendInternal(msgspec.Struct, frozen=True):
    """Send ``text`` to thread ``thread_id`` as the daemon's own message (in a task)."""

    thread_id: str
    text: str


class InterruptItem(msgspec.Struct, frozen=True):
    """Ask the provider to interrupt one running item of the turn (awaited:
    a refusal is the transition's error; ``node_interrupt.py``)."""

    native_thread_id: str
    native_turn_id: str
    native_item_id: str


class CancelTasks(msgspec.Struct, frozen=True):
    """``task.cancel`` to each of ``task_ids`` (in a task), each in its own actor."""

    task_ids: tuple[str, ...]


class RollbackChildMemory(msgspec.Struct, frozen=True):
    """Roll a child thread's agent memory back in its own actor (awaited;
    ``rollback.child_memory_rollback``): answers with its outcome (a dict), or
    why it could not (a string: the child is busy, gone, failed)."""

    command: Any


class WakeParent(msgspec.Struct, frozen=True):
    """Send ``task.wake`` to the parent ``thread_id`` (in a task): the task
    ``task_id`` ended and committed its result ``transfer_id`` (wakeups.py)."""

    thread_id: str
    task_id: str
    transfer_id: str


class StopChildren(msgspec.Struct, frozen=True):
    """Stop every delegated descendant, depth-first (in a task); then
    ``CascadeDone(effect_id)`` comes back."""

    effect_id: str


class TaskEnded(msgspec.Struct, frozen=True):
    """Wake the ``task.result`` callers waiting on this thread's task."""


class CheckWorkspace(msgspec.Struct, frozen=True):
    """A client's workspace as the daemon accepts it (``invalid_params`` when
    it cannot be used; None when none was given)."""

    workspace: str | None


class PlanWorkspace(msgspec.Struct, frozen=True):
    """Where a fork of ``source_workspace`` will work (issue 27): a git
    worktree of its repository (``kind: worktree``; a copy outside one) or a
    copy; answers with the ``WorkspaceSource`` (read-only: nothing is made)."""

    kind: str
    source_thread_id: str
    source_workspace: str
    fork_thread_id: str
    checkpoint_id: str | None


class WorktreeMade(msgspec.Struct, frozen=True):
    """Whether the fork's own worktree (or copy) exists and was made; answers a bool."""

    source: WorkspaceSource


class RemoveWorktree(msgspec.Struct, frozen=True):
    """``git worktree remove --force`` the fork's worktree (its branch stays)."""

    source: WorkspaceSource


class RecreateWorktree(msgspec.Struct, frozen=True):
    """Make the fork's worktree again on its branch, with the files of its own checkpoint ``commit``."""

    source: WorkspaceSource
    commit: str


class GuardRestore(msgspec.Struct, frozen=True):
    """Mark ``workspace`` as being restored and refuse (``invalid_state``)
    while a run of another thread is active in it; answers with the token
    that ``EndRestore`` ends."""

    method: str
    workspace: str


class EndRestore(msgspec.Struct, frozen=True):
    """The restore marked by ``GuardRestore`` ended."""

    token: int


# -- the checkpoint engine and the files ----------------------------------------------------


class Capture(msgspec.Struct, frozen=True):
    """Capture ``workspace`` into ``ref`` (diffed against ``base``);
    answers with the engine's ``CaptureResult`` or raises its error.
    ``durable_first`` (the run's ``checkpoint.capture`` outbox entry) is
    committed while the workspace is read and is durable before the ref is
    made — so a daemon killed mid-capture leaves the entry, never a ref
    without it — instead of one synced commit in a row before git starts;
    if it cannot be written, no ref is made and the capture raises its
    StoreError."""

    workspace: str
    ref: str
    base: str | None = None
    durable_first: ThreadBatch | None = None


class Diff(msgspec.Struct, frozen=True):
    """The engine's diff of two commits in ``workspace``'s shadow repository."""

    workspace: str
    commit: str
    base: str
    max_bytes: int = 0


class RestoreFiles(msgspec.Struct, frozen=True):
    """Put ``commit``'s files back in ``workspace`` after a safety capture
    into ``safety_ref``; before any file is touched, the batch that
    ``record_safety`` builds from that capture is committed."""

    workspace: str
    commit: str
    safety_ref: str
    include: tuple[bytes, ...]
    record_safety: Callable[[CaptureResult], ThreadBatch]


class MergeForkFiles(msgspec.Struct, frozen=True):
    """Merge the fork's changes from checkpoint ref ``fork_base`` to
    ``fork_theirs`` (in the shadow repository of ``fork_workspace``) into
    ``workspace``, whose base is ``base_here`` (None: fetched into
    ``base_ref``); theirs is made here as ``theirs_ref``. Before any file
    is written, the batch ``record_safety`` builds from the ``pre_merge``
    capture is committed. Answers with the engine's ``MergeOutcome``
    (checkpoints/merge.py)."""

    workspace: str
    fork_workspace: str
    fork_base: str
    fork_theirs: str
    base_here: str | None
    base_ref: str
    theirs_ref: str
    safety_ref: str
    markers: bool
    record_safety: Callable[[CaptureResult], ThreadBatch]


class CompareFiles(msgspec.Struct, frozen=True):
    """Which of ``paths`` differ between folders ``theirs`` and ``ours``
    (read in a worker thread); None when both are the same folder."""

    theirs: str
    ours: str
    paths: tuple[str, ...]

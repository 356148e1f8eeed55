"""A thread's in-memory state, as its ThreadActor keeps it.

Plain data, no trio and no store: the actor loads it once from the store and
from then on the graph transitions (graph.py and the feature modules) keep it
in step with the WriteBatches they build. Records in it are frozen values;
an update replaces the record.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentd.store.records import (
    AppThread,
    ContextHandoff,
    ContextTransfer,
    ConversationMessage,
    ExecutionNode,
    ProviderThread,
    ProviderTurn,
    Run,
    RunAttempt,
    RuntimeRequest,
)


@dataclass
class OpenMessage:
    """An assistant message being streamed, with text not yet durable."""

    #: the message as stored: its text is not kept here but in the chunks
    #: flushed so far (``length`` characters of them)
    record: ConversationMessage
    pending: list[str] = field(default_factory=list)
    pending_len: int = 0
    #: characters of text durable (flushed as chunks)
    length: int = 0

    def buffer(self, delta: str) -> int:
        """Hold ``delta`` until the next flush; return its offset in the message."""
        offset = self.length + self.pending_len
        self.pending.append(delta)
        self.pending_len += len(delta)
        return offset


@dataclass
class PendingRestart:
    """A steer that must restart the turn (SPEC F3 fallback): applied when the
    provider reports the interrupted turn ended."""

    message: ConversationMessage
    #: the new run that supersedes this one, when the attempt had already
    #: given a final answer; None to start attempt N+1 of the same run
    superseding_run_id: str | None = None


@dataclass
class AttemptContext:
    """What the attempt's start resolved (lineage.py): the transfer it takes
    in and the handoff its turn carries, until the turn starts (``consumed``)."""

    transfer: ContextTransfer | None = None
    handoff: ContextHandoff | None = None
    #: the turn started: the provider took the transfer in
    consumed: bool = False
    #: the turn ended but its provider thread was not known yet (coverage owed)
    ended: bool = False
    #: a native fork: the provider thread forked, and the history runs the fork inherits
    forked_from: str | None = None
    inherited: tuple[str, ...] = ()
    #: a merge-back the attempt's message carries, and its delta handoff (merge_back.py)
    merge: ContextTransfer | None = None
    merge_handoff: ContextHandoff | None = None
    #: delegation transfers into the thread this attempt's turn carries
    #: besides ``transfer`` (``subagent_spawn`` / ``subagent_result``, SPEC F9)
    inbox: list[ContextTransfer] = field(default_factory=list)


@dataclass
class ActiveRun:
    """The run whose attempt is starting or running, with its live graph."""

    run: Run
    attempt: RunAttempt
    root: ExecutionNode
    #: the input of this attempt: the run's message, or the steering message
    user_message: ConversationMessage
    #: provider item id -> child node
    nodes: dict[str, ExecutionNode] = field(default_factory=dict)
    #: provider item id -> open assistant message
    messages: dict[str, OpenMessage] = field(default_factory=dict)
    #: pending RuntimeRequests by app id
    requests: dict[str, RuntimeRequest] = field(default_factory=dict)
    provider_turn: ProviderTurn | None = None
    #: the provider session this attempt runs on, known as soon as the starter has it
    session_id: str | None = None
    #: an assistant message of this attempt completed that is not narration
    #: (its phase is not ``commentary``): a "meaningful final answer" (SPEC F3)
    answered: bool = False
    #: the attempt changed the workspace as far as can be seen before the run's
    #: checkpoint: a file change it reported completed, or a child checkpoint
    #: with changes (SPEC F3 counts it as a checkpoint: a steer then supersedes)
    changed_files: bool = False
    interrupt_requested: bool = False
    interrupt_sent: bool = False
    #: what an interrupt that ends the run makes of it (policy for stopped sessions)
    interrupt_reason: str = "interrupted"
    pending_restart: PendingRestart | None = None
    #: the context this attempt's start resolved (transfer, handoff)
    context: AttemptContext = field(default_factory=AttemptContext)


@dataclass
class ThreadState:
    """One AppThread as its actor holds it."""

    thread: AppThread
    #: runs waiting to start, in the order they will start
    queued: list[Run] = field(default_factory=list)
    #: the thread's current ProviderThread, if it has one
    provider_thread: ProviderThread | None = None
    #: the run being started or running, if any
    active: ActiveRun | None = None
    #: ``thread.delete`` took the thread out of the store: the actor answers
    #: every later command ``not_found`` until it retires (thread_admin.py)
    deleted: bool = False

    @property
    def thread_id(self) -> str:
        return self.thread.id

    def is_held(self, run: Run) -> bool:
        """True if a Stop holds ``run`` (it was queued before the Stop)."""
        return self.thread.queue_held and run.id in self.thread.held_run_ids

    def held_runs(self) -> list[Run]:
        """The queued runs the hold keeps, in queue order."""
        return [run for run in self.queued if self.is_held(run)]

    def next_queued(self) -> Run | None:
        """The queued run that starts next: the first one no hold keeps."""
        return next((run for run in self.queued if not self.is_held(run)), None)

    def queued_run(self, run_id: str) -> Run | None:
        """The queued run ``run_id``, or None if it is not waiting in the queue."""
        return next((run for run in self.queued if run.id == run_id), None)

    def is_current(self, attempt_id: str | None) -> bool:
        """True if ``attempt_id`` is the attempt being started or running."""
        return self.active is not None and attempt_id == self.active.attempt.id

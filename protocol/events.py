"""What every event carries: a payload Struct per event type.

An event is an envelope (``Event``: ``seq``, ``type``, where it belongs in
the graph, ``at``) around a payload whose shape its ``type`` decides. The
events table of ``protocol/README.md`` lists them; ``EVENTS`` maps every
type to its payload Struct, the patterned rows (``<node kind>.<status>``,
``attempt.<status>``) spelled out type by type, and ``agentd schema`` exports
it. ``tests/protocol/test_contract.py`` checks the table and ``EVENTS`` name the same
types, and the suite's client holds every event it receives to its payload.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import msgspec

from .results import CheckpointRestored, NodeRolledBack, SteerStrategy, ThreadRolledBack
from .wire import DispatchType
from .wire_records import (
    AppThread,
    AttemptStatus,
    Checkpoint,
    ContextHandoff,
    ContextTransfer,
    ConversationMessage,
    ExecutionNode,
    MessageStatus,
    PathReason,
    NodeStatus,
    PlanArtifact,
    ProviderSession,
    ProviderThread,
    Run,
    RunAttempt,
    RunStatus,
    RuntimeRequest,
    TokenUsage,
    WireStruct,
)


class Event(WireStruct, kw_only=True):
    """The ``params`` of an ``event`` notification (``subscriptionId`` aside:
    the client's stream strips it). ``ephemeral`` events (``message.delta``)
    are not stored and carry the last stored ``seq``."""

    seq: int
    type: str
    thread_id: str | None = None
    run_id: str | None = None
    node_id: str | None = None
    at: float = 0.0
    payload: dict[str, Any] = {}
    subscription_id: str | None = None
    ephemeral: bool | None = None


class Resync(WireStruct, kw_only=True):
    """The ``params`` of an ``events.resync`` notification: subscribe again after ``afterSeq``."""

    subscription_id: str
    after_seq: int


# -- payloads ---------------------------------------------------------------------------------------


class ThreadCreated(WireStruct, kw_only=True):
    thread: AppThread


class MessageCreated(WireStruct, kw_only=True):
    message: ConversationMessage


class MessageText(WireStruct, kw_only=True):
    """``message.delta`` (ephemeral) and ``message.appended`` (durable): ``text``
    at ``offset`` (Unicode code points) in the message."""

    message_id: str
    offset: int
    text: str


class MessageCompleted(WireStruct, kw_only=True):
    message_id: str
    #: ``complete`` or ``interrupted``
    status: MessageStatus
    length: int


class MessageNotSent(WireStruct, kw_only=True):
    message_id: str
    reason: str


class MessageSteered(WireStruct, kw_only=True):
    message_id: str


class RunQueued(WireStruct, kw_only=True):
    run: Run
    dispatch_mode: DispatchType


class RunStarted(WireStruct, kw_only=True):
    run: Run
    attempt: RunAttempt


class RunChanged(WireStruct, kw_only=True):
    """``run.waiting``, ``run.running`` and a terminal ``run.<status>``."""

    run: Run


class AttemptEnded(WireStruct, kw_only=True):
    attempt: RunAttempt


class NodeChanged(WireStruct, kw_only=True):
    """``<node kind>.started`` / ``<node kind>.<status>``."""

    node: ExecutionNode


class RootTurnStarted(WireStruct, kw_only=True):
    node: ExecutionNode
    #: the app ProviderTurn of the turn that started
    provider_turn_id: str | None = None


class RunInterruptRequested(WireStruct, kw_only=True):
    hold_queue: bool


class RunSteerRequested(WireStruct, kw_only=True):
    message_id: str
    strategy: SteerStrategy
    mode: Literal["steer_active", "restart_active"]


class RunRetrying(WireStruct, kw_only=True):
    run: Run
    attempt: RunAttempt
    why: str
    #: a person's ``run.retry``: the attempt the new one replaces
    previous_attempt_id: str | None = None


class QueueChanged(WireStruct, kw_only=True):
    """``thread.queue_held`` / ``thread.queue_released`` / ``thread.queue_reordered``."""

    queued_run_ids: list[str]


class RequestAsked(WireStruct, kw_only=True):
    """``approval.requested`` / ``user_input.requested`` (a question's with its ``questions`` artifact)."""

    request: RuntimeRequest
    node: ExecutionNode
    artifact: PlanArtifact | None = None


class RequestChanged(WireStruct, kw_only=True):
    """``*.resolved`` / ``*.not_resumable``."""

    request: RuntimeRequest


class PlanUpdated(WireStruct, kw_only=True):
    artifact: PlanArtifact
    scope: Literal["root", "child"]


class PlanChanged(WireStruct, kw_only=True):
    """``plan.proposed`` / ``plan.finalized``."""

    artifact: PlanArtifact


class PlanImplemented(WireStruct, kw_only=True):
    artifact: PlanArtifact
    mode: Literal["new_run", "new_thread"]


class ProviderThreadCreated(WireStruct, kw_only=True):
    provider_thread: ProviderThread


class ProviderThreadResumed(WireStruct, kw_only=True):
    provider_thread_id: str
    session_id: str
    #: the turns the resumed provider thread reports
    native_turn_count: int


class ProviderThreadTrouble(WireStruct, kw_only=True):
    """``provider_thread.unusable`` / ``provider_thread.error``."""

    provider_thread_id: str
    reason: str


class ProviderThreadReverted(WireStruct, kw_only=True):
    provider_thread_id: str
    covered_run_ids: list[str]


class HandoffCreated(WireStruct, kw_only=True):
    handoff: ContextHandoff


class SessionChanged(WireStruct, kw_only=True):
    """``session.<status>``; a session that ended says how its process exited."""

    session: ProviderSession
    exit_code: int | None = None
    signal: int | None = None


class RuntimeWarningPayload(WireStruct, kw_only=True):
    message: str
    #: processes a previous runtime's tools left running (after a restart)
    pids: list[int] | None = None


class ReconcileCounts(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How many of each thing a reconciliation closed (snake_case: the report's own names)."""

    runs_interrupted: int
    runs_not_started: int
    nodes_incomplete: int
    messages_not_sent: int
    requests_not_resumable: int
    sessions_stopped: int
    effects_retired: int
    checkpoints_missing: int
    rollbacks_interrupted: int
    restores_interrupted: int
    transfers_failed: int
    #: transfers bound to a queued run the restart cancelled (a merge-back, a wake-up's result)
    transfers_superseded: int


class DaemonReconciled(ReconcileCounts, kw_only=True):
    reason: str


class ThreadFailed(ReconcileCounts, kw_only=True, rename={"incident_id": "incidentId"}):
    incident_id: str
    reason: str
    quarantined: bool


class ThreadUnquarantined(WireStruct, kw_only=True):
    #: null if it was not quarantined
    first_incident_id: str | None


class ThreadUpdated(WireStruct, kw_only=True):
    """``thread.update`` changed the thread: the record now, and the fields that changed."""

    thread: AppThread
    changed: list[str]


class ThreadDeleted(WireStruct, kw_only=True):
    """``thread.delete`` took the thread out; its children keep their history."""

    thread_id: str
    child_thread_ids: list[str]


class EventCorrupt(WireStruct, kw_only=True):
    reason: str
    message: str


class ThreadForked(WireStruct, kw_only=True):
    fork_thread_id: str
    transfer_id: str
    side_chat: bool


class KeptPath(WireStruct, kw_only=True):
    """A path a fork's new worktree keeps as its commit has it: the fork point's checkpoint did not hold it."""

    path: str
    reason: Literal["ignored", "not_checkpointed"]


class WorkspaceCreated(WireStruct, kw_only=True):
    """``workspace.created`` (issue 27): a fork's own worktree or copy was made at its first run."""

    kind: Literal["worktree", "copy"]
    path: str
    workspace: str
    repository: str | None
    branch: str | None
    commit: str | None
    checkpoint_id: str | None
    checkpoint_commit: str | None
    written: list[str]
    removed: list[str]
    kept: list[KeptPath]


class MergeBackFiles(WireStruct, kw_only=True):
    """``merge_back.files`` (issue 27): what a merge-back did with the fork's files."""

    transfer_id: str
    fork_thread_id: str
    status: Literal["merged", "conflicts", "conflicts_marked"]
    written: list[str]
    deleted: list[str]
    conflicts: list[PathReason]
    not_merged: list[PathReason]
    safety_checkpoint_id: str
    theirs_checkpoint_id: str
    base_commit: str
    theirs_commit: str
    theirs_ref: str


class ThreadArchived(WireStruct, kw_only=True):
    """``thread.archived`` (issue 27)."""

    worktree_removed: bool
    checkpoint_id: str | None
    branch: str | None
    path: str | None


class ThreadUnarchived(WireStruct, kw_only=True):
    """``thread.unarchived`` (issue 27)."""

    worktree_restored: bool
    checkpoint_id: str | None


class TransferChanged(WireStruct, kw_only=True):
    """``context_transfer.<created|resolved|consumed|failed>``."""

    transfer: ContextTransfer
    #: ``consumed`` by a running turn as a tool's answer (``task.result``)
    via: Literal["tool_result"] | None = None


#: how a run start got its context (see "Lineage"); ``inbox``: stored delegation handoffs
ContextKind = Literal["none", "native", "portable", "delta", "unsupported", "inbox"]


class RunContextResolved(WireStruct, kw_only=True):
    kind: ContextKind
    reason: str
    transfer_id: str | None = None
    handoff_id: str | None = None
    #: kind ``inbox``: the stored delegation handoffs the run takes in
    transfer_ids: list[str] | None = None
    handoff_ids: list[str] | None = None


class TaskDelegated(WireStruct, kw_only=True):
    task_id: str
    thread_id: str
    run_id: str
    transfer_id: str
    handoff_id: str
    provider: str
    wait: bool
    wake: bool
    workspace: str


class TaskEnded(WireStruct, kw_only=True):
    task_id: str
    run_id: str
    status: RunStatus
    outcome: str
    transfer_id: str
    handoff_id: str


class NodeInterruptRequested(WireStruct, kw_only=True):
    via: Literal["provider", "task_cancel"]
    task_ids: list[str]


class ThreadMemoryRolledBack(WireStruct, kw_only=True):
    by_node_id: str
    keep_ordinal: int
    rolled_back_run_ids: list[str]
    provider_rollback: Literal["native", "rebuilt", "none"]
    provider_rollback_reason: str | None
    retired_provider_thread_ids: list[str]


class TaskWoke(WireStruct, kw_only=True):
    task_id: str
    transfer_id: str
    wake_run_id: str


class TaskWakeDropped(WireStruct, kw_only=True):
    task_ids: list[str]
    cancelled_run_ids: list[str]
    reason: str


class SubagentThreadCreated(WireStruct, kw_only=True):
    thread_id: str
    transfer_id: str
    native_thread_id: str | None


class CheckpointRecorded(WireStruct, kw_only=True):
    """``checkpoint.captured|missing|error|stale``."""

    checkpoint: Checkpoint


class RunRolledBack(WireStruct, kw_only=True):
    run: Run
    target_ordinal: int


class RollbackInterrupted(WireStruct, kw_only=True):
    reason: str
    target_ordinal: int | None
    run_ids: list[str]
    checkpoint_id: str | None
    #: null when the daemon died before it was captured (then no file had been touched)
    safety_checkpoint_id: str | None
    message: str


class RestoreInterrupted(WireStruct, kw_only=True):
    reason: str
    checkpoint_id: str | None
    safety_checkpoint_id: str | None
    message: str


class RunUsage(WireStruct, kw_only=True):
    """``run.usage``: the run's and its thread's token usage after the
    provider's latest report, and their cost where every model had a price."""

    usage: TokenUsage
    cost: float | None
    thread_usage: TokenUsage
    thread_cost: float | None


class RunStalled(WireStruct, kw_only=True):
    """``run.stalled`` / ``run.unstalled``: the run's provider has said nothing
    for ``silentFor`` seconds (unstalled: it spoke again after that long)."""

    run_id: str
    node_id: str
    silent_for: float


# -- the types --------------------------------------------------------------------------------------

#: the kinds of child node whose start and end are events (the root's is ``root_turn``)
NODE_KINDS = ("file_change", "tool", "command_execution", "mcp_tool_call", "reasoning", "subagent", "plan", "approval",
              "user_input_request", "turn_diff", "context_compaction", "review")
NODE_STATUSES: tuple[str, ...] = get_args(NodeStatus)
ATTEMPT_STATUSES: tuple[str, ...] = get_args(AttemptStatus)
RUN_CHANGES = ("waiting", "running", "completed", "failed", "interrupted", "cancelled")


def _types() -> dict[str, type[msgspec.Struct]]:
    events: dict[str, type[msgspec.Struct]] = {
        "thread.created": ThreadCreated,
        "message.created": MessageCreated,
        "message.delta": MessageText,
        "message.appended": MessageText,
        "message.completed": MessageCompleted,
        "message.not_sent": MessageNotSent,
        "run.queued": RunQueued,
        "run.started": RunStarted,
        **{f"run.{status}": RunChanged for status in RUN_CHANGES},
        **{f"attempt.{status}": AttemptEnded for status in ATTEMPT_STATUSES},
        "root_turn.started": RootTurnStarted,
        **{f"root_turn.{status}": NodeChanged for status in NODE_STATUSES},
        **{f"{kind}.{status}": NodeChanged for kind in NODE_KINDS for status in ("started", *NODE_STATUSES)},
        "run.interrupt_requested": RunInterruptRequested,
        "run.steer_requested": RunSteerRequested,
        "message.steered": MessageSteered,
        "run.retrying": RunRetrying,
        **{f"thread.queue_{change}": QueueChanged for change in ("held", "released", "reordered")},
        **{f"{prefix}.requested": RequestAsked for prefix in ("approval", "user_input")},
        **{f"{prefix}.{change}": RequestChanged for prefix in ("approval", "user_input")
           for change in ("resolved", "not_resumable")},
        "plan.updated": PlanUpdated,
        "plan.proposed": PlanChanged,
        "plan.implemented": PlanImplemented,
        "plan.finalized": PlanChanged,
        "provider_thread.created": ProviderThreadCreated,
        "provider_thread.resumed": ProviderThreadResumed,
        "provider_thread.unusable": ProviderThreadTrouble,
        "provider_thread.error": ProviderThreadTrouble,
        "context_handoff.created": HandoffCreated,
        **{f"session.{status}": SessionChanged for status in ("starting", "ready", "stopped", "error")},
        "runtime.warning": RuntimeWarningPayload,
        "daemon.reconciled": DaemonReconciled,
        "thread.failed": ThreadFailed,
        "thread.unquarantined": ThreadUnquarantined,
        "thread.updated": ThreadUpdated,
        "thread.deleted": ThreadDeleted,
        "event.corrupt": EventCorrupt,
        "thread.forked": ThreadForked,
        "workspace.created": WorkspaceCreated,
        "merge_back.files": MergeBackFiles,
        "thread.archived": ThreadArchived,
        "thread.unarchived": ThreadUnarchived,
        **{f"context_transfer.{change}": TransferChanged for change in ("created", "resolved", "consumed", "failed", "superseded")},
        "run.context_resolved": RunContextResolved,
        "task.delegated": TaskDelegated,
        "task.ended": TaskEnded,
        "task.woke": TaskWoke,
        "thread.memory_rolled_back": ThreadMemoryRolledBack,
        "node.interrupt_requested": NodeInterruptRequested,
        "task.wake_dropped": TaskWakeDropped,
        "subagent.thread_created": SubagentThreadCreated,
        "checkpoint.restored": CheckpointRestored,
        **{f"checkpoint.{status}": CheckpointRecorded for status in ("captured", "missing", "error", "stale")},
        "run.rolled_back": RunRolledBack,
        "thread.rolled_back": ThreadRolledBack,
        "thread.rollback_interrupted": RollbackInterrupted,
        "checkpoint.restore_interrupted": RestoreInterrupted,
        "node.rolled_back": NodeRolledBack,
        "provider_thread.reverted": ProviderThreadReverted,
        "run.usage": RunUsage,
        "run.stalled": RunStalled,
        "run.unstalled": RunStalled,
    }
    return events


#: every event type, and the Struct of its payload
EVENTS: dict[str, type[msgspec.Struct]] = _types()
#: the types that are never stored (they carry the last stored ``seq`` and ``ephemeral: true``)
EPHEMERAL = frozenset({"message.delta"})


class UnknownEvent(ValueError):
    """An event whose type the protocol does not define."""


def check_payload(event_type: str, payload: Any) -> None:
    """Hold an event's payload to its type's Struct.

    Raises:
        UnknownEvent: the type is not one of ``EVENTS``.
        msgspec.ValidationError: the payload does not match.
    """
    struct = EVENTS.get(event_type)
    if struct is None:
        raise UnknownEvent(f"event type {event_type!r} is not in the protocol")
    msgspec.convert(payload, struct)

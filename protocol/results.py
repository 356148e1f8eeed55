"""What every method answers: one result Struct per method.

Which method answers with which Struct is said once, beside its params, in
``signatures.py``. Handlers may return the Struct or the plain mapping it
encodes to (``store.records.to_wire`` builds most of them); either way the
server can hold the answer to its Struct (``Method.check_result``) and
``agentd schema`` exports it as JSON Schema. Names are camelCase on the wire,
as the params'; a field that is not always there has a default (it is not
``required`` in the schema); an answer with a field its Struct does not
declare is refused by the check.

A few answers are also event payloads (``checkpoint.restored`` is the
answer of ``checkpoint.restore`` without ``seq``): the event's Struct is the
base, the answer adds ``seq``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from .wire_records import (
    AppThread,
    Checkpoint,
    ContextHandoff,
    ContextTransfer,
    ConversationMessage,
    ExecutionNode,
    FilesMerge,
    PlanArtifact,
    ProviderSession,
    Run,
    RunAttempt,
    RunStatus,
    RuntimeRequest,
    WireStruct,
    WorkspaceSource,
)

#: the ``seq`` of the event a command's commit logged (``thread.created`` for ``thread.create``, …)
Seq = int


class Never:
    """The result of a method that never answers with one (``run.resume``:
    always ``unsupported``); its schema is ``false``."""


# -- commands ---------------------------------------------------------------------------------------


class ThreadCreateResult(WireStruct, kw_only=True):
    thread_id: str
    seq: Seq
    #: ``relationship: fork`` (it is ``thread.fork``): the fork's transfer
    transfer_id: str | None = None
    #: with ``mcpServers``: the names changed to be kept (given → kept), as ``thread.update`` says them
    renamed: dict[str, str] | None = None


class MergeBackAnswer(WireStruct, kw_only=True):
    """``thread.message.send {mergeBack}``: what the merge carries (SPEC F7)."""

    transfer_id: str
    fork_thread_id: str
    run_ids: list[str]
    #: null when the fork shares this thread's workspace
    fork_workspace: str | None
    files_differ: list[str] | None
    #: ``mergeBack.files``: what the merge of the fork's files did (issue 27)
    files: FilesMerge | None = None


SteerStrategy = Literal["native_steer", "steering_restart", "superseding_run"]


class MessageSendResult(WireStruct, kw_only=True):
    """``thread.message.send`` (and ``queued-message.promote-to-steer``, a
    steer): a new run's answer has ``queueHeld`` and ``heldRunIds``, a
    steer's ``strategy``."""

    run_id: str
    message_id: str
    seq: Seq
    queue_held: bool | None = None
    held_run_ids: list[str] | None = None
    strategy: SteerStrategy | None = None
    merge_back: MergeBackAnswer | None = None


class RunInterruptResult(WireStruct, kw_only=True):
    run_id: str
    interrupt_requested: bool
    queue_held: bool
    seq: Seq


class RunRetryResult(WireStruct, kw_only=True):
    """``run.retry``: the run, and the attempt that retries it."""

    run_id: str
    attempt_id: str
    attempt_number: int
    seq: Seq


class ThreadStopResult(WireStruct, kw_only=True):
    thread_id: str
    interrupted_run_id: str | None
    queue_held: bool
    seq: Seq


class QueueReleaseResult(WireStruct, kw_only=True):
    thread_id: str
    queued_run_ids: list[str]
    seq: Seq


class QueuedRunCancelResult(WireStruct, kw_only=True):
    run_id: str
    status: Literal["cancelled"]
    seq: Seq


class QueueReorderResult(WireStruct, kw_only=True):
    queued_run_ids: list[str]
    seq: Seq


class RequestRespondResult(WireStruct, kw_only=True):
    """``approval.respond`` and ``user-input.respond``."""

    request_id: str
    status: Literal["resolved"]
    seq: Seq


class PlanImplementResult(WireStruct, kw_only=True):
    plan_id: str
    thread_id: str
    seq: Seq
    #: ``mode: new_run``: the run that implements it (``new_thread``: the new thread's first message starts one)
    run_id: str | None = None


class ThreadForkResult(WireStruct, kw_only=True):
    thread_id: str
    transfer_id: str
    seq: Seq
    #: the fork's workspace (issue 27: a worktree or copy of its own, made at its first run)
    workspace: str | None = None
    workspace_source: WorkspaceSource | None = None


class TaskDelegateResult(WireStruct, kw_only=True):
    task_id: str
    thread_id: str
    run_id: str
    transfer_id: str
    handoff_id: str
    provider: str
    seq: Seq


class NodeInterruptResult(WireStruct, kw_only=True):
    """``node.interrupt``: how the node is being ended (``provider``: the
    runtime was asked; ``task_cancel``: the tasks it delegated are being
    cancelled); the run goes on."""

    node_id: str
    run_id: str
    via: Literal["provider", "task_cancel"]
    task_ids: list[str]
    seq: Seq


class TaskCancelResult(WireStruct, kw_only=True):
    """``task.cancel``: the task's run interrupted (when it was running) or
    cancelled (when it had not started), its own tasks stopped after it."""

    task_id: str
    interrupted_run_id: str | None
    cancelled_run_ids: list[str]
    seq: Seq


class ThreadUpdateResult(WireStruct, kw_only=True):
    """``thread.update``: the thread as it is now, and which fields changed
    (none: nothing was written; ``seq`` is then the store's last)."""

    thread: AppThread
    changed: list[str]
    #: MCP server names that were changed to be kept (given → kept; issue 26)
    renamed: dict[str, str] = {}
    seq: Seq


class ThreadDeleteResult(WireStruct, kw_only=True):
    """``thread.delete``: what went (counts), the shadow refs dropped, and
    the child threads (forks, tasks) that keep their own history."""

    thread_id: str
    runs: int
    messages: int
    nodes: int
    handoffs: int
    checkpoints: int
    refs_dropped: int
    child_thread_ids: list[str]
    seq: Seq


class SearchHit(WireStruct, kw_only=True):
    """One match: the thread, and the run and message it is in (null for a
    title or a handoff's ``messageId``); ``kind`` says what matched;
    ``snippet`` marks the matched words ``**so**``; higher ``score`` is better."""

    thread_id: str
    run_id: str | None
    message_id: str | None
    kind: Literal["title", "user", "answer", "handoff"]
    snippet: str
    score: float


class ThreadSearchResult(WireStruct, kw_only=True):
    hits: list[SearchHit]
    #: false: the query matched too many documents to rank in time; the hits
    #: are its newest matches, newest first, with score 0
    ranked: bool


class ThreadExportResult(WireStruct, kw_only=True):
    """``thread.export``: ``markdown`` (format markdown) or ``document`` (format json)."""

    thread_id: str
    format: Literal["markdown", "json"]
    markdown: str | None = None
    document: dict[str, Any] | None = None


class ThreadArchiveResult(WireStruct, kw_only=True):
    thread_id: str
    archived: bool
    #: its git worktree was removed after the final checkpoint ``checkpointId``
    worktree_removed: bool
    checkpoint_id: str | None = None
    #: the worktree's branch, which stays
    branch: str | None = None
    seq: Seq


class ThreadUnarchiveResult(WireStruct, kw_only=True):
    thread_id: str
    archived: bool
    #: its git worktree was made again from the final checkpoint ``checkpointId``
    worktree_restored: bool
    checkpoint_id: str | None = None
    seq: Seq


class ThreadUnquarantineResult(WireStruct, kw_only=True):
    thread_id: str
    was_quarantined: bool
    seq: Seq


# -- checkpoints and rollbacks (SPEC F13, F14) ------------------------------------------------------

NotRestoredReason = Literal["exists_unstored", "directory_in_the_way", "parent_not_directory", "nested_repository",
                            "write_failed", "delete_failed", "aborted"]
#: the bytes (base64) of each listed path whose name is not UTF-8, by its shown string
PathBytes = dict[str, str]


class NotRestored(WireStruct, kw_only=True):
    """A path a restore left as it was, and why."""

    path: str
    reason: NotRestoredReason
    detail: str | None = None
    path_bytes: str | None = None


class CheckpointRestored(WireStruct, kw_only=True):
    """The answer of ``checkpoint.restore`` without ``seq`` (the ``checkpoint.restored`` event)."""

    checkpoint_id: str
    safety_checkpoint_id: str
    restored: list[str]
    written: list[str]
    deleted: list[str]
    not_restored: list[NotRestored]
    complete: bool
    error: str | None
    path_bytes: PathBytes
    #: null when complete
    message: str | None


class CheckpointRestoreResult(CheckpointRestored, kw_only=True):
    seq: Seq


ProviderRollback = Literal["native", "rebuilt", "none"]


class ThreadRolledBack(WireStruct, kw_only=True):
    """The answer of ``rollback.toRun`` without ``seq`` (the ``thread.rolled_back`` event)."""

    thread_id: str
    target_ordinal: int
    checkpoint_id: str
    rolled_back_run_ids: list[str]
    restored_files: list[str]
    path_bytes: PathBytes
    provider_rollback: ProviderRollback
    provider_rollback_reason: str | None
    retired_provider_thread_ids: list[str]
    safety_checkpoint_id: str
    stale_checkpoint_ids: list[str]


class RollbackToRunResult(ThreadRolledBack, kw_only=True):
    seq: Seq


class NodeRolledBack(WireStruct, kw_only=True):
    """The answer of ``rollback.node`` without ``seq`` (the ``node.rolled_back`` event)."""

    node_id: str
    checkpoint_id: str
    run_id: str
    restored_files: list[str]
    safety_checkpoint_id: str
    stale_checkpoint_ids: list[str]
    provider_rollback: ProviderRollback
    provider_rollback_reason: str | None
    child_thread_id: str | None
    shared_workspace: bool
    parent_changed_files: list[str]
    path_bytes: PathBytes


class RollbackNodeResult(NodeRolledBack, kw_only=True):
    seq: Seq


Change = Literal["added", "modified", "deleted", "renamed"]


class FileChange(WireStruct, kw_only=True):
    """One file of a checkpoint diff."""

    path: str
    change: Change
    insertions: int = 0
    deletions: int = 0
    binary: bool = False
    old_path: str | None = None
    path_bytes: str | None = None
    old_path_bytes: str | None = None


class CheckpointDiffResult(WireStruct, kw_only=True):
    checkpoint_id: str
    base_checkpoint_id: str | None
    files: list[FileChange]
    patch: str
    truncated: bool


class RunDiffResult(CheckpointDiffResult, kw_only=True):
    """``run.diff``: a checkpoint diff for a run; ``approximate`` is null for
    the run's own checkpoint, ``between_baselines`` for a run cut off before
    its capture (the captures before and after it)."""

    run_id: str
    approximate: Literal["between_baselines"] | None


# -- reads ------------------------------------------------------------------------------------------


class Unreadable(WireStruct, kw_only=True):
    """A record a read left out because it cannot be decoded."""

    kind: str | None
    id: str | None
    reason: str


class CorruptThread(WireStruct, kw_only=True):
    """A thread in ``thread.list`` whose stored record cannot be decoded, in its place."""

    id: str | None
    corrupt: Literal[True]
    reason: str


#: a thread in a list: its record, or a ``CorruptThread`` in its place. msgspec
#: cannot tell two untagged objects apart, so the server's check takes any
#: object here; the exported schema (and the suite's validator) says which.
ThreadEntry = Annotated[
    dict[str, Any],
    msgspec.Meta(extra_json_schema={"anyOf": [{"$ref": "#/$defs/AppThread"}, {"$ref": "#/$defs/CorruptThread"}]}),
]


class ThreadListResult(WireStruct, kw_only=True):
    threads: list[ThreadEntry]
    #: with ``limit``: the ``before`` of the next page, null on the last (absent without ``limit``)
    next: str | None = None


class Quarantine(WireStruct, kw_only=True):
    """A thread whose actor failed too often (see "One thread's failure")."""

    first_incident_id: str
    reason: str
    since: float
    incident_ids: list[str]
    recovery_pending: bool


class ThreadGetResult(WireStruct, kw_only=True):
    thread: AppThread
    runs: list[Run]
    messages: list[ConversationMessage]
    unreadable: list[Unreadable]
    quarantine: Quarantine | None


class RunGetResult(WireStruct, kw_only=True):
    run: Run
    attempts: list[RunAttempt]
    nodes: list[ExecutionNode]
    artifacts: list[PlanArtifact]
    unreadable: list[Unreadable]


class ThreadRequestsResult(WireStruct, kw_only=True):
    requests: list[RuntimeRequest]


class McpEndpointResult(WireStruct, kw_only=True):
    """``mcp.endpoint``: agentd's MCP endpoint and a bearer token for it."""

    url: str
    #: the same endpoint on a Unix socket (None: not served on one)
    socket: str | None
    token: str


class TaskResult(WireStruct, kw_only=True):
    """``task.result``: where a delegated task stands, and its result once its run ended."""

    task_id: str
    thread_id: str
    #: null while the task has no run
    run_id: str | None
    #: its run's status, ``not_started`` when it has none
    status: RunStatus | Literal["not_started"]
    text: str
    outcome: str | None = None
    final_answer: str | None = None
    files_changed: list[str] | None = None
    transfer_id: str | None = None
    handoff_id: str | None = None
    transfer: ContextTransfer | None = None
    delivered: bool | None = None


class ThreadTransfersResult(WireStruct, kw_only=True):
    transfers: list[ContextTransfer]


class HandoffGetResult(WireStruct, kw_only=True):
    handoff: ContextHandoff


class LiveSession(ProviderSession, kw_only=True):
    """A live provider session in ``daemon.status``: its record, and whether a run holds it."""

    busy: bool


class Commits(WireStruct, kw_only=True):
    """Durable batches committed, and the write transactions they shared (group commit)."""

    batches: int
    transactions: int


class DaemonStatusResult(WireStruct, kw_only=True):
    version: str
    pid: int
    uptime: float
    socket: str
    #: null when off
    websocket: str | None
    web: str | None
    data_dir: str
    last_seq: int
    loaded_actors: list[str]
    quarantined: list[str]
    sessions: list[LiveSession]
    subscribers: int
    commits: Commits


class WebLoginCodeResult(WireStruct, kw_only=True):
    code: str
    url: str
    expires_in: float


class Capabilities(WireStruct, kw_only=True):
    """What a provider instance can do natively."""

    steer: bool = True
    native_fork: bool = True
    interrupt: bool = True
    rollback: bool = True
    structured_questions: bool = True
    empty_threads: bool = True


class ProviderInfo(WireStruct, kw_only=True):
    name: str
    kind: str
    capabilities: Capabilities
    usable: bool
    why: str | None = None
    binary: str | None = None
    version: str | None = None
    #: the model a Claude or ACP instance is configured with (null: the runtime's default)
    model: str | None = None
    #: an ACP agent's ``agentInfo`` from ``initialize`` (``{name, version, title?}``)
    agent: dict[str, Any] | None = None
    #: an ACP agent's own ``agentCapabilities`` from ``initialize``, as it said them
    agent_capabilities: dict[str, Any] | None = None
    #: an ACP agent's ``authMethods`` (``[{id, name, type}]``)
    auth_methods: list[dict[str, Any]] | None = None


class ProvidersListResult(WireStruct, kw_only=True):
    providers: list[ProviderInfo]


class CheckpointListResult(WireStruct, kw_only=True):
    checkpoints: list[Checkpoint]
    unreadable: list[Unreadable]


# -- events -----------------------------------------------------------------------------------------


class SubscribeResult(WireStruct, kw_only=True):
    subscription_id: str
    #: the last stored seq when the subscription began
    seq: Seq


class EmptyResult(WireStruct, kw_only=True):
    """``{}``."""

"""The records as clients receive them: the wire form of ``store.records``.

Every record in a result or an event is the stored record turned into plain
camelCase JSON (``store.records.to_wire``). The protocol layer sits below the
store and cannot name its Structs, so the shapes are said again here, field
for field with the same defaults; ``tests/protocol/test_schema.py`` holds the two to
each other. Where the store keeps a loose mapping whose shape the contract
spells out (a checkpoint's ``summary``), the wire form says it exactly.

These Structs refuse unknown fields: a field the store gains and the wire
does not declare fails the suite's schema checks instead of reaching clients
undocumented.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class WireStruct(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """Base of every result, event payload and record shape on the wire."""


# -- status vocabularies (as ``store.records`` has them) ------------------------------------------

ThreadStatus = Literal["idle", "running", "waiting"]
MessageStatus = Literal["complete", "streaming", "queued", "not_sent", "interrupted", "cancelled"]
RunStatus = Literal["queued", "running", "waiting", "completed", "failed", "interrupted", "cancelled", "rolled_back"]
AttemptStatus = Literal["pending", "running", "completed", "failed", "interrupted", "cancelled"]
NodeStatus = Literal["pending", "running", "completed", "failed", "interrupted", "cancelled", "incomplete"]
SessionStatus = Literal["starting", "ready", "stopped", "error"]
ProviderThreadStatus = Literal["active", "unloaded", "error", "unusable"]
RequestStatus = Literal["pending", "resolved", "not_resumable", "cancelled"]
ArtifactStatus = Literal["active", "final", "proposed", "implemented", "answered", "closed"]
CheckpointStatus = Literal["captured", "missing", "error", "stale"]
CheckpointKind = Literal["baseline", "run", "pre_rollback", "child", "pre_merge", "archive"]
TransferType = Literal["fork", "provider_handoff", "merge_back", "subagent_spawn", "subagent_result"]
TransferStatus = Literal["pending", "resolved_native", "resolved_portable", "consumed", "failed", "superseded"]
TransferResolution = Literal["native", "portable", "checkpoint_context"]
HandoffStrategy = Literal["portable_full", "delta", "full_thread_summary", "checkpoint_context", "portable_context",
                          "subagent_task", "subagent_result"]
SourcePointType = Literal["latest_stable", "run", "node", "provider_thread", "checkpoint"]
CreatedBy = Literal["user", "agent", "system"]


# -- the records ------------------------------------------------------------------------------------


class TokenUsage(WireStruct, kw_only=True):
    """Tokens a run or a thread used (see ``Run.usage``)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    models: list[str] = []


class AppThread(WireStruct, kw_only=True):
    """The canonical, provider-neutral conversation a user sees (SPEC F1, F8)."""

    id: str
    title: str = ""
    workspace: str = ""
    provider: str = "scripted"
    status: ThreadStatus = "idle"
    created_at: float = 0.0
    updated_at: float = 0.0
    run_count: int = 0
    active_run_id: str | None = None
    provider_thread_id: str | None = None
    queue_held: bool = False
    held_run_ids: list[str] = []
    parent_thread_id: str | None = None
    relationship_to_parent: str | None = None
    root_thread_id: str | None = None
    side_chat: bool = False
    created_by: str = "user"
    wake_task_ids: list[str] = []
    wakes_parent: bool = False
    usage: TokenUsage | None = None
    cost: float | None = None
    workspace_source: WorkspaceSource | None = None
    archived_at: float | None = None
    mcp_servers: list[McpServer] | None = None


class McpServer(WireStruct, kw_only=True):
    """An MCP server a thread's provider sessions get besides agentd's own tool (issue 26)."""

    name: str
    type: Literal["stdio", "http"] = "stdio"
    command: str | None = None
    args: list[str] = []
    #: the names of its environment variables (their values are never shown)
    env_names: list[str] = []
    url: str | None = None
    #: the names of its HTTP headers (their values are never shown)
    header_names: list[str] = []


class WorkspaceSource(WireStruct, kw_only=True):
    """Where a fork's own workspace comes from: a git worktree or a copy of its source's (issue 27)."""

    kind: Literal["worktree", "copy"]
    source_thread_id: str
    source_workspace: str
    path: str
    repository: str | None = None
    prefix: str = ""
    branch: str | None = None
    commit: str | None = None
    checkpoint_id: str | None = None


class ConversationMessage(WireStruct, kw_only=True):
    """A user or assistant message of a thread."""

    id: str
    thread_id: str
    run_id: str | None = None
    attempt_id: str | None = None
    node_id: str | None = None
    role: str
    text: str = ""
    status: MessageStatus = "complete"
    created_at: float = 0.0
    completed_at: float | None = None
    attachments: list[MessageAttachment] | None = None


class MessageAttachment(WireStruct, kw_only=True):
    """An image that came with a user message (issue 26); its bytes are the
    file ``<data-dir>/attachments/<threadId>/<sha256>``."""

    type: Literal["image"] = "image"
    mime_type: str
    sha256: str
    size: int


class Run(WireStruct, kw_only=True):
    """One user turn of an AppThread (SPEC F2)."""

    id: str
    thread_id: str
    ordinal: int
    status: RunStatus = "queued"
    reason: str | None = None
    provider: str = "scripted"
    user_message_id: str | None = None
    root_node_id: str | None = None
    selected_attempt_id: str | None = None
    attempt_count: int = 0
    supersedes_run_id: str | None = None
    checkpoint_id: str | None = None
    created_at: float = 0.0
    started_at: float | None = None
    ended_at: float | None = None
    clean_context: bool = False
    status_before_rollback: RunStatus | None = None
    rolled_back_at: float | None = None
    created_by: str = "user"
    usage: TokenUsage | None = None
    cost: float | None = None
    stalled_since: float | None = None


class RunAttempt(WireStruct, kw_only=True):
    """One provider try at a run (SPEC F3, F11)."""

    id: str
    run_id: str
    thread_id: str
    number: int
    reason: str = "initial"
    status: AttemptStatus = "pending"
    root_node_id: str | None = None
    provider_thread_id: str | None = None
    provider_turn_id: str | None = None
    error: str | None = None
    created_at: float = 0.0
    ended_at: float | None = None
    handoff_id: str | None = None
    transfer_id: str | None = None
    extra_handoff_ids: list[str] = []


class ExecutionNode(WireStruct, kw_only=True):
    """A node of the execution graph: the root turn, tool calls, approvals, …"""

    id: str
    thread_id: str
    run_id: str
    attempt_id: str | None = None
    parent_node_id: str | None = None
    kind: str
    status: NodeStatus = "pending"
    counts_for_run: bool = False
    title: str = ""
    provider_item_id: str | None = None
    detail: dict[str, Any] = {}
    summary: str | None = None
    created_at: float = 0.0
    ended_at: float | None = None


class ProviderSession(WireStruct, kw_only=True):
    """One live provider runtime process."""

    id: str
    provider: str
    kind: str
    thread_id: str | None = None
    status: SessionStatus = "starting"
    reason: str | None = None
    pid: int | None = None
    process_start_ticks: int | None = None
    started_at: float = 0.0
    last_active_at: float = 0.0
    stopped_at: float | None = None


class ProviderThread(WireStruct, kw_only=True):
    """The provider's own conversation behind an AppThread (SPEC F11)."""

    id: str
    thread_id: str
    provider: str
    kind: str
    native_thread_id: str
    status: ProviderThreadStatus = "active"
    reason: str | None = None
    covered_run_count: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    covered_run_ids: list[str] = []
    bridges_in_a_row: int = 0
    settings: dict[str, Any] = {}
    forked_from: str | None = None
    history_mode: str | None = None


class RuntimeRequest(WireStruct, kw_only=True):
    """A provider waiting on the person (SPEC F15)."""

    id: str
    thread_id: str
    run_id: str
    attempt_id: str | None = None
    node_id: str | None = None
    kind: str
    status: RequestStatus = "pending"
    provider_request_ref: str | None = None
    session_id: str | None = None
    detail: dict[str, Any] = {}
    #: an approval's decisions, as its provider offers them (``accept``,
    #: ``acceptForSession``, ``decline``); empty for a question (and, read from
    #: an older store, for an approval: ``accept`` and ``decline``)
    decisions: list[str] = []
    response: dict[str, Any] | None = None
    reason: str | None = None
    created_at: float = 0.0
    resolved_at: float | None = None


class PlanArtifact(WireStruct, kw_only=True):
    """A proposed plan, a todo list or a set of questions (SPEC F16)."""

    id: str
    thread_id: str
    run_id: str
    node_id: str | None = None
    kind: str
    status: ArtifactStatus = "active"
    steps: list[dict[str, Any]] = []
    text: str = ""
    questions: list[dict[str, Any]] = []
    answers: dict[str, Any] = {}
    request_id: str | None = None
    implemented_by: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0


class SourcePoint(WireStruct, kw_only=True):
    """What the client named as a source point, and what agentd resolved it to."""

    type: SourcePointType
    thread_id: str
    run_id: str | None = None
    node_id: str | None = None
    checkpoint_id: str | None = None
    provider_thread_id: str | None = None
    provider_turn_id: str | None = None
    provider: str | None = None
    native_thread_id: str | None = None
    native_turn_ref: str | None = None


class ContextTransfer(WireStruct, kw_only=True):
    """That context must flow from a source point to a target thread (SPEC F8)."""

    id: str
    type: TransferType
    source_thread_id: str
    target_thread_id: str
    source_point: SourcePoint
    base_point: SourcePoint | None = None
    status: TransferStatus = "pending"
    resolution: TransferResolution | None = None
    lower_fidelity: bool = False
    source_provider: str | None = None
    target_provider: str | None = None
    target_provider_thread_id: str | None = None
    handoff_id: str | None = None
    run_id: str | None = None
    source_run_ids: list[str] = []
    reason: str = ""
    created_by: CreatedBy = "user"
    created_at: float = 0.0
    resolved_at: float | None = None
    consumed_at: float | None = None
    error: str | None = None
    files_merge: FilesMerge | None = None


class PathReason(WireStruct, kw_only=True):
    """A path, and why it is named."""

    path: str
    reason: str


class FilesMerge(WireStruct, kw_only=True):
    """What a merge-back did with the fork's files (issue 27)."""

    status: Literal["merged", "conflicts", "conflicts_marked"]
    written: list[str] = []
    deleted: list[str] = []
    conflicts: list[PathReason] = []
    not_merged: list[PathReason] = []
    safety_checkpoint_id: str
    theirs_checkpoint_id: str
    base_commit: str
    theirs_commit: str
    theirs_ref: str


class ContextHandoff(WireStruct, kw_only=True):
    """The exact context an agent was given (SPEC F5, F11)."""

    id: str
    thread_id: str
    strategy: HandoffStrategy
    reason: str = ""
    source_provider_thread_id: str | None = None
    target_provider_thread_id: str | None = None
    covered_run_count: int = 0
    text: str = ""
    created_at: float = 0.0
    transfer_id: str | None = None
    covered_run_ids: list[str] = []
    dropped_run_ids: list[str] = []
    dropped: list[str] = []
    size: int = 0
    cap: int = 0
    target_provider: str | None = None


# -- a checkpoint's summary (``Checkpoint.summary``) ------------------------------------------------

SkipReason = Literal["too_large", "unreadable", "unsupported_type", "ignored"]


class SkippedFile(WireStruct, kw_only=True):
    """A workspace file left out of a checkpoint, and why."""

    path: str
    reason: SkipReason
    size: int | None = None
    #: the name's bytes (base64) when it is not UTF-8
    path_bytes: str | None = None


class ChildCheckpointSummary(WireStruct, kw_only=True):
    """A run's child checkpoint, as its summary lists it (``summary.children``)."""

    checkpoint_id: str
    node_id: str | None = None
    status: CheckpointStatus
    files_changed: int = 0
    insertions: int = 0
    deletions: int = 0


class CheckpointSummary(WireStruct, kw_only=True):
    """A checkpoint against its base; empty for one that was not captured.
    Summaries stored before ``pathBytes`` lack it (it defaults to ``{}``)."""

    files_changed: int = 0
    insertions: int = 0
    deletions: int = 0
    skipped: list[SkippedFile] = []
    nested_repos: list[str] = []
    path_bytes: dict[str, str] = {}
    children: list[ChildCheckpointSummary] = []


class Checkpoint(WireStruct, kw_only=True):
    """A capture of the thread's workspace in its shadow repository (SPEC F13)."""

    id: str
    thread_id: str
    run_id: str | None = None
    node_id: str | None = None
    scope: str = "root"
    kind: CheckpointKind = "run"
    ordinal: int = 0
    status: CheckpointStatus = "captured"
    reason: str | None = None
    detail: str | None = None
    commit: str | None = None
    ref: str | None = None
    base_checkpoint_id: str | None = None
    summary: CheckpointSummary = msgspec.field(default_factory=CheckpointSummary)
    workspace: str = ""
    created_at: float = 0.0
    parent_node_id: str | None = None
    #: a child scope's paths the agent reported writing elsewhere during its capture
    concurrent_paths: list[str] = []


#: the record shapes, by the name the contract's Records section gives them
RECORDS: dict[str, type[WireStruct]] = {
    cls.__name__: cls
    for cls in (AppThread, McpServer, ConversationMessage, MessageAttachment, Run, Checkpoint, RunAttempt, ExecutionNode, ProviderSession,
                ProviderThread, RuntimeRequest, PlanArtifact, ContextHandoff, ContextTransfer, SourcePoint, TokenUsage, WorkspaceSource,
                FilesMerge, PathReason)
}

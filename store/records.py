"""Durable record kinds of the conversation graph.

Every record is a msgspec Struct stored as msgpack behind a one-byte schema
version. Field names are camelCase on disk and on the wire (``rename="camel"``).
Rules that keep old data readable: new fields always get defaults, and an
existing field never changes its type. ``tests/store/test_records.py`` decodes a
stored fixture of every kind to hold us to that.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

# ---------------------------------------------------------------------------
# Status vocabularies. Strings on disk and on the wire; the Literal types are
# every value agentd writes, so a typo is a type error and a stored value
# outside them is a decode error, not a silent new state. Adding a value is
# compatible; removing one is not (old data dirs hold it).

ThreadStatus = Literal["idle", "running", "waiting"]
MessageStatus = Literal["complete", "streaming", "queued", "not_sent", "interrupted", "cancelled"]
RunStatus = Literal["queued", "running", "waiting", "completed", "failed", "interrupted", "cancelled", "rolled_back"]
AttemptStatus = Literal["pending", "running", "completed", "failed", "interrupted", "cancelled"]
NodeStatus = Literal["pending", "running", "completed", "failed", "interrupted", "cancelled", "incomplete"]
SessionStatus = Literal["starting", "ready", "stopped", "error"]
ProviderThreadStatus = Literal["active", "unloaded", "error", "unusable"]
TurnStatus = Literal["started", "completed", "failed", "interrupted", "cancelled"]
RequestStatus = Literal["pending", "resolved", "not_resumable", "cancelled"]
ArtifactStatus = Literal["active", "final", "proposed", "implemented", "answered", "closed"]
EffectStatus = Literal["pending", "done", "retired"]
CheckpointStatus = Literal["captured", "missing", "error", "stale"]
#: ``baseline``: the workspace before a run (ordinal = the run's - 1); ``run``:
#: after a run (its ordinal); ``pre_rollback``: the safety capture a restore takes first;
#: ``child``: a child scope's, when a checkpointable child node (a subagent) ended
CheckpointKind = Literal["baseline", "run", "pre_rollback", "child", "pre_merge", "archive"]
#: why context moves from a source point to a target (F8: one model of every movement of context)
TransferType = Literal["fork", "provider_handoff", "merge_back", "subagent_spawn", "subagent_result"]
TransferStatus = Literal["pending", "resolved_native", "resolved_portable", "consumed", "failed", "superseded"]
TransferResolution = Literal["native", "portable", "checkpoint_context"]
#: ``portable_context`` is what agentd wrote before handoffs had strategies (kept for old data dirs)
#: ``subagent_task``: a delegated task's instructions and framing (SPEC F9);
#: ``subagent_result``: what a delegated task gives back to its parent
HandoffStrategy = Literal["portable_full", "delta", "full_thread_summary", "checkpoint_context", "portable_context",
                          "subagent_task", "subagent_result"]
SourcePointType = Literal["latest_stable", "run", "node", "provider_thread", "checkpoint"]
CreatedBy = Literal["user", "agent", "system"]

#: a transfer resolved but not yet taken in by a provider turn (in flight)
TRANSFER_IN_FLIGHT = frozenset({"resolved_native", "resolved_portable"})

RUN_ACTIVE = frozenset({"running", "waiting"})
RUN_TERMINAL = frozenset({"completed", "failed", "interrupted", "cancelled", "rolled_back"})
RUN_OPEN = frozenset({"queued"}) | RUN_ACTIVE

ATTEMPT_TERMINAL = frozenset({"completed", "failed", "interrupted", "cancelled"})
#: transfers bound to one run (their ``runId``) before any turn takes them in:
#: a merge-back's delta is built for the message it came with, and a delegated
#: task's result that woke its parent is that wake-up run's input. When the run
#: is cancelled, dropped or rolled back they end ``superseded``.
RUN_BOUND_TRANSFERS = frozenset({"merge_back", "subagent_result"})
NODE_TERMINAL = frozenset({"completed", "failed", "interrupted", "cancelled", "incomplete"})


class Record(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=False, frozen=True):
    """Base of every durable record: an app-owned ``id``. Records are values:
    an update is a copy (``struct_copy``) put into a WriteBatch."""

    id: str


class TokenUsage(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """Tokens a run (or a thread: its runs summed) used, as its provider
    reported them: ``inputTokens`` all input, ``cachedInputTokens`` the part
    read from a prompt cache; ``outputTokens`` all output,
    ``reasoningTokens`` the part that was reasoning (0 where not reported);
    ``models``: the models that used them, as the provider named them."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    models: list[str] = []


class AppThread(Record, kw_only=True, frozen=True):
    """The canonical, provider-neutral conversation a user sees (SPEC F1, F8)."""

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
    #: the queued runs a Stop holds (those queued before it); runs sent later
    #: are not held and start as usual
    held_run_ids: list[str] = []
    # Light lineage (F8): where this thread came from, and why.
    parent_thread_id: str | None = None
    relationship_to_parent: str | None = None
    root_thread_id: str | None = None
    side_chat: bool = False
    created_by: str = "user"
    #: delegated tasks (``wake: true``) whose end gives this thread a run of
    #: its own (a wake-up); a Stop empties it (SPEC F9, F10)
    wake_task_ids: list[str] = []
    #: a delegated task whose end wakes its parent (``task.delegate {wake: true}``)
    wakes_parent: bool = False
    #: its runs' token usage summed, and their cost where every part of it
    #: had a price (``[pricing."MODEL"]``); None: no usage reported / no price
    usage: TokenUsage | None = None
    cost: float | None = None
    #: a fork's own git worktree or copy of its source's workspace, made at
    #: its first run (issue 27); None: the thread works in ``workspace`` as is
    workspace_source: WorkspaceSource | None = None
    #: when ``thread.archive`` archived it (None: not archived; issue 27)
    archived_at: float | None = None
    #: MCP servers its provider sessions get besides agentd's own tool (an
    #: editor's, ``thread.create`` / ``thread.update {mcpServers}``, or its
    #: fork source's; issue 26); None: none
    mcp_servers: list[McpServer] | None = None


class McpServer(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """An MCP server a thread's provider sessions get (issue 26): a process
    the runtime starts (``stdio``: ``command``, ``args``, and environment
    variables) or a server it reaches (``http``: ``url``, and headers).
    ``name`` is unique in the thread and never agentd's own tool's.

    The record holds the *names* of its environment variables and headers
    only: their values may be API tokens, and every client (an agent's
    process too) reads records and events, so they are kept in a file of
    the daemon's own (``actors/providers/mcp_secrets.py``). A record stored
    before that held them as ``env`` / ``headers`` maps; decoding ignores
    those keys, and the daemon moves them out at its start
    (``mcp_secrets.migrate``)."""

    name: str
    type: Literal["stdio", "http"] = "stdio"
    command: str | None = None
    args: list[str] = []
    #: its environment variables' names (``stdio``); their values are not in the store
    env_names: list[str] = []
    url: str | None = None
    #: its HTTP headers' names (``http``); their values are not in the store
    header_names: list[str] = []


class WorkspaceSource(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """Where a fork's own workspace comes from (issue 27): a git worktree of
    the source's repository on ``branch`` at ``commit``, or a copy, with the
    source's files as checkpoint ``checkpoint_id`` holds them (None: as the
    source workspace is when the fork first runs)."""

    kind: Literal["worktree", "copy"]
    source_thread_id: str
    source_workspace: str
    #: the worktree's (or copy's) top folder; the thread's workspace is it plus ``prefix``
    path: str
    #: the user's repository top level (a worktree's)
    repository: str | None = None
    prefix: str = ""
    branch: str | None = None
    commit: str | None = None
    checkpoint_id: str | None = None


class ConversationMessage(Record, kw_only=True, frozen=True):
    """A user or assistant message of a thread. Assistant text is written
    coalesced and append-only: each flush stores only the new text as a chunk
    (``message_text``), and the store joins the chunks back into ``text``
    when the message is read (see ``encode_message_head``)."""

    thread_id: str
    run_id: str | None = None
    attempt_id: str | None = None
    node_id: str | None = None
    role: str  # user | assistant
    text: str = ""
    status: MessageStatus = "complete"
    created_at: float = 0.0
    completed_at: float | None = None
    #: the images that came with a user message (issue 26), each stored as a
    #: file of its own (``MessageAttachment``); None: none
    attachments: list[MessageAttachment] | None = None


class MessageAttachment(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """An image that came with a user message (issue 26). Its bytes are not
    in the store (a value stays small, and so does the ``message.created``
    event every subscriber gets): they are the file
    ``<data-dir>/attachments/<threadId>/<sha256>``, written before the
    message is."""

    type: Literal["image"] = "image"
    mime_type: str
    #: the hex SHA-256 of its bytes: the name of its file
    sha256: str
    #: its size in bytes
    size: int


class Run(Record, kw_only=True, frozen=True):
    """One user turn of an AppThread (SPEC F2). Only the root node ends it."""

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
    #: the message asked for a fresh provider thread with a summary of the thread (F5 ``cleanContext``)
    clean_context: bool = False
    #: a rolled-back run: the status it had ended with, and when it was rolled back (F14)
    status_before_rollback: RunStatus | None = None
    rolled_back_at: float | None = None
    #: ``system``: agentd queued it itself (a delegated task's wake-up), not a person
    created_by: str = "user"
    #: tokens its attempts used, as the provider reported them (None: none
    #: reported), and what they cost by the config's price table — only when
    #: every model that used them has a price; never guessed
    usage: TokenUsage | None = None
    cost: float | None = None
    #: since when its provider has sent nothing (``[daemon] stall_after``);
    #: None while it speaks, and once it ended
    stalled_since: float | None = None


class RunAttempt(Record, kw_only=True, frozen=True):
    """One provider try at a run (SPEC F3, F11)."""

    run_id: str
    thread_id: str
    number: int
    reason: str = "initial"  # initial | steering_restart | retry | provider_recovery
    status: AttemptStatus = "pending"
    root_node_id: str | None = None
    provider_thread_id: str | None = None
    provider_turn_id: str | None = None
    error: str | None = None
    created_at: float = 0.0
    ended_at: float | None = None
    #: the ContextHandoff injected into this attempt's turn, if any
    handoff_id: str | None = None
    #: the ContextTransfer this attempt's start resolved, if any
    transfer_id: str | None = None
    #: stored handoffs this attempt's turn carries besides ``handoffId``, in
    #: order: a delegated task's instructions (``subagent_spawn``) and results
    #: of delegated tasks (``subagent_result``) — SPEC F9
    extra_handoff_ids: list[str] = []


class ExecutionNode(Record, kw_only=True, frozen=True):
    """A node of the execution graph: the root turn, tool calls, approvals, …"""

    thread_id: str
    run_id: str
    attempt_id: str | None = None
    parent_node_id: str | None = None
    kind: str  # root_turn | tool | file_change | agent_message | subagent | approval | …
    status: NodeStatus = "pending"
    counts_for_run: bool = False
    title: str = ""
    provider_item_id: str | None = None
    detail: dict[str, Any] = {}
    summary: str | None = None
    created_at: float = 0.0
    ended_at: float | None = None


class ProviderSession(Record, kw_only=True, frozen=True):
    """One live provider runtime process. Disposable; its threads outlive it."""

    provider: str
    kind: str
    thread_id: str | None = None
    status: SessionStatus = "starting"
    reason: str | None = None
    pid: int | None = None
    process_start_ticks: int | None = None  # /proc/PID/stat field 22, to never kill a reused pid
    started_at: float = 0.0
    last_active_at: float = 0.0
    stopped_at: float | None = None


class ProviderThread(Record, kw_only=True, frozen=True):
    """The provider's own conversation behind an AppThread, with its durable
    native handle. Survives its sessions (SPEC F11)."""

    thread_id: str
    provider: str
    kind: str
    native_thread_id: str
    status: ProviderThreadStatus = "active"
    reason: str | None = None
    #: legacy: the ordinal of the last completed run on it (see ``covered_run_ids``)
    covered_run_count: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    #: coverage: the app runs (of this thread, or inherited from a fork's source)
    #: this provider thread has seen — run itself, inherited by a native fork, or
    #: been given in a handoff — oldest first. What it lacks is the next delta.
    covered_run_ids: list[str] = []
    #: consecutive runs on it that each needed a delta handoff (reset by a run without one)
    bridges_in_a_row: int = 0
    #: the settings that shaped its context when it was made (F4: "frozen
    #: context"): kind, model, args, env names, capabilities, runtime version
    settings: dict[str, Any] = {}
    #: the provider thread it was natively forked from
    forked_from: str | None = None
    #: its history contract as the runtime reported it (Codex ``historyMode``:
    #: ``legacy`` cannot be rolled back or forked natively); None: not reported
    history_mode: str | None = None


class ProviderTurn(Record, kw_only=True, frozen=True):
    """One provider turn inside a ProviderThread, correlated to an attempt."""

    provider_thread_id: str
    thread_id: str
    run_id: str
    attempt_id: str
    native_turn_id: str | None = None
    status: TurnStatus = "started"
    started_at: float = 0.0
    ended_at: float | None = None
    #: where a native fork "after this turn" points, when that is not the turn
    #: id (Claude: the turn's last message uuid, for ``--resume-session-at``)
    native_end_ref: str | None = None


class RuntimeRequest(Record, kw_only=True, frozen=True):
    """A provider waiting on the user (SPEC F15). The app owns the id; the
    provider's request id is only a reference, valid while its session lives."""

    thread_id: str
    run_id: str
    attempt_id: str | None = None
    node_id: str | None = None
    kind: str  # approval | user_input
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


class PlanArtifact(Record, kw_only=True, frozen=True):
    """A proposed plan, a todo list or a set of questions (SPEC F16)."""

    thread_id: str
    run_id: str
    node_id: str | None = None
    kind: str  # proposed_plan | todo_list | questions
    status: ArtifactStatus = "active"
    steps: list[dict[str, Any]] = []  # todo_list
    text: str = ""  # proposed_plan markdown
    questions: list[dict[str, Any]] = []
    answers: dict[str, Any] = {}
    request_id: str | None = None
    implemented_by: str | None = None  # run or thread that implements a proposed plan
    created_at: float = 0.0
    updated_at: float = 0.0


class SourcePoint(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """The exact state a ContextTransfer moves (F6, F8: its "source point"): what
    the client named (``type`` and its id) and what agentd resolved it to —
    the run it ends at and, where the provider has one, the native handle to
    fork from."""

    type: SourcePointType
    thread_id: str
    run_id: str | None = None
    node_id: str | None = None
    checkpoint_id: str | None = None
    provider_thread_id: str | None = None
    #: an app ProviderTurn id
    provider_turn_id: str | None = None
    #: the provider instance the source ran on
    provider: str | None = None
    #: the native thread to fork and the native ref to fork after (None: its end)
    native_thread_id: str | None = None
    native_turn_ref: str | None = None


class ContextTransfer(Record, kw_only=True, frozen=True):
    """A durable, cheap record that context must flow from a source point to a
    target thread (SPEC F8), resolved lazily by the target's next run
    start: ``pending`` → ``resolved_native`` / ``resolved_portable`` →
    ``consumed`` (a provider turn took it in). ``failed`` says why
    (``error``); a failed fork is resolved again, portably, by the next message."""

    type: TransferType
    source_thread_id: str
    target_thread_id: str
    source_point: SourcePoint
    #: for a delta: the point the target already has (what the handoff starts after)
    base_point: SourcePoint | None = None
    status: TransferStatus = "pending"
    resolution: TransferResolution | None = None
    #: a synthesized (portable) transfer is lower fidelity than a native one
    lower_fidelity: bool = False
    source_provider: str | None = None
    target_provider: str | None = None
    target_provider_thread_id: str | None = None
    handoff_id: str | None = None
    #: the target run whose start resolved it
    run_id: str | None = None
    #: the conversation at the source point: app run ids, oldest first (a
    #: fork's own history starts with these, whatever later happens to the source)
    source_run_ids: list[str] = []
    #: why this transfer (``provider_switch``, ``fork``, ``cannot_resume: …``, ``settings_changed: …``)
    reason: str = ""
    created_by: CreatedBy = "user"
    created_at: float = 0.0
    resolved_at: float | None = None
    consumed_at: float | None = None
    error: str | None = None
    #: a merge-back's merge of the fork's files (``mergeBack.files``, issue 27)
    files_merge: FilesMerge | None = None


class PathReason(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """A path, and why it is named (a conflict's kind, why it was not merged)."""

    path: str
    reason: str


class FilesMerge(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """What a merge-back did with the fork's files (issue 27): a three-way
    merge in the shadow repositories — base the fork's files at the fork
    point (or at the last merge), theirs its latest checkpoint, ours the
    workspace before the merge (the ``pre_merge`` safety checkpoint)."""

    status: Literal["merged", "conflicts", "conflicts_marked"]
    written: list[str] = []
    deleted: list[str] = []
    conflicts: list[PathReason] = []
    not_merged: list[PathReason] = []
    safety_checkpoint_id: str
    theirs_checkpoint_id: str
    base_commit: str
    theirs_commit: str
    #: the ref in this workspace's shadow repository holding theirs: the next merge's base
    theirs_ref: str


class ContextHandoff(Record, kw_only=True, frozen=True):
    """Materialised context given to a provider thread that lacks it (SPEC F5,
    F11). Always stored, so what the provider was told is auditable: no hidden
    prompt splicing. ``text`` is exactly what the agent was given."""

    thread_id: str
    strategy: HandoffStrategy
    reason: str = ""
    source_provider_thread_id: str | None = None
    target_provider_thread_id: str | None = None
    covered_run_count: int = 0
    text: str = ""
    created_at: float = 0.0
    transfer_id: str | None = None
    #: the app runs this handoff stands for, oldest first
    covered_run_ids: list[str] = []
    #: runs left out to stay within ``cap`` (their ids), and what else was cut
    dropped_run_ids: list[str] = []
    dropped: list[str] = []
    #: characters of ``text``, and the cap it was built under
    size: int = 0
    cap: int = 0
    target_provider: str | None = None


class Checkpoint(Record, kw_only=True, frozen=True):
    """A capture of the thread's workspace in the checkpoint engine's shadow
    repository (SPEC F13): after a run (``kind`` ``run``), before the first
    run that has no earlier one (``baseline``), or before a restore
    (``pre_rollback``). ``status`` other than ``captured`` has no ``commit``
    and says why in ``reason`` (``daemon_restart``, ``git_missing``, …)."""

    thread_id: str
    run_id: str | None = None
    node_id: str | None = None
    #: ``root`` for the thread's runs (and their baselines), ``pre_rollback``
    #: for safety captures, ``child`` for a child node's (``node_id``)
    scope: str = "root"
    kind: CheckpointKind = "run"
    #: the run ordinal it is the state after (0: before the first run); a
    #: safety checkpoint's own sequence number
    ordinal: int = 0
    status: CheckpointStatus = "captured"
    #: a short code when not captured (``daemon_restart``, ``git_missing``, …)
    reason: str | None = None
    #: the sentence for a person that goes with ``reason``
    detail: str | None = None
    #: the shadow repository's commit and ref (None unless captured)
    commit: str | None = None
    ref: str | None = None
    #: the checkpoint this one is diffed against
    base_checkpoint_id: str | None = None
    #: ``{filesChanged, insertions, deletions, skipped: [{path, reason, size}], nestedRepos}``;
    #: a run's also ``children``: its child checkpoints' summaries
    summary: dict[str, Any] = {}
    workspace: str = ""
    created_at: float = 0.0
    #: a ``child`` checkpoint's parent scope: the node it ran under (the run's
    #: root node, or the enclosing child node)
    parent_node_id: str | None = None
    #: a child scope's checkpoint: the paths in it that the agent reported
    #: writing elsewhere (the parent, a sibling) between the child's end and
    #: the capture — not the child's own work (issue 23 item 1)
    concurrent_paths: list[str] = []


class Event(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """One entry of the global event log, keyed by a gap-free ``seq``."""

    seq: int
    type: str
    thread_id: str | None = None
    run_id: str | None = None
    node_id: str | None = None
    at: float = 0.0
    payload: dict[str, Any] = {}


class CommandReceipt(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    """The first answer to a client ``commandId``; a retry gets it again."""

    command_id: str
    method: str
    result: dict[str, Any]
    at: float = 0.0


class Effect(Record, kw_only=True, frozen=True):
    """Work owed after a commit (the outbox). ``replay_safe`` effects are
    re-queued at startup; process-bound ones are retired with a reason."""

    kind: str
    thread_id: str | None = None
    payload: dict[str, Any] = {}
    replay_safe: bool = False
    status: EffectStatus = "pending"
    reason: str | None = None
    created_at: float = 0.0


# ---------------------------------------------------------------------------
# Codecs

SCHEMA_VERSION = 1

#: sub-database name -> (record type, schema version)
RECORD_KINDS: dict[str, tuple[type, int]] = {
    "threads": (AppThread, 1),
    "messages": (ConversationMessage, 1),
    "runs": (Run, 1),
    "attempts": (RunAttempt, 1),
    "nodes": (ExecutionNode, 1),
    "provider_sessions": (ProviderSession, 1),
    "provider_threads": (ProviderThread, 1),
    "provider_turns": (ProviderTurn, 1),
    "context_handoffs": (ContextHandoff, 1),
    "context_transfers": (ContextTransfer, 1),
    "requests": (RuntimeRequest, 1),
    "artifacts": (PlanArtifact, 1),
    "events": (Event, 1),
    "receipts": (CommandReceipt, 1),
    "effects": (Effect, 1),
    "checkpoints": (Checkpoint, 1),
}

KIND_OF_TYPE: dict[type, str] = {cls: name for name, (cls, _v) in RECORD_KINDS.items()}


def kind_of(cls: type) -> str:
    """The sub-database that holds records of type ``cls``."""
    try:
        return KIND_OF_TYPE[cls]
    except KeyError:
        raise TypeError(f"{cls.__name__} is not a stored record type") from None

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[str, msgspec.msgpack.Decoder[Any]] = {name: msgspec.msgpack.Decoder(cls) for name, (cls, _v) in RECORD_KINDS.items()}


class RecordDecodeError(Exception):
    """A stored value could not be decoded as its kind (corrupt)."""


class RecordTooNew(RecordDecodeError):
    """A stored value is a record of a schema version newer than this agentd reads."""


#: schema version of a stored ConversationMessage whose text is not inline
#: but in its ``message_text`` chunks (a streamed assistant message); version
#: 1 messages carry their whole text inline, as every agentd before wrote them
CHUNKED_MESSAGE_VERSION = 2

#: the highest version each kind may be stored with, where that is above the
#: version ``encode_record`` writes
_READABLE_VERSION = {"messages": CHUNKED_MESSAGE_VERSION}


def encode_record(kind: str, record: msgspec.Struct) -> bytes:
    """Encode ``record`` as ``version byte + msgpack``."""
    version = RECORD_KINDS[kind][1]
    return bytes((version,)) + _encoder.encode(record)


def decode_record(kind: str, data: bytes | memoryview) -> Any:
    """Decode a stored value of ``kind``.

    Raises:
        RecordTooNew: its schema version is above what this agentd reads and
            the rest is a well-formed record (a newer agentd wrote it).
        RecordDecodeError: it is not a record of ``kind`` (torn, empty, or
            not agentd's) — the message says what is wrong with it.
    """
    data = bytes(data)
    if not data:
        raise RecordDecodeError("empty value")
    version = data[0]
    if version > _READABLE_VERSION.get(kind, RECORD_KINDS[kind][1]):
        # Newer only if the rest is a record at all: a torn or foreign value
        # with a high first byte is corrupt, not from the future.
        try:
            body = msgspec.msgpack.decode(data[1:])
        except msgspec.DecodeError as exc:
            raise RecordDecodeError(f"schema version byte {version} and a body that is not msgpack ({exc})") from None
        if not isinstance(body, dict) or not isinstance(body.get("id", body.get("seq")), (str, int)):
            raise RecordDecodeError(f"schema version byte {version} and a body that is not a record")
        raise RecordTooNew(f"{kind} record has schema version {version}, newer than this agentd understands")
    if version == 0:
        raise RecordDecodeError("schema version byte 0")
    try:
        return _decoders[kind].decode(data[1:])
    except msgspec.DecodeError as exc:
        raise RecordDecodeError(str(exc)) from exc


def encode_message_head(message: ConversationMessage) -> bytes:
    """Encode a streamed message without its text, as version 2: its text is
    the concatenation of its ``message_text`` chunks, so a flush appends a
    chunk and an update (a status) never rewrites what was streamed."""
    if message.text:
        message = msgspec.structs.replace(message, text="")
    return bytes((CHUNKED_MESSAGE_VERSION,)) + _encoder.encode(message)


def is_message_head(data: bytes | memoryview) -> bool:
    """Whether a stored ``messages`` value is a head whose text is in chunks."""
    return len(data) > 0 and data[0] == CHUNKED_MESSAGE_VERSION


def to_wire(record: msgspec.Struct) -> dict[str, Any]:
    """A record as the plain camelCase mapping clients receive."""
    wire: dict[str, Any] = msgspec.to_builtins(record)  # a Struct's builtins are a dict
    return wire

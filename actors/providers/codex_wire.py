"""Typed shapes of the ``codex app-server`` protocol that agentd uses.

Only what the adapter sends or reads is typed; ``tests/providers/test_codex_replay.py``
regenerates the pinned binary's JSON schema and fails when any of these
drifts from it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

# -- typed protocol shapes (only what the adapter uses) --------------------------------------
#
# ``__schema__`` names the definition in the generated schema bundle
# (``codex_app_server_protocol.schemas.json``; ``v2/`` for its v2 section);
# ``__direction__`` says whether agentd sends it ("out") or reads it ("in").


class _Wire(msgspec.Struct, kw_only=True, omit_defaults=True):
    __schema__: ClassVar[str]
    __direction__: ClassVar[str]


class ClientInfo(_Wire, kw_only=True):
    __schema__ = "ClientInfo"
    __direction__ = "out"
    name: str
    version: str


class InitializeCapabilities(_Wire, kw_only=True, rename="camel"):
    __schema__ = "InitializeCapabilities"
    __direction__ = "out"
    experimental_api: bool
    opt_out_notification_methods: list[str] | None = None


class InitializeParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "InitializeParams"
    __direction__ = "out"
    client_info: ClientInfo
    capabilities: InitializeCapabilities


class InitializeResponse(_Wire, kw_only=True, rename="camel"):
    __schema__ = "InitializeResponse"
    __direction__ = "in"
    user_agent: str
    codex_home: str | None = None


class ThreadStartParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/ThreadStartParams"
    __direction__ = "out"
    cwd: str | None = None
    model: str | None = None
    #: config overrides for this thread (dotted keys): the thread's extra MCP servers (issue 26)
    config: dict[str, Any] | None = None


class ThreadResumeParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/ThreadResumeParams"
    __direction__ = "out"
    thread_id: str
    cwd: str | None = None
    model: str | None = None
    exclude_turns: bool
    config: dict[str, Any] | None = None


class ThreadForkParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/ThreadForkParams"
    __direction__ = "out"
    thread_id: str
    last_turn_id: str | None = None
    exclude_turns: bool
    config: dict[str, Any] | None = None


class ThreadTurnsListParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/ThreadTurnsListParams"
    __direction__ = "out"
    thread_id: str
    cursor: str | None = None
    limit: int | None = None
    sort_direction: str | None = None
    items_view: str | None = None


class ThreadRevertParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/ThreadRevertParams"
    __direction__ = "out"
    thread_id: str
    before_turn_id: str


class TextUserInput(_Wire, kw_only=True, omit_defaults=False):
    """The ``text`` variant of ``UserInput`` (checked as ``TextUserInput``)."""

    __schema__ = "v2/UserInput#TextUserInput"
    __direction__ = "out"
    type: str = "text"
    text: str


class LocalImageUserInput(_Wire, kw_only=True, omit_defaults=False):
    """The ``localImage`` variant of ``UserInput``: an image file Codex reads (issue 26)."""

    __schema__ = "v2/UserInput#LocalImageUserInput"
    __direction__ = "out"
    type: str = "localImage"
    path: str


class CollaborationSettings(_Wire, kw_only=True):
    __schema__ = "v2/Settings"
    __direction__ = "out"
    model: str


class CollaborationMode(_Wire, kw_only=True):
    __schema__ = "v2/CollaborationMode"
    __direction__ = "out"
    mode: str
    settings: CollaborationSettings


class TurnStartParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/TurnStartParams"
    __direction__ = "out"
    thread_id: str
    input: list[TextUserInput | LocalImageUserInput]
    cwd: str | None = None
    collaboration_mode: CollaborationMode | None = None


class TurnSteerParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/TurnSteerParams"
    __direction__ = "out"
    thread_id: str
    expected_turn_id: str
    input: list[TextUserInput | LocalImageUserInput]


class TurnInterruptParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/TurnInterruptParams"
    __direction__ = "out"
    thread_id: str
    turn_id: str


class ThreadRef(_Wire, kw_only=True):
    __schema__ = "v2/Thread"
    __direction__ = "in"
    id: str
    #: ``legacy`` | ``paginated``: the thread's persisted history contract (a
    #: legacy history cannot be rolled back or forked natively)
    history_mode: str | None = msgspec.field(default=None, name="historyMode")


class ThreadStartResponse(_Wire, kw_only=True):
    __schema__ = "v2/ThreadStartResponse"
    __direction__ = "in"
    thread: ThreadRef
    model: str


class ThreadResumeResponse(_Wire, kw_only=True):
    __schema__ = "v2/ThreadResumeResponse"
    __direction__ = "in"
    thread: ThreadRef
    model: str


class ThreadForkResponse(_Wire, kw_only=True):
    __schema__ = "v2/ThreadForkResponse"
    __direction__ = "in"
    thread: ThreadRef


class TurnError(_Wire, kw_only=True):
    __schema__ = "v2/TurnError"
    __direction__ = "in"
    message: str


class Turn(_Wire, kw_only=True):
    __schema__ = "v2/Turn"
    __direction__ = "in"
    id: str
    status: str
    items: list[dict[str, Any]] = []
    error: TurnError | None = None


class TurnStartResponse(_Wire, kw_only=True):
    __schema__ = "v2/TurnStartResponse"
    __direction__ = "in"
    turn: Turn


class TurnSteerResponse(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/TurnSteerResponse"
    __direction__ = "in"
    turn_id: str


class ThreadTurnsListResponse(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/ThreadTurnsListResponse"
    __direction__ = "in"
    data: list[Turn]
    next_cursor: str | None = None


class TurnNotification(_Wire, kw_only=True, rename="camel"):
    """``turn/started`` and ``turn/completed``."""

    __schema__ = "v2/TurnCompletedNotification"
    __direction__ = "in"
    thread_id: str
    turn: Turn


class ItemNotification(_Wire, kw_only=True, rename="camel"):
    """``item/started`` and ``item/completed``."""

    __schema__ = "v2/ItemCompletedNotification"
    __direction__ = "in"
    thread_id: str
    turn_id: str
    item: dict[str, Any]


class AgentMessageDeltaNotification(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/AgentMessageDeltaNotification"
    __direction__ = "in"
    thread_id: str
    turn_id: str
    item_id: str
    delta: str


class TurnPlanStep(_Wire, kw_only=True):
    __schema__ = "v2/TurnPlanStep"
    __direction__ = "in"
    step: str
    status: str


class TurnPlanUpdatedNotification(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/TurnPlanUpdatedNotification"
    __direction__ = "in"
    thread_id: str
    turn_id: str
    plan: list[TurnPlanStep]
    explanation: str | None = None


class TurnDiffUpdatedNotification(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/TurnDiffUpdatedNotification"
    __direction__ = "in"
    thread_id: str
    turn_id: str
    diff: str


class TokenUsageBreakdown(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/TokenUsageBreakdown"
    __direction__ = "in"
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    reasoning_output_tokens: int
    total_tokens: int


class ThreadTokenUsage(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/ThreadTokenUsage"
    __direction__ = "in"
    #: the thread's usage so far, and its last model call's
    total: TokenUsageBreakdown
    last: TokenUsageBreakdown


class ThreadTokenUsageUpdatedNotification(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/ThreadTokenUsageUpdatedNotification"
    __direction__ = "in"
    thread_id: str
    turn_id: str
    token_usage: ThreadTokenUsage


class ErrorNotification(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/ErrorNotification"
    __direction__ = "in"
    thread_id: str
    turn_id: str
    error: TurnError
    will_retry: bool


class WarningNotification(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/WarningNotification"
    __direction__ = "in"
    message: str
    thread_id: str | None = None


class ServerRequestResolvedNotification(_Wire, kw_only=True, rename="camel"):
    __schema__ = "v2/ServerRequestResolvedNotification"
    __direction__ = "in"
    thread_id: str
    request_id: int | str


class CommandExecutionRequestApprovalParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "CommandExecutionRequestApprovalParams"
    __direction__ = "in"
    thread_id: str
    turn_id: str
    item_id: str
    command: str | None = None
    cwd: str | None = None
    reason: str | None = None


class FileChangeRequestApprovalParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "FileChangeRequestApprovalParams"
    __direction__ = "in"
    thread_id: str
    turn_id: str
    item_id: str
    reason: str | None = None
    grant_root: str | None = None


class PermissionsRequestApprovalParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "PermissionsRequestApprovalParams"
    __direction__ = "in"
    thread_id: str
    turn_id: str
    item_id: str
    cwd: str
    permissions: dict[str, Any]
    reason: str | None = None


class ExecCommandApprovalParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "ExecCommandApprovalParams"
    __direction__ = "in"
    conversation_id: str
    call_id: str
    command: list[str]
    cwd: str
    reason: str | None = None


class ApplyPatchApprovalParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "ApplyPatchApprovalParams"
    __direction__ = "in"
    conversation_id: str
    call_id: str
    file_changes: dict[str, Any]
    reason: str | None = None


class ToolRequestUserInputOption(_Wire, kw_only=True):
    __schema__ = "ToolRequestUserInputOption"
    __direction__ = "in"
    label: str
    description: str = ""


class ToolRequestUserInputQuestion(_Wire, kw_only=True, rename="camel"):
    __schema__ = "ToolRequestUserInputQuestion"
    __direction__ = "in"
    id: str
    header: str
    question: str
    options: list[ToolRequestUserInputOption] | None = None
    is_other: bool = False
    is_secret: bool = False


class ToolRequestUserInputParams(_Wire, kw_only=True, rename="camel"):
    __schema__ = "ToolRequestUserInputParams"
    __direction__ = "in"
    thread_id: str
    turn_id: str
    item_id: str
    questions: list[ToolRequestUserInputQuestion]


class CommandExecutionRequestApprovalResponse(_Wire, kw_only=True):
    __schema__ = "CommandExecutionRequestApprovalResponse"
    __direction__ = "out"
    decision: str  # accept | decline


class FileChangeRequestApprovalResponse(_Wire, kw_only=True):
    __schema__ = "FileChangeRequestApprovalResponse"
    __direction__ = "out"
    decision: str  # accept | decline


class PermissionsRequestApprovalResponse(_Wire, kw_only=True):
    __schema__ = "PermissionsRequestApprovalResponse"
    __direction__ = "out"
    permissions: dict[str, Any]
    scope: str = "turn"


class McpElicitationResponse(_Wire, kw_only=True):
    """``McpServerElicitationRequestResponse``: the answer to Codex's question
    before an MCP tool call (``accept`` with empty ``content``, or ``decline``)."""

    __schema__ = "McpServerElicitationRequestResponse"
    __direction__ = "out"
    action: str
    content: dict[str, Any] | None = None


class ReviewDecisionResponse(_Wire, kw_only=True):
    """``ExecCommandApprovalResponse`` / ``ApplyPatchApprovalResponse``:
    ``"approved"`` or ``{"denied": {"rejection": …}}``."""

    __schema__ = "ExecCommandApprovalResponse"
    __direction__ = "out"
    decision: str | dict[str, Any]


class ToolRequestUserInputAnswer(_Wire, kw_only=True):
    __schema__ = "ToolRequestUserInputAnswer"
    __direction__ = "out"
    answers: list[str]


class ToolRequestUserInputResponse(_Wire, kw_only=True):
    __schema__ = "ToolRequestUserInputResponse"
    __direction__ = "out"
    answers: dict[str, ToolRequestUserInputAnswer]


#: every typed shape, for the schema-drift test
WIRE_STRUCTS: tuple[type[_Wire], ...] = tuple(
    cls for cls in list(globals().values()) if isinstance(cls, type) and issubclass(cls, _Wire) and cls is not _Wire
)

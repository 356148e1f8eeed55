"""The shapes of the Agent Client Protocol (ACP, protocol version 1,
schema 1.21) that agentd sends or reads, as msgspec Structs.

Only what the adapter uses is typed; each Struct is named after its
definition in the ACP schema (``schema.json`` of
``agentclientprotocol/agent-client-protocol``; the Python SDK's
``acp.schema`` has the same names). Unknown fields are ignored — agents add
``_meta`` and newer fields freely — and everything optional in the schema is
optional here, so an agent that omits it is not refused.
``tests/providers/test_acp_wire.py`` checks these against the SDK's models.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

PROTOCOL_VERSION = 1


class _Wire(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """Base: camelCase on the wire, unset optionals left out."""


# -- initialize -----------------------------------------------------------------------------------


class Implementation(_Wire, kw_only=True):
    name: str
    version: str = ""
    title: str | None = None


class FileSystemCapability(_Wire, kw_only=True):
    read_text_file: bool = False
    write_text_file: bool = False


class ElicitationCapabilities(_Wire, kw_only=True):
    #: present (an empty object): agentd answers form elicitations (``elicitation/create``)
    form: dict[str, Any] | None = None


class ClientCapabilities(_Wire, kw_only=True):
    fs: FileSystemCapability
    terminal: bool = False
    elicitation: ElicitationCapabilities | None = None


class InitializeRequest(_Wire, kw_only=True):
    protocol_version: int
    client_capabilities: ClientCapabilities
    client_info: Implementation


class AgentCapabilities(_Wire, kw_only=True):
    load_session: bool = False
    prompt_capabilities: dict[str, Any] = {}
    mcp_capabilities: dict[str, Any] = {}
    session_capabilities: dict[str, Any] = {}
    meta: dict[str, Any] = msgspec.field(default_factory=dict, name="_meta")


class AuthMethod(_Wire, kw_only=True):
    id: str
    name: str = ""
    description: str | None = None
    #: ``agent`` (the default: the agent handles it), ``env_var`` or ``terminal``
    type: str = "agent"
    vars: list[dict[str, Any]] = []


class InitializeResponse(_Wire, kw_only=True):
    protocol_version: int
    agent_capabilities: AgentCapabilities = msgspec.field(default_factory=AgentCapabilities)
    auth_methods: list[AuthMethod] = []
    agent_info: Implementation | None = None
    #: extensions: ``steering.supported`` (the ``_session/steering`` request)
    meta: dict[str, Any] = msgspec.field(default_factory=dict, name="_meta")

    def steering(self) -> bool:
        """The agent takes ``_session/steering`` (claude-agent-acp 0.101.0:
        top-level ``_meta.steering.supported``)."""
        steering = self.meta.get("steering")
        return isinstance(steering, dict) and steering.get("supported") is True

    def prompt_queueing(self) -> bool:
        """The agent queues a ``session/prompt`` sent while one runs
        (``agentCapabilities._meta.claudeCode.promptQueueing``)."""
        claude = self.agent_capabilities.meta.get("claudeCode")
        return isinstance(claude, dict) and claude.get("promptQueueing") is True


# -- sessions -------------------------------------------------------------------------------------


class EnvVariable(_Wire, kw_only=True):
    name: str
    value: str


class McpServerStdio(_Wire, kw_only=True):
    name: str
    command: str
    args: list[str]
    env: list[EnvVariable]


class NewSessionRequest(_Wire, kw_only=True):
    cwd: str
    #: agentd's own (``McpServerStdio``), then the thread's others as ACP's mappings (issue 26)
    mcp_servers: list[McpServerStdio | Any]


class NewSessionResponse(_Wire, kw_only=True):
    session_id: str
    modes: dict[str, Any] | None = None
    #: unstable in v1 (``session/set_model``), offered by older Claude adapters
    models: dict[str, Any] | None = None
    #: the session's settings (``session/set_config_option``; ``category`` ``mode``, ``model``, …)
    config_options: list[dict[str, Any]] | None = None


class LoadSessionRequest(_Wire, kw_only=True):
    session_id: str
    cwd: str
    mcp_servers: list[McpServerStdio | Any]


class ResumeSessionRequest(_Wire, kw_only=True):
    """``session/resume`` (``sessionCapabilities.resume``): like
    ``session/load`` without the replay."""

    session_id: str
    cwd: str
    mcp_servers: list[McpServerStdio]


class ForkSessionRequest(_Wire, kw_only=True):
    """``session/fork`` (``sessionCapabilities.fork``): a new session with
    the whole of ``session_id``'s history; its answer is a
    :class:`NewSessionResponse`."""

    session_id: str
    cwd: str
    mcp_servers: list[McpServerStdio]


class SetSessionModeRequest(_Wire, kw_only=True):
    session_id: str
    mode_id: str


class SetSessionModelRequest(_Wire, kw_only=True):
    session_id: str
    model_id: str


class SetSessionConfigOptionRequest(_Wire, kw_only=True):
    session_id: str
    config_id: str
    value: str


class TextContent(_Wire, kw_only=True, tag_field="type", tag="text"):
    text: str


class ImageContent(_Wire, kw_only=True, tag_field="type", tag="image"):
    """An image of the prompt (base64), for agents whose ``promptCapabilities.image`` is true."""

    data: str
    mime_type: str


class PromptRequest(_Wire, kw_only=True):
    session_id: str
    prompt: list[TextContent | ImageContent]


StopReason = Literal["end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled"]


class SteeringRequest(_Wire, kw_only=True):
    """``_session/steering`` (an ACP extension): a message into the running
    turn; ``promptRequired`` when none runs (the message is then not taken)."""

    session_id: str
    prompt: list[TextContent | ImageContent]
    meta: dict[str, Any] = msgspec.field(default_factory=lambda: {"steering": {"idleBehavior": "promptRequired"}},
                                         name="_meta")


class SteeringResponse(_Wire, kw_only=True):
    #: ``injected`` (taken by the running turn), ``promptRequired`` or ``startedNewTurn``
    outcome: str = ""


class PromptResponse(_Wire, kw_only=True):
    stop_reason: StopReason
    usage: dict[str, Any] | None = None


class CancelNotification(_Wire, kw_only=True):
    session_id: str


class SessionNotification(_Wire, kw_only=True):
    session_id: str
    #: one of the SessionUpdate variants, by ``sessionUpdate`` (read leniently: acp_updates)
    update: dict[str, Any]


# -- the agent's requests to agentd ---------------------------------------------------------------


class PermissionOption(_Wire, kw_only=True):
    option_id: str
    name: str = ""
    kind: Literal["allow_once", "allow_always", "reject_once", "reject_always"]


class RequestPermissionRequest(_Wire, kw_only=True):
    session_id: str
    tool_call: dict[str, Any]
    options: list[PermissionOption]


class SelectedOutcome(_Wire, kw_only=True, tag_field="outcome", tag="selected"):
    option_id: str


class CancelledOutcome(_Wire, kw_only=True, tag_field="outcome", tag="cancelled"):
    pass


class RequestPermissionResponse(_Wire, kw_only=True):
    outcome: SelectedOutcome | CancelledOutcome


class CreateElicitationRequest(_Wire, kw_only=True):
    """``elicitation/create``: tied to a session (``sessionId``, maybe a
    ``toolCallId``) or to a request of ours (``requestId``); mode ``form``
    (a ``requestedSchema``) or ``url``."""

    message: str = ""
    mode: str = ""
    session_id: str | None = None
    tool_call_id: str | None = None
    request_id: int | str | None = None
    requested_schema: dict[str, Any] | None = None


class CreateElicitationResponse(_Wire, kw_only=True):
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


class ReadTextFileRequest(_Wire, kw_only=True):
    session_id: str
    path: str
    line: int | None = None
    limit: int | None = None


class ReadTextFileResponse(_Wire, kw_only=True):
    content: str


class WriteTextFileRequest(_Wire, kw_only=True):
    session_id: str
    path: str
    content: str


class CreateTerminalRequest(_Wire, kw_only=True):
    session_id: str
    command: str
    args: list[str] = []
    env: list[EnvVariable] = []
    cwd: str | None = None
    output_byte_limit: int | None = None


class CreateTerminalResponse(_Wire, kw_only=True):
    terminal_id: str


class TerminalRequest(_Wire, kw_only=True):
    """``terminal/output``, ``wait_for_exit``, ``kill`` and ``release`` params."""

    session_id: str
    terminal_id: str


class TerminalExitStatus(_Wire, kw_only=True):
    exit_code: int | None = None
    signal: str | None = None


class TerminalOutputResponse(_Wire, kw_only=True):
    output: str
    truncated: bool
    exit_status: TerminalExitStatus | None = None

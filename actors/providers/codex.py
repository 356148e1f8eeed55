"""Adapter for OpenAI Codex: one ``codex app-server`` process per session.

``codex app-server`` speaks JSON-RPC-shaped lines without the ``"jsonrpc"``
field over stdio (the framing of :class:`JsonLinesPeer`). The handshake is the
request ``initialize {clientInfo, capabilities: {experimentalApi: true}}``
followed by the notification ``initialized``. Then:

=========================  ==================================================
agentd                     codex
=========================  ==================================================
ProviderThread             a codex thread id (``thread/start``, stored under
                           ``$CODEX_HOME/sessions``; ``thread/resume`` loads
                           it into a fresh process)
ProviderTurn               a turn id (``turn/start``)
steer_turn                 ``turn/steer {threadId, expectedTurnId, input}``
interrupt_turn             ``turn/interrupt`` — only an acknowledgement: the
                           turn ends when ``turn/completed`` says
                           ``interrupted``
fork_thread                ``thread/fork {threadId, lastTurnId}``; where that
                           cannot cut the fork, fork all and ``thread/revert``
                           the fork's later turns
list_turns                 ``thread/turns/list`` (paged, oldest first)
rollback_thread            ``thread/revert {threadId, beforeTurnId}``
approvals                  ``item/commandExecution/requestApproval``,
                           ``item/fileChange/requestApproval``,
                           ``item/permissions/requestApproval`` and the legacy
                           ``execCommandApproval`` / ``applyPatchApproval``
questions                  ``item/tool/requestUserInput`` — Codex offers its
                           ``request_user_input`` tool only in *plan* mode: a
                           message starting with ``/plan`` starts its turn
                           with ``collaborationMode: {mode: "plan"}``
=========================  ==================================================

Every params/result shape the adapter sends or reads is a msgspec Struct
below, named after its definition in the JSON schema the pinned binary
generates (``codex app-server generate-json-schema --experimental``);
``tests/providers/test_codex_replay.py`` checks them against a freshly generated schema.
"""

from __future__ import annotations

import logging
import os
import platform
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import trio

from .extra_mcp import McpServerSpec

from .base import (
    Capabilities,
    EventSink,
    ItemCompleted,
    ItemStarted,
    NativeThreadMissing,
    PlanUpdated,
    ProviderAdapter,
    ProviderConnection,
    ProviderRuntimeError,
    RequestOpened,
    ResumeInfo,
    RuntimeWarning_,
    TextDelta,
    TurnCompleted,
    TurnStarted,
    Usage,
    message_phase,
)
from ..config import ProviderConfig
from .agentd_tool import AgentdTool
from . import extra_mcp
from .images import ImageInput
from .jsonl import JsonLinesPeer, stop_process
from .runtime import RuntimeBinary, StderrLog, parse_version  # noqa: F401 - parse_version re-exported
from .transport import ProcessLike, Spawn, exit_status, spawn_process

log = logging.getLogger(__name__)

#: the executable, and the versions this adapter was checked against
CODEX = RuntimeBinary("codex", supported=((0, 169, 0), (0, 172, 0)), supported_text="0.169–0.171")
PROJECT_LOCAL_BINARY = CODEX.project_local
find_binary = CODEX.find_binary
version_problem = CODEX.version_problem
CLIENT_NAME = "agentd"
CLIENT_VERSION = "0.1.0"
PROBE_TIMEOUT = 20.0
PLAN_PREFIX = "/plan"
MAX_DETAIL_TEXT = 64 * 1024

#: notifications agentd has no use for: codex does not send them at all
OPT_OUT_NOTIFICATIONS = [
    "account/rateLimits/updated",
    "thread/readState/changed",
    "remoteControl/status/changed",
    "item/commandExecution/outputDelta",
    "item/fileChange/outputDelta",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/summaryPartAdded",
    "item/reasoning/textDelta",
    "item/plan/delta",
]

#: codex ThreadItem types -> agentd node kinds (None: not a node of the run)
ITEM_TYPES: dict[str, str | None] = {
    "userMessage": None,  # the app already has the user's message
    "hookPrompt": None,
    "agentMessage": "agent_message",
    "reasoning": "reasoning",
    "commandExecution": "command_execution",
    "fileChange": "file_change",
    "mcpToolCall": "mcp_tool_call",
    "dynamicToolCall": "tool",
    "functionCallOutput": "tool",
    "webSearch": "tool",
    "imageView": "tool",
    "imageGeneration": "tool",
    "sleep": "tool",
    "collabAgentToolCall": "subagent",
    "subAgentActivity": "subagent",
    "plan": "plan",
    "contextCompaction": "context_compaction",
    "enteredReviewMode": "review",
    "exitedReviewMode": "review",
}

#: codex item statuses at item/completed -> agentd node statuses
ITEM_STATUSES = {
    "completed": "completed",
    "failed": "failed",
    "declined": "cancelled",
    "interrupted": "interrupted",
    "inProgress": "incomplete",
}

#: server requests that are approvals, and the kind of thing each approves
APPROVAL_METHODS = {
    "item/commandExecution/requestApproval": "command",
    "item/fileChange/requestApproval": "file_change",
    "item/permissions/requestApproval": "permissions",
    "execCommandApproval": "command",
    "applyPatchApproval": "file_change",
    # Codex asks before an MCP tool call (agentd's own delegate_task
    # included) as an MCP elicitation in form mode (checked on 0.171)
    "mcpServer/elicitation/request": "mcp_tool",
}
MCP_ELICITATION_METHOD = "mcpServer/elicitation/request"
#: elicitation modes that are a yes/no question agentd can put to the person
MCP_APPROVAL_MODES = ("form", "openai/form", "openaiForm")
USER_INPUT_METHOD = "item/tool/requestUserInput"

_MISSING_THREAD = re.compile(
    r"no rollout found|thread not found|invalid session id|failed to (read|load)|session metadata|is empty|"
    r"corrupt|could not parse|not a valid",
    re.IGNORECASE,
)


from .codex_wire import (  # the typed shapes
    AgentMessageDeltaNotification,
    ApplyPatchApprovalParams,
    ClientInfo,
    CollaborationMode,
    CollaborationSettings,
    CommandExecutionRequestApprovalParams,
    CommandExecutionRequestApprovalResponse,
    ErrorNotification,
    ExecCommandApprovalParams,
    FileChangeRequestApprovalParams,
    FileChangeRequestApprovalResponse,
    InitializeCapabilities,
    InitializeParams,
    InitializeResponse,
    ItemNotification,
    McpElicitationResponse,
    PermissionsRequestApprovalParams,
    PermissionsRequestApprovalResponse,
    ReviewDecisionResponse,
    ServerRequestResolvedNotification,
    LocalImageUserInput,
    TextUserInput,
    ThreadForkParams,
    ThreadForkResponse,
    ThreadResumeParams,
    ThreadResumeResponse,
    ThreadRevertParams,
    ThreadStartParams,
    ThreadStartResponse,
    ThreadTokenUsageUpdatedNotification,
    ThreadTurnsListParams,
    ThreadTurnsListResponse,
    TokenUsageBreakdown,
    ToolRequestUserInputAnswer,
    ToolRequestUserInputParams,
    ToolRequestUserInputResponse,
    Turn,
    TurnDiffUpdatedNotification,
    TurnInterruptParams,
    TurnNotification,
    TurnPlanUpdatedNotification,
    TurnStartParams,
    TurnStartResponse,
    TurnSteerParams,
    TurnSteerResponse,
    WarningNotification,
    _Wire,
)

#: the methods the adapter calls, and the server requests and notifications it handles
CLIENT_METHODS = (
    "initialize", "thread/start", "thread/resume", "thread/fork", "thread/turns/list", "thread/revert",
    "turn/start", "turn/steer", "turn/interrupt",
)
CLIENT_NOTIFICATIONS = ("initialized",)
SERVER_REQUESTS = (*APPROVAL_METHODS, USER_INPUT_METHOD)
SERVER_NOTIFICATIONS = (
    "turn/started", "turn/completed", "item/started", "item/completed", "item/agentMessage/delta",
    "turn/plan/updated", "turn/diff/updated", "error", "warning", "configWarning", "deprecationNotice",
    "serverRequest/resolved", "thread/tokenUsage/updated",
)

_encode = msgspec.to_builtins
#: a wire Struct of codex_wire
W = TypeVar("W", bound=msgspec.Struct)


def _decode(shape: type[W], data: Any, what: str) -> W:
    try:
        return msgspec.convert(data, shape)
    except msgspec.ValidationError as exc:
        raise ProviderRuntimeError(f"codex sent an unexpected {what}: {exc}") from exc


# -- the native binary behind npm's launcher ----------------------------------------------------

_NATIVE_TRIPLES = {
    ("Linux", "x86_64"): ("x86_64-unknown-linux-musl", "@openai/codex-linux-x64"),
    ("Linux", "aarch64"): ("aarch64-unknown-linux-musl", "@openai/codex-linux-arm64"),
    ("Darwin", "x86_64"): ("x86_64-apple-darwin", "@openai/codex-darwin-x64"),
    ("Darwin", "arm64"): ("aarch64-apple-darwin", "@openai/codex-darwin-arm64"),
}


def native_binary(path: Path) -> tuple[Path, dict[str, str]]:
    """The native executable behind the npm package's ``bin/codex.js``.

    The npm launcher is a node script that, on node < 22.15, runs the native
    binary as a *child*: signals to the launcher's pid would then leave the
    real runtime behind. Running the native binary directly gives one pid
    that is the runtime. Returns ``(path, extra env)``; ``path`` unchanged if
    it is not the npm launcher or the native binary is not there.
    """
    real = path.resolve()
    if real.name != "codex.js" or real.parent.name != "bin":
        return path, {}
    package_root = real.parent.parent  # …/node_modules/@openai/codex
    found = _NATIVE_TRIPLES.get((platform.system(), platform.machine()))
    if found is None:
        return path, {}
    triple, platform_package = found
    node_modules = package_root.parent.parent
    for vendor in (node_modules / platform_package / "vendor", package_root / "vendor"):
        candidate = vendor / triple / "bin" / "codex"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate, {"CODEX_MANAGED_PACKAGE_ROOT": str(package_root), "CODEX_MANAGED_BY_NPM": "1"}
    return path, {}


# -- the adapter ----------------------------------------------------------------------------------------


class CodexAdapter(ProviderAdapter):
    """A ``kind = "codex"`` provider instance.

    Capabilities are all native: steer (``turn/steer``), native fork
    (``thread/fork``), interrupt (``turn/interrupt``), rollback
    (``thread/revert``), empty threads (``thread/start``) and structured
    questions — the last only in Codex's plan mode, which a message starting
    with ``/plan`` selects; in default mode Codex asks in plain text.

    Args:
        config: the ``[providers.NAME]`` table.
        home: agentd's directory for this instance (``stderr.log`` goes here).
            Codex keeps its own state in ``CODEX_HOME`` (``env`` in the
            config, else the process's, else ``~/.codex`` — the person's own
            login and sessions).
        request_timeout: bound on every primitive's wait.
        spawn: how the runtime is started (a recording or replay in tests).

    Raises:
        ProviderRuntimeError: no codex binary can be found.
    """

    kind = "codex"

    def __init__(
        self,
        config: ProviderConfig,
        *,
        home: Path,
        request_timeout: float | None = 30.0,
        spawn: Spawn = spawn_process,
    ) -> None:
        self.name = config.name
        self.config = config
        self.home = Path(home)
        self.capabilities = config.capabilities or Capabilities()
        self.request_timeout = request_timeout
        self.spawn = spawn
        env = {**os.environ, **config.env}
        #: agentd's MCP tool in this instance's sessions (SPEC F9); None: not configured
        self.agentd_tool: AgentdTool | None = None
        self.binary = find_binary(config.binary, env)
        self.executable, self._launcher_env = native_binary(self.binary)

    def images_refused(self) -> str | None:
        """Codex takes images in a turn's input (``localImage``: a file it reads)."""
        return None

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self._launcher_env)
        env.update(self.config.env)
        if "CODEX_HOME" not in env:
            env["CODEX_HOME"] = str(Path(env.get("HOME") or Path.home()) / ".codex")
        return env

    def command(self, session_id: str | None = None) -> list[str]:
        """``codex app-server``, with agentd's MCP tool configured for ``session_id``."""
        tool: list[str] = []
        if self.agentd_tool is not None and session_id is not None:
            tool = self.agentd_tool.codex_args(session_id, preapproved=self.config.agentd_tool == "allow")
        return [*self.config.wrapper, str(self.executable), "app-server", *tool, *self.config.args]

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "binary": str(self.binary)}

    async def probe(self) -> dict[str, Any]:
        """``codex --version`` (the native binary's), bounded by PROBE_TIMEOUT."""
        info = await CODEX.probe(self.executable, env=self.environment(), timeout=PROBE_TIMEOUT)
        return {"binary": str(self.binary), **info}

    async def open(self, *, session_id: str, emit: EventSink,
                   task_status: trio.TaskStatus[ProviderConnection] = trio.TASK_STATUS_IGNORED) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        stderr = StderrLog(self.home)
        stderr.mark()
        env = self.environment()
        if self.agentd_tool is not None:
            env.update(self.agentd_tool.codex_env(session_id))  # the token its bearer_token_env_var names
        process = await self.spawn(self.command(session_id), env=env, cwd=None, stderr_path=stderr.path)
        connection = CodexConnection(self, process, emit)
        failure: ProviderRuntimeError | None = None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection._serve_output)
                try:
                    await connection._initialize()
                except ProviderRuntimeError as exc:
                    # Raised below, outside this nursery: the caller gets the
                    # error itself, not an exception group around it.
                    failure = ProviderRuntimeError(
                        f"codex app-server did not start: {exc}{_quoted(stderr)}", code=exc.code,
                    )
                    failure.__cause__ = exc
                    nursery.cancel_scope.cancel()
                else:
                    task_status.started(connection)
                    await process.wait()
        finally:
            await stop_process(process, polite=connection._polite_stop)
            connection._exit_status = exit_status(process.returncode)
            with trio.CancelScope(shield=True):
                # Anything the runtime left behind (a launcher's child) gets end of input.
                try:
                    await process.stdin.aclose()
                except Exception:  # noqa: BLE001 - already closed
                    pass
        if failure is not None:
            raise failure


def _quoted(stderr: StderrLog) -> str:
    """What codex said on stderr before failing, for an error message (a
    fatal error starts with ``Error``; the log lines before it are noise)."""
    tail = stderr.tail(2000, start_at="Error")
    return f" (stderr: {tail})" if tail else ""


def _clip(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_DETAIL_TEXT:
        return value[:MAX_DETAIL_TEXT] + f"… [{len(value) - MAX_DETAIL_TEXT} more characters]"
    return value


def item_detail(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _clip(v) for k, v in item.items() if k not in ("id", "type") and v is not None}


def item_title(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind == "commandExecution":
        return str(item.get("command") or "command")
    if kind == "fileChange":
        paths = [str(c.get("path", "")) for c in item.get("changes") or [] if isinstance(c, dict)]
        return "edit " + ", ".join(paths) if paths else "file change"
    if kind == "mcpToolCall":
        return f"{item.get('server', '')}.{item.get('tool', '')}"
    if kind in ("dynamicToolCall", "collabAgentToolCall"):
        return str(item.get("tool") or kind)
    if kind == "webSearch":
        return f"search: {item.get('query', '')}"
    return str(kind)


def normalize_questions(params: ToolRequestUserInputParams) -> list[dict[str, Any]]:
    """Codex questions as agentd's ``[{id, question, options}]`` (options are
    labels; the descriptions ride along in ``optionDetails``)."""
    out = []
    for q in params.questions:
        entry: dict[str, Any] = {"id": q.id, "question": q.question, "header": q.header}
        if q.options:
            entry["options"] = [o.label for o in q.options]
            entry["optionDetails"] = [{"label": o.label, "description": o.description} for o in q.options]
        if q.is_other:
            entry["allowOther"] = True
        if q.is_secret:
            entry["secret"] = True
        out.append(entry)
    return out


def _answer_list(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, dict) and isinstance(value.get("answers"), list):
        return [str(v) for v in value["answers"]]
    return [str(value)]


def approval_decisions(method: str, params: dict[str, Any]) -> list[str]:
    """The app's decisions a Codex approval takes. ``acceptForSession`` is
    Codex's own session-scoped approval cache (``acceptForSession`` /
    ``approved_for_session``, a permissions grant with ``scope: session``),
    offered unless a command approval's ``availableDecisions`` leaves it out
    (0.171 sends that list and, for a command it can amend an exec policy for,
    omits it); an MCP elicitation has no such choice."""
    if method == MCP_ELICITATION_METHOD:
        return ["accept", "decline"]
    available = params.get("availableDecisions")
    if method == "item/commandExecution/requestApproval" and isinstance(available, list) and "acceptForSession" not in available:
        return ["accept", "decline"]
    return ["accept", "acceptForSession", "decline"]


def approval_response(method: str, params: dict[str, Any], response: dict[str, Any]) -> _Wire:
    """The app's ``{"decision": "accept"|"acceptForSession"|"decline"}`` as
    ``method``'s response shape."""
    decision = response.get("decision")
    if decision not in approval_decisions(method, params):
        raise ProviderRuntimeError(f"this approval takes decision {', '.join(approval_decisions(method, params))}, "
                                   f"not {decision!r}")
    accept = decision != "decline"
    if method in ("item/commandExecution/requestApproval",):
        return CommandExecutionRequestApprovalResponse(decision=str(decision))
    if method == "item/fileChange/requestApproval":
        return FileChangeRequestApprovalResponse(decision=str(decision))
    if method == "item/permissions/requestApproval":
        # Granting is echoing what was asked for; an empty grant declines.
        scope = "session" if decision == "acceptForSession" else "turn"
        return PermissionsRequestApprovalResponse(permissions=dict(params.get("permissions") or {}) if accept else {}, scope=scope)
    if method in ("execCommandApproval", "applyPatchApproval"):
        approved = "approved_for_session" if decision == "acceptForSession" else "approved"
        return ReviewDecisionResponse(decision=approved if accept else {"denied": {"rejection": "declined in agentd"}})
    if method == MCP_ELICITATION_METHOD:
        return McpElicitationResponse(action="accept", content={}) if accept else McpElicitationResponse(action="decline")
    raise ProviderRuntimeError(f"agentd cannot answer {method}")


def user_input_response(response: dict[str, Any]) -> ToolRequestUserInputResponse:
    answers = response.get("answers")
    if not isinstance(answers, dict):
        raise ProviderRuntimeError("a user-input answer needs answers: {questionId: answer}")
    return ToolRequestUserInputResponse(
        answers={str(k): ToolRequestUserInputAnswer(answers=_answer_list(v)) for k, v in answers.items()}
    )


class _PendingRequest(msgspec.Struct):
    request_id: Any
    method: str
    params: dict[str, Any]


class CodexConnection(ProviderConnection):
    """One live ``codex app-server`` process."""

    def __init__(self, adapter: CodexAdapter, process: ProcessLike, emit: EventSink) -> None:
        self.adapter = adapter
        self.capabilities = adapter.capabilities
        self._loaded_threads: set[str] = set()
        self.user_agent: str | None = None
        self._process = process
        self._emit = emit
        self._exit_status: tuple[int | None, int | None] = (None, None)
        #: native thread id -> attempt id of its running turn
        self._attempts: dict[str, str] = {}
        #: native thread id -> model codex uses for it (plan mode needs it)
        self._models: dict[str, str] = {}
        #: native thread -> its ``historyMode`` as Codex reported it
        self._history_modes: dict[str, str | None] = {}
        #: request ref -> the runtime's request waiting on the user
        self._requests: dict[str, _PendingRequest] = {}
        #: agent message item id -> text streamed so far (to fill in unstreamed text)
        self._streamed: dict[str, int] = {}
        #: turn id -> latest diff (one ``turn_diff`` node per turn)
        self._diffs: dict[str, str] = {}
        #: turn id -> last error the runtime reported for it
        self._errors: dict[str, str] = {}
        #: warnings already reported in this session
        self._warned: set[str] = set()
        #: native thread id -> its usage total as last reported (a report's increment is its growth)
        self._usage_totals: dict[str, TokenUsageBreakdown] = {}
        self._peer = JsonLinesPeer(
            process.stdin,
            process.stdout,
            on_notification=self._on_notification,
            on_request=self._on_request,
            request_timeout=adapter.request_timeout,
        )

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def loaded_threads(self) -> set[str]:
        return self._loaded_threads

    @property
    def exit_status(self) -> tuple[int | None, int | None]:
        return self._exit_status

    async def _serve_output(self) -> None:
        await self._peer.run()

    async def _initialize(self) -> None:
        params = InitializeParams(
            client_info=ClientInfo(name=CLIENT_NAME, version=CLIENT_VERSION),
            capabilities=InitializeCapabilities(experimental_api=True, opt_out_notification_methods=OPT_OUT_NOTIFICATIONS),
        )
        result = _decode(InitializeResponse, await self._peer.request("initialize", _encode(params)), "initialize answer")
        self.user_agent = result.user_agent
        version = parse_version(result.user_agent or "")
        self.runtime_version = ".".join(map(str, version)) if version else None
        await self._peer.notify("initialized", {})

    async def _polite_stop(self) -> None:
        # End of input is app-server's polite stop (it exits 0).
        await self._process.stdin.aclose()

    # -- primitives ---------------------------------------------------------------

    def history_mode(self, native_thread_id: str) -> str | None:
        return self._history_modes.get(native_thread_id)

    async def create_thread(self, *, cwd: str, mcp_servers: Sequence[McpServerSpec] = ()) -> str:
        params = ThreadStartParams(cwd=cwd, model=self.adapter.config.model,
                                   config=extra_mcp.codex_config(mcp_servers) or None)
        result = _decode(ThreadStartResponse, await self._peer.request("thread/start", _encode(params)), "thread/start answer")
        self._loaded_threads.add(result.thread.id)
        self._models[result.thread.id] = result.model
        self._history_modes[result.thread.id] = result.thread.history_mode
        return result.thread.id

    async def resume_thread(self, native_thread_id: str, *, cwd: str, mcp_servers: Sequence[McpServerSpec] = ()) -> ResumeInfo:
        params = ThreadResumeParams(thread_id=native_thread_id, cwd=cwd, model=self.adapter.config.model, exclude_turns=True,
                                    config=extra_mcp.codex_config(mcp_servers) or None)
        try:
            raw = await self._peer.request("thread/resume", _encode(params))
        except ProviderRuntimeError as exc:
            if exc.code is not None and _MISSING_THREAD.search(str(exc)):
                raise NativeThreadMissing(str(exc), code=exc.code) from exc
            raise
        result = _decode(ThreadResumeResponse, raw, "thread/resume answer")
        self._loaded_threads.add(native_thread_id)
        self._models[native_thread_id] = result.model
        self._history_modes[native_thread_id] = result.thread.history_mode
        turns = await self._turns(native_thread_id, items_view="notLoaded")
        return ResumeInfo(native_thread_id=native_thread_id, turn_count=len(turns))

    async def start_turn(
        self, native_thread_id: str, *, text: str, attempt_id: str, cwd: str, context: str | None = None,
        images: Sequence[ImageInput] = (),
    ) -> str:
        collaboration = None
        stripped = text.lstrip()
        if stripped == PLAN_PREFIX or stripped.startswith(PLAN_PREFIX + " ") or stripped.startswith(PLAN_PREFIX + "\n"):
            text = stripped[len(PLAN_PREFIX):].lstrip() or text
            model = self._models.get(native_thread_id) or self.adapter.config.model or ""
            collaboration = CollaborationMode(mode="plan", settings=CollaborationSettings(model=model))
        inputs: list[TextUserInput | LocalImageUserInput] = [TextUserInput(text=context)] if context else []
        inputs.append(TextUserInput(text=text))
        # The message's images as the files agentd keeps them (issue 26): Codex reads them itself.
        inputs += [LocalImageUserInput(path=image.path) for image in images]
        params = TurnStartParams(thread_id=native_thread_id, input=inputs, cwd=cwd, collaboration_mode=collaboration)
        # Registered before the request: turn/started may come before the answer.
        self._attempts[native_thread_id] = attempt_id
        try:
            raw = await self._peer.request("turn/start", _encode(params))
        except ProviderRuntimeError:
            if self._attempts.get(native_thread_id) == attempt_id:
                del self._attempts[native_thread_id]
            raise
        return _decode(TurnStartResponse, raw, "turn/start answer").turn.id

    async def interrupt_turn(self, native_thread_id: str, native_turn_id: str) -> None:
        await self._peer.request("turn/interrupt", _encode(TurnInterruptParams(thread_id=native_thread_id, turn_id=native_turn_id)))

    async def steer_turn(self, native_thread_id: str, native_turn_id: str, *, text: str,
                         images: Sequence[ImageInput] = ()) -> None:
        inputs: list[TextUserInput | LocalImageUserInput] = [TextUserInput(text=text)]
        inputs += [LocalImageUserInput(path=image.path) for image in images]
        params = TurnSteerParams(thread_id=native_thread_id, expected_turn_id=native_turn_id, input=inputs)
        _decode(TurnSteerResponse, await self._peer.request("turn/steer", _encode(params)), "turn/steer answer")

    async def fork_thread(self, native_thread_id: str, *, last_turn_id: str | None,
                          mcp_servers: Sequence[McpServerSpec] = (), cwd: str | None = None) -> str:
        """``thread/fork`` with ``lastTurnId`` (inclusive). Where the runtime
        cannot fork at a turn — it refuses ``lastTurnId``, or its fork holds
        turns after that one (a runtime that ignores the field) — the fork is
        of the whole thread and the later turns are reverted (``thread/revert``
        on the fork, never on the source: SPEC F6). A fork that lacks the turn,
        or whose later turns cannot be reverted, is an explicit failure."""
        try:
            fork = await self._fork(native_thread_id, last_turn_id, mcp_servers)
        except ProviderRuntimeError as exc:
            if last_turn_id is None or exc.code is None or _MISSING_THREAD.search(str(exc)):
                raise
            log.info("codex refused thread/fork at turn %s (%s): forking the whole thread and reverting", last_turn_id, exc)
            fork = await self._fork(native_thread_id, None, mcp_servers)
        if last_turn_id is not None:
            await self._revert_after(fork, last_turn_id)
        return fork

    async def _fork(self, native_thread_id: str, last_turn_id: str | None, mcp_servers: Sequence[McpServerSpec] = ()) -> str:
        params = ThreadForkParams(thread_id=native_thread_id, last_turn_id=last_turn_id, exclude_turns=True,
                                  config=extra_mcp.codex_config(mcp_servers) or None)
        result = _decode(ThreadForkResponse, await self._peer.request("thread/fork", _encode(params)), "thread/fork answer")
        self._loaded_threads.add(result.thread.id)
        self._history_modes[result.thread.id] = result.thread.history_mode
        return result.thread.id

    async def _revert_after(self, fork: str, last_turn_id: str) -> None:
        """Make the fresh fork ``fork`` end at ``last_turn_id``: revert the
        turns after it, if it has any (a fork keeps its source's turn ids)."""
        ids = [turn.id for turn in await self._turns(fork, items_view="notLoaded")]
        if last_turn_id not in ids:
            raise ProviderRuntimeError(
                f"cannot fork after turn {last_turn_id}: the fork of the thread does not hold that turn ({len(ids)} turns)"
            )
        keep = ids[: ids.index(last_turn_id) + 1]
        if keep == ids:
            return
        later = len(ids) - len(keep)
        try:
            await self.rollback_thread(fork, before_turn_id=ids[len(keep)])
            left = [turn.id for turn in await self._turns(fork, items_view="notLoaded")]
        except ProviderRuntimeError as exc:
            raise ProviderRuntimeError(
                f"cannot fork after turn {last_turn_id}: reverting the fork's {later} later turn(s) failed: {exc}"
            ) from exc
        if left != keep:
            raise ProviderRuntimeError(
                f"cannot fork after turn {last_turn_id}: after reverting {later} later turn(s) the fork holds "
                f"{len(left)} turns, not {len(keep)}"
            )

    async def _turns(self, native_thread_id: str, *, items_view: str) -> list[Turn]:
        turns: list[Turn] = []
        cursor = None
        while True:
            params = ThreadTurnsListParams(
                thread_id=native_thread_id, cursor=cursor, limit=100, sort_direction="asc", items_view=items_view,
            )
            page = _decode(ThreadTurnsListResponse, await self._peer.request("thread/turns/list", _encode(params)), "thread/turns/list answer")
            turns.extend(page.data)
            if not page.next_cursor or not page.data:
                return turns
            cursor = page.next_cursor

    async def list_turns(self, native_thread_id: str) -> list[dict[str, Any]]:
        """The thread's turns, oldest first: ``{turnId, status, input, output}``."""
        out = []
        for turn in await self._turns(native_thread_id, items_view="summary"):
            inputs = [
                "\n".join(str(c.get("text", "")) for c in item.get("content") or [] if isinstance(c, dict))
                for item in turn.items if item.get("type") == "userMessage"
            ]
            outputs = [str(item.get("text", "")) for item in turn.items if item.get("type") == "agentMessage"]
            out.append({"turnId": turn.id, "status": turn.status, "input": "\n".join(inputs), "output": "\n".join(outputs)})
        return out

    async def rollback_thread(self, native_thread_id: str, *, before_turn_id: str) -> None:
        await self._peer.request("thread/revert", _encode(ThreadRevertParams(thread_id=native_thread_id, before_turn_id=before_turn_id)))

    async def answer_request(self, request_ref: str, response: dict[str, Any]) -> None:
        pending = self._requests.get(request_ref)
        if pending is None:
            raise ProviderRuntimeError(f"request {request_ref} is not waiting in this session")
        if pending.method == USER_INPUT_METHOD:
            answer: _Wire = user_input_response(response)
        else:
            answer = approval_response(pending.method, pending.params, response)
        del self._requests[request_ref]
        await self._peer.respond(pending.request_id, _encode(answer))

    async def stop(self, *, grace: float = 2.0) -> None:
        await stop_process(self._process, polite=self._polite_stop, grace=grace)

    # -- server requests --------------------------------------------------------------------

    async def _on_request(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        try:
            opened = self._request_event(method, params)
        except ProviderRuntimeError as exc:
            await self._peer.respond_error(request_id, -32602, str(exc))
            return
        if opened is None:
            # Never leave the runtime waiting on an answer that cannot come.
            await self._peer.respond_error(request_id, -32601, f"agentd does not handle {method}")
            return
        ref = str(request_id)
        self._requests[ref] = _PendingRequest(request_id, method, params)
        opened.request_ref = ref
        # The request gets an item of its own, under the item it is about (a
        # command's approval hangs under the command), so the app's request
        # node never stands in for — or hides — that item.
        about = opened.item_id
        opened.item_id = f"request:{ref}"
        kind = "approval" if opened.kind == "approval" else "user_input_request"
        title = "approval" if kind == "approval" else "question"
        await self._emit(ItemStarted(
            attempt_id=opened.attempt_id, item_id=opened.item_id, item_type=kind, parent_item_id=about,
            title=title, detail=opened.detail,
        ))
        await self._emit(opened)

    def _request_event(self, method: str, params: dict[str, Any]) -> RequestOpened | None:
        if method == USER_INPUT_METHOD:
            asked = _decode(ToolRequestUserInputParams, params, method)
            return RequestOpened(
                attempt_id=self._attempts.get(asked.thread_id), request_ref="", kind="user_input", item_id=asked.item_id,
                detail={"method": method, "questions": normalize_questions(asked)},
            )
        kind = APPROVAL_METHODS.get(method)
        if kind is None:
            return None
        if method == MCP_ELICITATION_METHOD:
            # Only a form is a question the person can answer with yes or no
            # (a URL or device verification is not agentd's to complete).
            if params.get("mode") not in MCP_APPROVAL_MODES:
                return None
            form = {"method": method, "kind": kind, "server": params.get("serverName"), "message": params.get("message")}
            return RequestOpened(
                attempt_id=self._attempts.get(str(params.get("threadId"))), request_ref="", kind="approval", item_id=None,
                detail={k: v for k, v in form.items() if v is not None}, decisions=approval_decisions(method, params),
            )
        detail: dict[str, Any] = {"method": method, "kind": kind}
        if method == "item/commandExecution/requestApproval":
            command = _decode(CommandExecutionRequestApprovalParams, params, method)
            thread_id, item_id = command.thread_id, command.item_id
            detail.update(command=command.command, cwd=command.cwd, reason=command.reason)
            if params.get("availableDecisions") is not None:
                detail["availableDecisions"] = params["availableDecisions"]
        elif method == "item/fileChange/requestApproval":
            change = _decode(FileChangeRequestApprovalParams, params, method)
            thread_id, item_id = change.thread_id, change.item_id
            detail.update(reason=change.reason, grantRoot=change.grant_root)
        elif method == "item/permissions/requestApproval":
            permissions = _decode(PermissionsRequestApprovalParams, params, method)
            thread_id, item_id = permissions.thread_id, permissions.item_id
            detail.update(cwd=permissions.cwd, permissions=permissions.permissions, reason=permissions.reason)
        elif method == "execCommandApproval":
            legacy_command = _decode(ExecCommandApprovalParams, params, method)
            thread_id, item_id = legacy_command.conversation_id, legacy_command.call_id
            detail.update(command=" ".join(legacy_command.command), cwd=legacy_command.cwd, reason=legacy_command.reason)
        else:  # applyPatchApproval
            patch = _decode(ApplyPatchApprovalParams, params, method)
            thread_id, item_id = patch.conversation_id, patch.call_id
            detail.update(files=sorted(patch.file_changes), reason=patch.reason)
        detail = {k: v for k, v in detail.items() if v is not None}
        return RequestOpened(
            attempt_id=self._attempts.get(thread_id), request_ref="", kind="approval", item_id=item_id, detail=detail,
            decisions=approval_decisions(method, params),
        )

    # -- notifications ------------------------------------------------------------------------

    async def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        handler = self._handlers.get(method)
        if handler is None:
            log.debug("codex notification %s ignored", method)
            return
        try:
            await handler(self, params)
        except ProviderRuntimeError as exc:
            log.warning("%s", exc)

    async def _item_started(self, params: dict[str, Any]) -> None:
        note = _decode(ItemNotification, params, "item/started")
        item = note.item
        kind = ITEM_TYPES.get(str(item.get("type")), "tool")
        if kind is None or "id" not in item:
            return
        attempt_id = self._attempts.get(note.thread_id)
        if kind == "agent_message":
            self._streamed[item["id"]] = 0
        await self._emit(ItemStarted(
            attempt_id=attempt_id, item_id=item["id"], item_type=kind, title=item_title(item), detail=item_detail(item),
        ))

    async def _item_completed(self, params: dict[str, Any]) -> None:
        note = _decode(ItemNotification, params, "item/completed")
        item = note.item
        kind = ITEM_TYPES.get(str(item.get("type")), "tool")
        if kind is None or "id" not in item:
            return
        attempt_id = self._attempts.get(note.thread_id)
        if kind == "agent_message":
            # Text that came without deltas still reaches the message.
            text = str(item.get("text") or "")
            streamed = self._streamed.pop(item["id"], 0)
            if len(text) > streamed:
                await self._emit(TextDelta(attempt_id=attempt_id, item_id=item["id"], delta=text[streamed:]))
        status = ITEM_STATUSES.get(str(item.get("status", "completed")), "completed")
        # Assistant text says whether it is narration or the answer (``phase``; absent: unknown).
        phase = message_phase(item.get("phase")) if kind == "agent_message" else None
        await self._emit(ItemCompleted(attempt_id=attempt_id, item_id=item["id"], item_type=kind, status=status,
                                       detail=item_detail(item), phase=phase))

    async def _agent_message_delta(self, params: dict[str, Any]) -> None:
        note = _decode(AgentMessageDeltaNotification, params, "item/agentMessage/delta")
        self._streamed[note.item_id] = self._streamed.get(note.item_id, 0) + len(note.delta)
        await self._emit(TextDelta(attempt_id=self._attempts.get(note.thread_id), item_id=note.item_id, delta=note.delta))

    async def _turn_started(self, params: dict[str, Any]) -> None:
        note = _decode(TurnNotification, params, "turn/started")
        await self._emit(TurnStarted(attempt_id=self._attempts.get(note.thread_id), native_turn_id=note.turn.id))

    async def _turn_completed(self, params: dict[str, Any]) -> None:
        note = _decode(TurnNotification, params, "turn/completed")
        turn = note.turn
        attempt_id = self._attempts.get(note.thread_id)
        status = turn.status if turn.status in ("completed", "failed", "interrupted") else "failed"
        if turn.id in self._diffs:
            diff = self._diffs.pop(turn.id)
            await self._emit(ItemCompleted(
                attempt_id=attempt_id, item_id=f"diff:{turn.id}", item_type="turn_diff",
                status="completed" if status == "completed" else status, detail={"diff": _clip(diff)},
            ))
        error = turn.error.message if turn.error is not None else self._errors.get(turn.id)
        self._errors.pop(turn.id, None)
        self._attempts.pop(note.thread_id, None)
        await self._emit(TurnCompleted(attempt_id=attempt_id, native_turn_id=turn.id, status=status, error=error))

    async def _plan_updated(self, params: dict[str, Any]) -> None:
        note = _decode(TurnPlanUpdatedNotification, params, "turn/plan/updated")
        plan = [{"step": s.step, "status": s.status} for s in note.plan]
        await self._emit(PlanUpdated(attempt_id=self._attempts.get(note.thread_id), plan=plan))

    async def _diff_updated(self, params: dict[str, Any]) -> None:
        """No normalized event carries a turn's diff: it becomes one
        ``turn_diff`` node per turn, started at the first diff and completed
        with the latest one when the turn ends."""
        note = _decode(TurnDiffUpdatedNotification, params, "turn/diff/updated")
        first = note.turn_id not in self._diffs
        self._diffs[note.turn_id] = note.diff
        if first:
            await self._emit(ItemStarted(
                attempt_id=self._attempts.get(note.thread_id), item_id=f"diff:{note.turn_id}", item_type="turn_diff",
                title="diff of the turn", detail={"diff": _clip(note.diff)},
            ))

    async def _error(self, params: dict[str, Any]) -> None:
        note = _decode(ErrorNotification, params, "error")
        if note.will_retry:
            await self._emit(RuntimeWarning_(attempt_id=self._attempts.get(note.thread_id), message=f"codex will retry: {note.error.message}"))
        else:
            self._errors[note.turn_id] = note.error.message

    async def _warning(self, params: dict[str, Any]) -> None:
        note = _decode(WarningNotification, params, "warning")
        # Codex repeats some warnings every turn (an unknown model's
        # metadata): each is recorded once per session, not once per turn.
        if note.message in self._warned:
            log.debug("codex warning repeated: %s", note.message)
            return
        self._warned.add(note.message)
        attempt_id = self._attempts.get(note.thread_id) if note.thread_id else None
        await self._emit(RuntimeWarning_(attempt_id=attempt_id, message=note.message))

    async def _config_warning(self, params: dict[str, Any]) -> None:
        summary = params.get("summary")
        if summary:
            await self._emit(RuntimeWarning_(message=f"codex configuration: {summary}"))

    async def _deprecation(self, params: dict[str, Any]) -> None:
        log.info("codex deprecation notice: %s", params.get("summary"))

    async def _token_usage(self, params: dict[str, Any]) -> None:
        """Codex reports the thread's usage total (and its last call's): the
        increment is what the total grew by since the last report this
        process saw — a repeated report adds nothing — or, for the first,
        the last call's usage (the total also holds turns of earlier processes)."""
        note = _decode(ThreadTokenUsageUpdatedNotification, params, "thread/tokenUsage/updated")
        total, previous = note.token_usage.total, self._usage_totals.get(note.thread_id)
        self._usage_totals[note.thread_id] = total
        if previous is None:
            grown = note.token_usage.last
        else:
            grown = TokenUsageBreakdown(**{
                name: max(0, getattr(total, name) - getattr(previous, name)) for name in TokenUsageBreakdown.__struct_fields__
            })
        await self._emit(Usage(
            attempt_id=self._attempts.get(note.thread_id), input_tokens=grown.input_tokens,
            cached_input_tokens=grown.cached_input_tokens, output_tokens=grown.output_tokens,
            reasoning_tokens=grown.reasoning_output_tokens,
            model=self._models.get(note.thread_id) or self.adapter.config.model,
        ))

    async def _request_resolved(self, params: dict[str, Any]) -> None:
        note = _decode(ServerRequestResolvedNotification, params, "serverRequest/resolved")
        # Answered by us, or settled by codex itself (the turn ended): either
        # way nothing waits on this request any more.
        self._requests.pop(str(note.request_id), None)

    _handlers = {
        "item/started": _item_started,
        "item/completed": _item_completed,
        "item/agentMessage/delta": _agent_message_delta,
        "turn/started": _turn_started,
        "turn/completed": _turn_completed,
        "turn/plan/updated": _plan_updated,
        "turn/diff/updated": _diff_updated,
        "error": _error,
        "warning": _warning,
        "configWarning": _config_warning,
        "deprecationNotice": _deprecation,
        "serverRequest/resolved": _request_resolved,
        "thread/tokenUsage/updated": _token_usage,
    }

"""``agentd acp``: agentd as the ACP agent of an editor (Zed, JetBrains, Neovim…).

The editor starts ``agentd acp`` and speaks the Agent Client Protocol (JSON-RPC
over stdio, protocol version 1) to it; this process translates to the
daemon's socket (protocol/README.md, "agentd acp" has the whole mapping).
Every ACP session *is* an agentd thread — the session id is the thread id —
so a conversation started in the editor is durable, outlives the editor and
the daemon, and can be opened from the CLI, the console or another editor.

The ACP side is the official Python SDK (``agent-client-protocol``, asyncio):
it owns the wire format, validation and the method table, so this module
only implements the agent's methods. The daemon side is
``acp_daemon_client`` (asyncio, no trio); event → update mapping is the pure
``acp_translate``.

Per session one *pump* follows the thread's events (``events.subscribe``
from the point the session was opened) and sends them on as updates; a
prompt sends its message and waits for its run's end, which the pump sees.
Approvals and questions of the thread's runs become
``session/request_permission`` to the editor.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import logging
import os
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import acp_sdk  # noqa: F401 - first: the SDK without its docstring pass
from acp import PROTOCOL_VERSION, RequestError, run_agent
from acp.schema import (
    AgentCapabilities,
    AvailableCommand,
    AvailableCommandInput,
    AvailableCommandsUpdate,
    ClientCapabilities,
    ConfigOptionUpdate,
    CurrentModeUpdate,
    ElicitationFormSessionMode,
    ElicitationSchema,
    ElicitationStringPropertySchema,
    ForkSessionResponse,
    Implementation,
    InitializeResponse,
    ListSessionsResponse,
    LoadSessionResponse,
    McpCapabilities,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionForkCapabilities,
    SessionInfo,
    SessionListCapabilities,
    SessionMode,
    SessionModeState,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    ToolCallUpdate,
    UnstructuredCommandInput,
)

from agentd import __version__
from agentd.actors.regular_files import read_regular
from agentd.protocol.errors import AgentdError
from agentd.protocol.wire import MAX_ATTACHMENT_BYTES

from . import acp_translate as tr
from .acp_daemon_client import DaemonClient, Subscription, ensure_daemon

log = logging.getLogger("agentd.acp")

#: the slash commands offered in ``available_commands_update``: name → (description, input hint)
COMMANDS = {
    "fork": ("fork this thread into a new session (from the latest completed run, or RUN)", "[run]"),
    "rollback": ("take the thread back to after run N: files and the agent's memory (asks first)", "N"),
    "checkpoints": ("list the workspace checkpoints of this thread", None),
    "diff": ("show what the latest run (or RUN) changed, from its checkpoint", "[run]"),
    "switch": ("move the thread to another provider instance (a context handoff)", "PROVIDER"),
    "merge-back": ("bring what fork FORK did home with a message", "FORK [message]"),
    "retry": ("retry the latest run after it failed or was interrupted", None),
    "stop": ("the Stop button: interrupt the run and hold what is queued", None),
}
#: the id of the one config option: the provider instance (as the session modes)
CONFIG_PROVIDER = "provider"
#: the options of an approval
APPROVAL_OPTIONS = [
    PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once"),
    PermissionOption(option_id="allow_always", name="Allow always (this session)", kind="allow_always"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
]


def acp_error(exc: AgentdError) -> RequestError:
    """An agentd error as the ACP error the editor gets: agentd's code, sentence and data."""
    return RequestError(exc.code, exc.message, {"kind": exc.kind, **exc.data})


def bad_session(session_id: str, why: str) -> RequestError:
    return RequestError(-32602, why, {"kind": "invalid_params", "field": "sessionId", "sessionId": session_id})


def iso(timestamp: Any) -> str | None:
    if not isinstance(timestamp, (int, float)):
        return None
    return datetime.fromtimestamp(timestamp, timezone.utc).isoformat()


def editor_servers(servers: Any) -> list[dict[str, Any]]:
    """The editor's stdio and http MCP servers as ``thread.create`` /
    ``thread.update {mcpServers}`` take them (others: a line on stderr)."""
    given, left = tr.mcp_servers(servers)
    if left:
        log.warning("MCP servers %s are neither stdio nor http: not passed on", ", ".join(left))
    return given


def said_renamed(answer: dict[str, Any]) -> None:
    """A line on stderr per server the daemon keeps under another name."""
    for name, kept in (answer.get("renamed") or {}).items():
        log.warning("the editor's MCP server %r is %r for the agents (agentd's own tool is 'agentd')", name, kept)


@dataclass
class Session:
    """One ACP session this process has open: an agentd thread."""

    id: str
    cwd: str
    provider: str
    translator: tr.EventTranslator
    #: the seq the pump follows from
    last_seq: int = 0
    pump: asyncio.Task[None] | None = None
    subscription: Subscription | None = None
    closed: bool = False
    #: prompts waiting on a run's end, by run id
    waiters: dict[str, list[asyncio.Future[dict[str, Any]]]] = field(default_factory=dict)
    #: runs seen ending (a prompt may learn its run id after its end arrived)
    ended: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: runs this session's prompts started that have not ended
    active: set[str] = field(default_factory=set)
    #: approvals the editor allowed always (by what they approve)
    allow_always: set[str] = field(default_factory=set)
    #: the provider the next message moves the thread to (a mode change)
    switch_to: str | None = None
    #: the thread's run that is going (any client's): a prompt steers it
    running: str | None = None
    #: a question waiting for the next prompt: (request id, answers so far, free-text question ids)
    question: tuple[str, dict[str, Any], list[str]] | None = None

    @property
    def current_provider(self) -> str:
        """The provider the next message runs on (the mode and config option show it)."""
        return self.switch_to or self.provider


class AgentdAcp:
    """The ACP agent: each method is the SDK's, each session an agentd thread."""

    def __init__(self, data_dir: Path, socket: Path) -> None:
        self.data_dir = data_dir
        self.socket = socket
        self.client: Any = None  # the SDK's connection to the editor
        self.client_capabilities: ClientCapabilities | None = None
        self._daemon: DaemonClient | None = None
        self._connecting = asyncio.Lock()
        self.sessions: dict[str, Session] = {}
        self._providers: list[dict[str, Any]] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: the daemon's data dir, as it says (its messages' images are files there)
        self._data_dir: str | None = None

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    def read_image(self, thread_id: str, attachment: dict[str, Any]) -> str | None:
        """A message's image as base64, from the file the daemon keeps
        (``<data-dir>/attachments/<threadId>/<sha256>``); None where it cannot."""
        sha = str(attachment.get("sha256") or "")
        if not self._data_dir or not thread_id or "/" in thread_id or thread_id.startswith(".") or len(sha) != 64 or not all(c in "0123456789abcdef" for c in sha):
            return None
        try:
            # Not through a symlink put in the file's place (the daemon's own file only), nor a
            # FIFO (its open would wait, and this event loop with it), nor more than an image's cap.
            data = read_regular(Path(self._data_dir) / "attachments" / thread_id / sha, limit=MAX_ATTACHMENT_BYTES)
        except OSError:
            return None
        if len(data) > MAX_ATTACHMENT_BYTES:
            return None
        return base64.b64encode(data).decode("ascii")

    # -- the daemon ------------------------------------------------------------------------

    async def daemon(self) -> DaemonClient:
        """The connection to the daemon: made (or the daemon started) when
        there is none, e.g. after the daemon restarted."""
        if self._daemon is not None and not self._daemon.closed:
            return self._daemon
        async with self._connecting:
            if self._daemon is None or self._daemon.closed:
                try:
                    self._daemon = await ensure_daemon(self.data_dir, self.socket)
                except OSError as exc:
                    raise RequestError(-32603, f"cannot reach agentd at {self.socket}: {exc.strerror or exc}",
                                       {"kind": "connection_lost"}) from None
                except AgentdError as exc:
                    raise acp_error(exc) from None
                self._providers = None
        return self._daemon

    async def call(self, method: str, **params: Any) -> Any:
        """A daemon call; its error is the editor's ACP error."""
        daemon = await self.daemon()
        try:
            return await daemon.call(method, **params)
        except AgentdError as exc:
            raise acp_error(exc) from None

    async def providers(self) -> list[dict[str, Any]]:
        if self._providers is None:
            self._providers = (await self.call("providers.list"))["providers"]
        return self._providers

    async def modes(self, current: str) -> SessionModeState:
        """The provider instances as session modes: switching one is a provider switch."""
        modes = []
        for p in await self.providers():
            note = "" if p.get("usable", True) else f" — not usable here: {p.get('why') or 'unknown'}"
            modes.append(SessionMode(id=p["name"], name=p["name"], description=f"agentd provider ({p['kind']}){note}"))
        return SessionModeState(current_mode_id=current, available_modes=modes)

    async def config_options(self, current: str) -> list[Any]:
        """The session's config options: one, ``provider``, whose values are
        the provider instances (as the modes are; either one switches)."""
        choices = [SessionConfigSelectOption(value=p["name"], name=p["name"],
                                             description=f"agentd provider ({p['kind']})"
                                             + ("" if p.get("usable", True) else f" — not usable here: {p.get('why') or 'unknown'}"))
                   for p in await self.providers()]
        return [SessionConfigOptionSelect(type="select", id=CONFIG_PROVIDER, name="Provider", category="model",
                                          description="the agentd provider instance the next message runs on "
                                                      "(a switch hands the thread's context over)",
                                          current_value=current, options=choices)]

    async def can_steer(self, provider: str) -> bool:
        return any(p["name"] == provider and p.get("capabilities", {}).get("steer") for p in await self.providers())

    # -- sessions ----------------------------------------------------------------------------

    def session(self, session_id: str) -> Session:
        """An open session (else the ACP error an unknown or closed one gets)."""
        session = self.sessions.get(session_id)
        if session is None:
            raise bad_session(session_id, f"no open session {session_id}; session/new, session/load or "
                                          "session/resume it first")
        if session.closed:
            raise bad_session(session_id, f"session {session_id} was closed; session/load or session/resume it again")
        return session

    async def open_session(self, thread_id: str, *, replay: bool = False) -> Session:
        """Open a session on the thread: with ``replay`` its history is sent
        first (``session/load``); then its pump follows the thread's events
        from the seq read *before* the thread was, so nothing in between is
        missed (what was replayed is not sent twice). Requests that wait on
        the person are asked again (``thread.requests``)."""
        status = await self.call("daemon.status")
        after, self._data_dir = status["lastSeq"], status.get("dataDir") or self._data_dir
        got = await self.call("thread.get", threadId=thread_id)
        thread = got["thread"]
        old = self.sessions.get(thread["id"])
        if old is not None and not old.closed:
            # Opened again (an editor reloading it): the same session goes on, its prompts still waiting.
            if replay:
                await self.replay(old, got)
            return old
        session = Session(id=thread["id"], cwd=thread.get("workspace") or "", provider=thread.get("provider") or "",
                          translator=tr.EventTranslator(workspace=thread.get("workspace"), read_image=self.read_image),
                          last_seq=after,
                          running=thread.get("activeRunId"))
        self.sessions[session.id] = session
        if replay:
            await self.replay(session, got)
        await self.start_pump(session)
        self.spawn(self.send_commands(session))
        if thread.get("status") == "waiting":
            self.spawn(self.ask_pending(session))
        return session

    async def replay(self, session: Session, got: dict[str, Any]) -> None:
        """The thread's history (``thread.get``'s answer and each run's ``run.get``) as updates."""
        runs = [await self.call("run.get", runId=run["id"]) for run in got["runs"]]
        for update in tr.history_updates(got, runs, got["thread"].get("workspace"), self.read_image):
            await self.update(session, update)
        session.translator.mark_seen(got, runs)

    async def ask_pending(self, session: Session) -> None:
        """The approvals and questions that already wait, asked as they would have been live."""
        try:
            pending = (await self.call("thread.requests", threadId=session.id))["requests"]
        except RequestError:
            return
        for request in pending:
            if request["kind"] == "approval":
                self.spawn(self.ask_approval(session, request, {}))
            else:
                self.spawn(self.ask_questions(session, request))

    async def detach(self, session: Session) -> None:
        """Stop following the thread (its subscription ends at the daemon too:
        a connection holds at most 64)."""
        session.closed = True
        if session.pump is not None:
            session.pump.cancel()
            with contextlib.suppress(BaseException):
                await session.pump
        if session.subscription is not None:
            await session.subscription.close()
            session.subscription = None
        self.end_waiters(session, None)

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        """A background task's unexpected error is one log line (never a
        traceback asyncio prints when the task is collected)."""
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            log.warning("a background step failed: %s: %s", type(error).__name__, error)

    async def update(self, session: Session, update: Any) -> None:
        with contextlib.suppress(ConnectionError):
            await self.client.session_update(session_id=session.id, update=update)

    async def say(self, session: Session, text: str) -> None:
        await self.update(session, tr.text_chunk(text))

    async def send_commands(self, session: Session) -> None:
        commands = [AvailableCommand(name=name, description=text,
                                     input=AvailableCommandInput(root=UnstructuredCommandInput(hint=hint)) if hint else None)
                    for name, (text, hint) in COMMANDS.items()]
        await self.update(session, AvailableCommandsUpdate(session_update="available_commands_update",
                                                           available_commands=commands))

    # -- the pump: a thread's events as updates ----------------------------------------------

    async def start_pump(self, session: Session) -> None:
        """Subscribe before returning (no event after this point is missed), then follow."""
        daemon = await self.daemon()
        try:
            subscription = await daemon.subscribe(thread_id=session.id, after_seq=session.last_seq)
        except AgentdError as exc:
            raise acp_error(exc) from None
        session.subscription = subscription
        session.pump = asyncio.get_running_loop().create_task(self._pump(session, daemon, subscription))

    async def _pump(self, session: Session, daemon: DaemonClient, subscription: Any) -> None:
        while True:
            async for event in subscription:
                try:
                    await self.on_event(session, event)
                except Exception as exc:  # noqa: BLE001 - one odd event must not stop the session's updates
                    log.warning("event %s of %s not passed on: %s: %s", event.get("seq"), session.id,
                                type(exc).__name__, exc)
                session.last_seq = subscription.last_seq
            if subscription.resync_after is None or daemon.closed:
                break
            # Cut off for falling behind: take it up again where it stopped, as the protocol says.
            session.last_seq = subscription.resync_after
            try:
                subscription = session.subscription = await daemon.subscribe(thread_id=session.id,
                                                                             after_seq=session.last_seq)
            except AgentdError:
                break
        session.pump = session.subscription = None
        if not session.closed:
            await self.on_lost(session)

    async def on_lost(self, session: Session) -> None:
        """The daemon went away. If it is back at once (its parts restarted),
        the pump takes up the events where it stopped — a run cut by a
        restart then ends ``interrupted`` (``daemon_restart``) in the replay.
        Otherwise the prompts waiting end ``cancelled`` and say so; the next
        request connects again (or starts a daemon)."""
        try:
            async with self._connecting:
                if self._daemon is None or self._daemon.closed:
                    self._daemon = await DaemonClient.connect(self.socket)  # never starts one here: see above
            await self.start_pump(session)
            return
        except (OSError, RequestError):
            pass
        if session.waiters:
            await self.say(session, "\n\n[agentd: the connection to the agentd daemon was lost: it stopped or "
                                    "restarted, and the run with it; nothing re-runs by itself — send the prompt "
                                    "again, or /retry, once it is back]")
        self.end_waiters(session, {"status": "interrupted", "reason": "connection_lost"})

    def end_waiters(self, session: Session, run: dict[str, Any] | None) -> None:
        for futures in session.waiters.values():
            for future in futures:
                if not future.done():
                    future.set_result(run or {"status": "cancelled", "reason": "session closed"})
        session.waiters.clear()
        session.active.clear()

    async def on_event(self, session: Session, event: dict[str, Any]) -> None:
        kind = event.get("type", "")
        payload = event.get("payload") or {}
        for update in session.translator.updates(event):
            await self.update(session, update)
        if kind == "approval.requested":
            self.spawn(self.ask_approval(session, payload["request"], payload.get("node") or {}))
        elif kind == "user_input.requested":
            self.spawn(self.ask_questions(session, payload["request"]))
        elif kind in ("user_input.resolved", "user_input.not_resumable") and session.question is not None:
            if session.question[0] == (payload.get("request") or {}).get("id"):
                session.question = None  # answered elsewhere (the CLI, another editor), or gone
        elif kind == "checkpoint.captured" and (payload.get("checkpoint") or {}).get("kind") == "run":
            nodes = session.translator.file_changes.pop(event.get("runId") or "", {})
            if nodes:
                self.spawn(self.send_diffs(session, payload["checkpoint"], nodes))
        elif kind.startswith("run.") and isinstance(payload.get("run"), dict):
            run = payload["run"]
            if run.get("status") in ("running", "waiting"):
                session.running = run["id"]
            if run.get("status") in tr.TERMINAL_RUN:
                if session.running == run["id"]:
                    session.running = None
                session.active.discard(run["id"])
                session.ended[run["id"]] = run
                while len(session.ended) > 256:
                    session.ended.pop(next(iter(session.ended)))
                for future in session.waiters.pop(run["id"], []):
                    if not future.done():
                        future.set_result(run)

    async def send_diffs(self, session: Session, checkpoint: dict[str, Any], nodes: dict[str, dict[str, Any]]) -> None:
        """The diff content of the run's file changes, from its checkpoint."""
        try:
            diff = await self.call("checkpoint.diff", checkpointId=checkpoint["id"])
        except RequestError:
            return
        for update in tr.diff_updates(diff.get("patch") or "", nodes, checkpoint.get("workspace") or session.cwd):
            await self.update(session, update)

    # -- approvals and questions ------------------------------------------------------------

    async def ask_approval(self, session: Session, request: dict[str, Any], node: dict[str, Any]) -> None:
        detail = request.get("detail") or {}
        key = str(detail.get("tool") or detail.get("kind") or "approval")
        if key in session.allow_always:
            decision = "accept"
        else:
            tool_call = ToolCallUpdate(tool_call_id=node.get("id") or request["id"], title=tr.tool_title(node or
                                       {"kind": "approval", "detail": detail}), kind=tr.tool_kind(node or {"kind": "approval", "detail": detail}),  # type: ignore[arg-type]
                                       status="pending", content=tr.node_content(node) if node else None,
                                       raw_input=detail)
            try:
                answer = await self.client.request_permission(session_id=session.id, tool_call=tool_call,
                                                              options=APPROVAL_OPTIONS)
            except (ConnectionError, RequestError) as exc:
                log.warning("agentd acp: the permission request for %s failed: %s", request["id"], exc)
                return
            outcome = answer.outcome
            if getattr(outcome, "outcome", None) != "selected":
                return  # cancelled (the prompt was): the run is being interrupted, the request stays as it is
            decision = "accept" if outcome.option_id in ("allow_once", "allow_always") else "decline"
            if outcome.option_id == "allow_always":
                # The provider's own "allow for the session" where it offers
                # one; else agentd acp remembers it for this session itself.
                if "acceptForSession" in (request.get("decisions") or []):
                    decision = "acceptForSession"
                else:
                    session.allow_always.add(key)
        with contextlib.suppress(RequestError):  # answered meanwhile elsewhere (the CLI, the console)
            await self.call("approval.respond", requestId=request["id"], decision=decision)

    def can_elicit(self) -> bool:
        """The editor takes ACP form elicitations (``clientCapabilities.elicitation.form``)."""
        elicitation = getattr(self.client_capabilities, "elicitation", None)
        return getattr(elicitation, "form", None) is not None

    async def elicit(self, session: Session, request: dict[str, Any]) -> None:
        """A run's questions as one ACP form: a string field per question (its
        options as the field's ``enum`` unless it takes other answers too)."""
        questions = (request.get("detail") or {}).get("questions") or []
        properties: dict[str, Any] = {}
        for question in questions:
            options = [str(o) for o in question.get("options") or []]
            closed = bool(options) and not question.get("allowOther")
            properties[question["id"]] = ElicitationStringPropertySchema(
                type="string", title=str(question.get("question") or question["id"]), enum=options if closed else None,
                description=None if closed or not options else "e.g. " + ", ".join(options))
        schema = ElicitationSchema(type="object", properties=properties, required=list(properties))
        mode = ElicitationFormSessionMode(session_id=session.id, tool_call_id=request.get("nodeId"),
                                          requested_schema=schema)
        message = "; ".join(str(q.get("question") or q["id"]) for q in questions) or "The agent asks"
        try:
            answer = await self.client.create_elicitation(message=message, mode=mode)
        except (ConnectionError, RequestError) as exc:
            log.warning("the elicitation for %s failed: %s", request["id"], exc)
            return
        if getattr(answer, "action", None) != "accept":
            await self.say(session, f"\n\n[agentd: the question is still open: `agentd requests {session.id}` "
                                    "shows how to answer it]\n")
            return
        with contextlib.suppress(RequestError):
            await self.call("user-input.respond", requestId=request["id"], answers=dict(answer.content or {}))

    async def ask_questions(self, session: Session, request: dict[str, Any]) -> None:
        """As an ACP form where the editor takes one (``elicit``); else each
        question with options as a permission request (one option per
        choice), and free-text ones answered by the next prompt."""
        if self.can_elicit():
            await self.elicit(session, request)
            return
        answers: dict[str, Any] = {}
        free: list[str] = []
        for question in (request.get("detail") or {}).get("questions") or []:
            options = question.get("options") or []
            if not options:
                free.append(question["id"])
                continue
            choices = [PermissionOption(option_id=f"choice:{i}", name=str(o), kind="allow_once")
                       for i, o in enumerate(options)]
            tool_call = ToolCallUpdate(tool_call_id=request.get("nodeId") or request["id"],
                                       title=str(question.get("question") or question["id"]), kind="other",
                                       status="pending")
            try:
                answer = await self.client.request_permission(session_id=session.id, tool_call=tool_call,
                                                              options=choices)
            except (ConnectionError, RequestError):
                return
            if getattr(answer.outcome, "outcome", None) != "selected":
                return
            answers[question["id"]] = options[int(answer.outcome.option_id.split(":", 1)[1])]
        if free:
            session.question = (request["id"], answers, free)
            asked = "\n".join(f"- {q.get('question') or q['id']}" for q in request["detail"]["questions"]
                              if q["id"] in free)
            await self.say(session, f"\n\n[agentd: the agent asks (answer with your next prompt"
                                    f"{', one line per question' if len(free) > 1 else ''}):\n{asked}]\n")
            return
        with contextlib.suppress(RequestError):
            await self.call("user-input.respond", requestId=request["id"], answers=answers)

    # -- ACP methods -----------------------------------------------------------------------------

    async def initialize(self, protocol_version: int, client_capabilities: ClientCapabilities | None = None,
                         client_info: Any = None, **kwargs: Any) -> InitializeResponse:
        self.client_capabilities = client_capabilities
        return InitializeResponse(
            protocol_version=min(protocol_version, PROTOCOL_VERSION),
            agent_capabilities=AgentCapabilities(
                load_session=True,
                # Images go on to providers that take them; a message with images to
                # one that does not is refused (unsupported) saying why.
                prompt_capabilities=PromptCapabilities(image=True, audio=False, embedded_context=True),
                # The editor's stdio and http MCP servers go on to the thread's provider sessions.
                mcp_capabilities=McpCapabilities(http=True, sse=False),
                session_capabilities=SessionCapabilities(
                    list=SessionListCapabilities(), resume=SessionResumeCapabilities(),
                    close=SessionCloseCapabilities(), fork=SessionForkCapabilities()),
            ),
            agent_info=Implementation(name="agentd", title="agentd", version=__version__),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> None:
        return None

    async def give_mcp_servers(self, thread_id: str, servers: Any) -> None:
        """The editor's MCP servers kept on the thread (``thread.update``), for
        its provider sessions; None (not sent) leaves the thread's as they are."""
        if servers is None:
            return
        updated = await self.call("thread.update", threadId=thread_id, mcpServers=editor_servers(servers))
        said_renamed(updated)

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> NewSessionResponse:
        # The editor's servers come with the thread, in one call: a refused
        # one refuses the session and no thread is made (issue 26).
        given = {"mcpServers": editor_servers(mcp_servers)} if mcp_servers else {}
        created = await self.call("thread.create", workspace=cwd, **given)
        said_renamed(created)
        session = await self.open_session(created["threadId"])
        return NewSessionResponse(session_id=session.id, modes=await self.modes(session.provider),
                                  config_options=await self.config_options(session.provider))

    async def load_session(self, cwd: str, session_id: str, mcp_servers: Any = None,
                           **kwargs: Any) -> LoadSessionResponse:
        """Replays the thread's history as updates, then follows it; nothing runs (seed 003)."""
        await self.give_mcp_servers(session_id, mcp_servers)
        session = await self.open_session(session_id, replay=True)
        return LoadSessionResponse(modes=await self.modes(session.current_provider),
                                   config_options=await self.config_options(session.current_provider))

    async def resume_session(self, cwd: str, session_id: str, mcp_servers: Any = None,
                             **kwargs: Any) -> ResumeSessionResponse:
        await self.give_mcp_servers(session_id, mcp_servers)
        session = await self.open_session(session_id)
        return ResumeSessionResponse(modes=await self.modes(session.current_provider),
                                     config_options=await self.config_options(session.current_provider))

    async def list_sessions(self, cwd: str | None = None, cursor: str | None = None, **kwargs: Any) -> ListSessionsResponse:
        params: dict[str, Any] = {"limit": 200}
        if cursor:
            params["before"] = cursor
        page = await self.call("thread.list", **params)
        # Threads in a folder of agentd's own (made without a workspace) are no editor's project: not listed.
        sessions = [SessionInfo(session_id=t["id"], cwd=t["workspace"], title=t.get("title") or None,
                                updated_at=iso(t.get("updatedAt")))
                    for t in page["threads"]
                    if not t.get("corrupt") and t.get("workspace")
                    and (cwd is None or t["workspace"].rstrip("/") == cwd.rstrip("/"))]
        return ListSessionsResponse(sessions=sessions, next_cursor=page.get("next"))

    async def close_session(self, session_id: str, **kwargs: Any) -> None:
        session = self.session(session_id)
        await self.cancel(session_id)
        await self.detach(session)
        return None

    async def fork_session(self, session_id: str, cwd: str, mcp_servers: Any = None,
                           **kwargs: Any) -> ForkSessionResponse:
        source = self.sessions.get(session_id)
        params: dict[str, Any] = {"threadId": session_id}
        if source is not None and cwd and cwd.rstrip("/") != source.cwd.rstrip("/"):
            params["workspace"] = cwd
        forked = await self.call("thread.fork", **params)
        await self.give_mcp_servers(forked["threadId"], mcp_servers)
        session = await self.open_session(forked["threadId"])
        return ForkSessionResponse(session_id=session.id, modes=await self.modes(session.provider),
                                   config_options=await self.config_options(session.provider))

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> SetSessionModeResponse:
        session = self.session(session_id)
        await self.switch(session, mode_id)
        return SetSessionModeResponse()

    async def set_config_option(self, config_id: str, session_id: str, value: str | bool,
                                **kwargs: Any) -> SetSessionConfigOptionResponse:
        """``provider`` is the one option: as ``session/set_mode``."""
        session = self.session(session_id)
        if config_id != CONFIG_PROVIDER:
            raise RequestError(-32602, f"no config option {config_id!r}; agentd has one, {CONFIG_PROVIDER!r}",
                               {"kind": "invalid_params", "field": "configId"})
        if not isinstance(value, str):
            raise RequestError(-32602, "the provider option takes a provider instance's name",
                               {"kind": "invalid_params", "field": "value"})
        await self.switch(session, value, field="value")
        return SetSessionConfigOptionResponse(config_options=await self.config_options(session.current_provider))

    async def switch(self, session: Session, provider: str, field: str = "modeId") -> None:
        """The next message runs on ``provider`` (a switch, when it is not the
        thread's); the editor hears it as the mode and the config option."""
        if provider not in [p["name"] for p in await self.providers()]:
            raise RequestError(-32602, f"no provider instance {provider!r}; the session's modes list them",
                               {"kind": "invalid_params", "field": field})
        session.switch_to = None if provider == session.provider else provider
        await self.update(session, CurrentModeUpdate(session_update="current_mode_update", current_mode_id=provider))
        await self.update(session, ConfigOptionUpdate(session_update="config_option_update",
                                                      config_options=await self.config_options(provider)))

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        """Interrupt the runs this session's prompts started (a queued one is cancelled)."""
        session = self.sessions.get(session_id)
        if session is None:
            return
        for run_id in list(session.active):
            try:
                await self.call("run.interrupt", runId=run_id)
            except RequestError:
                with contextlib.suppress(RequestError):
                    await self.call("queued-run.cancel", runId=run_id)

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self.session(session_id)
        text = tr.prompt_text(prompt)
        attachments = tr.prompt_images(prompt)
        if not text.strip() and attachments:
            text = "[an image]" if len(attachments) == 1 else f"[{len(attachments)} images]"
        if not text.strip():
            raise RequestError(-32602, "the prompt has no text agentd can pass on", {"kind": "invalid_params",
                                                                                       "field": "prompt"})
        if session.pump is None:
            await self.start_pump(session)  # the daemon was away: follow it again
        if session.question is not None:
            return await self.answer_question(session, text)
        if text.startswith("/"):
            name, _, rest = text[1:].partition(" ")
            if name in COMMANDS:
                return await self.command(session, name, rest.strip())
        params: dict[str, Any] = {"threadId": session.id, "text": text}
        if attachments:
            params["attachments"] = attachments
        if session.switch_to:
            params["provider"] = session.switch_to
        target = session.running
        if target is not None and await self.can_steer(session.switch_to or session.provider):
            params["dispatchMode"] = {"type": "steer_active", "targetRunId": target}
        session.translator.sending.append(text)
        try:
            sent = await self.call("thread.message.send", **params)
        except RequestError as exc:
            if "dispatchMode" not in params or (exc.data or {}).get("kind") != "invalid_state":
                raise
            del params["dispatchMode"]  # the run ended meanwhile: a plain message then
            sent = await self.call("thread.message.send", **params)
        finally:
            session.translator.sending.remove(text)
        if session.switch_to:
            session.provider, session.switch_to = session.switch_to, None
        return await self.wait_run(session, sent["runId"])

    async def wait_run(self, session: Session, run_id: str) -> PromptResponse:
        """Wait for the run's end; the prompt's answer."""
        session.translator.own_runs.add(run_id)
        run = session.ended.get(run_id)
        if run is None:
            session.active.add(run_id)
            future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
            session.waiters.setdefault(run_id, []).append(future)
            run = await future
        stop, why = tr.stop_reason(run)
        if why:
            await self.say(session, why)
        return PromptResponse(stop_reason=stop)  # type: ignore[arg-type]

    async def answer_question(self, session: Session, text: str) -> PromptResponse:
        assert session.question is not None
        request_id, answers, free = session.question
        session.question = None
        lines = text.splitlines() if len(free) > 1 else [text]
        answers = {**answers, **{qid: (lines[i] if i < len(lines) else "") for i, qid in enumerate(free)}}
        await self.call("user-input.respond", requestId=request_id, answers=answers)
        run_id = next(iter(session.active), None)
        if run_id is None:
            return PromptResponse(stop_reason="end_turn")
        return await self.wait_run(session, run_id)

    # -- slash commands ----------------------------------------------------------------------

    async def latest_run(self, session: Session) -> dict[str, Any] | None:
        runs = (await self.call("thread.get", threadId=session.id))["runs"]
        return runs[-1] if runs else None

    async def command(self, session: Session, name: str, rest: str) -> PromptResponse:
        """A slash command: one socket method, its outcome as a message."""
        if name == "fork":
            params: dict[str, Any] = {"threadId": session.id}
            if rest:
                params["sourcePoint"] = {"type": "run", "runId": rest}
            forked = await self.call("thread.fork", **params)
            await self.say(session, f"Forked as session {forked['threadId']} (a thread of its own; open it with "
                                    f"session/load, or `agentd send {forked['threadId']} …`).")
        elif name == "rollback":
            return await self.rollback(session, rest)
        elif name == "checkpoints":
            listed = (await self.call("checkpoint.list", threadId=session.id))["checkpoints"]
            lines = [f"- {c['id']} {c['kind']} after run {c['ordinal']}: {c['status']}, "
                     f"{(c.get('summary') or {}).get('filesChanged', 0)} files changed" for c in listed]
            await self.say(session, "Checkpoints:\n" + "\n".join(lines) if lines else "No checkpoints yet.")
        elif name == "diff":
            run = (await self.call("run.get", runId=rest))["run"] if rest else await self.latest_run(session)
            if run is None or not run.get("checkpointId"):
                await self.say(session, "No checkpoint to diff (no run has ended with one).")
            else:
                diff = await self.call("checkpoint.diff", checkpointId=run["checkpointId"])
                await self.say(session, f"```diff\n{diff.get('patch') or ''}\n```" if diff.get("patch")
                               else f"Run {run['ordinal']} changed no file.")
        elif name == "switch":
            await self.switch(session, rest)
            await self.say(session, f"The next message runs on {rest} (with a context handoff)."
                           if session.switch_to else f"The thread is on {rest} already.")
        elif name == "merge-back":
            fork, _, message = rest.partition(" ")
            text = message or f"Fork {fork} is merged back: take in what it did."
            session.translator.sending.append(text)
            try:
                sent = await self.call("thread.message.send", threadId=session.id, mergeBack={"forkThreadId": fork},
                                       text=text)
            finally:
                session.translator.sending.remove(text)
            return await self.wait_run(session, sent["runId"])
        elif name == "retry":
            run = await self.latest_run(session)
            if run is None:
                await self.say(session, "No run to retry.")
            else:
                session.ended.pop(run["id"], None)  # the same run ends again
                retried = await self.call("run.retry", runId=run["id"])
                return await self.wait_run(session, retried["runId"])
        elif name == "stop":
            stopped = await self.call("thread.stop", threadId=session.id)
            await self.say(session, f"Stopped (interrupting {stopped['interruptedRunId']}); queued runs are held."
                           if stopped.get("interruptedRunId") else "Nothing was running; queued runs are held.")
        return PromptResponse(stop_reason="end_turn")

    async def rollback(self, session: Session, rest: str) -> PromptResponse:
        if not rest.isdigit():
            await self.say(session, "Usage: /rollback N (the run to go back to; 0: before the first run).")
            return PromptResponse(stop_reason="end_turn")
        tool_call = ToolCallUpdate(tool_call_id=f"rollback-{session.id}-{rest}", kind="edit", status="pending",
                                   title=f"roll the thread back to after run {rest}: files and the agent's memory")
        options = [PermissionOption(option_id="rollback", name=f"Roll back to run {rest}", kind="allow_once"),
                   PermissionOption(option_id="keep", name="Keep everything", kind="reject_once")]
        answer = await self.client.request_permission(session_id=session.id, tool_call=tool_call, options=options)
        if getattr(answer.outcome, "outcome", None) != "selected" or answer.outcome.option_id != "rollback":
            await self.say(session, "Not rolled back.")
            return PromptResponse(stop_reason="end_turn")
        done = await self.call("rollback.toRun", threadId=session.id, targetOrdinal=int(rest))
        await self.say(session, f"Rolled back to after run {rest}: {len(done['rolledBackRunIds'])} runs undone, "
                                f"{len(done['restoredFiles'])} files restored (memory: {done['providerRollback']}). "
                                f"`agentd restore {done['safetyCheckpointId']}` undoes the file changes.")
        return PromptResponse(stop_reason="end_turn")

    async def aclose(self) -> None:
        for session in list(self.sessions.values()):
            await self.detach(session)
        for task in list(self._tasks):
            task.cancel()
        if self._daemon is not None:
            await self._daemon.aclose()


class OneLine(logging.Formatter):
    """Log records as one line each: never a traceback on the editor's stderr."""

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return ""

    def format(self, record: logging.LogRecord) -> str:
        record.exc_text = ""
        text = super().format(record)
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
        return text.replace("\n", " ")


def cmd_acp(args: argparse.Namespace) -> int:
    """``agentd acp``: serve ACP on stdin/stdout until the editor closes it."""
    import os
    import stat

    from .common import CliError, paths

    for name, stream in (("stdin", sys.stdin), ("stdout", sys.stdout)):
        mode = os.fstat(stream.fileno()).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
            # asyncio's pipe transports take nothing else; an editor always gives pipes.
            raise CliError(f"agentd acp speaks ACP on its stdin and stdout, and its {name} is a regular file: "
                           "an editor starts it with pipes (see the README's \"Editors\")")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLine("agentd acp: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    where = paths(args)
    asyncio.run(_serve(where.data_dir, where.socket))
    return 0


async def _serve(data_dir: Path, socket: Path) -> None:
    agent = AgentdAcp(data_dir, socket)
    try:
        await run_agent(agent, use_unstable_protocol=True)  # type: ignore[arg-type]
    finally:
        await agent.aclose()

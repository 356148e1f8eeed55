"""One live ACP agent process and agentd's primitives on it.

The adapter (``acp.py``) starts the process and hands it here; this module
speaks the protocol (``acp_rpc``) from agentd's side: the primitives —
sessions (new, load, resume, fork), turns (prompt, steer, cancel) — as ACP
requests, and the agent's ``session/update`` notifications through one
``TurnMapper`` per session (``acp_updates``). What the agent asks agentd in
return (permissions, questions, files, terminals) is answered by
``acp_client``. The mapping is listed in ``acp.py`` and
``protocol/README.md`` ("ACP providers").
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from . import extra_mcp
from .agentd_tool import relay_command
from .acp_client import AgentRequests
from .acp_rpc import AUTH_REQUIRED, AcpError, AcpPeer
from .acp_session import AgentInstance, KnownSession, Session, Turn, decode, encode as _encode, turn_usage
from .acp_updates import TurnMapper
from .acp_wire import (
    CancelNotification,
    ClientCapabilities,
    ElicitationCapabilities,
    EnvVariable,
    FileSystemCapability,
    ForkSessionRequest,
    Implementation,
    InitializeRequest,
    InitializeResponse,
    LoadSessionRequest,
    McpServerStdio,
    NewSessionRequest,
    NewSessionResponse,
    PROTOCOL_VERSION,
    PromptRequest,
    PromptResponse,
    ResumeSessionRequest,
    SessionNotification,
    SetSessionConfigOptionRequest,
    SetSessionModelRequest,
    SetSessionModeRequest,
    SteeringRequest,
    SteeringResponse,
    ImageContent,
    TextContent,
)
from .base import (
    EventSink,
    NativeThreadMissing,
    ProviderConnection,
    ProviderRuntimeError,
    ResumeInfo,
    RuntimeWarning_,
    TurnCompleted,
    TurnStarted,
)
from .guard import watch_spawned
from .jsonl import stop_process
from .procinfo import children_of, process_start_ticks
from .tool_credentials import CREDENTIAL_ENV, SERVER_NAME
from .transport import ProcessLike

if TYPE_CHECKING:
    from .extra_mcp import McpServerSpec

    from .images import ImageInput

__all__ = ["AcpConnection", "KnownSession", "turn_usage"]

log = logging.getLogger(__name__)

CLIENT_NAME = "agentd"
CLIENT_VERSION = "0.1.0"
#: ``stopReason`` -> the turn's status (the others are ``completed``, with the reason said)
STOP_STATUSES = {"end_turn": "completed", "cancelled": "interrupted"}


class AcpConnection(ProviderConnection):
    """One ACP agent process and its primitives."""

    def __init__(self, adapter: AgentInstance, process: ProcessLike, emit: EventSink, nursery: trio.Nursery, agentd_session: str) -> None:
        self.adapter = adapter
        self.capabilities = adapter.capabilities
        self._process = process
        self._emit = emit
        self._nursery = nursery
        self._agentd_session = agentd_session
        self._sessions: dict[str, Session] = {}
        #: whether the processes it started before its first prompt are guarded (``_guard_own_children``)
        self._own_children_guarded = False
        self._exit_status: tuple[int | None, int | None] = (None, None)
        self.initialized: InitializeResponse | None = None
        self._peer = AcpPeer(process.stdin, process.stdout, on_request=self._on_request,
                             on_notification=self._on_notification, on_violation=self._on_violation,
                             request_timeout=adapter.request_timeout)
        #: what the agent asks agentd (permissions, questions, files, terminals)
        self._requests = AgentRequests(adapter, self._peer, emit, nursery, self._sessions)

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def loaded_threads(self) -> set[str]:
        return set(self._sessions)

    @property
    def exit_status(self) -> tuple[int | None, int | None]:
        return self._exit_status

    # -- the process ---------------------------------------------------------------------------

    async def serve(self) -> None:
        """Read the agent until its output ends; then nothing it started stays."""
        try:
            await self._peer.run()
            # Its output ended (or it broke the protocol): it has nothing more to say.
            await stop_process(self._process, grace=2.0)
        finally:
            self._requests.close()

    async def initialize(self) -> InitializeResponse:
        params = InitializeRequest(
            protocol_version=PROTOCOL_VERSION,
            client_capabilities=ClientCapabilities(fs=FileSystemCapability(read_text_file=True, write_text_file=True), terminal=True,
                                                   elicitation=ElicitationCapabilities(form={})),
            client_info=Implementation(name=CLIENT_NAME, version=CLIENT_VERSION, title="agentd"),
        )
        result = decode(InitializeResponse, await self._peer.request("initialize", _encode(params)), "initialize answer")
        self.initialized = result
        if result.agent_info is not None:
            self.runtime_version = result.agent_info.version or None
        return result

    async def polite_stop(self) -> None:
        # ACP has no shutdown request: end of input is the polite stop.
        await self._process.stdin.aclose()

    async def stop(self, *, grace: float = 2.0) -> None:
        await stop_process(self._process, polite=self.polite_stop, grace=grace)

    def ended(self, status: tuple[int | None, int | None]) -> None:
        self._exit_status = status

    # -- sessions ------------------------------------------------------------------------------

    def _mcp_servers(self, extra: Sequence[McpServerSpec] = ()) -> list[Any]:
        """agentd's own tool, then the thread's other servers (an editor's;
        issue 26): ``http`` ones only where the agent said ``mcpCapabilities.http``."""
        http = bool(self.initialized and self.initialized.agent_capabilities.mcp_capabilities.get("http"))
        others, left = extra_mcp.acp_servers(extra, http=http)
        if left:
            log.warning("ACP agent %s takes no http MCP servers: %s not passed on", self.adapter.name, ", ".join(left))
        return [*self._own_server(), *others]

    def _own_server(self) -> list[McpServerStdio]:
        tool = self.adapter.agentd_tool
        if tool is None:
            return []
        # ACP's stdio MCP server is the one every agent can start: agentd's
        # relay (``agentd mcp``), which reaches the daemon's endpoint with the
        # session's id and credential file — the token itself is in no argv.
        env = [EnvVariable(name=k, value=v) for k, v in tool.scripted_env(self._agentd_session).items()]
        if not env or CREDENTIAL_ENV not in {e.name for e in env}:
            return []
        command, *args = relay_command()
        return [McpServerStdio(name=SERVER_NAME, command=command, args=args, env=env)]

    def _session(self, session_id: str, cwd: str) -> Session:
        mapper = TurnMapper(self._emit, cwd, self._requests.terminal_output_text)
        session = self._sessions[session_id] = Session(session_id=session_id, cwd=cwd, mapper=mapper)
        self.adapter.known.setdefault(session_id, KnownSession(cwd=cwd)).cwd = cwd
        return session

    def _session_capability(self, name: str) -> bool:
        """Whether the agent advertised ``sessionCapabilities.<name>``."""
        assert self.initialized is not None, "initialize comes first"
        return self.initialized.agent_capabilities.session_capabilities.get(name) is not None

    async def create_thread(self, *, cwd: str, mcp_servers: Sequence[McpServerSpec] = ()) -> str:
        params = NewSessionRequest(cwd=cwd, mcp_servers=self._mcp_servers(mcp_servers))
        try:
            raw = await self._peer.request("session/new", _encode(params))
        except AcpError as exc:
            if exc.code == AUTH_REQUIRED:
                self.adapter.needs_login(str(exc))
            raise
        created = decode(NewSessionResponse, raw, "session/new answer")
        self._session(created.session_id, cwd)
        await self._choose(created.session_id, created)
        return created.session_id

    async def _choose(self, session_id: str, offered: NewSessionResponse) -> None:
        """The config's ``mode`` and ``model``: a session config option of that
        category where the agent has one, else ``session/set_mode`` /
        ``session/set_model`` (unstable) where it offers modes / models."""
        config = self.adapter.config
        for category, wanted in (("mode", config.mode), ("model", config.model)):
            if not wanted:
                continue
            option = next((o for o in offered.config_options or [] if o.get("category") == category and o.get("id")), None)
            if option is not None:
                params: msgspec.Struct = SetSessionConfigOptionRequest(session_id=session_id, config_id=str(option["id"]), value=wanted)
                await self._peer.request("session/set_config_option", _encode(params))
            elif category == "mode" and offered.modes is not None:
                await self._peer.request("session/set_mode", _encode(SetSessionModeRequest(session_id=session_id, mode_id=wanted)))
            elif category == "model" and offered.models is not None:
                await self._peer.request("session/set_model", _encode(SetSessionModelRequest(session_id=session_id, model_id=wanted)))
            else:
                raise ProviderRuntimeError(f"the agent offers no choice of {category}, so {category} = {wanted!r} cannot be set")

    async def resume_thread(self, native_thread_id: str, *, cwd: str, mcp_servers: Sequence[McpServerSpec] = ()) -> ResumeInfo:
        """``session/resume`` where the agent advertises it (no replay), else
        ``session/load``: the history it replays is counted, never reported as new."""
        if native_thread_id in self._sessions:
            return ResumeInfo(native_thread_id=native_thread_id)
        assert self.initialized is not None, "initialize comes first"
        if self._session_capability("resume"):
            return await self._resume(native_thread_id, cwd, mcp_servers)
        if not self.initialized.agent_capabilities.load_session:
            raise NativeThreadMissing("the agent cannot load a session (no loadSession capability)")
        session = self._session(native_thread_id, cwd)
        session.replaying = True
        params = LoadSessionRequest(session_id=native_thread_id, cwd=cwd, mcp_servers=self._mcp_servers(mcp_servers))
        try:
            raw = await self._peer.request("session/load", _encode(params))
        except AcpError as exc:
            del self._sessions[native_thread_id]
            raise NativeThreadMissing(str(exc), code=exc.code) from exc
        except BaseException:
            self._sessions.pop(native_thread_id, None)
            raise
        finally:
            session.replaying = False
        await self._choose(native_thread_id, decode(NewSessionResponse, {**(raw or {}), "sessionId": native_thread_id},
                                                    "session/load answer"))
        self.adapter.known[native_thread_id].turns = session.replayed_turns
        return ResumeInfo(native_thread_id=native_thread_id, turn_count=session.replayed_turns)

    async def _resume(self, native_thread_id: str, cwd: str, mcp_servers: Sequence[McpServerSpec]) -> ResumeInfo:
        """``session/resume``: the agent restores the session without
        replaying it; the turns it holds are the ones this daemon counted."""
        params = ResumeSessionRequest(session_id=native_thread_id, cwd=cwd, mcp_servers=self._mcp_servers(mcp_servers))
        try:
            raw = await self._peer.request("session/resume", _encode(params))
        except AcpError as exc:
            raise NativeThreadMissing(str(exc), code=exc.code) from exc
        self._session(native_thread_id, cwd)
        await self._choose(native_thread_id, decode(NewSessionResponse, {**(raw or {}), "sessionId": native_thread_id},
                                                    "session/resume answer"))
        known = self.adapter.known[native_thread_id]
        return ResumeInfo(native_thread_id=native_thread_id, turn_count=known.turns if known.latest_turn else None)

    async def fork_thread(self, native_thread_id: str, *, last_turn_id: str | None,
                          mcp_servers: Sequence[McpServerSpec] = (), cwd: str | None = None) -> str:
        """``session/fork`` (where advertised): ACP forks a session at its
        end, so only a fork after the session's latest turn (as this daemon
        saw it) is native; the new session works in the source's workspace.

        Raises:
            ProviderRuntimeError: no ``fork`` capability, a fork at an
                earlier turn, a session this daemon has not seen, or the
                agent's error.
        """
        if not self._session_capability("fork"):
            raise ProviderRuntimeError("the agent cannot fork a session (no sessionCapabilities.fork)")
        known = self.adapter.known.get(native_thread_id)
        if known is None:
            # Not seen since the daemon started (a restart): the lineage
            # checked from the store that the fork point is the session's
            # end and that the fork shares its workspace, which is ``cwd``.
            if cwd is None:
                raise ProviderRuntimeError(f"this daemon has not seen session {native_thread_id} (its workspace is unknown)")
            known = KnownSession(cwd=cwd, latest_turn=last_turn_id)
        if last_turn_id is not None and last_turn_id != known.latest_turn:
            raise ProviderRuntimeError(f"ACP's session/fork forks a session at its end, and turn {last_turn_id} is not "
                                       f"the latest of {native_thread_id}")
        params = ForkSessionRequest(session_id=native_thread_id, cwd=known.cwd, mcp_servers=self._mcp_servers(mcp_servers))
        forked = decode(NewSessionResponse, await self._peer.request("session/fork", _encode(params)), "session/fork answer")
        self._session(forked.session_id, known.cwd)
        fork = self.adapter.known[forked.session_id]
        fork.turns, fork.latest_turn = known.turns, known.latest_turn
        await self._choose(forked.session_id, forked)
        return forked.session_id

    # -- turns ---------------------------------------------------------------------------------

    async def start_turn(
        self, native_thread_id: str, *, text: str, attempt_id: str, cwd: str, context: str | None = None,
        images: Sequence[ImageInput] = (),
    ) -> str:
        pictures = await self._pictures(images)
        session = self._sessions.get(native_thread_id)
        if session is None:
            raise ProviderRuntimeError(f"session {native_thread_id} is not loaded in this agent process")
        if session.turn is not None:
            raise ProviderRuntimeError(f"the agent is still running turn {session.turn.native_turn_id}")
        if self._peer.closed:
            raise ProviderRuntimeError(f"cannot start a turn: {self._peer.closed}")
        turn = session.turn = Turn(native_turn_id=f"acp_turn_{uuid.uuid4().hex[:16]}", attempt_id=attempt_id)
        known = self.adapter.known[native_thread_id]
        known.turns, known.latest_turn = known.turns + 1, turn.native_turn_id
        session.mapper.begin(attempt_id)
        await self._emit(TurnStarted(attempt_id=attempt_id, native_turn_id=turn.native_turn_id))
        prompt: list[TextContent | ImageContent] = [TextContent(text=context)] if context else []
        prompt.append(TextContent(text=text))
        prompt += pictures
        if not self._own_children_guarded:
            self._own_children_guarded = True
            # A scan of /proc (hundreds of small reads): off the event loop.
            for child in await trio.to_thread.run_sync(self._own_children):
                watch_spawned(child)
        self._nursery.start_soon(self._prompt, session, turn, PromptRequest(session_id=native_thread_id, prompt=prompt))
        return turn.native_turn_id

    def _own_children(self) -> list[int]:
        """Before this process's first prompt, what it has started is its own
        machinery, never the person's (no turn has run a tool yet): e.g. the
        ``claude`` that claude-agent-acp starts at ``session/new``. The process
        guard is told of those, and kills them with the adapter when the
        daemon dies (F12: the agent's runtime dies with it); what a turn starts
        later (a dev server, a build) is the person's and is left alone, as
        for every runtime (blocking)."""
        pid = self._process.pid
        if pid is None or process_start_ticks(pid) is None:
            return []  # a replayed transport, or gone already
        return children_of(pid)

    async def _pictures(self, images: Sequence[ImageInput]) -> list[ImageContent]:
        """The turn's images as ACP image blocks, only where the agent said it
        takes them (issue 26); the files are read off the loop."""
        if not images:
            return []
        why = self.adapter.images_refused()
        if why is not None:
            raise ProviderRuntimeError(why)
        return await trio.to_thread.run_sync(
            lambda: [ImageContent(data=image.base64(), mime_type=image.mime_type) for image in images])

    async def _prompt(self, session: Session, turn: Turn, params: PromptRequest) -> None:
        """The turn: ``session/prompt`` answers when it ends (with a queued
        steer, when the last of its prompts answers)."""
        try:
            raw = await self._peer.request("session/prompt", _encode(params), unbounded=True)
            answer = decode(PromptResponse, raw, "session/prompt answer")
        except ProviderRuntimeError as exc:
            if exc.code is None and self._peer.closed and not isinstance(exc, AcpError):
                return  # the agent is gone: its exit is the crash path (SPEC F11)
            await self._end_turn(session, turn, None, str(exc))
            return
        if answer.usage:
            session.mapper.usage.update(answer.usage)
            used = turn_usage(answer.usage, turn.attempt_id)
            if used is not None:
                await self._emit(used)
        turn.prompts -= 1
        if turn.prompts > 0 and answer.stop_reason != "cancelled":
            return  # a steer queued behind it runs on in this turn
        await self._end_turn(session, turn, answer.stop_reason, None)

    async def steer_turn(self, native_thread_id: str, native_turn_id: str, *, text: str,
                         images: Sequence[ImageInput] = ()) -> None:
        """The message into the running turn: ``_session/steering`` where the
        agent takes it, else a ``session/prompt`` the agent queues behind
        the running one (the turn ends when both answered).

        Raises:
            ProviderRuntimeError: the turn is not running (any more), or the
                agent steers neither way — agentd then restarts the turn.
        """
        session = self._sessions.get(native_thread_id)
        turn = session.turn if session is not None else None
        if session is None or turn is None or turn.native_turn_id != native_turn_id or turn.ended:
            raise ProviderRuntimeError(f"turn {native_turn_id} is not running")
        assert self.initialized is not None, "initialize comes first"
        prompt: list[TextContent | ImageContent] = [TextContent(text=text), *(await self._pictures(images))]
        if self.initialized.steering():
            raw = await self._peer.request("_session/steering", _encode(SteeringRequest(session_id=native_thread_id, prompt=prompt)))
            outcome = decode(SteeringResponse, raw or {}, "_session/steering answer").outcome
            if outcome != "injected":
                raise ProviderRuntimeError(f"the agent did not take the steer into the turn ({outcome or 'no outcome'})")
        elif self.initialized.prompt_queueing():
            turn.prompts += 1
            self._nursery.start_soon(self._prompt, session, turn, PromptRequest(session_id=native_thread_id, prompt=prompt))
        else:
            raise ProviderRuntimeError("the agent takes no steer (no _session/steering, no prompt queueing)")

    async def _end_turn(self, session: Session, turn: Turn, stop_reason: str | None, error: str | None) -> None:
        if turn.ended:
            return
        turn.ended = True
        await self._requests.cancel_waiting(session)
        await session.mapper.end(stop_reason)
        if session.turn is turn:
            session.turn = None
        if stop_reason is None:
            status = "failed"
        else:
            status = STOP_STATUSES.get(stop_reason, "completed")
            if status == "completed" and stop_reason != "end_turn":
                error = f"the agent ended the turn: {stop_reason}"
                await self._emit(RuntimeWarning_(attempt_id=turn.attempt_id, message=error))
        await self._emit(TurnCompleted(attempt_id=turn.attempt_id, native_turn_id=turn.native_turn_id, status=status, error=error))

    async def interrupt_turn(self, native_thread_id: str, native_turn_id: str) -> None:
        """``session/cancel``: the turn ends when its prompt answers ``cancelled``."""
        session = self._sessions.get(native_thread_id)
        if session is None or session.turn is None or session.turn.native_turn_id != native_turn_id:
            return
        session.turn.interrupt_requested = True
        # The schema: a client that cancels answers its pending permission requests ``cancelled``.
        await self._requests.cancel_waiting(session)
        await self._peer.notify("session/cancel", _encode(CancelNotification(session_id=native_thread_id)))

    # -- the agent's requests ------------------------------------------------------------------

    async def answer_request(self, request_ref: str, response: dict[str, Any]) -> None:
        await self._requests.answer(request_ref, response)

    async def _on_request(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        await self._requests.on_request(request_id, method, params)

    # -- notifications and misbehaviour --------------------------------------------------------

    async def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        if method != "session/update":
            log.debug("ACP notification %s ignored", method)
            return
        try:
            note = decode(SessionNotification, params, "session/update")
        except ProviderRuntimeError as exc:
            log.warning("%s", exc)
            return
        session = self._sessions.get(note.session_id)
        if session is None:
            log.debug("ACP update for session %s, not loaded here, ignored", note.session_id)
        elif session.replaying:
            if session.mapper.replayed(note.update):
                session.replayed_turns += 1
        else:
            await session.mapper.on_update(note.update)

    async def _on_violation(self, why: str) -> None:
        """The agent broke the protocol: its turns fail with the reason and
        the process is ended (the thread's next message gets a fresh one)."""
        log.warning("ACP agent %s: %s", self.adapter.name, why)
        for session in self._sessions.values():
            if session.turn is not None:
                await self._end_turn(session, session.turn, None, f"the ACP agent broke the protocol: {why}")
        try:
            self._process.kill()
        except ProcessLookupError:
            pass

"""The agent's requests to agentd, answered as an ACP client.

An ACP agent asks its client things while a turn runs; agentd answers them
here, for one agent process: ``session/request_permission`` becomes an
approval and ``elicitation/create`` a question (``acp_elicitation``), both
waiting on the person until :meth:`AgentRequests.answer`; ``fs/*`` are
answered inside the session's workspace (``acp_files``) and ``terminal/*``
with supervised processes (``acp_terminals``). Anything else is ``-32601``.
Each request is answered in a task of its own, so a terminal's
``wait_for_exit`` never stops the reading. The connection
(``acp_connection``) owns the sessions this reads.
"""

from __future__ import annotations

import uuid
from typing import Any

import trio

from . import acp_elicitation, acp_files
from .acp_rpc import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, AcpPeer
from .acp_session import AgentInstance, Session, decode, encode as _encode
from .acp_terminals import Terminals
from .acp_wire import (
    CancelledOutcome,
    CreateElicitationRequest,
    CreateElicitationResponse,
    CreateTerminalRequest,
    CreateTerminalResponse,
    PermissionOption,
    ReadTextFileRequest,
    ReadTextFileResponse,
    RequestPermissionRequest,
    RequestPermissionResponse,
    SelectedOutcome,
    TerminalRequest,
    WriteTextFileRequest,
)
from .agentd_tool import TOOLS
from .base import EventSink, ItemStarted, ProviderRuntimeError, RequestOpened
from .tool_credentials import SERVER_NAME

#: the app's decision -> the option kinds that carry it, preferred first
DECISION_KINDS = {
    "accept": ("allow_once", "allow_always"),
    "acceptForSession": ("allow_always",),
    "decline": ("reject_once", "reject_always"),
}


def offered_decisions(options: list[PermissionOption]) -> list[str]:
    """The app's decisions an ACP permission's options carry: ``accept``
    with any allowing option, ``acceptForSession`` with an ``allow_always``
    one, and always ``decline`` (a reject option, else the outcome
    ``cancelled``)."""
    kinds = {o.kind for o in options}
    return [d for d, carriers in DECISION_KINDS.items() if d == "decline" or kinds & set(carriers)]


def _is_agentd_tool(titles: list[str], raw_input: Any) -> bool:
    """Whether a permission asks for one of agentd's own tools (pre-approved
    with ``agentd_tool = "allow"``), by the titles its tool call had —
    claude-agent-acp's ``mcp__agentd__delegate_task``, codex-acp's ``Tool:
    agentd/delegate_task`` (its permission itself is titled "Approve MCP tool
    call") — or by the server its ``rawInput`` names (codex-acp's ``server_name``)."""
    if isinstance(raw_input, dict) and raw_input.get("server_name") == SERVER_NAME:
        return True
    return any(f"{SERVER_NAME}__{tool}" in title or f"{SERVER_NAME}/{tool}" in title or title.strip() == tool
               for title in titles for tool in TOOLS)


class AgentRequests:
    """What one agent process asks agentd, and what waits on the person.

    Args:
        adapter: the provider instance (its config: ``agentd_tool``).
        peer: the agent's JSON-RPC peer (answers go back through it).
        emit: where approvals and questions are reported.
        nursery: where each request is answered.
        sessions: the connection's sessions, by id (read, not owned).
    """

    def __init__(self, adapter: AgentInstance, peer: AcpPeer, emit: EventSink, nursery: trio.Nursery,
                 sessions: dict[str, Session]) -> None:
        self.adapter = adapter
        self._peer = peer
        self._emit = emit
        self._nursery = nursery
        self._sessions = sessions
        self._terminals = Terminals(nursery)
        #: the last output of released terminals (a tool call that showed one reports it at its end)
        self._released: dict[str, str] = {}

    def close(self) -> None:
        """The agent is gone: no terminal it started stays."""
        self._terminals.close()

    # -- dispatch ------------------------------------------------------------------------------

    async def on_request(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        """An agent's request: answered in a task of its own."""
        # Each in a task of its own: a terminal's wait_for_exit must not stop the reading.
        self._nursery.start_soon(self._answer, request_id, method, params)

    async def _answer(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        try:
            if method == "session/request_permission":
                await self._permission(request_id, params)
                return
            if method == "elicitation/create":
                await self._elicitation(request_id, params)
                return
            handler = self._client_methods.get(method)
            if handler is None:
                await self._peer.respond_error(request_id, METHOD_NOT_FOUND, f"agentd does not handle {method}")
                return
            result = await handler(self, params)
            await self._peer.respond(request_id, result)
        except acp_files.OutsideWorkspace as exc:
            await self._respond_error(request_id, INVALID_PARAMS, str(exc))
        except (ValueError, UnicodeError) as exc:
            # What the agent sent cannot be used as asked (a path with a NUL byte, …): its
            # error, not its session's end.
            await self._respond_error(request_id, INVALID_PARAMS, f"{method}: {exc}")
        except ProviderRuntimeError as exc:
            await self._respond_error(request_id, INTERNAL_ERROR, str(exc))

    async def _respond_error(self, request_id: Any, code: int, message: str) -> None:
        try:
            await self._peer.respond_error(request_id, code, message)
        except ProviderRuntimeError:
            pass  # the agent is gone

    # -- what waits on the person --------------------------------------------------------------

    async def answer(self, request_ref: str, response: dict[str, Any]) -> None:
        """The person's answer to a waiting permission or elicitation.

        Raises:
            ProviderRuntimeError: nothing of that ref waits, or the answer
                does not fit (the agent is told too).
        """
        for session in self._sessions.values():
            if request_ref in session.permissions:
                break
            if request_ref in session.elicitations:
                await self._answer_elicitation(session, request_ref, response)
                return
        else:
            raise ProviderRuntimeError(f"request {request_ref} is not waiting in this session")
        request_id, options = session.permissions[request_ref]
        decision = str(response.get("decision"))
        if decision not in offered_decisions(options):
            raise ProviderRuntimeError(f"this permission takes decision {', '.join(offered_decisions(options))}, not {decision!r}")
        chosen = next((o for kind in DECISION_KINDS[decision] for o in options if o.kind == kind), None)
        outcome = SelectedOutcome(option_id=chosen.option_id) if chosen else CancelledOutcome()
        del session.permissions[request_ref]
        await self._peer.respond(request_id, _encode(RequestPermissionResponse(outcome=outcome)))

    async def cancel_waiting(self, session: Session) -> None:
        """Answer what still waits on the person ``cancelled`` (permissions) /
        ``cancel`` (elicitations): the turn is being cancelled or has ended."""
        pending, session.permissions = session.permissions, {}
        for request_id, _options in pending.values():
            await self._peer.respond(request_id, _encode(RequestPermissionResponse(outcome=CancelledOutcome())))
        forms, session.elicitations = session.elicitations, {}
        for request_id, _form in forms.values():
            await self._peer.respond(request_id, _encode(CreateElicitationResponse(action="cancel")))

    async def _permission(self, request_id: Any, params: dict[str, Any]) -> None:
        asked = decode(RequestPermissionRequest, params, "session/request_permission")
        session = self._sessions.get(asked.session_id)
        if session is None or session.turn is None:
            await self._peer.respond(request_id, _encode(RequestPermissionResponse(outcome=CancelledOutcome())))
            return
        # The title the tool call had before the permission's update renames it.
        shown = session.mapper.tool(asked.tool_call.get("toolCallId"))
        titles = [str(shown.detail.get("title") or "")] if shown is not None else []
        call = await session.mapper.tool_update(asked.tool_call)
        title = str(asked.tool_call.get("title") or (call.detail.get("title") if call else "") or "")
        if self.adapter.config.agentd_tool == "allow" and _is_agentd_tool([title, *titles], asked.tool_call.get("rawInput")):
            allow = next((o for o in asked.options if o.kind == "allow_once"), None)
            if allow is not None:
                await self._peer.respond(request_id, _encode(RequestPermissionResponse(outcome=SelectedOutcome(option_id=allow.option_id))))
                return
        ref = f"acp_perm_{uuid.uuid4().hex[:12]}"
        session.permissions[ref] = (request_id, asked.options)
        detail: dict[str, Any] = {
            "method": "session/request_permission", "title": title,
            "options": [{"optionId": o.option_id, "name": o.name, "kind": o.kind} for o in asked.options],
        }
        if call is not None:
            detail["kind"] = call.item_type
            if "command" in call.detail:
                detail["command"] = call.detail["command"]
        item_id = f"request:{ref}"
        attempt = session.turn.attempt_id
        await self._emit(ItemStarted(attempt_id=attempt, item_id=item_id, item_type="approval",
                                     parent_item_id=call.item_id if call else None, title="approval", detail=detail))
        await self._emit(RequestOpened(attempt_id=attempt, request_ref=ref, kind="approval", item_id=item_id, detail=detail,
                                       decisions=offered_decisions(asked.options)))

    async def _elicitation(self, request_id: Any, params: dict[str, Any]) -> None:
        """``elicitation/create`` (mode ``form``, tied to a session) → a
        ``user_input`` request; any other shape is answered with an error
        the agent sees."""
        asked = decode(CreateElicitationRequest, params, "elicitation/create")
        if asked.mode != "form":
            await self._respond_error(request_id, INVALID_PARAMS, f"agentd answers form elicitations only, not mode {asked.mode!r}")
            return
        if asked.session_id is None:
            await self._respond_error(request_id, INVALID_PARAMS, "agentd answers elicitations tied to a session (sessionId) only")
            return
        session = self._sessions.get(asked.session_id)
        if session is None or session.turn is None:
            await self._peer.respond(request_id, _encode(CreateElicitationResponse(action="cancel")))
            return
        try:
            form = acp_elicitation.form(asked.message, asked.requested_schema)
        except acp_elicitation.Unsupported as exc:
            await self._respond_error(request_id, INVALID_PARAMS, str(exc))
            return
        ref = f"acp_elicit_{uuid.uuid4().hex[:12]}"
        session.elicitations[ref] = (request_id, form)
        detail: dict[str, Any] = {"method": "elicitation/create", "message": asked.message, "questions": form.questions}
        call = session.mapper.tool(asked.tool_call_id)
        item_id = f"request:{ref}"
        attempt = session.turn.attempt_id
        await self._emit(ItemStarted(attempt_id=attempt, item_id=item_id, item_type="user_input_request",
                                     parent_item_id=call.item_id if call else None, title="question", detail=detail))
        await self._emit(RequestOpened(attempt_id=attempt, request_ref=ref, kind="user_input", item_id=item_id, detail=detail))

    async def _answer_elicitation(self, session: Session, request_ref: str, response: dict[str, Any]) -> None:
        """The person's answers as the form's accepted ``content``. One the
        form cannot take (not a number, …) is the agent's error too: the
        question ends, the agent is not left waiting."""
        request_id, form = session.elicitations.pop(request_ref)
        try:
            answer = acp_elicitation.content(form, dict(response.get("answers") or {}))
        except ValueError as exc:
            await self._respond_error(request_id, INVALID_PARAMS, f"the person's answer does not fit the form: {exc}")
            raise ProviderRuntimeError(str(exc)) from exc
        await self._peer.respond(request_id, _encode(CreateElicitationResponse(action="accept", content=answer)))

    # -- files and terminals -------------------------------------------------------------------

    def _root(self, session_id: str) -> Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise ProviderRuntimeError(f"no session {session_id} in this agent process")
        return session

    async def _read_text_file(self, params: dict[str, Any]) -> Any:
        asked = decode(ReadTextFileRequest, params, "fs/read_text_file")
        content = await acp_files.read_text(self._root(asked.session_id).cwd, asked.path, line=asked.line, limit=asked.limit)
        return _encode(ReadTextFileResponse(content=content))

    async def _write_text_file(self, params: dict[str, Any]) -> Any:
        asked = decode(WriteTextFileRequest, params, "fs/write_text_file")
        session = self._root(asked.session_id)
        written = await acp_files.write_text(session.cwd, asked.path, asked.content)
        await session.mapper.written(written)
        return None

    async def _terminal_create(self, params: dict[str, Any]) -> Any:
        asked = decode(CreateTerminalRequest, params, "terminal/create")
        terminal = await self._terminals.create(asked, self._root(asked.session_id).cwd)
        return _encode(CreateTerminalResponse(terminal_id=terminal.id))

    async def _terminal_output(self, params: dict[str, Any]) -> Any:
        return _encode(self._terminals.output(decode(TerminalRequest, params, "terminal/output").terminal_id))

    async def _terminal_wait(self, params: dict[str, Any]) -> Any:
        return _encode(await self._terminals.wait_for_exit(decode(TerminalRequest, params, "terminal/wait_for_exit").terminal_id))

    async def _terminal_kill(self, params: dict[str, Any]) -> Any:
        self._terminals.kill(decode(TerminalRequest, params, "terminal/kill").terminal_id)
        return None

    async def _terminal_release(self, params: dict[str, Any]) -> Any:
        terminal = self._terminals.release(decode(TerminalRequest, params, "terminal/release").terminal_id)
        self._released[terminal.id] = terminal.text()
        return None

    def terminal_output_text(self, terminal_id: str) -> str | None:
        """A terminal's output, also after its release (None: unknown)."""
        terminal = self._terminals.peek(terminal_id)
        return terminal.text() if terminal is not None else self._released.get(terminal_id)

    _client_methods = {
        "fs/read_text_file": _read_text_file,
        "fs/write_text_file": _write_text_file,
        "terminal/create": _terminal_create,
        "terminal/output": _terminal_output,
        "terminal/wait_for_exit": _terminal_wait,
        "terminal/kill": _terminal_kill,
        "terminal/release": _terminal_release,
    }

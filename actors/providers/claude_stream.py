"""Claude Code's stream-json as agentd's normalized events, and back.

Claude's output lines (``stream_event``, ``assistant``, ``user``, ``system``,
``result``) and its ``can_use_tool`` control requests become
``ProviderEvent`` structs; the app's answers become ``control_response`` lines.
:class:`StreamMapper` holds what the mapping must remember within a turn
(open text blocks, started tools, waiting permissions); the connection in
``claude.py`` routes lines to it and writes what it returns.

=========================  ==================================================
claude                     agentd
=========================  ==================================================
text blocks (streamed      ``agent_message`` items with a ``TextDelta`` per
as ``text_delta``)         delta; an ``assistant`` text that was not
                           streamed arrives whole. A streamed text block
                           completes when its message says how it ends:
                           ``phase`` ``commentary`` when a tool use follows
                           in the message, ``final_answer`` when it ends the
                           turn (``end_turn``), else unknown
``tool_use`` blocks        ``tool`` items titled with the tool name
                           (``Task``/``Agent`` → ``subagent``, file-writing
                           tools → ``file_change``), closed by their
                           ``tool_result``
``TodoWrite``              ``PlanUpdated``
``can_use_tool``           an ``approval`` request; ``accept`` →
                           ``{behavior: allow, updatedInput}``,
                           ``acceptForSession`` → the same plus Claude's
                           ``permission_suggestions``, for the session only
                           (never saved in a settings file), ``decline`` →
                           ``deny``, ``cancel`` → ``deny`` with
                           ``interrupt: true``
``system/api_retry``       ``RuntimeWarning_``
``result``                 ``Usage`` per model (claude_usage.py), then
                           ``TurnCompleted``: ``success`` → completed, an
                           ``error_during_execution`` after our interrupt →
                           interrupted, anything else → failed
=========================  ==================================================

What the runtime does, as seen with the pinned 2.1.332, and what the mapping
makes of it:

* an interrupt during streaming: Claude sends the partial ``assistant``
  message marked ``aborted``, a synthetic ``content_block_stop`` and a
  ``result`` ``error_during_execution``; the aborted text item is left open,
  so agentd's completion barrier closes it as ``interrupted``;
* an interrupt while Claude waits on ``can_use_tool``: Claude sends
  ``control_cancel_request`` (the request can no longer be answered), refuses
  the tool (its node ends ``interrupted``) and ends the turn;
* with a bad base URL Claude retries the model API for over a minute instead
  of failing; each retry (``system/api_retry``) becomes a ``runtime.warning``,
  and an interrupt ends the turn.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from .base import (
    EventSink,
    ItemCompleted,
    ItemStarted,
    PlanUpdated,
    ProviderRuntimeError,
    RequestOpened,
    RuntimeWarning_,
    TextDelta,
    TurnCompleted,
    TurnStarted,
)
from .claude_usage import result_usage

#: tool name -> agentd item type (anything else is a ``tool``)
ITEM_TYPES = {
    "Task": "subagent",
    "Agent": "subagent",
    "Write": "file_change",
    "Edit": "file_change",
    "MultiEdit": "file_change",
    "NotebookEdit": "file_change",
}
PLAN_TOOL = "TodoWrite"
#: how much of a tool's result a node keeps
RESULT_LIMIT = 16_000


# -- lines agentd writes -------------------------------------------------------------------


def user_line(text: str, context: str | None = None) -> dict[str, Any]:
    """A user turn's input line: ``context`` (a handoff's text), if any, then ``text``."""
    content = []
    if context:
        content.append({"type": "text", "text": context})
    content.append({"type": "text", "text": text})
    return {"type": "user", "message": {"role": "user", "content": content}}


def control_request_line(request_id: str, subtype: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A control request of ours (``initialize``, ``interrupt``)."""
    return {"type": "control_request", "request_id": request_id, "request": {"subtype": subtype, **fields}}


def control_response_line(request_id: str, response: dict[str, Any]) -> dict[str, Any]:
    """Our answer to one of Claude's control requests."""
    return {"type": "control_response", "response": {"subtype": "success", "request_id": request_id, "response": response}}


def control_error_line(request_id: str, error: str) -> dict[str, Any]:
    """Our refusal of one of Claude's control requests."""
    return {"type": "control_response", "response": {"subtype": "error", "request_id": request_id, "error": error}}


def result_errors(message: dict[str, Any]) -> list[str]:
    """The ``errors`` a ``result`` line lists."""
    return [str(e) for e in message.get("errors") or []]


# -- the mapping ---------------------------------------------------------------------------------


def session_rules(suggestions: Any) -> list[dict[str, Any]]:
    """Claude's ``permission_suggestions`` (its own "don't ask again"), kept
    for the session only: Claude suggests saving a rule in a settings file
    (``localSettings``), which would outlive the session. As seen with
    2.1.332, a command that writes a file in the workspace is suggested an
    allow rule, the directory and the mode ``acceptEdits``, and it takes the
    mode for the next such command not to ask. Deny and ask rules are left
    out."""
    if not isinstance(suggestions, list):
        return []
    return [{**s, "destination": "session"} for s in suggestions
            if isinstance(s, dict) and s.get("behavior", "allow") == "allow"]


@dataclass
class Turn:
    """The turn Claude is running: one user message up to its ``result``.
    Claude has no turn ids; ``native_turn_id`` is ours."""

    attempt_id: str
    native_turn_id: str
    interrupt_requested: bool = False
    #: the uuid of the turn's last top-level assistant message (where a fork
    #: "after this turn" resumes: ``--resume-session-at``)
    last_message_uuid: str | None = None


@dataclass
class PendingPermission:
    """A ``can_use_tool`` request waiting on the app."""

    tool_use_id: str | None
    tool_name: str
    input: dict[str, Any]
    suggestions: list[Any] = field(default_factory=list)


class StreamMapper:
    """Claude's output lines as agentd events, each tagged with the running
    turn's attempt id.

    Args:
        emit: where the events go.
    """

    def __init__(self, emit: EventSink) -> None:
        self._emit = emit
        #: the turn Claude is running, if any
        self.turn: Turn | None = None
        #: control request id -> the ``can_use_tool`` request waiting on the app
        self.permissions: dict[str, PendingPermission] = {}
        #: tool_use ids the app declined (their result is ``cancelled``, not ``failed``)
        self._declined: set[str] = set()
        #: tool_use id -> item type, for the items we reported started
        self._tools: dict[str, str] = {}
        #: parent_tool_use_id -> the API message id being streamed
        self._streaming: dict[str | None, str] = {}
        #: (message id, block index) of streamed text blocks still open
        self._open_text: dict[tuple[str, int], str] = {}
        #: message ids whose text came as deltas (their ``assistant`` copy is not text again)
        self._streamed_messages: set[str] = set()
        #: message ids Claude reported ``aborted`` (cut short by an interrupt)
        self._aborted_messages: set[str] = set()
        #: message id -> its streamed text items that ended but wait for the
        #: message's phase (``_settle_text``)
        self._unsettled_text: dict[str, list[str]] = {}
        #: message ids that hold a tool call: their text is commentary
        self._tool_messages: set[str] = set()
        #: model -> the previous result's ``modelUsage`` counts (claude_usage.py)
        self._model_totals: dict[str, dict[str, int]] = {}

    def _attempt(self) -> str | None:
        return self.turn.attempt_id if self.turn is not None else None

    # -- turns ---------------------------------------------------------------------------

    async def begin_turn(self, attempt_id: str) -> Turn:
        """Make the running turn (with a fresh native turn id) and report it
        started. Call it before the user line goes in: every event of the
        turn comes after ``TurnStarted``."""
        turn = self.turn = Turn(attempt_id=attempt_id, native_turn_id=f"turn_{uuid.uuid4().hex[:16]}")
        await self._emit(TurnStarted(attempt_id=attempt_id, native_turn_id=turn.native_turn_id))
        return turn

    def drop_turn(self, turn: Turn) -> None:
        """Forget ``turn`` if it is still the running one (its input never reached Claude)."""
        if self.turn is turn:
            self.turn = None

    async def on_result(self, message: dict[str, Any]) -> None:
        """A ``result`` line ends the running turn (the caller checked there is one)."""
        turn = self.turn
        assert turn is not None
        subtype = message.get("subtype")
        errors = result_errors(message)
        self.turn = None
        if subtype == "success" and not message.get("is_error"):
            # A message whose end never streamed: its text ended, its phase is unknown.
            for message_id in list(self._unsettled_text):
                await self._settle_text(message_id, "commentary" if message_id in self._tool_messages else None)
        self._unsettled_text.clear()
        self._tool_messages.clear()
        self._open_text.clear()
        self._streaming.clear()
        self._streamed_messages.clear()
        self._aborted_messages.clear()
        self.permissions.clear()
        if subtype == "success" and not message.get("is_error"):
            status, error = "completed", None
        elif turn.interrupt_requested and subtype == "error_during_execution":
            status, error = "interrupted", None
        else:
            status = "failed"
            error = "; ".join(e for e in errors if not e.startswith("[ede_diagnostic]")) or str(
                message.get("result") or subtype or "claude reported an error"
            )
        for usage in result_usage(message, turn.attempt_id, self._model_totals):
            await self._emit(usage)
        await self._emit(TurnCompleted(attempt_id=turn.attempt_id, native_turn_id=turn.native_turn_id, status=status, error=error,
                                       end_ref=turn.last_message_uuid))

    # -- permissions ---------------------------------------------------------------------

    async def on_permission_request(self, request_id: str, request: dict[str, Any]) -> None:
        """A ``can_use_tool`` control request: remember it, report an approval request."""
        tool_input = request.get("input") or {}
        tool_use_id = request.get("tool_use_id")
        self.permissions[request_id] = PendingPermission(
            tool_use_id=tool_use_id, tool_name=str(request.get("tool_name", "")), input=tool_input,
            suggestions=session_rules(request.get("permission_suggestions")),
        )
        detail = {
            "tool": request.get("tool_name"),
            "input": tool_input,
            "description": request.get("description") or tool_input.get("description"),
        }
        if "command" in tool_input:
            detail["command"] = tool_input["command"]
        if request.get("decision_reason"):
            detail["reason"] = request["decision_reason"]
        # "Allow for the session" is Claude's own suggested rules applied for
        # the session (``updatedPermissions``): offered only when it made some.
        decisions = ["accept", "acceptForSession", "decline"] if self.permissions[request_id].suggestions else ["accept", "decline"]
        await self._emit(RequestOpened(
            attempt_id=self._attempt(), request_ref=request_id, kind="approval", item_id=tool_use_id, detail=detail,
            decisions=decisions,
        ))

    def answer_permission(self, request_ref: str, response: dict[str, Any]) -> dict[str, Any]:
        """The app's ``{"decision": …}`` as the ``can_use_tool`` answer Claude
        takes; the request no longer waits.

        Raises:
            ProviderRuntimeError: no such request waits.
        """
        pending = self.permissions.pop(request_ref, None)
        if pending is None:
            raise ProviderRuntimeError(f"request {request_ref} is not waiting in this claude session")
        decision = response.get("decision")
        if decision in ("accept", "acceptForSession"):
            result: dict[str, Any] = {"behavior": "allow", "updatedInput": pending.input}
            if decision == "acceptForSession" and pending.suggestions:
                result["updatedPermissions"] = pending.suggestions
        else:
            result = {"behavior": "deny", "message": "The user declined this tool use."}
            if decision == "cancel":
                result["interrupt"] = True
            if pending.tool_use_id:
                self._declined.add(pending.tool_use_id)
        return result

    # -- output --------------------------------------------------------------------------

    async def on_system(self, message: dict[str, Any]) -> None:
        """A ``system`` line other than ``init``: a model API retry becomes a warning."""
        if message.get("subtype") == "api_retry":
            status = message.get("error_status")
            error = str(message.get("error") or "error") + (f" (HTTP {status})" if status else "")
            delay = message.get("retry_delay_ms")
            later = f", next in {delay / 1000:.1f}s" if isinstance(delay, (int, float)) else ""
            await self._emit(RuntimeWarning_(
                attempt_id=self._attempt(),
                message=f"claude is retrying the model API (attempt {message.get('attempt')} of "
                        f"{message.get('max_retries')}{later}): {error}",
            ))

    async def on_stream_event(self, message: dict[str, Any]) -> None:
        """A ``stream_event`` (partial message): text blocks open, grow and close."""
        event = message.get("event") or {}
        kind = event.get("type")
        parent = message.get("parent_tool_use_id")
        attempt_id = self._attempt()
        if kind == "message_start":
            self._streaming[parent] = (event.get("message") or {}).get("id") or message.get("api_message_id") or ""
            return
        message_id = self._streaming.get(parent) or message.get("api_message_id") or ""
        index = event.get("index", 0)
        item_id: str | None  # the text item a block is, where it is one
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") in ("tool_use", "server_tool_use"):
                # Text followed by a tool use in the same message is narration.
                self._tool_messages.add(message_id)
                await self._settle_text(message_id, "commentary")
            if block.get("type") == "text":
                item_id = f"{message_id}:{index}"
                self._open_text[(message_id, index)] = item_id
                self._streamed_messages.add(message_id)
                await self._emit(ItemStarted(attempt_id=attempt_id, item_id=item_id, item_type="agent_message",
                                             parent_item_id=parent))
                if block.get("text"):
                    await self._emit(TextDelta(attempt_id=attempt_id, item_id=item_id, delta=block["text"]))
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                item_id = self._open_text.get((message_id, index))
                if item_id is None:
                    item_id = self._open_text[(message_id, index)] = f"{message_id}:{index}"
                    self._streamed_messages.add(message_id)
                await self._emit(TextDelta(attempt_id=attempt_id, item_id=item_id, delta=delta.get("text", "")))
        elif kind == "content_block_stop":
            item_id = self._open_text.pop((message_id, index), None)
            # An aborted message (interrupt) gets a synthetic stop: it stays
            # open, and agentd's completion barrier closes it as interrupted.
            if item_id is not None and message_id not in self._aborted_messages:
                if message_id in self._tool_messages:
                    await self._emit(ItemCompleted(attempt_id=attempt_id, item_id=item_id, item_type="agent_message",
                                                   phase="commentary"))
                else:
                    # Its phase is known only when the message says how it ends.
                    self._unsettled_text.setdefault(message_id, []).append(item_id)
        elif kind == "message_delta":
            stop_reason = (event.get("delta") or {}).get("stop_reason")
            if message_id in self._tool_messages or stop_reason == "tool_use":
                await self._settle_text(message_id, "commentary")
            elif stop_reason in ("end_turn", "stop_sequence"):
                await self._settle_text(message_id, "final_answer")
        elif kind == "message_stop":
            await self._settle_text(message_id, "commentary" if message_id in self._tool_messages else None)

    async def _settle_text(self, message_id: str, phase: str | None) -> None:
        """The ended text items of message ``message_id`` complete with ``phase``
        (Claude has no phase of its own: text followed by a tool use in the
        same message is ``commentary``, text of a message that ends the turn
        is ``final_answer``, else unknown)."""
        for item_id in self._unsettled_text.pop(message_id, ()):
            await self._emit(ItemCompleted(attempt_id=self._attempt(), item_id=item_id, item_type="agent_message",
                                           phase=phase))

    async def on_assistant(self, message: dict[str, Any]) -> None:
        """A whole ``assistant`` message: its tool calls start, and text that
        was not streamed arrives at once."""
        body = message.get("message") or {}
        message_id = body.get("id") or ""
        parent = message.get("parent_tool_use_id")
        attempt_id = self._attempt()
        if parent is None and self.turn is not None and isinstance(message.get("uuid"), str):
            self.turn.last_message_uuid = message["uuid"]
        if message.get("aborted"):
            self._aborted_messages.add(message_id)
        for index, block in enumerate(body.get("content") or []):
            kind = block.get("type")
            if kind == "tool_use":
                await self._tool_started(block, parent, attempt_id)
            elif kind == "text" and message_id not in self._streamed_messages and block.get("text"):
                # Not streamed (no partial messages for this one): the whole text at once;
                # narration when a tool use follows it in the message.
                item_id = f"{message_id}:a{index}"
                tools_follow = any(isinstance(b, dict) and b.get("type") == "tool_use"
                                   for b in (body.get("content") or [])[index + 1:])
                await self._emit(ItemStarted(attempt_id=attempt_id, item_id=item_id, item_type="agent_message", parent_item_id=parent))
                await self._emit(TextDelta(attempt_id=attempt_id, item_id=item_id, delta=block["text"]))
                await self._emit(ItemCompleted(attempt_id=attempt_id, item_id=item_id, item_type="agent_message",
                                               phase="commentary" if tools_follow else None))

    async def _tool_started(self, block: dict[str, Any], parent: str | None, attempt_id: str | None) -> None:
        tool_id, name = str(block.get("id", "")), str(block.get("name", "tool"))
        tool_input = block.get("input") or {}
        if not tool_id or tool_id in self._tools:
            return
        if name == PLAN_TOOL:
            self._tools[tool_id] = "plan_tool"
            plan = [
                {"step": str(t.get("content", "")), "status": str(t.get("status", "pending"))}
                for t in tool_input.get("todos") or [] if isinstance(t, dict)
            ]
            await self._emit(PlanUpdated(attempt_id=attempt_id, item_id=parent, plan=plan))
            return
        item_type = ITEM_TYPES.get(name, "tool")
        self._tools[tool_id] = item_type
        await self._emit(ItemStarted(
            attempt_id=attempt_id, item_id=tool_id, item_type=item_type, parent_item_id=parent, title=name,
            detail={"tool": name, "input": tool_input},
        ))

    async def on_user(self, message: dict[str, Any]) -> None:
        """A ``user`` line Claude writes back: each ``tool_result`` closes its tool."""
        content = (message.get("message") or {}).get("content")
        if not isinstance(content, list):
            return
        extra = message.get("tool_use_result")
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            tool_id = str(block.get("tool_use_id", ""))
            item_type = self._tools.pop(tool_id, None)
            if item_type is None or item_type == "plan_tool":
                continue
            text = _result_text(block.get("content"))
            failed = bool(block.get("is_error"))
            if tool_id in self._declined:
                status = "cancelled"
            elif failed and self.turn is not None and self.turn.interrupt_requested:
                status = "interrupted"  # e.g. refused because the turn was interrupted while asking
            else:
                status = "failed" if failed else "completed"
            self._declined.discard(tool_id)
            detail: dict[str, Any] = {"result": text[:RESULT_LIMIT], "isError": failed}
            if len(text) > RESULT_LIMIT:
                detail["truncated"] = True
            if isinstance(extra, dict):
                for key in ("stdout", "stderr", "interrupted"):
                    if key in extra and not isinstance(extra[key], (dict, list)):
                        value = extra[key]
                        detail[key] = value[:RESULT_LIMIT] if isinstance(value, str) else value
            await self._emit(ItemCompleted(
                attempt_id=self._attempt(), item_id=tool_id, item_type=item_type, status=status, detail=detail,
            ))


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return "" if content is None else str(content)

"""ACP ``session/update`` notifications as agentd's normalized events.

One :class:`TurnMapper` per ACP session; the adapter tells it when a turn
begins and ends. Within a turn:

=============================  ===============================================
ACP update                     agentd
=============================  ===============================================
``agent_message_chunk``        assistant text: one ``agent_message`` item per
                               stretch of chunks (a new ``messageId``, a
                               thought or a tool call ends a stretch); a
                               message a tool call follows is ``commentary``,
                               the one that ends an ``end_turn`` turn the
                               ``final_answer``
``agent_thought_chunk``        a ``reasoning`` node (its ``text``)
``tool_call`` /                a node by ``kind``: ``edit``, ``delete``,
``tool_call_update``           ``move`` → ``file_change`` (``changes`` from
                               its ``diff`` content); ``execute`` →
                               ``command_execution`` (``command``, ``output``
                               — a client terminal's output when it names
                               one); anything else → ``tool``. ``completed``
                               / ``failed`` end it
``plan``                       the todo list (``PlanUpdated``)
``usage_update``               kept (``usage``), read leniently
``current_mode_update``,       kept on the session (``mode``, ``commands``)
``available_commands_update``
``user_message_chunk``         the person's own text: not a node
=============================  ===============================================

Items still open when the turn ends are ended with it (``interrupted`` for a
cancelled turn, else ``incomplete``).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from .acp_files import Written, unified_diff
from .base import EventSink, ItemCompleted, ItemStarted, PlanUpdated, TextDelta

log = logging.getLogger(__name__)

#: ACP tool kinds -> agentd node kinds (anything else: ``tool``)
TOOL_KINDS = {"edit": "file_change", "delete": "file_change", "move": "file_change", "execute": "command_execution"}
#: ACP tool call statuses that end a node -> its status
TOOL_ENDS = {"completed": "completed", "failed": "failed"}
MAX_TEXT = 64 * 1024


def _clip(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"… [{len(text) - MAX_TEXT} more characters]"


def content_text(block: Any) -> str:
    """The text of a ContentBlock (a marker for what is not text)."""
    if not isinstance(block, dict):
        return ""
    if block.get("type") == "text":
        return str(block.get("text") or "")
    if block.get("type") == "resource_link":
        return f"[{block.get('name') or block.get('uri')}]"
    return f"[{block.get('type', 'content')}]"


@dataclass
class ToolCall:
    item_id: str
    item_type: str
    detail: dict[str, Any] = field(default_factory=dict)
    open: bool = True
    #: client terminals it shows (their output is its output)
    terminals: list[str] = field(default_factory=list)


class TurnMapper:
    """Maps one ACP session's updates during a turn.

    Args:
        emit: where the events go.
        root: the session's workspace (diff paths are relative to it).
        terminal_output: a client terminal's output by id (None if unknown).
    """

    def __init__(self, emit: EventSink, root: str, terminal_output: Callable[[str], str | None]) -> None:
        self._emit = emit
        self._root = root
        self._terminal_output = terminal_output
        self._ids = itertools.count(1)
        self.attempt_id: str | None = None
        #: the open assistant message: (item id, ACP messageId)
        self._message: tuple[str, str | None] | None = None
        self._thought: tuple[str, list[str]] | None = None
        self._tools: dict[str, ToolCall] = {}
        #: the latest usage the agent reported (``usage_update`` / the prompt's answer)
        self.usage: dict[str, Any] = {}
        self.mode: str | None = None
        self.commands: list[Any] = []
        #: in a replayed history, whether the last update was the person's text
        self._in_user = False

    # -- the turn ----------------------------------------------------------------------------

    def begin(self, attempt_id: str) -> None:
        self.attempt_id = attempt_id
        self._tools.clear()

    async def end(self, stop_reason: str | None) -> None:
        """End what is open; ``stop_reason`` None: the turn failed."""
        await self._close_message("final_answer" if stop_reason == "end_turn" else None,
                                  "completed" if stop_reason is not None else "interrupted")
        await self._close_thought()
        status = "interrupted" if stop_reason in ("cancelled", None) else "incomplete"
        for call in self._tools.values():
            if call.open:
                await self._end_tool(call, status)
        self.attempt_id = None

    # -- updates -----------------------------------------------------------------------------

    def replayed(self, update: dict[str, Any]) -> bool:
        """An update of the history ``session/load`` replays: not an event
        (it happened before); the mode and commands are kept. True when it
        begins one of the person's messages (a turn of the history)."""
        kind = update.get("sessionUpdate")
        self._keep(update)
        starts = kind == "user_message_chunk" and not self._in_user
        self._in_user = kind == "user_message_chunk"
        return starts

    def _keep(self, update: dict[str, Any]) -> bool:
        """Session state an update carries; whether it was one."""
        kind = update.get("sessionUpdate")
        if kind == "current_mode_update":
            self.mode = str(update.get("currentModeId") or "") or None
        elif kind == "available_commands_update":
            self.commands = list(update.get("availableCommands") or [])
        elif kind == "usage_update":
            self.usage.update({k: v for k, v in update.items() if k != "sessionUpdate"})
        else:
            return False
        return True

    async def on_update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if self._keep(update):
            pass
        elif self.attempt_id is None:
            log.debug("ACP %s update outside a turn ignored", kind)
        elif kind == "agent_message_chunk":
            await self._message_chunk(content_text(update.get("content")), update.get("messageId"))
        elif kind == "agent_thought_chunk":
            await self._thought_chunk(content_text(update.get("content")))
        elif kind in ("tool_call", "tool_call_update"):
            await self.tool_update(update)
        elif kind == "plan":
            await self._plan(update)
        else:
            log.debug("ACP %s update ignored", kind)

    async def _message_chunk(self, text: str, message_id: Any) -> None:
        await self._close_thought()
        if self._message is not None and message_id is not None and self._message[1] not in (None, message_id):
            await self._close_message(None, "completed")
        if self._message is None:
            self._message = (f"acp_msg_{next(self._ids)}", message_id if isinstance(message_id, str) else None)
            await self._emit(ItemStarted(attempt_id=self.attempt_id, item_id=self._message[0], item_type="agent_message"))
        if text:
            await self._emit(TextDelta(attempt_id=self.attempt_id, item_id=self._message[0], delta=text))

    async def _close_message(self, phase: str | None, status: str) -> None:
        if self._message is not None:
            item_id, self._message = self._message[0], None
            await self._emit(ItemCompleted(attempt_id=self.attempt_id, item_id=item_id, item_type="agent_message",
                                           status=status, phase=phase))

    async def _thought_chunk(self, text: str) -> None:
        await self._close_message("commentary", "completed")
        if self._thought is None:
            self._thought = (f"acp_thought_{next(self._ids)}", [])
            await self._emit(ItemStarted(attempt_id=self.attempt_id, item_id=self._thought[0], item_type="reasoning",
                                         title="thinking"))
        self._thought[1].append(text)

    async def _close_thought(self) -> None:
        if self._thought is not None:
            (item_id, parts), self._thought = self._thought, None
            await self._emit(ItemCompleted(attempt_id=self.attempt_id, item_id=item_id, item_type="reasoning",
                                           detail={"text": _clip("".join(parts))}))

    async def _plan(self, update: dict[str, Any]) -> None:
        entries = [e for e in update.get("entries") or [] if isinstance(e, dict)]
        plan = [{"step": str(e.get("content", "")), "status": str(e.get("status", "pending")),
                 **({"priority": e["priority"]} if "priority" in e else {})} for e in entries]
        await self._emit(PlanUpdated(attempt_id=self.attempt_id, plan=plan))

    # -- tool calls --------------------------------------------------------------------------

    def tool(self, call_id: Any) -> ToolCall | None:
        """The tool call of that id this session reported, if any."""
        return self._tools.get(call_id) if isinstance(call_id, str) else None

    async def tool_update(self, update: dict[str, Any]) -> ToolCall | None:
        """A ``tool_call``, a ``tool_call_update`` or a permission request's
        ``toolCall``: the node starts the first time its id is seen."""
        call_id = update.get("toolCallId")
        if not isinstance(call_id, str) or self.attempt_id is None:
            return None
        call = self._tools.get(call_id)
        if call is None:
            await self._close_message("commentary", "completed")
            await self._close_thought()
            item_type = TOOL_KINDS.get(str(update.get("kind")), "tool")
            call = self._tools[call_id] = ToolCall(item_id=f"tool:{call_id}", item_type=item_type)
            self._merge(call, update)
            await self._emit(ItemStarted(attempt_id=self.attempt_id, item_id=call.item_id, item_type=item_type,
                                         title=str(update.get("title") or item_type), detail=dict(call.detail)))
        else:
            self._merge(call, update)
        end = TOOL_ENDS.get(str(update.get("status")))
        if end is not None and call.open:
            await self._end_tool(call, end)
        return call

    def _merge(self, call: ToolCall, update: dict[str, Any]) -> None:
        detail = call.detail
        for key in ("title", "kind", "status", "rawInput", "rawOutput"):
            if update.get(key) is not None:
                detail[key] = update[key]
        if isinstance(update.get("locations"), list):
            detail["locations"] = [loc.get("path") for loc in update["locations"] if isinstance(loc, dict)]
        raw = update.get("rawInput")
        if call.item_type == "command_execution" and isinstance(raw, dict) and raw.get("command"):
            command = raw["command"]
            detail["command"] = " ".join(map(str, command)) if isinstance(command, list) else str(command)
        if isinstance(update.get("content"), list):
            # An update's content replaces the call's content (the schema's rule), diffs aside:
            # a file's diff stays known once shown.
            call.detail.pop("output", None)
            for block in update["content"]:
                self._merge_content(call, block)

    def _merge_content(self, call: ToolCall, block: Any) -> None:
        if not isinstance(block, dict):
            return
        kind = block.get("type")
        if kind == "diff" and isinstance(block.get("path"), str):
            before = block.get("oldText")
            change = {"path": block["path"], "kind": "add" if before is None else "update",
                      "diff": unified_diff(block["path"], before, str(block.get("newText") or ""), self._root)}
            changes = [c for c in call.detail.get("changes", []) if c.get("path") != block["path"]]
            call.detail["changes"] = [*changes, change]
        elif kind == "terminal" and isinstance(block.get("terminalId"), str):
            if block["terminalId"] not in call.terminals:
                call.terminals.append(block["terminalId"])
        elif kind == "content":
            text = content_text(block.get("content"))
            before = str(call.detail.get("output", ""))
            call.detail["output"] = _clip(f"{before}\n{text}" if before else text)

    async def _end_tool(self, call: ToolCall, status: str) -> None:
        call.open = False
        for terminal_id in call.terminals:
            output = self._terminal_output(terminal_id)
            if output is not None:
                call.detail["output"] = _clip(output)
        await self._emit(ItemCompleted(attempt_id=self.attempt_id, item_id=call.item_id, item_type=call.item_type,
                                       status=status, detail=dict(call.detail)))

    # -- agentd's own file writes ------------------------------------------------------------

    async def written(self, write: Written) -> None:
        """The agent wrote a file through ``fs/write_text_file``: the change
        goes on the open edit tool call that made it, else on a
        ``file_change`` node of its own (agentd knows every file written)."""
        change = write.change(self._root)
        change["source"] = "fs/write_text_file"
        for call in reversed(list(self._tools.values())):
            if call.open and call.item_type == "file_change":
                changes = [c for c in call.detail.get("changes", []) if c.get("path") != write.path]
                call.detail["changes"] = [*changes, change]
                return
        if self.attempt_id is None:
            log.info("ACP agent wrote %s outside a turn", write.path)
            return
        item_id = f"acp_write_{next(self._ids)}"
        detail = {"path": write.path, "changes": [change]}
        await self._emit(ItemStarted(attempt_id=self.attempt_id, item_id=item_id, item_type="file_change",
                                     title=f"write {write.path}", detail=detail))
        await self._emit(ItemCompleted(attempt_id=self.attempt_id, item_id=item_id, item_type="file_change", detail=detail))


"""agentd's events and records as ACP ``session/update`` notifications.

Pure functions and one small stateful translator, no I/O: ``agentd acp``
(cli/acp_agent.py) feeds them what the daemon sends and sends what they
return. The mapping (protocol/README.md, "agentd acp"):

- assistant text (``message.delta`` live, ``message.appended`` durable, both
  placed by ``offset``) → ``agent_message_chunk``, each character once;
  a user message of a run another client started → ``user_message_chunk``;
- a ``reasoning`` node → ``agent_thought_chunk`` (its text, when it ends);
- ``command_execution``, ``file_change``, ``tool``, ``mcp_tool_call``,
  ``subagent`` and ``approval`` nodes → ``tool_call`` when they start and
  ``tool_call_update`` as they change, ``kind`` by node kind (and a tool's
  name: ``Read`` is ``read``, ``Grep`` ``search``, …); a file change is an
  ``edit`` whose ``diff`` content comes from the tool's own input where it
  carries old and new text (Claude's ``Edit``/``Write``), else from the
  run's checkpoint once it is captured (``diff_updates``);
- the run's todo list (``plan.updated``, root scope) → ``plan``; a proposed
  plan → a message chunk with its text;
- the run's end → the prompt's ``stopReason`` (``stop_reason``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from . import acp_sdk  # noqa: F401 - first: the SDK without its docstring pass
from acp.schema import (
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    ContentToolCallContent,
    FileEditToolCallContent,
    ImageContentBlock,
    PlanEntry,
    TextContentBlock,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    UserMessageChunk,
)

#: what a session/update may carry (the subset agentd sends)
Update = (AgentMessageChunk | AgentThoughtChunk | UserMessageChunk | ToolCallStart | ToolCallProgress
          | AgentPlanUpdate)

TERMINAL_RUN = ("completed", "failed", "interrupted", "cancelled", "rolled_back")
#: node kinds shown as tool calls
TOOL_NODES = ("command_execution", "file_change", "tool", "mcp_tool_call", "subagent", "approval")
#: a tool's name (Claude's, Codex's dynamic tools) → ACP tool kind
TOOL_NAME_KINDS = {
    "read": "read", "notebookread": "read", "ls": "read", "view": "read",
    "grep": "search", "glob": "search", "search": "search", "websearch": "search", "toolsearch": "search",
    "bash": "execute", "shell": "execute", "exec": "execute", "killshell": "execute",
    "webfetch": "fetch", "fetch": "fetch",
    "write": "edit", "edit": "edit", "multiedit": "edit", "notebookedit": "edit",
    "task": "think", "agent": "think", "todowrite": "think",
}
#: node status → ACP tool call status
NODE_STATUS = {"pending": "pending", "running": "in_progress", "completed": "completed"}
#: characters of a command's output shown in its tool call
OUTPUT_LIMIT = 16_000


def text_chunk(text: str) -> AgentMessageChunk:
    """An ``agent_message_chunk`` of plain text."""
    return AgentMessageChunk(session_update="agent_message_chunk", content=TextContentBlock(type="text", text=text))


def _text(text: str) -> ContentToolCallContent:
    return ContentToolCallContent(type="content", content=TextContentBlock(type="text", text=text))


def tool_kind(node: dict[str, Any]) -> str:
    """The ACP ``kind`` of a node's tool call."""
    kind = node.get("kind")
    detail = node.get("detail") or {}
    if kind == "command_execution":
        return "execute"
    if kind == "file_change":
        return "delete" if str(node.get("title", "")).startswith("delete ") else "edit"
    if kind == "subagent":
        return "think"
    if kind == "approval":
        return {"command": "execute", "file_change": "edit"}.get(str(detail.get("kind")), "other")
    name = str(detail.get("tool") or detail.get("name") or node.get("title") or "")
    return TOOL_NAME_KINDS.get(name.lower().replace("_", ""), "search" if name == "webSearch" else "other")


def tool_status(status: str) -> str:
    """The ACP status of a node status (every other end is ``failed``)."""
    return NODE_STATUS.get(status, "failed")


def locations(node: dict[str, Any], workspace: str | None = None) -> list[ToolCallLocation] | None:
    """The files a node names (a file change's path, a tool's ``file_path``),
    absolute (a relative one is under ``workspace``), as ACP wants them."""
    detail = node.get("detail") or {}
    paths: list[str] = []
    if isinstance(detail.get("path"), str):
        paths.append(detail["path"])
    for change in detail.get("changes") or []:
        if isinstance(change, dict) and isinstance(change.get("path"), str):
            paths.append(change["path"])
    tool_input = detail.get("input")
    if isinstance(tool_input, dict):
        for key in ("file_path", "path", "notebook_path"):
            if isinstance(tool_input.get(key), str):
                paths.append(tool_input[key])
    if workspace:
        paths = [p if p.startswith("/") else f"{workspace.rstrip('/')}/{p}" for p in paths]
    return [ToolCallLocation(path=p) for p in dict.fromkeys(paths)] or None


def input_diffs(node: dict[str, Any]) -> list[FileEditToolCallContent]:
    """Diffs a file change carries in its own input (Claude's Edit, MultiEdit, Write)."""
    tool_input = (node.get("detail") or {}).get("input")
    if not isinstance(tool_input, dict) or not isinstance(tool_input.get("file_path"), str):
        return []
    path = tool_input["file_path"]
    if isinstance(tool_input.get("new_string"), str):
        return [FileEditToolCallContent(type="diff", path=path, old_text=str(tool_input.get("old_string") or ""),
                                        new_text=tool_input["new_string"])]
    if isinstance(tool_input.get("edits"), list):
        return [FileEditToolCallContent(type="diff", path=path, old_text=str(e.get("old_string") or ""),
                                        new_text=str(e.get("new_string") or ""))
                for e in tool_input["edits"] if isinstance(e, dict)]
    if isinstance(tool_input.get("content"), str):
        return [FileEditToolCallContent(type="diff", path=path, old_text=None, new_text=tool_input["content"])]
    return []


def node_content(node: dict[str, Any]) -> list[Any] | None:
    """What a tool call shows: a command's output, a diff, a tool's result."""
    detail = node.get("detail") or {}
    kind = node.get("kind")
    if kind == "file_change":
        return list(input_diffs(node)) or None
    out: list[Any] = []
    if kind == "command_execution" and detail.get("aggregatedOutput"):
        output = str(detail["aggregatedOutput"])[:OUTPUT_LIMIT]
        out.append(_text(f"```\n{output.rstrip()}\n```"))
    elif kind == "approval" and detail.get("command"):
        out.append(_text(f"```\n{detail['command']}\n```"))
    for key in ("result", "output", "error"):
        value = detail.get(key)
        if isinstance(value, str) and value.strip():
            out.append(_text(value[:OUTPUT_LIMIT]))
            break
    if node.get("summary"):
        out.append(_text(str(node["summary"])))
    return out or None


def raw_input(node: dict[str, Any]) -> Any:
    detail = node.get("detail") or {}
    if "input" in detail:
        return detail["input"]
    if node.get("kind") == "command_execution":
        return {"command": detail.get("command"), "cwd": detail.get("cwd")}
    return None


def tool_title(node: dict[str, Any]) -> str:
    title = str(node.get("title") or node.get("kind") or "tool")
    if node.get("kind") == "approval":
        detail = node.get("detail") or {}
        what = detail.get("command") or detail.get("tool") or detail.get("kind") or ""
        return f"approval: {what}" if what else "approval"
    return title


def tool_call_start(node: dict[str, Any], workspace: str | None = None) -> ToolCallStart:
    """The ``tool_call`` that opens a node."""
    return ToolCallStart(
        session_update="tool_call", tool_call_id=node["id"], title=tool_title(node), kind=tool_kind(node),  # type: ignore[arg-type]
        status=tool_status(node.get("status", "running")), locations=locations(node, workspace), content=node_content(node),  # type: ignore[arg-type]
        raw_input=raw_input(node),
    )


def tool_call_update(node: dict[str, Any], workspace: str | None = None) -> ToolCallProgress:
    """The ``tool_call_update`` of a node that changed."""
    detail = node.get("detail") or {}
    raw_output = {"exitCode": detail["exitCode"]} if "exitCode" in detail else None
    return ToolCallProgress(
        session_update="tool_call_update", tool_call_id=node["id"], status=tool_status(node.get("status", "")),  # type: ignore[arg-type]
        title=tool_title(node), content=node_content(node), locations=locations(node, workspace), raw_output=raw_output,
    )


def thought_text(node: dict[str, Any]) -> str:
    """A reasoning node's text (Codex: ``summary`` and ``content`` lists)."""
    detail = node.get("detail") or {}
    parts: list[str] = []
    for key in ("summary", "content", "text"):
        value = detail.get(key)
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, list):
            parts.extend(str(v.get("text", "")) if isinstance(v, dict) else str(v) for v in value)
        if parts:
            break
    return "\n".join(p for p in parts if p)


def plan_update(artifact: dict[str, Any]) -> AgentPlanUpdate:
    """A todo list as an ACP ``plan`` (every entry, as ACP replaces the plan whole)."""
    entries = []
    for step in artifact.get("steps") or []:
        status = step.get("status") if step.get("status") in ("pending", "in_progress", "completed") else "pending"
        entries.append(PlanEntry(content=str(step.get("step", "")), priority="medium", status=status))  # type: ignore[arg-type]
    return AgentPlanUpdate(session_update="plan", entries=entries)


def stop_reason(run: dict[str, Any]) -> tuple[str, str | None]:
    """The prompt's ``stopReason`` for a terminal run, and a last message chunk that says why, if any."""
    status, reason = run.get("status"), run.get("reason") or ""
    if status == "completed":
        return "end_turn", None
    if status == "failed":
        return "end_turn", f"\n\n[agentd: the run failed: {reason or 'no reason given'}]"
    if "daemon_restart" in reason or reason.endswith("_restart"):
        return "cancelled", (f"\n\n[agentd: the run was cut off because the agentd daemon restarted ({reason}); "
                             "nothing re-runs by itself: send the prompt again, or /retry]")
    if status == "rolled_back":
        return "cancelled", "\n\n[agentd: the run was rolled back]"
    if reason and reason not in ("interrupted", "stopped", "cancelled_by_user"):
        return "cancelled", f"\n\n[agentd: the run ended {status}: {reason}]"
    return "cancelled", None


def prompt_text(blocks: Iterable[Any]) -> str:
    """An ACP prompt as one agentd message: text as it is, an embedded text
    resource as a fenced block under its URI, a resource link as its URI."""
    parts: list[str] = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "text":
            parts.append(block.text)
        elif kind == "resource":
            resource = block.resource
            text = getattr(resource, "text", None)
            if text is not None:
                parts.append(f"{resource.uri}:\n```\n{text}\n```")
            elif (getattr(resource, "mime_type", None) or "").startswith("image/"):
                pass  # an attachment (prompt_images)
            else:
                parts.append(f"[binary resource {resource.uri} not passed on]")
        elif kind == "resource_link":
            parts.append(f"[{block.name}]({block.uri})")
        elif kind == "image" and not getattr(block, "data", None) and getattr(block, "uri", None):
            parts.append(f"[image]({block.uri})")
        elif kind == "audio":
            parts.append("[audio not passed on: agentd's agents take text and images]")
    return "\n\n".join(p for p in parts if p)


def prompt_images(blocks: Iterable[Any]) -> list[dict[str, Any]]:
    """The images of an ACP prompt as ``thread.message.send`` attachments:
    each ``image`` block with data, and each embedded blob resource of an
    image type (the daemon checks the type and the bytes)."""
    out = []
    for block in blocks:
        kind = getattr(block, "type", None)
        if kind == "image" and getattr(block, "data", None):
            out.append({"type": "image", "mimeType": block.mime_type, "data": block.data})
        elif kind == "resource":
            resource = block.resource
            blob, mime = getattr(resource, "blob", None), getattr(resource, "mime_type", None) or ""
            if blob and mime.startswith("image/"):
                out.append({"type": "image", "mimeType": mime, "data": blob})
    return out


#: reads one of a message's images (``MessageAttachment``): its base64, or None where it cannot
ImageReader = Callable[[str, dict[str, Any]], "str | None"]


def user_chunks(message: dict[str, Any], read_image: ImageReader | None = None) -> list[Update]:
    """A user message as ``user_message_chunk``s: its text, then its images
    (read with ``read_image``; one that cannot be read is said in words)."""
    out: list[Update] = []
    if message.get("text"):
        out.append(UserMessageChunk(session_update="user_message_chunk",
                                    content=TextContentBlock(type="text", text=message["text"])))
    for attachment in message.get("attachments") or []:
        data = read_image(message.get("threadId") or "", attachment) if read_image is not None else None
        content: Any = (ImageContentBlock(type="image", mime_type=attachment["mimeType"], data=data) if data
                        else TextContentBlock(type="text", text=f"[image {attachment['mimeType']}, "
                                                                f"{attachment['size']} bytes]"))
        out.append(UserMessageChunk(session_update="user_message_chunk", content=content))
    return out


def mcp_servers(servers: Iterable[Any] | None) -> tuple[list[dict[str, Any]], list[str]]:
    """The editor's MCP servers (``session/new {mcpServers}``) as
    ``thread.update {mcpServers}`` takes them — stdio and http ones — and the
    names of those left out (sse, acp: agentd does not advertise them)."""
    out: list[dict[str, Any]] = []
    left: list[str] = []
    for server in servers or []:
        kind = getattr(server, "type", None)
        if kind is None and getattr(server, "command", None):
            out.append({"type": "stdio", "name": server.name, "command": server.command, "args": list(server.args or []),
                        "env": {e.name: e.value for e in server.env or []}})
        elif kind == "http":
            out.append({"type": "http", "name": server.name, "url": server.url,
                        "headers": {h.name: h.value for h in server.headers or []}})
        else:
            left.append(str(getattr(server, "name", "?")))
    return out, left


# -- diffs from a checkpoint ---------------------------------------------------------------

_DIFF_HEADER = re.compile(r"^diff --git a/(.*?) b/(.*)$")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")


def patch_hunks(patch: str) -> dict[str, list[tuple[str | None, str]]]:
    """A git patch as, per path (the new one), its hunks as (old text, new text):
    context and removed lines make the old text, context and added lines the
    new one; a file that was added has no old text."""
    files: dict[str, list[tuple[str | None, str]]] = {}
    path: str | None = None
    added_file = False
    old: list[str] | None = None
    new: list[str] = []

    def close() -> None:
        nonlocal old, new
        if path is not None and old is not None:
            files.setdefault(path, []).append(
                (None if added_file else "\n".join(old) + ("\n" if old else ""), "\n".join(new) + ("\n" if new else "")))
        old, new = None, []

    for line in patch.splitlines():
        header = _DIFF_HEADER.match(line)
        if header:
            close()
            path, added_file = header.group(2), False
            continue
        if path is None:
            continue
        if old is None and line.startswith("new file mode"):
            added_file = True
        if _HUNK.match(line):
            close()
            old, new = [], []
        elif old is not None:
            if line.startswith("\\"):
                continue
            if line.startswith("-"):
                old.append(line[1:])
            elif line.startswith("+"):
                new.append(line[1:])
            elif line.startswith(" ") or line == "":
                old.append(line[1:])
                new.append(line[1:])
    close()
    return files


def _relative(path: str, workspace: str | None) -> str:
    if workspace and path.startswith(workspace.rstrip("/") + "/"):
        return path[len(workspace.rstrip("/")) + 1:]
    return path


def diff_updates(patch: str, file_nodes: dict[str, dict[str, Any]], workspace: str | None) -> list[ToolCallProgress]:
    """``tool_call_update``s giving each file change (node id → node) the
    diff of its file from the run's checkpoint (absolute paths under the
    workspace, as ACP wants them)."""
    hunks = patch_hunks(patch)
    out = []
    for node_id, node in file_nodes.items():
        if input_diffs(node):
            continue  # it already showed its own diff
        contents: list[Any] = []
        for location in locations(node, workspace) or []:
            rel = _relative(location.path, workspace)
            absolute = f"{workspace.rstrip('/')}/{rel}" if workspace else rel
            for old_text, new_text in hunks.get(rel, []):
                contents.append(FileEditToolCallContent(type="diff", path=absolute, old_text=old_text, new_text=new_text))
        if contents:
            out.append(ToolCallProgress(session_update="tool_call_update", tool_call_id=node_id, content=contents))
    return out


# -- the live translator -------------------------------------------------------------------


@dataclass
class EventTranslator:
    """Turns one thread's events into session updates, in order.

    ``own_runs`` are the runs this session's prompts started (their user
    message is the editor's own; other runs' user messages are shown).
    """

    workspace: str | None = None
    own_runs: set[str] = field(default_factory=set)
    #: texts this session is sending now (their run ids are not known yet)
    sending: list[str] = field(default_factory=list)
    #: characters of each message already sent
    sent: dict[str, int] = field(default_factory=dict)
    #: messages that are the user's (never sent as the agent's)
    user_messages: set[str] = field(default_factory=set)
    #: tool calls opened, by node id
    open_tools: set[str] = field(default_factory=set)
    #: file changes of each run, by run id → node id → node (for their diffs)
    file_changes: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: how a user message's images are read (None: said in words)
    read_image: ImageReader | None = None

    def mark_seen(self, thread: dict[str, Any], runs: list[dict[str, Any]]) -> None:
        """What ``history_updates`` sent of these (``thread.get``'s and
        ``run.get``'s answers) is not sent again when its events come."""
        for message in thread.get("messages") or []:
            if message.get("role") == "user":
                self.user_messages.add(message["id"])
            self.sent[message["id"]] = len(message.get("text") or "")
        for detail in runs:
            for node in detail.get("nodes") or []:
                if node.get("kind") in TOOL_NODES:
                    self.open_tools.add(node["id"])

    def _text(self, message_id: str, offset: int, text: str) -> list[Update]:
        sent = self.sent.get(message_id, 0)
        end = offset + len(text)
        if end <= sent or message_id in self.user_messages:
            return []
        piece = text[max(0, sent - offset):]
        self.sent[message_id] = end
        return [text_chunk(piece)] if piece else []

    def updates(self, event: dict[str, Any]) -> list[Update]:
        """The updates one event makes (none for most)."""
        kind = event.get("type", "")
        payload = event.get("payload") or {}
        if kind in ("message.delta", "message.appended"):
            return self._text(payload["messageId"], int(payload.get("offset", 0)), payload.get("text", ""))
        if kind == "message.created":
            message = payload.get("message") or {}
            if message.get("role") == "user":
                self.user_messages.add(message["id"])
                if message.get("text") in self.sending:
                    self.own_runs.add(message.get("runId") or "")
                elif message.get("runId") not in self.own_runs and message.get("text"):
                    return user_chunks(message, self.read_image)
                return []
            return self._text(message["id"], 0, message.get("text") or "")
        if kind == "plan.updated" and payload.get("scope", "root") == "root":
            return [plan_update(payload["artifact"])]
        if kind == "plan.proposed":
            text = (payload.get("artifact") or {}).get("text") or ""
            return [text_chunk(f"\n\nProposed plan:\n\n{text}\n")] if text else []
        node = payload.get("node")
        if not isinstance(node, dict) or kind.endswith(".requested") or "." not in kind:
            return []
        return self._node(node, started=kind.endswith(".started"))

    def _node(self, node: dict[str, Any], *, started: bool) -> list[Update]:
        kind = node.get("kind")
        if kind == "reasoning":
            if started or node.get("status") == "running":
                return []
            text = thought_text(node)
            return [AgentThoughtChunk(session_update="agent_thought_chunk",
                                      content=TextContentBlock(type="text", text=text))] if text else []
        if kind not in TOOL_NODES:
            return []
        if kind == "file_change" and node.get("runId"):
            self.file_changes.setdefault(node["runId"], {})[node["id"]] = node
        if node["id"] not in self.open_tools:
            self.open_tools.add(node["id"])
            return [tool_call_start(node, self.workspace)]
        return [tool_call_update(node, self.workspace)]


def history_updates(thread: dict[str, Any], runs: list[dict[str, Any]], workspace: str | None = None,
                    read_image: ImageReader | None = None) -> list[Update]:
    """A thread's history as ACP replays it for ``session/load``: per run,
    the user's message, then the selected attempt's nodes (as tool calls
    with their final status) and assistant messages in the order they began.

    ``thread`` is ``thread.get``'s answer, ``runs`` ``run.get``'s per run.
    """
    messages = thread.get("messages") or []
    by_run: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        by_run.setdefault(message.get("runId") or "", []).append(message)
    out: list[Update] = []
    for detail in runs:
        run = detail["run"]
        items: list[tuple[float, int, dict[str, Any], str]] = []
        for message in by_run.get(run["id"], []):
            if message.get("role") == "user":
                out += user_chunks(message, read_image)
            elif message.get("attemptId") in (None, run.get("selectedAttemptId")) and message.get("text"):
                items.append((float(message.get("createdAt") or 0), 1, message, "message"))
        for node in detail.get("nodes") or []:
            if node.get("attemptId") == run.get("selectedAttemptId") and (
                    node.get("kind") in TOOL_NODES or node.get("kind") == "reasoning"):
                items.append((float(node.get("createdAt") or 0), 0, node, "node"))
        for _, _, item, what in sorted(items, key=lambda i: (i[0], i[1])):
            if what == "message":
                out.append(text_chunk(item["text"]))
            elif item.get("kind") == "reasoning":
                text = thought_text(item)
                if text:
                    out.append(AgentThoughtChunk(session_update="agent_thought_chunk",
                                                 content=TextContentBlock(type="text", text=text)))
            else:
                out.append(tool_call_start(item, workspace))
        if run.get("status") in TERMINAL_RUN and run.get("status") != "completed":
            _, why = stop_reason(run)
            out.append(text_chunk(why or f"\n\n[agentd: run {run.get('ordinal')} ended {run.get('status')}]"))
    return out

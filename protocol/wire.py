"""Wire types: the params of every method, checked once at the boundary.

Which method takes which params (and answers with which result) is said
once, in its signature (``signatures.py``), which the method table
(``agentd.supervisor.methods``) takes.

Params are camelCase msgspec Structs that refuse unknown fields, so a typo
(``threadID``) is an ``invalid_params`` error naming the field instead of a
silently ignored value. Results (``results.py``) and event payloads
(``events.py``) are Structs too; handlers may build them as the plain
mappings they encode to (``store.records.to_wire``).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

MAX_TEXT = 1 << 20  # characters (Unicode code points) of message text: 1 Mi, not bytes
Id = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
#: printable ASCII, space to ``~`` (protocol/README.md, "Safe retries"); ``\Z``, not ``$``,
#: which would let a trailing newline through
CommandId = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[\x20-\x7e]+\Z")]
#: a session's tool credential (the secret of its credential file; its MCP token is ``<sessionId>.<credential>``)
Credential = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class Params(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """Base of every method's params."""


class NoParams(Params):
    pass


class ThreadListParams(Params):
    """``thread.list``: every thread, or (with ``limit``) a page, newest first."""

    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] | None = None
    #: with ``limit``: only threads older than this thread id (the previous page's ``next``)
    before: Id | None = None
    #: also the archived threads (issue 27)
    include_archived: bool = False


Relationship = Literal["delegated_task", "subagent", "fork", "side_chat", "plan_implementation"]


Title = Annotated[str, msgspec.Meta(max_length=500)]
#: a text that becomes a path, an argument or an environment entry of a process: no NUL byte,
#: which no file name and no exec can hold (the call is invalid_params, not an internal error)
NO_NUL = r"^[^\x00]*\Z"
Workspace = Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern=NO_NUL)]
CreatedBy = Literal["user", "agent", "system"]


class ThreadCreateParams(Params):
    title: Title | None = None
    workspace: Workspace | None = None
    provider: Id | None = None
    parent_thread_id: Id | None = None
    relationship: Relationship = "delegated_task"
    created_by: CreatedBy = "user"
    #: MCP servers for its provider sessions, as ``thread.update`` takes them (issue 26)
    mcp_servers: McpServers | None = None
    command_id: CommandId | None = None


# -- a fork's source point (SPEC F6): one of these, by ``type`` ------------------------------


class _Point(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True, tag_field="type"):
    pass


class LatestStablePoint(_Point, tag="latest_stable"):
    """The newest completed run (the default)."""


class RunPoint(_Point, tag="run"):
    run_id: Id


class NodePoint(_Point, tag="node"):
    node_id: Id


class ProviderThreadPoint(_Point, tag="provider_thread"):
    provider_thread_id: Id
    provider_turn_id: Id | None = None


class CheckpointPoint(_Point, tag="checkpoint"):
    checkpoint_id: Id


SourcePointParams = LatestStablePoint | RunPoint | NodePoint | ProviderThreadPoint | CheckpointPoint


class ThreadForkParams(Params):
    thread_id: Id
    source_point: SourcePointParams | None = None
    title: Title | None = None
    side_chat: bool = False
    workspace: Workspace | None = None
    created_by: CreatedBy = "user"
    command_id: CommandId | None = None


class ThreadRequestsParams(Params):
    thread_id: Id
    #: also the pending requests of the thread's delegated children, depth-first (SPEC F9)
    include_children: bool = False


#: where a delegated task works: the parent's workspace, a copy of it, a folder of its own, or a
#: git worktree of the parent's repository (a copy outside one; issue 27)
TaskWorkspace = Literal["same", "fork", "new", "worktree"]


class TaskDelegateParams(Params):
    """``task.delegate`` (SPEC F9): the delegating thread is named by
    ``parentThreadId``, or by ``sessionId`` — the provider session an
    MCP tool call came from, proven by its ``credential``."""

    instructions: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT)]
    parent_thread_id: Id | None = None
    session_id: Id | None = None
    credential: Credential | None = None
    provider: Id | None = None
    workspace: TaskWorkspace = "same"
    wait: bool = False
    #: when the task's run ends, the delegating thread gets a run of its own (wakeups.py)
    wake: bool = False
    command_id: CommandId | None = None


class TaskCancelParams(Params):
    task_id: Id
    #: the asking provider session (with its credential): it may cancel only its own thread's tasks
    session_id: Id | None = None
    credential: Credential | None = None
    command_id: CommandId | None = None


class TaskResultParams(Params):
    task_id: Id
    #: wait until the task's run ended
    wait: bool = False
    #: the asking provider session: the result is then delivered to (consumed by) its thread's running turn
    session_id: Id | None = None
    #: that session's tool credential
    credential: Credential | None = None


class McpEndpointParams(Params):
    """``mcp.endpoint`` (SPEC F9): for ``parentThreadId`` (the person's
    ``agentd mcp --thread``), or for ``sessionId`` with its ``credential``."""

    parent_thread_id: Id | None = None
    session_id: Id | None = None
    credential: Credential | None = None


class HandoffGetParams(Params):
    handoff_id: Id


DispatchType = Literal["steer_active", "restart_active", "queue_after_active", "start_immediately"]


class DispatchMode(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    type: DispatchType
    target_run_id: Id | None = None


class MergeBack(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """Bring what a fork of the thread did home with the message (SPEC F7)."""

    fork_thread_id: Id
    #: also merge the fork's file changes into this workspace (issue 27)
    files: bool = False
    #: on a conflict, write git's conflict markers instead of nothing
    on_conflict: Literal["markers"] | None = None


#: what an image attachment may be (what Codex, Claude and ACP agents all take)
ImageMimeType = Literal["image/png", "image/jpeg", "image/gif", "image/webp"]
#: images one message may carry
MAX_ATTACHMENTS = 8
#: decoded bytes of all of one message's attachments together: their base64
#: (4/3 of it) and the text still fit one request line (framing.MAX_LINE)
MAX_ATTACHMENT_BYTES = 9 << 20


class ImageAttachment(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True, tag_field="type",
                      tag="image"):
    """An image that comes with a user message (issue 26): its bytes as base64."""

    mime_type: ImageMimeType
    #: base64 (RFC 4648, with padding) of the image's bytes
    data: Annotated[str, msgspec.Meta(min_length=1)]


class MessageSendParams(Params):
    thread_id: Id
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEXT)]
    dispatch_mode: DispatchMode | None = None
    provider: Id | None = None
    #: a fresh provider thread with a summary of the thread, instead of continuing one (SPEC F5)
    clean_context: bool = False
    command_id: CommandId | None = None
    #: a fork of this thread whose work since the fork point (or the last merge) comes with the message (SPEC F7)
    merge_back: MergeBack | None = None
    #: images for the provider, where the thread's provider instance takes them (issue 26)
    attachments: Annotated[list[ImageAttachment], msgspec.Meta(max_length=MAX_ATTACHMENTS)] | None = None


class ThreadGetParams(Params):
    thread_id: Id


class RunGetParams(Params):
    run_id: Id


class RunResumeParams(Params):
    run_id: Id


class RunInterruptParams(Params):
    run_id: Id
    hold_queue: bool = False
    command_id: CommandId | None = None


class NodeInterruptParams(Params):
    node_id: Id
    command_id: CommandId | None = None


class RunRetryParams(Params):
    run_id: Id
    command_id: CommandId | None = None


class ThreadStopParams(Params):
    thread_id: Id
    command_id: CommandId | None = None


class ThreadIdParams(Params):
    thread_id: Id


#: MCP servers one thread may be given (issue 26)
MAX_MCP_SERVERS = 32
McpName = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=NO_NUL)]
McpText = Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern=NO_NUL)]
McpMap = Annotated[dict[Annotated[str, msgspec.Meta(min_length=1, max_length=256, pattern=NO_NUL)],
                        Annotated[str, msgspec.Meta(max_length=16384, pattern=NO_NUL)]], msgspec.Meta(max_length=256)]


class McpServerStdio(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True, tag_field="type",
                     tag="stdio"):
    """An MCP server the provider starts as a process (an editor's, issue 26)."""

    name: McpName
    command: McpText
    args: Annotated[list[Annotated[str, msgspec.Meta(max_length=16384, pattern=NO_NUL)]], msgspec.Meta(max_length=256)] = []
    env: McpMap = {}


class McpServerHttp(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True, tag_field="type",
                    tag="http"):
    """An MCP server the provider reaches over streamable HTTP (an editor's, issue 26)."""

    name: McpName
    url: McpText
    headers: McpMap = {}


#: an editor's MCP servers (``thread.create`` / ``thread.update {mcpServers}``)
McpServers = Annotated[list[McpServerStdio | McpServerHttp], msgspec.Meta(max_length=MAX_MCP_SERVERS)]


class ThreadUpdateParams(Params):
    """``thread.update``: what to change (a field left out stays as it is)."""

    thread_id: Id
    title: Title | None = None
    #: MCP servers for the thread's provider sessions, besides agentd's own tool (issue 26); [] removes them
    mcp_servers: McpServers | None = None
    command_id: CommandId | None = None


class ThreadDeleteParams(Params):
    thread_id: Id


#: the longest search query, in characters
MAX_QUERY = 1_000


class ThreadSearchParams(Params):
    """``thread.search``: FTS5 query syntax (words, ``"a phrase"``, ``pre*``, ``AND``/``OR``/``NOT``)."""

    query: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_QUERY)]
    thread_id: Id | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=500)] = 20


class ThreadExportParams(Params):
    thread_id: Id
    format: Literal["markdown", "json"] = "markdown"


class ThreadArchiveParams(Params):
    """``thread.archive`` / ``thread.unarchive`` (issue 27)."""

    thread_id: Id
    command_id: CommandId | None = None


class QueuedRunParams(Params):
    run_id: Id


class QueueReorderParams(Params):
    thread_id: Id
    run_ids: list[Id]


class PromoteParams(Params):
    message_id: Id


#: ``acceptForSession``: allow this and, for the rest of the provider session,
#: what the provider deems the same (only where the request's ``decisions`` offer it)
ApprovalDecision = Literal["accept", "acceptForSession", "decline"]


class ApprovalRespondParams(Params):
    request_id: Id
    decision: ApprovalDecision
    command_id: CommandId | None = None


Answer = str | list[str]


class UserInputRespondParams(Params):
    request_id: Id
    answers: dict[str, Answer]
    command_id: CommandId | None = None


class PlanImplementParams(Params):
    plan_id: Id
    mode: Literal["new_run", "new_thread"] = "new_run"
    command_id: CommandId | None = None


class CheckpointDiffParams(Params):
    checkpoint_id: Id
    base_checkpoint_id: Id | None = None
    max_bytes: Annotated[int, msgspec.Meta(ge=0, le=16 << 20)] | None = None


class RunDiffParams(Params):
    run_id: Id
    max_bytes: Annotated[int, msgspec.Meta(ge=0, le=16 << 20)] | None = None


#: a workspace-relative folder a restore is to include although it is a nested repository now
IncludePath = Annotated[str, msgspec.Meta(min_length=1, max_length=4096, pattern=NO_NUL)]


class CheckpointRestoreParams(Params):
    checkpoint_id: Id
    command_id: CommandId | None = None
    #: nested repositories (folders holding a ``.git``) whose files are restored too
    include: Annotated[list[IncludePath], msgspec.Meta(max_length=1000)] | None = None


class RollbackToRunParams(Params):
    thread_id: Id
    #: the run whose state to go back to; 0: before the thread's first run
    target_ordinal: Annotated[int, msgspec.Meta(ge=0)]
    #: roll back a legacy history (which the runtime cannot rewind) by rebuilding the agent's memory
    allow_rebuild: bool = False
    command_id: CommandId | None = None


class RollbackNodeParams(Params):
    node_id: Id
    #: a child-scope checkpoint of that node
    checkpoint_id: Id
    command_id: CommandId | None = None


class SubscribeParams(Params):
    thread_id: Id | None = None
    after_seq: Annotated[int, msgspec.Meta(ge=0)] = 0


class UnsubscribeParams(Params):
    subscription_id: Id

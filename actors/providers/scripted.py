"""Adapter for the built-in scripted agent (``scripted_agent.py``).

The agent is a real subprocess with its own durable native state, so this
adapter exercises the same paths a real runtime does: process start and exit,
request/response over stdio, native thread resume, interrupts, server
requests. Its capability switches are passed to the agent, which then refuses
the matching primitives, so every fallback in agentd can be driven.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from pathlib import Path
from collections.abc import Sequence
from typing import Any

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
from .agentd_tool import AgentdTool
from . import extra_mcp
from .images import ImageInput
from .jsonl import JsonLinesPeer, stop_process
from .runtime import StderrLog
from .transport import ProcessLike, Spawn, exit_status, spawn_process

log = logging.getLogger(__name__)


#: the agent's item types -> agentd's node kinds
ITEM_TYPES = {
    "agentMessage": "agent_message",
    "fileChange": "file_change",
    "tool": "tool",
    "commandExecution": "command_execution",
    "subagent": "subagent",
    "plan": "plan",
    "approval": "approval",
    "userInput": "user_input_request",
}

def _images(images: Sequence[ImageInput]) -> list[dict[str, Any]]:
    """A turn's images as the scripted agent takes them: the files, as Codex's ``localImage``."""
    return [{"type": "localImage", "mimeType": image.mime_type, "path": image.path} for image in images]


# error codes of the scripted agent
THREAD_NOT_FOUND = -32001
THREAD_CORRUPT = -32002


class ScriptedAdapter(ProviderAdapter):
    """A ``kind = "scripted"`` provider instance.

    Args:
        name: the instance name from the config (``scripted`` by default).
        home: directory of the agent's native state (kept across sessions).
        capabilities: switches; off ones make the agent refuse that primitive.
        request_timeout: bound on every primitive's wait (None: unbounded, for
            virtual-time tests where a timer must not race real process I/O).
        spawn: how the runtime is started (a real process; a recording or
            replay in tests).
        args: more arguments for the agent (the instance's ``args``).
    """

    kind = "scripted"
    #: its ``item/interrupt`` ends a running tool, command or subagent item
    interruptible_items = frozenset({"tool", "command_execution", "subagent"})

    def __init__(
        self,
        name: str,
        *,
        home: Path,
        capabilities: Capabilities | None = None,
        request_timeout: float | None = 30.0,
        spawn: Spawn = spawn_process,
        args: list[str] | None = None,
    ) -> None:
        self.name = name
        self.home = Path(home)
        self.capabilities = capabilities or Capabilities()
        self.request_timeout = request_timeout
        self.spawn = spawn
        #: the instance's ``args``, after the agent's own (``--history-mode legacy``)
        self.args = list(args or [])
        #: agentd's MCP tool for the agent's ``delegate`` step (SPEC F9); None: not offered
        self.agentd_tool: AgentdTool | None = None

    async def probe(self) -> dict[str, Any]:
        return {"usable": True, "binary": sys.executable, "version": "built-in"}

    def images_refused(self) -> str | None:
        """The agent takes images (it reports them: ``reportImages``) unless
        its instance's ``args`` hold ``--no-images``."""
        if "--no-images" in self.args:
            return f"provider instance {self.name!r} (scripted, --no-images) does not take images"
        return None

    def command(self) -> list[str]:
        return [sys.executable, "-m", "agentd.actors.providers.scripted_agent", "--home", str(self.home), *self.args]

    async def open(self, *, session_id: str, emit: EventSink,
                   task_status: trio.TaskStatus[ProviderConnection] = trio.TASK_STATUS_IGNORED) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        if self.agentd_tool is not None:
            env.update(self.agentd_tool.scripted_env(session_id))
        process = await self.spawn(self.command(), env=env, cwd=None, stderr_path=StderrLog(self.home).path)
        connection = ScriptedConnection(self, process, emit)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection._serve_output)
                await connection._initialize()
                task_status.started(connection)
                await process.wait()
        finally:
            await stop_process(process, polite=connection._polite_stop)
            connection._exit_status = exit_status(process.returncode)


class ScriptedConnection(ProviderConnection):
    """One live scripted-agent process."""

    def __init__(self, adapter: ScriptedAdapter, process: ProcessLike, emit: EventSink) -> None:
        self.adapter = adapter
        self.capabilities = adapter.capabilities
        self._loaded_threads: set[str] = set()
        self._history_modes: dict[str, str | None] = {}
        self._process = process
        self._emit = emit
        self._exit_status: tuple[int | None, int | None] = (None, None)
        #: native thread id -> attempt id of its running turn
        self._attempts: dict[str, str] = {}
        self._requests: dict[str, Any] = {}
        self._first_turn_attempt: str | None = None
        self._peer = JsonLinesPeer(
            process.stdin,
            eager_reader(process.stdout),
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
        result = await self._peer.request(
            "initialize",
            {"clientInfo": {"name": "agentd", "version": "0.1"}, "capabilities": msgspec.to_builtins(self.capabilities)},
        )
        version = result.get("version") if isinstance(result, dict) else None
        self.runtime_version = str(version) if version is not None else None

    async def _polite_stop(self) -> None:
        # End of input is the agent's polite stop; no answer to wait for, so
        # it works even when our reader has already been cancelled.
        await self._process.stdin.aclose()

    # -- primitives -------------------------------------------------------------

    async def create_thread(self, *, cwd: str, mcp_servers: Sequence[McpServerSpec] = ()) -> str:
        params: dict[str, Any] = {"cwd": cwd}
        if mcp_servers:
            params["mcpServers"] = extra_mcp.scripted_servers(mcp_servers)
        result = await self._peer.request("thread/start", params)
        thread_id: str = result["threadId"]
        self._loaded_threads.add(thread_id)
        self._history_modes[thread_id] = result.get("historyMode")
        return thread_id

    def history_mode(self, native_thread_id: str) -> str | None:
        return self._history_modes.get(native_thread_id)

    async def resume_thread(self, native_thread_id: str, *, cwd: str, mcp_servers: Sequence[McpServerSpec] = ()) -> ResumeInfo:
        params: dict[str, Any] = {"threadId": native_thread_id}
        if mcp_servers:
            params["mcpServers"] = extra_mcp.scripted_servers(mcp_servers)
        try:
            result = await self._peer.request("thread/resume", params)
        except ProviderRuntimeError as exc:
            if exc.code in (THREAD_NOT_FOUND, THREAD_CORRUPT):
                raise NativeThreadMissing(str(exc), code=exc.code) from exc
            raise
        self._loaded_threads.add(native_thread_id)
        self._history_modes[native_thread_id] = result.get("historyMode")
        return ResumeInfo(native_thread_id=native_thread_id, turn_count=result.get("turnCount"))

    async def start_turn(
        self, native_thread_id: str, *, text: str, attempt_id: str, cwd: str, context: str | None = None,
        images: Sequence[ImageInput] = (),
    ) -> str:
        # Registered before the request: the agent may report the turn started
        # before its answer to turn/start arrives.
        self._attempts[native_thread_id] = attempt_id
        params: dict[str, Any] = {"threadId": native_thread_id, "input": text, "cwd": cwd}
        if context:
            params["context"] = context
        if images:
            params["images"] = _images(images)
        result = await self._peer.request("turn/start", params)
        turn_id: str = result["turnId"]
        return turn_id

    async def start_first_turn(
        self, *, text: str, attempt_id: str, cwd: str, context: str | None = None, images: Sequence[ImageInput] = (),
        mcp_servers: Sequence[McpServerSpec] = (),
    ) -> tuple[str, str]:
        # The thread id is unknown until the answer; events of a thread we
        # have not seen yet belong to this attempt (one thread per process).
        self._first_turn_attempt = attempt_id
        params: dict[str, Any] = {"cwd": cwd, "input": text}
        if context:
            params["context"] = context
        if images:
            params["images"] = _images(images)
        if mcp_servers:
            params["mcpServers"] = extra_mcp.scripted_servers(mcp_servers)
        result = await self._peer.request("turn/start", params)
        self._loaded_threads.add(result["threadId"])
        self._history_modes[result["threadId"]] = result.get("historyMode")
        return result["threadId"], result["turnId"]

    async def interrupt_turn(self, native_thread_id: str, native_turn_id: str) -> None:
        await self._peer.request("turn/interrupt", {"threadId": native_thread_id, "turnId": native_turn_id})

    async def interrupt_item(self, native_thread_id: str, native_turn_id: str, native_item_id: str) -> None:
        await self._peer.request("item/interrupt",
                                 {"threadId": native_thread_id, "turnId": native_turn_id, "itemId": native_item_id})

    async def steer_turn(self, native_thread_id: str, native_turn_id: str, *, text: str,
                         images: Sequence[ImageInput] = ()) -> None:
        params: dict[str, Any] = {"threadId": native_thread_id, "expectedTurnId": native_turn_id, "input": text}
        if images:
            params["images"] = _images(images)
        await self._peer.request("turn/steer", params)

    async def fork_thread(self, native_thread_id: str, *, last_turn_id: str | None,
                          mcp_servers: Sequence[McpServerSpec] = (), cwd: str | None = None) -> str:
        params: dict[str, Any] = {"threadId": native_thread_id}
        if mcp_servers:
            params["mcpServers"] = extra_mcp.scripted_servers(mcp_servers)
        if last_turn_id is not None:
            params["lastTurnId"] = last_turn_id
        result = await self._peer.request("thread/fork", params)
        thread_id: str = result["threadId"]
        self._history_modes[thread_id] = result.get("historyMode")
        return thread_id

    async def list_turns(self, native_thread_id: str) -> list[dict[str, Any]]:
        result = await self._peer.request("thread/turns/list", {"threadId": native_thread_id})
        return list(result["turns"])

    async def rollback_thread(self, native_thread_id: str, *, before_turn_id: str) -> None:
        await self._peer.request("thread/rollback", {"threadId": native_thread_id, "beforeTurnId": before_turn_id})

    async def answer_request(self, request_ref: str, response: dict[str, Any]) -> None:
        request_id = self._requests.pop(request_ref, None)
        if request_id is None:
            raise ProviderRuntimeError(f"request {request_ref} is not waiting in this session")
        await self._peer.respond(request_id, response)

    async def stop(self, *, grace: float = 2.0) -> None:
        await stop_process(self._process, polite=self._polite_stop, grace=grace)

    # -- events -------------------------------------------------------------------

    def _attempt_of(self, native_thread_id: str) -> str | None:
        attempt_id = self._attempts.get(native_thread_id)
        if attempt_id is None and self._first_turn_attempt is not None and native_thread_id:
            attempt_id = self._attempts[native_thread_id] = self._first_turn_attempt
            self._first_turn_attempt = None
        return attempt_id

    async def _on_request(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        attempt_id = self._attempt_of(params.get("threadId", ""))
        kinds = {"item/approval/request": "approval", "item/userInput/request": "user_input"}
        kind = kinds.get(method)
        if kind is None:
            await self._peer.respond_error(request_id, -32601, f"agentd does not handle {method}")
            return
        ref = str(request_id)
        self._requests[ref] = request_id
        await self._emit(
            RequestOpened(attempt_id=attempt_id, request_ref=ref, kind=kind, item_id=params.get("itemId"), detail=params,
                          decisions=[str(d) for d in params.get("decisions") or []])
        )

    async def _on_notification(self, method: str, params: dict[str, Any]) -> None:
        thread_id = params.get("threadId", "")
        attempt_id = self._attempt_of(thread_id)
        if method == "item/agentMessage/delta":
            await self._emit(TextDelta(attempt_id=attempt_id, item_id=params["itemId"], delta=params["delta"]))
        elif method == "item/started":
            item = params["item"]
            await self._emit(
                ItemStarted(
                    attempt_id=attempt_id,
                    item_id=item["id"],
                    item_type=ITEM_TYPES.get(item["type"], item["type"]),
                    parent_item_id=item.get("parentItemId"),
                    title=_item_title(item),
                    detail={k: v for k, v in item.items() if k not in ("id", "type", "parentItemId")},
                )
            )
        elif method == "item/completed":
            item = params["item"]
            await self._emit(
                ItemCompleted(
                    attempt_id=attempt_id,
                    item_id=item["id"],
                    item_type=ITEM_TYPES.get(item["type"], item["type"]),
                    status=item.get("status", "completed"),
                    detail={k: v for k, v in item.items() if k not in ("id", "type", "parentItemId")},
                    phase=message_phase(item.get("phase")),
                )
            )
        elif method == "turn/started":
            await self._emit(TurnStarted(attempt_id=attempt_id, native_turn_id=params["turnId"]))
        elif method == "turn/completed":
            if self._attempts.get(thread_id) == attempt_id:
                self._attempts.pop(thread_id, None)
            await self._emit(
                TurnCompleted(
                    attempt_id=attempt_id,
                    native_turn_id=params.get("turnId"),
                    status=params.get("status", "completed"),
                    error=params.get("error"),
                )
            )
        elif method == "turn/plan/updated":
            await self._emit(PlanUpdated(attempt_id=attempt_id, item_id=params.get("itemId"), plan=params.get("plan", [])))
        elif method == "thread/tokenUsage/updated":
            counts = params.get("usage") or {}
            await self._emit(Usage(
                attempt_id=attempt_id, input_tokens=int(counts.get("inputTokens", 0)),
                output_tokens=int(counts.get("outputTokens", 0)), cached_input_tokens=int(counts.get("cachedInputTokens", 0)),
                reasoning_tokens=int(counts.get("reasoningTokens", 0)), model=counts.get("model"),
            ))
        elif method == "warning":
            await self._emit(RuntimeWarning_(attempt_id=attempt_id, message=str(params.get("message", ""))))
        else:
            log.debug("scripted agent notification %s ignored", method)


class EagerPipe(trio.abc.ReceiveStream):
    """A runtime's stdout pipe read with one scheduler pass per read.

    ``trio.lowlevel.FdStream.receive_some`` yields to the scheduler, then
    tries the read (which fails with EAGAIN when the pipe was emptied by the
    last read), then waits for the pipe: a model streaming 200 small deltas
    a second pays that extra pass and failed read for every delta. Here a
    read that came back short (the pipe is empty) is followed by a wait for
    the pipe, and a full one (more may be waiting) by a plain yield, so every
    read is still a schedule point and a fast runtime never starves the loop.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._drained = True  # the last read emptied the pipe (or nothing was read yet)

    def _fileno(self) -> int:
        # Asked each time: -1 once the stream is closed (a kept number could
        # be reused by another file).
        fd: int = self._stream.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the pipe was closed")
        return fd

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        size = 65536 if max_bytes is None else max_bytes
        if self._drained:
            await trio.lowlevel.wait_readable(self._fileno())
        else:
            await trio.lowlevel.checkpoint()
        while True:
            try:
                data = os.read(self._fileno(), size)
            except BlockingIOError:  # a spurious wake-up
                await trio.lowlevel.wait_readable(self._fileno())
                continue
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    raise trio.ClosedResourceError("the pipe was closed") from None
                raise trio.BrokenResourceError from exc
            self._drained = len(data) < size
            return data

    async def aclose(self) -> None:
        await self._stream.aclose()


def eager_reader(stream: trio.abc.ReceiveStream) -> trio.abc.ReceiveStream:
    """``stream`` as an :class:`EagerPipe` when it is a trio pipe of a real
    process; a recorded or replayed transport is read as it is."""
    if isinstance(stream, trio.lowlevel.FdStream):
        return EagerPipe(stream)
    return stream


def _item_title(item: dict[str, Any]) -> str:
    kind = item.get("type")
    if kind == "fileChange":
        # A delete is no write (issue 28 item 5): the title says which it is.
        return f"{'delete' if item.get('kind') == 'delete' else 'write'} {item.get('path', '')}"
    if kind == "tool":
        return str(item.get("name", "tool"))
    if kind == "commandExecution":
        return str(item.get("command") or "command")
    return str(kind)

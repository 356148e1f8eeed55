"""The built-in scripted agent: a real subprocess that speaks JSON lines on stdio.

Run it as::

    python -m agentd.actors.providers.scripted_agent --home DIR

It exists so that agentd (and its tests) can drive an agent whose behaviour is
fully predictable, through exactly the same machinery as a real one.

Wire protocol
-------------

Modelled on ``codex app-server``: JSON-RPC shaped messages without the
``"jsonrpc"`` field, one JSON object per line.

* Client requests ``{"id", "method", "params"}`` are answered with
  ``{"id", "result"}`` or ``{"id", "error": {"code", "message"}}``.
* The agent sends notifications ``{"method", "params"}`` and server requests
  ``{"id": "srv-N", "method", "params"}``, which the client answers with
  ``{"id": "srv-N", "result"}`` (or ``"error"``).
* A line that is not a JSON object yields a ``warning`` notification.

Methods: ``initialize``, ``thread/start``, ``thread/resume``, ``thread/fork``,
``thread/turns/list``, ``thread/rollback``, ``turn/start``,
``turn/interrupt``, ``item/interrupt`` (one running tool, command or subagent
item ends ``interrupted``; the turn goes on), ``turn/steer`` and ``shutdown``.  ``initialize`` may
switch off the capabilities listed in :data:`CAPABILITIES`; the matching
method then fails with :data:`NOT_SUPPORTED`.  With ``emptyThreads`` off,
``thread/start`` is refused and ``turn/start {cwd, input}`` (no
``threadId``) creates the thread together with its first turn
(``--late-thread-id``: answered only after that turn's ``turn/completed``, as
a runtime that reports a new session's id with its result); ``cwd`` on
the turn of an existing thread moves it there (as codex takes a cwd per turn).
``turn/start`` and ``turn/steer`` may carry ``images: [{type: localImage,
mimeType, path}]`` (as Codex's ``localImage`` input), which the
``reportImages`` step reports; ``--no-images`` refuses them.

Each thread is stored natively as ``HOME/threads/<threadId>.json``::

    {"threadId", "cwd", "turns": [{"turnId", "input", "status", "output"}]}

A turn's input is either plain text, answered with ``You said: <text>``, or
``@script`` alone on the first line followed by a JSON array of steps; see
:class:`Turn` for the steps.
"""

from __future__ import annotations

import argparse
import base64
import functools
import hashlib
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The standard library's json, not msgspec, and threads, not trio: this process starts once per
# provider session, and those imports were half of its start (see cooperative.py).
from agentd.actors.providers import cooperative as coop

# The session's tool credential (its file named in the environment): the delegate step's only.
from agentd.actors.providers.tool_credentials import CREDENTIAL_ENV as TOOL_CREDENTIAL_ENV, read_credential

# Error codes: -32601 and -32602 are JSON-RPC's own, the -3200x ones ours.
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
THREAD_NOT_FOUND = -32001
THREAD_CORRUPT = -32002
TURN_NOT_FOUND = -32003
NOT_SUPPORTED = -32004
TURN_CONFLICT = -32005

#: what a ``say`` step's ``phase`` may be (Codex's MessagePhase)
PHASES = ("commentary", "partial_answer", "final_answer")
#: the history contracts a thread may report (``--history-mode``), as Codex's ``historyMode``
HISTORY_MODES = ("legacy", "paginated")
#: item kinds ``item/interrupt`` may end while they run
INTERRUPTIBLE = frozenset({"tool", "commandExecution", "subagent"})
#: what an approval step offers unless it says otherwise
APPROVAL_DECISIONS = ("accept", "acceptForSession", "decline")
#: characters of a command step's output kept in its item
MAX_COMMAND_OUTPUT = 16_000
#: Switches a client may turn off in ``initialize``; all are on by default.
CAPABILITIES = {
    "steer": True,
    "nativeFork": True,
    "interrupt": True,
    "rollback": True,
    "structuredQuestions": True,
    "emptyThreads": True,
}

# Thread ids become file names, so anything else is treated as unknown
# rather than risking a path outside HOME/threads.
_THREAD_ID = re.compile(r"sth_[0-9a-f]{32}")


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


class RpcError(Exception):
    """Raised by a method handler; becomes the ``error`` of the reply."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class TurnFailed(Exception):
    """Ends the running turn with status ``failed`` and this message."""


class TurnRecord:
    __slots__ = ("turnId", "input", "status", "output", "context")

    def __init__(self, turnId: str, input: str, status: str, output: str, context: str = "") -> None:
        self.turnId = turnId
        self.input = input
        self.status = status
        self.output = output
        #: context the client injected before the input (an agentd handoff)
        self.context = context


class ThreadRecord:
    __slots__ = ("threadId", "cwd", "turns")

    def __init__(self, threadId: str, cwd: str, turns: list[TurnRecord]) -> None:
        self.threadId = threadId
        self.cwd = cwd
        self.turns = turns

    def to_json(self) -> bytes:
        return _encode({"threadId": self.threadId, "cwd": self.cwd, "turns": [
            {name: getattr(turn, name) for name in TurnRecord.__slots__} for turn in self.turns]})

    @classmethod
    def from_json(cls, data: bytes) -> ThreadRecord:
        """Read a stored thread; ``ValueError`` saying what is wrong with it."""
        value = _decode(data)
        if not isinstance(value, dict):
            raise ValueError("expected an object")
        fields = [_field(value, name, str, "") for name in ("threadId", "cwd")]
        turns = _field(value, "turns", list, "")
        records = []
        for index, turn in enumerate(turns):
            where = f"turns[{index}]"
            if not isinstance(turn, dict):
                raise ValueError(f"expected an object at $.{where}")
            turn_id, text, status, output = (_field(turn, name, str, where) for name in TurnRecord.__slots__[:4])
            context = _field(turn, "context", str, where) if "context" in turn else ""
            records.append(TurnRecord(turn_id, text, status, output, context))
        return cls(fields[0], fields[1], records)


def _field(value: dict[str, Any], name: str, kind: type, where: str) -> Any:
    path = f"$.{where}.{name}" if where else f"$.{name}"
    if name not in value:
        raise ValueError(f"object missing required field `{name}`" + (f" at $.{where}" if where else ""))
    if not isinstance(value[name], kind):
        raise ValueError(f"expected `{kind.__name__}` at `{path}`")
    return value[name]


def _decode(data: bytes | str) -> Any:
    """JSON as msgspec read it: ``NaN``, ``Infinity`` and numbers too large for a float are
    not JSON (``ValueError``), so nothing this agent reads can make it write invalid JSON. Nesting
    deeper than Python's recursion limit is refused too (a ``ValueError``, not a crash of the
    agent: an ``@script`` body comes from whoever typed the message)."""
    try:
        return json.loads(data, parse_constant=_not_json, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text} is out of range")
    return value


def _encode(value: Any) -> bytes:
    """Compact JSON, text as UTF-8 (as msgspec wrote it); a lone surrogate, which UTF-8 cannot
    carry, is written escaped instead."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()


class NativeStore:
    """The agent's own durable state: one JSON file per thread."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.directory = home / "threads"
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def version(self) -> str:
        """The version this agent reports: ``HOME/version`` when present (a
        test's stand-in for an upgraded runtime), else ``1``."""
        try:
            return (self.home / "version").read_text().strip() or "1"
        except FileNotFoundError:
            return "1"

    def load(self, thread_id: str) -> ThreadRecord:
        if not _THREAD_ID.fullmatch(thread_id):
            raise RpcError(THREAD_NOT_FOUND, f"native thread {thread_id} not found")
        try:
            data = (self.directory / f"{thread_id}.json").read_bytes()
        except FileNotFoundError:
            raise RpcError(THREAD_NOT_FOUND, f"native thread {thread_id} not found") from None
        try:
            return ThreadRecord.from_json(data)
        except ValueError as exc:
            raise RpcError(THREAD_CORRUPT, f"native thread {thread_id} is corrupt: {exc}") from None

    def save(self, thread: ThreadRecord) -> None:
        # Write-then-rename, so a crash at any moment leaves either the old
        # or the new file and never a torn one.
        path = self.directory / f"{thread.threadId}.json"
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        # Conversations are private: 0600 whatever the umask.
        with open(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file:
            file.write(thread.to_json())
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)


def _param(params: dict[str, Any], name: str, kind: type, method: str) -> Any:
    value = params.get(name)
    if not isinstance(value, kind):
        raise RpcError(INVALID_PARAMS, f"{method} needs a {kind.__name__} '{name}'")
    return value


class Agent:
    """Answers client requests, owns the loaded threads and the output stream."""

    def __init__(self, home: Path, stdout: int, loop: coop.Loop, *,
                 history_mode: str = "paginated", images: bool = True, late_thread_id: bool = False) -> None:
        self.store = NativeStore(home)
        #: a turn/start that makes a thread is answered only after its turn
        #: ended (``--late-thread-id``), as a runtime that reports a new
        #: session's id only with its result (Claude Code may)
        self.late_thread_id = late_thread_id
        #: whether turns may come with images (``--no-images``: refused)
        self.images = images
        #: the MCP servers each loaded thread was given (``mcpServers``), as a runtime holds its connections
        self.mcp_servers: dict[str, list[dict[str, Any]]] = {}
        #: what its threads report as ``historyMode``; a ``legacy`` one, as
        #: Codex's, cannot be rolled back or forked
        self.history_mode = history_mode
        self.capabilities = dict(CAPABILITIES)
        self.threads: dict[str, ThreadRecord] = {}  # loaded in this process
        self.active: dict[str, Turn] = {}  # threadId -> its running turn
        #: approvals allowed for the session (``acceptForSession``): (threadId, kind, command),
        #: kept in this process only, as a runtime's session-scoped approval cache
        self.allowed_for_session: set[tuple[str, str, str]] = set()
        self._stdout = stdout
        self._loop = loop
        self._request_ids = itertools.count(1)
        #: server requests waiting for the client: id -> the task waiting and its answer, once it came
        self._pending: dict[str, tuple[coop.Task, list[dict[str, Any]]]] = {}
        self._after_reply: list[Callable[[], None]] = []
        self._stopping = False
        self._methods = {
            "initialize": self._initialize,
            "thread/start": self._thread_start,
            "thread/resume": self._thread_resume,
            "thread/fork": self._thread_fork,
            "thread/turns/list": self._thread_turns_list,
            "thread/rollback": self._thread_rollback,
            "turn/start": self._turn_start,
            "turn/interrupt": self._turn_interrupt,
            "item/interrupt": self._item_interrupt,
            "turn/steer": self._turn_steer,
            "shutdown": self._shutdown,
        }

    # -- Output --------------------------------------------------------------

    def send(self, message: dict[str, Any]) -> None:
        line = memoryview(_encode(message) + b"\n")
        # Written whole while this task holds the loop's lock (a cancel lands
        # only where a task waits): an interrupted turn never leaves half a
        # line behind, and lines go out in the order they were sent.
        try:
            while line:
                line = line[os.write(self._stdout, line):]
        except OSError:
            # Nobody is listening any more; wind down as on EOF.
            self._stopping = True
            self._loop.root.cancel()
            return
        # Lets the reader of stdin, or another turn, go between two lines of a long answer.
        coop.yield_to_others()

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"method": method, "params": params})

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a server request and wait for the client's result."""
        request_id = f"srv-{next(self._request_ids)}"
        answer: list[dict[str, Any]] = []
        self._pending[request_id] = (coop.current_task(), answer)
        try:
            self.send({"id": request_id, "method": method, "params": params})
            coop.wait_until(lambda: bool(answer))
            reply = answer[0]
        finally:
            del self._pending[request_id]
        if "error" in reply:
            error = reply["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise TurnFailed(f"the client answered {method} with an error: {message}")
        result = reply.get("result")
        if not isinstance(result, dict):
            raise TurnFailed(f"the client answered {method} without a result object")
        return result

    # -- Input ---------------------------------------------------------------

    def serve(self, stdin: Callable[[], bytes]) -> None:
        """Handle input lines until stdin closes or ``shutdown``."""
        buffer = bytearray()
        while not self._stopping:
            data = stdin()
            if not data:
                if buffer.strip():
                    self._dispatch(bytes(buffer))
                return
            buffer += data
            while not self._stopping and (end := buffer.find(b"\n")) >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                if line.strip():
                    self._dispatch(line)

    def _dispatch(self, line: bytes) -> None:
        try:
            message = _decode(line)
        except ValueError as exc:
            self._warn(f"ignored a line that is not valid JSON: {exc}")
            return
        if not isinstance(message, dict):
            self._warn("ignored a line that is not a JSON object")
        elif "method" in message:
            if "id" in message:
                self._answer(message)
            # Client notifications (such as "initialized") need no action.
        elif "id" in message:
            request_id = message["id"]
            waiting = self._pending.get(request_id) if isinstance(request_id, str) else None
            if waiting is None or waiting[1]:
                self._warn(f"no server request {request_id} is waiting for an answer")
            else:
                task, answer = waiting
                answer.append(message)
                task.wake()
        else:
            self._warn("ignored a message with neither 'method' nor 'id'")

    def _answer(self, message: dict[str, Any]) -> None:
        method, params = message["method"], message.get("params")
        if params is None:
            params = {}
        self._after_reply.clear()
        reply: dict[str, Any] | None
        try:
            handler = self._methods.get(method)
            if handler is None:
                raise RpcError(METHOD_NOT_FOUND, f"unknown method {method!r}")
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, f"{method} params must be an object")
            result = handler(params)
            reply = {"id": message["id"], "result": result}
        except RpcError as exc:
            reply = {"id": message["id"], "error": {"code": exc.code, "message": str(exc)}}
        else:
            if isinstance(result, _LateReply):
                result.send = functools.partial(self.send, {"id": message["id"], "result": result.value})
                reply = None
        if reply is not None:
            self.send(reply)
        # Work that must follow the reply, such as starting a turn: clients
        # learn a turnId before they see any notification about it.
        for action in self._after_reply:
            action()
        self._after_reply.clear()

    def _warn(self, message: str) -> None:
        self.notify("warning", {"message": message})

    # -- Methods -------------------------------------------------------------

    def _require(self, capability: str) -> None:
        if not self.capabilities[capability]:
            raise RpcError(NOT_SUPPORTED, f"{capability} is not supported by this agent instance")

    def _loaded(self, thread_id: str) -> ThreadRecord:
        thread = self.threads.get(thread_id)
        if thread is None:
            raise RpcError(
                THREAD_NOT_FOUND,
                f"native thread {thread_id} is not loaded; start or resume it first",
            )
        return thread

    def _stored(self, thread_id: str) -> ThreadRecord:
        """The thread as loaded here if it is, else as stored on disk."""
        return self.threads.get(thread_id) or self.store.load(thread_id)

    def _active_turn(self, thread_id: str, turn_id: Any) -> Turn:
        turn = self.active.get(thread_id)
        if turn is None or turn.id != turn_id:
            raise RpcError(TURN_CONFLICT, f"turn {turn_id} is not running")
        return turn

    def _new_thread(self, cwd: str, turns: list[TurnRecord]) -> ThreadRecord:
        thread = ThreadRecord(_new_id("sth_"), cwd, turns)
        self.store.save(thread)
        self.threads[thread.threadId] = thread
        return thread

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        switches = params.get("capabilities") or {}
        if not isinstance(switches, dict):
            raise RpcError(INVALID_PARAMS, "initialize capabilities must be an object")
        capabilities = dict(CAPABILITIES)
        for name, value in switches.items():
            # Unknown names are ignored so newer clients can talk to us.
            if name in capabilities:
                if not isinstance(value, bool):
                    raise RpcError(INVALID_PARAMS, f"capability {name} must be true or false")
                capabilities[name] = value
        self.capabilities = capabilities
        return {"agent": "scripted", "version": self.store.version(), "capabilities": capabilities}

    def _require_paginated(self, method: str) -> None:
        if self.history_mode == "legacy":
            raise RpcError(NOT_SUPPORTED, f"{method}: this thread has a legacy history, which cannot be rewritten")

    def _thread_start(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require("emptyThreads")
        thread = self._thread_for_cwd(params, "thread/start")
        self._take_mcp(thread.threadId, params)
        return {"threadId": thread.threadId, "historyMode": self.history_mode}

    def _take_mcp(self, thread_id: str, params: dict[str, Any]) -> None:
        servers = params.get("mcpServers") or []
        for server in _expect(servers, list, "mcpServers must be a list"):
            if not (isinstance(server, dict) and isinstance(server.get("name"), str)):
                raise RpcError(INVALID_PARAMS, "each of mcpServers is {name, type, command | url}")
        self.mcp_servers[thread_id] = list(servers)

    def _thread_for_cwd(self, params: dict[str, Any], method: str) -> ThreadRecord:
        cwd = _param(params, "cwd", str, method)
        if not os.path.isdir(cwd):
            raise RpcError(INVALID_PARAMS, f"cwd {cwd} is not a directory")
        return self._new_thread(os.path.realpath(cwd), [])

    def _thread_resume(self, params: dict[str, Any]) -> dict[str, Any]:
        thread_id = _param(params, "threadId", str, "thread/resume")
        thread = self.threads.get(thread_id)
        if thread is None:
            thread = self.threads[thread_id] = self.store.load(thread_id)
        self._take_mcp(thread_id, params)
        return {"threadId": thread_id, "turnCount": len(thread.turns), "historyMode": self.history_mode}

    def _thread_fork(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require("nativeFork")
        self._require_paginated("thread/fork")
        source = self._stored(_param(params, "threadId", str, "thread/fork"))
        turns = source.turns
        if params.get("lastTurnId") is not None:
            turns = turns[: _turn_index(source, params["lastTurnId"]) + 1]
        fork = self._new_thread(source.cwd, list(turns))
        self._take_mcp(fork.threadId, params)
        return {"threadId": fork.threadId, "historyMode": self.history_mode}

    def _thread_turns_list(self, params: dict[str, Any]) -> dict[str, Any]:
        thread = self._stored(_param(params, "threadId", str, "thread/turns/list"))
        return {
            "turns": [
                {"turnId": turn.turnId, "input": turn.input, "status": turn.status}
                for turn in thread.turns
            ]
        }

    def _thread_rollback(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require("rollback")
        self._require_paginated("thread/rollback")
        thread = self._stored(_param(params, "threadId", str, "thread/rollback"))
        if thread.threadId in self.active:
            raise RpcError(TURN_CONFLICT, f"thread {thread.threadId} has a running turn")
        del thread.turns[_turn_index(thread, params.get("beforeTurnId")) :]
        self.store.save(thread)
        return {"turnCount": len(thread.turns)}

    def _turn_start(self, params: dict[str, Any]) -> dict[str, Any] | _LateReply:
        text = _param(params, "input", str, "turn/start")
        result = {}
        if "threadId" in params:
            thread = self._loaded(_param(params, "threadId", str, "turn/start"))
        else:
            # Without a thread id the turn starts a new thread: the only way
            # to get a thread when emptyThreads is switched off.
            thread = self._thread_for_cwd(params, "turn/start")
            self._take_mcp(thread.threadId, params)
            result["threadId"] = thread.threadId
            result["historyMode"] = self.history_mode
        if thread.threadId in self.active:
            raise RpcError(TURN_CONFLICT, f"thread {thread.threadId} already has a running turn")
        if "threadId" in params and "cwd" in params:
            # As codex: the turn works where the client says (a native fork
            # that works in a workspace of its own); kept from then on.
            cwd = _param(params, "cwd", str, "turn/start")
            if not os.path.isdir(cwd):
                raise RpcError(INVALID_PARAMS, f"cwd {cwd} is not a directory")
            thread.cwd = os.path.realpath(cwd)
        images = self._images(params, "turn/start")
        turn = self.active[thread.threadId] = Turn(self, thread, text)
        turn.images = images
        if "context" in params:
            turn.context = _param(params, "context", str, "turn/start")
        self._after_reply.append(functools.partial(self._loop.spawn, turn.run))
        result["turnId"] = turn.id
        if self.late_thread_id and "threadId" not in params:
            turn.late_reply = _LateReply(result)
            return turn.late_reply
        return result

    def _turn_interrupt(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require("interrupt")
        thread_id = _param(params, "threadId", str, "turn/interrupt")
        self._active_turn(thread_id, params.get("turnId")).scope.cancel()
        return {}

    def _item_interrupt(self, params: dict[str, Any]) -> dict[str, Any]:
        """End one running item (a tool, a command, a subagent) as
        ``interrupted``; the turn goes on with its next step."""
        self._require("interrupt")
        thread_id = _param(params, "threadId", str, "item/interrupt")
        item_id = _param(params, "itemId", str, "item/interrupt")
        turn = self._active_turn(thread_id, params.get("turnId"))
        scope = turn.interruptible.get(item_id)
        if scope is None:
            raise RpcError(INVALID_PARAMS, f"item {item_id} is not a running tool, command or subagent of the turn")
        scope.cancel()
        return {}

    def _turn_steer(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require("steer")
        thread_id = _param(params, "threadId", str, "turn/steer")
        turn = self._active_turn(thread_id, params.get("expectedTurnId"))
        turn.images.extend(self._images(params, "turn/steer"))
        turn.steers.append(_param(params, "input", str, "turn/steer"))
        return {"turnId": turn.id}

    def _images(self, params: dict[str, Any], method: str) -> list[dict[str, Any]]:
        """A turn's images: ``[{type: localImage, mimeType, path}]`` (refused with ``--no-images``)."""
        images = params.get("images") or []
        if images and not self.images:
            raise RpcError(NOT_SUPPORTED, "this agent takes no images (--no-images)")
        for image in _expect(images, list, f"{method} images must be a list"):
            if not (isinstance(image, dict) and image.get("type") == "localImage" and isinstance(image.get("path"), str)
                    and isinstance(image.get("mimeType"), str)):
                raise RpcError(INVALID_PARAMS, f"{method}: each image is {{type: localImage, mimeType, path}}")
        return list(images)

    def _shutdown(self, params: dict[str, Any]) -> dict[str, Any]:
        self._stopping = True
        return {}


def _turn_index(thread: ThreadRecord, turn_id: Any) -> int:
    for index, turn in enumerate(thread.turns):
        if turn.turnId == turn_id:
            return index
    raise RpcError(TURN_NOT_FOUND, f"turn {turn_id} is not in thread {thread.threadId}")


def _chunks(text: str, count: int) -> list[str]:
    """Split text into at most count nearly equal, non-empty pieces."""
    count = min(count, len(text))
    if count == 0:
        return []
    size, extra = divmod(len(text), count)
    pieces, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        pieces.append(text[start:end])
        start = end
    return pieces


def _expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    # bool is an int to Python but never a sensible number in a script.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise TurnFailed(f"{what}, got {_encode(value).decode()}")
    return value


def _number(value: Any, what: str) -> float:
    seconds: float = _expect(value, (int, float), f"{what} must be a number of seconds")
    if seconds < 0:
        raise TurnFailed(f"{what} must not be negative")
    return seconds


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else _encode(value).decode()


class _LateReply:
    """A request's result that is sent later than its handler returned."""

    __slots__ = ("value", "send")

    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value
        #: sends it (set by the dispatcher, which knows the request's id)
        self.send: Callable[[], None] | None = None


class Turn:
    """One turn of a thread: performs its input's steps, reporting each as items.

    Script steps, one JSON object each:

    ``{"say": TEXT, "chunks": N, "repeat": R, "phase": PHASE, "perSecond": P}``
        An agentMessage item streamed in N deltas; its text is TEXT R times
        (default 1), so a test can stream more than a message may carry.
        ``phase`` (``commentary``, ``partial_answer``, ``final_answer``;
        absent: none) is set on the item, as Codex marks its assistant text.
        ``perSecond`` paces the deltas as a model streams tokens: delta i is
        written at i/P seconds after the first (absent: all at once).
    ``{"write": {"path": REL, "content": TEXT}}``
        A fileChange item writing a file under the thread's cwd; with
        ``"binary": true`` CONTENT is base64 and written as bytes.
    ``{"delete": {"path": REL}}``
        A fileChange item removing a file under the thread's cwd.
    ``{"sleep": SECONDS}`` / ``{"hang": true}``
        Wait for a while / until interrupted (``"ignoreInterrupt": true``:
        forever — a runtime that never honours an interrupt).
    ``{"crash": CODE}`` / ``{"fail": MESSAGE}`` (either with ``"once": true``: only the first time)
        Kill the process at once / end the turn ``failed``. With
        ``"once": true`` the crash happens only the first time this thread
        runs this input (a recovered retry then goes on).
    ``{"tool": {"name": NAME, "seconds": S}}`` (or ``"hang": true``)
        A tool item that takes that long; with ``"background": true`` it
        also leaves a process running (its pid in the item), as a tool that
        starts a server would.
    ``{"command": {"argv": [...], "cwd"?: REL}}``
        Run a real command in the thread's cwd (or REL under it), as Codex's
        exec does: a ``commandExecution`` item with its ``exitCode`` and
        ``aggregatedOutput`` (stdout and stderr), ``failed`` when it exits
        non-zero. It gets the agent's environment, without its tool credential.
    ``{"reportHistory": true}``
        Say how many earlier turns the thread holds, and, when the client
        injected context (a handoff) into this turn, how long it is.
    ``{"reportImages": true}``
        Say, one line each, the images that came with the turn (``turn/start
        {images: [{type: localImage, mimeType, path}]}``, and its steers'):
        ``image MIME N bytes sha256=HEX`` of the file it read, or ``no images``.
    ``{"reportMcp": true}``
        Say the MCP servers the thread was given when this process started,
        resumed or forked it (``mcpServers: [{name, type, command | url}]``):
        ``mcp: NAME (stdio COMMAND), NAME (http URL)``, or ``mcp: none``.
    ``{"reportMcpValues": true}``
        Say, one line each, the environment variables and headers the
        thread's MCP servers were given, each value as its SHA-256 only (a
        value may be a token, and what is said is stored):
        ``mcp value NAME env|header KEY sha256=HEX``, or ``mcp values: none``.
    ``{"approval": {"kind": KIND, "command": TEXT, "decisions"?: [...]}}``
        Ask the client via ``item/approval/request`` (offering ``decisions``,
        by default ``accept``, ``acceptForSession``, ``decline``), then say
        the decision. After ``acceptForSession`` the same KIND and TEXT in
        this thread is not asked again while the process lives: it says
        ``approval: acceptForSession (remembered)``.
    ``{"ask": {"questions": [{"id", "question", "options"}]}}``
        Ask via ``item/userInput/request`` and say the answers; without the
        structuredQuestions capability, say the questions instead.
    ``{"plan": [{"step", "status"}]}`` / ``{"proposePlan": MARKDOWN}``
        A ``turn/plan/updated`` notification / a plan item.
    ``{"subagent": {"steps": [...], "thread"?: true}}``
        A subagent item whose steps' items name it as ``parentItemId``. With
        ``thread``, the subagent gets a native thread of its own (named in the
        item's ``receiverThreadIds``, like a Codex ``spawnAgent`` call) that
        holds its steps and what it said; it can be resumed and forked.
    ``{"delegate": {"instructions", "provider"?, "workspace"?, "wait"?, "wake"?}}``
        A ``tool`` item ``delegate_task`` that calls agentd's MCP tool of that
        name on the daemon's MCP endpoint (``AGENTD_MCP_URL``), then says
        ``delegated task OUTCOME: FINAL ANSWER`` (``wait: true``),
        ``delegated task TASK_ID`` (``wait: false``) or ``delegate failed: WHY``.
    ``{"usage": {"inputTokens": N, "outputTokens": M, "cachedInputTokens"?: C, "reasoningTokens"?: R, "model"?: NAME}}``
        A ``thread/tokenUsage/updated`` notification: the tokens this turn's
        model used since the last one (what a real runtime reports).
    ``{"recall": ["WORD", …]}``
        Say, for each word, where this agent can see it: ``native`` (in its
        own thread's earlier turns, inputs or outputs), ``context`` (only in
        context the client injected, in this turn or an earlier one), or
        ``absent`` — one line, ``recall: alpha=native bravo=context
        charlie=absent``. It proves exactly what an agent was given.
    """

    def __init__(self, agent: Agent, thread: ThreadRecord, text: str) -> None:
        self.agent = agent
        self.thread = thread
        self.input = text
        self.id = _new_id("stu_")
        # Created now so turn/interrupt works even before run() begins.
        self.scope = coop.CancelScope()
        self.steers: list[str] = []
        self._open_items: list[dict[str, Any]] = []
        #: running items ``item/interrupt`` may end, by id
        self.interruptible: dict[str, coop.CancelScope] = {}
        self._output: list[str] = []
        self.context = ""
        #: the images that came with the turn (and its steers): ``{type, mimeType, path}``
        self.images: list[dict[str, Any]] = []
        #: the answer to the turn/start that made this turn's thread, sent at its end (``--late-thread-id``)
        self.late_reply: _LateReply | None = None

    def run(self) -> None:
        self._notify("turn/started")
        status, error = "completed", None
        with self.scope:
            try:
                self._run_steps(self._steps(), parent=None)
                self._say_steers()
            except TurnFailed as exc:
                status, error = "failed", str(exc)
        del self.agent.active[self.thread.threadId]
        if self.scope.cancel_called:
            status, error = "interrupted", None
        # Items the failure or interrupt cut short still get completed, so
        # clients never hold an item open forever.
        for item in reversed(self._open_items):
            item["status"] = status
            self._notify("item/completed", item=item)
        self.thread.turns.append(TurnRecord(self.id, self.input, status, "\n".join(self._output), self.context))
        # Durable before it is announced: a client that saw turn/completed
        # may kill us and resume.
        self.agent.store.save(self.thread)
        ending = {"status": status} if error is None else {"status": status, "error": error}
        self._notify("turn/completed", **ending)
        if self.late_reply is not None and self.late_reply.send is not None:
            self.late_reply.send()

    def _steps(self) -> list[Any]:
        first, _, rest = self.input.partition("\n")
        if first.strip() != "@script":
            return [{"say": f"You said: {self.input}", "chunks": 3}]
        try:
            steps = _decode(rest)
        except ValueError as exc:
            raise TurnFailed(f"the @script body is not valid JSON: {exc}") from None
        checked: list[Any] = _expect(steps, list, "the @script body must be a JSON array of steps")
        return checked

    def _notify(self, method: str, **params: Any) -> None:
        self.agent.notify(
            method, {"threadId": self.thread.threadId, "turnId": self.id, **params}
        )

    def _server_request(self, method: str, item: dict[str, Any], **params: Any) -> dict[str, Any]:
        return self.agent.request(
            method,
            {"threadId": self.thread.threadId, "turnId": self.id, "itemId": item["id"], **params},
        )

    @contextmanager
    def _item(self, parent: str | None, kind: str, /, **fields: Any) -> Iterator[dict[str, Any]]:
        """Report an item as started, then as completed when the block ends.

        If the block raises, the item stays open and run() completes it with
        the turn's final status.
        """
        item = {"id": _new_id("sit_"), "type": kind, **fields}
        if parent is not None:
            item["parentItemId"] = parent
        self._notify("item/started", item=item)
        self._open_items.append(item)
        if kind in INTERRUPTIBLE:
            with coop.CancelScope() as scope:
                self.interruptible[item["id"]] = scope
                try:
                    yield item
                finally:
                    del self.interruptible[item["id"]]
            if scope.cancelled_caught:
                item["status"] = "interrupted"
        else:
            yield item
        self._open_items.remove(item)
        if item.get("status") == "inProgress":
            item["status"] = "completed"
        self._notify("item/completed", item=item)

    def _message(self, text: str, parent: str | None, chunks: int = 1, phase: str | None = None,
                 per_second: float | None = None) -> None:
        fields = {"text": ""} if phase is None else {"text": "", "phase": phase}
        with self._item(parent, "agentMessage", **fields) as item:
            start = time.monotonic()
            for index, delta in enumerate(_chunks(text, chunks)):
                if per_second is not None and index:
                    # A fixed schedule from the first delta: a late wake-up
                    # does not slow the whole answer down.
                    coop.sleep_until(start + index / per_second)
                self._notify("item/agentMessage/delta", itemId=item["id"], delta=delta)
            item["text"] = text
        self._output.append(text)

    def _say_steers(self) -> None:
        while self.steers:
            self._message(f"steered: {self.steers.pop(0)}", parent=None)

    def _run_steps(self, steps: list[Any], parent: str | None) -> None:
        for step in steps:
            self._say_steers()
            # Lets an interrupt land between steps that never block.
            coop.checkpoint()
            step = _expect(step, dict, "each script step must be an object")
            kind = next((key for key in step if key in self._STEPS), None)
            if kind is None:
                raise TurnFailed(f"unknown script step {_encode(step).decode()}")
            self._STEPS[kind](self, step, parent)

    # -- Steps ---------------------------------------------------------------

    def _say(self, step: dict[str, Any], parent: str | None) -> None:
        text = _expect(step["say"], str, "say needs text")
        chunks = _expect(step.get("chunks", 1), int, "say chunks must be a whole number")
        repeat = _expect(step.get("repeat", 1), int, "say repeat must be a whole number")
        if chunks < 1 or not 1 <= repeat <= 1024:
            raise TurnFailed("say chunks must be at least 1 and repeat from 1 to 1024")
        phase = step.get("phase")
        if phase is not None and phase not in PHASES:
            raise TurnFailed(f"say phase must be one of {', '.join(PHASES)}")
        per_second = step.get("perSecond")
        if per_second is not None and _expect(per_second, (int, float), "say perSecond must be a number") <= 0:
            raise TurnFailed("say perSecond must be more than 0")
        self._message(text * repeat, parent, chunks, phase, per_second)

    def _write(self, step: dict[str, Any], parent: str | None) -> None:
        spec = _expect(step["write"], dict, "write needs an object with path and content")
        path = _expect(spec.get("path"), str, "write needs a string path")
        content = _expect(spec.get("content"), str, "write needs string content")
        data: bytes | None = None
        if spec.get("binary"):
            try:
                data = base64.b64decode(content, validate=True)
            except ValueError:
                raise TurnFailed(f"write {path}: binary content is not valid base64") from None
        if os.path.isabs(path):
            raise TurnFailed(f"write path {path} is absolute; it must be relative to the thread's cwd")
        if "\0" in path:
            # Not a path any system takes: this step fails, the turn goes on.
            with self._item(parent, "fileChange", path=path, status="inProgress") as item:
                item.update(status="failed", error="the path contains a NUL character")
            return
        cwd = os.path.realpath(self.thread.cwd)
        target = os.path.realpath(os.path.join(cwd, path))
        if os.path.commonpath([cwd, target]) != cwd:
            raise TurnFailed(f"write path {path} escapes the thread's cwd")
        with self._item(parent, "fileChange", path=path, status="inProgress") as item:
            try:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                if data is not None:
                    with open(target, "wb") as bfile:
                        bfile.write(data)
                else:
                    with open(target, "w", encoding="utf-8") as file:
                        file.write(content)
            except OSError as exc:
                # A full disk or a read-only file: this step fails, the turn goes on.
                item.update(status="failed", error=f"could not write {path}: {exc.strerror or exc}")

    def _delete(self, step: dict[str, Any], parent: str | None) -> None:
        spec = _expect(step["delete"], dict, "delete needs an object with a path")
        path = _expect(spec.get("path"), str, "delete needs a string path")
        if os.path.isabs(path) or "\0" in path:
            raise TurnFailed(f"delete path {path!r} must be relative to the thread's cwd")
        cwd = os.path.realpath(self.thread.cwd)
        target = os.path.join(cwd, path)
        if os.path.commonpath([cwd, os.path.realpath(os.path.dirname(target))]) != cwd:
            raise TurnFailed(f"delete path {path} escapes the thread's cwd")
        with self._item(parent, "fileChange", path=path, kind="delete", status="inProgress") as item:
            try:
                os.unlink(target)
            except OSError as exc:
                item.update(status="failed", error=f"could not delete {path}: {exc.strerror or exc}")

    def _usage(self, step: dict[str, Any], parent: str | None) -> None:
        spec = _expect(step["usage"], dict, "usage needs an object of token counts")
        counts = {}
        for key in ("inputTokens", "outputTokens", "cachedInputTokens", "reasoningTokens"):
            value = spec.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise TurnFailed(f"usage {key} must be a whole number >= 0")
            counts[key] = value
        model = spec.get("model")
        if model is not None:
            counts["model"] = _expect(model, str, "usage model must be a string")
        self._notify("thread/tokenUsage/updated", usage=counts)

    def _sleep(self, step: dict[str, Any], parent: str | None) -> None:
        coop.sleep(_number(step["sleep"], "sleep"))

    def _hang(self, step: dict[str, Any], parent: str | None) -> None:
        if step.get("ignoreInterrupt"):
            # A runtime that never honours an interrupt: agentd must escalate.
            with coop.CancelScope(shield=True):
                coop.sleep_forever()
        coop.sleep_forever()

    def _crash(self, step: dict[str, Any], parent: str | None) -> None:
        code = _expect(step["crash"], int, "crash needs an exit code")
        if step.get("once") and not self._first_time("crashed-once"):
            return
        os._exit(code)

    def _first_time(self, what: str) -> bool:
        """Whether this thread runs this input for the first time (for a
        step with ``"once": true``): a marker in the agent's home survives a
        crash, so the retry goes on."""
        digest = hashlib.sha256(f"{self.thread.threadId}\0{self.input}".encode()).hexdigest()[:32]
        marker = self.agent.store.home / what / digest
        if marker.exists():
            return False
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        return True

    def _fail(self, step: dict[str, Any], parent: str | None) -> None:
        # ``"once": true``: only the first time this thread runs this input
        # (a person's retry then goes on).
        if step.get("once") and not self._first_time("failed-once"):
            return
        raise TurnFailed(_as_text(step["fail"]))

    def _tool(self, step: dict[str, Any], parent: str | None) -> None:
        spec = _expect(step["tool"], dict, "tool needs an object with a name")
        name = _expect(spec.get("name"), str, "tool needs a string name")
        seconds = None if spec.get("hang") else _number(spec.get("seconds", 0), "tool seconds")
        with self._item(parent, "tool", name=name, status="inProgress") as item:
            if spec.get("background"):
                # A process the tool leaves running (a dev server): in this
                # runtime's process group, and the person's, not agentd's.
                child = subprocess.Popen(
                    [sys.executable, "-c", "import time; time.sleep(3600)"],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                item["pid"] = child.pid
            if seconds is None:
                coop.sleep_forever()
            else:
                coop.sleep(seconds)

    def _command(self, step: dict[str, Any], parent: str | None) -> None:
        spec = _expect(step["command"], dict, "command needs an object with argv")
        argv = spec.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(arg, str) for arg in argv):
            raise TurnFailed("command argv must be a non-empty list of strings")
        where = _expect(spec.get("cwd", "."), str, "command cwd must be a string")
        if os.path.isabs(where):
            raise TurnFailed(f"command cwd {where} is absolute; it must be relative to the thread's cwd")
        workspace = os.path.realpath(self.thread.cwd)
        cwd = os.path.realpath(os.path.join(workspace, where))
        if os.path.commonpath([workspace, cwd]) != workspace:
            raise TurnFailed(f"command cwd {where} escapes the thread's cwd")
        # A command gets the agent's environment, as a runtime's shell does —
        # but not its tool credential, which is the delegate step's alone.
        env = {name: value for name, value in os.environ.items() if name != TOOL_CREDENTIAL_ENV}
        fields = {"command": shlex.join(argv), "cwd": cwd}
        with self._item(parent, "commandExecution", **fields, status="inProgress") as item:
            try:
                returncode, stdout = _run_process(argv, cwd=cwd, env=env)
            except OSError as exc:
                item.update(status="failed", error=f"{argv[0]}: {exc.strerror or exc}")
                return
            output = stdout.decode("utf-8", errors="replace")
            if len(output) > MAX_COMMAND_OUTPUT:
                output = output[:MAX_COMMAND_OUTPUT] + f"… [{len(output) - MAX_COMMAND_OUTPUT} more characters]"
            item.update(exitCode=returncode, aggregatedOutput=output,
                        status="completed" if returncode == 0 else "failed")

    def _report_history(self, step: dict[str, Any], parent: str | None) -> None:
        count = len(self.thread.turns)
        text = f"history: {count} turn{'' if count == 1 else 's'}"
        if self.context:
            text += f" + {len(self.context)} chars of context"
        self._message(text, parent)

    def _report_images(self, step: dict[str, Any], parent: str | None) -> None:
        lines = []
        for image in self.images:
            try:
                data = Path(image["path"]).read_bytes()
            except OSError as exc:
                lines.append(f"image {image['mimeType']} unreadable: {exc.strerror}")
                continue
            lines.append(f"image {image['mimeType']} {len(data)} bytes sha256={hashlib.sha256(data).hexdigest()}")
        self._message("\n".join(lines) or "no images", parent)

    def _report_mcp(self, step: dict[str, Any], parent: str | None) -> None:
        servers = self.agent.mcp_servers.get(self.thread.threadId) or []
        said = [f"{s['name']} ({s.get('type', 'stdio')} {s.get('url') or s.get('command')})" for s in servers]
        self._message("mcp: " + (", ".join(said) or "none"), parent)

    def _report_mcp_values(self, step: dict[str, Any], parent: str | None) -> None:
        lines = []
        for server in self.agent.mcp_servers.get(self.thread.threadId) or []:
            for kind, key in (("env", "env"), ("header", "headers")):
                for name, value in (server.get(key) or {}).items():
                    lines.append(f"mcp value {server['name']} {kind} {name} "
                                 f"sha256={hashlib.sha256(str(value).encode()).hexdigest()}")
        self._message("\n".join(lines) or "mcp values: none", parent)

    def _recall(self, step: dict[str, Any], parent: str | None) -> None:
        words = _expect(step["recall"], list, "recall needs a list of words")
        for word in words:
            _expect(word, str, "each recall word must be a string")
        turns = self.thread.turns
        native = [text for turn in turns for text in (turn.input, turn.output)]
        context = [turn.context for turn in turns] + [self.context]
        answers = []
        for word in words:
            pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])")
            if any(pattern.search(text) for text in native):
                where = "native"
            elif any(pattern.search(text) for text in context):
                where = "context"
            else:
                where = "absent"
            answers.append(f"{word}={where}")
        self._message("recall: " + " ".join(answers), parent)

    def _approval(self, step: dict[str, Any], parent: str | None) -> None:
        spec = _expect(step["approval"], dict, "approval needs an object with kind and command")
        kind = _expect(spec.get("kind"), str, "approval needs a string kind")
        command = _expect(spec.get("command"), str, "approval needs a string command")
        offered = _expect(spec.get("decisions", list(APPROVAL_DECISIONS)), list, "approval decisions must be a list")
        key = (self.thread.threadId, kind, command)
        if key in self.agent.allowed_for_session:
            self._message("approval: acceptForSession (remembered)", parent)
            return
        fields = {"kind": kind, "command": command}
        with self._item(parent, "approval", **fields, status="inProgress") as item:
            answer = self._server_request("item/approval/request", item, **fields, decisions=offered)
            decision = answer.get("decision")
            if decision not in offered:
                raise TurnFailed(f"approval decision must be one of {', '.join(map(str, offered))}, got {decision}")
            item["decision"] = decision
        if decision == "acceptForSession":
            self.agent.allowed_for_session.add(key)
        self._message(f"approval: {decision}", parent)

    def _ask(self, step: dict[str, Any], parent: str | None) -> None:
        spec = _expect(step["ask"], dict, "ask needs an object with questions")
        questions = _expect(spec.get("questions"), list, "ask needs a list of questions")
        for question in questions:
            _expect(question, dict, "each question must be an object")
            _expect(question.get("id"), str, "each question needs a string id")
            _expect(question.get("question"), str, "each question needs question text")
        if not self.agent.capabilities["structuredQuestions"]:
            # The fallback for agents that can only talk: ask in prose and
            # let the user's next message carry the answers.
            self._message("\n".join(f"? {q['question']}" for q in questions), parent)
            return
        with self._item(parent, "userInput", questions=questions, status="inProgress") as item:
            answer = self._server_request("item/userInput/request", item, questions=questions)
            answers = _expect(answer.get("answers"), dict, "userInput answers must be an object")
            for question in questions:
                if question["id"] not in answers:
                    raise TurnFailed(f"no answer to question {question['id']}")
            item["answers"] = answers
        pairs = (f"{q['id']}={_as_text(answers[q['id']])}" for q in questions)
        self._message("answers: " + ", ".join(pairs), parent)

    def _plan(self, step: dict[str, Any], parent: str | None) -> None:
        plan = _expect(step["plan"], list, "plan needs a list of steps")
        extra = {} if parent is None else {"itemId": parent}
        self._notify("turn/plan/updated", **extra, plan=plan)

    def _propose_plan(self, step: dict[str, Any], parent: str | None) -> None:
        text = _expect(step["proposePlan"], str, "proposePlan needs markdown text")
        with self._item(parent, "plan", text=text):
            pass

    def _subagent(self, step: dict[str, Any], parent: str | None) -> None:
        spec = _expect(step["subagent"], dict, "subagent needs an object with steps")
        steps = _expect(spec.get("steps"), list, "subagent needs a list of steps")
        own = _expect(spec.get("thread", False), bool, "subagent thread must be true or false")
        fields: dict[str, Any] = {}
        if own:
            # A thread of its own, as Codex's spawned agents have: named in
            # the item (``receiverThreadIds``), saved when the subagent ends.
            sub_thread = self.agent._new_thread(self.thread.cwd, [])
            fields = {"tool": "spawnAgent", "receiverThreadIds": [sub_thread.threadId]}
        with self._item(parent, "subagent", status="inProgress", **fields) as item:
            said = len(self._output)
            self._run_steps(steps, parent=item["id"])
            if own:
                sub_thread.turns.append(TurnRecord(_new_id("stu_"), _encode(steps).decode(), "completed",
                                                   "\n".join(self._output[said:])))
                self.agent.store.save(sub_thread)

    def _delegate(self, step: dict[str, Any], parent: str | None) -> None:
        spec = _expect(step["delegate"], dict, "delegate needs an object with instructions")
        arguments = {
            "instructions": _expect(spec.get("instructions"), str, "delegate needs string instructions"),
            "wait": _expect(spec.get("wait", False), bool, "delegate wait must be true or false"),
            "workspace": _expect(spec.get("workspace", "same"), str, "delegate workspace must be same, fork or new"),
        }
        if spec.get("provider") is not None:
            arguments["provider"] = _expect(spec["provider"], str, "delegate provider must be a string")
        if spec.get("wake") is not None:
            arguments["wake"] = _expect(spec["wake"], bool, "delegate wake must be true or false")
        with self._item(parent, "tool", name="delegate_task", status="inProgress") as item:
            error, answer = call_agentd_tool("delegate_task", arguments)
            if error is not None:
                item.update(status="failed", error=error)
            else:
                item["result"] = answer
        if error is not None:
            self._message(f"delegate failed: {error}", parent)
        elif arguments["wait"]:
            final = answer.get("finalAnswer") or "(no answer)"
            self._message(f"delegated task {answer.get('outcome', answer.get('status'))}: {final}", parent)
        else:
            self._message(f"delegated task {answer.get('taskId')}", parent)

    _STEPS = {
        "say": _say,
        "write": _write,
        "delete": _delete,
        "sleep": _sleep,
        "hang": _hang,
        "crash": _crash,
        "fail": _fail,
        "tool": _tool,
        "command": _command,
        "reportHistory": _report_history,
        "reportImages": _report_images,
        "reportMcp": _report_mcp,
        "reportMcpValues": _report_mcp_values,
        "recall": _recall,
        "approval": _approval,
        "ask": _ask,
        "plan": _plan,
        "proposePlan": _propose_plan,
        "subagent": _subagent,
        "delegate": _delegate,
        "usage": _usage,
    }


def call_agentd_tool(tool: str, arguments: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Call one of agentd's MCP tools on the daemon's MCP endpoint, as a
    runtime agentd configured would (``AGENTD_MCP_URL``, through its Unix
    socket ``AGENTD_MCP_SOCKET`` when there is one; the bearer token is
    the session's id and the credential in the file its environment names).
    Returns ``(error, result)``: a tool error's text, or the tool's
    structured result. An interrupted call shuts its connection, which the
    endpoint takes as the call's end."""
    from agentd.protocol.mcp_client import McpHttpError, call_tool, shut

    url, session = os.environ.get("AGENTD_MCP_URL"), os.environ.get("AGENTD_SESSION_ID")
    credential = read_credential()
    if not url or not session or not credential:
        return "agentd's tool is not configured for this agent (its provider has agentd_tool = \"off\")", {}
    opened: list[Any] = []
    try:
        return coop.in_worker(
            functools.partial(call_tool, url, f"{session}.{credential}", tool, arguments,
                              unix=os.environ.get("AGENTD_MCP_SOCKET") or None, opened=opened))
    except (OSError, ValueError, McpHttpError) as exc:
        return str(exc), {}
    finally:
        shut(opened)


def _run_process(argv: list[str], *, cwd: str, env: dict[str, str]) -> tuple[int, bytes]:
    """Run a command to its end: its exit code and its output (stdout and stderr).
    Cancelled, the command is sent SIGTERM, and SIGKILL if it is still there 5 s
    later (as ``trio.run_process`` does), and the cancel goes on once it is gone."""
    process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    try:
        stdout, _ = coop.in_worker(process.communicate)
    except coop.Cancelled:
        process.terminate()
        try:
            coop.blocking(process.wait, 5)
        except subprocess.TimeoutExpired:
            process.kill()
            coop.blocking(process.wait)
        raise
    return process.returncode, stdout


def _serve(home: Path, history_mode: str = "paginated", images: bool = True, late_thread_id: bool = False) -> None:
    loop = coop.Loop()
    agent = Agent(home, 1, loop, history_mode=history_mode, images=images, late_thread_id=late_thread_id)
    # stdin is read by a thread of its own, so that a turn runs while no line comes.
    reader = _Reader(0)
    # EOF or shutdown: running turns simply stop (the loop cancels them); their
    # native state is whatever was saved when earlier turns ended.
    loop.run(functools.partial(agent.serve, reader.receive))


class _Reader:
    """Reads a file descriptor in a thread of its own, for the task that calls :meth:`receive`."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._chunks: list[bytes] = []
        self._waiting: coop.Task | None = None
        self._wanted = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def receive(self) -> bytes:
        """The next bytes read (``b""`` at EOF); cancellable while it waits."""
        self._waiting = coop.current_task()
        self._wanted.set()
        coop.wait_until(lambda: bool(self._chunks))
        return self._chunks.pop(0)

    def _read(self) -> None:
        while True:
            # One read at a time, when the task asks: what comes after a
            # `shutdown` is never read, as before.
            self._wanted.wait()
            self._wanted.clear()
            try:
                data = os.read(self._fd, 65536)
            except OSError:
                data = b""
            self._chunks.append(data)
            if self._waiting is not None:
                self._waiting.wake()
            if not data:
                return


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", required=True, type=Path, help="directory for native state")
    parser.add_argument("--history-mode", choices=HISTORY_MODES, default="paginated",
                        help="the history contract its threads report (legacy: no rollback or fork, as Codex's)")
    parser.add_argument("--no-images", action="store_true", help="refuse turns that come with images")
    parser.add_argument("--late-thread-id", action="store_true",
                        help="answer a turn/start that makes a thread only after its turn ended")
    args = parser.parse_args(argv)
    _serve(args.home, args.history_mode, not args.no_images, args.late_thread_id)


if __name__ == "__main__":
    main()

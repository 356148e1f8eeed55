"""Adapter for Claude Code: one ``claude -p`` stream-json process per session.

The runtime is ``claude -p --input-format stream-json --output-format
stream-json --verbose --include-partial-messages --permission-prompt-tool
stdio`` (plus ``--model`` and the instance's ``args``): user turns go in as
``{"type": "user", "message": …}`` lines, a small control protocol shares the
same stdio (``control_request`` / ``control_response`` both ways), and the
output is ``system``, ``stream_event``, ``assistant``, ``user`` and ``result``
lines. Checked against the pinned 2.1.332 (``tests/integration/test_claude.py``).

This module is the adapter and its connection: the primitives, and the
routing of Claude's lines. The rest lives beside it:

* ``claude_launcher`` — the process lifecycle: a launcher that execs claude
  once a primitive knows whether the session is new, resumed or forked, and
  a fresh launcher when a resume finds nothing;
* ``claude_stream`` — the stream-json ↔ agentd event mapping;
* ``claude_sessions`` — what is read from Claude's session files;
* ``jsonl.RequestCorrelator`` matches our control requests to Claude's
  ``control_response`` lines; ``runtime`` finds the binary, probes its version
  and quotes its stderr.

=========================  ==================================================
agentd                     claude
=========================  ==================================================
ProviderThread             a Claude session id (a UUID; the session lives in
                           ``$CLAUDE_CONFIG_DIR/projects/<cwd>/<id>.jsonl``)
start_first_turn           a new process, ``initialize``, the first user
                           message; the session id is the one ``system/init``
                           reports (Claude has no empty sessions)
resume_thread              a process started with ``--resume <id>``; a missing
                           or corrupt session makes Claude print a ``result``
                           error ("No conversation found …") and exit, which
                           becomes ``NativeThreadMissing``
fork_thread                ``--resume <id> [--resume-session-at <message
                           uuid>] --fork-session --session-id <new>`` (the
                           fork's id is ours, so it is known at once; a turn's
                           last message uuid is its ``TurnCompleted.end_ref``)
ProviderTurn               one user message up to its ``result``; Claude has no
                           turn ids, so the adapter makes one per turn
interrupt_turn             ``control_request {subtype: interrupt}`` — only an
                           acknowledgement: the turn ends with the ``result``
                           (``error_during_execution``), reported
                           ``interrupted`` because we asked
approvals                  ``control_request can_use_tool`` → an ``approval``
                           request (answers: see ``claude_stream``)
items                      text blocks → ``agent_message``; ``tool_use``
                           blocks → ``tool`` / ``subagent`` /
                           ``file_change`` nodes; ``TodoWrite`` →
                           ``PlanUpdated`` (see ``claude_stream``)
=========================  ==================================================

``loaded_threads`` holds the one session the process is bound to; a second
``resume_thread``/``start_first_turn`` for another session on the same
process is refused (agentd runs one session per thread).

**Capabilities**, as checked with the pinned binary: no native steer — a
user message sent during a turn is folded into the running turn when it
arrives while a tool runs (one ``result``), but queued and answered as a turn
of its own when it arrives while the model streams text (a second
``result``, and nothing on the first one says another follows), so the
adapter cannot tell a steer from a new turn; native fork,
interrupt, no rollback, no structured questions (``AskUserQuestion`` arrives
as an ordinary ``can_use_tool`` approval), no empty threads. A config's
``capabilities`` table can only switch these off.

Every primitive waits at most ``request_timeout``. A launch or first turn
that runs out of time kills the process (the session ends and the next
message gets a fresh one instead of a half-started one).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import trio

from .extra_mcp import McpServerSpec

from .base import (
    Capabilities,
    EventSink,
    ProviderAdapter,
    ProviderConnection,
    ProviderRuntimeError,
    ResumeInfo,
)
from .claude_launcher import ClaudeProcess, launcher_command
from .claude_sessions import count_turns, session_cwd
from .claude_stream import (
    StreamMapper,
    control_error_line,
    control_request_line,
    control_response_line,
    result_errors,
    user_line,
)
from ..config import ProviderConfig
from ..regular_files import write_new
from .agentd_tool import AgentdTool
from . import extra_mcp
from .images import ImageInput
from .jsonl import RequestCorrelator, RequestTimeout
from .runtime import RuntimeBinary, StderrLog, parse_version
from .transport import ProcessLike, Spawn, spawn_process

log = logging.getLogger(__name__)

#: the executable, and the versions this adapter was checked against
CLAUDE = RuntimeBinary("claude", supported=((2, 1, 0), (2, 2, 0)), supported_text="2.1.x (checked: 2.1.332)")
PROJECT_LOCAL_BINARY = CLAUDE.project_local
find_binary = CLAUDE.find_binary

#: what Claude can do natively (see the module docstring)
NATIVE_CAPABILITIES = Capabilities(
    steer=False, native_fork=True, interrupt=True, rollback=False, structured_questions=False, empty_threads=False,
)

BASE_ARGS = [
    "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
    "--include-partial-messages", "--permission-prompt-tool", "stdio",
]

_decoder = msgspec.json.Decoder()


def _and_capabilities(native: Capabilities, configured: Capabilities) -> Capabilities:
    values = {
        f.name: getattr(native, f.name) and getattr(configured, f.name) for f in msgspec.structs.fields(Capabilities)
    }
    return Capabilities(**values)


class ClaudeAdapter(ProviderAdapter):
    """A ``kind = "claude"`` provider instance.

    Args:
        config: the ``[providers.NAME]`` table (binary, args, env, model, wrapper, capabilities).
        home: the instance's directory under the data dir (the runtimes' stderr log).
        request_timeout: bound on every primitive's wait (None: unbounded).
        spawn: how the runtime is started (a real process; a recording or replay in tests).

    Raises:
        ProviderRuntimeError: no claude binary can be found.
    """

    kind = "claude"
    #: the shutdown ladder's grace when a session ends (end of input, then SIGTERM, then SIGKILL)
    stop_grace = 2.0

    def __init__(
        self,
        config: ProviderConfig,
        *,
        home: Path,
        request_timeout: float | None = 30.0,
        spawn: Spawn = spawn_process,
    ) -> None:
        self.config = config
        self.name = config.name
        self.home = Path(home)
        self.request_timeout = request_timeout
        self.spawn = spawn
        self.binary = find_binary(config.binary, self.environment())
        self.capabilities = _and_capabilities(NATIVE_CAPABILITIES, config.capabilities)
        #: ``claude --version`` of the binary file as it was (mtime, size) when probed
        self._version: tuple[tuple[int, int], str | None] | None = None
        #: agentd's MCP tool in this instance's sessions (SPEC F9); None: not configured
        self.agentd_tool: AgentdTool | None = None

    # -- describing -------------------------------------------------------------------

    def images_refused(self) -> str | None:
        """Claude takes images: ``image`` content blocks (base64) in the user message."""
        return None

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "binary": str(self.binary), "model": self.config.model}

    async def probe(self) -> dict[str, Any]:
        """``claude --version``, bounded by ``request_timeout`` (30 s when unbounded)."""
        limit = self.request_timeout if self.request_timeout is not None else 30.0
        info = await CLAUDE.probe(self.binary, env=self.environment(), timeout=limit)
        return {"binary": str(self.binary), **info}

    async def runtime_version(self) -> str | None:
        """The binary's ``X.Y.Z`` (``claude --version``), probed once per
        binary file — a replaced file is probed again — so a provider thread's
        frozen settings can be held to it before a session is resumed (F4);
        None when it does not say."""
        try:
            stat = await trio.Path(self.binary).stat()
        except OSError:
            return None
        key = (stat.st_mtime_ns, stat.st_size)
        if self._version is None or self._version[0] != key:
            version = parse_version(str((await self.probe()).get("version") or ""))
            self._version = key, ".".join(map(str, version)) if version else None
        return self._version[1]

    # -- starting -----------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """The runtime's environment: the daemon's, with the config's ``env``
        on top (no overrides: the person's own login in ``~/.claude``)."""
        env = dict(os.environ)
        env.update(self.config.env)
        return env

    def claude_command(self, session_id: str | None = None) -> list[str]:
        """claude with the stream-json flags, ``--model``, agentd's MCP tool
        configured for ``session_id`` and the config's ``args``."""
        command = [str(self.binary), *BASE_ARGS]
        if self.config.model:
            command += ["--model", self.config.model]
        if self.agentd_tool is not None and session_id is not None:
            command += self.agentd_tool.claude_args(session_id, preapproved=self.config.agentd_tool == "allow")
        return command + list(self.config.args)

    def command(self, session_id: str | None = None) -> list[str]:
        """The launcher, which execs :meth:`claude_command` plus the launch args."""
        return launcher_command(list(self.config.wrapper), self.claude_command(session_id))

    def config_dir(self) -> Path:
        """Claude's own directory (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``)."""
        env = self.environment()
        if env.get("CLAUDE_CONFIG_DIR"):
            return Path(env["CLAUDE_CONFIG_DIR"])
        return Path(env.get("HOME") or os.path.expanduser("~")) / ".claude"

    async def open(self, *, session_id: str, emit: EventSink,
                   task_status: trio.TaskStatus[ProviderConnection] = trio.TASK_STATUS_IGNORED) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        connection = ClaudeConnection(self, session_id, emit)
        connection.runtime_version = await self.runtime_version()
        # Once started, open() only returns: the caller learns of the end
        # from the exit status, never from an exception.
        try:
            await connection._claude.run(
                name=session_id,
                started=lambda: task_status.started(connection),
                on_line=connection._dispatch,
                on_exit=connection._fail_waiters,
                grace=self.stop_grace,
            )
        finally:
            # The session's extra MCP servers' file (it may hold secrets) goes with it.
            (self.home / "mcp" / f"{session_id}.json").unlink(missing_ok=True)


# -- the connection ---------------------------------------------------------------------


class ClaudeConnection(ProviderConnection):
    """One agentd session's claude (after its launcher) and its primitives."""

    def __init__(self, adapter: ClaudeAdapter, session_id: str, emit: EventSink) -> None:
        self.adapter = adapter
        self.capabilities = adapter.capabilities
        self._agentd_session = session_id
        self._emit = emit
        self._timeout = adapter.request_timeout
        stderr = StderrLog(adapter.home)

        async def start() -> ProcessLike:
            env = adapter.environment()
            if adapter.agentd_tool is not None:
                env.update(adapter.agentd_tool.runtime_env(session_id))  # where the endpoint is (no secret)
            return await adapter.spawn(adapter.command(session_id), env=env, cwd=None, stderr_path=stderr.path)

        self._claude = ClaudeProcess(start, stderr=stderr, timeout=adapter.request_timeout)
        #: our control requests waiting for claude's control_response
        self._requests = RequestCorrelator(
            ids=(f"agentd_{n}" for n in itertools.count(1)), timeout=adapter.request_timeout,
            timeout_text="claude did not answer {what} within {limit:g}s",
        )
        self._stream = StreamMapper(emit)
        #: set once claude reported the session id (or can no longer report it)
        self._session_known = trio.Event()

    @property
    def loaded_threads(self) -> set[str]:
        """The one session this process is bound to (empty until it is known)."""
        session = self._claude.session
        return {session} if session is not None else set()

    @property
    def pid(self) -> int | None:
        return self._claude.pid

    @property
    def exit_status(self) -> tuple[int | None, int | None]:
        return self._claude.exit_status

    def _fail_waiters(self, why: str) -> None:
        """The process is gone: nothing it was asked will be answered."""
        self._requests.fail_all(why)
        self._stream.permissions.clear()
        self._session_known.set()

    async def stop(self, *, grace: float = 2.0) -> None:
        await self._claude.stop(grace=grace)

    # -- writing -----------------------------------------------------------------------

    async def _write(self, message: dict[str, Any]) -> None:
        await self._claude.write(message)

    async def _control(self, subtype: str, **fields: Any) -> dict[str, Any]:
        """Send a control request and wait (bounded) for its answer."""
        if self._claude.closed:
            raise ProviderRuntimeError(f"cannot send {subtype}: {self._claude.closed}")

        async def send(request_id: str) -> None:
            await self._write(control_request_line(request_id, subtype, fields))

        reply = await self._requests.call(subtype, send)
        if reply.get("subtype") != "success":
            raise ProviderRuntimeError(f"claude refused {subtype}: {reply.get('error') or reply}")
        return reply.get("response") or {}

    async def _initialize(self) -> None:
        await self._control("initialize")

    # -- primitives ---------------------------------------------------------------------

    async def create_thread(self, *, cwd: str, mcp_servers: Sequence[McpServerSpec] = ()) -> str:
        raise ProviderRuntimeError("Claude has no empty sessions: a session starts with its first turn (start_first_turn)")

    async def start_first_turn(
        self, *, text: str, attempt_id: str, cwd: str, context: str | None = None, images: Sequence[ImageInput] = (),
        mcp_servers: Sequence[McpServerSpec] = (),
    ) -> tuple[str, str]:
        claude = self._claude
        if claude.mode is None:
            await claude.launch("new", await self._mcp_args(mcp_servers), cwd, initialize=self._initialize)
        elif claude.mode != "new" or claude.session is not None:
            raise ProviderRuntimeError(f"this claude process already runs session {claude.session}")
        self._session_known = trio.Event()
        turn_id = await self._begin_turn(text, attempt_id, context, images)
        with trio.move_on_after(claude.bound) as scope:
            await self._session_known.wait()
        if scope.cancelled_caught:
            claude.abandon()
            raise RequestTimeout(f"claude did not report its session id within {self._timeout:g}s")
        if claude.session is None:
            raise ProviderRuntimeError(claude.closed or "claude ended the turn without a session id")
        return claude.session, turn_id

    async def resume_thread(self, native_thread_id: str, *, cwd: str, mcp_servers: Sequence[McpServerSpec] = ()) -> ResumeInfo:
        if native_thread_id in self.loaded_threads:
            return ResumeInfo(native_thread_id=native_thread_id)
        await self._claude.launch_existing(
            "resume", native_thread_id, ["--resume", native_thread_id, *await self._mcp_args(mcp_servers)], cwd,
            initialize=self._initialize,
        )
        self._claude.bind(native_thread_id)
        turns = await trio.to_thread.run_sync(count_turns, self.adapter.config_dir(), native_thread_id)
        return ResumeInfo(native_thread_id=native_thread_id, turn_count=turns)

    async def fork_thread(self, native_thread_id: str, *, last_turn_id: str | None,
                          mcp_servers: Sequence[McpServerSpec] = (), cwd: str | None = None) -> str:
        # ``last_turn_id`` is a turn's last message uuid (``TurnCompleted.end_ref``):
        # ``--resume-session-at`` forks there; our own turn ids name nothing in Claude.
        if last_turn_id is not None and last_turn_id.startswith("turn_"):
            raise ProviderRuntimeError(
                f"Claude cannot fork after turn {last_turn_id}: no message uuid was recorded for it"
            )
        # Claude finds a session by the directory it ran in; the primitive has
        # no cwd, so it is read from the session file when that is visible.
        cwd = await trio.to_thread.run_sync(session_cwd, self.adapter.config_dir(), native_thread_id) or os.getcwd()
        fork_id = str(uuid.uuid4())
        at = ["--resume-session-at", last_turn_id] if last_turn_id is not None else []
        await self._claude.launch_existing(
            "fork", native_thread_id,
            ["--resume", native_thread_id, *at, "--fork-session", "--session-id", fork_id, *await self._mcp_args(mcp_servers)],
            cwd, initialize=self._initialize,
        )
        self._claude.bind(fork_id)
        return fork_id

    async def start_turn(
        self, native_thread_id: str, *, text: str, attempt_id: str, cwd: str, context: str | None = None,
        images: Sequence[ImageInput] = (),
    ) -> str:
        if native_thread_id not in self.loaded_threads:
            raise ProviderRuntimeError(
                f"session {native_thread_id} is not loaded in this claude process (resume it first)"
            )
        return await self._begin_turn(text, attempt_id, context, images)

    async def interrupt_turn(self, native_thread_id: str, native_turn_id: str) -> None:
        turn = self._stream.turn
        if turn is None or turn.native_turn_id != native_turn_id:
            return  # that turn has already ended
        turn.interrupt_requested = True
        await self._control("interrupt")

    async def answer_request(self, request_ref: str, response: dict[str, Any]) -> None:
        result = self._stream.answer_permission(request_ref, response)
        await self._write(control_response_line(request_ref, result))

    async def _mcp_args(self, servers: Sequence[McpServerSpec]) -> list[str]:
        """A second ``--mcp-config`` with the thread's extra MCP servers (issue
        26): a 0600 file of this session's, as agentd's own (it may hold
        secrets, which an argv must not)."""
        if not servers:
            return []
        path = self.adapter.home / "mcp" / f"{self._agentd_session}.json"
        document = json.dumps(extra_mcp.claude_config(servers)).encode()

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_new(path, document)

        await trio.to_thread.run_sync(write)
        return ["--mcp-config", str(path)]

    async def _begin_turn(self, text: str, attempt_id: str, context: str | None,
                          images: Sequence[ImageInput] = ()) -> str:
        line = user_line(text, context)
        if images:
            # Ahead of the text, as Anthropic advises; read off the loop (up to 9 MiB).
            blocks = await trio.to_thread.run_sync(lambda: [
                {"type": "image", "source": {"type": "base64", "media_type": image.mime_type, "data": image.base64()}}
                for image in images])
            content = line["message"]["content"]
            content[len(content) - 1:len(content) - 1] = blocks
        if self._claude.closed:
            raise ProviderRuntimeError(f"cannot start a turn: {self._claude.closed}")
        if self._stream.turn is not None:
            raise ProviderRuntimeError(f"claude is still running turn {self._stream.turn.native_turn_id}")
        turn = await self._stream.begin_turn(attempt_id)
        try:
            await self._write(line)
        except ProviderRuntimeError:
            self._stream.drop_turn(turn)
            raise
        return turn.native_turn_id

    # -- reading -----------------------------------------------------------------------

    async def _dispatch(self, line: bytes) -> None:
        """One line claude wrote: to the mapping, the control protocol or the session's bookkeeping."""
        try:
            message = _decoder.decode(line)
        except msgspec.DecodeError:
            log.warning("claude sent a line that is not JSON: %.200r", line)
            return
        if not isinstance(message, dict):
            return
        kind = message.get("type")
        try:
            if kind == "stream_event":
                await self._stream.on_stream_event(message)
            elif kind == "assistant":
                await self._stream.on_assistant(message)
            elif kind == "user":
                await self._stream.on_user(message)
            elif kind == "result":
                await self._on_result(message)
            elif kind == "system":
                await self._on_system(message)
            elif kind == "control_response":
                response = message.get("response") or {}
                self._requests.resolve(str(response.get("request_id")), response)
            elif kind == "control_request":
                await self._on_control_request(message)
            elif kind == "control_cancel_request":
                self._stream.permissions.pop(str(message.get("request_id")), None)
            else:
                log.debug("claude %s line ignored", kind)
        except ProviderRuntimeError as exc:
            log.warning("claude %s line not handled: %s", kind, exc)
        except Exception:  # noqa: BLE001 - one odd line must not end the session
            log.exception("claude %s line not handled", kind)

    async def _on_control_request(self, message: dict[str, Any]) -> None:
        request_id = str(message.get("request_id"))
        request = message.get("request") or {}
        subtype = request.get("subtype")
        if subtype != "can_use_tool":
            await self._write(control_error_line(request_id, f"agentd does not handle {subtype}"))
            return
        await self._stream.on_permission_request(request_id, request)

    async def _on_system(self, message: dict[str, Any]) -> None:
        if message.get("subtype") == "init":
            version = parse_version(str(message.get("claude_code_version") or ""))
            if version is not None:
                self.runtime_version = ".".join(map(str, version))
            session = message.get("session_id")
            if session and self._claude.session is None:
                self._claude.bind(session)
            self._session_known.set()
        else:
            await self._stream.on_system(message)

    async def _on_result(self, message: dict[str, Any]) -> None:
        claude = self._claude
        if self._stream.turn is None:
            # Before any turn: Claude refused to start (e.g. no session to resume).
            claude.early_errors.extend(result_errors(message) or [str(message.get("result") or message.get("subtype"))])
            if message.get("session_id") and claude.mode == "new" and claude.session is None:
                self._session_known.set()
            return
        if claude.session is None and message.get("session_id"):
            claude.bind(message["session_id"])
        self._session_known.set()
        await self._stream.on_result(message)

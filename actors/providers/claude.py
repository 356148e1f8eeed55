"""Adapter for Claude Code: one ``claude -p`` stream-json process per session.

The runtime is ``claude -p --input-format stream-json --output-format
stream-json --verbose --include-partial-messages --permission-prompt-tool
stdio`` (plus ``--model`` and the instance's ``args``): user turns go in as
``{"type": "user", "message": …}`` lines, a small control protocol shares the
same stdio (``control_request`` / ``control_response`` both ways), and the
output is ``system``, ``stream_event``, ``assistant``, ``user`` and ``result``
lines. Checked against the pinned 2.1.332 (``tests/integration/test_claude.py``).

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
fork_thread                ``--resume <id> --fork-session --session-id <new>``
                           (the fork's id is ours, so it is known at once;
                           forks only at the end of the source session)
ProviderTurn               one user message up to its ``result``; Claude has no
                           turn ids, so the adapter makes one per turn
interrupt_turn             ``control_request {subtype: interrupt}`` — only an
                           acknowledgement: the turn ends with the ``result``
                           (``error_during_execution``), reported
                           ``interrupted`` because we asked
approvals                  ``control_request can_use_tool`` → an ``approval``
                           request; ``accept`` → ``{behavior: allow,
                           updatedInput}``, ``acceptForSession`` → the same
                           plus Claude's ``permission_suggestions``,
                           ``decline`` → ``deny``, ``cancel`` → ``deny`` with
                           ``interrupt: true``
items                      text blocks (streamed ``text_delta``s) →
                           ``agent_message``; ``tool_use`` blocks → ``tool``
                           nodes titled with the tool name (``Task``/``Agent``
                           → ``subagent``, file-writing tools →
                           ``file_change``), closed by their ``tool_result``;
                           ``TodoWrite`` → ``PlanUpdated``
=========================  ==================================================

**One process, bound late.** Claude binds a process to one session at start
(``--resume`` is a command-line flag; there is no control request to switch
sessions), but ``ProviderAdapter.open`` runs before anyone knows whether the
session will start a new conversation, resume one or fork one. So ``open``
starts a *launcher*: a few lines of Python (``sys.executable -I -S -c``) that
block reading one line from stdin, ``{"type": "agentd_launch", "args": [...],
"cwd": ...}``, then ``chdir`` and ``exec`` claude with the base command plus
those args. The first primitive that knows (``start_first_turn``: no extra
args; ``resume_thread``: ``--resume ID``; ``fork_thread``: ``--resume ID
--fork-session --session-id NEW``) writes that line, and the rest of stdin is
Claude's. Because ``exec`` keeps the pid, the pid the session manager records
at ``session.ready`` (``daemon.status``, orphan cleanup after a daemon crash)
is Claude's own, and ``config.wrapper`` (e.g. ``unshare -rn …``) still goes in
front of everything. ``loaded_threads`` holds the one session the process is
bound to; a second ``resume_thread``/``start_first_turn`` for another session
on the same process is refused (agentd runs one session per thread).

When a resume finds no session, Claude exits: the connection then starts a
fresh launcher in the same agentd session before raising
``NativeThreadMissing``, so the caller's fallback (``start_first_turn`` with a
context handoff) works on the same connection. That replacement process has a
new pid, which the session record (written once, at ``session.ready``) does
not learn; it only happens on that failure path.

The launcher is the daemon's own Python, so a ``wrapper`` must leave it
reachable (``unshare``, ``nice``, ``env``, ``systemd-run`` do; a wrapper that
runs claude in another filesystem, e.g. a container, is not supported).

**Capabilities**, as checked with the pinned binary: no native steer — a
user message sent during a turn is folded into the running turn when it
arrives while a tool runs (one ``result``), but queued and answered as a turn
of its own when it arrives while the model streams text (a second
``result``, and nothing on the first one says another follows), so the
adapter cannot tell a steer from a new turn; native fork,
interrupt, no rollback, no structured questions (``AskUserQuestion`` arrives
as an ordinary ``can_use_tool`` approval), no empty threads. A config's
``capabilities`` table can only switch these off.

**What the runtime does, as seen** (and what the mapping makes of it):

* an interrupt during streaming: Claude sends the partial ``assistant``
  message marked ``aborted``, a synthetic ``content_block_stop`` and a
  ``result`` ``error_during_execution``; the aborted text item is left open,
  so agentd's completion barrier closes it as ``interrupted``;
* an interrupt while Claude waits on ``can_use_tool``: Claude sends
  ``control_cancel_request`` (the request can no longer be answered), refuses
  the tool (its node ends ``interrupted``) and ends the turn;
* Claude writes a session's file only when its first turn has ended: a crash
  during the first turn leaves nothing to resume, so recovery gets
  ``NativeThreadMissing`` and starts a replacement session (with a context
  handoff when there is history);
* with a bad base URL Claude retries the model API for over a minute instead
  of failing; each retry (``system/api_retry``) becomes a ``runtime.warning``,
  and an interrupt ends the turn.

Every primitive waits at most ``request_timeout``. A launch or first turn
that runs out of time kills the process (the session ends and the next
message gets a fresh one instead of a half-started one).
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio

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
)
from .config import ProviderConfig
from .jsonl import RequestCorrelator, RequestTimeout, runtime_lines, stop_process
from .runtime import RuntimeBinary, StderrLog, parse_version  # noqa: F401 - parse_version re-exported
from .transport import ProcessLike, Spawn, exit_status, spawn_process

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

#: reads one JSON line byte by byte (the rest of stdin is Claude's), then chdir + exec
LAUNCHER = (
    "import json,os,sys\n"
    "line=b''\n"
    "while not line.endswith(b'\\n'):\n"
    " c=os.read(0,1)\n"
    " if not c: sys.exit(0)\n"
    " line+=c\n"
    "m=json.loads(line)\n"
    "os.chdir(m['cwd'])\n"
    "a=sys.argv[1:]+m['args']\n"
    "os.execvp(a[0],a)\n"
)

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
#: how long the output may keep flowing after the process exited (a grandchild may hold the pipe)
DRAIN_AFTER_EXIT = 1.0
_MISSING_PATTERNS = ("no conversation found", "session id", "not a uuid")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

_encoder = msgspec.json.Encoder()
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

    # -- describing -------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "binary": str(self.binary), "model": self.config.model}

    async def probe(self) -> dict[str, Any]:
        """``claude --version``, bounded by ``request_timeout`` (30 s when unbounded)."""
        limit = self.request_timeout if self.request_timeout is not None else 30.0
        info = await CLAUDE.probe(self.binary, env=self.environment(), timeout=limit)
        return {"binary": str(self.binary), **info}

    # -- starting -----------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        """The runtime's environment: the daemon's, with the config's ``env``
        on top (no overrides: the person's own login in ``~/.claude``)."""
        env = dict(os.environ)
        env.update(self.config.env)
        return env

    def claude_command(self) -> list[str]:
        command = [str(self.binary), *BASE_ARGS]
        if self.config.model:
            command += ["--model", self.config.model]
        return command + list(self.config.args)

    def command(self) -> list[str]:
        """The launcher, which execs :meth:`claude_command` plus the launch args."""
        return [*self.config.wrapper, sys.executable, "-I", "-S", "-c", LAUNCHER, *self.claude_command()]

    def config_dir(self) -> Path:
        env = self.environment()
        if env.get("CLAUDE_CONFIG_DIR"):
            return Path(env["CLAUDE_CONFIG_DIR"])
        return Path(env.get("HOME") or os.path.expanduser("~")) / ".claude"

    async def open(self, *, session_id: str, emit: EventSink, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        connection = ClaudeConnection(self, session_id, emit)
        await connection._spawn()
        try:
            task_status.started(connection)
            # Once started, open() only returns: the caller learns of the end
            # from the exit status, never from an exception.
            while True:
                await connection._serve_process()
                if not connection._respawn_wanted:
                    break
                connection._respawn_wanted = False
                try:
                    await connection._spawn()
                except ProviderRuntimeError as exc:
                    log.warning("claude session %s: no replacement launcher: %s", session_id, exc)
                    break
                connection._respawned.set()
        finally:
            await stop_process(connection._process, polite=connection._polite_stop, grace=self.stop_grace)
            connection._exit_status = exit_status(connection._process.returncode)
            connection._fail_waiters("the claude session ended")
            connection._respawned.set()


# -- the connection ---------------------------------------------------------------------


@dataclass
class _Turn:
    attempt_id: str
    native_turn_id: str
    interrupt_requested: bool = False


@dataclass
class _PendingPermission:
    tool_use_id: str | None
    tool_name: str
    input: dict[str, Any]
    suggestions: list[Any] = field(default_factory=list)


class ClaudeConnection(ProviderConnection):
    """One claude process (after its launcher) and its primitives."""

    def __init__(self, adapter: ClaudeAdapter, session_id: str, emit: EventSink) -> None:
        self.adapter = adapter
        self.capabilities = adapter.capabilities
        self.loaded_threads: set[str] = set()
        self._agentd_session = session_id
        self._emit = emit
        self._timeout = adapter.request_timeout
        self._process: ProcessLike | None = None
        self._exit_status: tuple[int | None, int | None] = (None, None)
        self._send_lock = trio.Lock()
        #: our control requests waiting for claude's control_response
        self._requests = RequestCorrelator(
            ids=(f"agentd_{n}" for n in itertools.count(1)), timeout=self._timeout,
            timeout_text="claude did not answer {what} within {limit:g}s",
        )
        self._stderr = StderrLog(adapter.home)
        # the current process
        self._launch_mode: str | None = None  # None: only the launcher runs; "new" | "resume" | "fork"
        self._initialized = False
        self._closed: str | None = None
        self._early_errors: list[str] = []
        self._respawn_wanted = False
        self._respawned = trio.Event()
        self._exited = trio.Event()
        self._exit_was_missing = False
        # the session and its turn
        self._session: str | None = None
        self._session_known = trio.Event()
        self._turn: _Turn | None = None
        self._permissions: dict[str, _PendingPermission] = {}
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

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def exit_status(self) -> tuple[int | None, int | None]:
        return self._exit_status

    # -- the process ---------------------------------------------------------------------

    async def _spawn(self) -> None:
        self._stderr.mark()
        try:
            self._process = await self.adapter.spawn(
                self.adapter.command(), env=self.adapter.environment(), cwd=None, stderr_path=self._stderr.path,
            )
        except OSError as exc:
            raise ProviderRuntimeError(f"claude could not be started: {exc}") from exc
        self._launch_mode = None
        self._initialized = False
        self._closed = None
        self._early_errors = []
        self._exited = trio.Event()

    async def _serve_process(self) -> None:
        """Read the current process's output until it has exited."""
        process = self._process
        assert process is not None
        output_done = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._read_output, process, output_done)
            await process.wait()
            with trio.move_on_after(DRAIN_AFTER_EXIT):
                await output_done.wait()
            nursery.cancel_scope.cancel()
        why = self._exit_reason(process)
        self._closed = why
        missing = self._launch_mode in ("resume", "fork") and not self._initialized and self._missing_session()
        self._fail_waiters(why)
        self._exit_was_missing = missing
        if missing:
            # Claude found no session to resume: keep the agentd session with a
            # fresh launcher, so the caller can start a replacement on it.
            self._respawn_wanted = True
            self._respawned = trio.Event()
            self._session = None
            self.loaded_threads.clear()
        self._exited.set()

    def _exit_reason(self, process: ProcessLike) -> str:
        code, sig = exit_status(process.returncode)
        how = f"exit code {code}" if code is not None else f"signal {sig}"
        detail = "; ".join(self._early_errors) or self._stderr.tail(500)
        return f"claude exited ({how})" + (f": {detail}" if detail else "")

    def _missing_session(self) -> bool:
        text = ("; ".join(self._early_errors) + " " + self._stderr.tail(500)).lower()
        return any(p in text for p in _MISSING_PATTERNS)

    def _fail_waiters(self, why: str) -> None:
        self._requests.fail_all(why)
        self._permissions.clear()
        self._session_known.set()

    async def _polite_stop(self) -> None:
        # End of input: the launcher exits, and so does an idle Claude.
        if self._process is not None:
            await self._process.stdin.aclose()

    async def stop(self, *, grace: float = 2.0) -> None:
        if self._process is not None:
            await stop_process(self._process, polite=self._polite_stop, grace=grace)

    # -- writing -----------------------------------------------------------------------

    def _bound(self) -> float:
        return float("inf") if self._timeout is None else self._timeout

    async def _write(self, message: dict[str, Any]) -> None:
        if self._closed:
            raise ProviderRuntimeError(f"cannot write to claude: {self._closed}")
        data = _encoder.encode(message) + b"\n"
        with trio.move_on_after(self._bound()) as scope:
            async with self._send_lock:
                try:
                    await self._process.stdin.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    raise ProviderRuntimeError(f"claude's input is closed ({exc.__class__.__name__})") from exc
        if scope.cancelled_caught:
            raise RequestTimeout(f"claude did not read its input within {self._timeout:g}s")

    async def _control(self, subtype: str, **fields: Any) -> dict[str, Any]:
        """Send a control request and wait (bounded) for its answer."""
        if self._closed:
            raise ProviderRuntimeError(f"cannot send {subtype}: {self._closed}")

        async def send(request_id: str) -> None:
            await self._write({"type": "control_request", "request_id": request_id, "request": {"subtype": subtype, **fields}})

        reply = await self._requests.call(subtype, send)
        if reply.get("subtype") != "success":
            raise ProviderRuntimeError(f"claude refused {subtype}: {reply.get('error') or reply}")
        return reply.get("response") or {}

    async def _launch(self, mode: str, args: list[str], cwd: str) -> None:
        """Exec claude in the waiting launcher and initialize the control protocol."""
        if self._launch_mode is not None:
            bound = self._session or "a new session"
            raise ProviderRuntimeError(f"this claude process is already running {bound}; one session per process")
        self._launch_mode = mode
        try:
            await self._write({"type": "agentd_launch", "args": args, "cwd": cwd})
            await self._control("initialize")
        except RequestTimeout:
            self._abandon()
            raise
        self._initialized = True

    def _abandon(self) -> None:
        """End a process left in an unknown state (a bounded wait ran out), so
        the session ends and the next message gets a fresh one instead of this
        half-started one."""
        process = self._process
        if process is not None and process.returncode is None:
            try:
                process.kill()
            except ProcessLookupError:
                pass

    async def _launch_existing(self, mode: str, native_thread_id: str, args: list[str], cwd: str) -> None:
        """Launch for a resume or fork: a missing session is NativeThreadMissing."""
        if not _UUID.fullmatch(native_thread_id):
            raise NativeThreadMissing(f"{native_thread_id!r} is not a Claude session id")
        exited = self._exited  # this process's exit, whatever replaces it meanwhile
        try:
            await self._launch(mode, args, cwd)
        except RequestTimeout:
            raise
        except ProviderRuntimeError as exc:
            # Claude refused and is exiting: wait until its exit is handled,
            # and for the replacement launcher, so the caller's fallback finds one.
            with trio.move_on_after(min(self._bound(), 10.0)):
                await exited.wait()
            if not (exited.is_set() and self._exit_was_missing):
                raise
            with trio.move_on_after(self._bound()):
                await self._respawned.wait()
            detail = "; ".join(self._early_errors) or str(exc)
            raise NativeThreadMissing(f"claude cannot resume session {native_thread_id}: {detail}") from exc

    # -- primitives ---------------------------------------------------------------------

    async def create_thread(self, *, cwd: str) -> str:
        raise ProviderRuntimeError("Claude has no empty sessions: a session starts with its first turn (start_first_turn)")

    async def start_first_turn(
        self, *, text: str, attempt_id: str, cwd: str, context: str | None = None
    ) -> tuple[str, str]:
        if self._launch_mode is None:
            await self._launch("new", [], cwd)
        elif self._launch_mode != "new" or self._session is not None:
            raise ProviderRuntimeError(f"this claude process already runs session {self._session}")
        self._session_known = trio.Event()
        turn_id = await self._begin_turn(text, attempt_id, context)
        with trio.move_on_after(self._bound()) as scope:
            await self._session_known.wait()
        if scope.cancelled_caught:
            self._abandon()
            raise RequestTimeout(f"claude did not report its session id within {self._timeout:g}s")
        if self._session is None:
            raise ProviderRuntimeError(self._closed or "claude ended the turn without a session id")
        return self._session, turn_id

    async def resume_thread(self, native_thread_id: str, *, cwd: str) -> ResumeInfo:
        if native_thread_id in self.loaded_threads:
            return ResumeInfo(native_thread_id=native_thread_id)
        await self._launch_existing("resume", native_thread_id, ["--resume", native_thread_id], cwd)
        self._bind(native_thread_id)
        turns = await trio.to_thread.run_sync(self._count_turns, native_thread_id)
        return ResumeInfo(native_thread_id=native_thread_id, turn_count=turns)

    async def fork_thread(self, native_thread_id: str, *, last_turn_id: str | None) -> str:
        if last_turn_id is not None:
            raise ProviderRuntimeError("Claude forks a session only at its end; pass last_turn_id=None")
        # Claude finds a session by the directory it ran in; the primitive has
        # no cwd, so it is read from the session file when that is visible.
        cwd = await trio.to_thread.run_sync(self._session_cwd, native_thread_id) or os.getcwd()
        fork_id = str(uuid.uuid4())
        await self._launch_existing(
            "fork", native_thread_id, ["--resume", native_thread_id, "--fork-session", "--session-id", fork_id], cwd,
        )
        self._bind(fork_id)
        return fork_id

    async def start_turn(
        self, native_thread_id: str, *, text: str, attempt_id: str, cwd: str, context: str | None = None
    ) -> str:
        if native_thread_id not in self.loaded_threads:
            raise ProviderRuntimeError(
                f"session {native_thread_id} is not loaded in this claude process (resume it first)"
            )
        return await self._begin_turn(text, attempt_id, context)

    async def interrupt_turn(self, native_thread_id: str, native_turn_id: str) -> None:
        turn = self._turn
        if turn is None or turn.native_turn_id != native_turn_id:
            return  # that turn has already ended
        turn.interrupt_requested = True
        await self._control("interrupt")

    async def answer_request(self, request_ref: str, response: dict[str, Any]) -> None:
        pending = self._permissions.pop(request_ref, None)
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
        await self._write({
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request_ref, "response": result},
        })

    # -- turns ---------------------------------------------------------------------------

    def _bind(self, native_thread_id: str) -> None:
        self._session = native_thread_id
        self.loaded_threads = {native_thread_id}

    async def _begin_turn(self, text: str, attempt_id: str, context: str | None) -> str:
        if self._closed:
            raise ProviderRuntimeError(f"cannot start a turn: {self._closed}")
        if self._turn is not None:
            raise ProviderRuntimeError(f"claude is still running turn {self._turn.native_turn_id}")
        turn = self._turn = _Turn(attempt_id=attempt_id, native_turn_id=f"turn_{uuid.uuid4().hex[:16]}")
        content = []
        if context:
            content.append({"type": "text", "text": context})
        content.append({"type": "text", "text": text})
        # Reported before the message goes in: every event of the turn comes after it.
        await self._emit(TurnStarted(attempt_id=attempt_id, native_turn_id=turn.native_turn_id))
        try:
            await self._write({"type": "user", "message": {"role": "user", "content": content}})
        except ProviderRuntimeError:
            if self._turn is turn:
                self._turn = None
            raise
        return turn.native_turn_id

    def _attempt(self) -> str | None:
        return self._turn.attempt_id if self._turn is not None else None

    def _session_file(self, session: str) -> Path | None:
        try:
            paths = list((self.adapter.config_dir() / "projects").glob(f"*/{session}.jsonl"))
        except OSError:
            return None
        return paths[0] if len(paths) == 1 else None

    def _session_entries(self, session: str, marker: bytes):
        path = self._session_file(session)
        if path is None:
            return
        try:
            with open(path, "rb") as f:
                for line in f:
                    if marker in line:
                        try:
                            entry = _decoder.decode(line)
                        except msgspec.DecodeError:
                            continue
                        if isinstance(entry, dict):
                            yield entry
        except OSError:
            return

    def _count_turns(self, session: str) -> int | None:
        """Best effort: the user prompts in Claude's session file (None when it
        cannot be read here, e.g. behind a wrapper with its own filesystem)."""
        prompts = {
            e["promptId"] for e in self._session_entries(session, b'"promptId"')
            if e.get("type") == "user" and not e.get("isSidechain") and isinstance(e.get("promptId"), str)
        }
        return len(prompts) or None

    def _session_cwd(self, session: str) -> str | None:
        for entry in self._session_entries(session, b'"cwd"'):
            if isinstance(entry.get("cwd"), str):
                return entry["cwd"]
        return None

    # -- reading -----------------------------------------------------------------------

    async def _read_output(self, process: ProcessLike, done: trio.Event) -> None:
        try:
            async for line in runtime_lines(process.stdout, "claude"):
                await self._dispatch(line)
        finally:
            done.set()

    async def _dispatch(self, line: bytes) -> None:
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
                await self._on_stream_event(message)
            elif kind == "assistant":
                await self._on_assistant(message)
            elif kind == "user":
                await self._on_user(message)
            elif kind == "result":
                await self._on_result(message)
            elif kind == "system":
                await self._on_system(message)
            elif kind == "control_response":
                self._on_control_response(message.get("response") or {})
            elif kind == "control_request":
                await self._on_control_request(message)
            elif kind == "control_cancel_request":
                self._permissions.pop(str(message.get("request_id")), None)
            else:
                log.debug("claude %s line ignored", kind)
        except ProviderRuntimeError as exc:
            log.warning("claude %s line not handled: %s", kind, exc)
        except Exception:  # noqa: BLE001 - one odd line must not end the session
            log.exception("claude %s line not handled", kind)

    def _on_control_response(self, response: dict[str, Any]) -> None:
        self._requests.resolve(str(response.get("request_id")), response)

    async def _on_control_request(self, message: dict[str, Any]) -> None:
        request_id = str(message.get("request_id"))
        request = message.get("request") or {}
        subtype = request.get("subtype")
        if subtype != "can_use_tool":
            await self._write({"type": "control_response", "response": {
                "subtype": "error", "request_id": request_id, "error": f"agentd does not handle {subtype}"}})
            return
        tool_input = request.get("input") or {}
        tool_use_id = request.get("tool_use_id")
        self._permissions[request_id] = _PendingPermission(
            tool_use_id=tool_use_id, tool_name=str(request.get("tool_name", "")), input=tool_input,
            suggestions=list(request.get("permission_suggestions") or []),
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
        await self._emit(RequestOpened(
            attempt_id=self._attempt(), request_ref=request_id, kind="approval", item_id=tool_use_id, detail=detail,
        ))

    async def _on_system(self, message: dict[str, Any]) -> None:
        subtype = message.get("subtype")
        if subtype == "init":
            session = message.get("session_id")
            if session and self._session is None:
                self._bind(session)
            self._session_known.set()
        elif subtype == "api_retry":
            status = message.get("error_status")
            error = str(message.get("error") or "error") + (f" (HTTP {status})" if status else "")
            delay = message.get("retry_delay_ms")
            later = f", next in {delay / 1000:.1f}s" if isinstance(delay, (int, float)) else ""
            await self._emit(RuntimeWarning_(
                attempt_id=self._attempt(),
                message=f"claude is retrying the model API (attempt {message.get('attempt')} of "
                        f"{message.get('max_retries')}{later}): {error}",
            ))

    async def _on_stream_event(self, message: dict[str, Any]) -> None:
        event = message.get("event") or {}
        kind = event.get("type")
        parent = message.get("parent_tool_use_id")
        attempt_id = self._attempt()
        if kind == "message_start":
            self._streaming[parent] = (event.get("message") or {}).get("id") or message.get("api_message_id") or ""
            return
        message_id = self._streaming.get(parent) or message.get("api_message_id") or ""
        index = event.get("index", 0)
        if kind == "content_block_start":
            block = event.get("content_block") or {}
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
                await self._emit(ItemCompleted(attempt_id=attempt_id, item_id=item_id, item_type="agent_message"))

    async def _on_assistant(self, message: dict[str, Any]) -> None:
        body = message.get("message") or {}
        message_id = body.get("id") or ""
        parent = message.get("parent_tool_use_id")
        attempt_id = self._attempt()
        if message.get("aborted"):
            self._aborted_messages.add(message_id)
        for index, block in enumerate(body.get("content") or []):
            kind = block.get("type")
            if kind == "tool_use":
                await self._tool_started(block, parent, attempt_id)
            elif kind == "text" and message_id not in self._streamed_messages and block.get("text"):
                # Not streamed (no partial messages for this one): the whole text at once.
                item_id = f"{message_id}:a{index}"
                await self._emit(ItemStarted(attempt_id=attempt_id, item_id=item_id, item_type="agent_message", parent_item_id=parent))
                await self._emit(TextDelta(attempt_id=attempt_id, item_id=item_id, delta=block["text"]))
                await self._emit(ItemCompleted(attempt_id=attempt_id, item_id=item_id, item_type="agent_message"))

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

    async def _on_user(self, message: dict[str, Any]) -> None:
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
            elif failed and self._turn is not None and self._turn.interrupt_requested:
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

    async def _on_result(self, message: dict[str, Any]) -> None:
        subtype = message.get("subtype")
        errors = [str(e) for e in message.get("errors") or []]
        turn = self._turn
        if turn is None:
            # Before any turn: Claude refused to start (e.g. no session to resume).
            self._early_errors.extend(errors or [str(message.get("result") or subtype)])
            if message.get("session_id") and self._launch_mode == "new" and self._session is None:
                self._session_known.set()
            return
        if self._session is None and message.get("session_id"):
            self._bind(message["session_id"])
        self._session_known.set()
        self._turn = None
        self._open_text.clear()
        self._streaming.clear()
        self._streamed_messages.clear()
        self._aborted_messages.clear()
        self._permissions.clear()
        if subtype == "success" and not message.get("is_error"):
            status, error = "completed", None
        elif turn.interrupt_requested and subtype == "error_during_execution":
            status, error = "interrupted", None
        else:
            status = "failed"
            error = "; ".join(e for e in errors if not e.startswith("[ede_diagnostic]")) or str(
                message.get("result") or subtype or "claude reported an error"
            )
        await self._emit(TurnCompleted(attempt_id=turn.attempt_id, native_turn_id=turn.native_turn_id, status=status, error=error))


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return "" if content is None else str(content)

"""Adapter for any Agent Client Protocol agent: ``kind = "acp"``.

ACP (JSON-RPC 2.0 over stdio, protocol version 1) is what editors speak to
coding agents — Gemini CLI, OpenCode, Goose, Claude and Codex through their
ACP adapters, and more. agentd is the ACP *client*: it starts the configured
``binary`` with its ``args`` (one process per agentd session), and speaks the
protocol itself, in trio (``acp_rpc``) with msgspec Structs of the schema
(``acp_wire``) — the official Python SDK is asyncio and pydantic, which the
daemon does not run; it is used only by the tests' fake agent.

=========================  ==================================================
agentd                     ACP
=========================  ==================================================
open                       start the process, ``initialize`` (agentd
                           advertises ``fs`` read/write, ``terminal`` and
                           form ``elicitation``)
create_thread              ``session/new {cwd, mcpServers}`` — agentd's tool
                           among the servers unless ``agentd_tool = "off"``;
                           then ``session/set_mode`` / ``session/set_model``
                           when the config names a ``mode`` / ``model``
resume_thread              ``session/resume`` where the agent advertises
                           ``sessionCapabilities.resume`` (no replay), else
                           ``session/load`` (where ``loadSession``); the
                           history it replays is history, never new nodes;
                           without either the thread is missing natively
                           and agentd hands the conversation over (F4)
start_turn                 ``session/prompt``; its answer's ``stopReason``
                           ends the turn (``end_turn`` completed,
                           ``cancelled`` interrupted, ``refusal`` /
                           ``max_tokens`` / ``max_turn_requests`` completed
                           with the reason said)
interrupt_turn             ``session/cancel`` (pending permissions answered
                           ``cancelled``); the turn ends with the prompt's
                           answer
steer                      ``_session/steering`` where the agent's
                           ``_meta.steering.supported``, else a second
                           ``session/prompt`` where it queues prompts
                           (``_meta.claudeCode.promptQueueing``), else not
                           native: interrupt and restart
fork / rollback            ``session/fork`` where advertised (at the
                           session's latest turn; else portable, F6) /
                           rebuilt (ACP has no rewind)
questions                  ``elicitation/create`` in mode ``form``
                           (``acp_elicitation``); other shapes: an error
approvals                  ``session/request_permission`` (accept: the
                           ``allow_once`` option, else ``allow_always``;
                           acceptForSession: ``allow_always``, offered
                           only when the agent sent one; decline:
                           ``reject_once``, else ``reject_always``)
items                      ``session/update`` (see ``acp_updates``)
the agent's requests       ``fs/*`` inside the workspace (``acp_files``),
                           ``terminal/*`` as supervised processes
                           (``acp_terminals``)
=========================  ==================================================

An agent that breaks the protocol (a line that is not JSON-RPC, an answer to
a request never sent) fails its running turn with the reason and is stopped;
one that exits mid-turn takes the crash path (SPEC F11); one whose prompt
never answers after ``session/cancel`` is stopped after ``interrupt_grace``
as any other.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import msgspec
import trio

from .acp_connection import AcpConnection, KnownSession
from .acp_wire import InitializeResponse
from .agentd_tool import AgentdTool
from .base import Capabilities, EventSink, ProviderAdapter, ProviderConnection, ProviderRuntimeError
from ..config import ProviderConfig
from .jsonl import stop_process
from .runtime import StderrLog
from .transport import Spawn, exit_status, spawn_process

#: what any ACP agent does natively, as agentd drives it (see the table above);
#: an agent's ``initialize`` may add more (``agent_capabilities``)
NATIVE_CAPABILITIES = Capabilities(
    steer=False, native_fork=False, interrupt=True, rollback=False, structured_questions=True, empty_threads=True,
)


def agent_capabilities(initialized: InitializeResponse) -> Capabilities:
    """What this agent does natively, by what its ``initialize`` advertised:
    a native fork with ``sessionCapabilities.fork``, a native steer with the
    ``_session/steering`` extension or prompt queueing."""
    sessions = initialized.agent_capabilities.session_capabilities
    return msgspec.structs.replace(NATIVE_CAPABILITIES, native_fork=sessions.get("fork") is not None,
                                   steer=initialized.steering() or initialized.prompt_queueing())
#: a probe's bound: agents in node take seconds to start (OpenCode: 4-6 s)
PROBE_TIMEOUT = 30.0


def _and(native: Capabilities, configured: Capabilities) -> Capabilities:
    return Capabilities(**{f.name: getattr(native, f.name) and getattr(configured, f.name)
                           for f in msgspec.structs.fields(Capabilities)})


def _file_key(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size)


def find_binary(configured: str | None, env: dict[str, str]) -> Path:
    """The config's ``binary``: a path, or a name on the agent's PATH.

    Raises:
        ProviderRuntimeError: none is configured, or it is not an executable.
    """
    if not configured:
        raise ProviderRuntimeError('an acp provider needs binary = "…", the agent\'s executable')
    found = configured if os.sep in configured else shutil.which(configured, path=env.get("PATH"))
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise ProviderRuntimeError(f"the ACP agent {configured!r} is not an executable file (or not on PATH)")
    # Absolute: the agent runs in a directory of its own (AcpAdapter.working_directory).
    return Path(os.path.abspath(found))


class AcpAdapter(ProviderAdapter):
    """A ``kind = "acp"`` provider instance.

    Args:
        config: the ``[providers.NAME]`` table (``binary`` required).
        home: the instance's directory (the agent's ``stderr.log``).
        request_timeout: bound on every request but ``session/prompt``.
        spawn: how the agent is started (a recording or replay in tests).

    Raises:
        ProviderRuntimeError: no ``binary``, or not an executable.
    """

    kind = "acp"

    def __init__(self, config: ProviderConfig, *, home: Path, request_timeout: float | None = 30.0,
                 spawn: Spawn = spawn_process) -> None:
        self.name = config.name
        self.config = config
        self.home = Path(home)
        self.request_timeout = request_timeout
        self.spawn = spawn
        self.binary = find_binary(config.binary, self.environment())
        self.capabilities = _and(NATIVE_CAPABILITIES, config.capabilities)
        self.agentd_tool: AgentdTool | None = None
        #: what the agent said in its latest ``initialize`` (a probe's or a session's)
        self.initialized: InitializeResponse | None = None
        #: the ACP sessions this daemon saw (their workspace and latest turn), by id
        self.known: dict[str, KnownSession] = {}
        #: why a session could not start without a person logging in (``auth_required``)
        self.login_needed: str | None = None
        #: the binary file (mtime, size) the last successful probe started
        self._probed: tuple[int, int] | None = None

    def environment(self) -> dict[str, str]:
        return {**os.environ, **self.config.env}

    @property
    def working_directory(self) -> Path:
        """Where the agent process runs: an empty directory of the instance's,
        never the daemon's own working directory. An ACP agent gets each
        session's workspace as ``cwd`` in ``session/new``, but some take
        things from their process's directory too — codex-acp 0.16.0 makes it
        its sandbox's writable root — so that must be no place of the
        person's (the daemon may have been started in any folder)."""
        return self.home / "cwd"

    def command(self) -> list[str]:
        return [*self.config.wrapper, str(self.binary), *self.config.args]

    def needs_login(self, why: str) -> None:
        self.login_needed = why

    def images_refused(self) -> str | None:
        """Images go to agents whose ``initialize`` said ``promptCapabilities.image`` (issue 26)."""
        known = self.initialized
        if known is not None and known.agent_capabilities.prompt_capabilities.get("image") is True:
            return None
        return (f"provider instance {self.name!r} (acp) does not take images: "
                + ("its agent's promptCapabilities.image is not true" if known is not None
                   else "its agent has not said whether it does"))

    @property
    def images_known(self) -> bool:
        return self.initialized is not None

    def describe(self) -> dict[str, Any]:
        out = {**super().describe(), "binary": str(self.binary), "model": self.config.model}
        return {**out, **self.agent_facts()}

    def agent_facts(self) -> dict[str, Any]:
        """The agent's name, version and capabilities from ``initialize``, once known."""
        known = self.initialized
        if known is None:
            return {}
        facts: dict[str, Any] = {"agentCapabilities": msgspec.to_builtins(known.agent_capabilities)}
        if known.agent_info is not None:
            facts["agent"] = msgspec.to_builtins(known.agent_info)
            facts["version"] = known.agent_info.version or None
        if known.auth_methods:
            facts["authMethods"] = [{"id": m.id, "name": m.name, "type": m.type} for m in known.auth_methods]
        return facts

    async def probe(self) -> dict[str, Any]:
        """Start the agent, ``initialize`` it (no session) and stop it,
        within PROBE_TIMEOUT — once per binary file: a later probe of the same
        file (mtime, size) answers from the last ``initialize``. Unusable when
        it cannot, or when a session found that a person must log in first."""
        key = _file_key(self.binary)
        if self._probed != key or self.initialized is None:
            try:
                with trio.fail_after(PROBE_TIMEOUT):
                    await self._probe_once()
            except (ProviderRuntimeError, OSError, trio.TooSlowError) as exc:
                why = str(exc) or f"the agent did not answer initialize within {PROBE_TIMEOUT:g}s"
                return {"usable": False, "why": why, "binary": str(self.binary)}
            self._probed = key
        out: dict[str, Any] = {"usable": True, "binary": str(self.binary), **self.agent_facts()}
        if self.login_needed:
            out.update(usable=False, why=f"the agent needs a person to log in first: {self.login_needed}")
        return out

    async def _probe_once(self) -> None:
        async def ignore(_event: Any) -> None:
            pass

        failure: ProviderRuntimeError | None = None
        async with trio.open_nursery() as nursery:
            try:
                connection = await nursery.start(self._serve, "probe", ignore)
            except ProviderRuntimeError as exc:
                failure = exc  # raised outside the nursery: the caller gets it, not a group
            else:
                await connection.stop(grace=1.0)
        if failure is not None:
            raise failure

    async def open(self, *, session_id: str, emit: EventSink,
                   task_status: trio.TaskStatus[ProviderConnection] = trio.TASK_STATUS_IGNORED) -> None:
        await self._serve(session_id, emit, task_status=task_status)

    async def _serve(self, session_id: str, emit: EventSink,
                     task_status: trio.TaskStatus[AcpConnection] = trio.TASK_STATUS_IGNORED) -> None:
        self.working_directory.mkdir(parents=True, exist_ok=True)
        stderr = StderrLog(self.home)
        stderr.mark()
        process = await self.spawn(self.command(), env=self.environment(), cwd=str(self.working_directory),
                                   stderr_path=stderr.path)
        failure: ProviderRuntimeError | None = None
        connection: AcpConnection | None = None
        try:
            async with trio.open_nursery() as nursery:
                connection = AcpConnection(self, process, emit, nursery, session_id)
                nursery.start_soon(connection.serve)
                try:
                    self.initialized = await connection.initialize()
                    self.capabilities = connection.capabilities = _and(agent_capabilities(self.initialized),
                                                                       self.config.capabilities)
                except ProviderRuntimeError as exc:
                    tail = stderr.tail(2000)
                    failure = ProviderRuntimeError(f"the ACP agent did not start: {exc}" + (f" (stderr: {tail})" if tail else ""),
                                                   code=exc.code)
                    nursery.cancel_scope.cancel()
                else:
                    task_status.started(connection)
                    await process.wait()
                    nursery.cancel_scope.cancel()
        finally:
            await stop_process(process, polite=connection.polite_stop if connection is not None else None)
            if connection is not None:
                connection.ended(exit_status(process.returncode))
        if failure is not None:
            raise failure

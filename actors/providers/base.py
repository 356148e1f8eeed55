"""The provider adapter interface every agent runtime implements.

An adapter is three things (DESIGN.md "Provider adapters"):

* **capabilities** — what the runtime can do natively (steer, native fork,
  interrupt, rollback, structured questions, empty threads, resume);
* **primitives** — open a session (a live process), create/resume/fork a
  native thread, start/steer/interrupt a turn, list turns, roll back, answer a
  request, stop;
* **normalized events** — what the runtime reports, mapped once, at the
  boundary, to the ``ProviderEvent`` structs below, each tagged with the app's
  ``attempt_id`` so the owning ThreadActor needs no provider knowledge.

The shape follows Codex app-server (threads, turns, items, server requests)
and Claude Code stream-json (one process per session, resume/fork by session
id, ``can_use_tool`` requests), so neither needs the interface bent.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import msgspec

if TYPE_CHECKING:
    import trio

    from .agentd_tool import AgentdTool
    from .extra_mcp import McpServerSpec

    from .images import ImageInput


class Capabilities(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """What a provider instance can do natively. Switches off exercise fallbacks."""

    steer: bool = True
    native_fork: bool = True
    interrupt: bool = True
    rollback: bool = True
    structured_questions: bool = True
    empty_threads: bool = True
    # Resume is not a switch: every adapter must resume its native threads (SPEC F11).


# -- normalized provider events -------------------------------------------------


class ProviderEvent(msgspec.Struct, kw_only=True, tag_field="type", tag=str.lower):
    """Base of every normalized event; ``attempt_id`` correlates it to a RunAttempt."""

    attempt_id: str | None = None


class TurnStarted(ProviderEvent, kw_only=True):
    native_turn_id: str


class TurnCompleted(ProviderEvent, kw_only=True):
    native_turn_id: str | None = None
    status: str  # completed | failed | interrupted
    error: str | None = None
    #: where a native fork "after this turn" points, when that is not the turn
    #: id (Claude: the uuid of the turn's last message)
    end_ref: str | None = None


class ItemStarted(ProviderEvent, kw_only=True):
    """A provider item began: a tool call, file change, assistant message, …"""

    item_id: str
    item_type: str  # agent_message | tool | file_change | subagent | plan | reasoning | …
    parent_item_id: str | None = None
    title: str = ""
    detail: dict[str, Any] = {}


class ItemCompleted(ProviderEvent, kw_only=True):
    item_id: str
    item_type: str
    status: str = "completed"  # completed | failed | interrupted
    detail: dict[str, Any] = {}
    #: an ``agent_message``'s role in the turn, in the provider's own word where
    #: it has one (``MESSAGE_PHASES``); None: unknown (SPEC F3 then counts any
    #: completed message as an answer, as before phases were known)
    phase: str | None = None


#: ``commentary`` is narration (tools may follow: not an answer);
#: ``partial_answer`` and ``final_answer`` are answer text (Codex's MessagePhase)
MESSAGE_PHASES = frozenset({"commentary", "partial_answer", "final_answer"})


def message_phase(value: Any) -> str | None:
    """A provider's phase value as agentd's (None when absent or unknown)."""
    return value if isinstance(value, str) and value in MESSAGE_PHASES else None


class TextDelta(ProviderEvent, kw_only=True):
    """Streamed assistant text of an ``agent_message`` item."""

    item_id: str
    delta: str


class PlanUpdated(ProviderEvent, kw_only=True):
    item_id: str | None = None
    plan: list[dict[str, Any]] = []


class RequestOpened(ProviderEvent, kw_only=True):
    """The provider waits on the user (approval or user input)."""

    request_ref: str
    kind: str  # approval | user_input
    item_id: str | None = None
    detail: dict[str, Any] = {}
    #: an approval's decisions the provider takes (``accept``, ``acceptForSession``,
    #: ``decline``); empty: ``accept`` and ``decline``
    decisions: list[str] = []


class Usage(ProviderEvent, kw_only=True):
    """Tokens the runtime reports its model used since its last report (an
    increment, never a running total: adapters turn totals into increments),
    in one convention for every provider: ``input_tokens`` counts all input,
    ``cached_input_tokens`` the part of it read from a prompt cache;
    ``output_tokens`` all output, ``reasoning_tokens`` the part of it that
    was reasoning (0 where the provider does not say). ``model`` names the
    model that used them, when the runtime says (prices are per model)."""

    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    model: str | None = None


class RuntimeWarning_(ProviderEvent, kw_only=True, tag="runtime_warning"):
    message: str


class SessionExited(ProviderEvent, kw_only=True):
    """The runtime process ended. ``requested`` is False for a crash."""

    session_id: str
    exit_code: int | None = None
    signal: int | None = None
    requested: bool = False
    reason: str = ""


EventSink = Callable[[ProviderEvent], Awaitable[None]]


class ResumeInfo(msgspec.Struct, kw_only=True):
    native_thread_id: str
    turn_count: int | None = None


class ProviderRuntimeError(Exception):
    """A primitive failed inside the runtime (an error answer, a dead process)."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class NativeThreadMissing(ProviderRuntimeError):
    """Resume failed because the native conversation is missing or corrupt."""


# -- the interface ----------------------------------------------------------------


class ProviderConnection(abc.ABC):
    """One live provider runtime (a process) and its primitives.

    Every primitive raises ProviderRuntimeError on failure and has a bounded
    wait: a runtime that never answers must not hang its thread.
    """

    capabilities: Capabilities
    #: the runtime's version as it reported it, when it does (frozen settings, F4)
    runtime_version: str | None = None

    @property
    @abc.abstractmethod
    def pid(self) -> int | None: ...

    @property
    @abc.abstractmethod
    def loaded_threads(self) -> set[str]:
        """Native thread ids this process has created or resumed (callers read it)."""

    @abc.abstractmethod
    async def create_thread(self, *, cwd: str, mcp_servers: Sequence[McpServerSpec] = ()) -> str:
        """Make a new native thread; return its handle. ``mcp_servers``: the
        thread's MCP servers besides agentd's own (an editor's; issue 26),
        passed only when there are some, by the kinds that take them."""

    @abc.abstractmethod
    async def resume_thread(self, native_thread_id: str, *, cwd: str, mcp_servers: Sequence[McpServerSpec] = ()) -> ResumeInfo:
        """Load a native thread into this process (raises NativeThreadMissing)."""

    @abc.abstractmethod
    async def start_turn(
        self, native_thread_id: str, *, text: str, attempt_id: str, cwd: str, context: str | None = None,
        images: Sequence[ImageInput] = (),
    ) -> str:
        """Start a turn; its events are tagged ``attempt_id``. ``context`` is a
        stored ContextHandoff's text, given to the runtime ahead of ``text`` in
        whatever way it takes extra context; ``images`` come with ``text``
        (only where the adapter's ``images_refused`` is None; callers pass
        the argument only when there are images). Returns the native turn id."""

    @abc.abstractmethod
    async def interrupt_turn(self, native_thread_id: str, native_turn_id: str) -> None:
        """Ask the runtime to interrupt; the turn ends only when it says so."""

    def history_mode(self, native_thread_id: str) -> str | None:
        """The native thread's history contract as the runtime reported it
        when agentd opened it (Codex ``historyMode``: ``legacy`` histories
        cannot be rolled back or forked natively); None: not reported."""
        return None

    async def interrupt_item(self, native_thread_id: str, native_turn_id: str, native_item_id: str) -> None:
        """Ask the runtime to interrupt one running item of a turn (a tool
        call, a subagent); the item ends when the runtime says so and the
        turn goes on. Only for adapters whose ``interruptible_items`` name
        the item's kind."""
        raise ProviderRuntimeError("this runtime cannot interrupt one item of a turn")

    async def start_first_turn(
        self, *, text: str, attempt_id: str, cwd: str, context: str | None = None, images: Sequence[ImageInput] = (),
        mcp_servers: Sequence[McpServerSpec] = (),
    ) -> tuple[str, str]:
        """For runtimes without empty threads: create the native thread with its
        first turn. Returns ``(native_thread_id, native_turn_id)``."""
        raise ProviderRuntimeError("this provider cannot start a thread with a turn")

    async def steer_turn(self, native_thread_id: str, native_turn_id: str, *, text: str,
                         images: Sequence[ImageInput] = ()) -> None:
        raise ProviderRuntimeError("steering is not supported by this provider")

    async def fork_thread(self, native_thread_id: str, *, last_turn_id: str | None,
                          mcp_servers: Sequence[McpServerSpec] = (), cwd: str | None = None) -> str:
        """A new native thread with ``native_thread_id``'s history up to and
        including the turn ``last_turn_id`` names (a ``ProviderTurn``'s
        ``nativeEndRef`` or ``nativeTurnId``; None: all of it), loaded in this
        process; the source is left as it was. Returns the new thread's id.
        ``cwd``: the fork's workspace (a native fork shares its source's)."""
        raise ProviderRuntimeError("native fork is not supported by this provider")

    async def list_turns(self, native_thread_id: str) -> list[dict[str, Any]]:
        raise ProviderRuntimeError("listing turns is not supported by this provider")

    async def rollback_thread(self, native_thread_id: str, *, before_turn_id: str) -> None:
        raise ProviderRuntimeError("rollback is not supported by this provider")

    async def answer_request(self, request_ref: str, response: dict[str, Any]) -> None:
        raise ProviderRuntimeError("this provider has no requests to answer")

    @abc.abstractmethod
    async def stop(self, *, grace: float = 2.0) -> None:
        """Shutdown ladder: polite stop, bounded wait, SIGTERM, SIGKILL."""

    @property
    @abc.abstractmethod
    def exit_status(self) -> tuple[int | None, int | None]:
        """``(exit_code, signal)`` once the process has ended, else ``(None, None)``."""


class ProviderAdapter(abc.ABC):
    """A configured provider instance (``[providers.NAME]``) that opens sessions."""

    name: str
    kind: str
    capabilities: Capabilities
    #: how this instance's sessions reach agentd's MCP endpoint (the daemon sets it;
    #: None: its agents get no agentd tool)
    agentd_tool: AgentdTool | None
    #: the node kinds whose running item the runtime interrupts on its own
    #: (``node.interrupt``; ``interrupt_item``), and why not where it cannot
    interruptible_items: frozenset[str] = frozenset()
    item_interrupt_why: str = "its runtime has no way to interrupt one item of a turn"

    @abc.abstractmethod
    async def open(
        self,
        *,
        session_id: str,
        emit: EventSink,
        task_status: trio.TaskStatus[ProviderConnection],
    ) -> None:
        """Start a runtime process and serve it until it exits or is cancelled.

        Call ``task_status.started(connection)`` once the runtime is ready;
        start it with ``await nursery.start(adapter.open, ...)``; return when
        the process has ended (its ``exit_status`` set). On cancellation, stop
        the process with the shutdown ladder before returning. Every event the
        runtime reports goes to ``emit``; the process exit is reported as
        ``SessionExited`` by the caller, which owns the session's lifecycle.
        """

    def images_refused(self) -> str | None:
        """Why this instance's turns cannot take images (None: they can;
        issue 26). A message with images to an instance that refuses them is
        ``unsupported`` before anything is stored."""
        return f"provider instance {self.name!r} ({self.kind}) does not take images"

    @property
    def images_known(self) -> bool:
        """Whether ``images_refused`` knows yet (an ACP agent says so only in
        its ``initialize``: False until a probe or a session asked it)."""
        return True

    def describe(self) -> dict[str, Any]:
        """What ``agentd providers`` shows for this instance."""
        return {"name": self.name, "kind": self.kind, "capabilities": msgspec.to_builtins(self.capabilities)}

    async def probe(self) -> dict[str, Any]:
        """Whether the runtime can be used here: ``{"usable": bool, "why"?: str,
        "binary"?: path, "version"?: str}``. Must not start a session."""
        return {"usable": True}


@dataclass(frozen=True)
class RecoveryDecision:
    """What the supervisor decided after a provider crash: ``retry`` as a new
    attempt, or not, with the ``reason`` the run fails with."""

    retry: bool
    reason: str | None = None


@dataclass(eq=False)
class SessionClaim:
    """A place among ``[daemon] max_sessions`` held for a provider session
    about to start (``SessionHost.claim_session``): for ``thread_id`` (None
    until the thread is made, e.g. a delegated task's). It lapses when the
    thread's run starts (from then the busy thread holds the place), when it
    is released, or at ``expires`` (trio clock) at the latest."""

    thread_id: str | None
    expires: float


class SessionHost(abc.ABC):
    """What ThreadActors need from the provider-session manager (supervisor/).

    Defined here so that imports flow one way: actors never import supervisor.
    """

    @abc.abstractmethod
    def adapter(self, provider: str) -> ProviderAdapter:
        """The configured instance named ``provider`` (KeyError if none)."""

    @abc.abstractmethod
    async def ensure_session(self, thread_id: str, provider: str) -> tuple[str, ProviderConnection]:
        """The live session for ``thread_id``, opened if needed: ``(session_id, connection)``.

        Raises:
            ProviderRuntimeError: the runtime could not be started.
        """

    @abc.abstractmethod
    def live_session(self, thread_id: str) -> tuple[str, ProviderConnection] | None:
        """The live session of ``thread_id``, if any."""

    @abc.abstractmethod
    def mark_busy(self, thread_id: str, busy: bool) -> None:
        """Tell the idle reaper whether the thread's session has work in flight."""

    @abc.abstractmethod
    async def stop_session(self, thread_id: str, reason: str) -> None:
        """Stop the thread's session through the production stop path."""

    @abc.abstractmethod
    async def claim_session(self, thread_id: str | None) -> SessionClaim:
        """Hold a place for a provider session of ``thread_id`` (None: a
        thread not made yet) within ``[daemon] max_sessions``, stopping idle
        sessions of other threads to make room unless the thread holds a
        place already (a live session, or a run in flight); a claimed
        thread's own idle session is not stopped to make room for others.

        Raises:
            LimitExceeded: every place is held by work in flight.
        """

    @abc.abstractmethod
    def release_claim(self, claim: SessionClaim) -> None:
        """Give a place back (the session will not start)."""

    @abc.abstractmethod
    def allow_recovery(self, thread_id: str, crash: str) -> RecoveryDecision:
        """Record a crash recovery of the thread's runtime and decide: retry
        as a new attempt, or stop with the reason (``provider_crash_loop``).
        ``crash`` says how the runtime ended (``exit code 1``)."""

"""The ThreadActor's mailbox: one tagged union of typed messages.

Everything that changes a thread reaches its actor as one of these and is
handled in mailbox order, one at a time, with ``match`` (thread_actor.py):

- ``Command``: a client's (or the daemon's own) command, with its handler;
- a ``ProviderEvent`` of the thread's provider session (providers/base.py);
- the attempt starter's reports and questions, ``ContextNeeded`` (answered
  through its ``reply``), ``ProviderThreadReady`` and ``AttemptStartFailed``;
- a timer that came due, ``FlushTimer``, ``InterruptOverdue`` or ``StallTimer``;
- the outcome of an effect task, which ran outside the thread's lock:
  ``SteerDelivered``, ``SteerFailed``, ``InterruptRefused``, ``CascadeDone``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, TypeAlias

import msgspec

from agentd.protocol.errors import AgentdError
from agentd.store.records import ConversationMessage, ProviderThread

from .providers.base import ProviderEvent

if TYPE_CHECKING:
    from .providers.extra_mcp import McpServerSpec



class Reply(Protocol):
    """Where the answer to an item goes, once (reply.py makes them)."""

    def set(self, value: Any) -> None: ...

    def fail(self, error: BaseException) -> None: ...


#: a thread-owned method's handler: a transition (effects.py) the actor runs,
#: one command at a time; its Decision's reply is the command's result (an
#: AgentdError it raises becomes the error reply)
#: (typed loosely: its first argument is a ``context.ThreadContext``, which
#: sits above this module)
Handler: TypeAlias = Callable[[Any, "Command"], Any]


class Command(msgspec.Struct, frozen=True, eq=False):
    """A client (or internal) command for one thread.

    ``method`` names it in receipts and errors; ``handler`` does it.
    """

    method: str
    handler: Handler
    params: Any
    #: where the answer goes (reply.py; the registry makes it)
    reply: Reply
    command_id: str | None = None


# -- the attempt starter's reports ------------------------------------------------


class ContextNeeded(msgspec.Struct, frozen=True, eq=False):
    """The starter asks how its attempt gets its context (lineage.py) before
    any provider work, and again when the provider thread it was told to
    resume turns out ``lost`` (``(provider thread id, why)``). The actor
    commits the answer, then replies with a ``StartPlan`` — or None when the
    run ended instead (an unsupported transfer)."""

    attempt_id: str
    reply: Reply
    lost: tuple[str, str] | None = None


class StartPlan(msgspec.Struct, frozen=True):
    """How the starter brings up the attempt's native thread."""

    #: resume this provider thread (None: make a new native thread)
    resume: ProviderThread | None = None
    #: fork this native thread after ``fork_turn_ref`` (None: at its end)
    fork_native_thread_id: str | None = None
    fork_turn_ref: str | None = None
    #: a stored handoff's exact text, given ahead of the user's message
    context: str | None = None
    #: the thread's MCP servers besides agentd's own, with their secrets (issue 26)
    mcp_servers: tuple[McpServerSpec, ...] = ()


class ProviderThreadReady(msgspec.Struct, frozen=True):
    """The starter opened, resumed or natively forked the native thread for an attempt."""

    attempt_id: str
    session_id: str
    native_thread_id: str
    created: bool
    resumed_turn_count: int | None = None
    #: the provider thread resumed (``created`` is False)
    provider_thread: ProviderThread | None = None
    #: the runtime's version, for the new provider thread's frozen settings
    runtime_version: str | None = None
    #: ``created`` by the provider's native fork
    forked: bool = False
    #: the native thread's history contract, as the runtime reported it (Codex ``historyMode``)
    history_mode: str | None = None


class AttemptStartFailed(msgspec.Struct, frozen=True):
    """The starter could not get an attempt's turn running."""

    attempt_id: str
    reason: str
    error: AgentdError | Exception | str


class StarterDone(msgspec.Struct, frozen=True):
    """The starter of an attempt has ended; every report it made is ahead of this."""

    attempt_id: str


# -- timers: posted by the actor's own loop when their deadline passes --------------


class FlushTimer(msgspec.Struct, frozen=True):
    """Buffered assistant text is due to be written."""


class InterruptOverdue(msgspec.Struct, frozen=True):
    """The provider did not end an interrupted attempt within the grace period."""

    attempt_id: str


class StallTimer(msgspec.Struct, frozen=True):
    """The attempt's provider has said nothing for ``[daemon] stall_after`` seconds."""

    attempt_id: str


Timer: TypeAlias = FlushTimer | InterruptOverdue | StallTimer


# -- effect outcomes ------------------------------------------------------------------


class SteerDelivered(msgspec.Struct, frozen=True):
    """The provider took a native steer."""

    message: ConversationMessage


class SteerFailed(msgspec.Struct, frozen=True):
    """The provider refused a native steer (e.g. the turn had just ended)."""

    message: ConversationMessage
    why: str


class InterruptRefused(msgspec.Struct, frozen=True):
    """The provider refused to interrupt an attempt's turn."""

    attempt_id: str
    why: str


class CascadeDone(msgspec.Struct, frozen=True):
    """A Stop's delegated children were all stopped; ``effect_id`` is its outbox entry."""

    effect_id: str


#: everything a ThreadActor's mailbox carries
MailboxItem: TypeAlias = (
    Command | ProviderEvent | ContextNeeded | ProviderThreadReady | AttemptStartFailed | StarterDone | FlushTimer
    | InterruptOverdue | StallTimer | SteerDelivered | SteerFailed | InterruptRefused | CascadeDone
)

"""What travels through a ThreadActor's mailbox besides provider events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import trio

from agentd.protocol.errors import AgentdError


class Reply:
    """A one-shot answer to a command: a result or an AgentdError."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def set(self, value: Any) -> None:
        if not self._done.is_set():
            self._value = value
            self._done.set()

    def fail(self, error: BaseException) -> None:
        if not self._done.is_set():
            self._error = error
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    async def wait(self) -> Any:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value


@dataclass
class Command:
    """A client (or internal) command for one thread: the method table's
    handler for it, run by the thread's actor as ``handler(actor, command)``."""

    method: str
    handler: Callable[[Any, Command], Awaitable[Any]]
    params: Any
    command_id: str | None = None
    reply: Reply = field(default_factory=Reply)


@dataclass
class HandoffDraft:
    """Context the starter built for a replacement provider thread."""

    text: str
    reason: str
    covered_run_count: int
    replaced_provider_thread_id: str | None


@dataclass
class ProviderThreadReady:
    """The starter opened or resumed the native thread for an attempt."""

    attempt_id: str
    session_id: str
    native_thread_id: str
    created: bool
    resumed_turn_count: int | None = None
    #: set when ``created`` replaces a provider thread that could not be resumed
    handoff: HandoffDraft | None = None


@dataclass
class AttemptStartFailed:
    """The starter could not get an attempt's turn running."""

    attempt_id: str
    reason: str
    error: AgentdError | Exception | str


@dataclass
class FlushDue:
    """Wakes an actor whose coalesced text is due to be written."""


@dataclass
class EffectDone:
    """An effect task's outcome, applied by the actor in mailbox order (the
    effect itself ran outside the thread's lock)."""

    fn: Any  # async (actor) -> None

    async def apply(self, actor: Any) -> None:
        await self.fn(actor)

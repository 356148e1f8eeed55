"""In-memory state of the run a ThreadActor is driving."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from agentd.store.records import ConversationMessage, ExecutionNode, ProviderTurn, Run, RunAttempt, RuntimeRequest


@dataclass
class OpenMessage:
    """An assistant message being streamed, with text not yet durable."""

    record: ConversationMessage
    pending: list[str] = field(default_factory=list)
    pending_len: int = 0


@dataclass
class PendingRestart:
    """A steer that must restart the turn (SPEC F3 fallback): applied when the
    provider reports the interrupted turn ended."""

    message: ConversationMessage
    #: the new run that supersedes this one, when the attempt had already
    #: given a final answer; None to start attempt N+1 of the same run
    superseding_run_id: str | None = None


@dataclass
class ActiveRun:
    """The run whose attempt is starting or running, with its live graph."""

    run: Run
    attempt: RunAttempt
    root: ExecutionNode
    #: the input of this attempt: the run's message, or the steering message
    user_message: ConversationMessage
    #: provider item id -> child node
    nodes: dict[str, ExecutionNode] = field(default_factory=dict)
    #: provider item id -> open assistant message
    messages: dict[str, OpenMessage] = field(default_factory=dict)
    #: pending RuntimeRequests by app id
    requests: dict[str, RuntimeRequest] = field(default_factory=dict)
    provider_turn: ProviderTurn | None = None
    #: the provider session this attempt runs on, known as soon as the starter has it
    session_id: str | None = None
    #: cancels this attempt's starter when the attempt is closed early
    starter_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    #: an assistant message of this attempt completed (a "meaningful final answer")
    answered: bool = False
    interrupt_requested: bool = False
    interrupt_sent: bool = False
    #: what an interrupt that ends the run makes of it (policy for stopped sessions)
    interrupt_reason: str = "interrupted"
    pending_restart: PendingRestart | None = None

"""What an ACP connection keeps per session and turn, and the shared helpers.

``Session`` is one ACP session loaded in an agent process (its workspace,
running turn, mapper and what waits on the person); ``KnownSession`` what
the daemon remembers of a session across its processes; ``AgentInstance``
what a connection needs of its adapter. ``decode`` / ``encode`` move the
schema's Structs (``acp_wire``) on and off the wire, and ``turn_usage``
reads a prompt answer's token counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgspec

from . import acp_elicitation
from .acp_updates import TurnMapper
from .acp_wire import PermissionOption
from .base import ProviderRuntimeError, Usage

if TYPE_CHECKING:
    from ..config import ProviderConfig
    from .agentd_tool import AgentdTool
    from .base import Capabilities

W = TypeVar("W", bound=msgspec.Struct)
#: a Struct (or anything) as the JSON-ready builtins the peer sends
encode = msgspec.to_builtins


def decode(shape: type[W], data: Any, what: str) -> W:
    """``data`` as ``shape``; a mismatch is the agent's fault, said so."""
    try:
        return msgspec.convert(data, shape)
    except msgspec.ValidationError as exc:
        raise ProviderRuntimeError(f"the ACP agent sent an unexpected {what}: {exc}") from exc


@dataclass
class KnownSession:
    """What this daemon saw of an ACP session, in any of its agent processes:
    ``session/resume`` replays nothing and ``session/fork`` forks at the end,
    so the adapter itself remembers the session's workspace and its latest
    turn."""

    cwd: str
    #: the prompts it was sent (a load's replay counts the earlier ones)
    turns: int = 0
    #: the native id of the latest turn agentd started in it
    latest_turn: str | None = None


class AgentInstance(Protocol):
    """What a connection needs of its adapter (``acp.AcpAdapter``)."""

    name: str
    config: ProviderConfig
    capabilities: Capabilities
    request_timeout: float | None
    agentd_tool: AgentdTool | None
    #: the sessions this daemon saw, by id
    known: dict[str, KnownSession]

    def needs_login(self, why: str) -> None: ...

    def images_refused(self) -> str | None: ...


@dataclass
class Turn:
    """A session's running turn: agentd's id for it and its attempt's."""

    native_turn_id: str
    attempt_id: str
    interrupt_requested: bool = False
    ended: bool = False
    #: its ``session/prompt`` requests not answered yet (a queued steer adds one)
    prompts: int = 1


@dataclass
class Session:
    """One ACP session in this process: its workspace, turn and mapper."""

    session_id: str
    cwd: str
    mapper: TurnMapper
    turn: Turn | None = None
    #: set while ``session/load`` replays the history (its updates are not new)
    replaying: bool = False
    replayed_turns: int = 0
    #: permission requests waiting on the person: request ref -> (agent's id, options)
    permissions: dict[str, tuple[Any, list[PermissionOption]]] = field(default_factory=dict)
    #: form elicitations waiting on the person: request ref -> (agent's id, the form)
    elicitations: dict[str, tuple[Any, acp_elicitation.Form]] = field(default_factory=dict)


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value >= 0 else 0


def turn_usage(usage: dict[str, Any], attempt_id: str) -> Usage | None:
    """The prompt answer's ``usage`` (ACP: the turn's tokens — ``inputTokens``,
    ``outputTokens``, ``thoughtTokens``, ``cachedReadTokens``,
    ``cachedWriteTokens``) as agentd's increment, in its one convention:
    input counts cache reads and writes, output counts thought tokens.
    ``usage_update`` is the context window's fill, not tokens used: not
    counted. None when the agent reported no counts."""
    cached = _count(usage, "cachedReadTokens")
    written = _count(usage, "cachedWriteTokens")
    thought = _count(usage, "thoughtTokens")
    given = _count(usage, "inputTokens") + cached + written
    made = _count(usage, "outputTokens") + thought
    if not given and not made:
        return None
    return Usage(attempt_id=attempt_id, input_tokens=given, cached_input_tokens=cached, output_tokens=made,
                 reasoning_tokens=thought)


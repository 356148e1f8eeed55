"""What the thread registry remembers of failed actors: incidents, and the
quarantine of a thread that keeps failing.

The registry is a dynamic supervisor of per-thread actors (OTP's
``simple_one_for_one`` with ``temporary`` children): an actor that fails on an
unexpected error ends alone, its thread is reconciled, and the next command
loads a fresh actor from the store. A thread whose actor fails
``limit`` times within ``period`` seconds is quarantined instead — reads
still work, commands are refused with ``thread_failed`` naming the first of
those incidents — until ``thread.unquarantine`` or a daemon restart (this
is memory only, on purpose: a restart is a fresh chance).

Pure bookkeeping: no trio, no store; times are trio-clock seconds passed in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from agentd.protocol.errors import ThreadFailed

#: characters of an error's text kept in a reason (the log has all of it)
REASON_CHARS = 200


@dataclass(frozen=True)
class Incident:
    """One failure of one thread's actor; the daemon log has its traceback under ``id``."""

    id: str
    thread_id: str
    reason: str
    at: float  # trio clock
    wall_at: float


@dataclass
class Quarantine:
    """A thread refused commands after too many failures in a row."""

    incidents: list[Incident]
    #: the reconciliation after the last failure did not commit; unquarantine tries it again
    recovery_pending: bool = False

    @property
    def first(self) -> Incident:
        return self.incidents[0]

    def to_wire(self) -> dict[str, Any]:
        return {
            "firstIncidentId": self.first.id,
            "reason": self.first.reason,
            "since": self.incidents[-1].wall_at,
            "incidentIds": [i.id for i in self.incidents],
            "recoveryPending": self.recovery_pending,
        }


def reason_of(error: BaseException) -> str:
    """A short, single-line reason for an unexpected error: its type and text."""
    text = " ".join(str(error).split())
    reason = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return reason if len(reason) <= REASON_CHARS else reason[: REASON_CHARS - 1] + "…"


@dataclass
class FailureBook:
    """Failures per thread within a sliding window, and the quarantined threads.

    Args:
        limit: failures within ``period`` that quarantine a thread.
        period: the window, in seconds.
    """

    limit: int = 3
    period: float = 60.0
    _recent: dict[str, deque[Incident]] = field(default_factory=dict)
    quarantined: dict[str, Quarantine] = field(default_factory=dict)

    def record(self, incident: Incident) -> Quarantine | None:
        """Count ``incident``; the thread's Quarantine if this one puts it there."""
        recent = self._recent.setdefault(incident.thread_id, deque())
        while recent and recent[0].at <= incident.at - self.period:
            recent.popleft()
        recent.append(incident)
        if len(recent) < self.limit:
            return None
        quarantine = self.quarantined[incident.thread_id] = Quarantine(list(recent))
        return quarantine

    def quarantine(self, incident: Incident) -> Quarantine:
        """Quarantine the thread of ``incident`` whatever its count (its recovery failed)."""
        quarantine = self.quarantined[incident.thread_id] = Quarantine([incident])
        return quarantine

    def release(self, thread_id: str) -> Quarantine | None:
        """Lift the thread's quarantine (and forget its recent failures); the
        Quarantine it was in, or None if it was in none."""
        self._recent.pop(thread_id, None)
        return self.quarantined.pop(thread_id, None)

    def refusal(self, thread_id: str) -> ThreadFailed | None:
        """The error a command to a quarantined thread gets, or None if it is not quarantined."""
        quarantine = self.quarantined.get(thread_id)
        if quarantine is None:
            return None
        first = quarantine.first
        return ThreadFailed(
            f"thread {thread_id} is quarantined: its actor failed {len(quarantine.incidents)} times in a row "
            f"(first incident {first.id}: {first.reason}); reads still work; after fixing the cause, "
            f"lift it with thread.unquarantine (agentd unquarantine {thread_id}) or restart the daemon",
            threadId=thread_id, reason=first.reason, incidentId=first.id, firstIncidentId=first.id,
            quarantined=True,
        )


def failed_error(incident: Incident, *, quarantined: bool) -> ThreadFailed:
    """The error the commands an actor was handling, or had waiting, get when it fails."""
    then = ("; it failed too often and is now quarantined (thread.unquarantine lifts it)" if quarantined
            else "; its active run was interrupted and the next command loads it again")
    return ThreadFailed(
        f"thread {incident.thread_id} failed on an unexpected error ({incident.reason}); incident {incident.id} "
        f"in the daemon log{then}",
        threadId=incident.thread_id, reason=incident.reason, incidentId=incident.id, quarantined=quarantined,
    )

"""A small supervisor in the spirit of Erlang/OTP, for trio.

* **Child specs** say how to start a child (a ``serve(*, task_status)``
  function) and when to restart it: ``permanent`` (always), ``transient``
  (only after an abnormal exit, i.e. an exception), ``temporary`` (never).
* **Restart intensity**: more than ``max_restarts`` within ``period``
  seconds and the supervisor gives up and escalates with SupervisorGaveUp,
  instead of restarting a crash loop forever.
* **Order**: children start in order, each only after the previous one said
  it is ready, and stop in reverse order, each after the one started later has
  finished — so the socket closes before the actors, the actors before the
  provider sessions, and the store writer commits last.
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import trio

log = logging.getLogger(__name__)


class Restart(enum.Enum):
    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"


class SupervisorGaveUp(Exception):
    """A child exceeded the restart intensity; its last error is the cause."""


class RestartIntensity:
    """At most ``max_restarts`` restarts within any ``period`` seconds (trio clock)."""

    def __init__(self, max_restarts: int, period: float) -> None:
        self.max_restarts = max_restarts
        self.period = period
        self._restarts: deque[float] = deque()

    def allow(self) -> bool:
        """Record a restart now; False if that exceeds the intensity."""
        now = trio.current_time()
        while self._restarts and self._restarts[0] <= now - self.period:
            self._restarts.popleft()
        if len(self._restarts) >= self.max_restarts:
            return False
        self._restarts.append(now)
        return True

    @property
    def recent(self) -> int:
        now = trio.current_time()
        return sum(1 for t in self._restarts if t > now - self.period)


@dataclass
class ChildSpec:
    """How to run one child: ``start`` is ``async def serve(*, task_status)``."""

    name: str
    start: Callable[..., Awaitable[Any]]
    restart: Restart = Restart.PERMANENT
    #: called (synchronously) before the child's cancel scope is cancelled at
    #: shutdown, for children that want a polite stop first
    stop: Callable[[], Awaitable[None]] | None = None


@dataclass
class _Running:
    spec: ChildSpec
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    finished: trio.Event = field(default_factory=trio.Event)


class Supervisor:
    """Runs children in order and restarts them by their spec.

    Args:
        children: started in this order, stopped in reverse.
        intensity: shared restart budget of this supervisor.
    """

    def __init__(self, children: list[ChildSpec], *, intensity: RestartIntensity | None = None) -> None:
        self.children = children
        self.intensity = intensity or RestartIntensity(5, 30.0)
        self._running: list[_Running] = []
        self._failure: BaseException | None = None
        self._stop = trio.Event()

    def request_stop(self) -> None:
        """Begin the orderly shutdown."""
        self._stop.set()

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Start every child, report ready, supervise until ``request_stop``
        (or escalation), then stop the children in reverse order."""
        async with trio.open_nursery() as nursery:
            for spec in self.children:
                running = _Running(spec)
                self._running.append(running)
                await nursery.start(self._supervise, running)
            task_status.started()
            await self._stop.wait()
            for running in reversed(self._running):
                if running.spec.stop is not None and not running.finished.is_set():
                    with trio.CancelScope(shield=True):
                        try:
                            await running.spec.stop()
                        except Exception:  # noqa: BLE001 - shutdown goes on
                            log.exception("polite stop of %s failed", running.spec.name)
                running.scope.cancel()
                with trio.CancelScope(shield=True):
                    await running.finished.wait()
        if self._failure is not None:
            raise SupervisorGaveUp(f"gave up on a child after too many restarts: {self._failure}") from self._failure

    async def _supervise(self, running: _Running, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        spec = running.spec
        first = True
        try:
            with running.scope:
                while True:
                    error: BaseException | None = None
                    try:
                        if first:
                            await trio.lowlevel.checkpoint()
                            # Errors before ready surface at the caller, as with nursery.start.
                            async with trio.open_nursery() as inner:
                                await inner.start(spec.start)
                                task_status.started()
                                first = False
                        else:
                            await spec.start()
                    except Exception as exc:  # noqa: BLE001 - judged by the restart type
                        if first:
                            raise
                        error = unwrap(exc)
                        log.exception("child %s crashed", spec.name)
                    if spec.restart is Restart.TEMPORARY:
                        return
                    if spec.restart is Restart.TRANSIENT and error is None:
                        return
                    if not self.intensity.allow():
                        self._failure = error or RuntimeError(f"{spec.name} kept exiting")
                        self._stop.set()
                        return
                    log.warning("restarting %s", spec.name)
        finally:
            running.finished.set()


def unwrap(exc: BaseException) -> BaseException:
    """The lone error inside nested single-exception groups (trio nurseries
    wrap what their children raise)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc

"""A small supervisor in the spirit of Erlang/OTP, for trio.

* **Child specs** say how to start a child (a ``serve(*, task_status)``
  function) and when to restart it: ``permanent`` (always), ``transient``
  (only after an abnormal exit, i.e. an exception), ``temporary`` (never).
* **Strategy** says what a restart takes with it. ``one_for_one``: only the
  child that exited. ``rest_for_one``: that child and every child started
  after it — the later ones are stopped first, in reverse order and each with
  its polite stop, then the exited child and the later ones start again, in
  order. Children started before it are not touched. Use it when later
  children depend on earlier ones: nothing ever runs against a restarted
  child's predecessor state. A later ``temporary`` child stopped this way is
  not started again (as in OTP).
* **Restart intensity**: more than ``max_restarts`` within ``period``
  seconds and the supervisor gives up and escalates with SupervisorGaveUp,
  instead of restarting a crash loop forever. A ``rest_for_one`` restart of
  several children counts once.
* **Order**: children start in list order, each only after the previous one
  said it is ready (a restart too), and stop in reverse list order, each after
  the one started later has finished. What that order means for the daemon
  is spelled out in ``supervisor/daemon.py``.
* **Bounded shutdown** (OTP's ``shutdown``): stopping a child awaits its
  polite ``stop`` for at most ``shutdown`` seconds, then cancels it.
* **Nesting**: a Supervisor is itself a child (``Supervisor.child_spec``):
  its polite stop stops its own children in order, its restarts count
  against its own intensity only, and giving up is one exit of it, judged
  by its parent's strategy and intensity.
"""

from __future__ import annotations

import enum
import logging
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import trio

log = logging.getLogger(__name__)


class Restart(enum.Enum):
    PERMANENT = "permanent"
    TRANSIENT = "transient"
    TEMPORARY = "temporary"


class Strategy(enum.Enum):
    ONE_FOR_ONE = "one_for_one"
    REST_FOR_ONE = "rest_for_one"


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


@dataclass
class ChildSpec:
    """How to run one child: ``start`` is ``async def serve(*, task_status)``."""

    name: str
    start: Callable[..., Awaitable[Any]]
    restart: Restart = Restart.PERMANENT
    #: awaited (shielded) before the child's cancel scope is cancelled, whenever
    #: the supervisor stops a running child (shutdown, or a ``rest_for_one``
    #: restart of an earlier child), for children that want a polite stop first;
    #: ``Supervisor.restart_cause`` tells the two apart
    stop: Callable[[], Awaitable[None]] | None = None
    #: seconds the polite ``stop`` may take before the child is cancelled anyway
    shutdown: float = 30.0


@dataclass(eq=False)
class _Child:
    """One life of one child: a restart makes a new one."""

    spec: ChildSpec
    index: int
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    finished: trio.Event = field(default_factory=trio.Event)
    ready: bool = False
    #: the supervisor is stopping it, so its exit is expected, not news
    stopping: bool = False


class Supervisor:
    """Runs children in order and restarts them by their spec and the strategy.

    Args:
        children: started in this order, stopped in reverse.
        strategy: what a restart takes with it (``one_for_one`` by default).
        intensity: shared restart budget of this supervisor.
    """

    def __init__(
        self,
        children: list[ChildSpec],
        *,
        strategy: Strategy = Strategy.ONE_FOR_ONE,
        intensity: RestartIntensity | None = None,
    ) -> None:
        self.children = children
        self.strategy = strategy
        self.intensity = intensity or RestartIntensity(5, 30.0)
        #: while the supervisor stops and starts children because one exited,
        #: that child's name; None during the first start and at shutdown
        self.restart_cause: str | None = None
        self._running: list[_Child | None] = [None] * len(children)
        #: children a restart must not start again (temporary ones that exited or were stopped)
        self._gone: set[int] = set()
        # Unbounded: a child reports its exit synchronously from its own task.
        self._exits_send, self._exits = trio.open_memory_channel[tuple[_Child, BaseException | None] | None](math.inf)
        self._failure: BaseException | None = None
        self._nursery: trio.Nursery | None = None
        #: set once ``serve`` has stopped every child (for a parent's polite stop)
        self._stopped = trio.Event()
        #: restarts this supervisor made (not those of supervisors under it)
        self.restarts = 0

    def request_stop(self) -> None:
        """Begin the orderly shutdown."""
        self._exits_send.send_nowait(None)

    async def stop(self) -> None:
        """Stop every child in order and wait until they have (a parent's polite stop)."""
        self.request_stop()
        await self._stopped.wait()

    def child_spec(self, name: str, *, restart: Restart = Restart.PERMANENT, shutdown: float = 120.0) -> ChildSpec:
        """This supervisor as a child of another one."""
        return ChildSpec(name, self.serve, restart=restart, stop=self.stop, shutdown=shutdown)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start every child, report ready, supervise until ``request_stop``
        (or escalation), then stop the children in reverse order."""
        self._stopped = trio.Event()
        self._exits_send, self._exits = trio.open_memory_channel[tuple[_Child, BaseException | None] | None](math.inf)
        self._running = [None] * len(self.children)
        self._gone = set()
        self._failure = None
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for index in range(len(self.children)):
                # Errors before ready surface at the caller, as with nursery.start.
                await self._start(index)
            task_status.started()
            while (report := await self._exits.receive()) is not None:
                child, error = report
                if child.stopping or self._running[child.index] is not child:
                    continue  # an exit the supervisor caused, or of a life already replaced
                await self._on_exit(child, error)
                if self._failure is not None:
                    break
            await self._stop_from(0)
            self._stopped.set()
        if self._failure is not None:
            raise SupervisorGaveUp(f"gave up on a child after too many restarts: {self._failure}") from self._failure

    async def _on_exit(self, child: _Child, error: BaseException | None) -> None:
        """Restart what the exit of ``child`` calls for, by its restart type
        and the strategy; a failed (re)start before ready is one more exit of
        that child."""
        index, spec = child.index, child.spec
        self._running[index] = None
        if spec.restart is Restart.TEMPORARY:
            self._gone.add(index)
            return
        if spec.restart is Restart.TRANSIENT and error is None:
            return
        while True:
            if not self.intensity.allow():
                self._failure = error or RuntimeError(f"{spec.name} kept exiting")
                return
            log.warning("restarting %s (%s)", spec.name, self.strategy.value)
            self.restarts += 1
            self.restart_cause = spec.name
            try:
                if self.strategy is Strategy.REST_FOR_ONE:
                    await self._stop_from(index + 1)
                    targets = [index, *(i for i in range(index + 1, len(self.children)) if i not in self._gone)]
                else:
                    targets = [index]
                for target in targets:
                    try:
                        await self._start(target)
                    except Exception as exc:  # noqa: BLE001 - counts as a crash of that child
                        index, spec, error = target, self.children[target], unwrap(exc)
                        log.error("child %s failed to start again: %r", spec.name, error)
                        break
                else:
                    return
            finally:
                self.restart_cause = None

    async def _start(self, index: int) -> None:
        """Start child ``index`` and wait until it is ready."""
        assert self._nursery is not None
        child = _Child(self.children[index], index)
        self._running[index] = child
        try:
            await self._nursery.start(self._run, child)
        except BaseException:
            self._running[index] = None
            raise

    async def _run(self, child: _Child, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """One life of a child: start it, report ready, and once it has been
        ready tell the supervisor how it ended unless the supervisor ended it."""
        error: BaseException | None = None
        try:
            with child.scope:
                try:
                    async with trio.open_nursery() as inner:
                        await inner.start(child.spec.start)
                        child.ready = True
                        task_status.started()
                except Exception as exc:  # noqa: BLE001 - judged by the restart type
                    if not child.ready:
                        raise  # surfaces at nursery.start, where the supervisor waits
                    error = unwrap(exc)
                    log.exception("child %s crashed", child.spec.name)
        finally:
            child.finished.set()
        if not child.stopping:
            self._exits_send.send_nowait((child, error))

    async def _stop_from(self, first: int) -> None:
        """Stop the running children from position ``first`` on, last first:
        polite stop (if any), then cancel, then wait until it has finished."""
        for index in reversed(range(first, len(self.children))):
            child = self._running[index]
            if child is None:
                continue
            child.stopping = True
            if child.spec.stop is not None and not child.finished.is_set():
                with trio.CancelScope(shield=True):
                    with trio.move_on_after(child.spec.shutdown) as polite:
                        try:
                            await child.spec.stop()
                        except Exception:  # noqa: BLE001 - stopping goes on
                            log.exception("polite stop of %s failed", child.spec.name)
                    if polite.cancelled_caught:
                        log.error("%s did not stop within %gs; cancelling it", child.spec.name, child.spec.shutdown)
            child.scope.cancel()
            with trio.CancelScope(shield=True):
                await child.finished.wait()
            self._running[index] = None
            if child.spec.restart is Restart.TEMPORARY:
                self._gone.add(index)


def unwrap(exc: BaseException) -> BaseException:
    """The lone error inside nested single-exception groups (trio nurseries
    wrap what their children raise)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc

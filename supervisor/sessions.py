"""ProviderSessionManager: one supervised session per live provider process.

A session is a ``transient`` child in OTP terms: a requested stop (idle reap,
shutdown) is normal, an unrequested exit is a crash that is recorded with its
exit code or signal and reported to the owning thread. Every state change is
a ``ProviderSession`` record, so ``daemon.status`` and a restarted daemon see
the same truth.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import trio

from agentd.actors.providers.base import (
    ProviderAdapter,
    ProviderConnection,
    ProviderEvent,
    ProviderRuntimeError,
    RecoveryDecision,
    SessionClaim,
    SessionExited,
    SessionHost,
)
from agentd.protocol.errors import LimitExceeded
from agentd.store.batch import WriteBatch
from agentd.store.db import Store, struct_copy
from agentd.store.ids import new_id
from agentd.store.records import ProviderSession, to_wire

from agentd.actors.providers.procinfo import process_start_ticks
from agentd.actors.providers.tool_credentials import ToolCredentials
from .tree import RestartIntensity, unwrap

log = logging.getLogger(__name__)

Deliver = Callable[[str, ProviderEvent], Awaitable[None]]

#: seconds a claimed place waits for its run to start before it lapses (a
#: delegated task's run starts within moments of its commit; this only keeps
#: a place from leaking when a run never starts, e.g. at shutdown)
CLAIM_LEASE = 60.0
#: why a session stopped to make room for another under ``[daemon] max_sessions``
MAKE_ROOM = "session_limit"


@dataclass
class _LiveSession:
    record: ProviderSession
    adapter: ProviderAdapter
    conn: ProviderConnection | None = None
    cancel_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    stop_reason: str | None = None
    last_active: float = 0.0  # trio clock
    exited: trio.Event = field(default_factory=trio.Event)


class ProviderSessionManager(SessionHost):
    """Starts, tracks, reaps and stops provider runtime processes, one per thread.

    Args:
        store: where ProviderSession records go.
        adapters: provider instances by name.
        deliver: hands a provider event to its thread's actor.
        wall_clock: timestamps for records.
        idle_timeouts: seconds an idle session of each provider may live.
        restart_intensity: ``(max_restarts, period)`` of crash recoveries per
            thread before a crash loop is declared.
        credentials: the tool credentials of sessions whose adapter offers
            agentd's MCP tool: issued before the runtime starts, revoked when
            the session ends (None: none is issued).
        max_sessions: provider sessions that may exist at once (None: no bound).

    The bound counts *places*: a thread holds one while it has a session
    that is not stopping, or a run in flight (it is starting its session or
    will need one again), or a ``SessionClaim`` for a session about to
    start. A new session past the bound first stops idle sessions, the
    longest idle first (reason ``session_limit``; an idle session is not
    work, and its next message resumes it); with none idle it is refused
    with ``limit_exceeded``.
    """

    def __init__(
        self,
        store: Store,
        adapters: dict[str, ProviderAdapter],
        *,
        deliver: Deliver,
        wall_clock: Callable[[], float] = time.time,
        idle_timeouts: dict[str, float] | None = None,
        restart_intensity: tuple[int, float] = (3, 60.0),
        credentials: ToolCredentials | None = None,
        max_sessions: int | None = None,
    ) -> None:
        self.store = store
        self.credentials = credentials
        self.adapters = adapters
        self._deliver = deliver
        self.now = wall_clock
        self.idle_timeouts = idle_timeouts or {}
        self._restart_intensity = restart_intensity
        self._intensity: dict[str, RestartIntensity] = {}
        self._live: dict[str, _LiveSession] = {}  # by thread id
        self._busy: set[str] = set()  # threads with work in flight
        self._locks: dict[str, trio.Lock] = {}
        self.max_sessions = max_sessions
        self._claims: list[SessionClaim] = []
        self._changed = trio.Event()
        self._closing = False
        self._nursery: trio.Nursery | None = None

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host session tasks and the idle reaper until cancelled; cancelled
        sessions are stopped with the shutdown ladder by their adapter.

        A restart (the daemon root is ``rest_for_one``) starts clean: every
        session of the earlier life ran in its nursery and left ``_live`` as it
        ended, sessions may start again after ``stop_all``, and no busy mark or
        claim survives (the actors and calls that made them are gone, or
        re-mark their next run).
        """
        self._closing = False
        self._busy.clear()
        self._claims.clear()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._reap_idle_sessions, nursery)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None

    # -- the idle reaper ------------------------------------------------------------

    def idle_deadline(self, thread_id: str) -> float | None:
        """When the thread's session becomes reapable (trio clock), or None
        while it is busy, starting or stopping."""
        live = self._live.get(thread_id)
        if live is None or live.conn is None or live.stop_reason is not None or thread_id in self._busy:
            return None
        return live.last_active + self.idle_timeouts.get(live.adapter.name, 600.0)

    async def _reap_idle_sessions(self, nursery: trio.Nursery) -> None:
        """Stop every session idle past its provider's timeout, through the
        same stop path as everything else (reason ``idle_timeout``). Its
        ProviderThread stays durable; the next message resumes it."""
        while True:
            deadlines = [d for t in self._live if (d := self.idle_deadline(t)) is not None]
            changed = self._changed = trio.Event()
            with trio.move_on_at(min(deadlines, default=float("inf"))):
                await changed.wait()
                continue
            now = trio.current_time()
            for thread_id in list(self._live):
                deadline = self.idle_deadline(thread_id)
                if deadline is not None and deadline <= now:
                    log.info("reaping idle session of thread %s", thread_id)
                    nursery.start_soon(self.stop_session, thread_id, "idle_timeout")

    def _touch(self) -> None:
        self._changed.set()

    # -- restart intensity ------------------------------------------------------------

    def allow_recovery(self, thread_id: str, crash: str) -> RecoveryDecision:
        """The one crash-recovery policy (SPEC F11): record a recovery of the
        thread's runtime and say whether to retry, or why not once the restart
        intensity is exceeded (a crash loop). ``crash`` says how it ended."""
        intensity = self._intensity.get(thread_id)
        if intensity is None:
            intensity = self._intensity[thread_id] = RestartIntensity(*self._restart_intensity)
        if intensity.allow():
            return RecoveryDecision(retry=True)
        limit, period = self._restart_intensity
        return RecoveryDecision(
            retry=False,
            reason=(
                f"provider_crash_loop: the provider crashed more than {limit} times within {period:g}s; "
                f"agentd stopped restarting it (last: {crash})"
            ),
        )

    # -- SessionHost ------------------------------------------------------------

    def adapter(self, provider: str) -> ProviderAdapter:
        return self.adapters[provider]

    def live_session(self, thread_id: str) -> tuple[str, ProviderConnection] | None:
        live = self._live.get(thread_id)
        if live is None or live.conn is None or live.stop_reason is not None:
            return None
        return live.record.id, live.conn

    def mark_busy(self, thread_id: str, busy: bool) -> None:
        if busy:
            self._busy.add(thread_id)
            # The run started: the busy thread holds its place from now on.
            self._claims = [c for c in self._claims if c.thread_id != thread_id]
        else:
            self._busy.discard(thread_id)
        live = self._live.get(thread_id)
        if live is not None:
            live.last_active = trio.current_time()
        self._touch()

    async def ensure_session(self, thread_id: str, provider: str) -> tuple[str, ProviderConnection]:
        if self._closing:
            raise ProviderRuntimeError("the daemon is shutting down; no provider is started")
        if self._nursery is None:
            raise ProviderRuntimeError("the provider-session manager is not running (it is being restarted); no provider is started")
        lock = self._locks.setdefault(thread_id, trio.Lock())
        async with lock:
            live = self._live.get(thread_id)
            if live is not None and live.conn is not None and live.stop_reason is None:
                if live.adapter.name == provider:
                    live.last_active = trio.current_time()
                    return live.record.id, live.conn
                await self.stop_session(thread_id, "provider_switched")
            return await self._start(thread_id, self.adapters[provider])

    async def claim_session(self, thread_id: str | None) -> SessionClaim:
        # A thread that holds a place already (an idle session of its own)
        # needs no room; its claim keeps that session from being stopped to
        # make room for another until its run has started.
        held = thread_id is not None and thread_id in self._holders()[0]
        victims = [] if held else self._make_room(thread_id)
        claim = SessionClaim(thread_id=thread_id, expires=trio.current_time() + CLAIM_LEASE)
        self._claims.append(claim)
        try:
            await self._stopped(victims)
        except BaseException:
            self.release_claim(claim)
            raise
        return claim

    def release_claim(self, claim: SessionClaim) -> None:
        if claim in self._claims:
            self._claims.remove(claim)

    # -- the bound on sessions (SPEC F19) ------------------------------------------------

    def _holders(self, besides: str | None = None) -> tuple[set[str], int]:
        """The threads holding a place, and the claims for threads not made yet."""
        now = trio.current_time()
        self._claims = [c for c in self._claims if c.expires > now]
        threads = {t for t, live in self._live.items() if live.stop_reason is None} | self._busy
        threads |= {c.thread_id for c in self._claims if c.thread_id is not None}
        threads.discard(besides)
        return threads, sum(1 for c in self._claims if c.thread_id is None)

    def _make_room(self, thread_id: str | None) -> list[_LiveSession]:
        """Make room for one more session (of ``thread_id``): start stopping as
        many idle sessions as the bound needs, the longest idle first, and
        return them (their exit is awaited by the caller). Synchronous: the
        place counts as taken before anything else runs.

        Raises:
            LimitExceeded: not enough idle sessions to stop.
        """
        if self.max_sessions is None:
            return []
        threads, unnamed = self._holders(besides=thread_id)
        excess = len(threads) + unnamed + 1 - self.max_sessions
        if excess <= 0:
            return []
        claimed = {c.thread_id for c in self._claims}
        idle = sorted(
            (live for t, live in self._live.items()
             if live.conn is not None and live.stop_reason is None and t not in self._busy and t not in claimed),
            key=lambda live: live.last_active,
        )
        if len(idle) < excess:
            working = sorted(threads)
            raise LimitExceeded(
                f"agent session limit: {len(threads) + unnamed} provider sessions are in use by work in flight "
                f"and none is idle, the limit is {self.max_sessions} ([daemon] max_sessions); wait for a run "
                "to end, stop one (thread.stop), or raise the limit",
                limit="max_sessions", value=self.max_sessions, threadIds=working,
            )
        victims = idle[:excess]
        for live in victims:
            log.info("stopping idle session of thread %s to make room (max_sessions)", live.record.thread_id)
            live.stop_reason = MAKE_ROOM
            live.cancel_scope.cancel()
        self._touch()
        return victims

    @staticmethod
    async def _stopped(victims: list[_LiveSession]) -> None:
        for live in victims:
            await live.exited.wait()

    # -- lifecycle ----------------------------------------------------------------

    async def _start(self, thread_id: str, adapter: ProviderAdapter) -> tuple[str, ProviderConnection]:
        # The bound is checked and the place taken in one step (no await in
        # between): the new session is in _live before anything else runs.
        victims = self._make_room(thread_id)
        now = self.now()
        record = ProviderSession(
            id=new_id("pss"), provider=adapter.name, kind=adapter.kind, thread_id=thread_id,
            status="starting", started_at=now, last_active_at=now,
        )
        live = _LiveSession(record=record, adapter=adapter, last_active=trio.current_time())
        self._live[thread_id] = live
        try:
            await self._stopped(victims)
            await self._save(record, "session.starting")
        except BaseException:
            if self._live.get(thread_id) is live:
                del self._live[thread_id]
            live.exited.set()  # a stop_session waiting on it is released
            raise
        try:
            if self._nursery is None:
                raise ProviderRuntimeError("the provider-session manager stopped; no provider is started")
            if self.credentials is not None and getattr(adapter, "agentd_tool", None) is not None:
                await self.credentials.issue(record.id)
            conn = await self._nursery.start(self._run_session, live)
        except BaseException as group:
            exc = unwrap(group)
            if self._live.get(thread_id) is live:
                del self._live[thread_id]
            if self.credentials is not None:
                with trio.CancelScope(shield=True):
                    await self.credentials.revoke(record.id)
            reason = f"start_failed: {exc}"
            with trio.CancelScope(shield=True):
                await self._save(struct_copy(live.record, status="error", reason=reason, stopped_at=self.now()), "session.error")
            if isinstance(exc, ProviderRuntimeError):
                raise exc from None
            if isinstance(exc, Exception):
                raise ProviderRuntimeError(f"{adapter.name} could not start: {exc}") from exc
            raise
        return live.record.id, conn

    async def _run_session(self, live: _LiveSession, *,
                           task_status: trio.TaskStatus[ProviderConnection] = trio.TASK_STATUS_IGNORED) -> None:
        thread_id = live.record.thread_id or ""
        emit = functools.partial(self._emit, live)
        started = False
        try:
            with live.cancel_scope:
                async with trio.open_nursery() as nursery:
                    conn = await nursery.start(
                        functools.partial(live.adapter.open, session_id=live.record.id, emit=emit)
                    )
                    live.conn = conn
                    pid = conn.pid
                    live.record = struct_copy(
                        live.record, status="ready", pid=pid,
                        process_start_ticks=process_start_ticks(pid) if pid else None,
                        last_active_at=self.now(),
                    )
                    # Bookkeeping that rides with the next commit (the
                    # attempt's turn starting, just after): the pid is for
                    # orphan cleanup after a crash, and a runtime a crash
                    # leaves before it is written is the process guard's,
                    # which kills it with the daemon.
                    self._save_lazy(live.record, "session.ready")
                    started = True
                    self._touch()
                    task_status.started(conn)
        finally:
            if live.stop_reason is None and trio.current_effective_deadline() == float("-inf"):
                # Cancelled from outside its own scope: the manager itself is
                # ending without a polite stop (it crashed). That is no crash
                # of the provider: the owning actor ends the run, not retries it.
                live.stop_reason = "session_manager_stopped"
            if started:
                with trio.CancelScope(shield=True):
                    await self._on_exit(live, thread_id)
            else:
                # Cancelled while starting: nothing ran, but whoever is waiting
                # in stop_session must still be released.
                live.exited.set()

    async def _on_exit(self, live: _LiveSession, thread_id: str) -> None:
        if self._live.get(thread_id) is live:
            del self._live[thread_id]
        if self.credentials is not None:
            await self.credentials.revoke(live.record.id)
        code, sig = live.conn.exit_status if live.conn is not None else (None, None)
        requested = live.stop_reason is not None
        if requested:
            record = struct_copy(live.record, status="stopped", reason=live.stop_reason, stopped_at=self.now())
        else:
            how = f"exit code {code}" if code is not None else f"signal {sig}"
            record = struct_copy(live.record, status="error", reason=f"crashed: {how}", stopped_at=self.now())
        live.record = record
        try:
            await self._save(record, f"session.{record.status}", exitCode=code, signal=sig)
        except Exception:  # noqa: BLE001 - at shutdown the writer may be gone; restart reconciles
            log.warning("could not record the end of session %s", record.id)
        live.exited.set()
        self._touch()
        event = SessionExited(
            session_id=record.id, exit_code=code, signal=sig, requested=requested, reason=live.stop_reason or ""
        )
        try:
            await self._deliver(thread_id, event)
        except Exception:  # noqa: BLE001 - the registry may be shutting down
            log.debug("session exit of %s not delivered", record.id)

    async def _emit(self, live: _LiveSession, event: ProviderEvent) -> None:
        live.last_active = trio.current_time()
        pid = live.conn.pid if live.conn is not None else None
        if pid and pid != live.record.pid and live.stop_reason is None:
            # The adapter replaced its process within the session (Claude after
            # a failed --resume): daemon.status and orphan cleanup need the new pid.
            live.record = struct_copy(live.record, pid=pid, process_start_ticks=process_start_ticks(pid))
            await self._save(live.record, "session.ready")
        await self._deliver(live.record.thread_id or "", event)

    async def stop_session(self, thread_id: str, reason: str) -> None:
        """Stop a thread's session through the production stop path and wait
        until its exit is recorded."""
        live = self._live.get(thread_id)
        if live is None:
            return
        if live.stop_reason is None:
            live.stop_reason = reason
            live.cancel_scope.cancel()
        await live.exited.wait()

    async def stop_all(self, reason: str) -> None:
        """Stop every session (daemon shutdown), concurrently; none starts after."""
        self._closing = True
        async with trio.open_nursery() as nursery:
            for thread_id in list(self._live):
                nursery.start_soon(self.stop_session, thread_id, reason)

    def _batch(self, record: ProviderSession, event_type: str, **payload: Any) -> WriteBatch:
        batch = WriteBatch()
        batch.put(record)
        batch.event(event_type, thread_id=record.thread_id, at=self.now(), session=to_wire(record), **payload)
        return batch

    async def _save(self, record: ProviderSession, event_type: str, **payload: Any) -> None:
        await self.store.commit(self._batch(record, event_type, **payload))

    def _save_lazy(self, record: ProviderSession, event_type: str) -> None:
        self.store.commit_lazy(self._batch(record, event_type), f"{event_type} of session {record.id}")

    def runtime_processes(self) -> list[tuple[str, int, int]]:
        """``(session id, pid, start ticks)`` of every live runtime process:
        the roots of agents' process trees (``peers.AgentProcesses``)."""
        return [
            (live.record.id, live.record.pid, live.record.process_start_ticks)
            for live in self._live.values()
            if live.record.pid and live.record.process_start_ticks is not None
        ]

    # -- status ---------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """Live sessions as ``daemon.status`` shows them."""
        out = []
        for live in self._live.values():
            item = to_wire(live.record)
            item["busy"] = live.record.thread_id in self._busy
            out.append(item)
        return out

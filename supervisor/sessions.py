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

from actors.providers.base import (
    ProviderAdapter,
    ProviderConnection,
    ProviderEvent,
    ProviderRuntimeError,
    SessionExited,
    SessionHost,
)
from store.batch import WriteBatch
from store.db import Store, struct_copy
from store.ids import new_id
from store.records import ProviderSession, to_wire

from .procinfo import process_start_ticks

log = logging.getLogger(__name__)

Deliver = Callable[[str, ProviderEvent], Awaitable[None]]


@dataclass
class _LiveSession:
    record: ProviderSession
    adapter: ProviderAdapter
    conn: ProviderConnection | None = None
    cancel_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    stop_reason: str | None = None
    busy: bool = False
    last_active: float = 0.0  # trio clock
    exited: trio.Event = field(default_factory=trio.Event)


class ProviderSessionManager(SessionHost):
    """Starts, tracks and stops provider runtime processes, one per thread.

    Args:
        store: where ProviderSession records go.
        adapters: provider instances by name.
        deliver: hands a provider event to its thread's actor.
        wall_clock: timestamps for records.
    """

    def __init__(
        self,
        store: Store,
        adapters: dict[str, ProviderAdapter],
        *,
        deliver: Deliver,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.adapters = adapters
        self._deliver = deliver
        self.now = wall_clock
        self._live: dict[str, _LiveSession] = {}  # by thread id
        self._locks: dict[str, trio.Lock] = {}
        self._nursery: trio.Nursery | None = None

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Host session tasks until cancelled; cancelled sessions are stopped
        with the shutdown ladder by their adapter."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    # -- SessionHost ------------------------------------------------------------

    def adapter(self, provider: str) -> ProviderAdapter:
        return self.adapters[provider]

    def live_session(self, thread_id: str) -> tuple[str, ProviderConnection] | None:
        live = self._live.get(thread_id)
        if live is None or live.conn is None or live.stop_reason is not None:
            return None
        return live.record.id, live.conn

    def mark_busy(self, thread_id: str, busy: bool) -> None:
        live = self._live.get(thread_id)
        if live is not None:
            live.busy = busy
            live.last_active = trio.current_time()

    async def ensure_session(self, thread_id: str, provider: str) -> tuple[str, ProviderConnection]:
        lock = self._locks.setdefault(thread_id, trio.Lock())
        async with lock:
            live = self._live.get(thread_id)
            if live is not None and live.conn is not None and live.stop_reason is None:
                if live.adapter.name == provider:
                    live.last_active = trio.current_time()
                    return live.record.id, live.conn
                await self.stop_session(thread_id, "provider_switched")
            return await self._start(thread_id, self.adapters[provider])

    # -- lifecycle ----------------------------------------------------------------

    async def _start(self, thread_id: str, adapter: ProviderAdapter) -> tuple[str, ProviderConnection]:
        now = self.now()
        record = ProviderSession(
            id=new_id("pss"), provider=adapter.name, kind=adapter.kind, thread_id=thread_id,
            status="starting", started_at=now, last_active_at=now,
        )
        await self._save(record, "session.starting")
        live = _LiveSession(record=record, adapter=adapter, last_active=trio.current_time())
        self._live[thread_id] = live
        assert self._nursery is not None, "session manager is not serving"
        try:
            conn = await self._nursery.start(self._run_session, live)
        except BaseException as exc:
            if self._live.get(thread_id) is live:
                del self._live[thread_id]
            reason = f"start_failed: {exc}"
            with trio.CancelScope(shield=True):
                await self._save(struct_copy(live.record, status="error", reason=reason, stopped_at=self.now()), "session.error")
            if isinstance(exc, Exception) and not isinstance(exc, ProviderRuntimeError):
                raise ProviderRuntimeError(f"{adapter.name} could not start: {exc}") from exc
            raise
        return live.record.id, conn

    async def _run_session(self, live: _LiveSession, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
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
                    await self._save(live.record, "session.ready")
                    started = True
                    task_status.started(conn)
        finally:
            if started:
                with trio.CancelScope(shield=True):
                    await self._on_exit(live, thread_id)

    async def _on_exit(self, live: _LiveSession, thread_id: str) -> None:
        if self._live.get(thread_id) is live:
            del self._live[thread_id]
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
        event = SessionExited(
            session_id=record.id, exit_code=code, signal=sig, requested=requested, reason=live.stop_reason or ""
        )
        try:
            await self._deliver(thread_id, event)
        except Exception:  # noqa: BLE001 - the registry may be shutting down
            log.debug("session exit of %s not delivered", record.id)

    async def _emit(self, live: _LiveSession, event: ProviderEvent) -> None:
        live.last_active = trio.current_time()
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
        """Stop every session (daemon shutdown), concurrently."""
        async with trio.open_nursery() as nursery:
            for thread_id in list(self._live):
                nursery.start_soon(self.stop_session, thread_id, reason)

    async def _save(self, record: ProviderSession, event_type: str, **payload: Any) -> None:
        batch = WriteBatch()
        batch.put(record)
        batch.event(event_type, thread_id=record.thread_id, at=self.now(), session=to_wire(record), **payload)
        await self.store.commit(batch)

    # -- status ---------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """Live sessions as ``daemon.status`` shows them."""
        out = []
        for live in self._live.values():
            item = to_wire(live.record)
            item["busy"] = live.busy
            out.append(item)
        return out

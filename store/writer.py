"""The group-commit writer: one OS thread that owns every LMDB write.

Batches from every actor queue up while a transaction is being synced; the
writer takes all that are waiting, applies them in one write transaction with
one fsync, and then, back on the trio loop and in commit order, publishes the
group's events and wakes each caller. py-lmdb binds a write transaction to the
thread that began it, so begin→puts→commit always runs whole on that thread.

``inline=True`` commits on the event loop instead. It exists for tests under
``MockClock(autojump_threshold=0)``: there a wait on a worker thread looks like
idleness and would let virtual time jump past timeouts.
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import threading
from dataclasses import dataclass
from typing import Callable

import lmdb
import trio

from .batch import WriteBatch, index_key
from .errors import StoreError
from .records import CommandReceipt, Event, encode_record

log = logging.getLogger(__name__)

_STOP = object()

#: with less than this free, a write that failed with an I/O error is put
#: down to a full disk (LMDB reports a short write as EIO, not ENOSPC)
LOW_DISK_BYTES = 16 << 20


def describe_write_failure(exc: BaseException, path: str) -> str:
    """What a failed write tells the person: a full disk is named as such,
    with the free space, since LMDB's own words for it can be "Input/output
    error" (a write that came up short) as well as "No space left on device"."""
    text = f"write failed: {exc}"
    no_space = (isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or os.strerror(errno.ENOSPC) in str(exc)
    io_error = (isinstance(exc, OSError) and exc.errno == errno.EIO) or os.strerror(errno.EIO) in str(exc)
    if not (no_space or io_error):
        return text
    try:
        stat = os.statvfs(path)
    except OSError:
        return text
    free = stat.f_bavail * stat.f_frsize
    if no_space or free < LOW_DISK_BYTES:
        return (f"{text}: the disk holding agentd's store ({path}) is full ({free} bytes free); "
                "nothing of this was written, free some space and try again")
    return text


def full_disk_note(path: str, *, below: int = LOW_DISK_BYTES) -> str | None:
    """A sentence saying the disk holding ``path`` is full, or None when it
    has at least ``below`` bytes free (or cannot be asked)."""
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    free = stat.f_bavail * stat.f_frsize
    if free >= below:
        return None
    return f"the disk holding agentd's data ({path}) is full ({free} bytes free); free some space and send again"


@dataclass
class CommitResult:
    """What a durable batch became: its events with their ``seq``s and the
    sequence number a client can resume after (``seq``)."""

    events: list[Event]
    seq: int


@dataclass
class _Pending:
    batch: WriteBatch
    task: trio.lowlevel.Task | None = None  # parked until the batch is durable
    result: CommitResult | None = None
    error: BaseException | None = None


def _refuse_cancel(_raise_cancel) -> trio.lowlevel.Abort:
    # Once queued the batch will be written whatever happens to the caller;
    # it waits for the answer so in-memory state never runs ahead of disk.
    return trio.lowlevel.Abort.FAILED


class GroupCommitWriter:
    """Commits WriteBatches durably, many per transaction.

    Args:
        env: the open LMDB environment (opened with ``sync=True``).
        dbs: sub-database handles by name.
        last_seq: the highest event ``seq`` already stored.
        on_commit: called on the trio loop with each committed group's events,
            in ``seq`` order, before any caller of that group is woken.
        inline: commit on the event loop (tests with a virtual clock).
        max_group: most batches in one transaction.
    """

    def __init__(
        self,
        env: lmdb.Environment,
        dbs: dict[str, object],
        *,
        last_seq: int,
        on_commit: Callable[[list[Event]], None],
        inline: bool = False,
        max_group: int = 512,
    ) -> None:
        self._env = env
        self._dbs = dbs
        self._last_seq = last_seq
        self._on_commit = on_commit
        self._inline = inline
        self._max_group = max_group
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        #: commits and transactions so far; benchmarks read these
        self.batches_committed = 0
        self.transactions = 0

    @property
    def last_seq(self) -> int:
        """The highest ``seq`` known durable."""
        return self._last_seq

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run the writer thread until cancelled; then drain what is queued
        and stop. Start with ``await nursery.start(writer.serve)``."""
        self._token = trio.lowlevel.current_trio_token()
        self._closed = False
        if not self._inline:
            self._thread = threading.Thread(target=self._thread_main, name="agentd-store-writer", daemon=True)
            self._thread.start()
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            self._closed = True
            if self._thread is not None:
                self._queue.put(_STOP)
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self._thread.join)

    async def commit(self, batch: WriteBatch) -> CommitResult:
        """Make ``batch`` durable and return its result.

        Raises:
            StoreError: the batch could not be written (nothing of it was).
        """
        if self._closed:
            raise StoreError("the store is shutting down; nothing was written")
        pending = _Pending(batch)
        if self._inline:
            self._deliver([pending], self._apply_group([pending]))
            await trio.lowlevel.checkpoint()
        else:
            pending.task = trio.lowlevel.current_task()
            self._queue.put(pending)
            await trio.lowlevel.wait_task_rescheduled(_refuse_cancel)
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    # -- writer thread ------------------------------------------------------

    def _thread_main(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                break
            group = [first]
            while len(group) < self._max_group:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                group.append(item)
            results = self._apply_group(group)
            try:
                self._token.run_sync_soon(self._deliver, group, results)
            except trio.RunFinishedError:  # pragma: no cover - loop gone mid-shutdown
                return

    def _apply_group(self, group: list[_Pending]) -> list[CommitResult | BaseException]:
        """Write ``group`` in one transaction; if that fails, write each batch
        alone so one bad batch cannot fail its neighbours."""
        try:
            return self._write(group)
        except Exception as exc:  # noqa: BLE001 - retried one by one below
            if len(group) == 1:
                return [self._failure(exc)]
            log.warning("group commit of %d batches failed (%s); retrying one by one", len(group), exc)
        results: list[CommitResult | BaseException] = []
        for pending in group:
            try:
                results.extend(self._write([pending]))
            except Exception as exc:  # noqa: BLE001 - reported to that caller
                results.append(self._failure(exc))
        return results

    def _failure(self, exc: BaseException) -> StoreError:
        return StoreError(describe_write_failure(exc, self._env.path()))

    def _write(self, group: list[_Pending]) -> list[CommitResult]:
        dbs = self._dbs
        seq = self._last_seq
        results = []
        with self._env.begin(write=True) as txn:
            for pending in group:
                batch = pending.batch
                for db, key, value in batch.ops:
                    if value is None:
                        txn.delete(key, db=dbs[db])
                    else:
                        txn.put(key, value, db=dbs[db])
                events = []
                for draft in batch.events:
                    seq += 1
                    event = Event(
                        seq=seq,
                        type=draft.type,
                        thread_id=draft.thread_id,
                        run_id=draft.run_id,
                        node_id=draft.node_id,
                        at=draft.at,
                        payload=draft.payload,
                    )
                    txn.put(seq.to_bytes(8, "big"), encode_record("events", event), db=dbs["events"])
                    if draft.thread_id is not None:
                        txn.put(index_key(draft.thread_id, seq), b"", db=dbs["idx_thread_events"])
                    events.append(event)
                if batch.receipt is not None:
                    command_id, method, result, at = batch.receipt
                    result = {**result, "seq": seq}
                    receipt = CommandReceipt(command_id=command_id, method=method, result=result, at=at)
                    txn.put(command_id.encode(), encode_record("receipts", receipt), db=dbs["receipts"])
                results.append(CommitResult(events=events, seq=seq))
        self._last_seq = seq
        self.transactions += 1
        self.batches_committed += len(group)
        return results

    # -- back on the trio loop ------------------------------------------------

    def _deliver(self, group: list[_Pending], results: list[CommitResult | BaseException]) -> None:
        committed: list[Event] = []
        for pending, result in zip(group, results):
            if isinstance(result, BaseException):
                pending.error = result
            else:
                pending.result = result
                committed.extend(result.events)
        if committed:
            try:
                self._on_commit(committed)
            except Exception:  # pragma: no cover - a subscriber bug must not lose commits
                log.exception("publishing committed events failed")
        for pending in group:
            if pending.task is not None:
                trio.lowlevel.reschedule(pending.task)

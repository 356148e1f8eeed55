"""The group-commit writer: one OS thread that owns every LMDB write.

Batches from every actor queue up while a transaction is being synced; the
writer takes all that are waiting, applies them in one write transaction with
one fsync, and then, back on the trio loop and in commit order, publishes the
group's events and wakes each caller. py-lmdb binds a write transaction to the
thread that began it, so begin→puts→commit always runs whole on that thread.

Everything is encoded once, on the loop, before the hand-off: the writer
thread gets ready key/value bytes, and only patches each event's ``seq`` (and
the receipt's) into the bytes, since seqs are given in commit order there.
Commits made in one pass of the trio scheduler reach the thread in one
hand-off (one queue put, one wake-up), not one per batch.

A batch given to ``commit_lazy`` is bookkeeping that may wait: it is not
handed to the thread until some other batch is (it rides in that batch's
transaction, ahead of it) or ``LAZY_DELAY`` has passed, so the records and
events that only say how work is going (a session is ready, the provider
thread a turn runs on, a message's close) cost no synced commit of their own.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import lmdb
import trio

from .batch import SEP, WriteBatch, stored_payload
from .errors import StoreError
from .records import CommandReceipt, Event, encode_record

if TYPE_CHECKING:
    # py-lmdb's stubs name a sub-database handle only privately.
    from lmdb import _Database as Database

log = logging.getLogger(__name__)


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


#: the ``seq`` an event or receipt is encoded with until the writer patches in
#: its own: the largest uint64, so msgpack spells it in 9 fixed bytes (0xcf + 8)
_SEQ_MARK = (1 << 64) - 1
_SEQ_MARK_BYTES = b"\xcf" + _SEQ_MARK.to_bytes(8, "big")
_RECEIPT_MARK = b"\xa3seq" + _SEQ_MARK_BYTES  # the receipt result's ``"seq": MARK``


def _event_seq_offset() -> int:
    """Where an encoded event keeps its seq: right after ``{"seq":`` and 0xcf
    (``seq`` is the Event's first field, so the offset never varies)."""
    sample = encode_record("events", Event(seq=_SEQ_MARK, type="x"))
    offset = sample.index(_SEQ_MARK_BYTES)
    assert offset == sample.index(b"\xa3seq") + 4, "seq must be the first field of an encoded Event"
    return offset + 1


_EVENT_SEQ_AT = _event_seq_offset()

#: the longest a ``commit_lazy`` batch waits for another commit to ride with
#: (seconds): long enough for a provider's next step (a turn starting after
#: its thread, a run's end after its message) to come, short enough that a
#: client sees the events soon whatever follows
LAZY_DELAY = 0.5

#: called on the loop when a batch is durable: (result, None) or (None, error)
Done = Callable[["CommitResult | None", "BaseException | None"], None]


class _Pending:
    """One batch, encoded on the loop, on its way through the writer."""

    __slots__ = ("batch", "ops", "events", "receipt", "task", "done", "result", "error")

    def __init__(self, batch: WriteBatch, dbs: Mapping[str, Database]) -> None:
        self.batch = batch
        #: (db handle, key, value or None for a delete)
        self.ops: list[tuple[Database, bytes, bytes | None]] = [(dbs[db], key, value) for db, key, value in batch.ops]
        #: (encoded event with _SEQ_MARK, thread id); streamed text is
        #: stored once, in its chunk, not again in its event
        chunks = batch.chunks
        self.events = [
            (encode_record("events", Event(seq=_SEQ_MARK, type=d.type, thread_id=d.thread_id, run_id=d.run_id,
                                           node_id=d.node_id, at=d.at, payload=stored_payload(d, chunks))),
             d.thread_id)
            for d in batch.events
        ]
        self.receipt: tuple[bytes, bytes] | None = None
        if batch.receipt is not None:
            command_id, method, result, at = batch.receipt
            receipt = CommandReceipt(command_id=command_id, method=method, result={**result, "seq": _SEQ_MARK}, at=at)
            self.receipt = (command_id.encode(), encode_record("receipts", receipt))
        self.task: trio.lowlevel.Task | None = None  # parked until the batch is durable
        self.done: Done | None = None  # or called back instead
        self.result: CommitResult | None = None
        self.error: BaseException | None = None


def _refuse_cancel(_raise_cancel: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
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
        dbs: Mapping[str, Database],
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
        #: groups of batches for the writer thread; None stops it
        self._queue: queue.SimpleQueue[list[_Pending] | None] = queue.SimpleQueue()
        #: batches committed in this scheduler pass, handed off together
        self._outbox: list[_Pending] = []
        self._handoff_task: trio.lowlevel.Task | None = None
        self._handoff_parked = False
        #: ``commit_lazy`` batches waiting for another commit (or LAZY_DELAY)
        self._lazy: list[_Pending] = []
        self._lazy_deadline: float | None = None
        self._lazy_armed = trio.Event()
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

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the writer thread until cancelled; then drain what is queued
        and stop. Start with ``await nursery.start(writer.serve)``."""
        self._token = trio.lowlevel.current_trio_token()
        self._closed = False
        if not self._inline:
            self._thread = threading.Thread(target=self._thread_main, name="agentd-store-writer", daemon=True)
            self._thread.start()
        task_status.started()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._lazy_timer)
                await self._hand_off_loop()
        finally:
            self._closed = True
            self._handoff_parked = False
            # What waits is written before the writer stops (it is newer
            # than anything in the outbox: every submit takes it along).
            self._outbox.extend(self._lazy)
            self._lazy.clear()
            if self._thread is not None:
                if self._outbox:
                    self._queue.put(self._outbox)
                    self._outbox = []
                self._queue.put(None)
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(self._thread.join)

    async def commit(self, batch: WriteBatch) -> CommitResult:
        """Make ``batch`` durable and return its result.

        Raises:
            StoreError: the batch could not be written (nothing of it was).
        """
        if self._closed:
            raise StoreError("the store is shutting down; nothing was written")
        pending = self._prepare(batch)
        if self._inline:
            self._deliver([pending], self._apply_group([pending]))
            await trio.lowlevel.checkpoint()
        else:
            pending.task = trio.lowlevel.current_task()
            self._submit(pending)
            await trio.lowlevel.wait_task_rescheduled(_refuse_cancel)
        if pending.error is not None:
            raise pending.error
        assert pending.result is not None
        return pending.result

    def commit_soon(self, batch: WriteBatch, done: Done) -> None:
        """Make ``batch`` durable without a task waiting for it: ``done`` is
        called on the loop with the result (or the StoreError), after the
        batch's events are published. Synchronous: it only queues the batch.

        Raises:
            StoreError: the store is shutting down (nothing was queued).
        """
        pending = self._called_back(batch, done)
        if self._inline:
            self._deliver([pending], self._apply_group([pending]))
        else:
            self._submit(pending)

    def commit_lazy(self, batch: WriteBatch, done: Done) -> None:
        """Make ``batch`` durable with the next batch anyone commits, and
        ``LAZY_DELAY`` from now at the latest, without a synced commit of
        its own: for records a crash may take back without losing anything a
        person or an agent did (the caller says why in its own words). Its
        events are published when it is written, in ``seq`` order with the
        rest; ``done`` is called then (or with the StoreError). Synchronous.

        Raises:
            StoreError: the store is shutting down (nothing was queued).
        """
        pending = self._called_back(batch, done)
        if self._inline:
            self._deliver([pending], self._apply_group([pending]))
            return
        self._lazy.append(pending)
        if self._lazy_deadline is None:
            self._lazy_deadline = trio.current_time() + LAZY_DELAY
            self._lazy_armed.set()

    async def _lazy_timer(self) -> None:
        """Hand the lazy batches over once their LAZY_DELAY is up (when no
        other commit took them along before)."""
        while True:
            deadline = self._lazy_deadline
            if deadline is None:
                self._lazy_armed = trio.Event()
                await self._lazy_armed.wait()
                continue
            await trio.sleep_until(deadline)
            if self._lazy_deadline is not None and trio.current_time() >= self._lazy_deadline:
                self._release_lazy()
                self._wake_hand_off()

    def _release_lazy(self) -> None:
        if self._lazy:
            self._outbox.extend(self._lazy)
            self._lazy.clear()
        self._lazy_deadline = None

    def _called_back(self, batch: WriteBatch, done: Done) -> _Pending:
        """``batch`` encoded, to call ``done`` once written (no task waits)."""
        if self._closed:
            raise StoreError("the store is shutting down; nothing was written")
        pending = self._prepare(batch)
        pending.done = done
        return pending

    def _prepare(self, batch: WriteBatch) -> _Pending:
        try:
            return _Pending(batch, self._dbs)
        except Exception as exc:  # noqa: BLE001 - an unknown database, an unencodable value
            raise StoreError(f"cannot write this batch: {exc!r}; nothing of it was written") from exc

    def _submit(self, pending: _Pending) -> None:
        if self._lazy:
            self._release_lazy()  # what waited rides ahead, in this transaction
        self._outbox.append(pending)
        self._wake_hand_off()

    def _wake_hand_off(self) -> None:
        if self._handoff_parked and self._handoff_task is not None:
            # Runs after every task of this scheduler pass: one hand-off for all.
            self._handoff_parked = False
            trio.lowlevel.reschedule(self._handoff_task)

    async def _hand_off_loop(self) -> None:
        """Give the writer thread each pass's batches in one queue put."""
        self._handoff_task = trio.lowlevel.current_task()
        while True:
            if self._outbox:
                group, self._outbox = self._outbox, []
                self._queue.put(group)
            self._handoff_parked = True
            await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.SUCCEEDED)

    # -- writer thread ------------------------------------------------------

    def _thread_main(self) -> None:
        token = self._token
        assert token is not None, "serve() takes the trio token before it starts this thread"
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            group = list(first)
            while len(group) < self._max_group:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                group.extend(item)
            results = self._apply_group(group)
            try:
                token.run_sync_soon(self._deliver, group, results)
            except trio.RunFinishedError:  # pragma: no cover - loop gone mid-shutdown
                return

    def _apply_group(self, group: list[_Pending]) -> Sequence[tuple[int, int] | BaseException]:
        """Write ``group`` in one transaction; if that fails, write each batch
        alone so one bad batch cannot fail its neighbours."""
        try:
            return self._write(group)
        except Exception as exc:  # noqa: BLE001 - retried one by one below
            if len(group) == 1:
                return [self._failure(exc)]
            log.warning("group commit of %d batches failed (%s); retrying one by one", len(group), exc)
        results: list[tuple[int, int] | BaseException] = []
        for pending in group:
            try:
                results.extend(self._write([pending]))
            except Exception as exc:  # noqa: BLE001 - reported to that caller
                results.append(self._failure(exc))
        return results

    def _failure(self, exc: BaseException) -> StoreError:
        return StoreError(describe_write_failure(exc, self._env.path()))

    def _write(self, group: list[_Pending]) -> list[tuple[int, int]]:
        """Apply ``group`` in one synced transaction; each batch's (first
        seq, last seq) — its events are ``first..last``, in order."""
        events_db = self._dbs["events"]
        by_thread = self._dbs["idx_thread_events"]
        receipts = self._dbs["receipts"]
        seq = self._last_seq
        spans = []
        with self._env.begin(write=True) as txn:
            put, delete = txn.put, txn.delete
            for pending in group:
                for db, key, value in pending.ops:
                    if value is None:
                        delete(key, db=db)
                    else:
                        put(key, value, db=db)
                first = seq + 1
                for encoded, thread_id in pending.events:
                    seq += 1
                    key = seq.to_bytes(8, "big")
                    event = bytearray(encoded)
                    event[_EVENT_SEQ_AT:_EVENT_SEQ_AT + 8] = key
                    put(key, event, db=events_db)
                    if thread_id is not None:
                        put(thread_id.encode() + SEP + key, b"", db=by_thread)
                if pending.receipt is not None:
                    command_id, encoded = pending.receipt
                    at = encoded.rindex(_RECEIPT_MARK) + 5
                    answer = bytearray(encoded)
                    answer[at:at + 8] = seq.to_bytes(8, "big")
                    put(command_id, answer, db=receipts)
                spans.append((first, seq))
        self._last_seq = seq
        self.transactions += 1
        self.batches_committed += len(group)
        return spans

    # -- back on the trio loop ------------------------------------------------

    def _deliver(self, group: list[_Pending], results: Sequence[tuple[int, int] | BaseException]) -> None:
        committed: list[Event] = []
        for pending, result in zip(group, results):
            if isinstance(result, BaseException):
                pending.error = result
                continue
            first, last = result
            events = [
                Event(seq=seq, type=d.type, thread_id=d.thread_id, run_id=d.run_id, node_id=d.node_id, at=d.at,
                      payload=d.payload)
                for seq, d in zip(range(first, last + 1), pending.batch.events)
            ]
            pending.result = CommitResult(events=events, seq=last)
            committed.extend(events)
        if committed:
            try:
                self._on_commit(committed)
            except Exception:  # pragma: no cover - a subscriber bug must not lose commits
                log.exception("publishing committed events failed")
        for pending in group:
            if pending.task is not None:
                trio.lowlevel.reschedule(pending.task)
            elif pending.done is not None:
                try:
                    pending.done(pending.result, pending.error)
                except Exception:  # pragma: no cover - a caller's bug must not stop the others' wake-up
                    log.exception("a commit callback failed")

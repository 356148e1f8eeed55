"""The LMDB environment and the read side of the store.

Reads are short read transactions on the event loop (LMDB readers never block
and never wait on the writer). Writes go only through ``Store.commit``, which
hands them to the group-commit writer.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Callable, TypeVar

import lmdb
import msgspec

from agentd.protocol.errors import AgentdError, CorruptRecord, SchemaTooNew

from .batch import DATABASES, SEP, TEXT_IN_CHUNK, WriteBatch, index_key, text_chunk_key
from .records import (
    AppThread,
    Checkpoint,
    CommandReceipt,
    ContextTransfer,
    ConversationMessage,
    Effect,
    Event,
    ExecutionNode,
    PlanArtifact,
    ProviderSession,
    ProviderThread,
    ProviderTurn,
    Run,
    RunAttempt,
    RecordDecodeError,
    RecordTooNew,
    RuntimeRequest,
    decode_record,
    is_message_head,
    kind_of,
)
from .writer import CommitResult, GroupCommitWriter

DEFAULT_MAP_SIZE = 64 << 30  # sparse on Linux; only what is used takes disk

R = TypeVar("R", bound=msgspec.Struct)

#: where a read that degrades puts what it could not decode (``CorruptRecord``
#: or ``SchemaTooNew``), in the order met; reads given none skip them silently
#: (each is logged once per daemon)
Unreadable = list[AgentdError]

log = logging.getLogger(__name__)


class Store:
    """One LMDB environment with a sub-database per record kind and index.

    Args:
        path: the directory of the environment (created 0700 if missing).
        on_commit: receives every committed group's events, in ``seq`` order.
        inline_commits: commit on the event loop (virtual-clock tests).
        map_size: LMDB map size in bytes.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        on_commit: Callable[[list[Event]], None] = lambda events: None,
        inline_commits: bool = False,
        map_size: int = DEFAULT_MAP_SIZE,
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.env = lmdb.open(
            str(self.path),
            map_size=map_size,
            max_dbs=len(DATABASES) + 8,
            sync=True,
            metasync=True,
            max_readers=512,
        )
        self.dbs = {name: self.env.open_db(name.encode()) for name in DATABASES}
        #: (kind, key) of every corrupt record met so far: each is logged once
        self._corrupt_seen: set[tuple[str, bytes]] = set()
        self._on_commit = on_commit
        self.writer = GroupCommitWriter(
            self.env, self.dbs, last_seq=self._read_last_seq(), on_commit=self._publish, inline=inline_commits
        )

    def set_on_commit(self, on_commit: Callable[[list[Event]], None]) -> None:
        """Point committed-event publication at ``on_commit`` (the event hub)."""
        self._on_commit = on_commit

    def _publish(self, events: list[Event]) -> None:
        self._on_commit(events)

    def close(self) -> None:
        self.env.close()

    # -- writing --------------------------------------------------------------

    async def commit(self, batch: WriteBatch) -> CommitResult:
        """Make ``batch`` durable (group commit); see GroupCommitWriter.commit."""
        return await self.writer.commit(batch)

    def commit_soon(self, batch: WriteBatch, done: Callable[..., None]) -> None:
        """Queue ``batch`` with no task waiting; see GroupCommitWriter.commit_soon."""
        self.writer.commit_soon(batch, done)

    def commit_lazy(self, batch: WriteBatch, what: str) -> None:
        """Queue bookkeeping ``batch`` to ride with the next commit (see
        GroupCommitWriter.commit_lazy); a failure is logged, naming ``what``.

        Raises:
            StoreError: the store is shutting down (nothing was queued).
        """
        def done(_result: CommitResult | None, error: BaseException | None) -> None:
            if error is not None:
                log.warning("could not record %s: %s", what, error)

        self.writer.commit_lazy(batch, done)

    @property
    def last_seq(self) -> int:
        return self.writer.last_seq

    # -- generic reads ----------------------------------------------------------

    def _read_last_seq(self) -> int:
        with self.env.begin(db=self.dbs["events"]) as txn:
            cursor = txn.cursor()
            if cursor.last():
                return int.from_bytes(cursor.key(), "big")
        return 0

    def get(self, cls: type[R], record_id: str) -> R | None:
        """The record of type ``cls`` (``RunAttempt``, ``Effect``, …) with
        ``record_id``, or None.

        Raises:
            CorruptRecord: the stored value cannot be decoded.
            SchemaTooNew: a newer agentd wrote it.
        """
        kind = kind_of(cls)
        key = record_id.encode()
        with self.env.begin() as txn:
            data = txn.get(key, db=self.dbs[kind])
            return None if data is None else self._decode(txn, kind, key, data)

    def _decode(self, txn: lmdb.Transaction[bytes], kind: str, key: bytes, data: bytes) -> Any:
        """Decode a stored value; a streamed message gets its text back from
        its chunks. What cannot be decoded raises CorruptRecord (or
        SchemaTooNew) naming the kind and key."""
        try:
            record = decode_record(kind, data)
            if kind == "messages" and is_message_head(data):
                record = msgspec.structs.replace(record, text=self._message_text(txn, record.id))
            return record
        except RecordTooNew as exc:
            raise SchemaTooNew(str(exc), recordKind=kind, recordId=_key_text(key)) from None
        except (RecordDecodeError, UnicodeDecodeError) as exc:
            raise self.corrupt(kind, key, str(exc)) from None

    def corrupt(self, kind: str, key: bytes, reason: str) -> CorruptRecord:
        """The CorruptRecord error for ``key`` of ``kind``, logged the first
        time this daemon meets it (every read of it meets it again)."""
        error = CorruptRecord.of(kind, _key_text(key), reason)
        if (kind, bytes(key)) not in self._corrupt_seen:
            self._corrupt_seen.add((kind, bytes(key)))
            log.error("%s", error.message)
        return error

    def _message_text(self, txn: lmdb.Transaction[bytes], message_id: str) -> str:
        """The chunks of a streamed message, joined in offset order."""
        prefix = message_id.encode() + SEP
        cursor = txn.cursor(db=self.dbs["message_text"])
        chunks = []
        if cursor.set_range(prefix):
            for key, value in cursor:
                if not key.startswith(prefix):
                    break
                chunks.append(value)
        return b"".join(chunks).decode()

    def _scan_index(self, index: str, prefix: bytes) -> list[tuple[bytes, bytes]]:
        with self.env.begin() as txn:
            cursor = txn.cursor(db=self.dbs[index])
            rows = []
            if cursor.set_range(prefix):
                for key, value in cursor:
                    if not key.startswith(prefix):
                        break
                    rows.append((bytes(key), bytes(value)))
        return rows

    def _get_many(self, cls: type[R], ids: list[str], unreadable: Unreadable | None = None) -> list[R]:
        """The records of ``ids`` that exist and decode; the others that exist
        go to ``unreadable`` (a list read degrades, it does not fail whole)."""
        kind = kind_of(cls)
        db = self.dbs[kind]
        out: list[R] = []
        with self.env.begin() as txn:
            for record_id in ids:
                key = record_id.encode()
                value = txn.get(key, db=db)
                if value is None:
                    continue
                try:
                    out.append(self._decode(txn, kind, key, value))
                except (CorruptRecord, SchemaTooNew) as exc:
                    if unreadable is not None:
                        unreadable.append(exc)
        return out

    # -- typed reads ----------------------------------------------------------

    def thread(self, thread_id: str) -> AppThread | None:
        return self.get(AppThread, thread_id)

    def run(self, run_id: str) -> Run | None:
        return self.get(Run, run_id)

    def list_threads(self, *, unreadable: Unreadable | None = None) -> list[AppThread]:
        """Every thread, oldest first (those that cannot be decoded go to ``unreadable``)."""
        threads: list[AppThread] = []
        for item in self.list_threads_keeping_unreadable():
            if isinstance(item, AppThread):
                threads.append(item)
            elif unreadable is not None:
                unreadable.append(item)
        return threads

    def list_threads_keeping_unreadable(self) -> list[AppThread | AgentdError]:
        """Every thread, oldest first; one that cannot be decoded is its
        error (CorruptRecord, SchemaTooNew) in its place."""
        out: list[AppThread | AgentdError] = []
        with self.env.begin() as txn:
            for key, value in txn.cursor(db=self.dbs["threads"]):
                out.append(self._decode_or_error(txn, "threads", key, value))
        return out

    def list_threads_page(self, limit: int, before: str | None = None) -> tuple[list[AppThread | AgentdError], bool]:
        """Up to ``limit`` threads created before thread ``before`` (default:
        the newest), newest first, and whether older ones remain. Thread ids
        sort by creation, so this reads ``limit`` records, not the table. A
        thread that cannot be decoded is its error in its place."""
        out: list[AppThread | AgentdError] = []
        with self.env.begin() as txn:
            cursor = txn.cursor(db=self.dbs["threads"])
            if before is None:
                more = cursor.last()
            else:
                more = cursor.prev() if cursor.set_range(before.encode()) else cursor.last()
            while more and len(out) < limit:
                out.append(self._decode_or_error(txn, "threads", cursor.key(), cursor.value()))
                more = cursor.prev()
        return out, more

    def _decode_or_error(self, txn: lmdb.Transaction[bytes], kind: str, key: bytes, value: bytes) -> Any:
        try:
            return self._decode(txn, kind, bytes(key), value)
        except (CorruptRecord, SchemaTooNew) as exc:
            return exc

    def thread_runs(self, thread_id: str, *, unreadable: Unreadable | None = None) -> list[Run]:
        """The runs of a thread by ordinal."""
        rows = self._scan_index("idx_thread_runs", thread_id.encode() + SEP)
        return self._get_many(Run, [v.decode() for _k, v in rows], unreadable=unreadable)

    def thread_messages(self, thread_id: str, *, unreadable: Unreadable | None = None) -> list[ConversationMessage]:
        rows = self._scan_index("idx_thread_messages", thread_id.encode() + SEP)
        return self._get_many(ConversationMessage, [k.split(SEP, 1)[1].decode() for k, _v in rows], unreadable=unreadable)

    def run_attempts(self, run_id: str, *, unreadable: Unreadable | None = None) -> list[RunAttempt]:
        rows = self._scan_index("idx_run_attempts", run_id.encode() + SEP)
        return self._get_many(RunAttempt, [v.decode() for _k, v in rows], unreadable=unreadable)

    def run_nodes(self, run_id: str, *, unreadable: Unreadable | None = None) -> list[ExecutionNode]:
        rows = self._scan_index("idx_run_nodes", run_id.encode() + SEP)
        return self._get_many(ExecutionNode, [k.split(SEP, 1)[1].decode() for k, _v in rows], unreadable=unreadable)

    def attempt_turns(self, attempt_id: str, *, unreadable: Unreadable | None = None) -> list[ProviderTurn]:
        rows = self._scan_index("idx_attempt_turns", attempt_id.encode() + SEP)
        return self._get_many(ProviderTurn, [k.split(SEP, 1)[1].decode() for k, _v in rows], unreadable=unreadable)

    def pending_requests(self, thread_id: str | None = None, *, unreadable: Unreadable | None = None) -> list[RuntimeRequest]:
        """Requests still waiting on the user (of one thread, or all)."""
        rows = self._scan_index("idx_pending_requests", thread_id.encode() + SEP if thread_id else b"")
        return self._get_many(RuntimeRequest, [k.split(SEP, 1)[1].decode() for k, _v in rows], unreadable=unreadable)

    def run_artifacts(self, run_id: str, *, unreadable: Unreadable | None = None) -> list[PlanArtifact]:
        rows = self._scan_index("idx_run_artifacts", run_id.encode() + SEP)
        return self._get_many(PlanArtifact, [k.split(SEP, 1)[1].decode() for k, _v in rows], unreadable=unreadable)

    def thread_children(self, thread_id: str, *, unreadable: Unreadable | None = None) -> list[AppThread]:
        """Threads whose parent is ``thread_id``, oldest first."""
        rows = self._scan_index("idx_thread_children", thread_id.encode() + SEP)
        return self._get_many(AppThread, [k.split(SEP, 1)[1].decode() for k, _v in rows], unreadable=unreadable)

    def thread_checkpoints(self, thread_id: str, *, unreadable: Unreadable | None = None) -> list[Checkpoint]:
        """The checkpoints of a thread by ordinal (then creation)."""
        rows = self._scan_index("idx_thread_checkpoints", thread_id.encode() + SEP)
        return self._get_many(Checkpoint, [k.rsplit(SEP, 1)[1].decode() for k, _v in rows], unreadable=unreadable)
    def thread_transfers(self, thread_id: str, *, unreadable: Unreadable | None = None) -> list[ContextTransfer]:
        """The ContextTransfers the thread takes part in, as source or target, oldest first."""
        rows = self._scan_index("idx_thread_transfers", thread_id.encode() + SEP)
        return self._get_many(ContextTransfer, [k.split(SEP, 1)[1].decode() for k, _v in rows], unreadable=unreadable)

    def inflight_transfers(self, *, unreadable: Unreadable | None = None) -> list[ContextTransfer]:
        """Transfers resolved but not yet taken in by a provider turn."""
        rows = self._scan_index("idx_inflight_transfers", b"")
        return self._get_many(ContextTransfer, [k.decode() for k, _v in rows], unreadable=unreadable)

    def thread_provider_threads(self, thread_id: str, *, unreadable: Unreadable | None = None) -> list[ProviderThread]:
        """The provider threads that have backed the thread, oldest first (those
        made before this index existed are not listed; the thread's current one is
        ``AppThread.providerThreadId``)."""
        rows = self._scan_index("idx_thread_backing", thread_id.encode() + SEP)
        return self._get_many(ProviderThread, [k.split(SEP, 1)[1].decode() for k, _v in rows], unreadable=unreadable)

    def receipt(self, command_id: str) -> CommandReceipt | None:
        return self.get(CommandReceipt, command_id)

    def open_runs(self, *, unreadable: Unreadable | None = None) -> list[Run]:
        """Runs that are queued, running or waiting (the open-runs index)."""
        rows = self._scan_index("idx_open_runs", b"")
        return self._get_many(Run, [k.decode() for k, _v in rows], unreadable=unreadable)

    def queued_messages(self, *, unreadable: Unreadable | None = None) -> list[ConversationMessage]:
        rows = self._scan_index("idx_queued_messages", b"")
        return self._get_many(ConversationMessage, [k.decode() for k, _v in rows], unreadable=unreadable)

    def live_sessions(self, *, unreadable: Unreadable | None = None) -> list[ProviderSession]:
        rows = self._scan_index("idx_live_sessions", b"")
        return self._get_many(ProviderSession, [k.decode() for k, _v in rows], unreadable=unreadable)

    def open_effects(self, *, unreadable: Unreadable | None = None) -> list[Effect]:
        rows = self._scan_index("idx_open_effects", b"")
        return self._get_many(Effect, [k.decode() for k, _v in rows], unreadable=unreadable)

    def events_after(self, after_seq: int, *, thread_id: str | None = None, limit: int = 1000) -> list[Event]:
        """Up to ``limit`` events with ``seq > after_seq``, oldest first,
        optionally only those of one thread."""
        out: list[Event] = []
        with self.env.begin() as txn:
            if thread_id is None:
                cursor = txn.cursor(db=self.dbs["events"])
                if cursor.set_range((after_seq + 1).to_bytes(8, "big")):
                    for key, value in cursor:
                        out.append(self._event(txn, key, value))
                        if len(out) >= limit:
                            break
                return out
            prefix = thread_id.encode() + SEP
            cursor = txn.cursor(db=self.dbs["idx_thread_events"])
            events_db = self.dbs["events"]
            if cursor.set_range(index_key(thread_id, after_seq + 1)):
                for key, _value in cursor:
                    if not key.startswith(prefix):
                        break
                    seq_key = bytes(key[len(prefix):])
                    data = txn.get(seq_key, db=events_db)
                    if data is not None:
                        out.append(self._event(txn, seq_key, data, thread_id=thread_id))
                    if len(out) >= limit:
                        break
        return out

    def _event(self, txn: lmdb.Transaction[bytes], key: bytes, value: bytes, *, thread_id: str | None = None) -> Event:
        """The logged event at ``key``, a ``message.appended`` with its text
        back from its chunk; one that cannot be decoded (or whose chunk is
        gone) is replayed as an ``event.corrupt`` placeholder with its seq, so
        a replay keeps its order and has no gap (the stored value is left as
        it is)."""
        try:
            event: Event = decode_record("events", value)
            if TEXT_IN_CHUNK in event.payload:
                event = msgspec.structs.replace(event, payload=self._chunk_text(txn, event.payload))
            return event
        except (RecordDecodeError, UnicodeDecodeError) as exc:
            seq = int.from_bytes(key, "big")
            error = self.corrupt("events", str(seq).encode(), str(exc))
            return Event(seq=seq, type="event.corrupt", thread_id=thread_id,
                         payload={"reason": error.reason, "message": error.message})

    def _chunk_text(self, txn: lmdb.Transaction[bytes], payload: dict[str, Any]) -> dict[str, Any]:
        """A stored ``message.appended`` payload as published: its text is
        the chunk at its message and offset (batch.TEXT_IN_CHUNK)."""
        length = payload[TEXT_IN_CHUNK]
        try:
            chunk = txn.get(text_chunk_key(payload["messageId"], payload["offset"]), db=self.dbs["message_text"])
        except (KeyError, TypeError, AttributeError, OverflowError) as exc:
            raise RecordDecodeError(f"a message.appended event without its chunk's place: {exc!r}") from None
        text = None if chunk is None else bytes(chunk).decode()
        if text is None or len(text) != length:
            raise RecordDecodeError("the text chunk of this message.appended event is missing or of another length")
        return {**{k: v for k, v in payload.items() if k != TEXT_IN_CHUNK}, "text": text}

    def stat(self) -> dict[str, int]:
        """Entry counts per sub-database."""
        with self.env.begin() as txn:
            return {name: txn.stat(db)["entries"] for name, db in self.dbs.items()}


def _key_text(key: bytes) -> str:
    """A stored key as text for an error or a report (a torn key stays readable)."""
    return bytes(key).decode("utf-8", "backslashreplace")


def struct_copy(record: R, **changes: Any) -> R:
    """A copy of a record with ``changes`` applied (records are treated as values)."""
    return msgspec.structs.replace(record, **changes)

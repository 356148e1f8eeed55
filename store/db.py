"""The LMDB environment and the read side of the store.

Reads are short read transactions on the event loop (LMDB readers never block
and never wait on the writer). Writes go only through ``Store.commit``, which
hands them to the group-commit writer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, TypeVar

import lmdb
import msgspec

from .batch import DATABASES, SEP, WriteBatch, index_key
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
    RuntimeRequest,
    decode_record,
    is_message_head,
    kind_of,
)
from .writer import CommitResult, GroupCommitWriter

DEFAULT_MAP_SIZE = 64 << 30  # sparse on Linux; only what is used takes disk

R = TypeVar("R", bound=msgspec.Struct)


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
        path: str | os.PathLike,
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
        ``record_id``, or None."""
        kind = kind_of(cls)
        with self.env.begin() as txn:
            data = txn.get(record_id.encode(), db=self.dbs[kind])
            return None if data is None else self._decode(txn, kind, data)

    def _decode(self, txn: lmdb.Transaction, kind: str, data: bytes) -> Any:
        """Decode a stored value; a streamed message gets its text back from
        its chunks."""
        record = decode_record(kind, data)
        if kind == "messages" and is_message_head(data):
            record = msgspec.structs.replace(record, text=self._message_text(txn, record.id))
        return record

    def _message_text(self, txn: lmdb.Transaction, message_id: str) -> str:
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

    def _get_many(self, cls: type[R], ids: list[str]) -> list[R]:
        kind = kind_of(cls)
        db = self.dbs[kind]
        with self.env.begin() as txn:
            values = [txn.get(i.encode(), db=db) for i in ids]
            return [self._decode(txn, kind, v) for v in values if v is not None]

    # -- typed reads ----------------------------------------------------------

    def thread(self, thread_id: str) -> AppThread | None:
        return self.get(AppThread, thread_id)

    def run(self, run_id: str) -> Run | None:
        return self.get(Run, run_id)

    def list_threads(self) -> list[AppThread]:
        """Every thread, oldest first."""
        with self.env.begin(db=self.dbs["threads"]) as txn:
            return [decode_record("threads", v) for _k, v in txn.cursor()]

    def list_threads_page(self, limit: int, before: str | None = None) -> tuple[list[AppThread], bool]:
        """Up to ``limit`` threads created before thread ``before`` (default:
        the newest), newest first, and whether older ones remain. Thread ids
        sort by creation, so this reads ``limit`` records, not the table."""
        out: list[AppThread] = []
        with self.env.begin(db=self.dbs["threads"]) as txn:
            cursor = txn.cursor()
            if before is None:
                more = cursor.last()
            else:
                more = cursor.prev() if cursor.set_range(before.encode()) else cursor.last()
            while more and len(out) < limit:
                out.append(decode_record("threads", cursor.value()))
                more = cursor.prev()
        return out, more

    def thread_runs(self, thread_id: str) -> list[Run]:
        """The runs of a thread by ordinal."""
        rows = self._scan_index("idx_thread_runs", thread_id.encode() + SEP)
        return self._get_many(Run, [v.decode() for _k, v in rows])

    def thread_messages(self, thread_id: str) -> list[ConversationMessage]:
        rows = self._scan_index("idx_thread_messages", thread_id.encode() + SEP)
        return self._get_many(ConversationMessage, [k.split(SEP, 1)[1].decode() for k, _v in rows])

    def run_attempts(self, run_id: str) -> list[RunAttempt]:
        rows = self._scan_index("idx_run_attempts", run_id.encode() + SEP)
        return self._get_many(RunAttempt, [v.decode() for _k, v in rows])

    def run_nodes(self, run_id: str) -> list[ExecutionNode]:
        rows = self._scan_index("idx_run_nodes", run_id.encode() + SEP)
        return self._get_many(ExecutionNode, [k.split(SEP, 1)[1].decode() for k, _v in rows])

    def attempt_turns(self, attempt_id: str) -> list[ProviderTurn]:
        rows = self._scan_index("idx_attempt_turns", attempt_id.encode() + SEP)
        return self._get_many(ProviderTurn, [k.split(SEP, 1)[1].decode() for k, _v in rows])

    def pending_requests(self, thread_id: str | None = None) -> list[RuntimeRequest]:
        """Requests still waiting on the user (of one thread, or all)."""
        rows = self._scan_index("idx_pending_requests", thread_id.encode() + SEP if thread_id else b"")
        return self._get_many(RuntimeRequest, [k.split(SEP, 1)[1].decode() for k, _v in rows])

    def run_artifacts(self, run_id: str) -> list[PlanArtifact]:
        rows = self._scan_index("idx_run_artifacts", run_id.encode() + SEP)
        return self._get_many(PlanArtifact, [k.split(SEP, 1)[1].decode() for k, _v in rows])

    def thread_children(self, thread_id: str) -> list[AppThread]:
        """Threads whose parent is ``thread_id``, oldest first."""
        rows = self._scan_index("idx_thread_children", thread_id.encode() + SEP)
        return self._get_many(AppThread, [k.split(SEP, 1)[1].decode() for k, _v in rows])

    def thread_checkpoints(self, thread_id: str) -> list[Checkpoint]:
        """The checkpoints of a thread by ordinal (then creation)."""
        rows = self._scan_index("idx_thread_checkpoints", thread_id.encode() + SEP)
        return self._get_many(Checkpoint, [k.rsplit(SEP, 1)[1].decode() for k, _v in rows])
    def thread_transfers(self, thread_id: str) -> list[ContextTransfer]:
        """The ContextTransfers the thread takes part in, as source or target, oldest first."""
        rows = self._scan_index("idx_thread_transfers", thread_id.encode() + SEP)
        return self._get_many(ContextTransfer, [k.split(SEP, 1)[1].decode() for k, _v in rows])

    def inflight_transfers(self) -> list[ContextTransfer]:
        """Transfers resolved but not yet taken in by a provider turn."""
        rows = self._scan_index("idx_inflight_transfers", b"")
        return self._get_many(ContextTransfer, [k.decode() for k, _v in rows])

    def thread_provider_threads(self, thread_id: str) -> list[ProviderThread]:
        """The provider threads that have backed the thread, oldest first (those
        made before this index existed are not listed; the thread's current one is
        ``AppThread.providerThreadId``)."""
        rows = self._scan_index("idx_thread_backing", thread_id.encode() + SEP)
        return self._get_many(ProviderThread, [k.split(SEP, 1)[1].decode() for k, _v in rows])

    def receipt(self, command_id: str) -> CommandReceipt | None:
        return self.get(CommandReceipt, command_id)

    def open_runs(self) -> list[Run]:
        """Runs that are queued, running or waiting (the open-runs index)."""
        rows = self._scan_index("idx_open_runs", b"")
        return self._get_many(Run, [k.decode() for k, _v in rows])

    def queued_messages(self) -> list[ConversationMessage]:
        rows = self._scan_index("idx_queued_messages", b"")
        return self._get_many(ConversationMessage, [k.decode() for k, _v in rows])

    def live_sessions(self) -> list[ProviderSession]:
        rows = self._scan_index("idx_live_sessions", b"")
        return self._get_many(ProviderSession, [k.decode() for k, _v in rows])

    def open_effects(self) -> list[Effect]:
        rows = self._scan_index("idx_open_effects", b"")
        return self._get_many(Effect, [k.decode() for k, _v in rows])

    def events_after(self, after_seq: int, *, thread_id: str | None = None, limit: int = 1000) -> list[Event]:
        """Up to ``limit`` events with ``seq > after_seq``, oldest first,
        optionally only those of one thread."""
        out: list[Event] = []
        with self.env.begin() as txn:
            if thread_id is None:
                cursor = txn.cursor(db=self.dbs["events"])
                if cursor.set_range((after_seq + 1).to_bytes(8, "big")):
                    for _key, value in cursor:
                        out.append(decode_record("events", value))
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
                    data = txn.get(bytes(key[len(prefix):]), db=events_db)
                    if data is not None:
                        out.append(decode_record("events", data))
                    if len(out) >= limit:
                        break
        return out

    def stat(self) -> dict[str, int]:
        """Entry counts per sub-database."""
        with self.env.begin() as txn:
            return {name: txn.stat(db)["entries"] for name, db in self.dbs.items()}


def struct_copy(record: R, **changes: Any) -> R:
    """A copy of a record with ``changes`` applied (records are treated as values)."""
    return msgspec.structs.replace(record, **changes)

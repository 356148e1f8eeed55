"""WriteBatch: everything one command changes, committed as one unit.

An actor builds a batch of record puts, events and at most one receipt; the
group-commit writer applies it inside a shared transaction, assigns each event
its ``seq`` and tells the actor when it is durable. Index entries are derived
here from the records themselves, so no caller can forget one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from .records import (
    RUN_OPEN,
    TRANSFER_IN_FLIGHT,
    AppThread,
    Checkpoint,
    ContextTransfer,
    ConversationMessage,
    Effect,
    ExecutionNode,
    PlanArtifact,
    Record,
    ProviderSession,
    ProviderThread,
    ProviderTurn,
    Run,
    RunAttempt,
    RuntimeRequest,
    encode_message_head,
    encode_record,
    kind_of,
)

SEP = b"\x00"


def index_key(*parts: str | int) -> bytes:
    """Build an index key: strings joined by NUL, ints as 8-byte big-endian so
    they sort numerically."""
    out = []
    for part in parts:
        out.append(part.to_bytes(8, "big") if isinstance(part, int) else part.encode())
    return SEP.join(out)


def text_chunk_key(message_id: str, offset: int) -> bytes:
    """Key of a streamed message's chunk: its id, NUL, the character offset
    (8-byte big-endian, so a cursor reads the chunks in order)."""
    return message_id.encode() + SEP + offset.to_bytes(8, "big")


@dataclass
class EventDraft:
    """An event before the writer gives it a sequence number."""

    type: str
    thread_id: str | None
    run_id: str | None
    node_id: str | None
    at: float
    payload: dict[str, Any]


#: how a stored ``message.appended`` event says its text is the chunk its
#: batch wrote at the same message and offset (``text_chunk_key``): the text
#: is stored once, and the store puts it back when the event is read
TEXT_IN_CHUNK = "textInChunk"


def stored_payload(draft: EventDraft, chunks: dict[tuple[str, int], int]) -> dict[str, Any]:
    """The payload ``draft`` is stored with: a ``message.appended`` whose text
    its batch stored as a chunk keeps only the chunk's place (messageId,
    offset) and length; any other event is stored as published."""
    payload = draft.payload
    if draft.type != "message.appended" or not chunks:
        return payload
    message_id, offset, text = payload.get("messageId"), payload.get("offset"), payload.get("text")
    if not (isinstance(message_id, str) and isinstance(offset, int) and isinstance(text, str)):
        return payload
    if chunks.get((message_id, offset)) != len(text):
        return payload
    return {**{k: v for k, v in payload.items() if k != "text"}, TEXT_IN_CHUNK: len(text)}


@dataclass
class WriteBatch:
    """The puts, deletes, events and receipt of one command."""

    ops: list[tuple[str, bytes, bytes | None]] = field(default_factory=list)
    events: list[EventDraft] = field(default_factory=list)
    receipt: tuple[str, str, dict[str, Any], float] | None = None
    #: the text chunks this batch writes: (message id, offset) -> characters
    chunks: dict[tuple[str, int], int] = field(default_factory=dict)

    def put(self, record: Record) -> None:
        """Store ``record`` under its id, with the index entries its kind has."""
        kind = kind_of(type(record))
        key = record.id.encode()
        self.ops.append((kind, key, encode_record(kind, record)))
        self._index(record)

    def put_message_head(self, message: ConversationMessage) -> None:
        """Store a streamed message without its text: its text is the chunks
        ``append_text`` writes, so this never rewrites what was streamed."""
        self.ops.append(("messages", message.id.encode(), encode_message_head(message)))
        self._index(message)

    def append_text(self, message_id: str, offset: int, text: str) -> None:
        """Store ``text`` as the chunk of a streamed message at character
        ``offset``: a flush writes only its new text (append-only)."""
        self.ops.append(("message_text", text_chunk_key(message_id, offset), text.encode()))
        self.chunks[(message_id, offset)] = len(text)

    def prepend(self, other: WriteBatch) -> None:
        """Put ``other``'s writes and events ahead of this batch's own (its
        receipt, if any, is not taken)."""
        self.ops[0:0] = other.ops
        self.events[0:0] = other.events
        self.chunks.update(other.chunks)

    def delete(self, db: str, key: bytes) -> None:
        """Remove ``key`` from sub-database ``db`` (a record, an index entry,
        a text chunk): ``thread.delete`` takes a thread's records out this way."""
        self.ops.append((db, key, None))

    def put_all(self, *records: Record) -> None:
        for record in records:
            self.put(record)

    def event(
        self,
        type: str,
        *,
        thread_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        at: float = 0.0,
        **payload: Any,
    ) -> None:
        """Append an event; it gets the next global ``seq`` when committed."""
        self.events.append(EventDraft(type, thread_id, run_id, node_id, at, payload))

    def set_receipt(self, command_id: str, method: str, result: dict[str, Any], at: float) -> None:
        """Record the command's answer; the writer adds the batch's last ``seq``."""
        self.receipt = (command_id, method, result, at)

    def __bool__(self) -> bool:
        return bool(self.ops or self.events or self.receipt)

    # -- derived indexes ----------------------------------------------------

    def _idx(self, db: str, key: bytes, value: bytes | None = b"") -> None:
        self.ops.append((db, key, value))

    def _index(self, record: Record) -> None:
        if isinstance(record, Run):
            self._idx("idx_thread_runs", index_key(record.thread_id, record.ordinal), record.id.encode())
            active = record.status in RUN_OPEN
            self._idx("idx_open_runs", record.id.encode(), record.thread_id.encode() if active else None)
        elif isinstance(record, RunAttempt):
            self._idx("idx_run_attempts", index_key(record.run_id, record.number), record.id.encode())
        elif isinstance(record, ExecutionNode):
            self._idx("idx_run_nodes", index_key(record.run_id, record.id))
        elif isinstance(record, ConversationMessage):
            self._idx("idx_thread_messages", index_key(record.thread_id, record.id))
            queued = record.status == "queued"
            self._idx("idx_queued_messages", record.id.encode(), record.thread_id.encode() if queued else None)
        elif isinstance(record, ProviderTurn):
            self._idx("idx_attempt_turns", index_key(record.attempt_id, record.id))
        elif isinstance(record, ProviderSession):
            live = record.status in ("starting", "ready")
            self._idx("idx_live_sessions", record.id.encode(), b"" if live else None)
        elif isinstance(record, Effect):
            pending = record.status == "pending"
            self._idx("idx_open_effects", record.id.encode(), b"" if pending else None)
        elif isinstance(record, RuntimeRequest):
            pending = record.status == "pending"
            self._idx("idx_pending_requests", index_key(record.thread_id, record.id), b"" if pending else None)
        elif isinstance(record, PlanArtifact):
            self._idx("idx_run_artifacts", index_key(record.run_id, record.id))
        elif isinstance(record, Checkpoint):
            self._idx("idx_thread_checkpoints", index_key(record.thread_id, record.ordinal, record.id))
        elif isinstance(record, ContextTransfer):
            # Listed under both threads it joins; in flight until a turn takes it in.
            self._idx("idx_thread_transfers", index_key(record.source_thread_id, record.id))
            if record.target_thread_id != record.source_thread_id:
                self._idx("idx_thread_transfers", index_key(record.target_thread_id, record.id))
            in_flight = record.status in TRANSFER_IN_FLIGHT
            self._idx("idx_inflight_transfers", record.id.encode(), record.target_thread_id.encode() if in_flight else None)
        elif isinstance(record, ProviderThread):
            self._idx("idx_thread_backing", index_key(record.thread_id, record.id))
        elif isinstance(record, AppThread):
            # The threads database is itself the thread list, in id (creation) order.
            if record.parent_thread_id is not None:
                self._idx("idx_thread_children", index_key(record.parent_thread_id, record.id))


#: every sub-database the store opens. A data dir may hold more: LMDB keeps
#: named databases nothing opens (``idx_thread_provider_threads`` of older
#: agentd), and they cost nothing but their pages.
DATABASES = (
    "threads",
    "messages",
    "runs",
    "attempts",
    "nodes",
    "provider_sessions",
    "provider_threads",
    "provider_turns",
    "context_handoffs",
    "context_transfers",
    "requests",
    "artifacts",
    "events",
    "receipts",
    "effects",
    "checkpoints",
    "meta",
    "message_text",
    "idx_thread_runs",
    "idx_open_runs",
    "idx_run_attempts",
    "idx_run_nodes",
    "idx_thread_messages",
    "idx_queued_messages",
    "idx_attempt_turns",
    "idx_live_sessions",
    "idx_open_effects",
    "idx_thread_events",
    "idx_pending_requests",
    "idx_run_artifacts",
    "idx_thread_children",
    "idx_thread_checkpoints",
    "idx_thread_transfers",
    "idx_inflight_transfers",
    "idx_thread_backing",
)

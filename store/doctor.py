"""``agentd doctor``: every stored record that cannot be decoded, found by
reading the whole store once, read-only.

It opens the LMDB environment read-only (a running daemon is not disturbed:
LMDB readers never block its writer) and changes nothing: what is corrupt is
for a person to look at, and for the daemon to skip and report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import lmdb

from .batch import DATABASES, SEP
from .records import RECORD_KINDS, RecordDecodeError, RecordTooNew, decode_record, is_message_head

if TYPE_CHECKING:
    # py-lmdb's stubs name a sub-database handle only privately.
    from lmdb import _Database as Database


@dataclass(frozen=True)
class UnreadableRecord:
    """One stored value that is not a record of its kind."""

    kind: str
    id: str
    reason: str
    #: a newer agentd wrote it (not corrupt: this agentd cannot read it)
    newer: bool = False

    def to_wire(self) -> dict[str, object]:
        return {"kind": self.kind, "id": self.id, "reason": self.reason, "newer": self.newer}


def scan(store_dir: Path) -> tuple[list[UnreadableRecord], int]:
    """Every unreadable record under ``store_dir`` (the LMDB environment) in
    kind order, then key order; and how many records were read.

    Raises:
        FileNotFoundError: there is no store there.
    """
    if not (store_dir / "data.mdb").exists():
        raise FileNotFoundError(f"no agentd store in {store_dir}")
    env = lmdb.open(str(store_dir), readonly=True, max_dbs=len(DATABASES) + 8, map_size=1 << 20)
    found: list[UnreadableRecord] = []
    count = 0
    try:
        with env.begin() as txn:
            try:
                chunks_db = env.open_db(b"message_text", txn=txn, create=False)
            except lmdb.NotFoundError:
                chunks_db = None
            for kind in RECORD_KINDS:
                try:
                    db = env.open_db(kind.encode(), txn=txn, create=False)
                except lmdb.NotFoundError:
                    continue
                for key, value in txn.cursor(db=db):
                    count += 1
                    problem = _problem(txn, chunks_db, kind, bytes(key), bytes(value))
                    if problem is not None:
                        found.append(problem)
    finally:
        env.close()
    return found, count


def _problem(txn: lmdb.Transaction[bytes], chunks_db: Database | None, kind: str, key: bytes, value: bytes) -> UnreadableRecord | None:
    record_id = str(int.from_bytes(key, "big")) if kind == "events" else key.decode("utf-8", "backslashreplace")
    try:
        record = decode_record(kind, value)
        if kind == "messages" and is_message_head(value) and chunks_db is not None:
            prefix = record.id.encode() + SEP
            cursor = txn.cursor(db=chunks_db)
            parts = []
            if cursor.set_range(prefix):
                for chunk_key, chunk in cursor:
                    if not chunk_key.startswith(prefix):
                        break
                    parts.append(bytes(chunk))
            b"".join(parts).decode()
    except RecordTooNew as exc:
        return UnreadableRecord(kind, record_id, str(exc), newer=True)
    except (RecordDecodeError, UnicodeDecodeError) as exc:
        return UnreadableRecord(kind, record_id, str(exc))
    return None

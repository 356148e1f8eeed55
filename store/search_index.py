"""The full-text search index (issue 28, ``thread.search``): SQLite FTS5
beside the store, in ``<data-dir>/search.sqlite3``.

It is derived: every row comes from the LMDB store, so the file can be
dropped and built again at any time (``rebuild``), and it is never written
in the commit path. It records the last store ``seq`` it has taken in
(``indexed_seq``; written only with a change of the documents and at
``close``, so the many commits that change no document — a run's bookkeeping
— cost the file nothing: an index cut off before ``close`` catches up from
an older seq, taking in again what it already holds, which changes nothing);
the indexer (``supervisor/search_indexer.py``) brings it up to
the store from there by reading the event log, and rebuilds it when it is
missing, unreadable, of another schema or ahead of the store (another data
dir's). Every method here blocks (SQLite, LMDB reads): call them from a
worker thread, never on the event loop.

Documents (``search_docs.py``): a thread's title, its user messages and its
answers (assistant messages, once complete or interrupted), and its
handoffs' text. One row per document, keyed by ``ref`` (the message's,
handoff's or ``title:<thread>``), so indexing one again replaces it.

The text is written once more here, not twice: ``docs`` keeps each body
zlib-compressed (for the snippet, and for FTS5's ``delete``, which needs the
words it indexed), and the FTS5 table is contentless (``content=''``), so
it holds only its index. With the body in both (schema 1) a 100 KiB answer
cost the file ~1.9× its size in the WAL and ~1.6× again when SQLite moved
the WAL into the file (issue 24 §3).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .db import Store
from .records import ContextHandoff, ConversationMessage, Event
from .search_docs import Doc, handoff_doc, message_doc, store_docs, title_doc
from .search_snippet import query_terms, snippet

log = logging.getLogger(__name__)

#: bumped when the tables change: an index of another version is made anew
SCHEMA_VERSION = "2"
#: rows written per transaction while rebuilding
REBUILD_CHUNK = 5_000
#: seconds a search may spend ranking every match before it ranks only the newest ones
RANK_BUDGET = 0.02

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs (
    id INTEGER PRIMARY KEY,
    ref TEXT NOT NULL UNIQUE,
    thread_id TEXT NOT NULL,
    run_id TEXT,
    message_id TEXT,
    kind TEXT NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_thread ON docs (thread_id);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    body, content='', tokenize='unicode61 remove_diacritics 2'
);
"""

#: zlib's level for a body: 1 takes ~a third of 6's CPU for a few % more bytes
_BODY_LEVEL = 1


def _pack(text: str) -> bytes:
    return zlib.compress(text.encode("utf-8"), _BODY_LEVEL)


def _unpack(body: bytes) -> str:
    return zlib.decompress(body).decode("utf-8")

#: the events that change what is indexed
INDEXED_EVENTS = frozenset({"thread.created", "thread.updated", "message.created", "message.completed",
                            "context_handoff.created", "thread.deleted"})


class _OtherSchema(sqlite3.DatabaseError):
    """The file's tables are another version's: it is made anew."""


class SearchSyntaxError(ValueError):
    """The query is not valid FTS5 syntax (the message says where)."""


#: how SQLite words an FTS5 query it cannot parse (other errors are the file's or the system's)
_QUERY_ERRORS = ("fts5: syntax error", "unterminated string", "no such column", "unknown special query",
                 "expected integer", "fts5:")


def is_query_error(exc: sqlite3.OperationalError) -> bool:
    return str(exc).startswith(_QUERY_ERRORS)


@dataclass(frozen=True)
class Hit:
    """One search result: where the match is, a snippet and its score (higher is better)."""

    thread_id: str
    run_id: str | None
    message_id: str | None
    kind: str
    snippet: str
    score: float


class _Watchdog:
    """One thread that calls ``interrupt`` when an armed deadline passes
    (a thread per query would cost more than a query, on a busy machine)."""

    def __init__(self, interrupt: Callable[[], None]) -> None:
        self._interrupt = interrupt
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._stopped = False
        self.fired = False
        threading.Thread(target=self._run, name="search-watchdog", daemon=True).start()

    def arm(self, seconds: float) -> None:
        with self._cond:
            self.fired = False
            self._deadline = time.monotonic() + seconds
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self._deadline = None
                self.fired = True
                self._interrupt()


class SearchIndex:
    """The FTS5 index file. One connection writes and one reads (WAL), each
    behind its own lock, so a search never waits for a write batch.

    Args:
        path: the SQLite file (created if missing).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._write_lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._writer = self._connect()
        self._reader = self._connect()
        self._watchdog = _Watchdog(self._reader.interrupt)
        #: the last seq taken in, and the last one written to the file
        #: (None: not read yet; meta's ``seq`` is read on first use)
        self._seq: int | None = None
        self._stored_seq = 0

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        # Derived data: losing the last writes to a crash costs a catch-up, never the store.
        connection.execute("PRAGMA synchronous=OFF")
        return connection

    @classmethod
    def open(cls, path: str | Path) -> tuple[SearchIndex, bool]:
        """The index at ``path`` and whether it must be rebuilt (new, of
        another schema version, or unreadable: then the file is made anew)."""
        index: SearchIndex | None = None
        try:
            index = cls(path)
            with index._write_lock:
                index._writer.executescript("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);")
                version = index._meta("schema")
                if version is not None and version != SCHEMA_VERSION:
                    # Tables of another shape: the file is made anew, then rebuilt.
                    raise _OtherSchema(f"its tables are of schema {version}, this agentd's are {SCHEMA_VERSION}")
                index._writer.executescript(_SCHEMA)
                if version is None:
                    return index, True
                index._writer.execute("SELECT count(*) FROM fts WHERE fts MATCH 'agentd'").fetchone()
            return index, False
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError):
                # Not the file's fault (out of descriptors, a folder not writable): keep it, say so.
                if index is not None:
                    index.close()
                raise
            log.warning("search index %s is %s (%s); building it again", path,
                        "of another version" if isinstance(exc, _OtherSchema) else "unreadable", exc)
            if index is not None:
                index.close()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            index = cls(path)
            index._writer.executescript(_SCHEMA)
            return index, True

    def close(self) -> None:
        """Write the seq taken in (when it is ahead of the file's) and close."""
        self._watchdog.stop()
        with self._write_lock:
            if self._seq is not None and self._seq > self._stored_seq:
                try:
                    self._writer.execute("BEGIN")
                    self._set_meta("seq", str(self._seq))
                    self._writer.execute("COMMIT")
                except sqlite3.Error as exc:  # derived data: the next start catches up from the older seq
                    log.warning("search index %s: could not write its seq at close: %s", self.path, exc)
        self._writer.close()
        self._reader.close()

    # -- meta -------------------------------------------------------------------------------

    def _meta(self, key: str) -> str | None:
        row = self._writer.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, key: str, value: str) -> None:
        self._writer.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    @property
    def indexed_seq(self) -> int:
        """The last store ``seq`` taken in (0: none)."""
        with self._write_lock:
            if self._seq is None:
                value = self._meta("seq")
                self._seq = self._stored_seq = int(value) if value is not None else 0
            return self._seq

    def _took_in(self, seq: int, *, stored: bool) -> None:
        self._seq = seq
        if stored:
            self._stored_seq = seq

    # -- writing ----------------------------------------------------------------------------

    def _put(self, docs: Iterable[Doc]) -> None:
        execute = self._writer.execute
        for doc in docs:
            for row in execute("SELECT id, body FROM docs WHERE ref = ?", (doc.ref,)).fetchall():
                self._unindex(row)
            cursor = execute(
                "INSERT INTO docs (ref, thread_id, run_id, message_id, kind, body) VALUES (?, ?, ?, ?, ?, ?)",
                (doc.ref, doc.thread_id, doc.run_id, doc.message_id, doc.kind, _pack(doc.body)))
            execute("INSERT INTO fts (rowid, body) VALUES (?, ?)", (cursor.lastrowid, doc.body))

    def _unindex(self, row: tuple[int, bytes]) -> None:
        """Take one document out (a contentless FTS5 table is told the words
        it indexed, from the kept body)."""
        rowid, body = row
        self._writer.execute("INSERT INTO fts (fts, rowid, body) VALUES ('delete', ?, ?)", (rowid, _unpack(body)))
        self._writer.execute("DELETE FROM docs WHERE id = ?", (rowid,))

    def _drop_thread(self, thread_id: str) -> None:
        for row in self._writer.execute("SELECT id, body FROM docs WHERE thread_id = ?", (thread_id,)).fetchall():
            self._unindex(row)

    def rebuild(self, store: Store) -> int:
        """Index every thread of ``store`` from scratch; the number of documents."""
        with self._write_lock:
            seq = store.last_seq  # read first: what commits meanwhile is caught up from the log
            writer = self._writer
            writer.execute("BEGIN")
            # Until the build is done the file is of no version: cut off, it is built again.
            writer.execute("DELETE FROM meta WHERE key = 'schema'")
            writer.execute("DELETE FROM docs")
            writer.execute("INSERT INTO fts (fts) VALUES ('delete-all')")
            writer.execute("COMMIT")
            count = 0
            chunk: list[Doc] = []
            for doc in store_docs(store):
                chunk.append(doc)
                if len(chunk) >= REBUILD_CHUNK:
                    count += self._write_chunk(chunk)
                    chunk = []
            count += self._write_chunk(chunk)
            writer.execute("BEGIN")
            self._set_meta("schema", SCHEMA_VERSION)
            self._set_meta("seq", str(seq))
            writer.execute("COMMIT")
            self._took_in(seq, stored=True)
            return count

    def _write_chunk(self, chunk: list[Doc]) -> int:
        self._writer.execute("BEGIN")
        self._put(chunk)
        self._writer.execute("COMMIT")
        return len(chunk)

    def apply(self, store: Store, events: list[Event]) -> None:
        """Take ``events`` (committed, in ``seq`` order) in: what they change
        in one transaction with the seq; events that change no document
        write nothing (the seq is kept in memory until the next write or
        ``close``)."""
        if not events:
            return
        changes: list[Doc | str] = []  # a document to (re)put, or a thread id to drop
        for event in events:
            if event.type in INDEXED_EVENTS:
                changes.extend(self._changes(store, event))
        with self._write_lock:
            if not changes:
                self._took_in(events[-1].seq, stored=False)
                return
            self._writer.execute("BEGIN")
            try:
                for change in changes:
                    if isinstance(change, str):
                        self._drop_thread(change)
                    else:
                        self._put([change])
                self._set_meta("seq", str(events[-1].seq))
                self._writer.execute("COMMIT")
            except BaseException:
                self._writer.execute("ROLLBACK")
                raise
            self._took_in(events[-1].seq, stored=True)

    def _changes(self, store: Store, event: Event) -> list[Doc | str]:
        """What ``event`` changes in the index: documents to put, a thread to drop."""
        payload = event.payload
        if event.type == "thread.deleted":
            return [str(event.thread_id)]
        if event.type in ("thread.created", "thread.updated"):
            thread = store.thread(str(event.thread_id))
            return [title_doc(thread)] if thread is not None else []
        if event.type in ("message.created", "message.completed"):
            message_id = payload.get("messageId") or (payload.get("message") or {}).get("id")
            message = store.get(ConversationMessage, str(message_id)) if message_id else None
            doc = message_doc(message) if message is not None else None
            return [doc] if doc is not None else []
        if event.type == "context_handoff.created":
            handoff_id = (payload.get("handoff") or {}).get("id")
            handoff = store.get(ContextHandoff, str(handoff_id)) if handoff_id else None
            return [handoff_doc(handoff, event.run_id)] if handoff is not None else []
        return []

    # -- reading ----------------------------------------------------------------------------

    def search(self, query: str, *, thread_id: str | None = None, limit: int = 20) -> tuple[list[Hit], bool]:
        """The best ``limit`` matches of ``query`` (FTS5 syntax: words, ``"a
        phrase"``, ``pre*``, ``AND``/``OR``/``NOT``), best first, and whether
        they are ranked; matched words are marked ``**so**`` in the snippet.

        Ranking by BM25 costs time in proportion to how many documents
        match: a query that matches so many that ranking them has not
        finished within ``RANK_BUDGET`` is answered with its newest matches
        instead (FTS5 reads those in rowid order and stops at ``limit``),
        unranked (score 0).

        Raises:
            SearchSyntaxError: ``query`` is not valid FTS5.
        """
        within = " AND rowid IN (SELECT id FROM docs WHERE thread_id = ?)" if thread_id is not None else ""
        args: list[Any] = [query, *([thread_id] if thread_id is not None else []), limit]
        with self._read_lock:
            try:
                scored = self._ranked(within, args)
                ranked = scored is not None
                if scored is None:
                    sql = "SELECT rowid, 0.0 FROM fts WHERE fts MATCH ?" + within + " ORDER BY rowid DESC LIMIT ?"
                    scored = self._reader.execute(sql, args).fetchall()
                hits = self._hits(query, scored)
            except sqlite3.OperationalError as exc:
                if is_query_error(exc):
                    raise SearchSyntaxError(str(exc)) from None
                raise
        return hits, ranked

    def _ranked(self, within: str, args: list[Any]) -> list[Any] | None:
        """(rowid, bm25) of the best matches, or None when ranking them took
        longer than ``RANK_BUDGET`` (0: never rank). A watchdog interrupts
        the query: BM25 counts a term's documents inside one call of FTS5,
        where SQLite's progress handler is not asked."""
        if RANK_BUDGET <= 0:
            return None
        sql = "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ?" + within + " ORDER BY bm25(fts) LIMIT ?"
        self._watchdog.arm(RANK_BUDGET)
        try:
            return self._reader.execute(sql, args).fetchall()
        except sqlite3.OperationalError as exc:
            if self._watchdog.fired and "interrupted" in str(exc):
                return None
            raise
        finally:
            self._watchdog.disarm()

    def _hits(self, query: str, scored: list[Any]) -> list[Hit]:
        """The documents of ``scored`` (rowid, bm25) with their snippets, in that order."""
        if not scored:
            return []
        ids = [row[0] for row in scored]
        marks = ",".join("?" * len(ids))
        docs = {row[0]: row[1:] for row in self._reader.execute(
            f"SELECT id, thread_id, run_id, message_id, kind, body FROM docs WHERE id IN ({marks})", ids).fetchall()}
        terms = query_terms(query)
        hits = []
        for rowid, score in scored:
            if rowid in docs:
                thread_id, run_id, message_id, kind, body = docs[rowid]
                hits.append(Hit(thread_id, run_id, message_id, kind, snippet(_unpack(body), terms),
                                round(-float(score), 6)))
        return hits

    def count(self) -> int:
        with self._read_lock:
            return int(self._reader.execute("SELECT count(*) FROM docs").fetchone()[0])

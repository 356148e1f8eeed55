"""The search index by itself (issue 28): built from a store, kept by the
committed events, a deleted thread's entries dropped, snippets made from
the stored text, and a query too broad to rank in time answered with its
newest matches (``ranked: false``)."""

from __future__ import annotations

import sqlite3

import pytest
import trio

from agentd.store import search_index
from agentd.store.batch import WriteBatch
from agentd.store.db import Store
from agentd.store.records import AppThread, ConversationMessage, to_wire
from agentd.store.search_index import SearchIndex, SearchSyntaxError
from agentd.store.search_snippet import query_terms, snippet


def _thread(batch: WriteBatch, n: int, text: str) -> None:
    thread = AppThread(id=f"thr_{n:04d}", title=f"thread {n}")
    user = ConversationMessage(id=f"msg_{n:04d}u", thread_id=thread.id, run_id=f"run_{n:04d}", role="user", text=text)
    answer = ConversationMessage(id=f"msg_{n:04d}a", thread_id=thread.id, run_id=f"run_{n:04d}", role="assistant",
                                 text=f"answer to {text}", status="streaming")
    batch.put_all(thread, user, answer)
    batch.event("thread.created", thread_id=thread.id, thread=to_wire(thread))
    batch.event("message.created", thread_id=thread.id, message=to_wire(user))
    batch.event("message.created", thread_id=thread.id, message=to_wire(answer))


async def test_built_from_the_store_then_kept_by_its_events(tmp_path):
    store = Store(tmp_path / "store", inline_commits=True)
    batch = WriteBatch()
    for n in range(3):
        _thread(batch, n, f"common word number{n}")
    await store.commit(batch)
    index, rebuild = SearchIndex.open(tmp_path / "search.sqlite3")
    assert rebuild
    assert index.rebuild(store) == 3 * 2  # titles and user messages: the answers are still streaming
    assert index.indexed_seq == store.last_seq

    # An answer is indexed once it completes; a thread deleted leaves the index.
    done = WriteBatch()
    done.put(ConversationMessage(id="msg_0001a", thread_id="thr_0001", run_id="run_0001", role="assistant",
                                 text="answer to common word number1"))
    done.event("message.completed", thread_id="thr_0001", messageId="msg_0001a", status="complete", length=1)
    done.event("thread.deleted", thread_id="thr_0002", threadId="thr_0002", childThreadIds=[])
    committed = await store.commit(done)
    index.apply(store, committed.events)
    hits, ranked = index.search("common")
    assert ranked and {(h.thread_id, h.kind) for h in hits} == {("thr_0000", "user"), ("thr_0001", "user"),
                                                               ("thr_0001", "answer")}
    assert all("**common**" in h.snippet for h in hits)
    assert [h.thread_id for h in index.search("number1", thread_id="thr_0001")[0]] == ["thr_0001", "thr_0001"]
    with pytest.raises(SearchSyntaxError):
        index.search('"open')
    index.close()
    # Opened again: of this version, nothing to rebuild.
    again, rebuild = SearchIndex.open(tmp_path / "search.sqlite3")
    assert not rebuild and again.indexed_seq == store.last_seq
    again.close()
    store.close()


async def test_a_query_too_broad_to_rank_in_time_gets_its_newest_matches(tmp_path, monkeypatch):
    store = Store(tmp_path / "store", inline_commits=True)
    batch = WriteBatch()
    for n in range(200):
        _thread(batch, n, "common")
    await store.commit(batch)
    index, _ = SearchIndex.open(tmp_path / "search.sqlite3")
    index.rebuild(store)
    monkeypatch.setattr(search_index, "RANK_BUDGET", 0)  # no time to rank at all
    hits, ranked = index.search("common", limit=5)
    assert not ranked and [h.thread_id for h in hits] == [f"thr_{n:04d}" for n in range(199, 194, -1)]
    assert all(h.score == 0 for h in hits)
    index.close()
    store.close()


def test_snippets_mark_the_matched_words_of_the_stored_text():
    assert snippet("see the <b>Okapi</b>!", query_terms("okapi")) == "see the <b>**Okapi**</b>!"
    assert snippet("un café noir", query_terms("cafe OR the*")) == "un **café** noir"
    long = " ".join(f"w{n}" for n in range(100))
    cut = snippet(long, query_terms("w50"))
    assert cut.startswith("…") and cut.endswith("…") and "**w50**" in cut and len(cut.split()) == 16


def test_a_file_that_cannot_be_opened_now_is_not_taken_for_a_corrupt_one(tmp_path):
    """Out of descriptors, a folder gone: an OperationalError, raised for the
    indexer to try again later; only a file that is not a database is made anew."""
    with pytest.raises(sqlite3.OperationalError):
        SearchIndex.open(tmp_path / "missing-folder" / "search.sqlite3")
    torn = tmp_path / "search.sqlite3"
    torn.write_bytes(b"not a database" * 100)
    index, rebuild = SearchIndex.open(torn)
    assert rebuild and index.count() == 0
    index.close()


async def test_the_indexer_keeps_trying_and_searches_say_it_is_not_ready(tmp_path, autojump_clock):
    from agentd.protocol.errors import InvalidState
    from agentd.supervisor.search_indexer import SearchIndexer

    store = Store(tmp_path / "store", inline_commits=True)
    folder = tmp_path / "later"
    indexer = SearchIndexer(store, folder / "search.sqlite3")
    async with trio.open_nursery() as nursery:
        await nursery.start(indexer.serve)
        with pytest.raises(InvalidState, match="being built"):
            await indexer.search("x", thread_id=None, limit=5)
        folder.mkdir()  # the next try finds a place for it
        await indexer.ready.wait()
        assert (await indexer.search("x", thread_id=None, limit=5))["hits"] == []
        nursery.cancel_scope.cancel()
    indexer.close()
    store.close()


def _stored_seq(path) -> int | None:
    """The seq the index file holds, read by a connection of its own."""
    with sqlite3.connect(path) as other:
        row = other.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()
    return None if row is None else int(row[0])


async def test_commits_that_change_no_document_write_nothing_until_close(tmp_path):
    # Issue 24 §3: most of a run's commits (its session, attempt, outbox and
    # checkpoint bookkeeping) change no document; each used to be an SQLite
    # transaction of its own, rewriting the index's seq.
    store = Store(tmp_path / "store", inline_commits=True)
    path = tmp_path / "search.sqlite3"
    first = WriteBatch()
    _thread(first, 0, "kept words")
    index, _rebuild = SearchIndex.open(path)
    index.apply(store, (await store.commit(first)).events)
    written = _stored_seq(path)
    assert written == store.last_seq == index.indexed_seq

    bookkeeping = WriteBatch()
    bookkeeping.event("session.ready", thread_id="thr_0000", sessionId="pss_1")
    bookkeeping.event("message.created", thread_id="thr_0000",  # a streaming answer: not a document yet
                      message={"id": "msg_0000a"})
    wal = path.with_name(path.name + "-wal").stat().st_size
    index.apply(store, (await store.commit(bookkeeping)).events)
    assert index.indexed_seq == store.last_seq > written
    assert _stored_seq(path) == written and path.with_name(path.name + "-wal").stat().st_size == wal

    # Cut off here, the file's older seq is caught up from: taking the same
    # events in again finds the same documents.
    again = SearchIndex(path)
    assert again.indexed_seq == written
    again.apply(store, store.events_after(written))
    assert [h.kind for h in again.search("kept")[0]] == ["user"]
    again.close()
    # Closed in order, the seq taken in is written.
    index.close()
    assert _stored_seq(path) == store.last_seq
    store.close()


async def test_a_search_does_not_wait_for_commits_to_gather(tmp_path, monkeypatch):
    # The indexer lets the commits after a wake-up gather before it writes;
    # a search asks it to take in at once what was committed before it.
    from agentd.supervisor import search_indexer
    from agentd.supervisor.search_indexer import SearchIndexer

    monkeypatch.setattr(search_indexer, "GATHER", 3600.0)
    store = Store(tmp_path / "store")
    indexer = SearchIndexer(store, tmp_path / "search.sqlite3")
    store.set_on_commit(indexer.notify)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.writer.serve)
        await nursery.start(indexer.serve)
        await indexer.ready.wait()
        for n in range(3):
            batch = WriteBatch()
            _thread(batch, n, f"gathered word{n}")
            await store.commit(batch)
        # (left to gather, the search would give up after CATCH_UP_WAIT and find nothing)
        hits = (await indexer.search("gathered", thread_id=None, limit=10))["hits"]
        assert {h["threadId"] for h in hits} == {"thr_0000", "thr_0001", "thr_0002"}
        nursery.cancel_scope.cancel()
    indexer.close()
    store.close()


def test_replaced_and_dropped_documents_leave_no_word_behind(tmp_path):
    """The contentless FTS5 table forgets exactly the words a document had
    when it is replaced or its thread is dropped (its body kept compressed
    for that); FTS5's own integrity check agrees, over a seeded mix of puts,
    replacements and drops."""
    import random

    from agentd.store.search_docs import Doc

    seed = 20261202
    rnd = random.Random(seed)
    index, _ = SearchIndex.open(tmp_path / "search.sqlite3")
    words = [f"w{i}" for i in range(40)]
    live: dict[str, tuple[str, str]] = {}  # ref -> (thread, body)
    for step in range(300):
        if rnd.random() < 0.1 and live:
            thread = rnd.choice(sorted({t for t, _b in live.values()}))
            index._drop_thread(thread)
            live = {ref: v for ref, v in live.items() if v[0] != thread}
            continue
        ref = f"msg_{rnd.randrange(30)}"
        thread = live[ref][0] if ref in live else f"thr_{rnd.randrange(5)}"
        body = " ".join(rnd.choice(words) for _ in range(rnd.randint(1, 8)))
        index._put([Doc(ref=ref, thread_id=thread, run_id=None, message_id=ref, kind="user", body=body)])
        live[ref] = (thread, body)
    index._writer.execute("INSERT INTO fts (fts, rank) VALUES ('integrity-check', 0)")
    for word in words:
        expected = {ref for ref, (_t, body) in live.items() if word in body.split()}
        found = {hit.message_id for hit in index.search(word, limit=100)[0]}
        assert found == expected, f"seed {seed}: {word}"
    index.close()


def test_an_index_of_the_older_schema_is_made_anew_and_rebuilt(tmp_path):
    """Schema 1 kept the body twice (a text column and an external-content
    FTS5 table): such a file is replaced, not read with the new tables."""
    path = tmp_path / "search.sqlite3"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema', '1'), ('seq', '42');
        CREATE TABLE docs (id INTEGER PRIMARY KEY, ref TEXT NOT NULL UNIQUE, thread_id TEXT NOT NULL,
                           run_id TEXT, message_id TEXT, kind TEXT NOT NULL, body TEXT NOT NULL);
        INSERT INTO docs VALUES (1, 'msg_1', 'thr_1', NULL, 'msg_1', 'user', 'plain old text');
    """)
    old.commit()
    old.close()
    index, rebuild = SearchIndex.open(path)
    assert rebuild and index.count() == 0 and index.indexed_seq == 0
    index.close()

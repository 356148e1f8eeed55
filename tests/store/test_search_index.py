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

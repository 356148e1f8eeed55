"""The documents the search index holds (``search_index.py``), made from
the store's records: a thread's title, its user messages, its answers once
they ended, and its handoffs' text."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .db import Store
from .records import AppThread, ContextHandoff, ConversationMessage, decode_record


@dataclass(frozen=True)
class Doc:
    """One indexed document."""

    ref: str
    thread_id: str
    run_id: str | None
    message_id: str | None
    kind: str  # title | user | answer | handoff
    body: str


def title_doc(thread: AppThread) -> Doc:
    return Doc(f"title:{thread.id}", thread.id, None, None, "title", thread.title)


def message_doc(message: ConversationMessage) -> Doc | None:
    """A user message as soon as it is stored; an answer once it ended (its text is whole)."""
    if message.role == "user":
        return Doc(message.id, message.thread_id, message.run_id, message.id, "user", message.text)
    if message.status in ("complete", "interrupted") and message.text:
        return Doc(message.id, message.thread_id, message.run_id, message.id, "answer", message.text)
    return None


def handoff_doc(handoff: ContextHandoff, run_id: str | None = None) -> Doc:
    return Doc(handoff.id, handoff.thread_id, run_id, None, "handoff", handoff.text)


def store_docs(store: Store) -> Iterator[Doc]:
    """Every document of ``store``: titles and messages thread by thread, then handoffs."""
    for thread in store.list_threads():
        yield title_doc(thread)
        for message in store.thread_messages(thread.id):
            doc = message_doc(message)
            if doc is not None:
                yield doc
    yield from _handoff_docs(store)


def _handoff_docs(store: Store) -> Iterator[Doc]:
    """Every stored handoff (they have no index by thread: the whole table is read)."""
    with store.env.begin(db=store.dbs["context_handoffs"]) as txn:
        for _key, value in txn.cursor():
            try:
                handoff: ContextHandoff = decode_record("context_handoffs", value)
            except Exception:  # noqa: BLE001 - an unreadable record is left out of the index
                continue
            yield handoff_doc(handoff)

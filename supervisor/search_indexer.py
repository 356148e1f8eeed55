"""The indexer that keeps the search index beside the store up to date
(``thread.search`` asks it).

The index (``store/search_index.py``) is derived from the store. The
indexer is told of every commit by a post-commit hook (``notify``: on the
loop, it only wakes the indexer) and then reads what is new from the event
log and writes it, in a worker thread: nothing of it runs in the commit
path or blocks the event loop. At its start it opens the index, rebuilds it
when it is missing, unreadable, of another schema or ahead of the store,
and catches up from the last ``seq`` it had taken in.

Woken by a commit, it lets the next ones gather for up to ``GATHER``
seconds before it writes (a run's dozen commits become one or two SQLite
transactions instead of one each); a search does not wait for that — it
asks the indexer to take in at once what was committed before it.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import trio

from agentd.protocol.errors import InvalidParams, InvalidState
from agentd.store.db import Store
from agentd.store.records import Event
from agentd.store.search_index import SearchIndex, SearchSyntaxError

log = logging.getLogger(__name__)

#: events read from the log per worker-thread batch
CATCH_UP_PAGE = 2_000
#: seconds before an index that failed is tried again, doubling up to RETRY_MAX
RETRY_FIRST = 1.0
RETRY_MAX = 60.0
#: how long a search waits for the index to take in what was committed before it
CATCH_UP_WAIT = 5.0
#: seconds the commits after a wake-up may gather before the index takes them in
GATHER = 1.0


class SearchIndexer:
    """Owns the search index of one daemon.

    Args:
        store: the store it is derived from.
        path: the index file (``<data-dir>/search.sqlite3``).
    """

    def __init__(self, store: Store, path: Path) -> None:
        self.store = store
        self.path = path
        self.index: SearchIndex | None = None
        #: set when the index has caught up with the store once (searches wait for it)
        self.ready = trio.Event()
        self._wake = trio.Event()
        #: set by a search: take in what is committed now, without gathering
        self._hurry = trio.Event()
        #: set (and made anew) each time the indexer has caught up a step
        self._progress = trio.Event()
        #: the last seq the store committed, as the hook last heard
        self.committed_seq = store.last_seq
        #: the last seq the index has taken in (0 until it is open)
        self.indexed_seq = 0

    def notify(self, events: list[Event]) -> None:
        """The post-commit hook: note the newest seq and wake the indexer (no I/O)."""
        if events:
            self.committed_seq = events[-1].seq
            self._wake.set()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open (or rebuild) the index, then follow the store until cancelled.
        An index that cannot be opened or written now (out of descriptors, a
        full disk) is tried again later, backing off: its failure is no
        reason to restart anything else, and searches say it is not ready."""
        task_status.started()
        delay = RETRY_FIRST
        while True:
            try:
                await self._follow()
            except (sqlite3.Error, OSError) as exc:
                log.warning("search index %s: %s; trying again in %g s", self.path, exc, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX)

    async def _follow(self) -> None:
        if self.index is None:
            self.index = await trio.to_thread.run_sync(self._open)
        while True:
            self._wake = trio.Event()
            # A search that asks from here on may want more than this catch-up takes in.
            self._hurry = trio.Event()
            self.indexed_seq = await trio.to_thread.run_sync(self._catch_up, self.index)
            self.ready.set()
            self._progress.set()
            self._progress = trio.Event()
            if self.committed_seq <= self.indexed_seq:
                await self._wake.wait()
            # Let the commits that follow this one gather (a search cuts it short).
            with trio.move_on_after(GATHER):
                await self._hurry.wait()

    def _open(self) -> SearchIndex:
        index, rebuild = SearchIndex.open(self.path)
        if not rebuild and index.indexed_seq > self.store.last_seq:
            log.warning("search index %s is ahead of the store (seq %d > %d): building it again",
                        self.path, index.indexed_seq, self.store.last_seq)
            rebuild = True
        if rebuild:
            try:
                count = index.rebuild(self.store)
            except BaseException:
                index.close()
                raise
            log.info("search index built: %d documents", count)
        return index

    def _catch_up(self, index: SearchIndex) -> int:
        """Take in every event after the index's seq (in the worker thread);
        the seq it has taken in."""
        seq = index.indexed_seq
        while True:
            events = self.store.events_after(seq, limit=CATCH_UP_PAGE)
            if not events:
                return seq
            index.apply(self.store, events)
            seq = events[-1].seq

    async def caught_up(self, seq: int, *, within: float = CATCH_UP_WAIT) -> None:
        """Wait until the index has taken in ``seq`` (at most ``within`` seconds),
        asking the indexer not to let commits gather meanwhile."""
        with trio.move_on_after(within):
            while self.indexed_seq < seq or not self.ready.is_set():
                self._hurry.set()
                await self._progress.wait()

    async def search(self, query: str, *, thread_id: str | None, limit: int) -> dict[str, Any]:
        """``thread.search``'s answer for ``query`` (the index is read in a
        worker thread). A search sees what was committed before it was
        asked: it waits (briefly) for the index to take that in."""
        await self.caught_up(self.store.last_seq)
        index = self.index
        if index is None or not self.ready.is_set():
            raise InvalidState("the search index is being built from the store (at start, when it was missing "
                               "or out of step); try again in a moment")
        try:
            hits, ranked = await trio.to_thread.run_sync(lambda: index.search(query, thread_id=thread_id, limit=limit))
        except sqlite3.Error as exc:
            raise InvalidState(f"the search index cannot be read now: {exc}; try again shortly") from None
        except SearchSyntaxError as exc:
            raise InvalidParams(f"the search query is not valid: {exc}; put words in double quotes to search "
                                "for them as they are", field="query") from None
        return {"hits": [{"threadId": h.thread_id, "runId": h.run_id, "messageId": h.message_id, "kind": h.kind,
                          "snippet": h.snippet, "score": h.score} for h in hits], "ranked": ranked}

    def close(self) -> None:
        if self.index is not None:
            self.index.close()
            self.index = None

"""``thread.search``: asks the search index (``search_indexer.py`` keeps it)."""

from __future__ import annotations

from typing import Any

from agentd.protocol import wire
from agentd.protocol.errors import InvalidState, NotFound
from agentd.protocol.server import Connection

from .context import DaemonContext


async def thread_search(context: DaemonContext, params: wire.ThreadSearchParams, _conn: Connection) -> dict[str, Any]:
    """``thread.search``: full text over titles, user messages, answers and handoffs."""
    indexer = context.search
    if indexer is None:
        raise InvalidState("search is off in this agentd")
    if params.thread_id is not None and context.store.thread(params.thread_id) is None:
        raise NotFound(f"no thread {params.thread_id}", threadId=params.thread_id)
    return await indexer.search(params.query, thread_id=params.thread_id, limit=params.limit)

"""What a transition may read: the thread's state and the daemon's records,
never a task, a lock or another thread (SPEC F2, F18).

The actor builds one ``ThreadContext`` and passes it to every transition it
runs. Everything here answers at once and changes nothing outside the
thread's own state: the store is read (reads are synchronous LMDB lookups),
the session host only asked what it knows (an adapter's capabilities, which
session is live). Writes go into the batch; whatever else must happen is an
effect (effects.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentd.protocol.errors import NotFound
from agentd.store.ids import new_id
from agentd.store.records import AppThread, Run

from .graph import ThreadBatch
from .state import ThreadState

if TYPE_CHECKING:
    from agentd.store.db import Store

    from .config import DaemonConfig
    from .providers.base import ProviderAdapter, SessionHost


def thread_record(
    *, now: float, workspaces_dir: str, title: str, provider: str, workspace: str | None,
    parent: AppThread | None = None, relationship: str | None = None, side_chat: bool = False,
    created_by: str = "user",
) -> AppThread:
    """A new AppThread record, not yet stored (SPEC F1, with F8's light
    lineage). Without a workspace of its own the thread gets a folder under
    ``workspaces_dir``, made when its first run starts: creating a thread
    touches nothing but the store."""
    thread_id = new_id("thr")
    return AppThread(
        id=thread_id, title=title, workspace=workspace or os.path.join(workspaces_dir, thread_id), provider=provider,
        created_at=now, updated_at=now,
        parent_thread_id=parent.id if parent else None,
        relationship_to_parent=relationship if parent else None,
        root_thread_id=(parent.root_thread_id or parent.id) if parent else thread_id,
        side_chat=side_chat, created_by=created_by,
    )


@dataclass
class ThreadContext:
    """One thread's view for its transitions.

    Attributes:
        state: the thread as its actor holds it (transitions update it with their batch).
        store: the durable records, for reading.
        config: the daemon's configuration.
        sessions: the session host, asked only what it knows (``adapter``, ``live_session_id``).
        now: the wall clock that stamps records and events.
        checkpoints_on: whether runs are checkpointed in this daemon.
        shutting_down: whether the daemon has begun to stop (no run starts after it).
        workspaces_dir: where threads without a workspace get their folder.
    """

    state: ThreadState
    store: Store
    config: DaemonConfig
    sessions: SessionHost
    now: Callable[[], float]
    checkpoints_on: bool
    shutting_down: Callable[[], bool]
    workspaces_dir: str

    @property
    def thread_id(self) -> str:
        return self.state.thread_id

    def batch(self) -> ThreadBatch:
        """An empty write batch of this thread, stamped now."""
        return ThreadBatch(thread_id=self.thread_id, now=self.now())

    def adapter(self, provider: str) -> ProviderAdapter:
        """The adapter of provider instance ``provider`` (its kind and capabilities)."""
        return self.sessions.adapter(provider)

    def live_session_id(self) -> str | None:
        """The id of the thread's live provider session, if it has one."""
        live = self.sessions.live_session(self.thread_id)
        return live[0] if live is not None else None

    def thread_run(self, run_id: str) -> Run:
        """A run of this thread from the store (``not_found`` otherwise)."""
        run = self.store.run(run_id)
        if run is None or run.thread_id != self.thread_id:
            raise NotFound(f"no run {run_id} in thread {self.thread_id}", runId=run_id)
        return run

    def new_thread_record(
        self, *, title: str, provider: str, workspace: str | None, parent: AppThread | None = None,
        relationship: str | None = None, side_chat: bool = False, created_by: str = "user",
    ) -> AppThread:
        """A new AppThread record (``thread_record``), stamped now."""
        return thread_record(now=self.now(), workspaces_dir=self.workspaces_dir, title=title, provider=provider,
                             workspace=workspace, parent=parent, relationship=relationship, side_chat=side_chat,
                             created_by=created_by)

"""What ``thread.delete`` takes out of the store: a thread's records and
every index entry that names them, as delete operations of one batch.

Gone: the thread, its runs, attempts, nodes, provider turns, messages (and
their text chunks), requests, artifacts, checkpoints, provider threads,
handoffs, the open outbox entries of the thread and the transfers that
stay inside it. Kept: a transfer that joins the thread to another one (a
fork's, a merge-back's, a delegated task's) stays listed under the other
thread, whose history it is too; the other thread's record is not touched
(its ``parentThreadId`` names a thread that no longer exists: its lineage
says the source was deleted). The event log keeps its entries (``seq`` is
gap-free); provider sessions are records of processes and stay.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from .batch import SEP, WriteBatch, index_key
from .db import Store
from .records import AppThread, ContextHandoff, RuntimeRequest, decode_record


@dataclass
class DeletedThread:
    """What a thread's deletion takes out (counts and what the daemon drops after the commit)."""

    thread_id: str
    runs: int = 0
    messages: int = 0
    nodes: int = 0
    handoffs: int = 0
    checkpoints: int = 0
    #: (workspace, ref) of each captured checkpoint: shadow refs to drop after the commit
    checkpoint_refs: list[tuple[str, str]] = field(default_factory=list)
    #: forks and other child threads that keep their own history
    child_thread_ids: list[str] = field(default_factory=list)


def _chunk_keys(store: Store, message_id: str) -> Iterator[bytes]:
    prefix = message_id.encode() + SEP
    with store.env.begin(db=store.dbs["message_text"]) as txn:
        cursor = txn.cursor()
        if cursor.set_range(prefix):
            for key in cursor.iternext(keys=True, values=False):
                if not bytes(key).startswith(prefix):
                    break
                yield bytes(key)


def _thread_requests(store: Store, thread_id: str) -> list[str]:
    """The ids of the thread's runtime requests (they have no index by thread
    but the pending one: the table is read, and it holds few)."""
    found = []
    with store.env.begin(db=store.dbs["requests"]) as txn:
        for key, value in txn.cursor():
            try:
                request: RuntimeRequest = decode_record("requests", value)
            except Exception:  # noqa: BLE001 - an unreadable request is left where it is
                continue
            if request.thread_id == thread_id:
                found.append(bytes(key).decode())
    return found


def _delete_runs(batch: WriteBatch, store: Store, thread_id: str, out: DeletedThread) -> list[str]:
    """Runs with their attempts, turns, nodes and artifacts; the handoff ids their attempts name."""
    handoff_ids: list[str] = []
    for run in store.thread_runs(thread_id):
        out.runs += 1
        batch.delete("runs", run.id.encode())
        batch.delete("idx_thread_runs", index_key(thread_id, run.ordinal))
        batch.delete("idx_open_runs", run.id.encode())
        for attempt in store.run_attempts(run.id):
            batch.delete("attempts", attempt.id.encode())
            batch.delete("idx_run_attempts", index_key(run.id, attempt.number))
            handoff_ids += [h for h in (attempt.handoff_id, *attempt.extra_handoff_ids) if h]
            for turn in store.attempt_turns(attempt.id):
                batch.delete("provider_turns", turn.id.encode())
                batch.delete("idx_attempt_turns", index_key(attempt.id, turn.id))
        for node in store.run_nodes(run.id):
            out.nodes += 1
            batch.delete("nodes", node.id.encode())
            batch.delete("idx_run_nodes", index_key(run.id, node.id))
        for artifact in store.run_artifacts(run.id):
            batch.delete("artifacts", artifact.id.encode())
            batch.delete("idx_run_artifacts", index_key(run.id, artifact.id))
    return handoff_ids


def _delete_messages(batch: WriteBatch, store: Store, thread_id: str, out: DeletedThread) -> None:
    for message in store.thread_messages(thread_id):
        out.messages += 1
        batch.delete("messages", message.id.encode())
        batch.delete("idx_thread_messages", index_key(thread_id, message.id))
        batch.delete("idx_queued_messages", message.id.encode())
        for key in _chunk_keys(store, message.id):
            batch.delete("message_text", key)
    for request_id in _thread_requests(store, thread_id):
        batch.delete("requests", request_id.encode())
        batch.delete("idx_pending_requests", index_key(thread_id, request_id))


def _delete_lineage(batch: WriteBatch, store: Store, thread: AppThread, handoff_ids: list[str],
                    out: DeletedThread) -> None:
    """Transfers inside the thread, its index entries of the others, its handoffs and provider threads."""
    thread_id = thread.id
    for transfer in store.thread_transfers(thread_id):
        batch.delete("idx_thread_transfers", index_key(thread_id, transfer.id))
        if transfer.source_thread_id == transfer.target_thread_id == thread_id:
            batch.delete("context_transfers", transfer.id.encode())
            batch.delete("idx_inflight_transfers", transfer.id.encode())
            handoff_ids += [transfer.handoff_id] if transfer.handoff_id else []
    for handoff_id in dict.fromkeys(handoff_ids):
        handoff = store.get(ContextHandoff, handoff_id)
        if handoff is not None and handoff.thread_id == thread_id:
            out.handoffs += 1
            batch.delete("context_handoffs", handoff_id.encode())
    for provider_thread in store.thread_provider_threads(thread_id):
        batch.delete("provider_threads", provider_thread.id.encode())
        batch.delete("idx_thread_backing", index_key(thread_id, provider_thread.id))
    if thread.parent_thread_id is not None:
        batch.delete("idx_thread_children", index_key(thread.parent_thread_id, thread_id))
    for child in store.thread_children(thread_id):
        out.child_thread_ids.append(child.id)
        batch.delete("idx_thread_children", index_key(thread_id, child.id))


def delete_thread(batch: WriteBatch, store: Store, thread: AppThread) -> DeletedThread:
    """Add to ``batch`` the deletes that take ``thread`` out of ``store``."""
    out = DeletedThread(thread.id)
    handoff_ids = _delete_runs(batch, store, thread.id, out)
    _delete_messages(batch, store, thread.id, out)
    for checkpoint in store.thread_checkpoints(thread.id):
        out.checkpoints += 1
        batch.delete("checkpoints", checkpoint.id.encode())
        batch.delete("idx_thread_checkpoints", index_key(thread.id, checkpoint.ordinal, checkpoint.id))
        if checkpoint.ref:
            out.checkpoint_refs.append((checkpoint.workspace, checkpoint.ref))
    _delete_lineage(batch, store, thread, handoff_ids, out)
    for effect in store.open_effects():
        if effect.thread_id == thread.id:
            batch.delete("effects", effect.id.encode())
            batch.delete("idx_open_effects", effect.id.encode())
    batch.delete("threads", thread.id.encode())
    return out

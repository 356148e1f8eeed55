"""Startup reconciliation (SPEC F12): restart does not resume execution.

It also runs inside a live daemon when the supervisor restarts the thread
registry (directly, or because the store writer before it restarted): then
only after every actor and provider session has ended, and with a reason that
names the restarted child (``store_writer_restart``) instead of
``daemon_restart``; the states are the same.

Reads only the open-runs, queued-messages, live-sessions, open-effects and
in-flight-transfers indexes, so its cost grows with what was in flight, not with history. What
was running is closed with an honest status and reason; nothing is re-run,
nothing external is rewritten as success or failure, and no text is lost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .batch import WriteBatch
from .db import Store, struct_copy
from .ids import new_id
from agentd.protocol.errors import AgentdError

from .records import NODE_TERMINAL, AppThread, Checkpoint, ConversationMessage, Effect, ProviderThread, Run, to_wire

RESTART_REASON = "daemon_restart"
TOOL_NOT_RESUMED = "incomplete history: no tool result recorded; execution not resumed"
BACKGROUND_NOT_OBSERVED = "no current execution observed"
BACKGROUND_KINDS = frozenset({"subagent", "background_task"})
#: the outbox entry a run's checkpoint capture commits before it starts
#: (actors/checkpointing.py): still pending at a start, the capture was cut off
CHECKPOINT_CAPTURE = "checkpoint.capture"
#: the outbox entry a rollback commits before it touches files or an agent's
#: memory (actors/rollback.py): still pending at a start, it was cut off
ROLLBACK = "rollback"
#: the outbox entry ``checkpoint.restore`` and ``rollback.node`` commit with the
#: safety checkpoint before they touch files (actors/restoring.py)
RESTORE = "restore"


@dataclass
class ReconcileReport:
    runs_interrupted: list[str] = field(default_factory=list)
    runs_not_started: list[str] = field(default_factory=list)
    nodes_incomplete: list[str] = field(default_factory=list)
    messages_not_sent: list[str] = field(default_factory=list)
    requests_not_resumable: list[str] = field(default_factory=list)
    sessions_stopped: list[str] = field(default_factory=list)
    effects_retired: list[str] = field(default_factory=list)
    checkpoints_missing: list[str] = field(default_factory=list)
    rollbacks_interrupted: list[str] = field(default_factory=list)
    restores_interrupted: list[str] = field(default_factory=list)
    transfers_failed: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, int]:
        return {name: len(value) for name, value in self.__dict__.items()}


def plan_reconciliation(
    store: Store, now: float, *, reason: str = RESTART_REASON, thread_id: str | None = None,
) -> tuple[WriteBatch, ReconcileReport]:
    """Build the batch that closes everything left open by owners that are
    gone: a previous instance (``daemon_restart``), or, inside one instance,
    the actors and sessions a supervisor restart ended (``reason`` names it,
    e.g. ``store_writer_restart``). Callers must make sure no live actor or
    session still owns any of it.

    With ``thread_id``, only that thread's work, after its actor alone failed
    (``thread_failed: …``): the same states, except that its queued runs stay
    queued with their messages (the daemon lives on and runs them when the
    thread is next loaded), and no ``daemon.reconciled`` event is added (the
    caller reports the thread's failure). Records that cannot be decoded are
    skipped and left as they are."""
    batch = WriteBatch()
    report = ReconcileReport()
    threads = {}

    def ours(owner: str | None) -> bool:
        return thread_id is None or owner == thread_id

    def thread(owner: str):
        if owner not in threads:
            threads[owner] = _readable(store, AppThread, owner)
        return threads[owner]

    # Captures cut off by the restart: recorded as missing (SPEC F12), never
    # captured later from whatever is on disk by then.
    missing: dict[str, Checkpoint] = {}
    for effect in store.open_effects():
        if not ours(effect.thread_id):
            continue
        if effect.kind == CHECKPOINT_CAPTURE and effect.status == "pending":
            checkpoint = missing_checkpoint(effect, now, reason)
            batch.put(checkpoint)
            batch.put(struct_copy(effect, status="done", reason=f"{reason}: recorded as a missing checkpoint"))
            batch.event("checkpoint.missing", thread_id=checkpoint.thread_id, run_id=checkpoint.run_id,
                        node_id=checkpoint.node_id, at=now, checkpoint=to_wire(checkpoint))
            report.checkpoints_missing.append(checkpoint.id)
            if checkpoint.run_id and checkpoint.scope == "root":  # a child's is not the run's
                missing[checkpoint.run_id] = checkpoint

    for run in store.open_runs():
        if not ours(run.thread_id) or (thread_id is not None and run.status == "queued"):
            continue
        started = run.status != "queued"
        if started:
            status, why = "interrupted", reason
            report.runs_interrupted.append(run.id)
        else:
            status, why = "cancelled", f"{reason}: never started; its message is kept as not_sent"
            report.runs_not_started.append(run.id)
        for attempt in store.run_attempts(run.id):
            if attempt.status not in ("completed", "failed", "interrupted", "cancelled"):
                batch.put(struct_copy(attempt, status=status, error=why, ended_at=now))
        for node in store.run_nodes(run.id):
            if node.status in NODE_TERMINAL:
                continue
            if node.kind == "root_turn":
                node = struct_copy(node, status=status, ended_at=now, summary=why)
            else:
                text = BACKGROUND_NOT_OBSERVED if node.kind in BACKGROUND_KINDS else TOOL_NOT_RESUMED
                node = struct_copy(node, status="incomplete", ended_at=now, summary=text)
                report.nodes_incomplete.append(node.id)
            batch.put(node)
            batch.event(f"{node.kind}.{node.status}", thread_id=run.thread_id, run_id=run.id, node_id=node.id, at=now, node=to_wire(node))
        for turn_id in (run.selected_attempt_id,):
            if turn_id:
                for turn in store.attempt_turns(turn_id):
                    if turn.status == "started":
                        batch.put(struct_copy(turn, status="interrupted", ended_at=now))
        run = struct_copy(run, status=status, reason=why, ended_at=now)
        if run.id in missing:
            run = struct_copy(run, checkpoint_id=missing[run.id].id)
        batch.put(run)
        batch.event(f"run.{status}", thread_id=run.thread_id, run_id=run.id, node_id=run.root_node_id, at=now, run=to_wire(run))
        t = thread(run.thread_id)
        if t is not None and (t.active_run_id is not None or t.status != "idle"):
            threads[run.thread_id] = t = struct_copy(t, status="idle", active_run_id=None, updated_at=now)
            batch.put(t)

    for message in store.queued_messages() if thread_id is None else []:
        message = struct_copy(message, status="not_sent")
        batch.put(message)
        run = _readable(store, Run, message.run_id) if message.run_id else None
        batch.event("message.not_sent", thread_id=message.thread_id, run_id=message.run_id,
                    node_id=run.root_node_id if run else None, at=now, messageId=message.id, reason=reason)
        report.messages_not_sent.append(message.id)

    # (``owner``, not ``thread_id``: that name is the parameter every step below filters on.)
    for message_id, owner in _streaming_messages(store, report):
        message = _readable(store, ConversationMessage, message_id)
        if message is None:
            continue
        message = struct_copy(message, status="interrupted", completed_at=now)
        batch.put(message)
        batch.event("message.completed", thread_id=owner, run_id=message.run_id, node_id=message.node_id, at=now,
                    messageId=message.id, status="interrupted", length=len(message.text))

    for request in store.pending_requests(thread_id):
        request = struct_copy(request, status="not_resumable", reason=f"{reason}: the provider callback is gone", resolved_at=now)
        batch.put(request)
        prefix = "approval" if request.kind == "approval" else "user_input"
        batch.event(f"{prefix}.not_resumable", thread_id=request.thread_id, run_id=request.run_id, node_id=request.node_id,
                    at=now, request=to_wire(request))
        report.requests_not_resumable.append(request.id)

    for session in store.live_sessions():
        if not ours(session.thread_id):
            continue
        session = struct_copy(session, status="stopped", reason=reason, stopped_at=now)
        batch.put(session)
        batch.event("session.stopped", thread_id=session.thread_id, at=now, session=to_wire(session))
        report.sessions_stopped.append(session.id)

    for effect in store.open_effects():
        if not ours(effect.thread_id):
            continue
        if effect.kind == ROLLBACK and effect.status == "pending":
            _rollback_cut_off(store, batch, effect, now, reason, report)
            continue
        if effect.kind == RESTORE and effect.status == "pending":
            _restore_cut_off(batch, effect, now, reason, report)
            continue
        if effect.replay_safe or effect.kind == CHECKPOINT_CAPTURE:
            continue  # re-queued by the effect runner / settled above
        batch.put(struct_copy(effect, status="retired", reason=f"{reason}: bound to the previous process"))
        report.effects_retired.append(effect.id)

    for transfer in store.inflight_transfers():
        if not ours(transfer.target_thread_id):
            continue
        # Resolved, but no provider turn took it in: never half-consumed. The
        # thread's next message resolves it again (a fork: portably).
        transfer = struct_copy(transfer, status="failed", error=f"{reason}: resolved but not taken in by a provider turn")
        batch.put(transfer)
        batch.event("context_transfer.failed", thread_id=transfer.target_thread_id, run_id=transfer.run_id, at=now,
                    transfer=to_wire(transfer))
        report.transfers_failed.append(transfer.id)

    if batch and thread_id is None:
        batch.event("daemon.reconciled", at=now, reason=reason, **report.as_dict())
    return batch, report


def _readable(store: Store, cls: type, record_id: str) -> Any:
    """``store.get``, or None where the record cannot be decoded: what is
    corrupt is left as it is and the rest is still reconciled."""
    try:
        return store.get(cls, record_id)
    except AgentdError:
        return None


def _rollback_cut_off(store: Store, batch: WriteBatch, effect: Effect, now: float, reason: str,
                      report: ReconcileReport) -> None:
    """A rollback a restart cut off: its files may be restored in part and an
    agent's memory may or may not be reverted, while the graph still shows
    every run. Every provider thread of the thread is retired, so the next run
    rebuilds the agent's context from the graph (a stored summary handoff);
    the files are the person's to check (checkpoint.list shows the safety
    checkpoint once captured)."""
    thread_id = effect.thread_id or ""
    why = f"rolled_back: a rollback was cut off by {reason}; its memory is not trusted"
    backing = {pt.id: pt for pt in store.thread_provider_threads(thread_id)}
    app_thread = _readable(store, AppThread, thread_id)
    if app_thread is not None and app_thread.provider_thread_id and app_thread.provider_thread_id not in backing:
        current = _readable(store, ProviderThread, app_thread.provider_thread_id)
        if current is not None:
            backing[current.id] = current
    for pt in backing.values():
        if pt.status != "unusable":
            batch.put(struct_copy(pt, status="unusable", reason=why, updated_at=now))
            batch.event("provider_thread.unusable", thread_id=thread_id, at=now, providerThreadId=pt.id, reason=why)
    batch.put(struct_copy(effect, status="done", reason=f"{reason}: cut off; provider threads retired"))
    safety = effect.payload.get("safetyCheckpointId")
    batch.event("thread.rollback_interrupted", thread_id=thread_id, at=now, reason=reason,
                targetOrdinal=effect.payload.get("targetOrdinal"), runIds=effect.payload.get("runIds", []),
                checkpointId=effect.payload.get("checkpointId"), safetyCheckpointId=safety,
                message=cut_off_message("a rollback", effect.payload.get("checkpointId"), safety, reason))
    report.rollbacks_interrupted.append(effect.id)


def cut_off_message(what: str, checkpoint_id: str | None, safety_id: str | None, reason: str) -> str:
    """What a person reads about a restore a restart cut off: how far it may
    have got and the checkpoint that takes the files back."""
    if safety_id is None:
        return (f"{what} to checkpoint {checkpoint_id} was cut off by {reason} before it touched any file "
                "(its safety capture had not been recorded): the files are as they were")
    return (f"{what} to checkpoint {checkpoint_id} was cut off by {reason} while it put files back: some may be "
            f"restored, others not. Restore checkpoint {safety_id} (agentd restore {safety_id}) to go back to the "
            "files as they were before it, or restore the target again")


def _restore_cut_off(batch: WriteBatch, effect: Effect, now: float, reason: str, report: ReconcileReport) -> None:
    """A ``checkpoint.restore`` (or ``rollback.node``) a restart cut off while
    it put files back: no run or memory was involved, so the event names the
    safety checkpoint (recorded before any file was touched) that undoes it."""
    p = effect.payload
    batch.put(struct_copy(effect, status="done", reason=f"{reason}: cut off part-way"))
    batch.event("checkpoint.restore_interrupted", thread_id=effect.thread_id, at=now, reason=reason,
                checkpointId=p.get("checkpointId"), safetyCheckpointId=p.get("safetyCheckpointId"),
                message=cut_off_message("a restore", p.get("checkpointId"), p.get("safetyCheckpointId"), reason))
    report.restores_interrupted.append(effect.id)


def missing_checkpoint(effect: Effect, now: float, reason: str) -> Checkpoint:
    """The Checkpoint of a run whose capture ``effect`` a restart cut off."""
    p = effect.payload
    return Checkpoint(
        id=p.get("checkpointId") or new_id("ckp"), thread_id=effect.thread_id or "", run_id=p.get("runId"),
        node_id=p.get("nodeId"), scope=p.get("scope", "root"), kind=p.get("kind", "run"),
        ordinal=int(p.get("ordinal", 0)), status="missing",
        reason=reason, detail="agentd stopped while this checkpoint was being captured",
        workspace=p.get("workspace", ""), created_at=now, parent_node_id=p.get("parentNodeId"),
    )


def _streaming_messages(store: Store, report: ReconcileReport) -> list[tuple[str, str]]:
    """Assistant messages left ``streaming`` by the runs being closed."""
    out = []
    for run_id in report.runs_interrupted:
        run = _readable(store, Run, run_id)
        if run is None:
            continue
        for message in store.thread_messages(run.thread_id):
            if message.run_id == run_id and message.status == "streaming":
                out.append((message.id, run.thread_id))
    return out

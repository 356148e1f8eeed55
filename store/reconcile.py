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
from typing import Any, TypeVar

from msgspec import Struct

from agentd.protocol.errors import AgentdError

from .batch import WriteBatch
from .db import Store, struct_copy
from .ids import new_id
from .records import NODE_TERMINAL, RUN_BOUND_TRANSFERS, AppThread, Checkpoint, ConversationMessage, Effect, ProviderThread, Run, to_wire

R = TypeVar("R", bound=Struct)

RESTART_REASON = "daemon_restart"
TOOL_NOT_RESUMED = "incomplete history: no tool result recorded; execution not resumed"
BACKGROUND_NOT_OBSERVED = "no current execution observed"
BACKGROUND_KINDS = frozenset({"subagent", "background_task"})
#: the outbox entry of a run's checkpoint capture, durable before the capture makes its ref
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
    transfers_superseded: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """How many of each, by field name: the ``daemon.reconciled`` payload.
        (Values typed Any: the dict is spread into ``WriteBatch.event(**payload)``,
        whose named ``str | None`` parameters mypy would match them against.)"""
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
    plan = _Plan(store, now, reason, thread_id)
    # The steps' order is the batch's event order.
    missing = plan.record_cut_off_captures()
    plan.close_open_runs(missing)
    if thread_id is None:
        plan.mark_queued_messages_not_sent()
        plan.supersede_run_bound_transfers()
    plan.interrupt_streaming_messages()
    plan.close_pending_requests()
    plan.stop_live_sessions()
    plan.settle_open_effects()
    plan.fail_inflight_transfers()
    if plan.batch and thread_id is None:
        plan.batch.event("daemon.reconciled", at=now, reason=reason, **plan.report.as_dict())
    return plan.batch, plan.report


class _Plan:
    """One reconciliation pass: its batch and report as the steps fill them."""

    def __init__(self, store: Store, now: float, reason: str, thread_id: str | None) -> None:
        self.store, self.now, self.reason = store, now, reason
        #: only this thread's work (its actor failed alone), or None for every thread's
        self.thread_id = thread_id
        self.batch = WriteBatch()
        self.report = ReconcileReport()
        #: each thread read once, and kept as this pass last put it
        self._threads: dict[str, AppThread | None] = {}
        #: the queued runs this pass cancelled, by thread
        self._cancelled: dict[str, set[str]] = {}

    def ours(self, owner: str | None) -> bool:
        return self.thread_id is None or owner == self.thread_id

    def record_cut_off_captures(self) -> dict[str, Checkpoint]:
        """Captures cut off by the restart are recorded as missing (F12),
        never captured later from whatever is on disk by then. Returns each
        run's root checkpoint so recorded, by run id."""
        missing: dict[str, Checkpoint] = {}
        for effect in self.store.open_effects():
            if not self.ours(effect.thread_id) or effect.kind != CHECKPOINT_CAPTURE or effect.status != "pending":
                continue
            checkpoint = missing_checkpoint(effect, self.now, self.reason)
            self.batch.put(checkpoint)
            self.batch.put(struct_copy(effect, status="done", reason=f"{self.reason}: recorded as a missing checkpoint"))
            self.batch.event("checkpoint.missing", thread_id=checkpoint.thread_id, run_id=checkpoint.run_id,
                             node_id=checkpoint.node_id, at=self.now, checkpoint=to_wire(checkpoint))
            self.report.checkpoints_missing.append(checkpoint.id)
            if checkpoint.run_id and checkpoint.scope == "root":  # a child's is not the run's
                missing[checkpoint.run_id] = checkpoint
        return missing

    def close_open_runs(self, missing: dict[str, Checkpoint]) -> None:
        """A started run ends ``interrupted``, a queued one ``cancelled`` (its
        message is kept as not_sent); a single thread's queued runs stay queued."""
        for run in self.store.open_runs():
            if not self.ours(run.thread_id) or (self.thread_id is not None and run.status == "queued"):
                continue
            if run.status != "queued":
                status, why = "interrupted", self.reason
                self.report.runs_interrupted.append(run.id)
            else:
                status, why = "cancelled", f"{self.reason}: never started; its message is kept as not_sent"
                self.report.runs_not_started.append(run.id)
                self._cancelled.setdefault(run.thread_id, set()).add(run.id)
            self._close_run_parts(run, status, why)
            closed = struct_copy(run, status=status, reason=why, ended_at=self.now)
            if run.id in missing:
                closed = struct_copy(closed, checkpoint_id=missing[run.id].id)
            self.batch.put(closed)
            self.batch.event(f"run.{status}", thread_id=closed.thread_id, run_id=closed.id,
                             node_id=closed.root_node_id, at=self.now, run=to_wire(closed))
            self._idle(run.thread_id)

    def _close_run_parts(self, run: Run, status: str, why: str) -> None:
        """A closed run's open attempts, nodes and started provider turns."""
        for attempt in self.store.run_attempts(run.id):
            if attempt.status not in ("completed", "failed", "interrupted", "cancelled"):
                self.batch.put(struct_copy(attempt, status=status, error=why, ended_at=self.now))
        for node in self.store.run_nodes(run.id):
            if node.status in NODE_TERMINAL:
                continue
            if node.kind == "root_turn":
                node = struct_copy(node, status=status, ended_at=self.now, summary=why)
            else:
                text = BACKGROUND_NOT_OBSERVED if node.kind in BACKGROUND_KINDS else TOOL_NOT_RESUMED
                node = struct_copy(node, status="incomplete", ended_at=self.now, summary=text)
                self.report.nodes_incomplete.append(node.id)
            self.batch.put(node)
            self.batch.event(f"{node.kind}.{node.status}", thread_id=run.thread_id, run_id=run.id, node_id=node.id,
                             at=self.now, node=to_wire(node))
        if run.selected_attempt_id:
            for turn in self.store.attempt_turns(run.selected_attempt_id):
                if turn.status == "started":
                    self.batch.put(struct_copy(turn, status="interrupted", ended_at=self.now))

    def _idle(self, thread_id: str) -> None:
        """The thread of a closed run is idle, with no active run (put once)."""
        if thread_id not in self._threads:
            self._threads[thread_id] = _readable(self.store, AppThread, thread_id)
        thread = self._threads[thread_id]
        if thread is not None and (thread.active_run_id is not None or thread.status != "idle"):
            self._threads[thread_id] = thread = struct_copy(thread, status="idle", active_run_id=None,
                                                            updated_at=self.now)
            self.batch.put(thread)

    def supersede_run_bound_transfers(self) -> None:
        """Transfers bound to a queued run this pass cancelled (a merge-back's
        delta, a wake-up's result) end ``superseded``: the run that was to
        carry them never will, and nothing takes them in by itself."""
        for thread_id, run_ids in self._cancelled.items():
            for transfer in self.store.thread_transfers(thread_id):
                if (transfer.type in RUN_BOUND_TRANSFERS and transfer.run_id in run_ids
                        and transfer.status in ("pending", "failed")):
                    ended = struct_copy(transfer, status="superseded",
                                        error=f"{self.reason}: its run {transfer.run_id} was cancelled before it started")
                    self.batch.put(ended)
                    self.batch.event("context_transfer.superseded", thread_id=thread_id, run_id=transfer.run_id,
                                     at=self.now, transfer=to_wire(ended))
                    self.report.transfers_superseded.append(ended.id)

    def mark_queued_messages_not_sent(self) -> None:
        """Messages of the cancelled queued runs are kept, as ``not_sent``."""
        for message in self.store.queued_messages():
            message = struct_copy(message, status="not_sent")
            self.batch.put(message)
            run = _readable(self.store, Run, message.run_id) if message.run_id else None
            self.batch.event("message.not_sent", thread_id=message.thread_id, run_id=message.run_id,
                             node_id=run.root_node_id if run else None, at=self.now, messageId=message.id,
                             reason=self.reason)
            self.report.messages_not_sent.append(message.id)

    def interrupt_streaming_messages(self) -> None:
        """Answers the interrupted runs were streaming end ``interrupted``,
        with every character streamed so far."""
        for message_id, owner in _streaming_messages(self.store, self.report):
            message = _readable(self.store, ConversationMessage, message_id)
            if message is None:
                continue
            message = struct_copy(message, status="interrupted", completed_at=self.now)
            self.batch.put(message)
            self.batch.event("message.completed", thread_id=owner, run_id=message.run_id, node_id=message.node_id,
                             at=self.now, messageId=message.id, status="interrupted", length=len(message.text))

    def close_pending_requests(self) -> None:
        """Approvals and questions cannot be answered: their callback is gone."""
        for request in self.store.pending_requests(self.thread_id):
            request = struct_copy(request, status="not_resumable",
                                  reason=f"{self.reason}: the provider callback is gone", resolved_at=self.now)
            self.batch.put(request)
            prefix = "approval" if request.kind == "approval" else "user_input"
            self.batch.event(f"{prefix}.not_resumable", thread_id=request.thread_id, run_id=request.run_id,
                             node_id=request.node_id, at=self.now, request=to_wire(request))
            self.report.requests_not_resumable.append(request.id)

    def stop_live_sessions(self) -> None:
        for session in self.store.live_sessions():
            if not self.ours(session.thread_id):
                continue
            session = struct_copy(session, status="stopped", reason=self.reason, stopped_at=self.now)
            self.batch.put(session)
            self.batch.event("session.stopped", thread_id=session.thread_id, at=self.now, session=to_wire(session))
            self.report.sessions_stopped.append(session.id)

    def settle_open_effects(self) -> None:
        """Cut-off rollbacks and restores are settled and reported; effects
        bound to the previous process are retired; replay-safe ones stay for
        the effect runner to re-queue."""
        for effect in self.store.open_effects():
            if not self.ours(effect.thread_id):
                continue
            if effect.kind == ROLLBACK and effect.status == "pending":
                _rollback_cut_off(self.store, self.batch, effect, self.now, self.reason, self.report)
            elif effect.kind == RESTORE and effect.status == "pending":
                _restore_cut_off(self.batch, effect, self.now, self.reason, self.report)
            elif not (effect.replay_safe or effect.kind == CHECKPOINT_CAPTURE):  # captures: settled above
                self.batch.put(struct_copy(effect, status="retired",
                                           reason=f"{self.reason}: bound to the previous process"))
                self.report.effects_retired.append(effect.id)

    def fail_inflight_transfers(self) -> None:
        """Resolved, but no provider turn took it in: never half-consumed. The
        thread's next message resolves it again (a fork: portably)."""
        for transfer in self.store.inflight_transfers():
            if not self.ours(transfer.target_thread_id):
                continue
            transfer = struct_copy(transfer, status="failed",
                                   error=f"{self.reason}: resolved but not taken in by a provider turn")
            self.batch.put(transfer)
            self.batch.event("context_transfer.failed", thread_id=transfer.target_thread_id, run_id=transfer.run_id,
                             at=self.now, transfer=to_wire(transfer))
            self.report.transfers_failed.append(transfer.id)


def _readable(store: Store, cls: type[R], record_id: str) -> R | None:
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
    message = cut_off_message("a restore", p.get("checkpointId"), p.get("safetyCheckpointId"), reason)
    if p.get("mergeForkThreadId"):
        # A merge-back of files writes as a restore does, from another thread's checkpoint.
        message = (f"a merge-back of the files of fork {p['mergeForkThreadId']} (its checkpoint {p.get('checkpointId')}) "
                   f"was cut off by {reason} while it wrote files: some may be merged, others not, and its message "
                   f"was not sent. Restore checkpoint {p.get('safetyCheckpointId')} (agentd restore "
                   f"{p.get('safetyCheckpointId')}) to go back to the files as they were before it, then send the "
                   "merge-back again")
    batch.event("checkpoint.restore_interrupted", thread_id=effect.thread_id, at=now, reason=reason,
                checkpointId=p.get("checkpointId"), safetyCheckpointId=p.get("safetyCheckpointId"), message=message)
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

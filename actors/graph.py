"""Graph transitions of a thread's runs (SPEC F2, F3, F11, F16).

A transition is a plain function from the thread's state and one input to
the records and events that make the change durable: it writes them into a
``ThreadBatch`` and updates the ``ThreadState`` to match. Transitions touch
neither trio nor the store; what they must read (an outbox entry, a run's
artifacts) is passed in. The actor commits the batch before it replies,
publishes or starts an effect, so nothing is seen that is not durable.

This module holds the run's own life: a new run, the turn starting, items and
streamed text, the provider thread, and the completion barrier (close an
attempt, end a run, retry it). Features add theirs beside it: run_control.py,
steering.py, requests.py, artifacts.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal

import msgspec

from agentd.store.batch import WriteBatch
from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.records import (
    NODE_TERMINAL,
    RUN_BOUND_TRANSFERS,
    Checkpoint,
    ContextTransfer,
    ConversationMessage,
    Effect,
    EffectStatus,
    ExecutionNode,
    PlanArtifact,
    ProviderThread,
    ProviderTurn,
    Run,
    RunAttempt,
    RuntimeRequest,
    to_wire,
)

from .messages import ProviderThreadReady
from .providers.base import ItemCompleted, ItemStarted, TurnStarted
from .state import ActiveRun, OpenMessage, ThreadState

#: how an attempt (and its root node and provider turn) can end
Ending = Literal["completed", "failed", "interrupted", "cancelled"]

#: request kind -> the prefix of its events (``approval.requested``, ``user_input.resolved``, …)
EVENT_PREFIX = {"approval": "approval", "user_input": "user_input"}


@dataclass
class ThreadBatch(WriteBatch):
    """A WriteBatch of one thread at one instant: every record it stamps and
    every event it emits carries ``now``."""

    thread_id: str = ""
    now: float = 0.0
    #: the records put in this batch, by id (the newest of each)
    records: dict[str, Any] = field(default_factory=dict)

    def put(self, record: Any) -> None:
        """Store ``record`` (``WriteBatch.put``), remembered by its id."""
        self.records[record.id] = record
        super().put(record)

    def emit(self, type: str, *, run_id: str | None = None, node_id: str | None = None, **payload: Any) -> None:
        """Append an event of this thread."""
        self.event(type, thread_id=self.thread_id, run_id=run_id, node_id=node_id, at=self.now, **payload)

    def record_receipt(self, command_id: str | None, method: str, result: Any) -> None:
        """Keep a command's answer (its result Struct, or a mapping; without
        ``seq``, not known yet) for a retried ``command_id`` (if it has one)."""
        if command_id is None:
            return
        if isinstance(result, msgspec.Struct):
            result = {k: v for k, v in msgspec.to_builtins(result).items() if k != "seq"}
        self.set_receipt(command_id, method, result, self.now)


def turn_start_effect_id(run_id: str) -> str:
    """The outbox entry of a run's turn start: one per run, found by its id."""
    return "eff_" + run_id.partition("_")[2]


def set_thread(batch: ThreadBatch, state: ThreadState, **changes: Any) -> None:
    """Change the thread record."""
    state.thread = struct_copy(state.thread, updated_at=batch.now, **changes)
    batch.put(state.thread)


def settle_effect(batch: ThreadBatch, effect: Effect | None, status: EffectStatus, *, reason: str | None = None) -> None:
    """Close an outbox entry, if it is still pending."""
    if effect is not None and effect.status == "pending":
        batch.put(struct_copy(effect, status=status, reason=reason))


def parent_node(active: ActiveRun, parent_item_id: str | None) -> ExecutionNode:
    """The node a provider item hangs under: its parent item's, else the root."""
    if parent_item_id is not None and parent_item_id in active.nodes:
        return active.nodes[parent_item_id]
    return active.root


# -- runs and the queue ---------------------------------------------------------------


def new_run(
    batch: ThreadBatch, state: ThreadState, text: str, provider: str, *, dispatch_mode: str,
    supersedes: str | None = None, message: ConversationMessage | None = None, ordinal: int | None = None,
    clean_context: bool = False, created_by: str = "user",
) -> tuple[Run, ConversationMessage]:
    """A queued run: its user message (``message``, or a new one with
    ``text``), the run, its root node, its first attempt and the outbox entry
    that sends it to the provider. The caller puts the run into the queue
    (``ordinal``: its place when it goes before runs already queued, whose
    ordinals the caller moves up). ``clean_context``: the run starts on a
    fresh provider thread (SPEC F5). ``created_by``: ``system`` for a run
    agentd queues itself (a delegated task's wake-up)."""
    now = batch.now
    thread_id = state.thread_id
    run_count = state.thread.run_count + 1
    ordinal = ordinal or run_count
    run_id, node_id, attempt_id = new_id("run"), new_id("nod"), new_id("att")
    if message is None:
        message = ConversationMessage(
            id=new_id("msg"), thread_id=thread_id, run_id=run_id, role="user", text=text, status="queued", created_at=now,
        )
    else:
        message = struct_copy(message, run_id=run_id, status="queued")
    root = ExecutionNode(
        id=node_id, thread_id=thread_id, run_id=run_id, attempt_id=attempt_id, kind="root_turn",
        counts_for_run=True, title=f"run {ordinal}", created_at=now,
    )
    attempt = RunAttempt(
        id=attempt_id, run_id=run_id, thread_id=thread_id, number=1, reason="initial", root_node_id=node_id, created_at=now,
    )
    run = Run(
        id=run_id, thread_id=thread_id, ordinal=ordinal, provider=provider, user_message_id=message.id,
        root_node_id=node_id, selected_attempt_id=attempt_id, attempt_count=1, supersedes_run_id=supersedes,
        created_at=now, clean_context=clean_context, created_by=created_by,
    )
    set_thread(batch, state, run_count=run_count, provider=provider)
    batch.put_all(message, run, root, attempt)
    # Process-bound: a restart retires this entry with a reason instead of
    # sending the run to a provider later.
    batch.put(Effect(id=turn_start_effect_id(run_id), kind="provider.turn_start", thread_id=thread_id,
                     payload={"runId": run_id}, replay_safe=False, created_at=now))
    batch.emit("message.created", run_id=run_id, node_id=node_id, message=to_wire(message))
    batch.emit("run.queued", run_id=run_id, node_id=node_id, run=to_wire(run), dispatchMode=dispatch_mode)
    return run, message


#: a root node by its id, read by the caller (the store), when it is not in the batch
RootOf = Callable[[str], "ExecutionNode | None"]


def no_root(_node_id: str) -> ExecutionNode | None:
    return None


def renumber_queue(batch: ThreadBatch, state: ThreadState, root_of: RootOf = no_root) -> None:
    """Give the queued runs their ordinals in queue order (ordinals are the
    order runs start in), their root nodes' titles with them."""
    ordinals = sorted(run.ordinal for run in state.queued)
    for index, run in enumerate(state.queued):
        if run.ordinal != ordinals[index]:
            state.queued[index] = renumber(batch, run, ordinals[index], root_of)


def renumber(batch: ThreadBatch, run: Run, ordinal: int, root_of: RootOf = no_root) -> Run:
    """``run`` as run ``ordinal``; its root node's title (``run N``, ``run N
    attempt M``) says so too (issue 28 item 4: it kept the number it was
    queued with). The root is taken from the batch when it was made in it,
    else from ``root_of``."""
    run = struct_copy(run, ordinal=ordinal)
    batch.put(run)
    root_id = run.root_node_id or ""
    root = batch.records.get(root_id) or root_of(root_id)
    if isinstance(root, ExecutionNode) and root.title.startswith("run "):
        batch.put(struct_copy(root, title=re.sub(r"^run \d+", f"run {ordinal}", root.title)))
    return run


# -- the running turn -------------------------------------------------------------------


def provider_thread_ready(
    batch: ThreadBatch, state: ThreadState, ready: ProviderThreadReady, *, kind: str, fields: dict[str, Any] | None = None,
) -> ProviderThread:
    """The attempt's native thread is open: record a new ProviderThread
    (``kind`` is its adapter's, ``fields`` its lineage: lineage.py) or the
    resumed one, make it the thread's current one, and tie the attempt to it.
    A provider thread this one replaces was retired before (lineage.py)."""
    active = state.active
    assert active is not None
    now = batch.now
    if ready.created:
        pt = ProviderThread(
            id=new_id("pth"), thread_id=state.thread_id, provider=active.run.provider, kind=kind,
            native_thread_id=ready.native_thread_id, created_at=now, updated_at=now, **(fields or {}),
        )
        batch.put(pt)
        batch.emit("provider_thread.created", run_id=active.run.id, node_id=active.root.id, providerThread=to_wire(pt))
    else:
        resumed = ready.provider_thread or state.provider_thread
        assert resumed is not None, "resumed a provider thread the actor does not know"
        pt = resumed
        if state.provider_thread is not None and state.provider_thread.id == pt.id:
            pt = state.provider_thread  # the newer value (coverage) if the actor has one
        if ready.resumed_turn_count is not None:
            pt = struct_copy(pt, status="active", updated_at=now)
            batch.put(pt)
            batch.emit(
                "provider_thread.resumed", run_id=active.run.id, node_id=active.root.id,
                providerThreadId=pt.id, sessionId=ready.session_id, nativeTurnCount=ready.resumed_turn_count,
            )
    if state.thread.provider_thread_id != pt.id:
        set_thread(batch, state, provider_thread_id=pt.id)
    state.provider_thread = pt
    attempt = struct_copy(active.attempt, provider_thread_id=pt.id)
    batch.put(attempt)
    if active.provider_turn is not None and not active.provider_turn.provider_thread_id:
        # A thread created with its first turn is known only after the turn began.
        active.provider_turn = struct_copy(active.provider_turn, provider_thread_id=pt.id)
        batch.put(active.provider_turn)
    active.attempt = attempt
    active.session_id = ready.session_id
    return pt


def turn_started(batch: ThreadBatch, state: ThreadState, event: TurnStarted, *, turn_start_effect: Effect | None) -> None:
    """The provider began the attempt's turn: the run, attempt and root node
    are running, the user message was delivered, the outbox entry is done."""
    active = state.active
    assert active is not None
    now = batch.now
    pt_id = active.attempt.provider_thread_id or (state.provider_thread.id if state.provider_thread else "")
    turn = ProviderTurn(
        id=new_id("ptu"), provider_thread_id=pt_id, thread_id=state.thread_id, run_id=active.run.id,
        attempt_id=active.attempt.id, native_turn_id=event.native_turn_id, started_at=now,
    )
    attempt = struct_copy(active.attempt, status="running", provider_turn_id=turn.id)
    root = struct_copy(active.root, status="running")
    run = struct_copy(active.run, status="running", started_at=active.run.started_at or now)
    message = struct_copy(active.user_message, status="complete")
    batch.put_all(turn, attempt, root, run, message)
    settle_effect(batch, turn_start_effect, "done")
    set_thread(batch, state, status="running", active_run_id=run.id)
    batch.emit("run.started", run_id=run.id, node_id=root.id, run=to_wire(run), attempt=to_wire(attempt))
    batch.emit("root_turn.started", run_id=run.id, node_id=root.id, node=to_wire(root), providerTurnId=turn.id)
    active.provider_turn, active.attempt, active.root, active.run, active.user_message = turn, attempt, root, run, message


def item_started(batch: ThreadBatch, state: ThreadState, event: ItemStarted) -> None:
    """A provider item began: an assistant message opens for streaming, any
    other item becomes a running child node."""
    active = state.active
    assert active is not None
    parent = parent_node(active, event.parent_item_id)
    if event.item_type == "agent_message":
        message = ConversationMessage(
            id=new_id("msg"), thread_id=state.thread_id, run_id=active.run.id, attempt_id=active.attempt.id,
            node_id=parent.id, role="assistant", status="streaming", created_at=batch.now,
        )
        batch.put_message_head(message)  # its text follows as chunks
        batch.emit("message.created", run_id=active.run.id, node_id=parent.id, message=to_wire(message))
        active.messages[event.item_id] = OpenMessage(message)
        return
    node = ExecutionNode(
        id=new_id("nod"), thread_id=state.thread_id, run_id=active.run.id, attempt_id=active.attempt.id,
        parent_node_id=parent.id, kind=event.item_type, status="running", title=event.title,
        provider_item_id=event.item_id, detail=event.detail, created_at=batch.now,
    )
    batch.put(node)
    batch.emit(f"{node.kind}.started", run_id=active.run.id, node_id=node.id, node=to_wire(node))
    active.nodes[event.item_id] = node


def item_completed(batch: ThreadBatch, state: ThreadState, event: ItemCompleted) -> ExecutionNode | None:
    """A provider item ended: close its message or node. Returns the node it
    closed (None for a message, or an item already closed or unknown)."""
    active = state.active
    assert active is not None
    if event.item_type == "agent_message":
        open_message = active.messages.pop(event.item_id, None)
        if open_message is None:
            return None
        completed = event.status == "completed"
        close_message(batch, active, open_message, "complete" if completed else "interrupted")
        # Narration before a tool call is not an answer; an unknown phase is (as before phases).
        active.answered = active.answered or (completed and event.phase != "commentary")
        return None
    node = active.nodes.get(event.item_id)
    if node is None or node.status in NODE_TERMINAL:
        return None
    status = event.status if event.status in NODE_TERMINAL else "completed"
    if node.kind == "file_change" and status == "completed":
        active.changed_files = True
    node = struct_copy(node, status=status, detail={**node.detail, **event.detail}, ended_at=batch.now)
    batch.put(node)
    batch.emit(f"{node.kind}.{status}", run_id=active.run.id, node_id=node.id, node=to_wire(node))
    active.nodes[event.item_id] = node
    return node


# -- streamed text --------------------------------------------------------------------


def flush_message(batch: ThreadBatch, active: ActiveRun, open_message: OpenMessage) -> None:
    """Store a message's buffered text as its next chunk (one
    ``message.appended``): a flush writes only the new text, whatever the
    message's length."""
    if not open_message.pending:
        return
    text = "".join(open_message.pending)
    record = open_message.record
    offset = open_message.length
    batch.append_text(record.id, offset, text)
    batch.emit("message.appended", run_id=active.run.id, node_id=record.node_id, messageId=record.id, offset=offset, text=text)
    open_message.length += len(text)
    open_message.pending.clear()
    open_message.pending_len = 0


def close_message(batch: ThreadBatch, active: ActiveRun, open_message: OpenMessage, status: Literal["complete", "interrupted"]) -> None:
    """Flush a streamed message and end it (its head only: the text stays in its chunks)."""
    flush_message(batch, active, open_message)
    record = struct_copy(open_message.record, status=status, completed_at=batch.now)
    batch.put_message_head(record)
    batch.emit("message.completed", run_id=active.run.id, node_id=record.node_id, messageId=record.id,
               status=status, length=open_message.length)
    open_message.record = record


def flush_text(batch: ThreadBatch, state: ThreadState) -> None:
    """Flush every open message of the active attempt."""
    active = state.active
    if active is None:
        return
    for open_message in active.messages.values():
        flush_message(batch, active, open_message)


# -- the completion barrier ---------------------------------------------------------------


def mark_not_resumable(batch: ThreadBatch, request: RuntimeRequest, why: str) -> None:
    """A request whose provider callback is gone can no longer be answered."""
    request = struct_copy(request, status="not_resumable", reason=why, resolved_at=batch.now)
    batch.put(request)
    prefix = EVENT_PREFIX.get(request.kind, request.kind)
    batch.emit(f"{prefix}.not_resumable", run_id=request.run_id, node_id=request.node_id, request=to_wire(request))


def requests_not_resumable(batch: ThreadBatch, active: ActiveRun, why: str) -> None:
    """Every pending request of the attempt: its callback is gone."""
    for request in list(active.requests.values()):
        mark_not_resumable(batch, request, why)
    active.requests.clear()


def finalize_artifacts(batch: ThreadBatch, active: ActiveRun, artifacts: Iterable[PlanArtifact]) -> None:
    """Live todo lists of the run (``artifacts``) become final, unanswered
    questions are closed."""
    for artifact in artifacts:
        if artifact.kind == "todo_list" and artifact.status == "active":
            artifact = struct_copy(artifact, status="final", updated_at=batch.now)
        elif artifact.kind == "questions" and artifact.status == "active":
            artifact = struct_copy(artifact, status="closed", updated_at=batch.now)
        else:
            continue
        batch.put(artifact)
        batch.emit("plan.finalized", run_id=active.run.id, node_id=artifact.node_id, artifact=to_wire(artifact))


def close_attempt(
    batch: ThreadBatch, state: ThreadState, status: Ending, reason: str | None, *, artifacts: Iterable[PlanArtifact],
) -> None:
    """Close the active attempt's graph in the completion barrier's order:
    assistant messages, pending requests, the run's artifacts, child nodes the
    provider left open, then the root node, the attempt and the provider turn."""
    active = state.active
    assert active is not None
    now = batch.now
    message_status: Literal["complete", "interrupted"] = "complete" if status == "completed" else "interrupted"
    for open_message in active.messages.values():
        close_message(batch, active, open_message, message_status)
    active.messages.clear()
    requests_not_resumable(batch, active, f"the attempt ended {status} before the request was answered")
    finalize_artifacts(batch, active, artifacts)
    for item_id, node in list(active.nodes.items()):
        if node.status not in NODE_TERMINAL:
            closed = "interrupted" if status == "interrupted" else "incomplete"
            summary = "the turn ended before this step reported a result"
            node = struct_copy(node, status=closed, summary=summary, ended_at=now)
            batch.put(node)
            batch.emit(f"{node.kind}.{closed}", run_id=active.run.id, node_id=node.id, node=to_wire(node))
            active.nodes[item_id] = node
    failed = reason if status != "completed" else None
    root = struct_copy(active.root, status=status, ended_at=now, summary=failed)
    attempt = struct_copy(active.attempt, status=status, error=failed, ended_at=now)
    batch.put_all(root, attempt)
    if active.provider_turn is not None:
        batch.put(struct_copy(active.provider_turn, status=status, ended_at=now))
    batch.emit(f"root_turn.{status}", run_id=active.run.id, node_id=root.id, node=to_wire(root))
    batch.emit(f"attempt.{status}", run_id=active.run.id, node_id=root.id, attempt=to_wire(attempt))
    active.root, active.attempt = root, attempt


def end_run(
    batch: ThreadBatch, state: ThreadState, status: Ending, *, reason: str | None,
    artifacts: Iterable[PlanArtifact], turn_start_effect: Effect | None,
    checkpoint: tuple[Checkpoint, Effect | None] | None = None,
) -> Run:
    """The completion barrier (SPEC F16): close the attempt (``close_attempt``),
    then end the run and free the thread, all in one batch. Returns the ended
    run; the caller drops the active run once the batch is durable.

    ``checkpoint``: the run's Checkpoint (captured, or ``error``) and its
    ``checkpoint.capture`` outbox entry (checkpointing.capture_run), committed
    here with the run (``Run.checkpointId``) and the entry settled."""
    active = state.active
    assert active is not None
    now = batch.now
    close_attempt(batch, state, status, reason, artifacts=artifacts)
    run = struct_copy(active.run, status=status, reason=reason, ended_at=now)
    if checkpoint is not None:
        record, capture_effect = checkpoint
        run = struct_copy(run, checkpoint_id=record.id)
        batch.put(record)
        settle_effect(batch, capture_effect, "done")
        batch.emit(f"checkpoint.{record.status}", run_id=run.id, node_id=active.root.id, checkpoint=to_wire(record))
    if active.user_message.status == "queued":
        # Never reached the provider (the start failed): the text is kept to re-send.
        batch.put(struct_copy(active.user_message, status="complete" if run.started_at else "not_sent"))
    if status == "completed" and state.provider_thread is not None:
        state.provider_thread = struct_copy(state.provider_thread, covered_run_count=run.ordinal, updated_at=now)
        batch.put(state.provider_thread)
    batch.put(run)
    settle_effect(batch, turn_start_effect, "done" if run.started_at else "retired", reason=reason)
    set_thread(batch, state, status="idle", active_run_id=None)
    batch.emit(f"run.{status}", run_id=run.id, node_id=active.root.id, run=to_wire(run))
    active.run = run
    return run


def retry(
    batch: ThreadBatch, state: ThreadState, reason: str, why: str, *, artifacts: Iterable[PlanArtifact],
    closing_status: Ending = "failed", message: ConversationMessage | None = None,
) -> ActiveRun:
    """Close the active attempt (``closing_status``, because ``why``) and add
    attempt N+1 of the same run, with a new root node, on the same provider
    thread. ``message`` is the new attempt's input (a steering message); by
    default the run's own. Returns the run as the new attempt will drive it;
    the caller activates it once the batch is durable."""
    active = state.active
    assert active is not None
    now = batch.now
    close_attempt(batch, state, closing_status, why, artifacts=artifacts)
    number = active.run.attempt_count + 1
    attempt_id, root_id = new_id("att"), new_id("nod")
    root = ExecutionNode(
        id=root_id, thread_id=state.thread_id, run_id=active.run.id, attempt_id=attempt_id, kind="root_turn",
        counts_for_run=True, title=f"run {active.run.ordinal} attempt {number}", created_at=now,
    )
    attempt = RunAttempt(
        id=attempt_id, run_id=active.run.id, thread_id=state.thread_id, number=number, reason=reason,
        root_node_id=root_id, provider_thread_id=active.attempt.provider_thread_id, created_at=now,
    )
    run = struct_copy(active.run, root_node_id=root_id, selected_attempt_id=attempt_id, attempt_count=number)
    batch.put_all(root, attempt, run)
    batch.emit("run.retrying", run_id=run.id, node_id=root_id, run=to_wire(run), attempt=to_wire(attempt), why=why)
    return ActiveRun(run=run, attempt=attempt, root=root, user_message=message or active.user_message)


def retry_ended(batch: ThreadBatch, state: ThreadState, run: Run, *, why: str) -> Run:
    """A user retry (SPEC F2, RunAttempt reason ``retry``): attempt N+1 of
    the ended ``run``, with a new root node, on the provider thread of the
    attempt it replaces; the run is queued again (its turn-start outbox
    entry pending again) and put first in the queue. Its input is the run's
    own message. Returns the queued run."""
    now = batch.now
    previous = run.selected_attempt_id
    number = run.attempt_count + 1
    attempt_id, root_id = new_id("att"), new_id("nod")
    root = ExecutionNode(
        id=root_id, thread_id=state.thread_id, run_id=run.id, attempt_id=attempt_id, kind="root_turn",
        counts_for_run=True, title=f"run {run.ordinal} attempt {number}", created_at=now,
    )
    attempt = RunAttempt(
        id=attempt_id, run_id=run.id, thread_id=state.thread_id, number=number, reason="retry",
        root_node_id=root_id, created_at=now,
    )
    queued = struct_copy(run, status="queued", reason=None, ended_at=None, root_node_id=root_id,
                         selected_attempt_id=attempt_id, attempt_count=number)
    batch.put_all(root, attempt, queued)
    batch.put(Effect(id=turn_start_effect_id(run.id), kind="provider.turn_start", thread_id=state.thread_id,
                     payload={"runId": run.id}, replay_safe=False, created_at=now))
    batch.emit("run.retrying", run_id=run.id, node_id=root_id, run=to_wire(queued), attempt=to_wire(attempt), why=why,
               previousAttemptId=previous)
    state.queued.insert(0, queued)
    return queued




def supersede_transfers(batch: ThreadBatch, transfers: Iterable[ContextTransfer], run_ids: set[str], reason: str) -> list[ContextTransfer]:
    """Transfers bound to a run in ``run_ids`` that no turn took in (still
    ``pending``, or ``failed`` and owed again) end ``superseded`` with
    ``reason``: the run that was to carry them will not (it was cancelled,
    dropped or rolled back), so they never wait forever."""
    out = []
    for transfer in transfers:
        if (transfer.type in RUN_BOUND_TRANSFERS and transfer.run_id in run_ids
                and transfer.status in ("pending", "failed")):
            ended = struct_copy(transfer, status="superseded", error=reason)
            batch.put(ended)
            batch.emit("context_transfer.superseded", run_id=transfer.run_id, transfer=to_wire(ended))
            out.append(ended)
    return out


def provider_thread_failed(batch: ThreadBatch, state: ThreadState, reason: str) -> None:
    """The provider thread keeps crashing its runtime: mark it ``error``."""
    if state.provider_thread is None:
        return
    pt = struct_copy(state.provider_thread, status="error", reason=reason, updated_at=batch.now)
    batch.put(pt)
    active = state.active
    batch.emit("provider_thread.error", run_id=active.run.id if active else None, node_id=active.root.id if active else None,
               providerThreadId=pt.id, reason=reason)
    state.provider_thread = pt

"""Graph transitions as plain functions: built from a ThreadState and an
input, checked on the ThreadBatch they fill — no trio, no store, no actor."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from agentd.actors import graph, run_control, steering
from agentd.actors.graph import ThreadBatch
from agentd.actors.providers.base import ItemCompleted, ItemStarted, RequestOpened, TurnStarted
from agentd.actors.requests import request_opened
from agentd.actors.state import ActiveRun, ThreadState
from agentd.protocol.errors import InvalidParams, InvalidState
from agentd.store.records import (
    RECORD_KINDS,
    AppThread,
    ConversationMessage,
    Effect,
    ExecutionNode,
    PlanArtifact,
    ProviderThread,
    ProviderTurn,
    Run,
    RunAttempt,
    RuntimeRequest,
    decode_record,
)

NOW = 1_000.0


def new_state(**thread: Any) -> ThreadState:
    return ThreadState(AppThread(id="thr_t", workspace="/w", provider="scripted", **thread))


def batch(state: ThreadState, now: float = NOW) -> ThreadBatch:
    return ThreadBatch(thread_id=state.thread_id, now=now)


def written(b: ThreadBatch) -> list[msgspec.Struct]:
    """The records ``b`` puts, decoded as the store would, in put order."""
    return [decode_record(db, value) for db, _key, value in b.ops if db in RECORD_KINDS and value is not None]


def chunks(b: ThreadBatch) -> list[tuple[int, str]]:
    """The streamed text ``b`` stores: (offset, text) of each message_text chunk."""
    return [(int.from_bytes(key[-8:], "big"), value.decode()) for db, key, value in b.ops if db == "message_text"]


def last(b: ThreadBatch, cls: type, record_id: str | None = None) -> Any:
    found = [r for r in written(b) if isinstance(r, cls) and (record_id is None or r.id == record_id)]
    assert found, f"no {cls.__name__} written"
    return found[-1]


def event_types(b: ThreadBatch) -> list[str]:
    return [e.type for e in b.events]


def queue_run(state: ThreadState, text: str = "hi") -> tuple[Run, ThreadBatch]:
    """A queued run, as thread.message.send makes it."""
    b = batch(state)
    run, _message = graph.new_run(b, state, text, "scripted", dispatch_mode="queue_after_active")
    state.queued.append(run)
    return run, b


def start_run(state: ThreadState, text: str = "hi") -> ActiveRun:
    """A run whose turn the provider has started, on provider thread pth_1."""
    run, b = queue_run(state, text)
    state.queued.remove(run)
    state.provider_thread = ProviderThread(
        id="pth_1", thread_id=state.thread_id, provider="scripted", kind="scripted", native_thread_id="native-1",
    )
    state.active = ActiveRun(run=run, attempt=last(b, RunAttempt), root=last(b, ExecutionNode),
                             user_message=last(b, ConversationMessage))
    started = batch(state)
    graph.turn_started(started, state, TurnStarted(attempt_id=state.active.attempt.id, native_turn_id="turn-1"),
                       turn_start_effect=last(b, Effect))
    return state.active


# -- new runs -----------------------------------------------------------------------------


def test_new_run_writes_message_run_root_attempt_and_its_outbox_entry():
    state = new_state(run_count=2)
    b = batch(state)
    run, message = graph.new_run(b, state, "fix the tests", "scripted", dispatch_mode="queue_after_active")

    assert (run.ordinal, run.status, run.attempt_count, run.provider) == (3, "queued", 1, "scripted")
    assert (message.text, message.role, message.status, message.run_id) == ("fix the tests", "user", "queued", run.id)
    root, attempt = last(b, ExecutionNode), last(b, RunAttempt)
    assert (root.kind, root.counts_for_run, root.id) == ("root_turn", True, run.root_node_id)
    assert (attempt.number, attempt.reason, attempt.id) == (1, "initial", run.selected_attempt_id)
    effect = last(b, Effect)
    assert (effect.id, effect.kind, effect.replay_safe) == (graph.turn_start_effect_id(run.id), "provider.turn_start", False)
    assert state.thread.run_count == 3 and last(b, AppThread).run_count == 3
    assert state.queued == [], "the caller decides where the run goes in the queue"
    assert event_types(b) == ["message.created", "run.queued"]
    assert b.events[1].payload["dispatchMode"] == "queue_after_active"
    assert {e.at for e in b.events} == {NOW} and {e.thread_id for e in b.events} == {"thr_t"}


def test_a_new_run_can_carry_an_existing_message():
    state = new_state()
    kept = ConversationMessage(id="msg_kept", thread_id="thr_t", run_id="run_old", role="user", text="again", status="not_sent")
    run, message = graph.new_run(batch(state), state, "ignored", "scripted", dispatch_mode="queue_after_active", message=kept)
    assert (message.id, message.text, message.status, message.run_id) == ("msg_kept", "again", "queued", run.id)
    assert run.user_message_id == "msg_kept"


# -- the running turn ------------------------------------------------------------------------


def test_turn_started_runs_the_graph_and_settles_the_outbox_entry():
    state = new_state()
    run, queued = queue_run(state)
    state.queued.remove(run)
    state.active = ActiveRun(run=run, attempt=last(queued, RunAttempt), root=last(queued, ExecutionNode),
                             user_message=last(queued, ConversationMessage))
    b = batch(state, now=NOW + 1)
    graph.turn_started(b, state, TurnStarted(attempt_id=run.selected_attempt_id, native_turn_id="turn-1"),
                       turn_start_effect=last(queued, Effect))

    assert [type(r).__name__ for r in written(b)] == [
        "ProviderTurn", "RunAttempt", "ExecutionNode", "Run", "ConversationMessage", "Effect", "AppThread",
    ]
    assert (last(b, Run).status, last(b, Run).started_at) == ("running", NOW + 1)
    assert last(b, Effect).status == "done"
    assert (state.thread.status, state.thread.active_run_id) == ("running", run.id)
    assert state.active.provider_turn.native_turn_id == "turn-1"
    assert event_types(b) == ["run.started", "root_turn.started"]


def test_streamed_text_is_buffered_then_flushed_as_one_append():
    state = new_state()
    active = start_run(state)
    graph.item_started(batch(state), state, ItemStarted(attempt_id=active.attempt.id, item_id="m1", item_type="agent_message"))
    open_message = active.messages["m1"]
    assert [open_message.buffer(d) for d in ("Hel", "lo", "!")] == [0, 3, 5]

    b = batch(state)
    graph.flush_text(b, state)
    assert event_types(b) == ["message.appended"]
    assert (b.events[0].payload["offset"], b.events[0].payload["text"]) == (0, "Hello!")
    assert open_message.pending == [] and open_message.length == 6
    assert chunks(b) == [(0, "Hello!")] and not written(b), "a flush stores its new text, not the message again"
    assert open_message.buffer(" more") == 6

    empty = batch(state)
    graph.item_completed(empty, state, ItemCompleted(attempt_id=active.attempt.id, item_id="m1", item_type="agent_message"))
    assert event_types(empty) == ["message.appended", "message.completed"]
    assert chunks(empty) == [(6, " more")] and empty.events[-1].payload["length"] == 11
    closed = last(empty, ConversationMessage)
    assert (closed.status, closed.text) == ("complete", ""), "the head only: its text is in the chunks"
    assert active.answered


# -- the completion barrier -----------------------------------------------------------------


def test_end_run_closes_everything_in_the_barrier_order():
    state = new_state()
    active = start_run(state)
    attempt_id = active.attempt.id
    graph.item_started(batch(state), state, ItemStarted(attempt_id=attempt_id, item_id="m1", item_type="agent_message"))
    graph.item_started(batch(state), state, ItemStarted(attempt_id=attempt_id, item_id="t1", item_type="tool", title="make"))
    active.messages["m1"].buffer("half an answer")
    request = request_opened(batch(state), state, RequestOpened(attempt_id=attempt_id, request_ref="r1", kind="approval", item_id="t1"))
    todo = PlanArtifact(id="art_todo", thread_id="thr_t", run_id=active.run.id, node_id=active.root.id, kind="todo_list")
    proposed = PlanArtifact(id="art_plan", thread_id="thr_t", run_id=active.run.id, kind="proposed_plan", status="proposed")
    effect = Effect(id=graph.turn_start_effect_id(active.run.id), kind="provider.turn_start", status="done")

    b = batch(state, now=NOW + 5)
    run = graph.end_run(b, state, "interrupted", reason="stopped", artifacts=[todo, proposed], turn_start_effect=effect)

    assert event_types(b) == [
        "message.appended", "message.completed",   # 1. assistant text, flushed then closed
        "approval.not_resumable",                  # 2. requests whose callback ends with the attempt
        "plan.finalized",                          # 3. live todo lists (a proposed plan stays)
        "tool.interrupted", "approval.interrupted",  # 4. child nodes the provider left open
        "root_turn.interrupted", "attempt.interrupted",  # 5. the root node, then the attempt
        "run.interrupted",                         # 6. and only then the run
    ]
    assert (run.status, run.reason, run.ended_at) == ("interrupted", "stopped", NOW + 5)
    assert last(b, ConversationMessage).status == "interrupted"
    assert last(b, RuntimeRequest, request.id).status == "not_resumable"
    assert last(b, PlanArtifact).status == "final"
    assert last(b, ProviderTurn).status == "interrupted"
    assert last(b, RunAttempt).error == "stopped" and last(b, ExecutionNode, active.root.id).summary == "stopped"
    assert (state.thread.status, state.thread.active_run_id) == ("idle", None)
    assert not [r for r in written(b) if isinstance(r, Effect)], "a settled outbox entry is left alone"
    assert state.provider_thread.covered_run_count == 0, "only a completed run is covered by the provider thread"


def test_a_completed_run_is_covered_by_the_provider_thread():
    state = new_state()
    active = start_run(state)
    b = batch(state)
    graph.end_run(b, state, "completed", reason=None, artifacts=[], turn_start_effect=None)
    assert state.provider_thread.covered_run_count == active.run.ordinal == 1
    assert last(b, ExecutionNode).summary is None and last(b, RunAttempt).error is None


def test_a_run_that_never_started_keeps_its_message_as_not_sent_and_retires_its_start():
    state = new_state()
    run, queued = queue_run(state)
    state.queued.remove(run)
    state.active = ActiveRun(run=run, attempt=last(queued, RunAttempt), root=last(queued, ExecutionNode),
                             user_message=last(queued, ConversationMessage))
    b = batch(state)
    graph.end_run(b, state, "failed", reason="provider_start_failed: no binary", artifacts=[],
                  turn_start_effect=last(queued, Effect))
    assert last(b, ConversationMessage).status == "not_sent"
    assert (last(b, Effect).status, last(b, Effect).reason) == ("retired", "provider_start_failed: no binary")
    assert last(b, Run).started_at is None


def test_retry_closes_the_attempt_and_adds_attempt_two_of_the_same_run():
    state = new_state()
    active = start_run(state)
    first_attempt, first_root = active.attempt, active.root
    steer = ConversationMessage(id="msg_steer", thread_id="thr_t", run_id=active.run.id, role="user", text="differently")
    b = batch(state)
    nxt = graph.retry(b, state, "steering_restart", "restarted to apply a steering message",
                      artifacts=[], closing_status="interrupted", message=steer)

    assert event_types(b) == ["root_turn.interrupted", "attempt.interrupted", "run.retrying"]
    closed = last(b, RunAttempt, first_attempt.id)
    assert (closed.status, closed.error) == ("interrupted", "restarted to apply a steering message")
    assert last(b, ExecutionNode, first_root.id).status == "interrupted"
    assert (nxt.attempt.number, nxt.attempt.reason, nxt.attempt.provider_thread_id) == (2, "steering_restart", first_attempt.provider_thread_id)
    assert nxt.root.id != first_root.id and nxt.root.kind == "root_turn"
    assert (nxt.run.id, nxt.run.attempt_count, nxt.run.selected_attempt_id) == (active.run.id, 2, nxt.attempt.id)
    assert nxt.run.status == "running", "the run itself goes on"
    assert nxt.user_message is steer
    assert state.active is active, "the actor activates the new attempt once the batch is durable"


def test_a_crash_retry_keeps_the_runs_own_message():
    state = new_state()
    active = start_run(state, text="original")
    nxt = graph.retry(batch(state), state, "provider_recovery", "crashed", artifacts=[])
    assert nxt.user_message.text == "original"
    assert active.attempt.status == "failed"


# -- the queue ----------------------------------------------------------------------------


def test_cancel_queued_cancels_the_run_its_attempt_root_and_message():
    state = new_state()
    first, b1 = queue_run(state, "one")
    second, _b2 = queue_run(state, "two")
    b = batch(state)
    run_control.cancel_queued(
        b, state, first, "cancelled_by_user", attempt=last(b1, RunAttempt), root=last(b1, ExecutionNode),
        message=last(b1, ConversationMessage), turn_start_effect=last(b1, Effect),
    )
    assert state.queued == [second]
    assert (last(b, Run).status, last(b, Run).reason) == ("cancelled", "cancelled_by_user")
    assert last(b, RunAttempt).status == "cancelled" and last(b, ExecutionNode).status == "cancelled"
    assert last(b, ConversationMessage).status == "cancelled"
    assert last(b, Effect).status == "retired"
    assert event_types(b) == ["run.cancelled"]


def test_a_promoted_message_is_left_as_it_is_when_its_run_is_cancelled():
    state = new_state()
    run, b1 = queue_run(state)
    b = batch(state)
    run_control.cancel_queued(b, state, run, "promoted_to_steer", attempt=None, root=None,
                              message=last(b1, ConversationMessage), turn_start_effect=None, message_status=None)
    assert not [r for r in written(b) if isinstance(r, ConversationMessage)]


def test_reorder_renumbers_ordinals_in_queue_order_and_refuses_a_wrong_list():
    state = new_state()
    runs = [queue_run(state, text)[0] for text in ("a", "b", "c")]
    b = batch(state)
    run_control.reorder_queue(b, state, [runs[2].id, runs[0].id, runs[1].id])
    assert [(r.id, r.ordinal) for r in state.queued] == [(runs[2].id, 1), (runs[0].id, 2), (runs[1].id, 3)]
    with pytest.raises(InvalidParams):
        run_control.reorder_queue(batch(state), state, [runs[0].id])
    assert [r.ordinal for r in state.queued] == [1, 2, 3], "a refused reorder changes nothing"


# -- steering -------------------------------------------------------------------------------


def steering_message(state: ThreadState) -> ConversationMessage:
    return ConversationMessage(id="msg_s", thread_id=state.thread_id, run_id=state.active.run.id, role="user",
                               text="use ninja", status="queued")


def test_a_steer_goes_natively_when_the_provider_can_steer():
    state = new_state()
    active = start_run(state)
    b = batch(state)
    outcome = steering.steer(b, state, "steer_active", steering_message(state), can_steer=True)
    assert (outcome.strategy, outcome.run_id) == ("native_steer", active.run.id)
    assert outcome.message.attempt_id == active.attempt.id
    assert active.pending_restart is None
    assert event_types(b) == ["message.created", "run.steer_requested"]


@pytest.mark.parametrize(("mode", "can_steer"), [("steer_active", False), ("restart_active", True)])
def test_a_steer_restarts_the_run_without_native_steer_or_when_asked(mode, can_steer):
    state = new_state()
    active = start_run(state)
    outcome = steering.steer(batch(state), state, mode, steering_message(state), can_steer=can_steer)
    assert (outcome.strategy, outcome.run_id) == ("steering_restart", active.run.id)
    assert active.pending_restart.message.id == "msg_s" and active.pending_restart.superseding_run_id is None
    assert state.queued == []


def test_a_steer_after_a_final_answer_supersedes_the_run_at_the_head_of_the_queue():
    state = new_state()
    active = start_run(state)
    waiting, _ = queue_run(state, "later")
    active.answered = True
    b = batch(state)
    outcome = steering.steer(b, state, "steer_active", steering_message(state), can_steer=False)
    assert outcome.strategy == "superseding_run"
    superseding = state.queued[0]
    assert (superseding.id, superseding.supersedes_run_id) == (outcome.run_id, active.run.id)
    assert [(r.id, r.ordinal) for r in state.queued] == [(superseding.id, 2), (waiting.id, 3)]
    assert active.pending_restart.superseding_run_id == superseding.id
    assert event_types(b)[-1] == "run.steer_requested"


def test_a_second_steer_while_restarting_is_refused_and_writes_nothing():
    state = new_state()
    active = start_run(state)
    steering.steer(batch(state), state, "restart_active", steering_message(state), can_steer=False)
    b = batch(state)
    with pytest.raises(InvalidState, match="already restarting"):
        steering.steer(b, state, "steer_active", steering_message(state), can_steer=True)
    assert not b and active.pending_restart.message.id == "msg_s"


def test_an_interrupt_drops_a_pending_restart_and_keeps_its_message_as_not_sent():
    state = new_state()
    active = start_run(state)
    steering.steer(batch(state), state, "restart_active", steering_message(state), can_steer=False)
    b = batch(state)
    run_control.request_interrupt_event(b, active, hold_queue=False)
    assert active.pending_restart is None
    assert last(b, ConversationMessage).status == "not_sent"
    assert event_types(b) == ["message.not_sent", "run.interrupt_requested"]


# -- Stop holds what was queued before it (issue 13) ----------------------------------------


def test_a_stop_holds_the_runs_queued_before_it_and_a_new_message_goes_first():
    state = new_state()
    active = start_run(state)
    a, _ = queue_run(state, "a")
    b_run, _ = queue_run(state, "b")
    held = batch(state)
    run_control.hold_queue(held, state)
    assert event_types(held) == ["thread.queue_held"]
    assert state.thread.queue_held and state.thread.held_run_ids == [a.id, b_run.id]
    assert state.next_queued() is None, "nothing queued before the Stop may start"

    b = batch(state)
    new, _message = run_control.enqueue(b, state, "after the stop", "scripted", dispatch_mode="queue_after_active")
    assert [(r.id, r.ordinal) for r in state.queued] == [(new.id, 2), (a.id, 3), (b_run.id, 4)]
    queued_event = next(e for e in b.events if e.type == "run.queued")
    assert queued_event.payload["run"]["ordinal"] == 2, "the event tells the ordinal the run keeps"
    assert state.thread.run_count == 4
    assert state.next_queued() == new and state.held_runs() == [state.queued[1], state.queued[2]]
    assert active.run.ordinal == 1

    again = batch(state)
    run_control.hold_queue(again, state)
    assert state.thread.held_run_ids == [a.id, b_run.id, new.id], "a second Stop holds what is queued now"
    released = batch(state)
    run_control.release_queue(released, state)
    assert (state.thread.queue_held, state.thread.held_run_ids) == (False, [])
    assert state.next_queued() == state.queued[0]


def test_a_cancelled_held_run_leaves_the_hold_and_a_reorder_keeps_held_runs_behind():
    state = new_state()
    start_run(state)
    a, qa = queue_run(state, "a")
    b_run, _ = queue_run(state, "b")
    run_control.hold_queue(batch(state), state)
    new, _ = run_control.enqueue(batch(state), state, "new", "scripted", dispatch_mode="queue_after_active")

    b = batch(state)
    run_control.reorder_queue(b, state, [b_run.id, a.id, new.id])
    assert [r.id for r in state.queued] == [new.id, b_run.id, a.id]
    assert b.events[-1].payload["queuedRunIds"] == [new.id, b_run.id, a.id]

    c = batch(state)
    run_control.cancel_queued(c, state, state.queued_run(a.id), "cancelled_by_user", attempt=None, root=None,
                              message=None, turn_start_effect=None)
    assert state.thread.held_run_ids == [b_run.id]


def test_a_send_on_a_thread_with_only_held_runs_is_not_busy():
    state = new_state()
    queued, _ = queue_run(state, "held")
    run_control.hold_queue(batch(state), state)
    assert state.next_queued() is None and state.held_runs() == [queued]


# -- every graph event is placed: runId and nodeId (SPEC F17, issue 13) ------------------------


def test_user_messages_are_placed_under_their_runs_root():
    state = new_state()
    b = batch(state)
    run, _ = graph.new_run(b, state, "hi", "scripted", dispatch_mode="start_immediately")
    created = b.events[0]
    assert (created.type, created.run_id, created.node_id) == ("message.created", run.id, run.root_node_id)


def test_a_native_steer_is_placed_under_the_active_root():
    state = new_state()
    active = start_run(state)
    b = batch(state)
    outcome = steering.steer(b, state, "steer_active", steering_message(state), can_steer=True)
    assert {(e.type, e.node_id) for e in b.events} == {("message.created", active.root.id), ("run.steer_requested", active.root.id)}
    delivered = batch(state)
    steering.steer_delivered(delivered, outcome.message)
    assert [(e.type, e.run_id, e.node_id) for e in delivered.events] == [("message.steered", active.run.id, active.root.id)]


def test_provider_thread_events_are_placed_under_the_root():
    # (A replaced provider thread and its handoff are lineage's: their
    # placement is checked by tests/test_contract.py on a real daemon.)
    from agentd.actors.messages import ProviderThreadReady

    state = new_state()
    active = start_run(state)
    b = batch(state)
    ready = ProviderThreadReady(active.attempt.id, "pss_1", "native-2", created=True)
    graph.provider_thread_ready(b, state, ready, kind="scripted")
    assert [(e.type, e.node_id) for e in b.events] == [("provider_thread.created", active.root.id)]
    failed = batch(state)
    graph.provider_thread_failed(failed, state, "provider_crash_loop")
    assert [(e.type, e.node_id) for e in failed.events] == [("provider_thread.error", active.root.id)]


# -- requests: the node's end and the run's status changes are events (issue 13) ---------------


@pytest.mark.parametrize(("decision", "node_status"), [("accept", "completed"), ("decline", "cancelled")])
def test_answering_a_request_ends_its_node_and_runs_the_run_again_with_events(decision, node_status):
    from agentd.actors.requests import resolve

    state = new_state()
    active = start_run(state)
    opened = batch(state)
    request = request_opened(opened, state, RequestOpened(attempt_id=active.attempt.id, request_ref="r1", kind="approval"))
    assert event_types(opened) == ["approval.started", "approval.requested", "run.waiting"]
    assert opened.events[-1].payload["run"]["status"] == "waiting"
    second = batch(state)
    request_opened(second, state, RequestOpened(attempt_id=active.attempt.id, request_ref="r2", kind="approval"))
    assert "run.waiting" not in event_types(second), "the run was already waiting"

    b = batch(state)
    resolve(b, state, request, {"decision": decision}, node_status, "approval.resolved", artifacts=[])
    assert event_types(b) == ["approval.resolved", f"approval.{node_status}"], "another request still waits"
    other = next(iter(active.requests.values()))
    last_one = batch(state)
    resolve(last_one, state, other, {"decision": decision}, node_status, "approval.resolved", artifacts=[])
    assert event_types(last_one) == ["approval.resolved", f"approval.{node_status}", "run.running"]
    assert last_one.events[-1].payload["run"]["status"] == "running"
    assert {e.node_id for e in last_one.events[:2]} == {other.node_id}
    assert last_one.events[-1].node_id == active.root.id


def test_only_a_run_bound_transfer_no_turn_took_in_is_superseded():
    """Issue 23 item 10: a merge-back bound to a dropped run ends
    ``superseded`` if it was still owed (pending, or failed and owed again);
    one already taken in, another run's, and other kinds stay as they are."""
    from agentd.store.records import ContextTransfer, SourcePoint

    point = SourcePoint(type="run", thread_id="thr_f")

    def transfer(name: str, status: str, *, run_id: str = "run_gone", type: str = "merge_back") -> ContextTransfer:
        return ContextTransfer(id=f"xfr_{name}", type=type, source_thread_id="thr_f", target_thread_id="thr_s",
                               source_point=point, status=status, run_id=run_id)  # type: ignore[arg-type]

    b = ThreadBatch(thread_id="thr_s", now=NOW)
    ended = graph.supersede_transfers(b, [
        transfer("pending", "pending"), transfer("failed", "failed"), transfer("consumed", "consumed"),
        transfer("other_run", "pending", run_id="run_kept"), transfer("fork", "pending", type="fork"),
    ], {"run_gone"}, "its run was cancelled")
    assert [(t.id, t.status, t.error) for t in ended] == [
        ("xfr_pending", "superseded", "its run was cancelled"), ("xfr_failed", "superseded", "its run was cancelled")]
    assert [e.type for e in b.events] == ["context_transfer.superseded"] * 2

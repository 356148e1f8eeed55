"""Usage reports and stalls as plain transitions (issue 28): built from a
ThreadState and one input, checked on the Decision they return — no trio, no
store, no actor (tests/actors/test_usage_and_stalls.py drives the same over
the socket)."""

from __future__ import annotations

from typing import Any

import pytest

from agentd.actors import stalls, usage
from agentd.actors.config import DaemonConfig, ModelPrice
from agentd.actors.context import ThreadContext
from agentd.actors.effects import RestartTimer
from agentd.actors.messages import StallTimer
from agentd.actors.providers.base import ItemStarted, Usage
from agentd.actors import graph
from agentd.store.db import struct_copy
from agentd.store.records import Run, TokenUsage
from tests.actors.test_transitions import NOW, batch, new_state, start_run


def context(state, **config: Any) -> ThreadContext:
    return ThreadContext(state=state, store=None, config=DaemonConfig(**config), sessions=None,  # type: ignore[arg-type]
                         now=lambda: NOW, checkpoints_on=False, shutting_down=lambda: False, workspaces_dir="/w")


def payloads(decision, type_: str) -> list[dict[str, Any]]:
    return [e.payload for e in decision.batch.events if e.type == type_] if decision.batch else []


# -- usage ------------------------------------------------------------------------------------------


def test_usage_adds_up_on_the_run_and_the_thread_and_is_priced_per_million():
    state = new_state()
    active = start_run(state)
    ctx = context(state, pricing={"m": ModelPrice(input=2.0, output=8.0, cached_input=0.5)})
    report = Usage(attempt_id=active.attempt.id, input_tokens=1000, cached_input_tokens=400, output_tokens=100,
                   reasoning_tokens=30, model="m")
    decision = usage.on_usage(ctx, report)
    assert active.run.usage == TokenUsage(input_tokens=1000, cached_input_tokens=400, output_tokens=100,
                                          reasoning_tokens=30, models=["m"])
    assert active.run.cost == pytest.approx((600 * 2.0 + 400 * 0.5 + 100 * 8.0) / 1e6)
    assert state.thread.usage == active.run.usage and state.thread.cost == active.run.cost
    (event,) = payloads(decision, "run.usage")
    assert event["usage"]["inputTokens"] == 1000 and event["threadCost"] == active.run.cost
    usage.on_usage(ctx, report)
    assert active.run.usage.input_tokens == 2000 and active.run.cost == pytest.approx(2 * (600 * 2.0 + 400 * 0.5 + 800) / 1e6)


def test_a_model_without_a_price_makes_the_cost_unknown_from_then_on_never_guessed():
    state = new_state()
    active = start_run(state)
    ctx = context(state, pricing={"m": ModelPrice(input=1.0, output=1.0)})
    usage.on_usage(ctx, Usage(attempt_id=active.attempt.id, input_tokens=10, output_tokens=1, model="other"))
    assert active.run.cost is None
    usage.on_usage(ctx, Usage(attempt_id=active.attempt.id, input_tokens=10, output_tokens=1, model="m"))
    assert active.run.cost is None and state.thread.cost is None, "a sum that lacks a part is not the whole"
    assert active.run.usage.models == ["other", "m"]
    # No model named: no price either; cached input costs the input price without cached_input.
    assert usage.price({"m": ModelPrice(input=1.0, output=1.0)}, Usage(input_tokens=5)) is None
    assert usage.price({"m": ModelPrice(input=1.0, output=3.0)}, Usage(input_tokens=5, cached_input_tokens=5, model="m")) == 5 / 1e6


def test_an_empty_report_writes_nothing():
    state = new_state()
    active = start_run(state)
    assert usage.on_usage(context(state), Usage(attempt_id=active.attempt.id)) is None
    assert active.run.usage is None


# -- stalls -----------------------------------------------------------------------------------------


def test_every_word_from_the_provider_moves_the_stall_timer_on():
    state = new_state()
    active = start_run(state)
    decision = stalls.on_heard(context(state, stall_after=5), active.attempt.id)
    assert decision.batch is None and decision.effects == [RestartTimer(StallTimer(active.attempt.id), 5)]
    assert stalls.on_heard(context(state, stall_after=0), active.attempt.id) is None, "0: off"


def test_a_silent_running_run_is_marked_stalled_at_its_open_step_and_unmarked_when_it_speaks():
    state = new_state()
    active = start_run(state)
    graph.item_started(batch(state), state, ItemStarted(attempt_id=active.attempt.id, item_id="t1", item_type="tool"))
    ctx = context(state, stall_after=5)
    stalled = stalls.on_stall_timer(ctx, StallTimer(active.attempt.id))
    (event,) = payloads(stalled, "run.stalled")
    tool = active.nodes["t1"]
    assert event == {"runId": active.run.id, "nodeId": tool.id, "silentFor": 5}
    assert stalled.batch.events[0].node_id == tool.id
    assert active.run.stalled_since == NOW - 5 and active.run.status == "running", "a stall never ends a run"
    assert stalls.on_stall_timer(ctx, StallTimer(active.attempt.id)) is None, "marked once"

    spoke = stalls.on_heard(ctx, active.attempt.id)
    (event,) = payloads(spoke, "run.unstalled")
    assert event["silentFor"] == 5 and active.run.stalled_since is None
    assert [r.stalled_since for r in spoke.batch.records.values() if isinstance(r, Run)] == [None]
    assert spoke.effects == [RestartTimer(StallTimer(active.attempt.id), 5)]


def test_a_run_waiting_on_the_person_is_not_stalled_and_an_old_attempts_timer_is_ignored():
    state = new_state()
    active = start_run(state)
    active.run = struct_copy(active.run, status="waiting")
    ctx = context(state, stall_after=5)
    decision = stalls.on_stall_timer(ctx, StallTimer(active.attempt.id))
    assert decision.batch is None and decision.effects == [RestartTimer(StallTimer(active.attempt.id), 5)]
    assert active.run.stalled_since is None
    assert stalls.on_stall_timer(ctx, StallTimer("att_old")) is None

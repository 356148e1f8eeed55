"""Token usage and its cost, on the run and summed on the thread (issue 28).

A provider reports what its model used as ``Usage`` increments (the adapters
turn Codex's per-thread totals and Claude's per-result counts into them).
Each one is added to the active run's ``usage`` and to its thread's, in the
same batch, with a ``run.usage`` event, so a client shows both as they grow.

Cost comes only from the config's price table (``[pricing."MODEL"]``, per
million tokens): an increment whose model has no price — or that names no
model — leaves the run's and the thread's ``cost`` null from then on. A cost
is never guessed, and a partial sum is not shown as if it were the whole.
"""

from __future__ import annotations

from agentd.store.db import struct_copy
from agentd.store.records import TokenUsage, to_wire

from .config import ModelPrice
from .context import ThreadContext
from .effects import Decision
from .graph import set_thread
from .providers.base import Usage

PER_MILLION = 1_000_000


def price(prices: dict[str, ModelPrice], event: Usage) -> float | None:
    """What ``event``'s tokens cost at ``prices`` (None: its model has no price)."""
    table = prices.get(event.model) if event.model else None
    if table is None:
        return None
    cached = min(event.cached_input_tokens, event.input_tokens)
    cached_price = table.cached_input if table.cached_input is not None else table.input
    total = (event.input_tokens - cached) * table.input + cached * cached_price + event.output_tokens * table.output
    return total / PER_MILLION


def added(usage: TokenUsage | None, event: Usage) -> TokenUsage:
    """``usage`` with ``event``'s tokens (and model) added."""
    base = usage or TokenUsage()
    models = base.models if event.model is None or event.model in base.models else [*base.models, event.model]
    return TokenUsage(
        input_tokens=base.input_tokens + event.input_tokens,
        cached_input_tokens=base.cached_input_tokens + event.cached_input_tokens,
        output_tokens=base.output_tokens + event.output_tokens,
        reasoning_tokens=base.reasoning_tokens + event.reasoning_tokens,
        models=models,
    )


def added_cost(usage: TokenUsage | None, cost: float | None, increment: float | None) -> float | None:
    """The cost after an increment priced ``increment``: known only while
    every increment so far had a price (a usage with no cost had one without)."""
    if increment is None or (usage is not None and cost is None):
        return None
    return (cost or 0.0) + increment


def is_empty(event: Usage) -> bool:
    """No tokens at all (a runtime that repeats its last total)."""
    return not (event.input_tokens or event.output_tokens or event.cached_input_tokens or event.reasoning_tokens)


def on_usage(ctx: ThreadContext, event: Usage) -> Decision | None:
    """The provider reported tokens of the active attempt: add them to the
    run and the thread, priced where the config has the model's price."""
    active = ctx.state.active
    if active is None or is_empty(event):
        return None
    increment = price(ctx.config.pricing, event)
    run, thread = active.run, ctx.state.thread
    active.run = run = struct_copy(run, usage=added(run.usage, event), cost=added_cost(run.usage, run.cost, increment))
    batch = ctx.batch()
    batch.put(run)
    set_thread(batch, ctx.state, usage=added(thread.usage, event), cost=added_cost(thread.usage, thread.cost, increment))
    thread = ctx.state.thread
    assert run.usage is not None and thread.usage is not None
    batch.emit("run.usage", run_id=run.id, node_id=active.root.id, usage=to_wire(run.usage), cost=run.cost,
               threadUsage=to_wire(thread.usage), threadCost=thread.cost)
    return Decision(batch)

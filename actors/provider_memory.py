"""Rolling an agent's memory back with its thread (SPEC F14).

When runs are rolled back, every provider thread that has seen one of them
(natively, or in a handoff) holds memory of work that is undone. The thread's
current provider thread is reverted natively where the runtime can (Codex
``thread/revert``, the scripted agent's ``thread/rollback``):

- the native turns are listed (page by page, by the adapter), the cut is the
  first turn of a rolled-back run, and every kept turn must lie before it;
- after the revert the native history must be exactly the kept turns, else
  the revert counts as failed;
- its coverage (which app runs it has seen) drops the rolled-back runs and
  what only their turns' handoffs had told it.

Anything else — a runtime without rollback (Claude), a revert that failed or
left a history that does not match, any other provider thread that saw an
undone run — is retired: marked ``unusable`` with a ``rolled_back: …``
reason, so the next run on that provider starts a fresh provider thread with
a stored ``full_thread_summary`` handoff of the kept runs (``rebuilt``).
Nothing is ever spliced in silently.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Literal

from agentd.protocol.errors import AgentdError
from agentd.store.db import struct_copy
from agentd.store.records import ContextHandoff, ProviderThread, ProviderTurn, RunAttempt

from . import lineage
from .context import ThreadContext
from .effects import ListNativeTurns, RollbackNative, Transition
from .graph import ThreadBatch
from .points import fork_transfer
from .providers.base import ProviderRuntimeError
from .state import ThreadState

log = logging.getLogger(__name__)

RollbackKind = Literal["native", "rebuilt", "none"]


class RevertImpossible(Exception):
    """The native history cannot be cut at the rolled-back runs."""


@dataclass
class MemoryRollback:
    """What rolling the agents' memory back decided, to apply in the
    rollback's batch."""

    kind: RollbackKind
    reason: str
    #: provider threads reverted natively, with their new coverage
    reverted: list[ProviderThread] = field(default_factory=list)
    #: provider threads to retire, with why
    retire: list[tuple[ProviderThread, str]] = field(default_factory=list)

    @property
    def retired_ids(self) -> list[str]:
        return [pt.id for pt, _why in self.retire]

    def apply(self, batch: ThreadBatch, state: ThreadState) -> None:
        for pt in self.reverted:
            batch.put(pt)
            batch.emit("provider_thread.reverted", providerThreadId=pt.id, coveredRunIds=pt.covered_run_ids)
            if state.provider_thread is not None and state.provider_thread.id == pt.id:
                state.provider_thread = pt
        for pt, why in self.retire:
            lineage.retire_provider_thread(batch, state, pt, why)


def _turns_of(ctx: ThreadContext, pt: ProviderThread) -> list[tuple[ProviderTurn, RunAttempt]]:
    """The provider turns of ``pt`` in this thread, oldest first, with their attempts."""
    store = ctx.store
    out = []
    for run in store.thread_runs(ctx.thread_id):
        for attempt in store.run_attempts(run.id):
            for turn in store.attempt_turns(attempt.id):
                if turn.provider_thread_id == pt.id:
                    out.append((turn, attempt))
    out.sort(key=lambda pair: pair[0].started_at)
    return out


def _affected(ctx: ThreadContext, pt: ProviderThread, undone: set[str]) -> bool:
    """Whether ``pt`` has seen (or began a turn of) an undone run."""
    if set(pt.covered_run_ids) & undone:
        return True
    return any(turn.run_id in undone for turn, _attempt in _turns_of(ctx, pt))


def _revert_natively(ctx: ThreadContext, pt: ProviderThread, undone: set[str]) -> Transition:
    """Cut ``pt``'s native history before its first turn of an undone run;
    the provider thread with its coverage after the cut."""
    store = ctx.store
    workspace = ctx.state.thread.workspace
    native = pt.native_thread_id
    ids = [str(turn.get("turnId")) for turn in (yield ListNativeTurns(pt.provider, native, workspace))]
    turns = _turns_of(ctx, pt)
    removed = [turn.native_turn_id for turn, _a in turns if turn.run_id in undone and turn.native_turn_id]
    kept = [(turn, attempt) for turn, attempt in turns if turn.run_id not in undone]
    positions = [ids.index(turn_id) for turn_id in removed if turn_id in ids]
    kept_positions = [ids.index(turn.native_turn_id) for turn, _a in kept if turn.native_turn_id in ids]
    if kept_positions:
        # A turn that began but never reported its id lies after the last kept one.
        positions.append(max(kept_positions) + 1)
    if not positions:
        raise RevertImpossible(f"its native history ({len(ids)} turns) holds none of the rolled-back turns")
    cut = min(positions)
    if kept_positions and max(kept_positions) >= cut:
        raise RevertImpossible("a kept turn comes after a rolled-back one in its native history")
    if cut < len(ids):
        yield RollbackNative(pt.provider, native, ids[cut])
        after = [str(turn.get("turnId")) for turn in (yield ListNativeTurns(pt.provider, native, workspace))]
        if after != ids[:cut]:
            raise RevertImpossible(f"after the revert its native history has {len(after)} turns, expected the {cut} kept")
    # What it has seen now: its kept turns' runs and what their handoffs told
    # it, plus what a native fork inherited.
    seen: set[str] = set()
    for turn, attempt in kept:
        seen.add(turn.run_id)
        handoff = store.get(ContextHandoff, attempt.handoff_id) if attempt.handoff_id else None
        if handoff is not None:
            seen.update(handoff.covered_run_ids)
    if pt.forked_from is not None:
        inherited = fork_transfer(store, ctx.thread_id)
        if inherited is not None:
            seen.update(inherited.source_run_ids)
    covered = [run_id for run_id in pt.covered_run_ids if run_id not in undone and run_id in seen]
    # covered_run_count is the legacy form of coverage: zeroed, or an empty
    # coverage would be read as "every run up to that count".
    return struct_copy(pt, covered_run_ids=covered, covered_run_count=0, updated_at=ctx.now())


def roll_back(ctx: ThreadContext, undone: set[str]) -> Transition:
    """Roll back the memory of every provider thread of the thread that saw a
    run in ``undone`` (see the module docstring). Nothing is written here:
    the caller applies the outcome (``MemoryRollback``) in its batch."""
    if not undone:
        return MemoryRollback("none", "no run was rolled back")
    store = ctx.store
    current = ctx.state.provider_thread
    candidates = {pt.id: pt for pt in store.thread_provider_threads(ctx.thread_id)}
    if current is not None:
        candidates[current.id] = current
    outcome = MemoryRollback("none", "no provider thread had seen the rolled-back runs")
    for pt in candidates.values():
        if pt.status == "unusable" or not _affected(ctx, pt, undone):
            continue
        is_current = current is not None and pt.id == current.id
        if not is_current:
            outcome.retire.append((pt, f"rolled_back: provider thread {pt.id} had seen runs that were rolled back"))
            if outcome.kind == "none":
                outcome.kind, outcome.reason = "rebuilt", "an earlier provider thread had seen rolled-back runs"
            continue
        adapter = ctx.adapter(pt.provider)
        if not adapter.capabilities.rollback or pt.history_mode == "legacy":
            cannot = ("its native thread has a legacy history, which it cannot roll back" if adapter.capabilities.rollback
                      else "cannot rewind a session")
            why = f"rolled_back: {pt.provider} {cannot}; the next run starts a fresh one with a summary of the kept runs"
            outcome.retire.append((pt, why))
            outcome.kind, outcome.reason = "rebuilt", why
            continue
        try:
            outcome.reverted.append((yield from _revert_natively(ctx, pt, undone)))
            outcome.kind, outcome.reason = "native", f"{pt.provider} reverted its native thread"
        except Exception as exc:  # noqa: BLE001 - the files are back already: the graph must follow
            if isinstance(exc, (RevertImpossible, ProviderRuntimeError, AgentdError, OSError)):
                log.warning("thread %s: native revert of %s failed: %s", ctx.thread_id, pt.id, exc)
            else:
                log.error("thread %s: native revert of %s failed", ctx.thread_id, pt.id, exc_info=exc)
            why = (f"rolled_back: the native revert failed ({exc}); the next run starts a fresh provider thread "
                   "with a summary of the kept runs")
            outcome.retire.append((pt, why))
            outcome.kind, outcome.reason = "rebuilt", why
    return outcome

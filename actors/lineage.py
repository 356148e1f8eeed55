"""Lineage and context transfer: the decisions and transitions (SPEC F4, F5,
F6, F8; a provider thread's settings are frozen when it is made, F4).

Every movement of context into a provider thread — a fork's first message, a
switch to another provider, a return to an earlier one, a replacement for a
provider thread that cannot go on — is decided here, by one pure function run
before every run start, ``resolve_start_context``. It reads a ``StartView``
(what the actor gathered from its state and the store: the thread's history as
app run ids, its provider threads and what each has seen, a fork's transfer
still to resolve) and answers with a ``StartContext``:

- ``none``: the target provider thread already has the whole history (or
  there is none yet);
- ``native``: resolve a fork by the provider's own fork primitive;
- ``portable``: give a new provider thread the history as a handoff
  (``portable_full``, or ``full_thread_summary`` when an earlier provider
  thread is replaced — explicit, with the reason);
- ``delta``: resume the provider thread and give it only the runs it missed;
- ``unsupported``: fail the run before any provider work, with a reason.

The transitions below make that durable in the run's batch (transfer,
handoff, retired provider thread) and keep coverage — which app runs each
provider thread has seen — as runs start. Nothing reaches an agent beyond
its own native history unless a stored ContextHandoff says so.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.records import (
    RUN_TERMINAL,
    ContextHandoff,
    ContextTransfer,
    HandoffStrategy,
    ProviderThread,
    Run,
    SourcePoint,
    to_wire,
)

from .config import ProviderConfig
from .graph import ThreadBatch
from .handoff import BuiltHandoff
from .providers.runtime import parse_version
from .state import AttemptContext, ThreadState

StartKind = Literal["none", "native", "portable", "delta", "unsupported"]

#: settings whose change alters what the agent sees: a fresh provider thread
#: (``settings_changed``). Others (idle timeout, wrapper, capabilities, env
#: names) apply to a thread at once.
INCOMPATIBLE_SETTINGS = ("kind", "model", "args")


# -- frozen settings (F4) ------------------------------------------------------------------


def provider_settings(config: ProviderConfig | None) -> dict[str, Any]:
    """The settings of a provider instance that shape an agent's context, as a
    provider thread records them when it is made. Env *names* only: values
    may be secrets."""
    if config is None:
        return {}
    return {
        "kind": config.kind,
        "model": config.model,
        "args": list(config.args),
        "envNames": sorted(config.env),
        "binary": config.binary,
        "capabilities": msgspec.to_builtins(config.capabilities),
    }


def settings_change(frozen: dict[str, Any], current: dict[str, Any]) -> str | None:
    """Why ``current`` settings cannot continue a provider thread made under
    ``frozen`` ones (``settings_changed: model 'a' → 'b'``), or None."""
    if not frozen or not current:
        return None  # made before agentd recorded settings: nothing to hold it to
    changes = [f"{key} {frozen.get(key)!r} → {current.get(key)!r}"
               for key in INCOMPATIBLE_SETTINGS if frozen.get(key) != current.get(key)]
    return "settings_changed: " + ", ".join(changes) if changes else None


def _version(text: str | None) -> tuple[int, int, int] | None:
    """``X.Y.Z`` anywhere in ``text``, else a leading ``X`` or ``X.Y`` (the
    scripted agent reports ``1``), else None (nothing to compare)."""
    found = parse_version(text or "")
    if found is not None:
        return found
    match = re.match(r"\s*v?(\d+)(?:\.(\d+))?(?![\d.])", text or "")
    return (int(match[1]), int(match[2] or 0), 0) if match else None


def version_change(frozen: str | None, running: str | None) -> str | None:
    """Why a runtime at version ``running`` should not resume a provider
    thread made at ``frozen`` (a different major version; for 0.x, minor),
    or None."""
    old, new = _version(frozen), _version(running)
    if old is None or new is None:
        return None
    width = 2 if old[0] == 0 else 1
    if old[:width] != new[:width]:
        return f"settings_changed: runtime version {frozen} → {running}"
    return None


# -- the view and the decision --------------------------------------------------------------


def in_history(run: Run) -> bool:
    """Whether a run is part of its thread's conversation: it reached a
    provider and ended, and was not rolled back."""
    return run.started_at is not None and run.status in RUN_TERMINAL and run.status != "rolled_back"


@dataclass(frozen=True)
class Target:
    """The provider instance a run is about to start on."""

    provider: str
    kind: str
    native_fork: bool
    #: its settings now (``provider_settings``)
    settings: dict[str, Any]


@dataclass(frozen=True)
class Limits:
    """When a returning provider thread is replaced instead of bridged."""

    max_bridges: int = 3
    max_runs_behind: int = 20


@dataclass(frozen=True)
class StartView:
    """What ``resolve_start_context`` reads."""

    thread_id: str
    run_id: str
    target: Target
    #: the thread's conversation before this run: app run ids, oldest first
    #: (a fork's starts with its source's)
    history: tuple[str, ...]
    #: the thread's newest provider thread per provider instance
    backing: dict[str, ProviderThread]
    #: the thread's current provider thread, if any
    current: ProviderThread | None = None
    #: a transfer into this thread still to resolve (a fork's), if any
    transfer: ContextTransfer | None = None
    #: the provider thread a fork's source point names
    source_backing: ProviderThread | None = None
    #: runs of a fork's source point that were rolled back since the fork:
    #: the source's native thread no longer holds them (the fork keeps them)
    source_rolled_back: tuple[str, ...] = ()
    #: the provider of the last run in the history (the source of a switch)
    previous_provider: str | None = None
    #: the message asked for a clean context
    clean_context: bool = False
    #: ``(provider thread id, why)``: the starter could not resume it
    lost: tuple[str, str] | None = None
    limits: Limits = Limits()
    #: a ``merge_back`` transfer this run's message carries (SPEC F7), if any
    merge: ContextTransfer | None = None
    #: a fork that works in another workspace than its source thread
    workspace_moved: bool = False


@dataclass(frozen=True)
class HandoffPlan:
    """A handoff to build: ``strategy`` over ``run_ids``, because ``reason``."""

    strategy: HandoffStrategy
    run_ids: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class NativeFork:
    """Fork ``native_thread_id`` (of ``source``) after ``turn_ref`` (None: its end)."""

    source: ProviderThread
    native_thread_id: str
    turn_ref: str | None
    #: the history runs the fork inherits natively
    covered: tuple[str, ...]


@dataclass(frozen=True)
class StartContext:
    """What a run start needs, as ``resolve_start_context`` decided."""

    kind: StartKind
    reason: str = ""
    #: the provider thread to resume (None: a new one is made)
    resume: ProviderThread | None = None
    #: a provider thread this start replaces: marked ``unusable`` with ``reason``
    retire: ProviderThread | None = None
    handoff: HandoffPlan | None = None
    native: NativeFork | None = None
    #: the transfer into the thread this start resolves (a fork's)
    transfer: ContextTransfer | None = None
    #: a merge-back the run's message carries: given as a ``delta`` handoff
    #: of its own, whatever the provider thread needs besides (SPEC F7)
    merge: ContextTransfer | None = None


def coverage(pt: ProviderThread) -> tuple[str, ...]:
    return tuple(pt.covered_run_ids)


def resolve_start_context(view: StartView) -> StartContext:
    """Decide how the run ``view.run_id`` gets its context (SPEC F8
    ``resolveStartContext``): a transfer into the thread first (a fork's
    first message), else the target provider's own provider thread — resumed
    as it is, bridged by a delta, or replaced by a fresh one with a summary."""
    ctx = _resolve_transfer(view, view.transfer) if view.transfer is not None else _resolve_backing(view)
    if view.merge is not None:
        ctx = dataclasses.replace(ctx, merge=view.merge)
    return ctx


def _resolve_transfer(view: StartView, transfer: ContextTransfer) -> StartContext:
    if transfer.type != "fork":
        return StartContext("unsupported", reason=f"a {transfer.type} transfer ({transfer.id}) cannot be resolved by this agentd yet",
                            transfer=transfer)
    point = transfer.source_point
    history = view.history
    # A provider thread a fork already has comes from a resolution that did
    # not finish (the daemon stopped before the turn): it is not trusted.
    retire = view.current if view.current is not None and view.current.status != "unusable" else None
    source = view.source_backing
    why_not = _why_not_native(view, transfer, source)
    if why_not is None:
        assert source is not None and point.native_thread_id is not None
        covered = tuple(run_id for run_id in coverage(source) if run_id in set(history))
        missing = tuple(run_id for run_id in history if run_id not in set(covered))
        handoff = HandoffPlan("delta", missing, f"the source's provider thread had not seen {len(missing)} run(s)") if missing else None
        return StartContext(
            "native", reason=f"native fork of provider thread {source.id}", retire=retire, handoff=handoff,
            native=NativeFork(source, point.native_thread_id, point.native_turn_ref, covered), transfer=transfer,
        )
    if point.type == "checkpoint" and point.checkpoint_id:
        # The files matter as much as the talk: say what they were at the
        # checkpoint, even before any run (a baseline fork).
        return StartContext("portable", reason=why_not, retire=retire, transfer=transfer,
                            handoff=HandoffPlan("checkpoint_context", history, why_not))
    if not history:
        return StartContext("none", reason=why_not, retire=retire, transfer=transfer)
    return StartContext("portable", reason=why_not, retire=retire, transfer=transfer,
                        handoff=HandoffPlan("portable_full", history, why_not))


def _why_not_native(view: StartView, transfer: ContextTransfer, source: ProviderThread | None) -> str | None:
    point = transfer.source_point
    target = view.target
    if transfer.status == "failed":
        return f"portable: the earlier resolution failed ({transfer.error or 'no reason recorded'})"
    if point.provider != target.provider:
        return f"portable: the fork runs on {target.provider}, the source ran on {point.provider or 'no provider'}"
    if not target.native_fork:
        return f"portable: {target.provider} has no native fork"
    if point.native_thread_id is None or source is None:
        return "portable: the source point has no native thread to fork"
    if view.workspace_moved and target.kind in ("claude", "acp"):
        # A Claude session belongs to the directory it ran in, and an ACP
        # agent's session/fork is given the source's: a native fork would
        # work in the source's workspace, not the fork's.
        return (f"portable: the fork works in another workspace than its source, and a {target.kind} session "
                "is bound to its own")
    if source.status == "unusable":
        return f"portable: the source's provider thread is unusable ({source.reason or 'no reason recorded'})"
    if target.kind == "acp" and point.run_id is not None and source.covered_run_ids[-1:] != [point.run_id]:
        # ACP's session/fork takes the whole session: no fork at an earlier turn.
        return "portable: an ACP agent forks a session at its end, and the fork point is an earlier run"
    if source.history_mode == "legacy":
        # Codex cannot fork a legacy history at a turn: not attempted, so no
        # orphan native fork is left behind by a fork that then fails.
        return f"portable: the source's provider thread {source.id} has a legacy history, which {target.provider} cannot fork"
    if view.source_rolled_back:
        return f"portable: the source rolled back {len(view.source_rolled_back)} run(s) of the fork point since the fork"
    return None


def _resolve_backing(view: StartView) -> StartContext:
    provider = view.target.provider
    history = view.history
    pt = view.backing.get(provider)
    if pt is None:
        if not history:
            return StartContext("none", reason="the thread's first run")
        reason = (f"provider_switch: {view.previous_provider} → {provider}" if view.previous_provider != provider
                  else f"no provider thread of {provider} to continue")
        if view.clean_context:
            return StartContext("portable", reason="clean_context: the message asked for a fresh context",
                                handoff=HandoffPlan("full_thread_summary", history, "clean_context"))
        return StartContext("portable", reason=reason, handoff=HandoffPlan("portable_full", history, reason))
    covered = set(coverage(pt))
    missing = tuple(run_id for run_id in history if run_id not in covered)
    fallback = _fallback_reason(view, pt, missing)
    if fallback is not None:
        if not history:
            return StartContext("none", reason=fallback, retire=pt)
        return StartContext("portable", reason=fallback, retire=pt,
                            handoff=HandoffPlan("full_thread_summary", history, fallback))
    if not missing:
        return StartContext("none", reason="the provider thread has seen the whole thread", resume=pt)
    if view.previous_provider != provider:
        reason = f"provider_switch: back to {provider}, {len(missing)} run(s) missed"
    else:
        reason = f"{len(missing)} run(s) this provider thread has not seen"
    return StartContext("delta", reason=reason, resume=pt, handoff=HandoffPlan("delta", missing, reason))


def _fallback_reason(view: StartView, pt: ProviderThread, missing: tuple[str, ...]) -> str | None:
    """Why ``pt`` is not continued but replaced by a fresh provider thread with
    a ``full_thread_summary`` (SPEC F4/F5), or None."""
    if view.lost is not None and view.lost[0] == pt.id:
        why = view.lost[1]
        return why if why.startswith("settings_changed") else f"cannot_resume: {why}"
    if pt.status == "unusable" and (pt.reason or "").startswith("rolled_back"):
        return pt.reason
    if pt.status == "unusable":
        return f"cannot_resume: provider thread {pt.id} is unusable ({pt.reason or 'no reason recorded'})"
    changed = settings_change(pt.settings, view.target.settings)
    if changed is not None:
        return changed
    if view.clean_context:
        return "clean_context: the message asked for a fresh context"
    limits = view.limits
    if missing and pt.bridges_in_a_row >= limits.max_bridges:
        return f"stale_context: bridged {pt.bridges_in_a_row} times in a row (limit {limits.max_bridges})"
    if len(missing) > limits.max_runs_behind:
        return f"too_far_behind: {len(missing)} runs behind (limit {limits.max_runs_behind})"
    return None


# -- transitions ----------------------------------------------------------------------------


def _emit_transfer(batch: ThreadBatch, event: str, transfer: ContextTransfer, run_id: str | None, node_id: str | None) -> None:
    batch.emit(f"context_transfer.{event}", run_id=run_id, node_id=node_id, transfer=to_wire(transfer))


def retire_provider_thread(batch: ThreadBatch, state: ThreadState, pt: ProviderThread, reason: str) -> ProviderThread:
    """Mark ``pt`` unusable: a fresh provider thread takes over (explicit in the graph)."""
    pt = struct_copy(pt, status="unusable", reason=reason, updated_at=batch.now)
    batch.put(pt)
    run_id = state.active.run.id if state.active else None
    node_id = state.active.root.id if state.active else None
    batch.emit("provider_thread.unusable", run_id=run_id, node_id=node_id, providerThreadId=pt.id, reason=reason)
    if state.provider_thread is not None and state.provider_thread.id == pt.id:
        state.provider_thread = pt
    return pt


def record_start(
    batch: ThreadBatch, state: ThreadState, view: StartView, ctx: StartContext, built: BuiltHandoff | None,
) -> AttemptContext:
    """Make a run start's context durable before any provider work: the
    provider thread it retires, the transfer (a fork's, resolved; or a new
    ``provider_handoff``) and the handoff with its exact text. Ties them to
    the active attempt and returns what the attempt carries until its turn."""
    active = state.active
    assert active is not None
    now = batch.now
    run = active.run
    if ctx.retire is not None and ctx.retire.status != "unusable":
        retire_provider_thread(batch, state, ctx.retire, ctx.reason)
    transfer = ctx.transfer
    if transfer is None and ctx.kind in ("portable", "delta"):
        previous = view.previous_provider
        base = None
        if ctx.kind == "delta" and ctx.resume is not None:
            seen = [run_id for run_id in view.history if run_id in set(ctx.resume.covered_run_ids)]
            base = SourcePoint(type="provider_thread", thread_id=state.thread_id, provider_thread_id=ctx.resume.id,
                               run_id=seen[-1] if seen else None, provider=ctx.resume.provider)
        transfer = ContextTransfer(
            id=new_id("xfr"), type="provider_handoff", source_thread_id=state.thread_id, target_thread_id=state.thread_id,
            source_point=SourcePoint(type="run", thread_id=state.thread_id, run_id=view.history[-1] if view.history else None,
                                     provider=previous),
            base_point=base, source_provider=previous, target_provider=view.target.provider,
            source_run_ids=list(view.history), reason=ctx.reason,
            created_by="user" if previous != view.target.provider or view.clean_context else "system",
            created_at=now,
        )
        batch.put(transfer)
        _emit_transfer(batch, "created", transfer, run.id, run.root_node_id)
    handoff = None
    if built is not None and ctx.handoff is not None:
        # Where the context comes from: a fork's source, the provider thread
        # being replaced, else the one the thread ran on last.
        if ctx.transfer is not None:
            source_pt = ctx.transfer.source_point.provider_thread_id
        elif ctx.retire is not None:
            source_pt = ctx.retire.id
        else:
            source_pt = state.provider_thread.id if state.provider_thread else None
        handoff = ContextHandoff(
            id=new_id("hof"), thread_id=state.thread_id, strategy=ctx.handoff.strategy, reason=ctx.handoff.reason,
            source_provider_thread_id=source_pt,
            target_provider_thread_id=ctx.resume.id if ctx.resume is not None else None,
            covered_run_count=len(built.covered_run_ids), text=built.text, created_at=now,
            transfer_id=transfer.id if transfer is not None else None, covered_run_ids=list(built.covered_run_ids),
            dropped_run_ids=list(built.dropped_run_ids), dropped=list(built.dropped), size=built.size, cap=built.cap,
            target_provider=view.target.provider,
        )
        batch.put(handoff)
        batch.emit("context_handoff.created", run_id=run.id, node_id=run.root_node_id, handoff=to_wire(handoff))
    if transfer is not None:
        changes: dict[str, Any] = {"run_id": run.id, "target_provider": view.target.provider}
        if ctx.resume is not None:
            changes["target_provider_thread_id"] = ctx.resume.id
        if handoff is not None:
            changes["handoff_id"] = handoff.id
        if ctx.native is None and ctx.kind in ("portable", "delta"):
            how = "checkpoint_context" if ctx.handoff is not None and ctx.handoff.strategy == "checkpoint_context" else "portable"
            changes.update(status="resolved_portable", resolution=how, lower_fidelity=True, resolved_at=now)
        transfer = struct_copy(transfer, **changes)
        batch.put(transfer)
        if transfer.status == "resolved_portable":
            _emit_transfer(batch, "resolved", transfer, run.id, run.root_node_id)
    attempt = struct_copy(active.attempt, handoff_id=handoff.id if handoff else None,
                          transfer_id=transfer.id if transfer else None)
    batch.put(attempt)
    active.attempt = attempt
    active.context = AttemptContext(
        transfer=transfer, handoff=handoff,
        forked_from=ctx.native.source.id if ctx.native else None, inherited=ctx.native.covered if ctx.native else (),
    )
    return active.context


def record_merge(
    batch: ThreadBatch, state: ThreadState, ctx: StartContext, merge: ContextTransfer, built: BuiltHandoff,
    *, base: SourcePoint, run_ids: tuple[str, ...], target_provider: str,
) -> ContextHandoff:
    """A merge-back the run's message carries, resolved before any provider
    work (SPEC F7): its ``delta`` handoff stored with the exact text, the
    transfer ``resolved_portable`` (its base and runs as they are now). The
    turn that takes it in consumes it (``turn_started``)."""
    active = state.active
    assert active is not None
    run = active.run
    now = batch.now
    handoff = ContextHandoff(
        id=new_id("hof"), thread_id=state.thread_id, strategy="delta", reason=merge.reason,
        source_provider_thread_id=merge.source_point.provider_thread_id,
        target_provider_thread_id=ctx.resume.id if ctx.resume is not None else None,
        covered_run_count=len(built.covered_run_ids), text=built.text, created_at=now, transfer_id=merge.id,
        covered_run_ids=list(built.covered_run_ids), dropped_run_ids=list(built.dropped_run_ids),
        dropped=list(built.dropped), size=built.size, cap=built.cap, target_provider=target_provider,
    )
    batch.put(handoff)
    batch.emit("context_handoff.created", run_id=run.id, node_id=run.root_node_id, handoff=to_wire(handoff))
    merge = struct_copy(
        merge, status="resolved_portable", resolution="portable", lower_fidelity=True, resolved_at=now, error=None,
        handoff_id=handoff.id, base_point=base, source_run_ids=list(run_ids), target_provider=target_provider,
        target_provider_thread_id=ctx.resume.id if ctx.resume is not None else None,
    )
    batch.put(merge)
    _emit_transfer(batch, "resolved", merge, run.id, run.root_node_id)
    if active.attempt.handoff_id is None:
        # The attempt names the handoff and transfer its turn carries; with a
        # provider handoff too, that one (the merge's is on its own transfer
        # and its run.context_resolved event).
        active.attempt = struct_copy(active.attempt, handoff_id=handoff.id,
                                     transfer_id=active.attempt.transfer_id or merge.id)
        batch.put(active.attempt)
    active.context.merge = merge
    active.context.merge_handoff = handoff
    return handoff


def new_provider_thread_fields(
    context: AttemptContext, settings: dict[str, Any], runtime_version: str | None, *, forked: bool,
) -> dict[str, Any]:
    """The lineage fields of a provider thread being made: the settings it is
    made under (frozen), and what a native fork inherits."""
    fields: dict[str, Any] = {"settings": {**settings, "version": runtime_version}}
    if forked:
        fields.update(covered_run_ids=list(context.inherited), forked_from=context.forked_from)
    return fields


def provider_thread_made(batch: ThreadBatch, state: ThreadState, pt: ProviderThread, *, native: bool) -> None:
    """A new provider thread backs the active attempt: the handoff and the
    transfer now name it; a native fork's transfer is ``resolved_native``.
    (A runtime without empty threads reports its thread only after the turn
    began: then the turn's coverage lands here.)"""
    active = state.active
    assert active is not None
    context = active.context
    if context.handoff is not None and context.handoff.target_provider_thread_id != pt.id:
        context.handoff = struct_copy(context.handoff, target_provider_thread_id=pt.id)
        batch.put(context.handoff)
    if context.merge_handoff is not None and context.merge_handoff.target_provider_thread_id != pt.id:
        context.merge_handoff = struct_copy(context.merge_handoff, target_provider_thread_id=pt.id)
        batch.put(context.merge_handoff)
    if context.merge is not None and context.merge.target_provider_thread_id != pt.id:
        context.merge = struct_copy(context.merge, target_provider_thread_id=pt.id)
        batch.put(context.merge)
    if context.transfer is not None:
        changes: dict[str, Any] = {"target_provider_thread_id": pt.id}
        if native and not context.consumed:
            changes.update(status="resolved_native", resolution="native", lower_fidelity=False, resolved_at=batch.now)
        context.transfer = struct_copy(context.transfer, **changes)
        batch.put(context.transfer)
        if native and not context.consumed:
            _emit_transfer(batch, "resolved", context.transfer, active.run.id, active.root.id)
    if context.ended:
        _cover(batch, state)


def _cover(batch: ThreadBatch, state: ThreadState) -> None:
    """The active attempt's provider thread has seen the run and what the
    attempt's handoff covers."""
    active = state.active
    assert active is not None
    context = active.context
    pt = state.provider_thread
    if pt is None or pt.id != active.attempt.provider_thread_id:
        return  # not known yet: provider_thread_made covers it
    context.ended = False
    covered = list(pt.covered_run_ids)
    for run_id in [*(context.handoff.covered_run_ids if context.handoff else []), active.run.id]:
        if run_id not in covered:
            covered.append(run_id)
    bridged = context.handoff is not None and context.handoff.strategy == "delta"
    pt = struct_copy(pt, covered_run_ids=covered, bridges_in_a_row=pt.bridges_in_a_row + 1 if bridged else 0,
                     updated_at=batch.now)
    batch.put(pt)
    state.provider_thread = pt


def turn_started(batch: ThreadBatch, state: ThreadState) -> None:
    """The attempt's turn began: the provider took the transfer in with the
    user's message, so it is ``consumed`` — in the same batch as the turn,
    so a transfer is never half-consumed."""
    active = state.active
    assert active is not None
    context = active.context
    if context.transfer is not None and not context.consumed:
        context.transfer = struct_copy(context.transfer, status="consumed", consumed_at=batch.now,
                                       target_provider_thread_id=active.attempt.provider_thread_id
                                       or context.transfer.target_provider_thread_id)
        batch.put(context.transfer)
        _emit_transfer(batch, "consumed", context.transfer, active.run.id, active.root.id)
    if context.merge is not None and not context.consumed:
        context.merge = struct_copy(context.merge, status="consumed", consumed_at=batch.now,
                                    target_provider_thread_id=active.attempt.provider_thread_id
                                    or context.merge.target_provider_thread_id)
        batch.put(context.merge)
        _emit_transfer(batch, "consumed", context.merge, active.run.id, active.root.id)
    context.consumed = True


def turn_completed(batch: ThreadBatch, state: ThreadState) -> None:
    """The provider reported the attempt's turn ended (completed, failed or
    interrupted), so its native history holds the turn: its provider thread
    now covers the run and what the handoff covered. A turn cut short by a
    crash is not counted: the next start gives that context again."""
    active = state.active
    assert active is not None
    active.context.ended = True
    _cover(batch, state)


def attempt_closing(batch: ThreadBatch, state: ThreadState, why: str | None) -> None:
    """The active attempt closes: a transfer its turn never took in is
    ``failed`` with the reason (a fork then resolves portably next time)."""
    active = state.active
    if active is None:
        return
    context = active.context
    if context.transfer is not None and not context.consumed and context.transfer.status != "failed":
        context.transfer = struct_copy(context.transfer, status="failed", error=why or "the attempt ended before its turn started")
        batch.put(context.transfer)
        _emit_transfer(batch, "failed", context.transfer, active.run.id, active.root.id)
    if context.merge is not None and not context.consumed and context.merge.status != "failed":
        context.merge = struct_copy(context.merge, status="failed", error=why or "the attempt ended before its turn started")
        batch.put(context.merge)
        _emit_transfer(batch, "failed", context.merge, active.run.id, active.root.id)

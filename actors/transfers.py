"""Lineage in the thread actor: ``thread.fork`` and the context a run starts
with (SPEC F5, F6, F8).

- ``thread_fork`` (in the source thread's actor, which knows whether its
  active run is at a stable point): resolves the source point (points.py),
  and commits the fork's AppThread and a pending ``fork`` ContextTransfer —
  nothing else: no provider, session, provider thread or handoff.
- ``on_context_needed``: before any provider work of an attempt, the starter
  asks; this gathers a ``StartView`` from state and store, lets
  ``lineage.resolve_start_context`` decide, builds the handoff text from the
  stored graph (handoff.py), commits transfer and handoff, and answers with
  a ``StartPlan`` — or ends the run when the context is unsupported.
"""

from __future__ import annotations

from agentd.protocol import wire
from agentd.protocol.errors import InvalidState
from agentd.store.db import Store, struct_copy
from agentd.store.ids import new_id
from agentd.store.records import Checkpoint, ContextTransfer, ProviderThread, Run, WorkspaceSource, to_wire

from . import delegation, lineage, merge_back
from .merge_back import describe_change
from .own_workspace import OWN_WORKSPACES, own_workspace, wire_source
from .context import ThreadContext
from agentd.protocol import results

from .effects import NO_SEQ, CheckWorkspace, CopyMcpSecrets, Decision, Diff, PlanWorkspace, ReadMcpSecrets, Transition
from .ending import end_run
from .graph import ThreadBatch
from .checkpoints.errors import CheckpointError
from .handoff import build_handoff, checkpoint_section
from .lineage import Limits, StartContext, StartView, Target
from .messages import Command, ContextNeeded, StartPlan
from .providers import extra_mcp
from .points import fork_transfer, resolve_source, thread_history, with_legacy_coverage
from .state import ActiveRun

__all__ = ["fork_transfer", "thread_fork", "thread_history", "on_context_needed"]

# -- thread.fork -----------------------------------------------------------------------------


def thread_fork(ctx: ThreadContext, command: Command) -> Transition:
    """``thread.fork``: a new AppThread with fork lineage and a pending
    ``fork`` ContextTransfer from the source point — nothing else (SPEC F6)
    but the source's MCP servers (issue 26), which a fork inherits."""
    params: wire.ThreadForkParams = command.params
    state = ctx.state
    source, history = resolve_source(ctx.store, state, params.source_point)
    own = params.workspace if params.workspace in OWN_WORKSPACES else None
    workspace = None if own else (yield CheckWorkspace(params.workspace))
    parent = state.thread
    title = params.title if params.title is not None else f"fork of {parent.title or parent.id}"
    thread = ctx.new_thread_record(
        title=title, provider=source.provider or parent.provider, workspace=workspace or parent.workspace,
        parent=parent, relationship="fork", side_chat=params.side_chat, created_by=params.created_by,
    )
    if own is not None:
        # A worktree (or copy) of its own, made at the fork's first run (issue 27).
        planned: WorkspaceSource = yield PlanWorkspace(own, parent.id, parent.workspace, thread.id, source.checkpoint_id)
        thread = struct_copy(thread, workspace=own_workspace(planned), workspace_source=planned)
    if parent.mcp_servers:
        # The source's MCP servers (issue 26): their names in the record, a copy of their secrets beside it.
        yield CopyMcpSecrets(thread.id)
        thread = struct_copy(thread, mcp_servers=list(parent.mcp_servers))
    batch = ctx.batch()
    transfer = ContextTransfer(
        id=new_id("xfr"), type="fork", source_thread_id=parent.id, target_thread_id=thread.id, source_point=source,
        source_provider=source.provider, source_run_ids=history, reason="fork", created_by=params.created_by,
        created_at=batch.now,
    )
    batch.put_all(thread, transfer)
    batch.event("thread.created", thread_id=thread.id, at=batch.now, thread=to_wire(thread))
    batch.event("context_transfer.created", thread_id=thread.id, at=batch.now, transfer=to_wire(transfer))
    source_run = ctx.store.get(Run, source.run_id) if source.run_id else None
    batch.emit("thread.forked", run_id=source.run_id,
               node_id=source.node_id or (source_run.root_node_id if source_run else None),
               forkThreadId=thread.id, transferId=transfer.id,
               sideChat=params.side_chat)
    result = results.ThreadForkResult(thread_id=thread.id, transfer_id=transfer.id, seq=NO_SEQ,
                                      workspace=thread.workspace,
                                      workspace_source=wire_source(thread.workspace_source))
    # Asked as thread.create {relationship: fork}: a retry gets that method's answer.
    receipt = result if command.method == "thread.fork" else {"threadId": thread.id, "transferId": transfer.id}
    batch.record_receipt(command.command_id, command.method, receipt)
    return Decision(batch, result)


# -- the context a run starts with -------------------------------------------------------------


def gather_view(ctx: ThreadContext, active: ActiveRun, lost: tuple[str, str] | None) -> StartView:
    """What ``lineage.resolve_start_context`` needs, from state and store."""
    store = ctx.store
    state = ctx.state
    thread = state.thread
    run = active.run
    provider = run.provider
    adapter = ctx.adapter(provider)
    target = Target(provider, adapter.kind, adapter.capabilities.native_fork,
                    lineage.provider_settings(ctx.config.providers.get(provider)))
    transfers = store.thread_transfers(thread.id)
    # A pending transfer into the thread; a failed fork too (it resolves again, portably).
    # (Delegation transfers are taken in besides the thread's own context: delegation.take_inbox.)
    transfer = next((t for t in transfers if t.target_thread_id == thread.id and t.type not in ("provider_handoff", "merge_back")
                     and t.type not in delegation.INBOX_TYPES
                     and (t.status == "pending" or (t.type == "fork" and t.status == "failed"))), None)
    # A merge-back comes with its own message's run (a failed attempt's, again on the retry).
    merge = next((t for t in transfers if t.type == "merge_back" and t.target_thread_id == thread.id and t.run_id == run.id
                  and t.status in ("pending", "failed")), None)
    history = tuple(thread_history(store, thread.id, before_ordinal=run.ordinal))
    current = state.provider_thread
    backing: dict[str, ProviderThread] = {}
    for pt in store.thread_provider_threads(thread.id):
        backing[pt.provider] = pt  # oldest first: the newest per provider wins
    if current is not None and (current.provider not in backing or backing[current.provider].id == current.id):
        backing[current.provider] = current
    backing = {name: with_legacy_coverage(store, pt) for name, pt in backing.items()}
    if current is not None and backing.get(current.provider, current).id == current.id:
        state.provider_thread = current = backing.get(current.provider, current)
    source_backing = None
    rolled_back: tuple[str, ...] = ()
    if transfer is not None and transfer.source_point.provider_thread_id:
        source_backing = store.get(ProviderThread, transfer.source_point.provider_thread_id)
        if source_backing is not None:
            source_backing = with_legacy_coverage(store, source_backing)
        rolled_back = tuple(run.id for run in map(store.run, transfer.source_run_ids) if run and run.status == "rolled_back")
    previous = store.run(history[-1]) if history else None
    config = ctx.config
    return StartView(
        thread_id=thread.id, run_id=run.id, target=target, history=history, backing=backing, current=current,
        transfer=transfer, source_backing=source_backing, source_rolled_back=rolled_back,
        previous_provider=previous.provider if previous else None,
        clean_context=run.clean_context, lost=lost,
        limits=Limits(max_bridges=config.handoff_max_bridges, max_runs_behind=config.handoff_max_runs_behind),
        merge=merge,
        workspace_moved=transfer is not None and _workspace_of(store, transfer.source_thread_id) != thread.workspace,
    )


def _workspace_of(store: Store, thread_id: str) -> str | None:
    source = store.thread(thread_id)
    return source.workspace if source is not None else None


def on_context_needed(ctx: ThreadContext, item: ContextNeeded) -> Transition:
    """Resolve the attempt's start context (``lineage.resolve_start_context``)
    and make it durable before any provider work (a context that gives the
    provider nothing — no handoff, transfer or inbox text — is the attempt's
    bookkeeping only and rides with the next commit); the ``StartPlan`` the
    starter is answered with — None when the run ended instead (the actor
    answers with the error if this fails, so the starter never waits for
    nothing)."""
    state = ctx.state
    active = state.active
    if active is None or not state.is_current(item.attempt_id):
        return None
    servers = yield from _mcp_servers(ctx)
    view = gather_view(ctx, active, item.lost)
    resolved = lineage.resolve_start_context(view)
    batch = ctx.batch()
    if resolved.kind == "unsupported":
        yield from _unsupported(ctx, batch, active, resolved)
        return None
    merged = None
    if resolved.merge is not None:
        # Built now, from the graph as it is when the run starts (SPEC F7:
        # lazily); reading the fork's checkpoints awaits git, in the lock.
        merged = yield from merge_back.build(ctx, resolved.merge)
    built = None
    if resolved.handoff is not None:
        built = build_handoff(ctx.store, resolved.handoff.run_ids, strategy=resolved.handoff.strategy,
                              reason=resolved.handoff.reason, cap=ctx.config.handoff_max_chars)
        if resolved.handoff.strategy == "checkpoint_context" and resolved.transfer is not None:
            section = yield from _checkpoint_files(ctx, resolved.transfer)
            if section:
                built = built.with_section(section)
    context = lineage.record_start(batch, state, view, resolved, built)
    text = delegation.take_inbox(ctx, batch, built.text if built is not None else None)
    if resolved.kind != "none" or resolved.retire is not None:
        batch.emit("run.context_resolved", run_id=active.run.id, node_id=active.root.id, kind=resolved.kind,
                   reason=resolved.reason, transferId=context.transfer.id if context.transfer else None,
                   handoffId=context.handoff.id if context.handoff else None)
    texts = [text] if text else []
    if merged is not None and resolved.merge is not None:
        found, merge_text, _files = merged
        handoff = lineage.record_merge(batch, state, resolved, resolved.merge, merge_text, base=found.base,
                                       run_ids=found.run_ids, target_provider=view.target.provider)
        batch.emit("run.context_resolved", run_id=active.run.id, node_id=active.root.id, kind="delta",
                   reason=resolved.merge.reason, transferId=resolved.merge.id, handoffId=handoff.id)
        texts.append(handoff.text)
    plan = StartPlan(
        resume=resolved.resume,
        fork_native_thread_id=resolved.native.native_thread_id if resolved.native else None,
        fork_turn_ref=resolved.native.turn_ref if resolved.native else None,
        context="\n\n".join(texts) if texts else None,
        mcp_servers=tuple(servers),
    )
    given_nothing = resolved.kind == "none" and resolved.retire is None and merged is None and not texts
    return Decision(batch, plan, lazy=given_nothing and not batch.events)


def _mcp_servers(ctx: ThreadContext) -> Transition:
    """The thread's MCP servers as its runtime gets them: the record's, with
    their secrets from the thread's file (issue 26). Read here, in the
    thread's lock, where ``thread.update`` writes the file and changes the
    record: the two always match.

    Raises:
        InvalidState: the file cannot be read, or lacks a value the record
            names (naming the server); the run fails to start, saying so.
    """
    declared = ctx.state.thread.mcp_servers
    if not declared:
        return []
    try:
        kept = yield ReadMcpSecrets()
        return extra_mcp.with_secrets(declared, kept)
    except OSError as exc:
        raise InvalidState(str(exc), field="mcpServers") from None


def _checkpoint_files(ctx: ThreadContext, transfer: ContextTransfer) -> Transition:
    """The ``checkpoint_context`` handoff's section on the files at the fork's
    checkpoint: its counts and the files it changed since the checkpoint
    before it (git's diff, an effect); None when the checkpoint is gone."""
    store = ctx.store
    checkpoint_id = transfer.source_point.checkpoint_id
    checkpoint = store.get(Checkpoint, checkpoint_id) if checkpoint_id else None
    if checkpoint is None or not checkpoint.commit:
        return None
    base = store.get(Checkpoint, checkpoint.base_checkpoint_id) if checkpoint.base_checkpoint_id else None
    files: list[str] | None = None
    if base is not None and base.commit and ctx.checkpoints_on:
        try:
            diff = yield Diff(checkpoint.workspace or ctx.state.thread.workspace, checkpoint.commit, base.commit)
            files = [describe_change(change) for change in diff.files]
        except CheckpointError:
            files = None
    run = store.run(checkpoint.run_id) if checkpoint.run_id else None
    if checkpoint.kind == "baseline":
        what = f"the workspace before run {checkpoint.ordinal + 1}"
    else:
        what = f"the workspace at the end of run {run.ordinal if run else checkpoint.ordinal}"
    return checkpoint_section(checkpoint, files, what=what)


def _unsupported(ctx: ThreadContext, batch: ThreadBatch, active: ActiveRun, resolved: StartContext) -> Transition:
    """The run's context cannot be given: its transfers fail (said once: the
    thread's next runs go on without them) and the run ends."""
    batch.emit("run.context_resolved", run_id=active.run.id, node_id=active.root.id, kind=resolved.kind,
               reason=resolved.reason)
    for transfer in (resolved.transfer if resolved.transfer is not None and resolved.transfer.type != "fork" else None,
                     resolved.merge):
        if transfer is not None:
            failed = struct_copy(transfer, status="failed", error=f"context_unsupported: {resolved.reason}",
                                 run_id=active.run.id)
            batch.put(failed)
            batch.emit("context_transfer.failed", run_id=active.run.id, node_id=active.root.id, transfer=to_wire(failed))
    yield from end_run(ctx, batch, "failed", reason=f"context_unsupported: {resolved.reason}")

"""Sending a message to a thread: a new run, or a steer of the active one (SPEC F3).

``thread.message.send`` starts a run at once, queues it after the active one,
or steers the active run. Steer policy: a steer goes to the provider natively
when it can steer; when it cannot, or the client asked for ``restart_active``,
the active turn is interrupted and, once the provider says it ended, the run
gets attempt N+1 (``steering_restart``) carrying the steering message — or,
when the attempt had already given a final answer (an assistant message that
is not ``commentary``) or changed files (``ActiveRun.changed_files``: a
completed file change or a child checkpoint with changes — what can be seen
before the run's own checkpoint, which is captured only when the files are
at rest), a new run that ``supersedesRunId`` it. Interrupted attempts stay
in the graph.

Handlers (one per method): ``message_send``, ``queued_message_promote_to_steer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from agentd.protocol.errors import InvalidParams, InvalidState, NotFound, Unsupported
from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.records import ConversationMessage, to_wire

from . import graph, merge_back, merge_files, run_control
from .context import ThreadContext
from agentd.protocol import results

from .effects import (
    NO_SEQ,
    ClaimSession,
    Commit,
    Decision,
    ProbeProvider,
    ReleaseClaim,
    SaveAttachments,
    SendSteer,
    StartNext,
    Transition,
    with_seq,
)
from .ending import end_run, retry
from .graph import ThreadBatch
from .messages import Command
from .providers import images
from .state import ActiveRun, PendingRestart, ThreadState

SteerMode = Literal["steer_active", "restart_active"]
Strategy = Literal["native_steer", "superseding_run", "steering_restart"]


@dataclass(frozen=True)
class Steer:
    """How a steer is carried out: ``strategy``, the run that takes the
    message (``run_id``) and the message as stored."""

    strategy: Strategy
    run_id: str
    message: ConversationMessage


# -- transitions ------------------------------------------------------------------------


def check_steerable(active: ActiveRun) -> None:
    """A run waiting to restart for an earlier steer takes no second one."""
    if active.pending_restart is not None:
        raise InvalidState(
            f"run {active.run.id} is already restarting for an earlier steer; "
            "send this message with queue_after_active, or steer the run once it has restarted",
            runId=active.run.id,
        )


def steer(batch: ThreadBatch, state: ThreadState, mode: SteerMode, message: ConversationMessage, *, can_steer: bool,
          root_of: graph.RootOf = graph.no_root) -> Steer:
    """Steer the active run with ``message``: natively when ``mode`` is
    ``steer_active``, the provider ``can_steer`` and the turn is running;
    else by a restart that the provider's end of the turn applies (the
    active run's ``pending_restart``)."""
    active = state.active
    assert active is not None
    check_steerable(active)
    native = mode == "steer_active" and can_steer and active.provider_turn is not None and not active.interrupt_requested
    if native:
        message = struct_copy(message, run_id=active.run.id, attempt_id=active.attempt.id, node_id=active.root.id)
        batch.put(message)
        batch.emit("message.created", run_id=active.run.id, node_id=active.root.id, message=to_wire(message))
        outcome = Steer("native_steer", active.run.id, message)
    elif active.answered or active.changed_files:
        # The attempt already answered or changed files (what its checkpoint
        # will hold): keep it as its own turn, with its checkpoint, and
        # continue in a new run that supersedes it.
        run, message = graph.new_run(batch, state, message.text, active.run.provider, dispatch_mode=mode,
                                     supersedes=active.run.id, message=message)
        state.queued.insert(0, run)
        graph.renumber_queue(batch, state, root_of)
        outcome = Steer("superseding_run", run.id, message)
        active.pending_restart = PendingRestart(message, superseding_run_id=run.id)
    else:
        message = struct_copy(message, run_id=active.run.id)
        batch.put(message)
        batch.emit("message.created", run_id=active.run.id, node_id=active.root.id, message=to_wire(message))
        outcome = Steer("steering_restart", active.run.id, message)
        active.pending_restart = PendingRestart(message)
    batch.emit("run.steer_requested", run_id=active.run.id, node_id=active.root.id,
               messageId=message.id, strategy=outcome.strategy, mode=mode)
    return outcome


def steer_delivered(batch: ThreadBatch, message: ConversationMessage) -> None:
    """The provider took a native steer: the message is delivered."""
    message = struct_copy(message, status="complete")
    batch.put(message)
    batch.emit("message.steered", run_id=message.run_id, node_id=message.node_id, messageId=message.id)


# -- in the actor -----------------------------------------------------------------------


def steer_active(
    ctx: ThreadContext, command: Command | None, mode: SteerMode, active: ActiveRun, message: ConversationMessage,
    batch: ThreadBatch,
) -> Decision:
    """Steer ``active`` (``steer``); after the commit, deliver the native
    steer or interrupt the turn for the restart."""
    can_steer = ctx.adapter(active.run.provider).capabilities.steer
    outcome = steer(batch, ctx.state, mode, message, can_steer=can_steer, root_of=run_control.root_of(ctx))
    result = results.MessageSendResult(run_id=outcome.run_id, message_id=outcome.message.id,
                                       strategy=outcome.strategy, seq=NO_SEQ)
    if command is not None:
        batch.record_receipt(command.command_id, command.method, result)
    if outcome.strategy == "native_steer":
        provider_thread = ctx.state.provider_thread
        native_thread = provider_thread.native_thread_id if provider_thread else None
        native_turn = active.provider_turn.native_turn_id if active.provider_turn else None
        after: list[Any] = [SendSteer(outcome.message, native_thread, native_turn)]
    else:
        after = run_control.request_interrupt(ctx, active, "steering_restart")
    return Decision(batch, result, after)


def on_steer_delivered(ctx: ThreadContext, message: ConversationMessage) -> Decision:
    """The provider took a native steer (``steer_delivered``)."""
    batch = ctx.batch()
    steer_delivered(batch, message)
    return Decision(batch)


def on_steer_failed(ctx: ThreadContext, message: ConversationMessage, why: str) -> Decision:
    """The provider refused the steer (e.g. the turn had just ended): fall
    back to a restart while the run is active, else run it next."""
    state = ctx.state
    batch = ctx.batch()
    batch.emit("runtime.warning", run_id=message.run_id, node_id=message.node_id,
               message=f"native steer failed ({why}); falling back")
    active = state.active
    if active is not None and active.run.id == message.run_id and active.pending_restart is None:
        return steer_active(ctx, None, "restart_active", active, message, batch)
    run_control.enqueue(batch, state, message.text, state.thread.provider, dispatch_mode="queue_after_active",
                        message=message, root_of=run_control.root_of(ctx))
    return Decision(batch, effects=[StartNext()])


def apply_restart(ctx: ThreadContext, active: ActiveRun, batch: ThreadBatch) -> Transition:
    """The interrupted turn ended: continue as the pending steer asked."""
    pending = active.pending_restart
    assert pending is not None
    if pending.superseding_run_id is not None:
        yield from end_run(ctx, batch, "interrupted", reason=f"superseded by {pending.superseding_run_id}")
    else:
        yield from retry(ctx, batch, "steering_restart", "restarted to apply a steering message",
                         closing_status="interrupted", message=pending.message)


# -- handlers ---------------------------------------------------------------------------


def _check_provider(ctx: ThreadContext, provider: str | None) -> str:
    """The provider the run goes to: the named one (another than the thread's
    is a provider switch, resolved with a handoff when the run starts:
    transfers.py), else the thread's."""
    providers = ctx.config.providers
    provider = provider or ctx.state.thread.provider
    if provider not in providers:
        raise InvalidParams(
            f"unknown provider {provider!r}; configured: {', '.join(sorted(providers))}", field="provider",
        )
    return provider


def _images(ctx: ThreadContext, params: Any, provider: str) -> Transition:
    """The message's images, checked and stored (``providers/images.py``):
    what its record keeps (None: it has none). An instance whose turns take
    no images refuses them first, saying why (``unsupported``); one that
    cannot say yet (an ACP agent not asked yet) is probed, and taken at its
    word or, when the probe cannot tell, left to refuse the turn."""
    if not params.attachments:
        return None
    images.check(params.attachments)
    adapter = ctx.adapter(provider)
    if not adapter.images_known:
        yield ProbeProvider(provider)
    why = adapter.images_refused() if adapter.images_known else None
    if why is not None:
        raise Unsupported(f"{why}: send the message without images, or to an instance that takes them",
                          field="attachments", provider=provider)
    saved = yield SaveAttachments(tuple(params.attachments))
    return list(saved)


def message_send(ctx: ThreadContext, command: Command) -> Transition:
    """``thread.message.send``: start or queue a run, or steer the active one."""
    params = command.params
    state = ctx.state
    mode = params.dispatch_mode.type if params.dispatch_mode is not None else None
    if state.thread.archived_at is not None:
        # Its worktree is gone: it comes back with the thread (issue 27).
        raise InvalidState(f"thread {state.thread_id} is archived: unarchive it first (thread.unarchive)",
                           threadId=state.thread_id)
    # Runs a Stop holds do not keep a new message waiting.
    has_open = state.active is not None or state.next_queued() is not None
    if mode is None:
        mode = "queue_after_active" if has_open else "start_immediately"
    if mode in ("steer_active", "restart_active"):
        if params.merge_back is not None:
            raise InvalidParams(f"a merge-back comes with a run of its own; send it without {mode}", field="mergeBack")
        active = _steer_target(ctx, mode, params.dispatch_mode.target_run_id)  # type: ignore[arg-type]
        attachments = yield from _images(ctx, params, active.run.provider)
        return _steer_command(ctx, command, mode, active, params.text, attachments)  # type: ignore[arg-type]
    if mode == "start_immediately" and has_open:
        busy = state.active.run if state.active is not None else state.next_queued()
        assert busy is not None
        raise InvalidState(
            f"thread {state.thread_id} already has run {busy.id} ({busy.status}); "
            "send with dispatchMode queue_after_active to run after it, or steer_active to change it",
            runId=busy.id,
        )
    provider = _check_provider(ctx, params.provider)
    if params.provider is not None and params.provider != state.thread.provider:
        # A switch to an instance that cannot run here is refused before
        # anything is stored, with why (issue 28 item 2): not a failed run
        # and a thread left on it.
        probe = yield ProbeProvider(provider)
        if not probe.get("usable", True):
            raise InvalidParams(f"provider {provider!r} cannot be used here: {probe.get('why') or 'its probe failed'} "
                                "(`agentd providers` shows each instance)", field="provider", provider=provider)
    merge = files = files_merge = merge_marker = None
    if params.merge_back is not None:
        # Checked before anything is stored; the delta itself is built when the run starts.
        merge = merge_back.prepare(ctx.store, state.thread_id, params.merge_back.fork_thread_id)
        files = yield from merge_back.fork_files(ctx, merge, state.thread.workspace)
        if params.merge_back.files:
            # The fork's files, merged now (issue 27): the message says what happened.
            files_merge, merge_marker = yield from merge_files.merge(ctx, merge, params.merge_back)
    # A run that starts now needs a provider session: past [daemon]
    # max_sessions (idle sessions are stopped first to make room) the message
    # is refused before anything is stored, rather than failing its run. A
    # thread whose idle session is still live needs no room: its claim only
    # keeps that session from being stopped for another until its run starts.
    attachments = yield from _images(ctx, params, provider)
    claim = (yield ClaimSession()) if not has_open else None
    try:
        batch = ctx.batch()
        message = None
        if attachments:
            message = ConversationMessage(id=new_id("msg"), thread_id=state.thread_id, role="user", text=params.text,
                                          status="queued", created_at=batch.now, attachments=attachments)
        run, message = run_control.enqueue(batch, state, params.text, provider, dispatch_mode=mode,
                                           root_of=run_control.root_of(ctx), message=message,
                                           clean_context=params.clean_context)
        merged = None
        if merge is not None and files is not None:
            transfer = merge_back.record_request(batch, state.thread_id, merge, run, files_merge=files_merge)
            merged = results.MergeBackAnswer(
                transfer_id=transfer.id, fork_thread_id=merge.fork.id, run_ids=list(merge.run_ids),
                fork_workspace=files.fork_workspace, files_differ=list(files.differ) if files.differ is not None else None,
                files=merge_files.recorded(batch, transfer, run, merge_marker),
            )
        result = results.MessageSendResult(run_id=run.id, message_id=message.id, queue_held=state.thread.queue_held,
                                           held_run_ids=[r.id for r in state.held_runs()], merge_back=merged, seq=NO_SEQ)
        batch.record_receipt(command.command_id, command.method, result)
        committed = yield Commit(batch)
        yield StartNext()
    finally:
        if claim is not None:
            # The run is started (its busy thread holds the place), or failed.
            yield ReleaseClaim(claim)
    return with_seq(result, committed.seq)


def _steer_target(ctx: ThreadContext, mode: SteerMode, target_run_id: str | None) -> ActiveRun:
    """The active run a steer names (else why not)."""
    if target_run_id is None:
        raise InvalidParams(f"dispatchMode {mode} needs targetRunId, the id of the active run", field="dispatchMode.targetRunId")
    active = ctx.state.active
    if active is None or active.run.id != target_run_id:
        run = ctx.thread_run(target_run_id)
        raise InvalidState(
            f"run {run.id} is {run.status}, not active: only the active run can be steered; "
            "send the message with queue_after_active instead",
            runId=run.id, status=run.status,
        )
    return active


def _steer_command(
    ctx: ThreadContext, command: Command, mode: SteerMode, active: ActiveRun, text: str,
    attachments: list[Any] | None = None,
) -> Decision:
    batch = ctx.batch()
    message = ConversationMessage(
        id=new_id("msg"), thread_id=ctx.thread_id, run_id=active.run.id, role="user", text=text,
        status="queued", created_at=batch.now, attachments=attachments,
    )
    return steer_active(ctx, command, mode, active, message, batch)


def queued_message_promote_to_steer(ctx: ThreadContext, command: Command) -> Decision:
    """``queued-message.promote-to-steer``: a queued message steers the active
    run instead of waiting for its own run (which is cancelled)."""
    state = ctx.state
    message = ctx.store.get(ConversationMessage, command.params.message_id)
    run = next((r for r in state.queued if message is not None and r.user_message_id == message.id), None)
    if message is None or message.thread_id != state.thread_id:
        raise NotFound(f"no message {command.params.message_id} in thread {state.thread_id}", messageId=command.params.message_id)
    if run is None:
        raise InvalidState(f"message {message.id} is not waiting in the queue (it is {message.status})", messageId=message.id)
    active = state.active
    if active is None:
        raise InvalidState(f"nothing is running on thread {state.thread_id} to steer; the queued message will start by itself")
    # Checked before the queued run is cancelled, so a refused promotion
    # leaves the queue as it was.
    check_steerable(active)
    batch = ctx.batch()
    run_control.cancel_queued_run(ctx, batch, run, "promoted_to_steer", message_status=None)
    return steer_active(ctx, command, "steer_active", active, struct_copy(message, run_id=active.run.id), batch)

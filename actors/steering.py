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
from typing import TYPE_CHECKING, Any, Literal

from agentd.protocol.errors import InvalidParams, InvalidState, NotFound
from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.records import ConversationMessage, to_wire

from . import graph, merge_back, run_control
from .graph import ThreadBatch
from .messages import Command, SteerDelivered, SteerFailed
from .providers.base import ProviderConnection, ProviderRuntimeError
from .state import ActiveRun, PendingRestart, ThreadState

if TYPE_CHECKING:
    from .thread_actor import ThreadActor

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


def steer(batch: ThreadBatch, state: ThreadState, mode: SteerMode, message: ConversationMessage, *, can_steer: bool) -> Steer:
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
        graph.renumber_queue(batch, state)
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


async def steer_active(
    actor: ThreadActor, command: Command | None, mode: SteerMode, active: ActiveRun, message: ConversationMessage,
    batch: ThreadBatch,
) -> dict[str, Any]:
    """Steer ``active`` (``steer``), commit, then deliver the native steer or
    interrupt the turn for the restart."""
    can_steer = actor.sessions.adapter(active.run.provider).capabilities.steer
    outcome = steer(batch, actor.state, mode, message, can_steer=can_steer)
    result = {"runId": outcome.run_id, "messageId": outcome.message.id, "strategy": outcome.strategy}
    if command is not None:
        batch.record_receipt(command.command_id, command.method, result)
    committed = await actor.commit(batch)
    if outcome.strategy == "native_steer":
        _deliver_steer(actor, active, outcome.message)
    else:
        run_control.request_interrupt(actor, active, "steering_restart")
    return {**result, "seq": committed.seq}


def _deliver_steer(actor: ThreadActor, active: ActiveRun, message: ConversationMessage) -> None:
    live = actor.sessions.live_session(actor.thread_id)
    provider_thread = actor.state.provider_thread
    native_thread = provider_thread.native_thread_id if provider_thread else None
    native_turn = active.provider_turn.native_turn_id if active.provider_turn else None
    actor.spawn_effect(_send_steer, actor, live[1] if live else None, native_thread, native_turn, message)


async def _send_steer(
    actor: ThreadActor, conn: ProviderConnection | None, native_thread: str | None, native_turn: str | None,
    message: ConversationMessage,
) -> None:
    try:
        if conn is None or native_thread is None or native_turn is None:
            raise ProviderRuntimeError("the provider session is gone")
        await conn.steer_turn(native_thread, native_turn, text=message.text)
    except ProviderRuntimeError as exc:
        await actor.post(SteerFailed(message, str(exc)))
    else:
        await actor.post(SteerDelivered(message))


async def on_steer_delivered(actor: ThreadActor, message: ConversationMessage) -> None:
    """The provider took a native steer (``steer_delivered``)."""
    batch = actor.batch()
    steer_delivered(batch, message)
    await actor.commit(batch)


async def on_steer_failed(actor: ThreadActor, message: ConversationMessage, why: str) -> None:
    """The provider refused the steer (e.g. the turn had just ended): fall
    back to a restart while the run is active, else run it next."""
    state = actor.state
    batch = actor.batch()
    batch.emit("runtime.warning", run_id=message.run_id, node_id=message.node_id,
               message=f"native steer failed ({why}); falling back")
    active = state.active
    if active is not None and active.run.id == message.run_id and active.pending_restart is None:
        await steer_active(actor, None, "restart_active", active, message, batch)
        return
    run_control.enqueue(batch, state, message.text, state.thread.provider, dispatch_mode="queue_after_active", message=message)
    await actor.commit(batch)
    actor.start_next()


async def apply_restart(actor: ThreadActor, active: ActiveRun, batch: ThreadBatch) -> None:
    """The interrupted turn ended: continue as the pending steer asked."""
    pending = active.pending_restart
    assert pending is not None
    if pending.superseding_run_id is not None:
        await actor.end_run(batch, "interrupted", reason=f"superseded by {pending.superseding_run_id}")
    else:
        await actor.retry(batch, "steering_restart", "restarted to apply a steering message",
                          closing_status="interrupted", message=pending.message)


# -- handlers ---------------------------------------------------------------------------


def _check_provider(actor: ThreadActor, provider: str | None) -> str:
    """The provider the run goes to: the named one (another than the thread's
    is a provider switch, resolved with a handoff when the run starts:
    transfers.py), else the thread's."""
    providers = actor.config.providers
    provider = provider or actor.state.thread.provider
    if provider not in providers:
        raise InvalidParams(
            f"unknown provider {provider!r}; configured: {', '.join(sorted(providers))}", field="provider",
        )
    return provider


async def message_send(actor: ThreadActor, command: Command) -> dict[str, Any]:
    """``thread.message.send``: start or queue a run, or steer the active one."""
    params = command.params
    state = actor.state
    mode = params.dispatch_mode.type if params.dispatch_mode is not None else None
    # Runs a Stop holds do not keep a new message waiting.
    has_open = state.active is not None or state.next_queued() is not None
    if mode is None:
        mode = "queue_after_active" if has_open else "start_immediately"
    if mode in ("steer_active", "restart_active"):
        if params.merge_back is not None:
            raise InvalidParams(f"a merge-back comes with a run of its own; send it without {mode}", field="mergeBack")
        return await _steer_command(actor, command, mode, params.dispatch_mode.target_run_id, params.text)
    if mode == "start_immediately" and has_open:
        busy = state.active.run if state.active is not None else state.next_queued()
        raise InvalidState(
            f"thread {state.thread_id} already has run {busy.id} ({busy.status}); "
            "send with dispatchMode queue_after_active to run after it, or steer_active to change it",
            runId=busy.id,
        )
    provider = _check_provider(actor, params.provider)
    merge = files = None
    if params.merge_back is not None:
        # Checked before anything is stored; the delta itself is built when the run starts.
        merge = merge_back.prepare(actor.store, state.thread_id, params.merge_back.fork_thread_id)
        files = await merge_back.fork_files(actor, merge, state.thread.workspace)
    # A run that starts now needs a provider session: past [daemon]
    # max_sessions (idle sessions are stopped first to make room) the message
    # is refused before anything is stored, rather than failing its run. A
    # thread whose idle session is still live needs no room: its claim only
    # keeps that session from being stopped for another until its run starts.
    claim = await actor.sessions.claim_session(state.thread_id) if not has_open else None
    try:
        batch = actor.batch()
        run, message = run_control.enqueue(batch, state, params.text, provider, dispatch_mode=mode,
                                           clean_context=params.clean_context)
        result = {"runId": run.id, "messageId": message.id, "queueHeld": state.thread.queue_held,
                  "heldRunIds": [r.id for r in state.held_runs()]}
        if merge is not None and files is not None:
            transfer = merge_back.record_request(batch, state.thread_id, merge, run)
            result["mergeBack"] = {
                "transferId": transfer.id, "forkThreadId": merge.fork.id, "runIds": list(merge.run_ids),
                "forkWorkspace": files.fork_workspace, "filesDiffer": list(files.differ) if files.differ is not None else None,
            }
        batch.record_receipt(command.command_id, command.method, result)
        committed = await actor.commit(batch)
        actor.start_next()
    finally:
        if claim is not None:
            actor.sessions.release_claim(claim)  # the run is started (its busy thread holds the place), or failed
    return {**result, "seq": committed.seq}


async def _steer_command(
    actor: ThreadActor, command: Command, mode: SteerMode, target_run_id: str | None, text: str,
) -> dict[str, Any]:
    if target_run_id is None:
        raise InvalidParams(f"dispatchMode {mode} needs targetRunId, the id of the active run", field="dispatchMode.targetRunId")
    active = actor.state.active
    if active is None or active.run.id != target_run_id:
        run = actor.thread_run(target_run_id)
        raise InvalidState(
            f"run {run.id} is {run.status}, not active: only the active run can be steered; "
            "send the message with queue_after_active instead",
            runId=run.id, status=run.status,
        )
    batch = actor.batch()
    message = ConversationMessage(
        id=new_id("msg"), thread_id=actor.thread_id, run_id=active.run.id, role="user", text=text,
        status="queued", created_at=batch.now,
    )
    return await steer_active(actor, command, mode, active, message, batch)


async def queued_message_promote_to_steer(actor: ThreadActor, command: Command) -> dict[str, Any]:
    """``queued-message.promote-to-steer``: a queued message steers the active
    run instead of waiting for its own run (which is cancelled)."""
    state = actor.state
    message = actor.store.get(ConversationMessage, command.params.message_id)
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
    batch = actor.batch()
    run_control.cancel_queued_run(actor, batch, run, "promoted_to_steer", message_status=None)
    return await steer_active(actor, command, "steer_active", active, struct_copy(message, run_id=active.run.id), batch)

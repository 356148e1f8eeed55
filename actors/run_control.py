"""Run control for ThreadActor: steer, restart, queue, interrupt and Stop
(SPEC F3, F10).

Policy (F3): a steer goes to the provider natively when it can steer; when it
cannot, or the client asked for ``restart_active``, the active turn is
interrupted and, once the provider says it ended, the run gets attempt N+1
(``steering_restart``) carrying the steering message — or, when the attempt had
already given a final answer, a new run that ``supersedesRunId`` it.
Interrupted attempts stay in the graph.

Interrupt (F10): agentd records ``run.interrupt_requested`` and asks the
provider; the run ends only when the provider reports the turn ended. A
provider that cannot interrupt has its session stopped instead; one that does
not answer within the grace period is escalated to a session stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from agentd.protocol.errors import InvalidParams, InvalidState, NotFound
from agentd.store.batch import WriteBatch
from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.records import ConversationMessage, Effect, ExecutionNode, RunAttempt, to_wire

from .active import ActiveRun, PendingRestart
from .messages import Command, EffectDone
from .providers.base import ProviderRuntimeError

if TYPE_CHECKING:
    from .thread_actor import ThreadActor

#: relationships of child threads that belong to (and stop with) their parent
DELEGATED = frozenset({"delegated_task", "subagent"})


@dataclass
class InternalStop:
    """``thread.stop`` sent by a parent's Stop to a delegated child."""

    thread_id: str


async def stop_delegated_children(registry, thread_id: str) -> None:
    """``thread.stop`` to every delegated descendant of ``thread_id``,
    depth-first, each handled by its own actor (no cross-thread lock)."""
    store = registry.store
    stack = [c for c in reversed(store.thread_children(thread_id)) if c.relationship_to_parent in DELEGATED]
    while stack:
        child = stack.pop()
        try:
            await registry.call(child.id, "thread.stop", InternalStop(child.id))
        except NotFound:
            continue
        stack.extend(c for c in reversed(store.thread_children(child.id)) if c.relationship_to_parent in DELEGATED)


class RunControlMixin:
    # -- steering (F3) ----------------------------------------------------------------

    async def _steer(self: ThreadActor, command: Command, mode: str, target_run_id: str | None, text: str) -> dict[str, Any]:
        if target_run_id is None:
            raise InvalidParams(f"dispatchMode {mode} needs targetRunId, the id of the active run", field="dispatchMode.targetRunId")
        active = self.active
        if active is None or active.run.id != target_run_id:
            run = self._thread_run(target_run_id)
            raise InvalidState(
                f"run {run.id} is {run.status}, not active: only the active run can be steered; "
                "send the message with queue_after_active instead",
                runId=run.id, status=run.status,
            )
        message = ConversationMessage(
            id=new_id("msg"), thread_id=self.thread_id, run_id=active.run.id, role="user", text=text,
            status="queued", created_at=self.now(),
        )
        return await self._steer_with(command, mode, active, message, WriteBatch())

    async def _steer_with(
        self: ThreadActor, command: Command | None, mode: str, active: ActiveRun, message: ConversationMessage, batch: WriteBatch,
    ) -> dict[str, Any]:
        capabilities = self.sessions.adapter(active.run.provider).capabilities
        if active.pending_restart is not None:
            raise InvalidState(
                f"run {active.run.id} is already restarting for an earlier steer; "
                "send this message with queue_after_active, or steer the run once it has restarted",
                runId=active.run.id,
            )
        native = mode == "steer_active" and capabilities.steer and active.provider_turn is not None and not active.interrupt_requested
        if native:
            strategy, run_id = "native_steer", active.run.id
            message = struct_copy(message, run_id=active.run.id, attempt_id=active.attempt.id)
            batch.put(message)
            self._event(batch, "message.created", run_id=run_id, message=to_wire(message))
        elif active.answered:
            # The attempt already answered: keep it as its own turn and
            # continue in a new run that supersedes it.
            run, message = self._new_run(batch, message.text, active.run.provider, dispatch_mode=mode,
                                         supersedes=active.run.id, message=message)
            self.queued.insert(0, run)
            self._renumber_queue(batch)
            strategy, run_id = "superseding_run", run.id
        else:
            strategy, run_id = "steering_restart", active.run.id
            message = struct_copy(message, run_id=active.run.id)
            batch.put(message)
            self._event(batch, "message.created", run_id=run_id, message=to_wire(message))
        self._event(batch, "run.steer_requested", run_id=active.run.id, node_id=active.root.id,
                    messageId=message.id, strategy=strategy, mode=mode)
        result = {"runId": run_id, "messageId": message.id, "strategy": strategy}
        if command is not None and command.command_id is not None:
            batch.set_receipt(command.command_id, command.method, result, self.now())
        committed = await self._commit(batch)
        if native:
            self._deliver_steer(active, message)
        else:
            active.pending_restart = PendingRestart(message, superseding_run_id=run_id if strategy == "superseding_run" else None)
            self._request_interrupt(active, "steering_restart")
        return {**result, "seq": committed.seq}

    def _deliver_steer(self: ThreadActor, active: ActiveRun, message: ConversationMessage) -> None:
        live = self.sessions.live_session(self.thread_id)
        native_thread = self.provider_thread.native_thread_id if self.provider_thread else None
        native_turn = active.provider_turn.native_turn_id if active.provider_turn else None

        async def deliver() -> None:
            try:
                if live is None or native_thread is None or native_turn is None:
                    raise ProviderRuntimeError("the provider session is gone")
                await live[1].steer_turn(native_thread, native_turn, text=message.text)
            except ProviderRuntimeError as exc:
                why = str(exc)  # ``exc`` is unbound once the except block ends
                await self._post(EffectDone(lambda actor: actor._on_steer_failed(message, why)))
            else:
                await self._post(EffectDone(lambda actor: actor._on_steer_delivered(message)))

        self._spawn_effect(deliver)

    async def _on_steer_delivered(self: ThreadActor, message: ConversationMessage) -> None:
        batch = WriteBatch()
        message = struct_copy(message, status="complete")
        batch.put(message)
        self._event(batch, "message.steered", run_id=message.run_id, messageId=message.id)
        await self._commit(batch)

    async def _on_steer_failed(self: ThreadActor, message: ConversationMessage, why: str) -> None:
        """The provider refused the steer (e.g. the turn had just ended): fall
        back to a restart while the run is active, else run it next."""
        batch = WriteBatch()
        self._event(batch, "runtime.warning", run_id=message.run_id, message=f"native steer failed ({why}); falling back")
        active = self.active
        if active is not None and active.run.id == message.run_id and active.pending_restart is None:
            await self._steer_with(None, "restart_active", active, message, batch)
            return
        run, _message = self._new_run(batch, message.text, self.thread.provider, dispatch_mode="queue_after_active", message=message)
        await self._commit(batch)
        self.queued.append(run)
        self._maybe_start_next()

    async def _apply_restart(self: ThreadActor, active: ActiveRun, batch: WriteBatch | None = None) -> None:
        """The interrupted turn ended: continue as the pending steer asked."""
        pending = active.pending_restart
        assert pending is not None
        batch = batch or WriteBatch()
        if pending.superseding_run_id is not None:
            await self._end_run(batch, "interrupted", reason=f"superseded by {pending.superseding_run_id}")
        else:
            await self._retry(active, "steering_restart", "restarted to apply a steering message",
                              batch=batch, closing_status="interrupted", message=pending.message)

    # -- interrupt and Stop (F10) ---------------------------------------------------------

    def _request_interrupt(self: ThreadActor, active: ActiveRun, reason: str) -> None:
        active.interrupt_requested = True
        active.interrupt_reason = reason
        self._send_interrupt(active)

    def _drop_pending_restart(self: ThreadActor, batch: WriteBatch, active: ActiveRun) -> None:
        """An explicit interrupt or Stop wins over a steer still waiting to
        restart the run: the run ends; a same-run steering message is kept
        (``not_sent``) for the person to re-send. A superseding run already
        waits in the queue and starts unless the queue is held."""
        pending = active.pending_restart
        if pending is None:
            return
        active.pending_restart = None
        if pending.superseding_run_id is None:
            batch.put(struct_copy(pending.message, status="not_sent"))
            self._event(batch, "message.not_sent", run_id=active.run.id, messageId=pending.message.id,
                        reason="the run was interrupted before the steer could restart it")

    def _send_interrupt(self: ThreadActor, active: ActiveRun) -> None:
        """Ask the provider to interrupt the running turn (once it has started)."""
        if active.interrupt_sent or active.provider_turn is None:
            return
        active.interrupt_sent = True
        capabilities = self.sessions.adapter(active.run.provider).capabilities
        live = self.sessions.live_session(self.thread_id)
        if not capabilities.interrupt or live is None:
            self._spawn_effect(self.sessions.stop_session, self.thread_id,
                               "interrupt_unsupported" if not capabilities.interrupt else "interrupt_no_session")
            return
        attempt_id = active.attempt.id
        native_thread = self.provider_thread.native_thread_id
        native_turn = active.provider_turn.native_turn_id
        self._timers[f"interrupt:{attempt_id}"] = trio.current_time() + self.registry.config.interrupt_grace

        async def send() -> None:
            try:
                await live[1].interrupt_turn(native_thread, native_turn)
            except ProviderRuntimeError as exc:
                why = f"the provider refused the interrupt: {exc}"  # ``exc`` is unbound after the block
                await self._post(EffectDone(lambda actor: actor._escalate_interrupt(attempt_id, why)))

        self._spawn_effect(send)

    async def _on_interrupt_overdue(self: ThreadActor, attempt_id: str) -> None:
        grace = self.registry.config.interrupt_grace
        await self._escalate_interrupt(attempt_id, f"the provider did not end the turn within {grace:g}s of the interrupt")

    async def _escalate_interrupt(self: ThreadActor, attempt_id: str, why: str) -> None:
        active = self.active
        if active is None or active.attempt.id != attempt_id:
            return
        batch = WriteBatch()
        self._event(batch, "runtime.warning", run_id=active.run.id, node_id=active.root.id,
                    message=f"{why}; stopping the provider session")
        await self._commit(batch)
        self._spawn_effect(self.sessions.stop_session, self.thread_id, "interrupt_escalated")

    async def _cmd_run_interrupt(self: ThreadActor, command: Command) -> dict[str, Any]:
        params = command.params
        active = self.active
        is_active = active is not None and active.run.id == params.run_id
        if not is_active:
            run = self._thread_run(params.run_id)
            if not params.hold_queue:
                hint = "cancel it with queued-run.cancel" if run.status == "queued" else "it has already ended"
                raise InvalidState(f"run {run.id} is {run.status}, not running: {hint}", runId=run.id, status=run.status)
        batch = WriteBatch()
        cascade = None
        if params.hold_queue:
            self._hold_queue(batch)
            cascade = self._stop_cascade_effect(batch)
        if is_active:
            self._drop_pending_restart(batch, active)
            self._event(batch, "run.interrupt_requested", run_id=active.run.id, node_id=active.root.id, holdQueue=params.hold_queue)
        result = {"runId": params.run_id, "interruptRequested": is_active, "queueHeld": self.thread.queue_held}
        if command.command_id is not None:
            batch.set_receipt(command.command_id, command.method, result, self.now())
        committed = await self._commit(batch)
        if is_active:
            self._request_interrupt(active, "interrupted")
        if cascade is not None:
            self._spawn_effect(self._stop_delegated_children, cascade.id)
        return {**result, "seq": committed.seq}

    async def _cmd_thread_stop(self: ThreadActor, command: Command) -> dict[str, Any]:
        """The Stop button: hold the queue, interrupt the active run, then —
        after commit, outside this thread's lock — stop delegated children."""
        batch = WriteBatch()
        self._hold_queue(batch)
        active = self.active
        if active is not None:
            self._drop_pending_restart(batch, active)
            self._event(batch, "run.interrupt_requested", run_id=active.run.id, node_id=active.root.id, holdQueue=True)
        result = {"threadId": self.thread_id, "interruptedRunId": active.run.id if active else None, "queueHeld": True}
        cascade = self._stop_cascade_effect(batch)
        if command.command_id is not None:
            batch.set_receipt(command.command_id, command.method, result, self.now())
        committed = await self._commit(batch) if batch else None
        if active is not None:
            self._request_interrupt(active, "stopped")
        if not isinstance(command.params, InternalStop):
            # Only the thread the person stopped walks its tree; each child
            # is stopped by its own actor, depth-first.
            self._spawn_effect(self._stop_delegated_children, cascade.id)
        return {**result, "seq": committed.seq if committed else self.store.last_seq}

    def _hold_queue(self: ThreadActor, batch: WriteBatch) -> None:
        if not self.thread.queue_held:
            self._set_thread(batch, queue_held=True)
            self._event(batch, "thread.queue_held", queuedRunIds=[r.id for r in self.queued])

    def _stop_cascade_effect(self: ThreadActor, batch: WriteBatch) -> Effect:
        """The outbox entry for stopping delegated children: replay-safe, so a
        restart before it finished runs it again."""
        effect = Effect(id=new_id("eff"), kind="thread.stop_children", thread_id=self.thread_id,
                        payload={"threadId": self.thread_id}, replay_safe=True, created_at=self.now())
        batch.put(effect)
        return effect

    async def _stop_delegated_children(self: ThreadActor, effect_id: str) -> None:
        await stop_delegated_children(self.registry, self.thread_id)

        async def settle(actor: ThreadActor) -> None:
            batch = WriteBatch()
            actor._settle_effect(batch, effect_id, "done")
            if batch:
                await actor._commit(batch)

        await self._post(EffectDone(settle))

    async def _cmd_thread_queue_release(self: ThreadActor, command: Command) -> dict[str, Any]:
        if not self.thread.queue_held:
            raise InvalidState(f"the queue of thread {self.thread_id} is not held")
        batch = WriteBatch()
        self._set_thread(batch, queue_held=False)
        self._event(batch, "thread.queue_released", queuedRunIds=[r.id for r in self.queued])
        committed = await self._commit(batch)
        self._maybe_start_next()
        return {"threadId": self.thread_id, "queuedRunIds": [r.id for r in self.queued], "seq": committed.seq}

    # -- the queue ----------------------------------------------------------------------

    def _queued_run(self: ThreadActor, run_id: str):
        for run in self.queued:
            if run.id == run_id:
                return run
        run = self._thread_run(run_id)
        hint = "interrupt it with run.interrupt" if self.active and self.active.run.id == run_id else "it is not waiting in the queue"
        raise InvalidState(f"run {run.id} is {run.status}, not queued: {hint}", runId=run.id, status=run.status)

    def _renumber_queue(self: ThreadActor, batch: WriteBatch) -> None:
        """Give the queued runs their ordinals in queue order (ordinals are
        the order runs start in)."""
        ordinals = sorted(r.ordinal for r in self.queued)
        for index, run in enumerate(self.queued):
            if run.ordinal != ordinals[index]:
                run = struct_copy(run, ordinal=ordinals[index])
                batch.put(run)
                self.queued[index] = run

    def _cancel_queued(self: ThreadActor, batch: WriteBatch, run, reason: str, *, message_status: str = "cancelled") -> None:
        now = self.now()
        self.queued.remove(run)
        run = struct_copy(run, status="cancelled", reason=reason, ended_at=now)
        attempt = self.store.get(RunAttempt, run.selected_attempt_id)
        root = self.store.get(ExecutionNode, run.root_node_id)
        message = self.store.get(ConversationMessage, run.user_message_id)
        if attempt is not None:
            batch.put(struct_copy(attempt, status="cancelled", error=reason, ended_at=now))
        if root is not None:
            batch.put(struct_copy(root, status="cancelled", summary=reason, ended_at=now))
        if message is not None and message_status:
            batch.put(struct_copy(message, status=message_status))
        self._settle_effect(batch, "eff_" + run.id.partition("_")[2], "retired", reason=reason)
        batch.put(run)
        self._event(batch, "run.cancelled", run_id=run.id, node_id=run.root_node_id, run=to_wire(run))

    async def _cmd_queued_run_cancel(self: ThreadActor, command: Command) -> dict[str, Any]:
        run = self._queued_run(command.params.run_id)
        batch = WriteBatch()
        self._cancel_queued(batch, run, "cancelled_by_user")
        committed = await self._commit(batch)
        return {"runId": run.id, "status": "cancelled", "seq": committed.seq}

    async def _cmd_queued_run_reorder(self: ThreadActor, command: Command) -> dict[str, Any]:
        wanted = list(command.params.run_ids)
        current = {r.id: r for r in self.queued}
        if sorted(wanted) != sorted(current):
            raise InvalidParams(
                f"runIds must list exactly the queued runs of thread {self.thread_id}: {', '.join(current) or 'none'}",
                field="runIds",
            )
        self.queued = [current[i] for i in wanted]
        batch = WriteBatch()
        self._renumber_queue(batch)
        self._event(batch, "thread.queue_reordered", queuedRunIds=wanted)
        committed = await self._commit(batch)
        return {"queuedRunIds": wanted, "seq": committed.seq}

    async def _cmd_queued_message_promote_to_steer(self: ThreadActor, command: Command) -> dict[str, Any]:
        message = self.store.get(ConversationMessage, command.params.message_id)
        run = next((r for r in self.queued if message is not None and r.user_message_id == message.id), None)
        if message is None or message.thread_id != self.thread_id:
            raise NotFound(f"no message {command.params.message_id} in thread {self.thread_id}", messageId=command.params.message_id)
        if run is None:
            raise InvalidState(f"message {message.id} is not waiting in the queue (it is {message.status})", messageId=message.id)
        active = self.active
        if active is None:
            raise InvalidState(f"nothing is running on thread {self.thread_id} to steer; the queued message will start by itself")
        batch = WriteBatch()
        self._cancel_queued(batch, run, "promoted_to_steer", message_status="")
        return await self._steer_with(command, "steer_active", active, struct_copy(message, run_id=active.run.id), batch)

"""ThreadActor: the one task that changes one AppThread (SPEC F2, F16, F18).

Client commands and provider events for a thread enter the same bounded
mailbox, and the actor handles them one at a time — that is the thread's lock,
and no command ever waits on another thread's. A handler reads in-memory
state, decides, commits one write batch through the group-commit writer and
only then replies; the writer publishes the batch's events before the actor
wakes, so nothing is seen that is not durable. Work that must wait for a
provider or touches other threads runs after the commit, as an effect task
that reports back through the mailbox.

Streamed assistant text is the one exception to commit-then-publish: each
delta is published at once as an ephemeral ``message.delta`` and buffered;
the buffer is written as one ``message.appended`` record on a short timer, when
it grows large, when the message ends and at the completion barrier.

The command handlers of run control (F3, F10), requests (F15) and plans (F16)
live in mixins beside this module; this one holds the loop, run start, the
provider-event mapping and the completion barrier.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Callable

import trio

from agentd.protocol.errors import AgentdError, InternalError, InvalidParams, InvalidState, NotFound, Unsupported
from agentd.store.batch import WriteBatch
from agentd.store.db import Store, struct_copy
from agentd.store.hub import EventHub
from agentd.store.ids import new_id
from agentd.store.records import (
    NODE_TERMINAL,
    AppThread,
    ContextHandoff,
    ConversationMessage,
    Effect,
    ExecutionNode,
    ProviderThread,
    ProviderTurn,
    Run,
    RunAttempt,
    to_wire,
)

from .active import ActiveRun, OpenMessage
from .artifacts import ArtifactsMixin
from .handoff import portable_context
from .messages import AttemptStartFailed, Command, EffectDone, FlushDue, HandoffDraft, ProviderThreadReady
from .providers.base import (
    ItemCompleted,
    ItemStarted,
    NativeThreadMissing,
    PlanUpdated,
    ProviderEvent,
    ProviderRuntimeError,
    RequestOpened,
    RuntimeWarning_,
    SessionExited,
    SessionHost,
    TextDelta,
    TurnCompleted,
    TurnStarted,
)
from .requests import RequestsMixin
from .run_control import RunControlMixin

if TYPE_CHECKING:
    from .registry import ThreadRegistry

log = logging.getLogger(__name__)


def turn_start_effect_id(run_id: str) -> str:
    """The outbox entry of a run's turn start: one per run, found by its id."""
    return "eff_" + run_id.partition("_")[2]

MAILBOX_SIZE = 1024
TEXT_FLUSH_INTERVAL = 0.05  # seconds a delta may wait before it is durable
TEXT_FLUSH_BYTES = 64 * 1024


class ThreadActor(RunControlMixin, RequestsMixin, ArtifactsMixin):
    """Owns one AppThread's state and mailbox.

    Args:
        registry: the registry that spawned it (for retiring and effects).
        thread: the thread record as stored.
        queued: its queued runs, in the order they will start.
        provider_thread: its current ProviderThread, if any.
    """

    def __init__(
        self,
        registry: ThreadRegistry,
        thread: AppThread,
        queued: list[Run],
        provider_thread: ProviderThread | None,
    ) -> None:
        self.registry = registry
        self.store: Store = registry.store
        self.hub: EventHub = registry.hub
        self.sessions: SessionHost = registry.sessions
        self.now: Callable[[], float] = registry.wall_clock
        self.thread = thread
        self.queued = queued
        self.provider_thread = provider_thread
        self.active: ActiveRun | None = None
        self.send_channel, self._receive_channel = trio.open_memory_channel[Any](MAILBOX_SIZE)
        #: name -> trio-clock deadline; the loop wakes for the earliest
        self._timers: dict[str, float] = {}
        self._effects = 0  # effect tasks still running
        self._nursery: trio.Nursery | None = None

    @property
    def thread_id(self) -> str:
        return self.thread.id

    @property
    def busy(self) -> bool:
        """True while a run is starting or running, runs wait to start, or
        effects are still in flight."""
        return self.active is not None or bool(self.queued and not self.thread.queue_held) or self._effects > 0

    # -- the loop -------------------------------------------------------------

    async def run(self, *, idle_timeout: float, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Handle mailbox items until idle for ``idle_timeout``, then retire."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            self._maybe_start_next()
            idle_since = trio.current_time()
            while True:
                deadline = idle_since + idle_timeout if not self.busy else float("inf")
                if self._timers:
                    deadline = min(deadline, *self._timers.values())
                item = None
                with trio.move_on_at(deadline):
                    item = await self._receive_channel.receive()
                if item is None:
                    now = trio.current_time()
                    due = [name for name, at in self._timers.items() if at <= now]
                    if due:
                        for name in due:
                            del self._timers[name]
                            await self._handle(("timer", name))
                        continue
                    if not self.busy and self.registry._retire(self):
                        nursery.cancel_scope.cancel()
                        return
                    idle_since = now
                    continue
                await self._handle(item)
                idle_since = trio.current_time()

    async def _handle(self, item: Any) -> None:
        try:
            if isinstance(item, Command):
                await self._handle_command(item)
            elif isinstance(item, ProviderEvent):
                await self._handle_provider_event(item)
            elif isinstance(item, ProviderThreadReady):
                await self._on_provider_thread_ready(item)
            elif isinstance(item, AttemptStartFailed):
                await self._on_attempt_start_failed(item)
            elif isinstance(item, FlushDue):
                await self._flush_text()
            elif isinstance(item, EffectDone):
                await item.apply(self)
            elif isinstance(item, tuple) and item[0] == "timer":
                await self._on_timer(item[1])
            else:  # pragma: no cover - a programming error
                log.error("thread %s: unknown mailbox item %r", self.thread_id, item)
        except AgentdError as exc:
            if isinstance(item, Command):
                item.reply.fail(exc)
            else:
                log.warning("thread %s: %s while handling %s", self.thread_id, exc, type(item).__name__)
        except Exception as exc:
            log.exception("thread %s: handler failed on %s", self.thread_id, type(item).__name__)
            if isinstance(item, Command):
                item.reply.fail(InternalError(f"agentd failed handling {item.method}: {exc}"))

    async def _on_timer(self, name: str) -> None:
        if name == "flush":
            await self._flush_text()
        elif name.startswith("interrupt:"):
            await self._on_interrupt_overdue(name.partition(":")[2])

    def _spawn_effect(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn`` after the current commit, outside the thread's lock; it
        reports back through the mailbox (``EffectDone``) if it changes state."""
        assert self._nursery is not None
        self._effects += 1

        async def run() -> None:
            try:
                await fn(*args)
            except Exception:  # noqa: BLE001 - an effect must not take the actor down
                log.exception("thread %s: effect %s failed", self.thread_id, getattr(fn, "__name__", fn))
            finally:
                self._effects -= 1

        self._nursery.start_soon(run)

    async def _post(self, item: Any) -> None:
        try:
            await self.send_channel.send(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):  # pragma: no cover - retired meanwhile
            pass

    async def _commit(self, batch: WriteBatch):
        return await self.store.commit(batch)

    def _event(self, batch: WriteBatch, type: str, *, run_id: str | None = None, node_id: str | None = None, **payload: Any) -> None:
        batch.event(type, thread_id=self.thread_id, run_id=run_id, node_id=node_id, at=self.now(), **payload)

    def _set_thread(self, batch: WriteBatch, **changes: Any) -> None:
        self.thread = struct_copy(self.thread, updated_at=self.now(), **changes)
        batch.put(self.thread)

    def _settle_effect(self, batch: WriteBatch, effect_id: str, status: str, *, reason: str | None = None) -> None:
        """Close an outbox entry (if it is still pending)."""
        effect = self.store.get(Effect, effect_id)
        if effect is not None and effect.status == "pending":
            batch.put(struct_copy(effect, status=status, reason=reason))

    def _thread_run(self, run_id: str) -> Run:
        """A run of this thread from the store (NotFound-safe for commands)."""
        run = self.store.run(run_id)
        if run is None or run.thread_id != self.thread_id:
            raise NotFound(f"no run {run_id} in thread {self.thread_id}", runId=run_id)
        return run

    # -- commands -----------------------------------------------------------------

    async def _handle_command(self, command: Command) -> None:
        if command.command_id is not None:
            receipt = self.store.receipt(command.command_id)
            if receipt is not None:
                command.reply.set(self.registry.check_receipt(receipt, command.method))
                return
        handler = getattr(self, "_cmd_" + command.method.replace(".", "_").replace("-", "_"), None)
        if handler is None:
            raise Unsupported(f"{command.method} is not handled by thread actors")
        command.reply.set(await handler(command))

    async def _cmd_thread_message_send(self, command: Command) -> dict[str, Any]:
        params = command.params
        mode = params.dispatch_mode.type if params.dispatch_mode is not None else None
        has_open = self.active is not None or bool(self.queued)
        if mode is None:
            mode = "queue_after_active" if has_open else "start_immediately"
        if mode in ("steer_active", "restart_active"):
            return await self._steer(command, mode, params.dispatch_mode.target_run_id, params.text)
        if mode == "start_immediately" and has_open:
            busy = self.active.run if self.active is not None else self.queued[0]
            raise InvalidState(
                f"thread {self.thread_id} already has run {busy.id} ({busy.status}); "
                "send with dispatchMode queue_after_active to run after it, or steer_active to change it",
                runId=busy.id,
            )
        provider = self._check_provider(params.provider)
        batch = WriteBatch()
        run, message = self._new_run(batch, params.text, provider, dispatch_mode=mode)
        result = {"runId": run.id, "messageId": message.id}
        if command.command_id is not None:
            batch.set_receipt(command.command_id, command.method, result, self.now())
        committed = await self._commit(batch)
        self.queued.append(run)
        self._maybe_start_next()
        return {**result, "seq": committed.seq}

    def _check_provider(self, provider: str | None) -> str:
        provider = provider or self.thread.provider
        if provider not in self.registry.config.providers:
            raise InvalidParams(
                f"unknown provider {provider!r}; configured: {', '.join(sorted(self.registry.config.providers))}",
                field="provider",
            )
        if provider != self.thread.provider and self.thread.run_count > 0:
            raise Unsupported(
                f"switching thread {self.thread_id} from {self.thread.provider} to {provider} needs a context "
                "handoff, which this agentd does not do yet; create a new thread for that provider"
            )
        return provider

    def _new_run(
        self, batch: WriteBatch, text: str, provider: str, *, dispatch_mode: str, supersedes: str | None = None,
        message: ConversationMessage | None = None,
    ) -> tuple[Run, ConversationMessage]:
        """Add a queued run (message, run, root node, first attempt) to ``batch``."""
        now = self.now()
        ordinal = self.thread.run_count + 1
        run_id, node_id, attempt_id = new_id("run"), new_id("nod"), new_id("att")
        if message is None:
            message = ConversationMessage(
                id=new_id("msg"), thread_id=self.thread_id, run_id=run_id, role="user", text=text,
                status="queued", created_at=now,
            )
        else:
            message = struct_copy(message, run_id=run_id, status="queued")
        root = ExecutionNode(
            id=node_id, thread_id=self.thread_id, run_id=run_id, attempt_id=attempt_id, kind="root_turn",
            counts_for_run=True, title=f"run {ordinal}", created_at=now,
        )
        attempt = RunAttempt(
            id=attempt_id, run_id=run_id, thread_id=self.thread_id, number=1, reason="initial",
            root_node_id=node_id, created_at=now,
        )
        run = Run(
            id=run_id, thread_id=self.thread_id, ordinal=ordinal, provider=provider, user_message_id=message.id,
            root_node_id=node_id, selected_attempt_id=attempt_id, attempt_count=1, supersedes_run_id=supersedes,
            created_at=now,
        )
        self._set_thread(batch, run_count=ordinal, provider=provider)
        batch.put_all(message, run, root, attempt)
        # The outbox entry for "send this run to the provider": process-bound,
        # so a restart retires it with a reason instead of sending it later.
        batch.put(Effect(id=turn_start_effect_id(run_id), kind="provider.turn_start", thread_id=self.thread_id,
                         payload={"runId": run_id}, replay_safe=False, created_at=now))
        self._event(batch, "message.created", run_id=run_id, message=to_wire(message))
        self._event(batch, "run.queued", run_id=run_id, node_id=node_id, run=to_wire(run), dispatchMode=dispatch_mode)
        return run, message

    # -- starting runs ------------------------------------------------------------

    def _maybe_start_next(self) -> None:
        if self.active is not None or not self.queued or self.thread.queue_held or self._nursery is None:
            return
        if self.registry.shutting_down:
            return  # left queued: the next start reconciles it (cancelled, message not_sent)
        run = self.queued.pop(0)
        attempt = self.store.get(RunAttempt, run.selected_attempt_id)
        root = self.store.get(ExecutionNode, run.root_node_id)
        message = self.store.get(ConversationMessage, run.user_message_id)
        if attempt is None or root is None or message is None:  # pragma: no cover - store corruption
            log.error("run %s is missing its attempt, root node or message; skipped", run.id)
            self._maybe_start_next()
            return
        self._activate(ActiveRun(run=run, attempt=attempt, root=root, user_message=message))

    def _activate(self, active: ActiveRun) -> None:
        self.active = active
        self.sessions.mark_busy(self.thread_id, True)
        assert self._nursery is not None
        self._nursery.start_soon(self._starter, active)

    async def _starter(self, active: ActiveRun) -> None:
        """Open the runtime and native thread, then start the turn; report
        every outcome through the mailbox. Cancelled if the attempt is closed
        first (a crash recovery must not race a starter of the old attempt)."""
        with active.starter_scope:
            await self._start_attempt(active)

    async def _start_attempt(self, active: ActiveRun) -> None:
        attempt_id = active.attempt.id
        text = active.user_message.text
        try:
            cwd = self.thread.workspace
            await trio.to_thread.run_sync(lambda: os.makedirs(cwd, mode=0o700, exist_ok=True))
            session_id, conn = await self.sessions.ensure_session(self.thread_id, active.run.provider)
            # Known at once (same loop, no await in between): an exit of an
            # older session of this thread must not be blamed on this attempt.
            active.session_id = session_id
            current = self.provider_thread
            lost: str | None = None
            if current is not None and current.status != "unusable":
                native = current.native_thread_id
                turns = None
                try:
                    if native not in conn.loaded_threads:
                        turns = (await conn.resume_thread(native, cwd=cwd)).turn_count
                except NativeThreadMissing as exc:
                    lost = f"resume failed: {exc}"
                else:
                    # Posted before the turn starts, so the actor knows the
                    # provider thread before any event of the turn arrives.
                    await self._post(ProviderThreadReady(attempt_id, session_id, native, created=False, resumed_turn_count=turns))
                    await conn.start_turn(native, text=text, attempt_id=attempt_id, cwd=cwd)
                    return
            elif current is not None:
                lost = current.reason or "the provider thread is unusable"
            handoff = None
            if current is not None:
                # A replacement is built from the app's own record, never left empty.
                context, covered = portable_context(self.store, self.thread_id, before_ordinal=active.run.ordinal, reason=lost or "")
                if context:
                    handoff = HandoffDraft(context, lost or "", covered, current.id)
            context_text = handoff.text if handoff else None
            if conn.capabilities.empty_threads:
                native = await conn.create_thread(cwd=cwd)
                await self._post(ProviderThreadReady(attempt_id, session_id, native, created=True, handoff=handoff))
                await conn.start_turn(native, text=text, attempt_id=attempt_id, cwd=cwd, context=context_text)
            else:
                native, _turn = await conn.start_first_turn(text=text, attempt_id=attempt_id, cwd=cwd, context=context_text)
                await self._post(ProviderThreadReady(attempt_id, session_id, native, created=True, handoff=handoff))
        except (ProviderRuntimeError, AgentdError, OSError) as exc:
            await self._post(AttemptStartFailed(attempt_id, "provider_start_failed", exc))

    async def _on_provider_thread_ready(self, ready: ProviderThreadReady) -> None:
        active = self.active
        if active is None or active.attempt.id != ready.attempt_id:
            return
        now = self.now()
        batch = WriteBatch()
        attempt = active.attempt
        if ready.created:
            replaced = self.provider_thread
            if replaced is not None and replaced.status != "unusable":
                reason = ready.handoff.reason if ready.handoff else "replaced"
                replaced = struct_copy(replaced, status="unusable", reason=reason, updated_at=now)
                batch.put(replaced)
                self._event(batch, "provider_thread.unusable", run_id=active.run.id, providerThreadId=replaced.id, reason=reason)
            pt = ProviderThread(
                id=new_id("pth"), thread_id=self.thread_id, provider=active.run.provider,
                kind=self.sessions.adapter(active.run.provider).kind, native_thread_id=ready.native_thread_id,
                created_at=now, updated_at=now,
            )
            batch.put(pt)
            self._set_thread(batch, provider_thread_id=pt.id)
            self._event(batch, "provider_thread.created", run_id=active.run.id, providerThread=to_wire(pt))
            if ready.handoff is not None:
                handoff = ContextHandoff(
                    id=new_id("hof"), thread_id=self.thread_id, strategy="portable_context",
                    reason=ready.handoff.reason, source_provider_thread_id=ready.handoff.replaced_provider_thread_id,
                    target_provider_thread_id=pt.id, covered_run_count=ready.handoff.covered_run_count,
                    text=ready.handoff.text, created_at=now,
                )
                batch.put(handoff)
                self._event(batch, "context_handoff.created", run_id=active.run.id, handoff=to_wire(handoff))
                attempt = struct_copy(attempt, handoff_id=handoff.id)
        else:
            pt = self.provider_thread
            if ready.resumed_turn_count is not None:
                pt = struct_copy(pt, status="active", updated_at=now)
                batch.put(pt)
                self._event(
                    batch, "provider_thread.resumed", run_id=active.run.id,
                    providerThreadId=pt.id, sessionId=ready.session_id, nativeTurnCount=ready.resumed_turn_count,
                )
        self.provider_thread = pt
        attempt = struct_copy(attempt, provider_thread_id=pt.id)
        batch.put(attempt)
        if active.provider_turn is not None and not active.provider_turn.provider_thread_id:
            # A thread created with its first turn is known only after the turn began.
            active.provider_turn = struct_copy(active.provider_turn, provider_thread_id=pt.id)
            batch.put(active.provider_turn)
        await self._commit(batch)
        active.attempt = attempt
        active.session_id = ready.session_id

    async def _on_attempt_start_failed(self, failed: AttemptStartFailed) -> None:
        active = self.active
        if active is None or active.attempt.id != failed.attempt_id:
            return
        if self.registry.shutting_down:
            return  # the daemon is stopping: the restart reconciles this run
        if active.interrupt_requested and active.pending_restart is None:
            await self._end_run(WriteBatch(), "interrupted", reason=active.interrupt_reason)
            return
        await self._end_run(WriteBatch(), "failed", reason=f"{failed.reason}: {failed.error}")

    # -- provider events ----------------------------------------------------------

    def _attempt_is_active(self, event: ProviderEvent) -> bool:
        return self.active is not None and event.attempt_id == self.active.attempt.id

    async def _handle_provider_event(self, event: ProviderEvent) -> None:
        if isinstance(event, SessionExited):
            await self._on_session_exited(event)
            return
        if isinstance(event, RuntimeWarning_):
            batch = WriteBatch()
            self._event(batch, "runtime.warning", run_id=self.active.run.id if self.active else None, message=event.message)
            await self._commit(batch)
            return
        if not self._attempt_is_active(event):
            log.debug("thread %s: %s for attempt %s ignored (not active)", self.thread_id, type(event).__name__, event.attempt_id)
            return
        active = self.active
        assert active is not None
        if isinstance(event, TextDelta):
            await self._on_text_delta(active, event)
        elif isinstance(event, TurnStarted):
            await self._on_turn_started(active, event)
        elif isinstance(event, ItemStarted):
            await self._on_item_started(active, event)
        elif isinstance(event, ItemCompleted):
            await self._on_item_completed(active, event)
        elif isinstance(event, TurnCompleted):
            await self._on_turn_completed(active, event)
        elif isinstance(event, PlanUpdated):
            await self._on_plan_updated(active, event)
        elif isinstance(event, RequestOpened):
            await self._on_request_opened(active, event)

    async def _on_turn_started(self, active: ActiveRun, event: TurnStarted) -> None:
        now = self.now()
        pt_id = active.attempt.provider_thread_id or (self.provider_thread.id if self.provider_thread else "")
        turn = ProviderTurn(
            id=new_id("ptu"), provider_thread_id=pt_id, thread_id=self.thread_id, run_id=active.run.id,
            attempt_id=active.attempt.id, native_turn_id=event.native_turn_id, started_at=now,
        )
        attempt = struct_copy(active.attempt, status="running", provider_turn_id=turn.id)
        root = struct_copy(active.root, status="running")
        run = struct_copy(active.run, status="running", started_at=active.run.started_at or now)
        message = struct_copy(active.user_message, status="complete")
        batch = WriteBatch()
        batch.put_all(turn, attempt, root, run, message)
        self._settle_effect(batch, turn_start_effect_id(run.id), "done")
        self._set_thread(batch, status="running", active_run_id=run.id)
        self._event(batch, "run.started", run_id=run.id, node_id=root.id, run=to_wire(run), attempt=to_wire(attempt))
        self._event(batch, "root_turn.started", run_id=run.id, node_id=root.id, node=to_wire(root), providerTurnId=turn.id)
        await self._commit(batch)
        active.provider_turn, active.attempt, active.root, active.run, active.user_message = turn, attempt, root, run, message
        if active.interrupt_requested:
            self._send_interrupt(active)

    def _parent_node(self, active: ActiveRun, parent_item_id: str | None) -> ExecutionNode:
        if parent_item_id is not None and parent_item_id in active.nodes:
            return active.nodes[parent_item_id]
        return active.root

    async def _on_item_started(self, active: ActiveRun, event: ItemStarted) -> None:
        now = self.now()
        parent = self._parent_node(active, event.parent_item_id)
        batch = WriteBatch()
        if event.item_type == "agent_message":
            message = ConversationMessage(
                id=new_id("msg"), thread_id=self.thread_id, run_id=active.run.id, attempt_id=active.attempt.id,
                node_id=parent.id, role="assistant", status="streaming", created_at=now,
            )
            batch.put(message)
            self._event(batch, "message.created", run_id=active.run.id, node_id=parent.id, message=to_wire(message))
            await self._commit(batch)
            active.messages[event.item_id] = OpenMessage(message)
            return
        node = ExecutionNode(
            id=new_id("nod"), thread_id=self.thread_id, run_id=active.run.id, attempt_id=active.attempt.id,
            parent_node_id=parent.id, kind=event.item_type, status="running", title=event.title,
            provider_item_id=event.item_id, detail=event.detail, created_at=now,
        )
        batch.put(node)
        self._event(batch, f"{node.kind}.started", run_id=active.run.id, node_id=node.id, node=to_wire(node))
        await self._commit(batch)
        active.nodes[event.item_id] = node

    async def _on_item_completed(self, active: ActiveRun, event: ItemCompleted) -> None:
        if event.item_type == "agent_message":
            open_message = active.messages.pop(event.item_id, None)
            if open_message is None:
                return
            batch = WriteBatch()
            completed = event.status == "completed"
            self._close_message(batch, active, open_message, "complete" if completed else "interrupted")
            await self._commit(batch)
            active.answered = active.answered or completed
            return
        node = active.nodes.get(event.item_id)
        if node is None or node.status in NODE_TERMINAL:
            return
        status = event.status if event.status in NODE_TERMINAL else "completed"
        node = struct_copy(node, status=status, detail={**node.detail, **event.detail}, ended_at=self.now())
        batch = WriteBatch()
        batch.put(node)
        self._event(batch, f"{node.kind}.{status}", run_id=active.run.id, node_id=node.id, node=to_wire(node))
        if node.kind == "plan":
            self._propose_plan(batch, active, node)
        await self._commit(batch)
        active.nodes[event.item_id] = node

    # -- streamed text ------------------------------------------------------------

    async def _on_text_delta(self, active: ActiveRun, event: TextDelta) -> None:
        open_message = active.messages.get(event.item_id)
        if open_message is None:
            # A delta before its item: open the message implicitly.
            await self._on_item_started(active, ItemStarted(attempt_id=event.attempt_id, item_id=event.item_id, item_type="agent_message"))
            open_message = active.messages[event.item_id]
        record = open_message.record
        offset = len(record.text) + open_message.pending_len
        open_message.pending.append(event.delta)
        open_message.pending_len += len(event.delta)
        self.hub.publish_ephemeral(
            "message.delta", thread_id=self.thread_id, run_id=active.run.id, node_id=record.node_id, at=self.now(),
            messageId=record.id, offset=offset, text=event.delta,
        )
        if open_message.pending_len >= TEXT_FLUSH_BYTES:
            await self._flush_text()
        elif "flush" not in self._timers:
            self._timers["flush"] = trio.current_time() + TEXT_FLUSH_INTERVAL

    def _flush_message(self, batch: WriteBatch, active: ActiveRun, open_message: OpenMessage) -> None:
        if not open_message.pending:
            return
        text = "".join(open_message.pending)
        record = open_message.record
        offset = len(record.text)
        record = struct_copy(record, text=record.text + text)
        batch.put(record)
        self._event(batch, "message.appended", run_id=active.run.id, node_id=record.node_id, messageId=record.id, offset=offset, text=text)
        open_message.record = record
        open_message.pending.clear()
        open_message.pending_len = 0

    def _close_message(self, batch: WriteBatch, active: ActiveRun, open_message: OpenMessage, status: str) -> None:
        self._flush_message(batch, active, open_message)
        record = struct_copy(open_message.record, status=status, completed_at=self.now())
        batch.put(record)
        self._event(batch, "message.completed", run_id=active.run.id, node_id=record.node_id, messageId=record.id, status=status, length=len(record.text))
        open_message.record = record

    async def _flush_text(self) -> None:
        self._timers.pop("flush", None)
        active = self.active
        if active is None:
            return
        batch = WriteBatch()
        for open_message in active.messages.values():
            self._flush_message(batch, active, open_message)
        if batch:
            await self._commit(batch)

    # -- ending attempts and runs ---------------------------------------------------

    async def _on_turn_completed(self, active: ActiveRun, event: TurnCompleted) -> None:
        if active.pending_restart is not None:
            await self._apply_restart(active)
            return
        status = event.status if event.status in ("completed", "failed", "interrupted") else "failed"
        reason = None
        if status == "failed":
            reason = f"provider_error: {event.error}" if event.error else "provider_error"
        elif status == "interrupted":
            reason = active.interrupt_reason if active.interrupt_requested else "interrupted_by_provider"
        await self._end_run(WriteBatch(), status, reason=reason)

    async def _on_session_exited(self, event: SessionExited) -> None:
        """SPEC F11/F19: a requested stop interrupts the run; a crash before any
        side effect is recovered by a new attempt on a new runtime (within the
        restart intensity); otherwise the run fails with the reason."""
        batch = WriteBatch()
        active = self.active
        if active is None or active.session_id != event.session_id:
            return  # not the session this attempt runs on (or it has none yet)
        self._requests_not_resumable(batch, active, f"the provider session ended ({event.reason or 'exited'})")
        if active.pending_restart is not None:
            await self._apply_restart(active, batch)
            return
        if event.requested:
            status = self.registry.config.unsupported_interrupt_status if event.reason == "interrupt_unsupported" else "interrupted"
            await self._end_run(batch, status, reason=active.interrupt_reason if active.interrupt_requested else event.reason or "provider_stopped")
            return
        how = f"exit code {event.exit_code}" if event.exit_code is not None else f"signal {event.signal}"
        crashed = f"provider_crashed: the provider process ended unexpectedly ({how})"
        if active.nodes or active.interrupt_requested:
            # A tool may have touched the world: re-running could repeat it.
            await self._end_run(batch, "failed", reason=crashed)
            return
        decision = self.sessions.allow_recovery(self.thread_id, how)
        if decision.retry:
            await self._retry(active, "provider_recovery", crashed, batch=batch)
            return
        reason = decision.reason or "provider_crash_loop"
        if self.provider_thread is not None:
            pt = struct_copy(self.provider_thread, status="error", reason=reason, updated_at=self.now())
            batch.put(pt)
            self._event(batch, "provider_thread.error", run_id=active.run.id, providerThreadId=pt.id, reason=reason)
            self.provider_thread = pt
        await self._end_run(batch, "failed", reason=reason)

    async def _retry(
        self, active: ActiveRun, reason: str, why: str, *, batch: WriteBatch | None = None,
        closing_status: str = "failed", message: ConversationMessage | None = None,
    ) -> None:
        """Close the active attempt and start attempt N+1 of the same run, with
        a new root node, on the same provider thread. ``message`` is the new
        attempt's input (a steering message); by default the run's own."""
        now = self.now()
        batch = batch or WriteBatch()
        self._close_attempt_graph(batch, active, closing_status, why, now)
        number = active.run.attempt_count + 1
        attempt_id, root_id = new_id("att"), new_id("nod")
        root = ExecutionNode(
            id=root_id, thread_id=self.thread_id, run_id=active.run.id, attempt_id=attempt_id, kind="root_turn",
            counts_for_run=True, title=f"run {active.run.ordinal} attempt {number}", created_at=now,
        )
        attempt = RunAttempt(
            id=attempt_id, run_id=active.run.id, thread_id=self.thread_id, number=number, reason=reason,
            root_node_id=root_id, provider_thread_id=active.attempt.provider_thread_id, created_at=now,
        )
        run = struct_copy(active.run, root_node_id=root_id, selected_attempt_id=attempt_id, attempt_count=number)
        batch.put_all(root, attempt, run)
        self._event(batch, "run.retrying", run_id=run.id, node_id=root_id, run=to_wire(run), attempt=to_wire(attempt), why=why)
        await self._commit(batch)
        self._activate(ActiveRun(run=run, attempt=attempt, root=root, user_message=message or active.user_message))

    def _close_attempt_graph(self, batch: WriteBatch, active: ActiveRun, status: str, reason: str | None, now: float) -> None:
        """Close the attempt's messages, artifacts, open child nodes, root
        node, attempt and provider turn — the completion barrier's order."""
        active.starter_scope.cancel()
        self._timers.pop("flush", None)
        self._timers.pop(f"interrupt:{active.attempt.id}", None)
        message_status = "complete" if status == "completed" else "interrupted"
        for open_message in active.messages.values():
            self._close_message(batch, active, open_message, message_status)
        active.messages.clear()
        self._requests_not_resumable(batch, active, f"the attempt ended {status} before the request was answered")
        self._finalize_artifacts(batch, active)
        for item_id, node in list(active.nodes.items()):
            if node.status not in NODE_TERMINAL:
                closed = "interrupted" if status == "interrupted" else "incomplete"
                summary = "the turn ended before this step reported a result"
                node = struct_copy(node, status=closed, summary=summary, ended_at=now)
                batch.put(node)
                self._event(batch, f"{node.kind}.{closed}", run_id=active.run.id, node_id=node.id, node=to_wire(node))
                active.nodes[item_id] = node
        root = struct_copy(active.root, status=status, ended_at=now, summary=reason if status != "completed" else None)
        attempt = struct_copy(active.attempt, status=status, error=reason if status != "completed" else None, ended_at=now)
        batch.put_all(root, attempt)
        if active.provider_turn is not None:
            batch.put(struct_copy(active.provider_turn, status=status, ended_at=now))
        self._event(batch, f"root_turn.{status}", run_id=active.run.id, node_id=root.id, node=to_wire(root))
        self._event(batch, f"attempt.{status}", run_id=active.run.id, node_id=root.id, attempt=to_wire(attempt))
        active.root, active.attempt = root, attempt

    async def _end_run(self, batch: WriteBatch, status: str, *, reason: str | None) -> None:
        """The completion barrier (SPEC F16): flush and close assistant text,
        finalize artifacts, close child nodes the provider left open, end the
        root node, the attempt and the run, in that order, in one commit."""
        active = self.active
        assert active is not None
        now = self.now()
        self._close_attempt_graph(batch, active, status, reason, now)
        run = struct_copy(active.run, status=status, reason=reason, ended_at=now)
        if active.user_message.status == "queued":
            # Never reached the provider (the start failed): the text is kept to re-send.
            batch.put(struct_copy(active.user_message, status="complete" if run.started_at else "not_sent"))
        if status == "completed" and self.provider_thread is not None:
            pt = struct_copy(self.provider_thread, covered_run_count=run.ordinal, updated_at=now)
            batch.put(pt)
            self.provider_thread = pt
        batch.put(run)
        self._settle_effect(batch, turn_start_effect_id(run.id), "done" if run.started_at else "retired", reason=reason)
        self._set_thread(batch, status="idle", active_run_id=None)
        self._event(batch, f"run.{status}", run_id=run.id, node_id=active.root.id, run=to_wire(run))
        await self._commit(batch)
        self.active = None
        self.sessions.mark_busy(self.thread_id, False)
        self._maybe_start_next()

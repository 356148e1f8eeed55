"""ThreadActor: the one task that changes one AppThread (SPEC F2, F16, F18).

Client commands and provider events for a thread enter the same bounded
mailbox (messages.py) and the actor handles them one at a time — that is the
thread's lock, and no command ever waits on another thread's. Handling an item
reads the in-memory state (state.py), decides, builds one write batch with the
graph transitions (graph.py and the feature modules), commits it through the
group-commit writer and only then replies; the writer publishes the batch's
events before the actor wakes, so nothing is seen that is not durable. Work
that waits on a provider or touches other threads runs after the commit as an
effect task, outside the lock, and reports back through the mailbox.

Streamed assistant text is the one exception to commit-then-publish: each
delta is published at once as an ephemeral ``message.delta`` and buffered;
the buffer is written as one ``message.appended`` record on a short timer, when
it grows large, when the message ends and at the completion barrier.

This module is the loop — mailbox, timers, effect tasks, commit and reply —
and the start and end of attempts, which start and stop tasks. What an item
does lives with its feature:

- starter.py: opening the runtime and native thread, starting the turn;
- transfers.py / lineage.py: ``thread.fork`` and the context a run starts
  with (forks, provider switches, handoffs);
- turns.py: the provider's events of the running turn and session exits;
- steering.py: ``thread.message.send``, steers and their fallbacks (F3);
- run_control.py: interrupt, Stop and the queue (F10);
- requests.py: approvals and user-input requests (F15);
- artifacts.py: plans, todo lists and questions (F16).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import trio

from agentd.protocol.errors import AgentdError, CorruptRecord, NotFound, SchemaTooNew
from agentd.store.db import Store
from agentd.store.hub import EventHub
from agentd.store.records import (
    AppThread,
    ConversationMessage,
    Effect,
    ExecutionNode,
    ProviderThread,
    Run,
    RunAttempt,
)
from agentd.store.writer import CommitResult

from . import artifacts, checkpointing, child_checkpoints, delegation, graph, lineage, requests, run_control, starter, steering, transfers, turns
from .graph import Ending, ThreadBatch
from .messages import (
    AttemptStartFailed,
    CascadeDone,
    Command,
    ContextNeeded,
    FlushTimer,
    InterruptOverdue,
    InterruptRefused,
    MailboxItem,
    ProviderThreadReady,
    SteerDelivered,
    SteerFailed,
    Timer,
)
from .providers.base import (
    ItemCompleted,
    ItemStarted,
    PlanUpdated,
    ProviderEvent,
    RequestOpened,
    RuntimeWarning_,
    SessionExited,
    SessionHost,
    TextDelta,
    TurnCompleted,
    TurnStarted,
)
from .config import DaemonConfig
from .state import ActiveRun, ThreadState

if TYPE_CHECKING:
    from .registry import ThreadRegistry

log = logging.getLogger(__name__)

MAILBOX_SIZE = 1024
#: mailbox items handled in a row without yielding to other tasks
MAILBOX_BURST = 32


class ThreadActor:
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
        self.config: DaemonConfig = registry.config
        #: the wall clock that stamps records and events
        self.now: Callable[[], float] = registry.wall_clock
        self.state = ThreadState(thread, queued, provider_thread)
        self.send_channel, self._receive_channel = trio.open_memory_channel[MailboxItem](MAILBOX_SIZE)
        #: timer -> trio-clock deadline; the loop wakes for the earliest
        self._timers: dict[Timer, float] = {}
        self._effects = 0  # effect tasks still running
        self._nursery: trio.Nursery | None = None
        #: cancels the active attempt's starter when the attempt is closed first
        self._starter_scope: trio.CancelScope | None = None
        #: the mailbox item being handled (answered by the registry if the actor fails)
        self.handling: MailboxItem | None = None

    @property
    def thread_id(self) -> str:
        return self.state.thread_id

    @property
    def busy(self) -> bool:
        """True while a run is starting or running, runs wait to start, or
        effects are still in flight."""
        state = self.state
        return state.active is not None or state.next_queued() is not None or self._effects > 0

    # -- the loop -------------------------------------------------------------

    async def run(self, *, idle_timeout: float, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Handle mailbox items until idle for ``idle_timeout``, then retire."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            self.start_next()
            idle_since = trio.current_time()
            taken_in_a_row = 0
            while True:
                deadline = idle_since + idle_timeout if not self.busy else float("inf")
                if self._timers:
                    deadline = min(deadline, *self._timers.values())
                item = None
                if deadline > trio.current_time():
                    # An item already waiting (a stream of text deltas) is
                    # taken without a cancel scope, up to a few in a row
                    # before the loop yields to the other tasks again.
                    try:
                        if taken_in_a_row >= MAILBOX_BURST:
                            raise trio.WouldBlock
                        item = self._receive_channel.receive_nowait()
                        taken_in_a_row += 1
                    except trio.WouldBlock:
                        taken_in_a_row = 0
                        with trio.move_on_at(deadline):
                            item = await self._receive_channel.receive()
                if item is None:
                    now = trio.current_time()
                    due = [timer for timer, at in self._timers.items() if at <= now]
                    if due:
                        for timer in due:
                            del self._timers[timer]
                            await self._handle(timer)
                        continue
                    if not self.busy and self.registry._retire(self):
                        nursery.cancel_scope.cancel()
                        return
                    idle_since = now
                    continue
                await self._handle(item)
                idle_since = trio.current_time()

    async def _handle(self, item: MailboxItem) -> None:
        """Handle one item. An AgentdError a command raises is its answer; an
        AgentdError of another item is logged. Anything else — and a record
        that cannot be decoded while handling a provider's event — is not
        the item's answer but a failure of this actor: it ends the actor,
        and the registry answers the item and reconciles the thread."""
        self.handling = item
        try:
            await self._dispatch(item)
        except AgentdError as exc:
            if isinstance(item, Command):
                item.reply.fail(exc)
            elif isinstance(exc, (CorruptRecord, SchemaTooNew)):
                raise  # the event would be lost, and its run might never end
            else:
                log.warning("thread %s: %s while handling %s", self.thread_id, exc, type(item).__name__)
        # Left set when the handler raised: the registry answers that command.
        self.handling = None

    def close_mailbox(self) -> list[Command]:
        """Close the mailbox and take out every command the actor did not
        answer: the one it was handling, then those waiting, in order (the
        registry answers them when the actor failed)."""
        self.send_channel.close()
        commands = [self.handling] if isinstance(self.handling, Command) else []
        while True:
            try:
                item = self._receive_channel.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            if isinstance(item, Command):
                commands.append(item)
        return commands

    async def _dispatch(self, item: MailboxItem) -> None:
        match item:
            case Command():
                await self._handle_command(item)
            # Session-wide provider events, whatever attempt is running.
            case SessionExited():
                await turns.on_session_exited(self, item)
            case RuntimeWarning_():
                await turns.on_runtime_warning(self, item)
            # Events of one attempt count only while it is the active one.
            case ProviderEvent() if not self.state.is_current(item.attempt_id):
                log.debug("thread %s: %s for attempt %s ignored (not active)", self.thread_id, type(item).__name__, item.attempt_id)
            case TextDelta():
                await turns.on_text_delta(self, item)
            case TurnStarted():
                await turns.on_turn_started(self, item)
            case ItemStarted():
                await turns.on_item_started(self, item)
            case ItemCompleted():
                await turns.on_item_completed(self, item)
            case TurnCompleted():
                await turns.on_turn_completed(self, item)
            case PlanUpdated():
                await artifacts.on_plan_updated(self, item)
            case RequestOpened():
                await requests.on_request_opened(self, item)
            case ContextNeeded():
                await transfers.on_context_needed(self, item)
            case ProviderThreadReady():
                await starter.on_provider_thread_ready(self, item)
            case AttemptStartFailed():
                await starter.on_attempt_start_failed(self, item)
            case FlushTimer():
                await turns.flush_text(self)
            case InterruptOverdue(attempt_id=attempt_id):
                await run_control.on_interrupt_overdue(self, attempt_id)
            case InterruptRefused(attempt_id=attempt_id, why=why):
                await run_control.escalate_interrupt(self, attempt_id, why)
            case SteerDelivered(message=message):
                await steering.on_steer_delivered(self, message)
            case SteerFailed(message=message, why=why):
                await steering.on_steer_failed(self, message, why)
            case CascadeDone(effect_id=effect_id):
                await run_control.on_cascade_done(self, effect_id)
            case _:  # pragma: no cover - a programming error
                log.error("thread %s: unknown mailbox item %r", self.thread_id, item)

    async def _handle_command(self, command: Command) -> None:
        if command.command_id is not None:
            receipt = self.store.receipt(command.command_id)
            if receipt is not None:
                command.reply.set(self.registry.check_receipt(receipt, command.method))
                return
        command.reply.set(await command.handler(self, command))

    # -- what handlers use ------------------------------------------------------

    def batch(self) -> ThreadBatch:
        """An empty write batch of this thread, stamped now."""
        return ThreadBatch(thread_id=self.thread_id, now=self.now())

    async def commit(self, batch: ThreadBatch) -> CommitResult:
        """Make ``batch`` durable; its events are published before this returns."""
        return await self.store.commit(batch)

    def spawn_effect(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``fn(*args)`` after the current commit, outside the thread's
        lock; it reports back by posting a typed outcome if it changes state."""
        assert self._nursery is not None
        self._effects += 1

        async def run() -> None:
            # Another thread's refusal (it failed, is quarantined, is gone)
            # is logged; an unexpected error is this actor's failure.
            try:
                await fn(*args)
            except AgentdError as exc:
                log.warning("thread %s: effect %s: %s", self.thread_id, getattr(fn, "__name__", fn), exc)
            finally:
                self._effects -= 1

        self._nursery.start_soon(run)

    async def post(self, item: MailboxItem) -> None:
        """Put ``item`` into this actor's mailbox (from an effect or the starter)."""
        try:
            await self.send_channel.send(item)
        except (trio.BrokenResourceError, trio.ClosedResourceError):  # pragma: no cover - retired meanwhile
            pass

    def start_timer(self, timer: Timer, delay: float) -> None:
        """Handle ``timer`` in ``delay`` seconds, unless it is already pending."""
        self._timers.setdefault(timer, trio.current_time() + delay)

    def cancel_timer(self, timer: Timer) -> None:
        """Forget ``timer`` if it is pending."""
        self._timers.pop(timer, None)

    def thread_run(self, run_id: str) -> Run:
        """A run of this thread from the store (NotFound-safe for commands)."""
        run = self.store.run(run_id)
        if run is None or run.thread_id != self.thread_id:
            raise NotFound(f"no run {run_id} in thread {self.thread_id}", runId=run_id)
        return run

    # -- starting and ending attempts ----------------------------------------------

    def start_next(self) -> None:
        """Start the first queued run that no hold keeps, if nothing runs."""
        state = self.state
        run = state.next_queued()
        if state.active is not None or run is None or self._nursery is None:
            return
        if self.registry.shutting_down:
            return  # left queued: the next start reconciles it (cancelled, message not_sent)
        state.queued.remove(run)
        attempt = self.store.get(RunAttempt, run.selected_attempt_id)
        root = self.store.get(ExecutionNode, run.root_node_id)
        message = self.store.get(ConversationMessage, run.user_message_id)
        if attempt is None or root is None or message is None:  # pragma: no cover - store corruption
            log.error("run %s is missing its attempt, root node or message; skipped", run.id)
            self.start_next()
            return
        self._activate(ActiveRun(run=run, attempt=attempt, root=root, user_message=message))

    def _activate(self, active: ActiveRun) -> None:
        self.state.active = active
        self.sessions.mark_busy(self.thread_id, True)
        assert self._nursery is not None
        self._starter_scope = scope = trio.CancelScope()
        self._nursery.start_soon(self._run_starter, active, scope)

    async def _run_starter(self, active: ActiveRun, scope: trio.CancelScope) -> None:
        # Cancelled if the attempt is closed first: a crash recovery must not
        # race a starter of the old attempt.
        with scope:
            await starter.start_attempt(self, active)

    def _stop_attempt_tasks(self, active: ActiveRun) -> None:
        if self._starter_scope is not None:
            self._starter_scope.cancel()
        self.cancel_timer(FlushTimer())
        self.cancel_timer(InterruptOverdue(active.attempt.id))

    async def end_run(self, batch: ThreadBatch, status: Ending, *, reason: str | None) -> None:
        """Pass the completion barrier (``graph.end_run``) in ``batch``, then
        free the thread for the next queued run."""
        state = self.state
        active = state.active
        assert active is not None
        self._stop_attempt_tasks(active)
        lineage.attempt_closing(batch, state, reason)
        # The run's checkpoint (SPEC F13): an awaited git subprocess, after the
        # provider's streams drained and before run.<status> is committed;
        # mailbox items wait meanwhile, as they wait for any handler.
        await child_checkpoints.capture_open_children(self, active)
        checkpoint = await checkpointing.capture_run(self, active)
        if checkpoint is not None:
            checkpoint = (child_checkpoints.with_children(self.store, checkpoint[0]), checkpoint[1])
        graph.end_run(
            batch, state, status, reason=reason, artifacts=self.store.run_artifacts(active.run.id),
            turn_start_effect=self.store.get(Effect, graph.turn_start_effect_id(active.run.id)),
            checkpoint=checkpoint,
        )
        # A delegated task's result is durable with its run's end (SPEC F9).
        task_ended = delegation.result_on_run_end(self, batch, active.run)
        await self.commit(batch)
        state.active = None
        self.sessions.mark_busy(self.thread_id, False)
        if task_ended:
            self.registry.tasks.ended(self.thread_id)
            delegation.release_task_session(self)
        self.start_next()

    async def retry(
        self, batch: ThreadBatch, reason: str, why: str, *, closing_status: Ending = "failed",
        message: ConversationMessage | None = None,
    ) -> None:
        """Close the active attempt and start attempt N+1 (``graph.retry``)."""
        active = self.state.active
        assert active is not None
        self._stop_attempt_tasks(active)
        lineage.attempt_closing(batch, self.state, why)
        await child_checkpoints.capture_open_children(self, active)
        next_attempt = graph.retry(
            batch, self.state, reason, why, artifacts=self.store.run_artifacts(active.run.id),
            closing_status=closing_status, message=message,
        )
        await self.commit(batch)
        self._activate(next_attempt)

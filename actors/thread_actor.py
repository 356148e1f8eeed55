"""ThreadActor: the one task that changes one AppThread (SPEC F2, F16, F18).

Client commands and provider events for a thread enter the same bounded
mailbox (messages.py) and the actor handles them one at a time — that is the
thread's lock, and no command ever waits on another thread's. For each item
the actor checks a command's receipt, calls the item's transition (the
feature modules below) with the thread's context (context.py), carries out
the effects it yields and sends their results back in (effects.py), commits
the batch of the Decision it returns through the group-commit writer, and
only then carries out the Decision's effects and replies; the writer
publishes the batch's events before the actor wakes, so nothing is seen that
is not durable. The actor's own effects (timers, the attempt starter, the
queue) are done here; everything else by the executor (executors.py), where
work that waits on a provider or touches other threads runs as an effect
task, outside the lock, and reports back through the mailbox.

Streamed assistant text is the one exception to commit-then-publish: each
delta is published at once as an ephemeral ``message.delta`` and buffered;
the buffer is written as one ``message.appended`` record on a short timer, when
it grows large, when the message ends and at the completion barrier.

This module is the loop — mailbox, timers, effect tasks, commit and reply —
and the start of attempts, which starts their tasks. What an item does lives
with its feature, as transitions that import neither trio nor this module:

- starting.py: the attempt starter's reports (the starter itself, starter.py,
  is an effect task: it opens the runtime and native thread and starts the turn);
- transfers.py / lineage.py: ``thread.fork`` and the context a run starts
  with (forks, provider switches, handoffs);
- turns.py: the provider's events of the running turn and session exits;
- steering.py: ``thread.message.send``, steers and their fallbacks (F3);
- run_control.py: interrupt, Stop and the queue (F10);
- requests.py: approvals and user-input requests (F15);
- artifacts.py: plans, todo lists and questions (F16);
- ending.py: the completion barrier and retries.
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import trio

from agentd.protocol.errors import AgentdError, CorruptRecord, InternalError, NotFound, SchemaTooNew
from agentd.store.records import AppThread, ConversationMessage, ExecutionNode, ProviderThread, Run, RunAttempt
from agentd.store.writer import CommitResult

from . import artifacts, effects as fx, requests, run_control, stalls, starter, starting, steering, transfers, turns, usage
from .context import ThreadContext
from .executors import Executor
from .graph import ThreadBatch
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
    StallTimer,
    StarterDone,
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
    TextDelta,
    TurnCompleted,
    TurnStarted,
    Usage,
)
from .state import ActiveRun, ThreadState

if TYPE_CHECKING:
    from .host import ActorHost

log = logging.getLogger(__name__)

MAILBOX_SIZE = 1024
#: mailbox items handled in a row without yielding to other tasks
MAILBOX_BURST = 32


class _Alarm:
    """The alarm task's word that the loop's deadline passed: taken by the
    loop itself, never handled as an item."""


ALARM: Any = _Alarm()


class ThreadActor:
    """Owns one AppThread's state and mailbox.

    Args:
        registry: the daemon that spawned it (host.py: for retiring and effects).
        thread: the thread record as stored.
        queued: its queued runs, in the order they will start.
        provider_thread: its current ProviderThread, if any.
    """

    def __init__(
        self,
        registry: ActorHost,
        thread: AppThread,
        queued: list[Run],
        provider_thread: ProviderThread | None,
    ) -> None:
        self.registry = registry
        self.store = registry.store
        self.hub = registry.hub
        self.sessions = registry.sessions
        self.config = registry.config
        #: the wall clock that stamps records and events
        self.now: Callable[[], float] = registry.wall_clock
        self.state = ThreadState(thread, queued, provider_thread)
        #: what the thread's transitions read
        self.ctx = ThreadContext(
            state=self.state, store=self.store, config=self.config, sessions=self.sessions, now=self.now,
            checkpoints_on=registry.checkpoints is not None, shutting_down=lambda: registry.shutting_down,
            workspaces_dir=registry.workspaces_folder,
        )
        self.executor = Executor(registry, thread.id, self.spawn_effect, self.post)
        self.send_channel, self._receive_channel = trio.open_memory_channel[MailboxItem](MAILBOX_SIZE)
        #: timer -> trio-clock deadline; the loop wakes for the earliest
        self._timers: dict[Timer, float] = {}
        self._effects = 0  # effect tasks still running
        self._nursery: trio.Nursery | None = None
        #: cancels the active attempt's starter when the attempt is closed first
        self._starter_scope: trio.CancelScope | None = None
        #: the attempt whose starter's reports are not all handled yet (until its ``StarterDone``)
        self._starting: str | None = None
        #: that attempt's turn end, come before the provider thread it ran on
        #: was known: handled after the starter's reports
        self._early_end: TurnCompleted | None = None
        #: the mailbox item being handled (answered by the registry if the actor fails)
        self.handling: MailboxItem | None = None
        #: items a transition looked at (``PeekMailbox``): handled next, before the channel's
        self._peeked: deque[MailboxItem] = deque()
        #: the alarm task's wait: its deadline is the loop's next deadline
        self._alarm_scope = trio.CancelScope()
        self._waiting = False  # the loop waits for the mailbox

    @property
    def thread_id(self) -> str:
        return self.state.thread_id

    @property
    def holds_items(self) -> bool:
        """True while items a transition looked at wait to be handled."""
        return bool(self._peeked)

    @property
    def busy(self) -> bool:
        """True while a run is starting or running, runs wait to start, or
        effects are still in flight."""
        state = self.state
        return state.active is not None or state.next_queued() is not None or self._effects > 0

    # -- the loop -------------------------------------------------------------

    async def run(self, *, idle_timeout: float, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Handle mailbox items until idle for ``idle_timeout``, then retire."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self._alarm)
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
                        item = self._peeked.popleft() if self._peeked else self._receive_channel.receive_nowait()
                        taken_in_a_row += 1
                    except trio.WouldBlock:
                        taken_in_a_row = 0
                        # The deltas of the items taken in a row go out now, in
                        # one write per subscriber, before the loop waits or yields.
                        self.hub.flush()
                        if self._peeked:
                            await trio.lowlevel.checkpoint()
                            item = self._peeked.popleft()
                        else:
                            # The alarm task wakes this wait at the deadline:
                            # no cancel scope per wait (per streamed delta).
                            if self._alarm_scope.deadline != deadline:
                                self._alarm_scope.deadline = deadline
                            self._waiting = True
                            try:
                                item = await self._receive_channel.receive()
                            finally:
                                self._waiting = False
                    if item is ALARM:
                        if deadline > trio.current_time():
                            continue  # an alarm of an earlier deadline: look again
                        item = None
                if item is None:
                    self.hub.flush()
                    now = trio.current_time()
                    due = [timer for timer, at in self._timers.items() if at <= now]
                    if due:
                        for timer in due:
                            del self._timers[timer]
                            await self._handle(timer)
                        continue
                    if not self.busy:
                        self._drop_stale_alarm()
                        if self.registry.retire(self):
                            nursery.cancel_scope.cancel()
                            return
                    idle_since = now
                    continue
                await self._handle(item)
                idle_since = trio.current_time()

    def _drop_stale_alarm(self) -> None:
        """Take out an ``ALARM`` the mailbox may hold (handed over just as
        another item was: it would keep the actor from retiring); an item
        found instead is handled next, before the rest of the mailbox."""
        if self._peeked:
            return  # the registry does not retire an actor that holds items
        try:
            item = self._receive_channel.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return
        if item is not ALARM:
            self._peeked.append(item)

    async def _alarm(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Hand ``ALARM`` to the loop's wait when the deadline the loop set on
        ``_alarm_scope`` passes (the loop then handles its due timers, or
        retires). Only a loop that waits gets it (straight from the channel:
        it never sits in the mailbox, where it would keep the actor from
        retiring); a busy one looks at its deadline before it waits again."""
        started = False
        while True:
            with trio.CancelScope() as scope:
                self._alarm_scope = scope
                if not started:
                    task_status.started()
                    started = True
                await trio.sleep_forever()
            if self._waiting:
                try:
                    self.send_channel.send_nowait(ALARM)
                except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

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
        commands += [item for item in self._peeked if isinstance(item, Command)]
        self._peeked.clear()
        while True:
            try:
                item = self._receive_channel.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            if isinstance(item, Command):
                commands.append(item)
        return commands

    async def _dispatch(self, item: MailboxItem) -> None:
        if self.state.deleted:  # what waited behind a thread.delete: the thread is gone
            if isinstance(item, Command):
                item.reply.fail(NotFound(f"no thread {self.thread_id}: it was deleted", threadId=self.thread_id))
            return
        match item:
            case TextDelta() if self.state.is_current(item.attempt_id):
                # The most frequent item (every streamed token) first.
                await self.run_transition(stalls.on_heard(self.ctx, item.attempt_id or ""))
                await self.run_transition(turns.on_text_delta(self.ctx, item))
            case Command():
                await self._handle_command(item)
            case ContextNeeded():
                await self._answer_context(item)
            case TurnCompleted() if self._before_its_provider_thread(item):
                # A runtime that names a new thread only with (or after) its
                # first turn's events (the starter learns it from the turn's
                # answer, which the reader may have passed long before this
                # is handled): ending the run now would leave the attempt tied
                # to no provider thread, and the next run would start a new
                # one without the history.
                self._early_end = item
            case StarterDone(attempt_id=attempt_id):
                await self._after_starter(attempt_id)
            case ProviderEvent() if self.state.is_current(item.attempt_id):
                # A sign of life first: the attempt's silence starts over.
                await self.run_transition(stalls.on_heard(self.ctx, item.attempt_id or ""))
                await self.run_transition(self._transition_of(item))
            case _:
                await self.run_transition(self._transition_of(item))

    def _transition_of(self, item: MailboxItem) -> Any:
        """The transition that handles ``item`` (None: it is ignored)."""
        ctx = self.ctx
        match item:
            # Session-wide provider events, whatever attempt is running.
            case SessionExited():
                return turns.on_session_exited(ctx, item)
            case RuntimeWarning_():
                return turns.on_runtime_warning(ctx, item)
            # Events of one attempt count only while it is the active one.
            case ProviderEvent() if not self.state.is_current(item.attempt_id):
                log.debug("thread %s: %s for attempt %s ignored (not active)", self.thread_id, type(item).__name__,
                          item.attempt_id)
                return None
            case TextDelta():
                return turns.on_text_delta(ctx, item)
            case TurnStarted():
                return turns.on_turn_started(ctx, item)
            case ItemStarted():
                return turns.on_item_started(ctx, item)
            case ItemCompleted():
                return turns.on_item_completed(ctx, item)
            case TurnCompleted():
                return turns.on_turn_completed(ctx, item)
            case Usage():
                return usage.on_usage(ctx, item)
            case PlanUpdated():
                return artifacts.on_plan_updated(ctx, item)
            case RequestOpened():
                return requests.on_request_opened(ctx, item)
            case ProviderThreadReady():
                return starting.on_provider_thread_ready(ctx, item)
            case AttemptStartFailed():
                return starting.on_attempt_start_failed(ctx, item)
            case FlushTimer():
                return turns.flush_text(ctx)
            case StallTimer():
                return stalls.on_stall_timer(ctx, item)
            case InterruptOverdue(attempt_id=attempt_id):
                return run_control.on_interrupt_overdue(ctx, attempt_id)
            case InterruptRefused(attempt_id=attempt_id, why=why):
                return run_control.escalate_interrupt(ctx, attempt_id, why)
            case SteerDelivered(message=message):
                return steering.on_steer_delivered(ctx, message)
            case SteerFailed(message=message, why=why):
                return steering.on_steer_failed(ctx, message, why)
            case CascadeDone(effect_id=effect_id):
                return run_control.on_cascade_done(ctx, effect_id)
        log.error("thread %s: unknown mailbox item %r", self.thread_id, item)  # pragma: no cover
        return None

    async def _handle_command(self, command: Command) -> None:
        if command.command_id is not None:
            receipt = self.store.receipt(command.command_id)
            if receipt is not None:
                command.reply.set(self.registry.check_receipt(receipt, command.method))
                return
        command.reply.set(await self.run_transition(command.handler(self.ctx, command)))

    async def _answer_context(self, item: ContextNeeded) -> None:
        """Resolve the attempt's start context and answer the starter — with
        an error if that fails, so the starter never waits for nothing."""
        try:
            item.reply.set(await self.run_transition(transfers.on_context_needed(self.ctx, item)))
        except AgentdError as exc:  # a refusal the run's reason says (e.g. an MCP server's secrets gone): one line
            log.warning("thread %s: resolving the context of attempt %s failed: %s", self.thread_id, item.attempt_id, exc)
            item.reply.fail(exc)
        except Exception as exc:
            log.exception("thread %s: resolving the context of attempt %s failed", self.thread_id, item.attempt_id)
            item.reply.fail(InternalError(f"resolving the run's context failed: {exc}"))

    # -- running a transition -------------------------------------------------------

    async def run_transition(self, outcome: Any) -> Any:
        """Run a transition to its end: carry out the effects it yields (each
        answered with its result, or its error thrown back in), then the
        Decision it returns (commit, then its effects); the reply."""
        if type(outcome) is fx.Decision:  # the common case (every streamed delta): no ABC checks
            return await self._decide(outcome)
        if outcome is None:
            return None
        if inspect.isawaitable(outcome):
            # A handler written as a coroutine (the test suite's probes of the loop).
            outcome = await outcome
        if isinstance(outcome, Generator):
            outcome = await self._drive(outcome)
        if isinstance(outcome, fx.Decision):
            return await self._decide(outcome)
        return outcome

    async def _drive(self, transition: Generator[Any, Any, Any]) -> Any:
        value: Any = None
        error: Exception | None = None
        while True:
            try:
                effect = transition.throw(error) if error is not None else transition.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                value = await self.perform(effect)
            except Exception as exc:  # the effect's failure is the transition's input
                error = exc
            except BaseException as exc:
                # Cancelled (the actor is stopping): the transition's finally
                # blocks still give back what they hold.
                self._unwind(transition, exc)
                raise

    def _unwind(self, transition: Generator[Any, Any, Any], exc: BaseException) -> None:
        """Throw ``exc`` into an interrupted transition; the release effects
        its finally blocks yield on the way out are carried out at once."""
        try:
            effect = transition.throw(exc)
            while True:
                if isinstance(effect, (fx.ReleaseClaim, fx.EndRestore)):
                    self.executor.release(effect)
                    effect = transition.send(None)
                else:
                    effect = transition.throw(exc)
        except BaseException:  # noqa: BLE001 - the transition ended (it re-raised, or returned)
            return

    async def _decide(self, decision: fx.Decision) -> Any:
        reply = decision.reply
        if decision.lazy and decision.batch is not None:
            batch = decision.batch
            assert batch.receipt is None, "a command's answer is durable before it is sent"
            what = ", ".join(event.type for event in batch.events) or "bookkeeping"
            turns.pending_text_first(self.ctx, batch)  # never ahead of text streamed before it
            self.store.commit_lazy(batch, f"thread {self.thread_id}'s {what}")
        elif decision.batch is not None:
            committed = await self.commit(decision.batch)
            if decision.seq:
                reply = fx.with_seq(reply, committed.seq)
        for effect in decision.effects:
            await self.perform(effect)
        return reply

    async def perform(self, effect: Any) -> Any:
        """Carry out one effect: the actor's own here, the rest by the executor."""
        match effect:
            # The two of every streamed delta first.
            case fx.PublishDelta():
                self.hub.publish_ephemeral(
                    "message.delta", thread_id=self.thread_id, run_id=effect.run_id, node_id=effect.node_id,
                    at=self.now(), messageId=effect.message_id, offset=effect.offset, text=effect.text,
                )
            case fx.StartTimer(timer=timer, delay=delay):
                self._timers.setdefault(timer, trio.current_time() + delay)
            case fx.RestartTimer(timer=timer, delay=delay):
                self._timers[timer] = trio.current_time() + delay
            case fx.Commit(batch=batch):
                return await self.commit(batch)
            case fx.StartNext():
                self.start_next()
            case fx.Activate(active=active):
                self._activate(active)
            case fx.StopAttemptTasks(attempt_id=attempt_id):
                self._stop_attempt_tasks(attempt_id)
            case fx.CancelTimer(timer=timer):
                self._timers.pop(timer, None)
            case fx.MarkBusy(busy=busy):
                self.sessions.mark_busy(self.thread_id, busy)
            case fx.PeekMailbox():
                # A turn of the scheduler first: what the provider already
                # wrote to its pipe reaches the mailbox.
                self.hub.flush()
                await trio.lowlevel.checkpoint()
                return self._peek()
            case _:
                self.hub.flush()  # the deltas published so far go out before the actor waits
                return await self.executor.perform(effect)
        return None

    def _peek(self) -> list[MailboxItem]:
        while True:
            try:
                item = self._receive_channel.receive_nowait()
                if item is not ALARM:  # the loop looks at its deadline before it waits again
                    self._peeked.append(item)
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return list(self._peeked)

    # -- what effects use ---------------------------------------------------------------

    def batch(self) -> ThreadBatch:
        """An empty write batch of this thread, stamped now."""
        return self.ctx.batch()

    async def commit(self, batch: ThreadBatch) -> CommitResult:
        """Make ``batch`` durable, with the text streamed before it
        (``turns.pending_text_first``); its events are published before this returns."""
        turns.pending_text_first(self.ctx, batch)
        self.hub.flush()  # the deltas published so far go out before the actor waits
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

    # -- starting attempts ------------------------------------------------------------------

    def start_next(self) -> None:
        """Start the first queued run that no hold keeps, if nothing runs."""
        state = self.state
        run = state.next_queued()
        if state.active is not None or run is None or self._nursery is None:
            return
        if self.registry.shutting_down:
            return  # left queued: the next start reconciles it (cancelled, message not_sent)
        state.queued.remove(run)
        attempt = self.store.get(RunAttempt, run.selected_attempt_id) if run.selected_attempt_id else None
        root = self.store.get(ExecutionNode, run.root_node_id) if run.root_node_id else None
        message = self.store.get(ConversationMessage, run.user_message_id) if run.user_message_id else None
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
        self._starting = active.attempt.id
        self._nursery.start_soon(self._run_starter, active, scope)

    async def _run_starter(self, active: ActiveRun, scope: trio.CancelScope) -> None:
        # Cancelled if the attempt is closed first: a crash recovery must not
        # race a starter of the old attempt.
        try:
            with scope:
                await starter.start_attempt(starter.StarterHandle(self.registry, self.state, self.post), active)
        finally:
            # Behind every report of the starter's in the mailbox.
            await self.post(StarterDone(active.attempt.id))

    async def _after_starter(self, attempt_id: str) -> None:
        """Every report of ``attempt_id``'s starter is handled: a turn end
        that came before its provider thread was known is handled now
        (ignored if the attempt was closed meanwhile)."""
        if self._starting == attempt_id:
            self._starting = None
        early = self._early_end
        if early is not None and early.attempt_id == attempt_id:
            self._early_end = None
            await self._dispatch(early)

    def _before_its_provider_thread(self, event: TurnCompleted) -> bool:
        """True for the current attempt's turn end while its starter's
        reports are not all handled and the attempt is tied to no provider
        thread yet."""
        active = self.state.active
        return (
            active is not None and active.attempt.id == event.attempt_id == self._starting
            and not active.attempt.provider_thread_id
        )

    def _stop_attempt_tasks(self, attempt_id: str) -> None:
        if self._starter_scope is not None:
            self._starter_scope.cancel()
        self._timers.pop(FlushTimer(), None)
        self._timers.pop(InterruptOverdue(attempt_id), None)
        self._timers.pop(StallTimer(attempt_id), None)

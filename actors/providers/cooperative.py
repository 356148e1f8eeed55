"""Cooperative threads: trio's way of waiting and cancelling, on the standard library alone.

The scripted agent is started once per provider session — every thread a test makes, every
session that was reaped and resumed — and importing trio (or asyncio, which costs as much) was a
third of its start. Its concurrency is small: a reader of stdin, a task per running turn, and a
few calls that block (a command, an HTTP call to agentd's tool). So here a task is a thread, and
one fair lock, held by whichever task runs and released only while a task waits, keeps what trio's
single thread guaranteed:

* code between two waits runs alone, so the agent's state needs no locks of its own;
* the lock goes to the tasks in the order they asked for it, as trio's run queue does;
* a cancel lands only where a task waits (:func:`sleep`, :func:`wait_until`, :func:`checkpoint`,
  :func:`in_worker`), never in the middle of a line written to stdout;
* a :class:`CancelScope` is caught by the outermost cancelled scope it passes, stops at a shield,
  and says whether it caught anything — as trio's does.

Only what the scripted agent needs is here; it is not a general event loop.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Cancelled(BaseException):
    """Raised where a task waits once a scope around it is cancelled; a
    ``BaseException``, as trio's, so ``except Exception`` never swallows it."""


class FairLock:
    """A lock handed to its waiters in the order they asked.

    ``threading.Lock`` is not fair: a thread that releases it and asks again
    usually gets it back, which would let one busy turn starve the reader of
    stdin.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._held = False
        self._queue: deque[threading.Lock] = deque()

    def acquire(self) -> None:
        with self._mutex:
            if not self._held:
                self._held = True
                return
            baton = threading.Lock()
            baton.acquire()
            self._queue.append(baton)
        # The releasing thread hands the lock over by releasing the baton.
        baton.acquire()

    def release(self) -> None:
        with self._mutex:
            if self._queue:
                self._queue.popleft().release()
            else:
                self._held = False

    def contended(self) -> bool:
        """Whether another thread is waiting for the lock."""
        return bool(self._queue)


class CancelScope:
    """A region whose waits end with :class:`Cancelled` once :meth:`cancel`
    is called; ``shield=True`` keeps cancels from outside it out."""

    def __init__(self, *, shield: bool = False) -> None:
        self.shield = shield
        self.cancel_called = False
        self.cancelled_caught = False
        self._tasks: list[Task] = []

    def cancel(self) -> None:
        """Cancel the scope; a task inside it that waits is woken at once.
        A scope cancelled before it is entered is cancelled from its start."""
        self.cancel_called = True
        for task in self._tasks:
            task.wake()

    def __enter__(self) -> CancelScope:
        task = current_task()
        task.scopes.append(self)
        self._tasks.append(task)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: Any) -> bool:
        task = current_task()
        caught = kind is not None and issubclass(kind, Cancelled) and task.cancelling() is self
        task.scopes.remove(self)
        self._tasks.remove(task)
        if caught:
            self.cancelled_caught = True
        return caught


class Task:
    """A thread that runs under the loop's lock, with the scopes it is in."""

    def __init__(self, scopes: list[CancelScope]) -> None:
        self.scopes = scopes
        self._wakeup = threading.Event()

    def wake(self) -> None:
        """Make the task's current wait look again (thread-safe)."""
        self._wakeup.set()

    def cancelling(self) -> CancelScope | None:
        """The scope whose cancel applies where the task is now: the
        outermost cancelled one inside the innermost shield."""
        found = None
        for scope in reversed(self.scopes):
            if scope.cancel_called:
                found = scope
            if scope.shield:
                break
        return found


_local = threading.local()
_lock = FairLock()


def current_task() -> Task:
    task: Task = _local.task
    return task


def wait_until(ready: Callable[[], bool], deadline: float | None = None) -> bool:
    """Wait, with the lock released, until ``ready()`` (True) or the
    ``time.monotonic()`` deadline (False); :class:`Cancelled` if cancelled
    first. Whatever makes ``ready()`` true must :meth:`Task.wake` the task."""
    task = current_task()
    while True:
        task._wakeup.clear()
        if ready():
            return True
        if task.cancelling() is not None:
            raise Cancelled()
        timeout = None
        if deadline is not None:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                return False
        _lock.release()
        try:
            task._wakeup.wait(timeout)
        finally:
            _lock.acquire()


def sleep_until(deadline: float) -> None:
    wait_until(_never, deadline)
    checkpoint()


def sleep(seconds: float) -> None:
    sleep_until(time.monotonic() + seconds)


def sleep_forever() -> None:
    wait_until(_never)


def checkpoint() -> None:
    """Where a cancel may land, and where another task waiting for the lock runs first."""
    if current_task().cancelling() is not None:
        raise Cancelled()
    yield_to_others()


def yield_to_others() -> None:
    """Let the tasks waiting for the lock run first (a shielded checkpoint)."""
    if _lock.contended():
        _lock.release()
        _lock.acquire()


def blocking(call: Callable[..., T], *args: Any) -> T:
    """Run a call that blocks with the lock released; a cancel does not stop it."""
    _lock.release()
    try:
        return call(*args)
    finally:
        _lock.acquire()


def in_worker(call: Callable[[], T]) -> T:
    """Run a blocking call in a thread of its own and wait for its result.
    A cancel abandons the call (it goes on in its thread; the caller shuts
    whatever it uses, as trio's ``abandon_on_cancel``)."""
    task = current_task()
    box: list[tuple[bool, Any]] = []

    def work() -> None:
        try:
            box.append((True, call()))
        except BaseException as exc:  # handed to the waiting task
            box.append((False, exc))
        task.wake()

    threading.Thread(target=work, daemon=True).start()
    wait_until(lambda: bool(box))
    ok, value = box[0]
    if not ok:
        raise value
    result: T = value
    return result


class Loop:
    """The tasks of one process: :meth:`run` makes the calling thread the
    first task; :meth:`spawn` starts more, each inside :attr:`root`."""

    def __init__(self) -> None:
        self.root = CancelScope()
        #: the spawned tasks still running
        self._tasks: set[Task] = set()
        self._main: Task | None = None

    def spawn(self, function: Callable[[], None]) -> None:
        """Start ``function`` as a task of its own. An error it does not
        catch ends the process with its traceback, as an error out of a
        trio nursery ends ``trio.run``."""
        task = self._task()
        self._tasks.add(task)

        def body() -> None:
            _lock.acquire()
            _local.task = task
            try:
                function()
            except Cancelled:
                pass
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
                os._exit(1)
            finally:
                self._tasks.discard(task)
                self.root._tasks.remove(task)
                if self._main is not None:
                    self._main.wake()
                _lock.release()

        threading.Thread(target=body, daemon=True).start()

    def run(self, main: Callable[[], None]) -> None:
        """Run ``main`` in this thread, then cancel every task and wait for
        them to end (a shielded wait may never end, as in trio)."""
        _lock.acquire()
        _local.task = self._main = self._task()
        try:
            try:
                main()
            except Cancelled:
                pass
            self.root.cancel()
            # The tasks' own ends wake this one; nothing is cancelled here.
            _local.task.scopes.append(CancelScope(shield=True))
            wait_until(lambda: not self._tasks)
        finally:
            _lock.release()

    def _task(self) -> Task:
        task = Task([self.root])
        self.root._tasks.append(task)
        return task


def _never() -> bool:
    return False

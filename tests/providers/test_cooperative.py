"""The scripted agent's cooperative threads (``actors/providers/cooperative.py``): trio's
cancel-scope rules and one-task-at-a-time, on the standard library alone.

Every feature test drives the scripted agent through them (SPEC F1-F20); these pin the rules
its turns rely on: an interrupt lands where a turn waits and is caught by the scope it was for,
a shield keeps it out, and a task waiting for the lock is not starved.
"""

from __future__ import annotations

import threading
import time

import pytest

from agentd.actors.providers import cooperative as coop

pytestmark = pytest.mark.timeout(30)


def run(main):
    """Run ``main`` as the first task of a new loop; what it returns."""
    loop = coop.Loop()
    box = []
    loop.run(lambda: box.append(main(loop)))
    return box[0] if box else None


def test_a_cancel_is_caught_by_the_outermost_cancelled_scope_and_ends_the_wait_at_once():
    def main(loop):
        outer, inner = coop.CancelScope(), coop.CancelScope()
        with outer:
            with inner:
                inner.cancel()
                outer.cancel()
                coop.sleep_forever()
            after_inner = True  # never reached: the inner scope does not catch the outer's cancel
        return after_inner if not outer.cancelled_caught else (outer.cancelled_caught, inner.cancelled_caught)

    assert run(main) == (True, False)


def test_a_scope_cancelled_before_it_is_entered_cancels_its_first_wait_and_nothing_outside():
    def main(loop):
        scope = coop.CancelScope()
        scope.cancel()
        with scope:
            coop.sleep(60)
        coop.checkpoint()  # outside the scope: no cancel here
        return scope.cancelled_caught

    assert run(main) is True


def test_a_shield_keeps_an_outer_cancel_out_until_its_block_ends():
    def main(loop):
        outer = coop.CancelScope()
        with outer:
            outer.cancel()
            with coop.CancelScope(shield=True):
                coop.sleep(0.01)  # not cut short
                slept = True
            coop.checkpoint()  # the outer cancel lands here
            return "not cancelled"
        return (slept, outer.cancelled_caught)

    assert run(main) == (True, True)


def test_a_cancel_from_another_task_wakes_a_waiting_task_and_errors_other_than_cancel_pass_through():
    def main(loop):
        scope = coop.CancelScope()
        waiting = []
        me = coop.current_task()

        def sleeper():
            with scope:
                waiting.append(True)
                me.wake()  # what makes a wait's condition true wakes it
                coop.sleep_forever()

        loop.spawn(sleeper)
        coop.wait_until(lambda: bool(waiting), time.monotonic() + 10)
        scope.cancel()
        with pytest.raises(KeyError):
            with coop.CancelScope():
                raise KeyError("not a cancel")
        return waiting

    assert run(main) == [True]


def test_the_loop_cancels_its_tasks_when_its_first_task_ends_and_waits_for_them():
    ended = []

    def main(loop):
        def task(name):
            try:
                coop.sleep_forever()
            finally:
                ended.append(name)

        for name in "abc":
            loop.spawn(lambda name=name: task(name))
        coop.checkpoint()

    run(main)
    assert sorted(ended) == ["a", "b", "c"]


def test_a_worker_call_gives_its_result_or_its_error_and_a_cancel_abandons_it():
    release = threading.Event()

    def main(loop):
        assert coop.in_worker(lambda: 41 + 1) == 42
        with pytest.raises(ZeroDivisionError):
            coop.in_worker(lambda: 1 / 0)
        scope = coop.CancelScope()
        loop.spawn(scope.cancel)
        with scope:
            coop.in_worker(release.wait)  # blocks until released: abandoned by the cancel
        return scope.cancelled_caught

    try:
        assert run(main) is True
    finally:
        release.set()


def test_tasks_take_the_lock_in_the_order_they_asked_and_one_at_a_time():
    order = []
    inside = []

    def main(loop):
        def worker(name):
            for step in range(3):
                inside.append(name)
                assert len(inside) == 1, "two tasks ran at once"
                order.append((name, step))
                inside.pop()
                coop.checkpoint()

        for name in "xyz":
            loop.spawn(lambda name=name: worker(name))
        coop.wait_until(lambda: len(order) == 9, time.monotonic() + 10)

    run(main)
    # Each checkpoint sends the task to the back of the queue: round robin, as trio's run queue.
    assert [name for name, _ in order] == list("xyzxyzxyz")


def test_the_scripted_agent_starts_without_trio_asyncio_or_msgspec():
    """Issue 28 item 13: the agent starts once per provider session (800-1,000 times a suite
    run); importing trio or asyncio was a third of its start."""
    import subprocess
    import sys

    probe = ("import sys, agentd.actors.providers.scripted_agent; "
             "print(sorted(m for m in ('trio', 'asyncio', 'msgspec') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

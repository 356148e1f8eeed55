"""Property test of Stop, task cancel and wake-ups over trees of delegated
tasks (issue 23 item 4; SPEC F9, F10, F12; seed 000 "Stop", seed 003).

Hypothesis builds a random tree of delegated tasks under one thread (each
task quick or hanging, each with or without ``wake``), lets it settle, then
runs a random sequence of ``thread.stop``, ``task.cancel``, ``run.interrupt``
and daemon SIGKILL-and-restart, settling after each, and finally interrupts
whatever still runs. From the stored event log it checks:

1. no run of a thread starts after a Stop (or a task.cancel) of it or of an
   ancestor — nothing automatic restarts a stopped tree;
2. no wake-up fires (``task.woke``) on a stopped thread or its descendants
   after that Stop, and none at all after a restart;
3. at the end, every finished wake task's result is taken in or
   ``superseded`` — never left ``pending`` for a later run to pick up.

Each example works on a real daemon process: the module's one (issue 28
item 13), on threads of its own (what it checks is about its own tree), or,
when its plan restarts the daemon, daemons of its own on a data dir of its
own (a SIGKILL takes every thread, and "no wake-up after a restart" is about
the whole log). Settling waits on events, never on a sleep. The seed is
printed by Hypothesis on failure.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentd.launch import DaemonProcess, start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError
from tests.helpers import daemon_for_module, script, stored_events

WAIT = 60  # real seconds one settle may take on a loaded machine
QUICK = script({"say": "done"})
HANG = script({"say": "working"}, {"hang": True})


@dataclass(frozen=True)
class Task:
    parent: int  # index of the thread it is delegated from (0: the root)
    hang: bool
    wake: bool


@dataclass(frozen=True)
class Op:
    kind: str  # stop | cancel | interrupt | restart
    target: int  # index into [root, *tasks]


@st.composite
def trees(draw: Any) -> list[Task]:
    tasks: list[Task] = []
    depth = [0]
    for _ in range(draw(st.integers(1, 4))):
        parent = draw(st.sampled_from([i for i, d in enumerate(depth) if d < 3]))
        tasks.append(Task(parent, draw(st.booleans()), draw(st.booleans())))
        depth.append(depth[parent] + 1)
    return tasks


ops = st.lists(st.builds(Op, st.sampled_from(["stop", "stop", "cancel", "interrupt", "interrupt", "restart"]),
                         st.integers(0, 4)), min_size=1, max_size=4)


class World:
    """One example's daemon, client and threads."""

    def __init__(self, root: Path, shared: DaemonProcess | None = None) -> None:
        self.root = root
        #: the module's daemon, for a plan without a restart (None: the example starts its own)
        self.shared = shared
        self.sock_dir = Path(tempfile.mkdtemp(prefix="wk", dir="/tmp"))
        self.daemon: DaemonProcess | None = None
        self.client: Client | None = None
        self.threads: list[str] = []
        self.parent_of: dict[str, str] = {}
        #: the tasks delegated with wake, and those whose run hangs until stopped
        self.waking: set[str] = set()
        self.hanging: set[str] = set()
        #: runs an interrupt, Stop or cancel must end before the world is settled
        self.must_end: set[str] = set()
        #: (thread id, commit seq) of every Stop and task.cancel
        self.stops: list[tuple[str, int]] = []
        #: the last seq before each restart
        self.restarts: list[int] = []
        self.changed = trio.Event()
        self.last_seq = 0

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[None]:
        """A daemon (the module's; or one of the example's own, a new one on
        the same data dir after a restart), a client of it and a follower of
        its events, for one block."""
        if self.shared is not None:
            self.daemon = self.shared
        else:
            self.daemon = await start_daemon(self.root / "data", self.sock_dir / "s.sock")
        async with Client.connect(self.daemon.socket) as client, trio.open_nursery() as nursery:
            self.client = client
            if self.shared is not None and not self.last_seq:
                # the module's daemon holds earlier examples' events: follow from now on
                self.last_seq = (await client.call("daemon.status"))["lastSeq"]
            await nursery.start(self._follow, client)
            yield
            nursery.cancel_scope.cancel()

    async def _follow(self, client: Client, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        async with client.subscribe(after_seq=self.last_seq) as events:
            task_status.started()
            async for event in events:
                self.last_seq = max(self.last_seq, event.get("seq", 0))
                self.changed.set()
                self.changed = trio.Event()

    async def call(self, method: str, **params: Any) -> Any:
        assert self.client is not None
        return await self.client.call(method, **params)

    def descendants(self, thread_id: str) -> set[str]:
        out = {thread_id}
        grew = True
        while grew:
            more = {t for t, p in self.parent_of.items() if p in out}
            grew = bool(more - out)
            out |= more
        return out

    async def _unsettled(self) -> bool:
        for thread_id in self.threads:
            detail = await self.call("thread.get", threadId=thread_id)
            held = set(detail["thread"]["heldRunIds"])
            said = {m["runId"] for m in detail["messages"] if m["role"] == "assistant" and m["status"] == "complete"}
            active = [r for r in detail["runs"] if r["status"] in ("running", "waiting")]
            if any(r["id"] in self.must_end for r in active):
                return True  # interrupted, not ended yet
            if any(r["id"] not in said or thread_id not in self.hanging or r["ordinal"] != 1 for r in active):
                return True  # a run still on its way to where its script blocks (a hanging task's) or ends
            if not active and any(r["status"] == "queued" and r["id"] not in held for r in detail["runs"]):
                return True  # a run about to start
            results = (await self.call("thread.transfers", threadId=thread_id))["transfers"]
            if any(t["type"] == "subagent_result" and t["targetThreadId"] == thread_id and t["status"] == "pending"
                   and t["runId"] is None and t["sourceThreadId"] in self.waking for t in results):
                return True  # a wake task's result on its way to wake its parent (or to be dropped)
        return False

    async def mark_ending(self, thread_ids: set[str]) -> None:
        """The active runs of ``thread_ids`` must end (an interrupt, a Stop)."""
        for thread_id in thread_ids:
            active = (await self.call("thread.get", threadId=thread_id))["thread"]["activeRunId"]
            if active:
                self.must_end.add(active)

    async def settle(self) -> None:
        # The threads are read one after another: a pass is clean only when
        # nothing was committed while it read (the store's last seq is the
        # same before and after), else a thread read early may be stale.
        with trio.fail_after(WAIT):
            while True:
                changed = self.changed
                before = (await self.call("daemon.status"))["lastSeq"]
                unsettled = await self._unsettled()
                if not unsettled and (await self.call("daemon.status"))["lastSeq"] == before:
                    return
                if unsettled:
                    await changed.wait()


async def _build(world: World, tree: list[Task]) -> None:
    world.threads.append((await world.call("thread.create", title="root"))["threadId"])
    for task in tree:
        parent = world.threads[task.parent]
        made = await world.call("task.delegate", parentThreadId=parent, wake=task.wake,
                                instructions=HANG if task.hang else QUICK)
        world.threads.append(made["taskId"])
        world.parent_of[made["taskId"]] = parent
        if task.wake:
            world.waking.add(made["taskId"])
        if task.hang:
            world.hanging.add(made["taskId"])
        await world.settle()


async def _apply(world: World, op: Op) -> None:
    target = world.threads[op.target % len(world.threads)]
    if op.kind == "stop":
        await world.mark_ending(world.descendants(target))
        world.stops.append((target, (await world.call("thread.stop", threadId=target))["seq"]))
    elif op.kind == "cancel" and target in world.parent_of:
        await world.mark_ending(world.descendants(target))
        world.stops.append((target, (await world.call("task.cancel", taskId=target))["seq"]))
    elif op.kind == "interrupt":
        thread = (await world.call("thread.get", threadId=target))["thread"]
        if thread["activeRunId"]:
            world.must_end.add(thread["activeRunId"])
            try:
                await world.call("run.interrupt", runId=thread["activeRunId"])
            except AgentdError as exc:
                assert exc.kind == "invalid_state", exc  # it ended meanwhile
    await world.settle()


async def _finish(world: World) -> None:
    """Interrupt whatever still runs (allowed to wake parents not stopped)."""
    for _round in range(6):
        running = [(await world.call("thread.get", threadId=t))["thread"]["activeRunId"] for t in world.threads]
        running = [r for r in running if r]
        if not running:
            return
        for run_id in running:
            world.must_end.add(run_id)
            try:
                await world.call("run.interrupt", runId=run_id)
            except AgentdError as exc:
                assert exc.kind == "invalid_state", exc
        await world.settle()
    raise AssertionError("runs kept starting after every interrupt")


async def _check(world: World) -> None:
    events = [e for e in await stored_events(world.client) if not e.get("ephemeral")]  # type: ignore[arg-type]
    for thread_id, seq in world.stops:
        tree = world.descendants(thread_id)
        started = [e for e in events if e["seq"] > seq and e["type"] == "run.started" and e["threadId"] in tree]
        assert not started, f"a run started in a stopped tree (stop of {thread_id} at {seq}): {started}"
        woke = [e for e in events if e["seq"] > seq and e["type"] == "task.woke" and e["threadId"] in tree]
        assert not woke, f"a wake-up fired after the stop of {thread_id} at {seq}: {woke}"
    if world.restarts:
        woke = [e for e in events if e["seq"] > world.restarts[0] and e["type"] == "task.woke"]
        assert not woke, f"a wake-up fired after a restart: {woke}"
    for task_id, parent in world.parent_of.items():
        thread = (await world.call("thread.get", threadId=task_id))
        if not thread["thread"]["wakesParent"] or thread["runs"][0]["status"] not in ("completed", "failed", "interrupted"):
            continue
        await world.call("task.result", taskId=task_id)  # makes a result a restart owed
        results = [t for t in (await world.call("thread.transfers", threadId=parent))["transfers"]
                   if t["type"] == "subagent_result" and t["sourceThreadId"] == task_id]
        assert [r["status"] for r in results] in (["consumed"], ["superseded"]), results


async def _example(tree: list[Task], plan: list[Op], shared: DaemonProcess) -> None:
    restarts = any(op.kind == "restart" for op in plan)
    world = World(Path(tempfile.mkdtemp(prefix="agentd-wake-")), None if restarts else shared)
    # The plan in parts, one per daemon: a restart SIGKILLs it and starts the next.
    parts: list[list[Op]] = [[]]
    for op in plan:
        if op.kind == "restart":
            parts.append([])
        else:
            parts[-1].append(op)
    try:
        for number, part in enumerate(parts):
            last = number == len(parts) - 1
            async with world.connected():
                if number == 0:
                    await _build(world, tree)
                else:
                    await world.settle()
                for op in part:
                    await _apply(world, op)
                if last:
                    await _finish(world)
                    await _check(world)
            assert world.daemon is not None
            if world.shared is not None:
                pass  # the module's daemon: its clean exit is checked after the module
            elif last:
                assert await world.daemon.terminate() == 0, world.daemon.log_text()[-3000:]
            else:
                world.restarts.append(world.last_seq)
                await world.daemon.kill()
    finally:
        if world.shared is None and world.daemon is not None and world.daemon.process.returncode is None:
            await world.daemon.kill()
        shutil.rmtree(world.root, ignore_errors=True)
        shutil.rmtree(world.sock_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def shared_daemon(module_paths):
    """The daemon of the examples whose plan does not restart it."""
    with daemon_for_module(start_daemon, *module_paths) as daemon:
        yield daemon


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
@given(tree=trees(), plan=ops)
# The shapes the rules are about, always tried: a Stop of a parent whose wake
# task still works; a cancel in the middle of a chain of them; a restart.
@example(tree=[Task(0, True, True)], plan=[Op("stop", 0)])
@example(tree=[Task(0, True, True), Task(1, True, True), Task(2, True, True)], plan=[Op("cancel", 2), Op("interrupt", 1)])
@example(tree=[Task(0, True, True), Task(1, False, True)], plan=[Op("restart", 0)])
def test_f9_f10_no_task_runs_and_no_wake_up_fires_after_a_stop_or_a_restart(shared_daemon, tree, plan):
    """Issue 23 item 4: random trees of delegated tasks, Stops, cancels,
    interrupts and restarts keep the Stop and wake-up rules."""
    trio.run(_example, tree, plan, shared_daemon)

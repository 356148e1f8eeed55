"""Property test of run control (SPEC F3, F10, F15).

Hypothesis generates random sequences of run-control commands against ONE
thread — sends (plain, queued, start_immediately), steer_active /
restart_active of the active run or of another run, ``run.interrupt`` with
and without ``holdQueue``, ``thread.queue.release``, ``approval.respond`` and
``queued-run.cancel`` — on the ``scripted`` provider (native steer) or
``nosteer`` (restart fallback), and checks the graph invariants after every
command:

1. at most one run of the thread is active (``running``/``waiting``), and it
   is the thread's ``activeRunId`` when the thread is not idle;
2. each run's attempts are numbered 1..n, at most one — the last — is not
   terminal, and ``selectedAttemptId`` is the last attempt;
3. only root nodes end runs: a terminal run's ``rootNodeId`` is a terminal
   ``root_turn`` node with ``countsForRun`` (``cancelled`` for a cancelled
   queued run);
4. runs start in ordinal order (a restarted run's second start is the same run);
5. no request is left ``pending`` on a terminal run.

(plus a few more of the same spirit: ``thread.get`` and ``run.get`` agree,
ordinals are unique, every attempt has its own ``root_turn``, a terminal run
leaves no node open, the daemon logs no error). At the end of each example
whatever is active is interrupted and the queue released, cancelled or run
until nothing is active or queued; then every user message must be
``complete``, ``cancelled`` or belong to a run that ended.

Each example runs its own daemon in-process (real clock, as in
test_supervision.py but without MockClock) inside ``trio.run``. After each
command the test waits — on events, never on a sleep — until the thread is
*settled*: every run it must end has ended, every steer has been applied, and
the active run (if any) is blocked where its script blocks (a hanging tool,
a pending approval, an answer followed by a hang) or nothing can start. That
makes each example deterministic, so each command hits a meaningful state and
the expected outcome (success or which error, and the steer strategy) is
asserted, not only the error kind.

The tests at the end pin daemon bugs that racing the same commands (without
settling) found, now fixed, so they stay fixed.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd.actors.providers.base import ProviderRuntimeError
from agentd.actors.config import load_config
from agentd.actors.providers.scripted import ScriptedConnection
from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError
from agentd.supervisor.daemon import Daemon, DaemonOptions
from agentd.supervisor.paths import Paths
from tests.helpers import TERMINAL, script, stored_events, wait_event, wait_run_terminal

CONFIG = """
[daemon]
interrupt_grace = 30

[providers.nosteer]
kind = "scripted"
capabilities = { steer = false }
"""

#: what a message asks the scripted agent to do, by kind
TEXTS = {
    "quick": "hi",
    "hang_tool": script({"tool": {"name": "t", "hang": True}}),
    "approval": script({"approval": {"kind": "command", "command": "x"}}, {"say": "ok"}),
    "say_hang": script({"say": "answer"}, {"hang": True}),
}
KIND_OF = {text: kind for kind, text in TEXTS.items()}
ACTIVE = ("running", "waiting")
EXPECTED_KINDS = {"invalid_state", "not_resumable", "invalid_params"}
WAIT = 20  # real seconds any one wait may take


# -- commands ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Send:
    kind: str
    mode: str | None  # None (the default for the state), queue_after_active, start_immediately


@dataclass(frozen=True)
class Steer:
    kind: str
    mode: str  # steer_active | restart_active
    target: str | int  # "active", "missing" (no targetRunId), or an index into the thread's runs


@dataclass(frozen=True)
class Interrupt:
    target: str | int  # "active" or an index into the thread's runs
    hold_queue: bool


@dataclass(frozen=True)
class Release:
    pass


@dataclass(frozen=True)
class Respond:
    decision: str
    index: int  # into the pending requests (else into every request seen)


@dataclass(frozen=True)
class CancelQueued:
    index: int  # into the queued runs (else into every run)


kinds = st.sampled_from(list(TEXTS))
sends = st.builds(Send, kinds, st.sampled_from([None, None, "queue_after_active", "start_immediately"]))
steers = st.builds(Steer, kinds, st.sampled_from(["steer_active", "restart_active"]),
                   st.sampled_from(["active", "active", "active", 0, 1, 2, "missing"]))
commands = st.one_of(
    sends,
    steers,
    st.builds(Interrupt, st.sampled_from(["active", "active", 0, 1, 2]), st.booleans()),
    st.builds(Respond, st.sampled_from(["accept", "decline"]), st.integers(0, 3)),
    st.builds(CancelQueued, st.integers(0, 3)),
    st.builds(Release),
    sends,
    steers,
)
#: a sequence opens with a send (most commands need a run to act on)
sequences = st.builds(lambda first, rest: [first, *rest], st.builds(Send, kinds, st.just(None)),
                      st.lists(commands, min_size=3, max_size=7))


# -- the harness ------------------------------------------------------------------------------


class ErrorLog(logging.Handler):
    """Collects ERROR records the daemon logs (a failed handler or effect)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        trace = logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
        self.records.append(f"{record.name}: {record.getMessage()}\n{trace}")


class Harness:
    def __init__(self, client: Client, thread_id: str, provider: str) -> None:
        self.client = client
        self.thread_id = thread_id
        self.provider = provider
        self.events: list[dict[str, Any]] = []
        self._changed = trio.Event()
        #: runs a successful interrupt or superseding steer must end
        self.must_end: set[str] = set()
        self.requests_seen: list[str] = []
        self.trace: list[str] = []

    async def follow(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Keep every stored event of the thread; wake ``settle``."""
        async with self.client.subscribe(thread_id=self.thread_id) as stream:
            task_status.started()
            async for event in stream:
                if event.get("ephemeral"):
                    continue
                self.events.append(event)
                if event["type"] == "approval.requested":
                    self.requests_seen.append(event["payload"]["request"]["id"])
                self._changed.set()
                self._changed = trio.Event()
        raise AssertionError("the event subscription ended")

    async def call(self, method: str, **params: Any) -> Any:
        return await self.client.call(method, **params)

    async def _read(self) -> dict[str, Any]:
        got = await self.call("thread.get", threadId=self.thread_id)
        return {
            "thread": got["thread"],
            "runs": got["runs"],
            "messages": got["messages"],
            "requests": (await self.call("thread.requests", threadId=self.thread_id))["requests"],
            "details": {run["id"]: await self.call("run.get", runId=run["id"]) for run in got["runs"]},
        }

    async def snapshot(self) -> dict[str, Any]:
        """A consistent view of the thread: the reads are separate calls (and
        each call several store reads), so a commit may land between them;
        read until two reads in a row agree."""
        with trio.fail_after(WAIT):
            previous = await self._read()
            while True:
                current = await self._read()
                if current == previous:
                    return current
                previous = current

    # -- settling ------------------------------------------------------------------------------

    def attempt_kind(self, run: dict, attempts: list[dict], messages: list[dict]) -> str | None:
        """What the run's current attempt was asked to do: the run's message,
        or the steering message a steering_restart attempt carries."""
        by_id = {m["id"]: m for m in messages}
        steers = iter([
            e["payload"]["messageId"] for e in self.events
            if e["type"] == "run.steer_requested" and e.get("runId") == run["id"]
            and e["payload"]["strategy"] == "steering_restart"
        ])
        text = by_id[run["userMessageId"]]["text"]
        for attempt in attempts[1:]:
            if attempt["reason"] == "steering_restart":
                message_id = next(steers, None)
                if message_id is None or message_id not in by_id:
                    return None  # the event is on its way
                text = by_id[message_id]["text"]
        return KIND_OF.get(text)

    async def settled(self) -> bool:
        snap = await self.snapshot()
        status = {r["id"]: r["status"] for r in snap["runs"]}
        if any(status.get(run_id) not in TERMINAL for run_id in self.must_end):
            return False
        active = [r for r in snap["runs"] if r["status"] in ACTIVE]
        if not active:
            held = held_run_ids(snap["thread"])
            return all(r["id"] in held for r in snap["runs"] if r["status"] == "queued")
        run = active[0]
        if any(m["role"] == "user" and m["status"] == "queued" and m["runId"] == run["id"] for m in snap["messages"]):
            return False  # a steer not yet delivered or applied
        detail = snap["details"][run["id"]]
        attempt = detail["attempts"][-1]
        if attempt["id"] != run["selectedAttemptId"] or attempt["status"] != "running":
            return False
        kind = self.attempt_kind(run, detail["attempts"], snap["messages"])
        if kind == "hang_tool":
            return any(n["kind"] == "tool" and n["attemptId"] == attempt["id"] and n["status"] == "running" for n in detail["nodes"])
        if kind == "approval":
            return any(r["attemptId"] == attempt["id"] for r in snap["requests"])
        if kind == "say_hang":
            return any(m["role"] == "assistant" and m["attemptId"] == attempt["id"] and m["status"] == "complete"
                       for m in snap["messages"])
        return False  # quick (about to end) or not known yet

    async def settle(self) -> None:
        with trio.fail_after(WAIT):
            while True:
                changed = self._changed
                if await self.settled():
                    return
                await changed.wait()

    # -- commands -----------------------------------------------------------------------------

    async def expect(self, what: str, method: str, fail: set[str] | None, **params: Any) -> dict | None:
        """Call; ``fail`` is None when it must succeed, else the error kinds it must fail with."""
        try:
            result = await self.call(method, **params)
        except AgentdError as exc:
            self.trace.append(f"{what} -> {exc.kind}")
            assert exc.kind in EXPECTED_KINDS, f"{what}: unexpected error kind {exc.kind}: {exc.message}"
            assert fail is not None, f"{what}: should have succeeded, got {exc.kind}: {exc.message}"
            assert exc.kind in fail, f"{what}: expected {sorted(fail)}, got {exc.kind}: {exc.message}"
            return None
        self.trace.append(f"{what} -> ok {result}")
        assert fail is None, f"{what}: should have failed with {sorted(fail)}, got {result}"
        return result

    async def run_command(self, command: Any) -> None:
        snap = await self.snapshot()
        runs = sorted(snap["runs"], key=lambda r: r["ordinal"])
        active = next((r for r in runs if r["status"] in ACTIVE), None)
        queued = [r for r in runs if r["status"] == "queued"]
        tid = self.thread_id

        def pick(target: str | int) -> dict | None:
            if target == "active":
                return active or (runs[-1] if runs else None)
            return runs[target % len(runs)] if runs else None

        if isinstance(command, Send):
            params: dict[str, Any] = {}
            if command.mode is not None:
                params["dispatchMode"] = {"type": command.mode}
            # Runs a Stop holds do not keep a new message waiting.
            busy = active is not None or any(r["id"] not in held_run_ids(snap["thread"]) for r in queued)
            fail = {"invalid_state"} if command.mode == "start_immediately" and busy else None
            await self.expect(repr(command), "thread.message.send", fail, threadId=tid, text=TEXTS[command.kind], **params)

        elif isinstance(command, Steer):
            text = TEXTS[command.kind]
            if command.target == "missing":
                await self.expect(repr(command), "thread.message.send", {"invalid_params"}, threadId=tid, text=text,
                                  dispatchMode={"type": command.mode})
                return
            run = pick(command.target)
            if run is None:
                return
            is_active = active is not None and run["id"] == active["id"]
            result = await self.expect(repr(command), "thread.message.send", None if is_active else {"invalid_state"},
                                       threadId=tid, text=text, dispatchMode={"type": command.mode, "targetRunId": run["id"]})
            if result is None:
                return
            answered = self.attempt_kind(run, snap["details"][run["id"]]["attempts"], snap["messages"]) == "say_hang"
            if command.mode == "steer_active" and self.provider == "scripted":
                expected = "native_steer"
            else:
                expected = "superseding_run" if answered else "steering_restart"
            assert result["strategy"] == expected, f"{command!r} on {self.provider}: strategy {result['strategy']}, expected {expected}"
            if expected == "superseding_run":
                assert result["runId"] != run["id"]
                self.must_end.add(run["id"])
            else:
                assert result["runId"] == run["id"]

        elif isinstance(command, Interrupt):
            run = pick(command.target)
            if run is None:
                return
            is_active = active is not None and run["id"] == active["id"]
            ok = is_active or command.hold_queue
            result = await self.expect(repr(command), "run.interrupt", None if ok else {"invalid_state"},
                                       runId=run["id"], holdQueue=command.hold_queue)
            if result is not None:
                if result["interruptRequested"]:
                    self.must_end.add(run["id"])
                assert result["interruptRequested"] is is_active, f"{command!r}: {result}"
                assert result["queueHeld"] is (command.hold_queue or snap["thread"]["queueHeld"]), f"{command!r}: {result}"

        elif isinstance(command, Release):
            await self.expect(repr(command), "thread.queue.release", None if snap["thread"]["queueHeld"] else {"invalid_state"},
                              threadId=tid)

        elif isinstance(command, Respond):
            if snap["requests"]:
                request_id, fail = snap["requests"][command.index % len(snap["requests"])]["id"], None
            elif self.requests_seen:
                request_id = self.requests_seen[command.index % len(self.requests_seen)]
                fail = {"invalid_state", "not_resumable"}
            else:
                return
            await self.expect(repr(command), "approval.respond", fail, requestId=request_id, decision=command.decision)

        elif isinstance(command, CancelQueued):
            if queued:
                run, fail = queued[command.index % len(queued)], None
            elif runs:
                run, fail = runs[command.index % len(runs)], {"invalid_state"}
            else:
                return
            result = await self.expect(repr(command), "queued-run.cancel", fail, runId=run["id"])
            if result is not None:
                assert result["status"] == "cancelled"

        else:  # pragma: no cover
            raise AssertionError(f"unknown command {command!r}")

    async def drain(self, by_cancel: bool) -> None:
        """Interrupt what is active; cancel what is queued or let it run;
        until no run is active or queued."""
        for _ in range(40):
            snap = await self.snapshot()
            active = next((r for r in snap["runs"] if r["status"] in ACTIVE), None)
            queued = [r for r in snap["runs"] if r["status"] == "queued"]
            if active is None and not queued:
                return
            if by_cancel:
                for run in queued:
                    await self.expect("drain: cancel", "queued-run.cancel", None, runId=run["id"])
            if active is not None:
                await self.expect("drain: interrupt", "run.interrupt", None, runId=active["id"])
                self.must_end.add(active["id"])
            elif queued and snap["thread"]["queueHeld"] and not by_cancel:
                await self.expect("drain: release", "thread.queue.release", None, threadId=self.thread_id)
            await self.settle()
            check_invariants(await self.snapshot(), self.events)
        raise AssertionError("the thread did not drain")


# -- invariants ---------------------------------------------------------------------------------


def held_run_ids(thread: dict[str, Any]) -> set[str]:
    """The queued runs a Stop holds (those queued before it)."""
    return set(thread["heldRunIds"]) if thread["queueHeld"] else set()


def check_invariants(snap: dict[str, Any], events: list[dict[str, Any]]) -> None:
    thread, runs, details = snap["thread"], snap["runs"], snap["details"]
    ids = [r["id"] for r in runs]
    assert len(ids) == len(set(ids)), f"thread.get lists a run twice: {ids}"
    ordinals = [r["ordinal"] for r in runs]
    assert len(ordinals) == len(set(ordinals)), f"two runs share an ordinal: {ordinals}"

    # 1. at most one active run, and it is the thread's activeRunId
    active = [r for r in runs if r["status"] in ACTIVE]
    assert len(active) <= 1, f"more than one active run: {[(r['id'], r['status']) for r in active]}"
    if thread["status"] != "idle":
        assert active, f"thread is {thread['status']} but no run is active"
        assert thread["activeRunId"] == active[0]["id"], (thread["activeRunId"], active[0]["id"])
        assert thread["status"] == active[0]["status"], f"thread {thread['status']}, its active run {active[0]['status']}"
    else:
        assert not active, f"thread idle but run {active[0]['id']} is {active[0]['status']}"
        assert thread["activeRunId"] is None, f"idle thread keeps activeRunId {thread['activeRunId']}"

    for run in runs:
        detail = details[run["id"]]
        assert detail["run"] == run, f"thread.get and run.get disagree on run {run['id']}"
        attempts, nodes = detail["attempts"], {n["id"]: n for n in detail["nodes"]}
        # 2. attempts 1..n, only the last may be open, selectedAttemptId is the last
        numbers = [a["number"] for a in attempts]
        assert numbers == list(range(1, len(attempts) + 1)), f"run {run['id']}: attempt numbers {numbers}"
        assert run["attemptCount"] == len(attempts), f"run {run['id']}: attemptCount {run['attemptCount']} != {len(attempts)}"
        open_ = [a["number"] for a in attempts if a["status"] not in TERMINAL]
        assert len(open_) <= 1 and (not open_ or open_[0] == len(attempts)), f"run {run['id']}: open attempts {open_} of {numbers}"
        assert run["selectedAttemptId"] == attempts[-1]["id"], f"run {run['id']}: selectedAttemptId is not the last attempt"
        for attempt in attempts:
            root = nodes.get(attempt["rootNodeId"])
            assert root is not None and root["kind"] == "root_turn" and root["countsForRun"], f"attempt {attempt['id']}: bad root"
            assert root["attemptId"] == attempt["id"]
        assert all(n["kind"] == "root_turn" for n in nodes.values() if n["countsForRun"]), "only root turns count for the run"
        # 3. only root nodes end runs
        if run["status"] in TERMINAL:
            root = nodes.get(run["rootNodeId"])
            assert root is not None, f"terminal run {run['id']} has no root node {run['rootNodeId']}"
            assert root["kind"] == "root_turn" and root["countsForRun"], f"run {run['id']}: root {root}"
            assert root["status"] in TERMINAL, f"terminal run {run['id']} ({run['status']}) has root node {root['status']}"
            if run["status"] == "cancelled":
                assert root["status"] == "cancelled", f"cancelled run {run['id']} has root {root['status']}"
            assert attempts[-1]["status"] in TERMINAL, f"terminal run {run['id']} has open attempt {attempts[-1]}"
            still_open = [(n["kind"], n["status"]) for n in nodes.values() if n["status"] not in TERMINAL]
            assert not still_open, f"terminal run {run['id']} ({run['status']}) left nodes open: {still_open}"

    # 4. runs start in ordinal order
    ordinal = {r["id"]: r["ordinal"] for r in runs}
    starts = [e["runId"] for e in events if e["type"] == "run.started"]
    order: list[str] = []
    for run_id in starts:
        if not order or order[-1] != run_id:
            assert run_id not in order, f"run {run_id} started again after a later run: {starts}"
            order.append(run_id)
    started_ordinals = [ordinal[r] for r in order if r in ordinal]
    assert started_ordinals == sorted(started_ordinals), f"runs started out of ordinal order: {started_ordinals}"

    # 5. no pending request on a terminal run
    by_id = {r["id"]: r for r in runs}
    for request in snap["requests"]:
        assert request["status"] == "pending"
        run = by_id.get(request["runId"])
        assert run is not None and run["status"] in ACTIVE, f"pending request {request['id']} on run {run and run['status']}"
        assert request["attemptId"] == run["selectedAttemptId"], f"pending request {request['id']} of an old attempt"


def check_final(snap: dict[str, Any]) -> None:
    status = {r["id"]: r["status"] for r in snap["runs"]}
    assert all(s in TERMINAL for s in status.values()), f"runs left open: {status}"
    for message in snap["messages"]:
        if message["role"] != "user":
            continue
        ok = message["status"] in ("complete", "cancelled") or status.get(message["runId"]) in TERMINAL
        assert ok, f"user message {message['id']} left {message['status']} (run {message['runId']})"


# -- the test -------------------------------------------------------------------------------------


@asynccontextmanager
async def in_process_daemon(config_text: str = CONFIG) -> AsyncIterator[tuple[Client, ErrorLog]]:
    """A daemon in this trio loop (real clock) on a private data dir, and a
    client; yields ``(client, errors)`` where ``errors`` collects what the
    daemon logs at ERROR (check it after the block: shutdown is included)."""
    base = Path(tempfile.mkdtemp(prefix="ad-"))
    errors = ErrorLog()
    logging.getLogger().addHandler(errors)
    try:
        config_path = base / "config.toml"
        config_path.write_text(config_text)
        paths = Paths.resolve(base / "data", base / "s.sock", config_path)
        daemon = Daemon(DaemonOptions(paths=paths, config=load_config(config_path)))
        async with trio.open_nursery() as nursery:
            with trio.fail_after(WAIT):
                await nursery.start(daemon.serve)
            try:
                async with Client.connect(paths.socket) as client:
                    yield client, errors
            finally:
                daemon.request_shutdown()
    finally:
        logging.getLogger().removeHandler(errors)
        shutil.rmtree(base, ignore_errors=True)


async def run_example(provider: str, sequence: list[Any], drain_by_cancel: bool) -> None:
    harness = None
    try:
        async with in_process_daemon() as (client, errors):
            thread_id = (await client.call("thread.create", provider=provider))["threadId"]
            harness = Harness(client, thread_id, provider)
            async with trio.open_nursery() as nursery:
                await nursery.start(harness.follow)
                for command in sequence:
                    await harness.run_command(command)
                    check_invariants(await harness.snapshot(), harness.events)  # whatever state it left
                    await harness.settle()
                    check_invariants(await harness.snapshot(), harness.events)
                await harness.drain(drain_by_cancel)
                with trio.fail_after(WAIT):
                    final = await harness.snapshot()
                    log = await stored_events(client, thread_id)  # the whole event log
                check_invariants(final, log)
                check_final(final)
                nursery.cancel_scope.cancel()
        assert not errors.records, "the daemon logged errors:\n" + "\n".join(errors.records)
    except BaseException:
        if harness is not None:
            print("command trace:\n  " + "\n  ".join(harness.trace))
        raise


@settings(max_examples=25, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    provider=st.sampled_from(["scripted", "nosteer"]),
    sequence=sequences,
    drain_by_cancel=st.booleans(),
)
def test_run_control_properties(provider, sequence, drain_by_cancel):
    # Sync on purpose: pytest-trio's trio_mode only runs async tests, and
    # hypothesis calls this once per example.
    trio.run(run_example, provider, sequence, drain_by_cancel)


# -- bugs found by racing commands (no settling between them) -------------------------------------
#
# The property test above settles between commands, so that it is deterministic.
# Running the same commands back to back (a hunting variant, not kept: it is
# racy by nature) found the bugs below; each is pinned here by a deterministic
# reproduction.


async def test_interrupt_while_a_steering_restart_is_pending_ends_the_run():
    # A runtime that ignores interrupts keeps the restart pending for the
    # whole grace period, so the interrupt surely lands while it is pending.
    config = CONFIG.replace("interrupt_grace = 30", "interrupt_grace = 1")
    async with in_process_daemon(config) as (client, _errors):
        thread_id = (await client.call("thread.create", provider="nosteer"))["threadId"]
        sent = await client.call("thread.message.send", threadId=thread_id,
                                 text=script({"hang": True, "ignoreInterrupt": True}))
        await wait_event(client, lambda e: e["type"] == "run.started" and e.get("runId") == sent["runId"],
                         thread_id=thread_id, timeout=WAIT)
        steer = await client.call("thread.message.send", threadId=thread_id, text="hi",
                                  dispatchMode={"type": "restart_active", "targetRunId": sent["runId"]})
        assert steer["strategy"] == "steering_restart"
        reply = await client.call("run.interrupt", runId=sent["runId"])
        assert reply["interruptRequested"] is True
        run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=WAIT)
        assert run["status"] == "interrupted", (
            f"the interrupted run ended {run['status']} after {run['attemptCount']} attempts")


async def _refuse(*_args: Any, **_kwargs: Any) -> None:
    raise ProviderRuntimeError("refused by the test", code=-32003)


#: The two bugs below are races inside the daemon: the effect task posts the
#: lambda while still inside its ``except`` block, and the lambda fails only
#: when the effect leaves the block (deleting ``exc``) before the actor runs it
#: — about every other time. Repeating the scenario makes missing it unlikely
#: (about 0.5**REPEAT).
REPEAT = 10


async def test_a_refused_interrupt_stops_the_session_at_once(monkeypatch):
    monkeypatch.setattr(ScriptedConnection, "interrupt_turn", _refuse)
    async with in_process_daemon() as (client, errors):  # interrupt_grace = 30
        thread_id = (await client.call("thread.create", provider="scripted"))["threadId"]
        for _ in range(REPEAT):
            sent = await client.call("thread.message.send", threadId=thread_id, text=TEXTS["hang_tool"])
            await wait_event(client, lambda e: e["type"] == "tool.started" and e.get("runId") == sent["runId"],
                             thread_id=thread_id, timeout=WAIT)
            await client.call("run.interrupt", runId=sent["runId"])
            run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=3)
            assert run["status"] == "interrupted"
            assert not errors.records, "\n".join(errors.records)


async def test_a_refused_native_steer_falls_back_to_a_restart(monkeypatch):
    monkeypatch.setattr(ScriptedConnection, "steer_turn", _refuse)
    async with in_process_daemon() as (client, errors):
        thread_id = (await client.call("thread.create", provider="scripted"))["threadId"]
        for _ in range(REPEAT):
            sent = await client.call("thread.message.send", threadId=thread_id, text=TEXTS["hang_tool"])
            await wait_event(client, lambda e: e["type"] == "tool.started" and e.get("runId") == sent["runId"],
                             thread_id=thread_id, timeout=WAIT)
            steer = await client.call("thread.message.send", threadId=thread_id, text="hi",
                                      dispatchMode={"type": "steer_active", "targetRunId": sent["runId"]})
            assert steer["strategy"] == "native_steer"
            run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=3)
            assert (run["status"], run["attemptCount"]) == ("completed", 2), "restarted with the steering message"
            assert not errors.records, "\n".join(errors.records)

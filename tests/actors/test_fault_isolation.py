"""One thread's failure costs only that thread (issue 20; SPEC F11, F12, F18, F19).

Faults are injected through ordinary paths a real daemon meets: records torn
in LMDB by another process (py-lmdb, as a bad disk, a full disk or a foreign
tool leaves them), read by a thread's actor in the middle of its work. The
daemon is a real ``agentd serve`` process; clients watch from outside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest
import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError
from agentd.store.batch import DATABASES
from agentd.store.db import DEFAULT_MAP_SIZE
from tests.helpers import script, send_and_wait, stored_events, wait_event, wait_run_terminal

WAIT = 60


def tear(data_dir: Path, db: str, key: str) -> bytes:
    """Cut the stored value of ``key`` in sub-database ``db`` in half, from
    this (foreign) process, while the daemon may be running; the old bytes."""
    env = lmdb.open(str(data_dir / "store"), map_size=DEFAULT_MAP_SIZE, max_dbs=len(DATABASES) + 8)
    try:
        handle = env.open_db(db.encode(), create=False)
        with env.begin(write=True, db=handle) as txn:
            old = txn.get(key.encode())
            assert old is not None, f"no {db} record {key}"
            txn.put(key.encode(), old[: len(old) // 2])
            return bytes(old)
    finally:
        env.close()


def stored(data_dir: Path, db: str, key: str) -> bytes | None:
    env = lmdb.open(str(data_dir / "store"), map_size=DEFAULT_MAP_SIZE, max_dbs=len(DATABASES) + 8, readonly=True)
    try:
        with env.begin(db=env.open_db(db.encode(), create=False)) as txn:
            value = txn.get(key.encode())
            return None if value is None else bytes(value)
    finally:
        env.close()


def turn_start_effect(run_id: str) -> str:
    """The id of a run's turn-start outbox entry (read when the run ends)."""
    return "eff_" + run_id.partition("_")[2]


async def fail_a_run(client: Client, data_dir: Path, thread_id: str) -> dict:
    """Drive one actor failure: a run waits at an approval, its turn-start
    record is torn, and the approval lets the turn end, which reads it. The
    ``thread.failed`` event."""
    sent = await client.call("thread.message.send", threadId=thread_id,
                             text=script({"say": "before"}, {"approval": {"kind": "command", "command": "ls"}}))
    requested = await wait_event(client, lambda e: e["type"] == "approval.requested" and e.get("runId") == sent["runId"],
                                 thread_id=thread_id, timeout=WAIT)
    tear(data_dir, "effects", turn_start_effect(sent["runId"]))
    await client.call("approval.respond", requestId=requested["payload"]["request"]["id"], decision="accept")
    failed = await wait_event(client, lambda e: e["type"] == "thread.failed" and e["seq"] > requested["seq"],
                              thread_id=thread_id, timeout=WAIT)
    failed["runId"] = sent["runId"]
    return failed


@pytest.fixture
async def live(data_dir, socket_path):
    proc = await start_daemon(data_dir, socket_path)
    try:
        yield proc
    finally:
        await proc.terminate()


async def test_a_failed_actor_costs_its_thread_only_and_the_thread_runs_again(live, data_dir):
    """Issue 20: an actor fails on a torn record in the middle of its run.
    Another client's connection and live subscription stay open, another
    thread completes a run meanwhile, the failed thread's run is
    ``interrupted`` with reason ``thread_failed: …`` (an incident id the
    daemon log has with the traceback, once), no supervisor child restarts,
    and the thread's next message runs."""
    async with Client.connect(live.socket) as client, Client.connect(live.socket) as watcher:
        bad = (await client.call("thread.create", title="bad"))["threadId"]
        good = (await watcher.call("thread.create", title="good"))["threadId"]
        async with watcher.subscribe(thread_id=good) as good_events:
            failed = await fail_a_run(client, data_dir, bad)
            incident = failed["payload"]["incidentId"]
            assert failed["payload"]["quarantined"] is False
            assert failed["payload"]["runs_interrupted"] == 1

            # The other client's connection and its subscription live on.
            other = await watcher.call("thread.message.send", threadId=good, text="still here?")
            async for event in good_events:
                if event.get("runId") == other["runId"] and event["type"] == "run.completed":
                    break

        run = (await client.call("run.get", runId=failed["runId"]))["run"]
        assert run["status"] == "interrupted"
        assert run["reason"].startswith("thread_failed: CorruptRecord") and incident in run["reason"]
        assert (await client.call("thread.get", threadId=bad))["thread"]["status"] == "idle"
        again = await send_and_wait(client, bad, "and now?")
        assert again["status"] == "completed"
        status = await client.call("daemon.status")
        assert status["quarantined"] == []

    log = live.log_text()
    assert log.count(incident) >= 1 and log.count("Traceback") == 1, "the incident is logged once, with its traceback"
    assert "restarting" not in log, "no supervisor child restarted"


async def test_three_failures_quarantine_the_thread_until_unquarantined(live, data_dir):
    """Issue 20: three failures in a row (within the 60 s window) quarantine
    the thread: reads work, commands are refused ``thread_failed`` naming the
    first incident, other threads run; ``thread.unquarantine`` lifts it and
    the next message runs."""
    async with Client.connect(live.socket) as client:
        thread_id = (await client.call("thread.create"))["threadId"]
        other = (await client.call("thread.create"))["threadId"]
        incidents = [(await fail_a_run(client, data_dir, thread_id))["payload"] for _ in range(3)]
        assert [i["quarantined"] for i in incidents] == [False, False, True]
        first = incidents[0]["incidentId"]

        with pytest.raises(AgentdError) as refused:
            await client.call("thread.message.send", threadId=thread_id, text="hello?")
        assert refused.value.kind == "thread_failed"
        assert refused.value.data["quarantined"] is True and refused.value.data["firstIncidentId"] == first
        assert refused.value.data["threadId"] == thread_id

        got = await client.call("thread.get", threadId=thread_id)
        assert got["quarantine"]["firstIncidentId"] == first
        assert len(got["runs"]) == 3 and all(r["status"] == "interrupted" for r in got["runs"])
        assert (await client.call("daemon.status"))["quarantined"] == [thread_id]
        assert (await send_and_wait(client, other, "unaffected"))["status"] == "completed"

        lifted = await client.call("thread.unquarantine", threadId=thread_id)
        assert lifted["wasQuarantined"] is True
        assert (await client.call("thread.get", threadId=thread_id))["quarantine"] is None
        assert (await send_and_wait(client, thread_id, "back"))["status"] == "completed"
        assert (await client.call("thread.unquarantine", threadId=thread_id))["wasQuarantined"] is False


async def test_a_torn_thread_record_degrades_the_list_and_costs_only_that_thread(live, data_dir):
    """Issue 20: a torn ``threads`` record is ``corrupt_record`` (not "newer
    schema"), ``thread.list`` lists the other threads and reports it as
    ``{id, corrupt, reason}`` (paged too), and the other threads work."""
    async with Client.connect(live.socket) as client:
        ids = [(await client.call("thread.create", title=f"t{i}"))["threadId"] for i in range(3)]
        tear(data_dir, "threads", ids[1])
        listed = (await client.call("thread.list"))["threads"]
        assert [t["id"] for t in listed] == ids
        assert listed[1]["corrupt"] is True and "truncated" in listed[1]["reason"]
        assert "corrupt" not in listed[0] and listed[0]["title"] == "t0"
        page = (await client.call("thread.list", limit=2))["threads"]
        assert [t["id"] for t in page] == [ids[2], ids[1]] and page[1]["corrupt"] is True

        for method, params in (("thread.get", {"threadId": ids[1]}),
                               ("thread.message.send", {"threadId": ids[1], "text": "hi"})):
            with pytest.raises(AgentdError) as info:
                await client.call(method, **params)
            assert info.value.kind == "corrupt_record", method
            assert info.value.data["recordKind"] == "threads" and info.value.data["recordId"] == ids[1]
            assert "newer" not in info.value.message
        assert (await send_and_wait(client, ids[0], "fine"))["status"] == "completed"


async def test_a_torn_message_leaves_the_rest_of_the_thread_readable(live, data_dir):
    """Issue 20: ``thread.get`` answers what it can read and names what it
    cannot (``unreadable``); torn checkpoints are left out of
    ``checkpoint.list`` likewise, and the thread still takes messages."""
    async with Client.connect(live.socket) as client:
        thread_id = (await client.call("thread.create"))["threadId"]
        first = await send_and_wait(client, thread_id, script({"write": {"path": "a.txt", "content": "x"}}))
        await send_and_wait(client, thread_id, "second")
        got = await client.call("thread.get", threadId=thread_id)
        assert got["unreadable"] == [] and got["quarantine"] is None
        count = len(got["messages"])
        torn_message = got["messages"][0]["id"]
        tear(data_dir, "messages", torn_message)
        tear(data_dir, "checkpoints", first["checkpointId"])

        got = await client.call("thread.get", threadId=thread_id)
        assert torn_message not in [m["id"] for m in got["messages"]] and len(got["messages"]) == count - 1
        assert [(u["kind"], u["id"]) for u in got["unreadable"]] == [("messages", torn_message)]
        listed = await client.call("checkpoint.list", threadId=thread_id)
        assert first["checkpointId"] not in [c["id"] for c in listed["checkpoints"]]
        assert [(u["kind"], u["id"]) for u in listed["unreadable"]] == [("checkpoints", first["checkpointId"])]
        assert (await send_and_wait(client, thread_id, "third"))["status"] == "completed"


async def test_a_torn_event_is_replayed_as_a_placeholder_without_a_gap(live, data_dir):
    """Issue 20: a torn record in the event log does not end a replay: an
    ``event.corrupt`` placeholder stands at its seq (of all threads, and of
    its thread), so the replay keeps its order and has no gap."""
    async with Client.connect(live.socket) as client:
        thread_id = (await client.call("thread.create"))["threadId"]
        await send_and_wait(client, thread_id, "hello")
        events = await stored_events(client, thread_id)
        victim = events[len(events) // 2]["seq"]
        env = lmdb.open(str(data_dir / "store"), map_size=DEFAULT_MAP_SIZE, max_dbs=len(DATABASES) + 8)
        with env.begin(write=True, db=env.open_db(b"events", create=False)) as txn:
            key = victim.to_bytes(8, "big")
            txn.put(key, bytes(txn.get(key))[:5])
        env.close()
        replay = await stored_events(client)
        assert [e["seq"] for e in replay] == list(range(1, replay[-1]["seq"] + 1)), "no gap"
        (placeholder,) = [e for e in replay if e["seq"] == victim]
        assert placeholder["type"] == "event.corrupt" and placeholder["payload"]["reason"]
        # Replayed by thread, it is in the same place, with its thread.
        of_thread = []
        async with client.subscribe(thread_id=thread_id) as stream:
            async for event in stream:
                of_thread.append(event)
                if event["seq"] >= events[-1]["seq"]:
                    break
        assert [e["seq"] for e in of_thread] == [e["seq"] for e in events]
        (placeholder,) = [e for e in of_thread if e["seq"] == victim]
        assert placeholder["type"] == "event.corrupt" and placeholder["threadId"] == thread_id


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentd", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


async def test_agentd_doctor_lists_torn_records_without_changing_them(live, data_dir):
    """Issue 20: ``agentd doctor`` lists every corrupt record of the data
    dir (kind, id, reason), changes none of them, and exits 1; on a clean
    data dir it says so and exits 0. It works while the daemon runs."""
    async with Client.connect(live.socket) as client:
        thread_id = (await client.call("thread.create"))["threadId"]
        run = await send_and_wait(client, thread_id, "hello")
    clean = await trio.to_thread.run_sync(run_cli, "doctor", "--data-dir", str(data_dir))
    assert clean.returncode == 0, clean.stderr
    assert "no corrupt records" in clean.stdout

    tear(data_dir, "runs", run["id"])
    tear(data_dir, "threads", thread_id)
    before = (stored(data_dir, "runs", run["id"]), stored(data_dir, "threads", thread_id))
    found = await trio.to_thread.run_sync(run_cli, "doctor", "--data-dir", str(data_dir))
    assert found.returncode == 1, found.stderr
    assert f"runs {run['id']}" in found.stdout and f"threads {thread_id}" in found.stdout
    as_json = await trio.to_thread.run_sync(run_cli, "doctor", "--data-dir", str(data_dir), "--json")
    report = json.loads(as_json.stdout)
    assert sorted((r["kind"], r["id"]) for r in report["corrupt"]) == [("runs", run["id"]), ("threads", thread_id)]
    assert all(r["reason"] for r in report["corrupt"])
    assert (stored(data_dir, "runs", run["id"]), stored(data_dir, "threads", thread_id)) == before, "nothing changed"


async def test_the_cli_shows_what_it_can_read_and_names_the_rest(live, data_dir, socket_path):
    """Issue 20: ``agentd threads`` lists a torn thread as CORRUPT among the
    others, and ``agentd show`` shows a thread with a torn message and names
    it; ``agentd unquarantine`` on a thread that is not quarantined says so."""
    async with Client.connect(live.socket) as client:
        torn = (await client.call("thread.create", title="torn"))["threadId"]
        kept = (await client.call("thread.create", title="kept"))["threadId"]
        await send_and_wait(client, kept, "hello")
        message = (await client.call("thread.get", threadId=kept))["messages"][0]["id"]
    tear(data_dir, "threads", torn)
    tear(data_dir, "messages", message)
    where = ("--data-dir", str(data_dir), "--socket", str(socket_path))
    listed = await trio.to_thread.run_sync(run_cli, "threads", *where)
    assert listed.returncode == 0, listed.stderr
    (torn_line,) = [line for line in listed.stdout.splitlines() if line.startswith(torn)]
    assert "CORRUPT" in torn_line and "unreadable record" in torn_line
    assert any(line.startswith(kept) and line.endswith("kept") for line in listed.stdout.splitlines())
    shown = await trio.to_thread.run_sync(run_cli, "show", kept, *where)
    assert shown.returncode == 0, shown.stderr
    assert f"unreadable messages record {message}" in shown.stdout and "You said: hello" in shown.stdout
    lifted = await trio.to_thread.run_sync(run_cli, "unquarantine", kept, *where)
    assert lifted.returncode == 0 and "was not quarantined" in lifted.stdout


# -- in process: faults in an actor's own handler ------------------------------------------


async def raise_injected(_actor, _command):
    raise RuntimeError("injected fault")


async def answer_ok(_actor, _command):
    return {"ok": True}


async def test_commands_waiting_in_a_failed_actor_get_thread_failed(tmp_path, autojump_clock):
    """Issue 20: the command a failing actor handles and the one waiting in
    its mailbox both get ``thread_failed`` with the same incident; the actor
    of another thread is not touched, and the next command loads a fresh one."""
    from tests.supervisor.test_supervision import virtual_daemon

    async with virtual_daemon(tmp_path) as (daemon, client):
        registry = daemon.registry
        thread_id = (await client.call("thread.create"))["threadId"]
        other = (await client.call("thread.create"))["threadId"]
        await registry.call(other, answer_ok, None, method="test.ok")
        other_actor = registry._actors[other]
        entered, release = trio.Event(), trio.Event()

        async def blocked_then_raise(_actor, _command):
            entered.set()
            await release.wait()
            raise RuntimeError("injected fault")

        answers: dict[str, object] = {}

        async def call(name, handler):
            try:
                answers[name] = await registry.call(thread_id, handler, None, method=f"test.{name}")
            except AgentdError as exc:
                answers[name] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "handling", blocked_then_raise)
            await entered.wait()
            nursery.start_soon(call, "waiting", answer_ok)
            await trio.testing.wait_all_tasks_blocked()
            assert registry._actors[thread_id].send_channel.statistics().current_buffer_used == 1
            release.set()
        handling, waiting = answers["handling"], answers["waiting"]
        assert isinstance(handling, AgentdError) and isinstance(waiting, AgentdError)
        assert handling.kind == waiting.kind == "thread_failed"
        assert handling.data["incidentId"] == waiting.data["incidentId"]
        assert handling.data["threadId"] == thread_id and "RuntimeError: injected fault" in handling.data["reason"]
        assert registry._actors[other] is other_actor, "the other thread's actor lives on"
        assert await registry.call(thread_id, answer_ok, None, method="test.ok") == {"ok": True}


async def test_actor_failures_past_any_intensity_restart_no_part_of_the_daemon(tmp_path, autojump_clock):
    """Issue 20: four actor failures in a row (more than the root's, the
    core's or any supervisor's intensity allows) restart nothing: each is
    its thread's ``thread_failed``, and the same connection answers on."""
    from tests.supervisor.test_supervision import virtual_daemon

    async with virtual_daemon(tmp_path) as (daemon, client):
        thread_id = (await client.call("thread.create"))["threadId"]
        restarts = (daemon.supervisor.restarts, daemon.core.restarts)
        for _ in range(4):  # past any intensity the tree has
            with pytest.raises(AgentdError) as info:
                await daemon.registry.call(thread_id, raise_injected, None, method="test.fault")
            assert info.value.kind == "thread_failed"
            daemon.registry.failures.release(thread_id)
        assert (await client.call("daemon.status"))["lastSeq"] > 0, "the same connection still answers"
        assert (daemon.supervisor.restarts, daemon.core.restarts) == restarts == (0, 0), "nothing restarted"


# -- property: random faults in random threads ---------------------------------------------

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

THREADS = 3
HANG = script({"tool": {"name": "build", "hang": True}})
operations = st.lists(
    st.tuples(st.sampled_from(["hang", "fault", "message"]), st.integers(0, THREADS - 1)), min_size=1, max_size=7,
)


async def fault_example(tmp: Path, ops: list[tuple[str, int]]) -> None:
    """Apply ``ops`` to THREADS threads of one in-process daemon; after each,
    every thread the op did not touch is as it was — its actor the same
    object, its hanging run still running — and the one connection answers."""
    from tests.supervisor.test_supervision import virtual_daemon

    async with virtual_daemon(tmp) as (daemon, client):
        registry = daemon.registry
        threads = [(await client.call("thread.create"))["threadId"] for _ in range(THREADS)]
        hanging: dict[int, str] = {}  # thread index -> its running run
        faults = [0] * THREADS
        for op, index in ops:
            thread_id = threads[index]
            quarantined = faults[index] >= 3
            before = {j: registry._actors.get(t) for j, t in enumerate(threads) if j != index}
            if op == "hang" and index not in hanging and not quarantined:
                sent = await client.call("thread.message.send", threadId=thread_id, text=HANG)
                await wait_event(client, lambda e: e["type"] == "tool.started" and e.get("runId") == sent["runId"],
                                 thread_id=thread_id, timeout=WAIT)
                hanging[index] = sent["runId"]
            elif op == "fault":
                with pytest.raises(AgentdError) as info:
                    await registry.call(thread_id, raise_injected, None, method="test.fault")
                assert info.value.kind == "thread_failed"
                if not quarantined:
                    faults[index] += 1
                    assert info.value.data["quarantined"] is (faults[index] >= 3)
                    if index in hanging:
                        run = await wait_run_terminal(client, thread_id, hanging.pop(index), timeout=WAIT)
                        assert run["status"] == "interrupted" and run["reason"].startswith("thread_failed: RuntimeError")
                else:
                    assert info.value.data["quarantined"] is True
            elif op == "message" and index not in hanging:
                if quarantined:
                    with pytest.raises(AgentdError) as info:
                        await client.call("thread.message.send", threadId=thread_id, text="hello")
                    assert info.value.kind == "thread_failed" and info.value.data["quarantined"] is True
                else:
                    assert (await send_and_wait(client, thread_id, "hello"))["status"] == "completed"
            # Every other thread is unaffected.
            for j, actor in before.items():
                if actor is not None and j in hanging:
                    assert registry._actors.get(threads[j]) is actor, f"thread {j}'s actor was replaced"
            for j, run_id in hanging.items():
                assert (await client.call("run.get", runId=run_id))["run"]["status"] == "running", f"thread {j}"
            assert sorted((await client.call("daemon.status"))["quarantined"]) == sorted(
                threads[j] for j in range(THREADS) if faults[j] >= 3)
        # In the end every thread still works (a quarantined one once lifted).
        for j, run_id in hanging.items():
            await client.call("run.interrupt", runId=run_id)
            await wait_run_terminal(client, threads[j], run_id, timeout=WAIT)
        for j, thread_id in enumerate(threads):
            if faults[j] >= 3:
                await client.call("thread.unquarantine", threadId=thread_id)
            assert (await send_and_wait(client, thread_id, "still there?"))["status"] == "completed"


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ops=operations)
@example(ops=[("hang", 0), ("hang", 1), ("fault", 0), ("fault", 0), ("hang", 0), ("fault", 0), ("message", 0),
              ("fault", 0), ("message", 1), ("fault", 1), ("message", 1)])
def test_random_faults_in_random_threads_leave_every_other_thread_unaffected(tmp_path_factory, ops):
    """Issue 20 (SPEC F18): a property over random sequences of hanging runs,
    faults in an actor's handler and plain messages across three threads."""
    # Sync on purpose: hypothesis calls this once per example (real clock, real agents).
    trio.run(fault_example, tmp_path_factory.mktemp("faults"), ops)


def test_a_cancelled_transition_still_gives_back_what_it_holds():
    """Issue 22: when the actor is cancelled while a transition waits on an
    effect, the release effects its ``finally`` blocks yield on the way out
    (a session claim, a restore's mark) are carried out at once, and the
    cancellation goes on; any other effect yielded then is not awaited."""
    from agentd.actors import effects as fx
    from agentd.actors.thread_actor import ThreadActor

    released: list[object] = []

    class Executor:
        def release(self, effect):
            released.append(effect)

    class Actor:
        executor = Executor()

    def transition():
        claim = yield fx.ClaimSession()
        try:
            try:
                yield fx.Commit(None)  # cancelled here
            finally:
                yield fx.EndRestore(7)
                yield fx.StartNext()  # not carried out: the cancellation is thrown back
        finally:
            yield fx.ReleaseClaim(claim)

    running = transition()
    assert isinstance(next(running), fx.ClaimSession)
    assert isinstance(running.send("claim-1"), fx.Commit)
    ThreadActor._unwind(Actor(), running, trio.Cancelled._create())  # type: ignore[arg-type]
    assert released == [fx.EndRestore(7), fx.ReleaseClaim("claim-1")]
    assert running.gi_frame is None, "the transition ended"

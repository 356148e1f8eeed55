"""Supervision under virtual time (SPEC F11, F19).

The daemon runs in the test's own trio loop with
``MockClock(autojump_threshold=0)`` (pytest-trio's ``autojump_clock``): the
idle reaper's ten minutes pass in microseconds, through the production
reaper and stop path, with the scripted agent as a real subprocess. Commits
run inline (no worker thread for the clock to jump past) and provider
requests carry no deadline; waits are on events, never on virtual deadlines.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio

from agentd.actors.providers.base import Capabilities
from agentd.actors.config import DaemonConfig, ProviderConfig
from agentd.actors.providers.jsonl import stop_process
from agentd.protocol.client import Client
from agentd.supervisor.daemon import Daemon, DaemonOptions
from agentd.supervisor.paths import Paths
from agentd.supervisor.tree import ChildSpec, Restart, RestartIntensity, Strategy, Supervisor, SupervisorGaveUp
from tests.helpers import script

IDLE = 600.0


@asynccontextmanager
async def virtual_daemon(tmp_path: Path, **daemon_settings):
    """An in-process daemon on virtual time; yields ``(daemon, client)``.
    ``daemon_settings`` set fields of the DaemonConfig ([daemon] keys)."""
    sock_dir = Path(tempfile.mkdtemp(prefix="ad-"))
    config = DaemonConfig()
    config.providers["scripted"] = ProviderConfig(name="scripted", kind="scripted")
    config.providers["quick"] = ProviderConfig(name="quick", kind="scripted", idle_timeout=5.0)
    config.providers["basic"] = ProviderConfig(name="basic", kind="scripted", capabilities=Capabilities(interrupt=False))
    config.idle_timeout = IDLE
    for key, value in daemon_settings.items():
        setattr(config, key, value)
    options = DaemonOptions(
        paths=Paths.resolve(tmp_path / "data", sock_dir / "s.sock", tmp_path / "none.toml"),
        config=config, wall_clock=trio.current_time, inline_commits=True, request_timeout=None,
    )
    daemon = Daemon(options)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(daemon.serve)
            async with Client.connect(options.paths.socket) as client:
                yield daemon, client
            daemon.request_shutdown()
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


@pytest.fixture
async def vdaemon(tmp_path, autojump_clock):
    async with virtual_daemon(tmp_path) as pair:
        yield pair


async def next_event(client: Client, thread_id: str, predicate, after_seq: int = 0) -> dict:
    """The first event of the thread (replayed or live) matching ``predicate``.
    No deadline on purpose: under autojump a deadline would fire while the
    real agent process works (pytest-timeout guards against a hang)."""
    async with client.subscribe(thread_id=thread_id, after_seq=after_seq) as events:
        async for event in events:
            if predicate(event):
                return event
    raise AssertionError("event stream ended")


async def send_and_finish(client: Client, thread_id: str, text: str, **params) -> dict:
    sent = await client.call("thread.message.send", threadId=thread_id, text=text, **params)
    event = await next_event(client, thread_id, lambda e: e.get("runId") == sent["runId"] and e["type"] in (
        "run.completed", "run.failed", "run.interrupted", "run.cancelled"))
    return event["payload"]["run"]


async def test_idle_reap_then_next_message_resumes_the_same_provider_thread(vdaemon, autojump_clock):
    daemon, client = vdaemon
    thread_id = (await client.call("thread.create"))["threadId"]
    first = await send_and_finish(client, thread_id, "remember me")
    ready = await next_event(client, thread_id, lambda e: e["type"] == "session.ready")
    stopped = await next_event(client, thread_id, lambda e: e["type"] == "session.stopped")
    session = stopped["payload"]["session"]
    assert session["reason"] == "idle_timeout"
    assert stopped["at"] - ready["at"] >= IDLE, "reaped only after the idle timeout"
    assert (await client.call("daemon.status"))["sessions"] == [], "an idle agent costs no process"

    second = await send_and_finish(client, thread_id, script({"reportHistory": True}))
    assert second["status"] == "completed"
    a1 = (await client.call("run.get", runId=first["id"]))["attempts"][0]
    a2 = (await client.call("run.get", runId=second["id"]))["attempts"][0]
    assert a1["providerThreadId"] == a2["providerThreadId"], "same ProviderThread after the reap"
    resumed = await next_event(client, thread_id, lambda e: e["type"] == "provider_thread.resumed")
    assert resumed["payload"]["nativeTurnCount"] == 1
    text = (await client.call("thread.get", threadId=thread_id))["messages"][-1]["text"]
    assert text == "history: 1 turn", "the next turn sees the earlier conversation"
    new_session = (await client.call("daemon.status"))["sessions"][0]
    assert new_session["id"] != session["id"] and new_session["pid"] != session["pid"]


async def test_idle_timeout_is_settable_per_provider(vdaemon, autojump_clock):
    daemon, client = vdaemon
    thread_id = (await client.call("thread.create", provider="quick"))["threadId"]
    await send_and_finish(client, thread_id, "hi")
    ready = await next_event(client, thread_id, lambda e: e["type"] == "session.ready")
    stopped = await next_event(client, thread_id, lambda e: e["type"] == "session.stopped")
    assert 5.0 <= stopped["at"] - ready["at"] < IDLE


async def test_a_busy_session_is_never_reaped(vdaemon, autojump_clock):
    """While one thread's turn runs, virtual time flies (another thread's idle
    session is reaped meanwhile), but the busy session lives on."""
    daemon, client = vdaemon
    idle_thread = (await client.call("thread.create", provider="quick"))["threadId"]
    await send_and_finish(client, idle_thread, "idle soon")
    busy_thread = (await client.call("thread.create", provider="quick"))["threadId"]
    run = await send_and_finish(client, busy_thread, script({"tool": {"name": "build", "seconds": 0.5}}))
    assert run["status"] == "completed"
    events = []
    async with client.subscribe(thread_id=busy_thread) as stream:
        target = (await client.call("daemon.status"))["lastSeq"]
        async for event in stream:
            events.append(event["type"])
            if event["seq"] >= target or event["type"] == "run.completed":
                break
    started, completed = events.index("run.started"), events.index("run.completed")
    assert "session.stopped" not in events[started:completed]
    await next_event(client, idle_thread, lambda e: e["type"] == "session.stopped")


async def test_idle_actors_are_retired_and_come_back_on_the_next_command(vdaemon, autojump_clock):
    """F18: a thread that is not loaded costs no task; its next command loads it."""
    daemon, client = vdaemon
    thread_id = (await client.call("thread.create"))["threadId"]
    await send_and_finish(client, thread_id, "hi")
    assert thread_id in (await client.call("daemon.status"))["loadedActors"]
    # Virtual time: the actor's idle deadline (60 s) passes deterministically.
    await trio.sleep(daemon.options.actor_idle_timeout + 1)
    assert thread_id not in (await client.call("daemon.status"))["loadedActors"]
    run = await send_and_finish(client, thread_id, script({"reportHistory": True}))
    assert run["ordinal"] == 2 and run["status"] == "completed"


async def test_run_resume_is_unsupported_with_an_explanation(vdaemon, autojump_clock):
    """F12: no fake success for resuming old execution."""
    daemon, client = vdaemon
    thread_id = (await client.call("thread.create"))["threadId"]
    run = await send_and_finish(client, thread_id, "hi")
    with pytest.raises(Exception) as info:
        await client.call("run.resume", runId=run["id"])
    assert info.value.kind == "unsupported"
    assert "does not resume execution" in info.value.message


async def test_an_interrupt_the_provider_ignores_is_escalated_after_the_grace_period(vdaemon, autojump_clock):
    """F10: the run ends only when the provider ends the turn — or, if it never
    does, when agentd stops its session after the grace period."""
    daemon, client = vdaemon
    thread_id = (await client.call("thread.create"))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread_id, text=script({"hang": True, "ignoreInterrupt": True}))
    await next_event(client, thread_id, lambda e: e["type"] == "run.started")
    asked = trio.current_time()
    await client.call("run.interrupt", runId=sent["runId"])
    ended = await next_event(client, thread_id, lambda e: e["type"] == "run.interrupted")
    assert trio.current_time() - asked >= daemon.options.config.interrupt_grace
    warning = await next_event(client, thread_id, lambda e: e["type"] == "runtime.warning")
    assert "did not end the turn within 10s" in warning["payload"]["message"]
    stopped = await next_event(client, thread_id, lambda e: e["type"] == "session.stopped")
    assert stopped["payload"]["session"]["reason"] == "interrupt_escalated"
    assert ended["payload"]["run"]["reason"] == "interrupted"


@pytest.mark.parametrize("policy", ["interrupted", "cancelled"])
async def test_unsupported_interrupt_policy(tmp_path, autojump_clock, policy):
    """F10: a provider without interrupt has its session stopped; the run
    becomes what the policy says."""
    async with virtual_daemon(tmp_path, unsupported_interrupt_status=policy) as (daemon, client):
        thread_id = (await client.call("thread.create", provider="basic"))["threadId"]
        sent = await client.call("thread.message.send", threadId=thread_id, text=script({"hang": True}))
        await next_event(client, thread_id, lambda e: e["type"] == "run.started")
        await client.call("run.interrupt", runId=sent["runId"])
        ended = await next_event(client, thread_id, lambda e: e.get("runId") == sent["runId"] and e["type"] == f"run.{policy}")
        assert ended["payload"]["run"]["status"] == policy


# -- the supervision primitives -------------------------------------------------------


async def test_restart_intensity_window(autojump_clock):
    intensity = RestartIntensity(3, 60.0)
    assert [intensity.allow() for _ in range(4)] == [True, True, True, False]
    await trio.sleep(61)
    assert intensity.allow()


async def test_shutdown_ladder_escalates_to_sigkill(autojump_clock):
    """Polite stop → bounded wait → SIGTERM → SIGKILL, on virtual time, for a
    process that ignores both its input closing and SIGTERM."""
    stubborn = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "while True: time.sleep(3600)\n"
    )
    process = await trio.lowlevel.open_process([sys.executable, "-c", stubborn], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert await process.stdout.receive_some(16) == b"ready\n"
    start = trio.current_time()
    await stop_process(process, polite=process.stdin.aclose, grace=2.0)
    assert process.returncode == -9
    assert trio.current_time() - start >= 2.0 + 2.0, "waited out the polite and SIGTERM steps"


async def test_shutdown_ladder_polite_stop_is_enough_for_a_well_behaved_process():
    # Real time: the process exits on end of input long before the grace period.
    process = await trio.lowlevel.open_process([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    await stop_process(process, polite=process.stdin.aclose, grace=10.0)
    assert process.returncode == 0


async def test_supervisor_restarts_by_restart_type_and_stops_in_reverse(autojump_clock):
    log: list[str] = []
    crashes = {"perm": 2, "trans": 1}

    def child(name: str, *, exit_normally: bool = False):
        async def serve(*, task_status=trio.TASK_STATUS_IGNORED):
            log.append(f"start {name}")
            task_status.started()
            try:
                if crashes.get(name, 0) > 0:
                    crashes[name] -= 1
                    await trio.sleep(1)
                    raise RuntimeError(f"{name} crashed")
                if exit_normally:
                    return
                await trio.sleep_forever()
            finally:
                log.append(f"stop {name}")
        return serve

    sup = Supervisor(
        [
            ChildSpec("perm", child("perm"), Restart.PERMANENT),
            ChildSpec("trans", child("trans", exit_normally=True), Restart.TRANSIENT),
            ChildSpec("temp", child("temp", exit_normally=True), Restart.TEMPORARY),
        ],
        intensity=RestartIntensity(5, 30.0),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.serve)
        await trio.sleep(10)
        sup.request_stop()
    assert log.count("start perm") == 3, "permanent: restarted after each crash"
    assert log.count("start trans") == 2, "transient: restarted after the crash, not after the normal exit"
    assert log.count("start temp") == 1, "temporary: never restarted"
    assert log[-1] == "stop perm", "stopped in reverse order: the first child last"


async def test_supervisor_gives_up_past_the_restart_intensity(autojump_clock):
    async def always_crashes(*, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        await trio.sleep(1)
        raise RuntimeError("boom")

    sup = Supervisor([ChildSpec("bad", always_crashes)], intensity=RestartIntensity(3, 60.0))
    with pytest.RaisesGroup(pytest.RaisesExc(SupervisorGaveUp, match="boom")):
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.serve)
    assert trio.current_time() >= 3, "it restarted the child before giving up"


async def test_a_polite_stop_that_hangs_is_cut_off_after_its_shutdown_time(autojump_clock):
    """Issue 20: every child spec has a bounded shutdown: a polite stop that
    never returns is given ``shutdown`` seconds, then the child is cancelled."""
    log: list[str] = []

    async def hangs():
        log.append("polite stop begins")
        await trio.sleep_forever()

    sup = Supervisor([ChildSpec("stubborn", recording_child(log, "stubborn"), stop=hangs, shutdown=7.0)])
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.serve)
        began = trio.current_time()
        sup.request_stop()
    assert log == ["start stubborn", "ready stubborn", "polite stop begins", "stop stubborn"]
    assert trio.current_time() - began == pytest.approx(7.0), "cut off after its shutdown time, not before"


async def test_a_nested_supervisor_keeps_its_restarts_and_its_children_to_itself(autojump_clock):
    """Issue 20: a crash loop in a nested branch counts against the branch's
    own intensity; the branch gives up as one exit of it, and as a temporary
    child of the root it is dropped while the root's other branch runs on
    untouched (the checkpoint compactor's place in the daemon)."""
    log: list[str] = []
    crashes = {"compactor": 10}
    core = Supervisor([ChildSpec("writer", recording_child(log, "writer")),
                       ChildSpec("socket", recording_child(log, "socket"))], strategy=Strategy.REST_FOR_ONE,
                      intensity=RestartIntensity(3, 60.0))
    maintenance = Supervisor([ChildSpec("compactor", recording_child(log, "compactor", crashes=crashes))],
                             intensity=RestartIntensity(3, 60.0))
    root = Supervisor([core.child_spec("core"), maintenance.child_spec("maintenance", restart=Restart.TEMPORARY)],
                      intensity=RestartIntensity(0, 60.0))
    async with trio.open_nursery() as nursery:
        await nursery.start(root.serve)
        await trio.sleep(30)
        assert log.count("start compactor") == 4, "restarted 3 times by its own branch, then given up"
        assert (core.restarts, maintenance.restarts, root.restarts) == (0, 3, 0)
        root.request_stop()
    assert log.count("start writer") == log.count("start socket") == 1, "the core was never touched"
    assert log[-2:] == ["stop socket", "stop writer"], "the core stopped in order, politely"


# -- rest_for_one -------------------------------------------------------------------


def recording_child(log: list[str], name: str, *, crashes: dict[str, int] | None = None,
                    ready_after: float = 0.0, fails_to_start: dict[str, int] | None = None,
                    sup: list[Supervisor] | None = None):
    """A child that logs ``start``/``ready``/``stop`` (with the supervisor's
    ``restart_cause`` when it starts), crashes ``crashes[name]`` times one
    second after it is ready, and fails before ready ``fails_to_start[name]`` times."""
    crashes = crashes if crashes is not None else {}
    fails_to_start = fails_to_start if fails_to_start is not None else {}

    async def serve(*, task_status=trio.TASK_STATUS_IGNORED):
        cause = sup[0].restart_cause if sup else None
        log.append(f"start {name}" + (f" (after {cause})" if cause else ""))
        try:
            await trio.sleep(ready_after)
            if fails_to_start.get(name, 0) > 0:
                fails_to_start[name] -= 1
                raise RuntimeError(f"{name} could not start")
            log.append(f"ready {name}")
            task_status.started()
            if crashes.get(name, 0) > 0:
                crashes[name] -= 1
                await trio.sleep(1)
                raise RuntimeError(f"{name} crashed")
            await trio.sleep_forever()
        finally:
            log.append(f"stop {name}")

    return serve


def polite(log: list[str], name: str, sup: list[Supervisor]):
    async def stop():
        cause = sup[0].restart_cause
        log.append(f"polite {name} ({'restart after ' + cause if cause else 'shutdown'})")
    return stop


async def test_rest_for_one_restarts_the_crashed_child_and_every_later_one_in_order(autojump_clock):
    """The later children stop last-first (polite stop, then cancel), then the
    crashed one and the later ones start again in order, each after the one
    before is ready; the earlier child is not touched."""
    log: list[str] = []
    box: list[Supervisor] = []
    crashes = {"b": 1}
    specs = [
        ChildSpec(name, recording_child(log, name, crashes=crashes, ready_after=2.0 if name == "b" else 0.0, sup=box),
                  stop=polite(log, name, box))
        for name in "abcd"
    ]
    sup = Supervisor(specs, strategy=Strategy.REST_FOR_ONE, intensity=RestartIntensity(3, 60.0))
    box.append(sup)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.serve)
        assert log == ["start a", "ready a", "start b", "ready b", "start c", "ready c", "start d", "ready d"]
        log.clear()
        await trio.sleep(10)
        assert log == [
            "stop b",  # it crashed
            "polite d (restart after b)", "stop d",
            "polite c (restart after b)", "stop c",
            "start b (after b)", "ready b",
            "start c (after b)", "ready c",
            "start d (after b)", "ready d",
        ]
        log.clear()
        sup.request_stop()
    assert log == [
        "polite d (shutdown)", "stop d", "polite c (shutdown)", "stop c",
        "polite b (shutdown)", "stop b", "polite a (shutdown)", "stop a",
    ], "the first child was never restarted; everything stops in reverse at shutdown"


async def test_rest_for_one_crash_of_the_last_child_restarts_only_it(autojump_clock):
    log: list[str] = []
    sup = Supervisor(
        [ChildSpec(name, recording_child(log, name, crashes={"c": 1})) for name in "abc"],
        strategy=Strategy.REST_FOR_ONE,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.serve)
        log.clear()
        await trio.sleep(10)
        assert log == ["stop c", "start c", "ready c"]
        sup.request_stop()


async def test_rest_for_one_later_temporary_child_is_stopped_and_not_started_again(autojump_clock):
    log: list[str] = []
    sup = Supervisor(
        [
            ChildSpec("a", recording_child(log, "a", crashes={"a": 1})),
            ChildSpec("temp", recording_child(log, "temp"), Restart.TEMPORARY),
            ChildSpec("b", recording_child(log, "b")),
        ],
        strategy=Strategy.REST_FOR_ONE,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.serve)
        log.clear()
        await trio.sleep(10)
        assert log == ["stop a", "stop b", "stop temp", "start a", "ready a", "start b", "ready b"]
        sup.request_stop()


async def test_rest_for_one_failed_restart_counts_as_a_crash_and_is_retried(autojump_clock):
    """A restart that fails before ready is one more exit of that child: it
    costs a restart of the budget, and nothing after it starts until it is ready."""
    log: list[str] = []
    fails = {}
    sup = Supervisor(
        [ChildSpec(name, recording_child(log, name, crashes={"a": 1}, fails_to_start=fails)) for name in "ab"],
        strategy=Strategy.REST_FOR_ONE, intensity=RestartIntensity(3, 60.0),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.serve)
        fails["a"] = 1  # its next start fails once
        log.clear()
        await trio.sleep(10)
        assert log == ["stop a", "stop b", "start a", "stop a", "start a", "ready a", "start b", "ready b"]
        assert [sup.intensity.allow() for _ in range(2)] == [True, False], "two of three restarts were spent"
        sup.request_stop()


async def test_rest_for_one_gives_up_past_the_restart_intensity_and_stops_everything(autojump_clock):
    log: list[str] = []
    crashes = {"a": 100}
    box: list[Supervisor] = []
    sup = Supervisor(
        [ChildSpec(name, recording_child(log, name, crashes=crashes), stop=polite(log, name, box)) for name in "ab"],
        strategy=Strategy.REST_FOR_ONE, intensity=RestartIntensity(2, 60.0),
    )
    box.append(sup)
    with pytest.RaisesGroup(pytest.RaisesExc(SupervisorGaveUp, match="a crashed")):
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.serve)
    assert log.count("start a") == 3 and log.count("start b") == 3
    assert log[-3:] == ["stop a", "polite b (shutdown)", "stop b"], "after giving up, the rest is stopped politely"


# -- a store-writer fault in a live daemon --------------------------------------------


def faulty_once(serve, fault: trio.Event, what: str):
    """``serve`` (an unbound ``serve(self, *, task_status)``) that raises once,
    after it is ready, when ``fault`` is set; later lives serve normally."""
    faulted: list[bool] = []

    async def faulty(self, *, task_status=trio.TASK_STATUS_IGNORED):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, self)
            task_status.started()
            if not faulted:
                await fault.wait()
                faulted.append(True)
                raise RuntimeError(f"injected {what} fault")

    return faulty


def restart_probes(monkeypatch) -> tuple[list[trio.Event], list[tuple[int, bool]]]:
    """Events set each time the daemon's socket server is ready (the last
    child, so the second one means the rest restarted), and what every
    ``end_orphan`` call of reconciliation did: ``(pid, ended)``."""
    import agentd.supervisor.daemon as daemon_module

    listening = [trio.Event(), trio.Event()]
    unix_serve = daemon_module.serve_unix

    async def counted_serve_unix(*args, task_status=trio.TASK_STATUS_IGNORED, **kwargs):
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(unix_serve, *args, **kwargs))
            next(e for e in listening if not e.is_set()).set()
            task_status.started()

    orphans_ended: list[tuple[int, bool]] = []
    real_end_orphan = daemon_module.end_orphan

    async def recorded_end_orphan(pid, start_ticks, **kwargs):
        ended = await real_end_orphan(pid, start_ticks, **kwargs)
        orphans_ended.append((pid, ended))
        return ended

    monkeypatch.setattr(daemon_module, "serve_unix", counted_serve_unix)
    monkeypatch.setattr(daemon_module, "end_orphan", recorded_end_orphan)
    return listening, orphans_ended


def record_session_exits(daemon: Daemon, monkeypatch) -> list:
    """The SessionExited events the session manager hands to the registry."""
    from agentd.actors.providers.base import SessionExited

    exits: list[SessionExited] = []
    registry_deliver = daemon.registry.deliver

    async def deliver(thread_id, event):
        if isinstance(event, SessionExited):
            exits.append(event)
        await registry_deliver(thread_id, event)

    monkeypatch.setattr(daemon.registry, "deliver", deliver)
    return exits


@pytest.mark.parametrize("child", ["store-writer", "thread-registry"])
async def test_a_child_fault_during_a_turn_restarts_the_rest_and_reconciles_only_dead_work(
    tmp_path, autojump_clock, monkeypatch, child
):
    """The store writer (or the thread registry) fails once while a turn runs.
    rest_for_one stops the socket, the provider sessions (politely: the runtime
    is not SIGKILLed) and the actors, restarts the failed child and the rest,
    and the registry's reconciliation closes the run — once, as
    ``interrupted`` with reason ``<child>_restart``, never retried. Afterwards
    the thread takes a new message and completes it."""
    from agentd.actors.registry import ThreadRegistry
    from agentd.store.writer import GroupCommitWriter

    fault = trio.Event()
    reason = child.replace("-", "_") + "_restart"
    owner = GroupCommitWriter if child == "store-writer" else ThreadRegistry
    monkeypatch.setattr(owner, "serve", faulty_once(owner.serve, fault, child))

    listening, orphans_ended = restart_probes(monkeypatch)

    async with virtual_daemon(tmp_path) as (daemon, client):
        exits = record_session_exits(daemon, monkeypatch)
        thread_id = (await client.call("thread.create"))["threadId"]
        sent = await client.call("thread.message.send", threadId=thread_id, text=script({"say": "working"}, {"hang": True}))
        await next_event(client, thread_id, lambda e: e["type"] == "message.appended")
        (session,) = (await client.call("daemon.status"))["sessions"]
        assert session["busy"]

        fault.set()
        await listening[1].wait()  # the socket server is back: the whole rest restarted

        with pytest.raises(Exception) as info:
            await client.call("daemon.status")
        assert info.value.kind == "connection_lost", "client connections are part of the restarted rest"

        (exited,) = exits
        assert exited.session_id == session["id"] and exited.requested, "stopped by the supervisor, not crashed"
        assert exited.reason == reason
        assert exited.signal != signal.SIGKILL
        assert not any(ended for _, ended in orphans_ended), "reconciliation killed no live process of its own daemon"

        async with Client.connect(daemon.paths.socket) as again:
            got = await again.call("run.get", runId=sent["runId"])
            run = got["run"]
            assert (run["status"], run["reason"]) == ("interrupted", reason)
            assert [(a["status"], a["error"]) for a in got["attempts"]] == [("interrupted", reason)], (
                "the run was closed once, not retried"
            )
            events = []  # everything stored so far, of every thread and of the daemon
            async with again.subscribe() as stream:
                last = (await again.call("daemon.status"))["lastSeq"]
                async for event in stream:
                    events.append(event)
                    if event["seq"] >= last:
                        break
            types = [e["type"] for e in events if e.get("threadId") == thread_id]
            assert "run.retrying" not in types and "session.error" not in types
            assert types.count("run.interrupted") == 1
            stopped = [e["payload"]["session"] for e in events if e["type"] == "session.stopped"]
            assert [(s["id"], s["reason"]) for s in stopped] == [(session["id"], reason)]
            (reconciled,) = [e for e in events if e["type"] == "daemon.reconciled"]
            assert reconciled["payload"]["reason"] == reason
            assert reconciled["payload"]["runs_interrupted"] == 1
            # Without a writer the session's stop could not be recorded, so
            # reconciliation records it; with one, the session manager did.
            assert reconciled["payload"]["sessions_stopped"] == (1 if child == "store-writer" else 0)
            messages = (await again.call("thread.get", threadId=thread_id))["messages"]
            assert [(m["role"], m["text"], m["status"]) for m in messages if m["role"] == "assistant"] == [
                ("assistant", "working", "complete")
            ], "what the turn said before the fault is kept"

            assert (await again.call("thread.get", threadId=thread_id))["thread"]["status"] == "idle"
            after = await send_and_finish(again, thread_id, "and now?")
            assert after["status"] == "completed"
            (new_session,) = (await again.call("daemon.status"))["sessions"]
            assert new_session["id"] != session["id"] and new_session["pid"] != session["pid"]


async def test_a_session_manager_fault_during_a_turn_ends_the_run_without_a_retry(tmp_path, autojump_clock, monkeypatch):
    """Only the provider-session manager (and the socket after it) restarts:
    the actor lives on and ends its run ``interrupted`` with reason
    ``session_manager_stopped`` — not as a provider crash to retry — and no
    reconciliation runs. The thread then takes a new message."""
    from agentd.supervisor.sessions import ProviderSessionManager

    fault = trio.Event()
    monkeypatch.setattr(ProviderSessionManager, "serve", faulty_once(ProviderSessionManager.serve, fault, "provider-sessions"))
    listening, orphans_ended = restart_probes(monkeypatch)
    async with virtual_daemon(tmp_path) as (daemon, client):
        exits = record_session_exits(daemon, monkeypatch)
        thread_id = (await client.call("thread.create"))["threadId"]
        sent = await client.call("thread.message.send", threadId=thread_id, text=script({"hang": True}))
        await next_event(client, thread_id, lambda e: e["type"] == "run.started")
        (session,) = (await client.call("daemon.status"))["sessions"]
        fault.set()
        await listening[1].wait()

        (exited,) = exits
        assert exited.requested and exited.reason == "session_manager_stopped" and exited.signal != signal.SIGKILL
        assert orphans_ended == [], "the registry did not restart, so nothing was reconciled"
        async with Client.connect(daemon.paths.socket) as again:
            # The completion barrier captures the run's checkpoint (a real git
            # subprocess) before run.<status>: wait for it rather than race it.
            await next_event(again, thread_id, lambda e: e["type"] == "run.interrupted")
            got = await again.call("run.get", runId=sent["runId"])
            assert (got["run"]["status"], got["run"]["reason"]) == ("interrupted", "session_manager_stopped")
            listed = (await again.call("checkpoint.list", threadId=thread_id))["checkpoints"]
            assert [(c["id"], c["status"]) for c in listed if c["kind"] == "run"] == [(got["run"]["checkpointId"], "captured")]
            assert len(got["attempts"]) == 1, "not retried as a provider crash"
            stopped = await next_event(again, thread_id, lambda e: e["type"] in ("session.stopped", "session.error"))
            assert (stopped["type"], stopped["payload"]["session"]["reason"]) == ("session.stopped", "session_manager_stopped")
            after = await send_and_finish(again, thread_id, "and now?")
            assert after["status"] == "completed"
            (new_session,) = (await again.call("daemon.status"))["sessions"]
            assert new_session["pid"] != session["pid"]


async def test_a_compactor_crash_loop_costs_only_the_compactor(tmp_path, autojump_clock, monkeypatch):
    """Issue 20: the checkpoint compactor is supervised in a branch of its
    own: its crashes restart it alone, and past its branch's intensity (3 in
    60 s) the branch is dropped — the daemon goes on: the client's
    connection, the running turn and its provider session are untouched, and
    the core counts no restart (in one shared intensity, four compactor
    crashes used to end the daemon)."""
    from agentd.actors.checkpoints.compaction import Compactor

    crashes: list[float] = []
    looped = trio.Event()

    async def crashing(self, *, task_status=trio.TASK_STATUS_IGNORED):
        task_status.started()
        await trio.sleep(1)
        crashes.append(trio.current_time())
        if len(crashes) == 4:
            looped.set()
        raise RuntimeError("injected compactor fault")

    monkeypatch.setattr(Compactor, "serve", crashing)
    async with virtual_daemon(tmp_path) as (daemon, client):
        thread_id = (await client.call("thread.create"))["threadId"]
        sent = await client.call("thread.message.send", threadId=thread_id, text=script({"hang": True}))
        await next_event(client, thread_id, lambda e: e["type"] == "run.started")
        (session,) = (await client.call("daemon.status"))["sessions"]
        await looped.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert len(crashes) == 4, "restarted three times, then given up"
        assert daemon.maintenance.restarts == 3
        status = await client.call("daemon.status")  # the same connection
        assert [s["id"] for s in status["sessions"]] == [session["id"]]
        assert (await client.call("run.get", runId=sent["runId"]))["run"]["status"] == "running"
        assert daemon.core.restarts == 0 and daemon.supervisor.restarts == 0
        await client.call("run.interrupt", runId=sent["runId"])
        await next_event(client, thread_id, lambda e: e["type"] == "run.interrupted")

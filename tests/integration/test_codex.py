"""The Codex adapter against the real pinned ``codex app-server``, offline.

Two layers:

* the adapter scenarios of ``tests/providers/test_codex_replay.py`` run against the
  real runtime, each exchange recorded as an NDJSON transcript (refreshed in
  ``tests/fixtures/transcripts/`` with ``AGENTD_RECORD_CODEX=1``);
* end to end through a real daemon's socket: streamed text, a command node,
  approvals, plan-mode questions, interrupt, native steer, idle reap and
  resume, a provider crash, a daemon SIGKILL and restart.

Every runtime talks to ``scripts/offline/fake_openai.py`` in a private
CODEX_HOME/HOME and, where ``unshare -rn`` works, inside a loopback-only network
namespace (``scripts/offline/codex.py``, shared with the provider benchmarks). Skipped as a whole when the binary is not installed.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.actors.providers.base import ProviderRuntimeError
from agentd.actors.providers.codex import CodexAdapter
from agentd.actors.providers.transport import recording, replaying
from agentd.protocol.client import Client
from agentd.launch import start_daemon
from tests.helpers import answer_begun, send_and_wait, stored_events, wait_event, wait_process_gone, wait_run_terminal
from scripts.offline.codex import SKIP_REASON, CodexWorld, codex_binary, make_world, user_texts
from tests.integration.shared import SharedDaemon, connect, module_daemon, requests_in, sessions_of, workspace_of
from tests.providers.test_codex_replay import SCENARIOS, TRANSCRIPTS, Harness, fast_stop, replay_config

pytestmark = pytest.mark.skipif(codex_binary() is None, reason=SKIP_REASON)

RECORD = os.environ.get("AGENTD_RECORD_CODEX") == "1"
#: replays need no real pauses: recorded delays are capped at this many ms
MAX_REPLAY_DELAY_MS = 20
SANITIZED_ROOT = "/tmp/agentd-codex-test"


@pytest.fixture
def world(tmp_path):
    # AGENTD_CODEX_NAMESPACE=0 runs without the network namespace (the fallback).
    w = make_world(tmp_path / "codex", namespace=False if os.environ.get("AGENTD_CODEX_NAMESPACE") == "0" else None)
    yield w
    w.close()


# -- adapter scenarios, recorded -----------------------------------------------------------------


def sanitize(source: Path, target: Path, root: Path) -> None:
    """Make a recording replayable anywhere: the test's paths become a fixed
    one, the cwd the adapter sends matches anything, long pauses are capped,
    and a requested stop's exit is left to the replay (it exits when stdin
    closes); a crash's exit stays."""
    lines = source.read_text().splitlines()
    out = []
    for number, line in enumerate(lines):
        entry = json.loads(line.replace(json.dumps(str(root))[1:-1], SANITIZED_ROOT))
        if entry["type"] == "header":
            entry["note"] = (
                f"{entry.get('note', '')}; paths under {SANITIZED_ROOT}, pauses capped at {MAX_REPLAY_DELAY_MS} ms"
            ).lstrip("; ")
        if entry["type"] == "expect_outbound":
            params = entry["message"].get("params")
            if isinstance(params, dict) and "cwd" in params:
                params["cwd"] = "*"
        if "afterMs" in entry:
            entry["afterMs"] = min(entry["afterMs"], MAX_REPLAY_DELAY_MS)
        if entry["type"] == "runtime_exit" and entry.get("code") == 0 and number == len(lines) - 1:
            continue
        out.append(json.dumps(entry))
    target.write_text("\n".join(out) + "\n")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_scenario_against_the_real_runtime(name, world, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    raw = tmp_path / "recorded" / f"codex_{name}.ndjson"
    version = (await CodexAdapter(world.provider_config(), home=tmp_path / "probe").probe())["version"]
    header = {"provider": "codex", "version": version, "note": f"scenario {name} against scripts/offline/fake_openai.py"}
    spawn = recording(raw, header)
    harness = Harness(
        lambda: CodexAdapter(world.provider_config(), home=tmp_path / "agentd-home", spawn=spawn), workspace, real=True,
    )
    await SCENARIOS[name](harness)
    recorded = sorted(raw.parent.glob(f"codex_{name}*.ndjson"))
    assert recorded, "the exchange was recorded"
    for path in recorded:
        sanitize(path, path, world.root.parent)
    # The fresh recording replays through the same scenario, as CI will.
    replay_workspace = tmp_path / "replay-ws"
    replay_workspace.mkdir()
    ordered = [raw, *sorted(raw.parent.glob(f"codex_{name}.*.ndjson"), key=lambda p: int(p.name.split(".")[1]))]
    async with trio.open_nursery() as nursery:
        spawn, replays = replaying(ordered, nursery)
        spawn = fast_stop(spawn)
        replay = Harness(lambda: CodexAdapter(replay_config(), home=tmp_path / "replay-home", spawn=spawn), replay_workspace, real=False)
        await SCENARIOS[name](replay)
        nursery.cancel_scope.cancel()
    assert [r.mismatch for r in replays] == [None] * len(ordered)
    if RECORD:
        TRANSCRIPTS.mkdir(parents=True, exist_ok=True)
        for stale in TRANSCRIPTS.glob(f"codex_{name}.*ndjson"):
            stale.unlink()
        for path in recorded:
            shutil.copy(path, TRANSCRIPTS / path.name)


async def test_a_runtime_that_cannot_start_says_why(world, tmp_path, short_dir):
    """A bad CODEX_HOME config: the start fails with codex's own words, not a
    hang — from the adapter, and as the run's reason through the daemon."""
    (world.codex_home / "config.toml").write_text('approval_policy = "untrusted"\n')
    adapter = CodexAdapter(world.provider_config(), home=tmp_path / "agentd-home", request_timeout=30)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            with pytest.raises(ProviderRuntimeError, match="(?s)did not start.*approval_policy"):
                await nursery.start(functools.partial(adapter.open, session_id="pss", emit=_ignore))
    daemon = Daemon(tmp_path, short_dir, world)
    process = await daemon.start()
    try:
        async with Client.connect(daemon.socket) as client:
            run = await send_and_wait(client, await new_thread(client), "hello")
            assert run["status"] == "failed" and run["reason"].startswith("provider_start_failed"), run
            # The adapter's words reach the reason only once supervisor/sessions.py
            # unwraps trio's single-exception groups (see the Codex adapter report);
            # until then the reason reads "Exceptions from Trio nursery".
    finally:
        assert await process.terminate() == 0


async def _ignore(event) -> None:
    pass


# -- end to end through the daemon --------------------------------------------------------------------


DAEMON = 'default_provider = "codex"\ninterrupt_grace = 20'


def providers_config(world: CodexWorld) -> str:
    return (
        world.provider_toml("codex")
        + "\n"
        + world.provider_toml("codexidle", idle_timeout=1)
        # Issue 28: the fake model's price, so a run's cost is known end to end.
        + '\n[pricing."fake-model"]\ninput = 1.0\noutput = 2.0\n'
    )


def agentd_config(world: CodexWorld) -> str:
    return f"[daemon]\n{DAEMON}\n\n" + providers_config(world)


class Daemon:
    def __init__(self, tmp_path: Path, short_dir: Path, world: CodexWorld) -> None:
        self.world = world
        self.data_dir = tmp_path / "data"
        self.socket = short_dir / "s.sock"
        self.config = tmp_path / "agentd.toml"
        self.config.write_text(agentd_config(world))
        self.process = None

    async def start(self):
        self.process = await start_daemon(self.data_dir, self.socket, config=self.config)
        return self.process


@pytest.fixture(scope="module")
def codex_daemon(tmp_path_factory, module_paths):
    """The module's daemon and world (``tests/integration/shared.py``), for
    the tests through the daemon that need only threads of their own; the
    daemon kill and restart test and the one with a broken CODEX_HOME start
    their own."""
    namespace = False if os.environ.get("AGENTD_CODEX_NAMESPACE") == "0" else None
    shared_world = make_world(tmp_path_factory.mktemp("codex-world") / "codex", namespace=namespace)
    try:
        with module_daemon(module_paths, providers_config(shared_world), daemon=DAEMON, codex=shared_world) as shared:
            yield shared
    finally:
        shared_world.close()


@pytest.fixture
async def codexd(codex_daemon):
    """A client of the module's daemon, and the daemon (its ``world``)."""
    async with connect(codex_daemon) as client:
        yield client, codex_daemon


async def own_requests(client: Client, daemon: SharedDaemon, thread_id: str) -> list[dict[str, Any]]:
    """The model requests of the thread's own runtime (its cwd is the thread's workspace)."""
    return requests_in(daemon.world.model_requests(), await workspace_of(client, thread_id))


async def new_thread(client: Client, provider: str = "codex") -> str:
    return (await client.call("thread.create", provider=provider))["threadId"]


async def assistant_texts(client: Client, thread_id: str) -> list[str]:
    messages = (await client.call("thread.get", threadId=thread_id))["messages"]
    return [m["text"] for m in messages if m["role"] == "assistant"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


async def test_a_turn_streams_text_through_the_daemon(codexd):
    client, daemon = codexd
    thread_id = await new_thread(client)
    live = []
    async with client.subscribe(thread_id=thread_id) as events:
        sent = await client.call("thread.message.send", threadId=thread_id, text="hello codex")
        with trio.fail_after(60):
            async for event in events:
                if event["type"] == "message.delta":
                    live.append(event["payload"]["text"])
                if event["type"].startswith("run.") and event["payload"].get("run", {}).get("status") in ("completed", "failed"):
                    break
    run = (await client.call("run.get", runId=sent["runId"]))["run"]
    assert run["status"] == "completed", run
    assert await assistant_texts(client, thread_id) == ["You said: hello codex (turn 1)"]
    assert "".join(live) == "You said: hello codex (turn 1)" and len(live) >= 2
    events = await stored_events(client, thread_id)
    created = next(e for e in events if e["type"] == "provider_thread.created")
    assert created["payload"]["providerThread"]["kind"] == "codex"
    providers = {p["name"]: p for p in (await client.call("providers.list"))["providers"]}
    assert providers["codex"]["usable"] is True and providers["codex"]["version"].startswith("0.17")
    assert await own_requests(client, daemon, thread_id), "the fake model answered"
    # Issue 28: what the model used lands on the run (Codex's thread/tokenUsage/updated), priced.
    usage = run["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0 and usage["models"] == ["fake-model"], run
    assert run["cost"] == pytest.approx((usage["inputTokens"] * 1.0 + usage["outputTokens"] * 2.0) / 1e6)
    assert (await client.call("thread.get", threadId=thread_id))["thread"]["usage"] == usage


async def test_a_command_becomes_a_node(codexd):
    client, _ = codexd
    thread_id = await new_thread(client)
    run = await send_and_wait(client, thread_id, "RUN_COMMAND please")
    assert run["status"] == "completed"
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    (command,) = [n for n in nodes if n["kind"] == "command_execution"]
    assert command["status"] == "completed" and command["parentNodeId"] == run["rootNodeId"]
    assert "echo agentd-ran-this" in command["title"]
    assert command["detail"]["exitCode"] == 0 and "agentd-ran-this" in command["detail"]["aggregatedOutput"]
    assert (await assistant_texts(client, thread_id))[-1] == "Tool finished: agentd-ran-this"


@pytest.mark.parametrize("decision", ["accept", "decline"])
async def test_an_approval_is_answered_through_the_socket(codexd, decision):
    client, _ = codexd
    thread_id = await new_thread(client)
    sent = await client.call("thread.message.send", threadId=thread_id, text="ASK_APPROVAL please")
    requested = await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=thread_id)
    request = requested["payload"]["request"]
    assert "touch approved.txt" in request["detail"]["command"]
    thread = await client.call("thread.get", threadId=thread_id)
    assert thread["thread"]["status"] == "waiting"
    await client.call("approval.respond", requestId=request["id"], decision=decision)
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert run["status"] == "completed"
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    (command,) = [n for n in nodes if n["kind"] == "command_execution"]
    (approval,) = [n for n in nodes if n["kind"] == "approval"]
    assert approval["parentNodeId"] == command["id"], "the approval hangs under the command it approves"
    workspace = Path(thread["thread"]["workspace"])
    if decision == "accept":
        assert command["status"] == "completed" and approval["status"] == "completed"
        assert (workspace / "approved.txt").exists()
    else:
        assert command["status"] == "cancelled" and approval["status"] == "cancelled"
        assert not (workspace / "approved.txt").exists()


async def test_plan_mode_questions_are_answered_through_the_socket(codexd):
    client, _ = codexd
    thread_id = await new_thread(client)
    sent = await client.call("thread.message.send", threadId=thread_id, text="/plan ASK_USER about colors")
    requested = await wait_event(client, lambda e: e["type"] == "user_input.requested", thread_id=thread_id)
    request = requested["payload"]["request"]
    assert requested["payload"]["artifact"]["questions"][0]["options"] == ["Red (Recommended)", "Blue"]
    await client.call("user-input.respond", requestId=request["id"], answers={"color": "Blue"})
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert run["status"] == "completed"
    assert '"answers":["Blue"]' in (await assistant_texts(client, thread_id))[-1]


async def test_an_interrupt_ends_the_run_only_when_codex_says_so(codexd):
    client, _ = codexd
    thread_id = await new_thread(client)
    sent = await client.call("thread.message.send", threadId=thread_id, text="GO_SLOW please")
    await answer_begun(client, thread_id, sent["runId"])
    (session,) = await sessions_of(client, thread_id)
    reply = await client.call("run.interrupt", runId=sent["runId"])
    assert reply["interruptRequested"] is True
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert (run["status"], run["reason"]) == ("interrupted", "interrupted")
    events = await stored_events(client, thread_id)
    types = [e["type"] for e in events if e.get("runId") == sent["runId"]]
    assert types.index("run.interrupt_requested") < types.index("run.interrupted")
    # Not escalated to a session stop: the run ended because codex's
    # turn/completed said "interrupted", on the same live runtime.
    assert not [e for e in events if e["type"] in ("session.stopped", "session.error")]
    assert (await sessions_of(client, thread_id))[0]["pid"] == session["pid"]
    detail = await client.call("run.get", runId=sent["runId"])
    assert detail["attempts"][0]["status"] == "interrupted"
    messages = (await client.call("thread.get", threadId=thread_id))["messages"]
    assert messages[-1]["status"] == "interrupted" and "slow59" not in messages[-1]["text"]
    nxt = await send_and_wait(client, thread_id, "are you there")
    assert nxt["status"] == "completed"


async def test_a_native_steer_joins_the_running_turn(codexd):
    client, daemon = codexd
    thread_id = await new_thread(client)
    sent = await client.call("thread.message.send", threadId=thread_id, text="GO_SLOW please")
    await answer_begun(client, thread_id, sent["runId"])
    steer = await client.call("thread.message.send", threadId=thread_id, text="also mention bananas",
                              dispatchMode={"type": "steer_active", "targetRunId": sent["runId"]})
    assert steer["strategy"] == "native_steer" and steer["runId"] == sent["runId"]
    await wait_event(client, lambda e: e["type"] == "message.steered", thread_id=thread_id)
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert run["status"] == "completed" and run["attemptCount"] == 1
    assert any("You said: also mention bananas" in t for t in await assistant_texts(client, thread_id))
    last = (await own_requests(client, daemon, thread_id))[-1]
    assert user_texts(last)[-2:] == ["GO_SLOW please", "also mention bananas"]


async def test_idle_reap_then_the_next_message_resumes_the_same_native_thread(codexd):
    client, daemon = codexd
    thread_id = await new_thread(client, provider="codexidle")
    first = await send_and_wait(client, thread_id, "remember the tea")
    assert first["status"] == "completed"
    stopped = await wait_event(
        client, lambda e: e["type"] == "session.stopped" and e["payload"]["session"]["reason"] == "idle_timeout",
        thread_id=thread_id, timeout=30,
    )
    pid = stopped["payload"]["session"]["pid"]
    assert not _alive(pid), "the reaped runtime is gone"
    second = await send_and_wait(client, thread_id, "what did I say?")
    assert second["status"] == "completed"
    a1 = (await client.call("run.get", runId=first["id"]))["attempts"][0]
    a2 = (await client.call("run.get", runId=second["id"]))["attempts"][0]
    assert a1["providerThreadId"] == a2["providerThreadId"]
    events = await stored_events(client, thread_id)
    resumed = [e for e in events if e["type"] == "provider_thread.resumed"]
    assert resumed and resumed[-1]["payload"]["nativeTurnCount"] == 1
    assert user_texts((await own_requests(client, daemon, thread_id))[-1]) == ["remember the tea", "what did I say?"], (
        "the model request of the resumed thread carries the earlier turn"
    )
    assert (await assistant_texts(client, thread_id))[-1] == "You said: what did I say? (turn 2)"


async def test_a_provider_crash_is_recovered_on_a_new_runtime(codexd):
    client, daemon = codexd
    thread_id = await new_thread(client)
    await send_and_wait(client, thread_id, "earlier turn")
    sent = await client.call("thread.message.send", threadId=thread_id, text="GO_SLOW please")
    await answer_begun(client, thread_id, sent["runId"])
    (session,) = await sessions_of(client, thread_id)
    os.kill(session["pid"], signal.SIGKILL)
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=90)
    assert run["status"] == "completed", run
    first, second = (await client.call("run.get", runId=sent["runId"]))["attempts"]
    assert (first["reason"], first["status"]) == ("initial", "failed") and "signal 9" in first["error"]
    assert (second["reason"], second["status"]) == ("provider_recovery", "completed")
    assert first["providerThreadId"] == second["providerThreadId"]
    events = await stored_events(client, thread_id)
    assert any(e["type"] == "session.error" and e["payload"].get("signal") == 9 for e in events)
    assert user_texts((await own_requests(client, daemon, thread_id))[-1])[0] == "earlier turn", "the new runtime resumed the thread"


async def test_daemon_sigkill_and_restart(tmp_path, short_dir, world):
    """F12 with a real runtime: committed records survive, the run in flight
    is closed as interrupted, codex died with the daemon, and the next message
    resumes the same native thread."""
    daemon = Daemon(tmp_path, short_dir, world)
    process = await daemon.start()
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = await new_thread(client)
            await send_and_wait(client, thread_id, "first words")
            sent = await client.call("thread.message.send", threadId=thread_id, text="GO_SLOW please")
            await answer_begun(client, thread_id, sent["runId"])
            before = await stored_events(client)
            (session,) = (await client.call("daemon.status"))["sessions"]
    finally:
        await process.kill()
    # The guard ends the runtime with the daemon (issue 9): no start is needed for that.
    await wait_process_gone(session["pid"])

    process = await daemon.start()
    try:
        assert not _alive(session["pid"]), "no runtime of the killed daemon is left"
        async with Client.connect(daemon.socket) as client:
            after = await stored_events(client)
            assert after[: len(before)] == before, "every committed event is unchanged"
            run = await client.call("run.get", runId=sent["runId"])
            assert (run["run"]["status"], run["run"]["reason"]) == ("interrupted", "daemon_restart")
            assert all(n["status"] != "running" for n in run["nodes"])
            nxt = await send_and_wait(client, thread_id, "still with me?")
            assert nxt["status"] == "completed"
            a1 = (await client.call("run.get", runId=sent["runId"]))["attempts"][0]
            a2 = (await client.call("run.get", runId=nxt["id"]))["attempts"][0]
            assert a1["providerThreadId"] == a2["providerThreadId"]
            assert user_texts(world.model_requests()[-1])[0] == "first words", "resumed the same native thread"
    finally:
        assert await process.terminate() == 0

"""The ACP adapter against a real ACP agent, offline: Claude through the pinned
``@agentclientprotocol/claude-agent-acp`` (issue 25).

Two layers, as for Codex and Claude:

* the scenarios of ``tests/providers/test_acp_replay.py`` run against the real
  agent, each exchange recorded, sanitized and replayed at once (saved to
  ``tests/fixtures/transcripts/`` with ``AGENTD_RECORD_ACP=1``);
* end to end through a real daemon's socket: a text turn and the provider
  listing, a Bash permission as an approval, a file edit as a file change
  with a checkpoint, an interrupt, idle reap then ``session/load`` with the
  earlier turn in the model's request, and a daemon SIGKILL (F12: no agent
  process left behind, the run not left running).

The agent talks to ``scripts/offline/fake_anthropic.py`` inside a
loopback-only network namespace where ``unshare -rn`` works
(``tests/integration/acp_worlds.py``). Skipped when the pinned runtimes are
not installed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.actors.providers.acp import AcpAdapter
from agentd.actors.providers.procinfo import children_of
from agentd.actors.providers.transport import recording
from agentd.launch import start_daemon
from agentd.protocol.client import Client
from scripts.offline.claude import user_texts
from tests.helpers import answer_begun, run_accepting, send_and_wait, wait_event, wait_process_gone, wait_run_terminal
from tests.integration.shared import connect, module_daemon, requests_in
from tests.integration.acp_worlds import CLAUDE_ACP_VERSION, SKIP_REASON, ClaudeAcpWorld, claude_acp_available, sanitize
from tests.providers.test_acp_replay import SCENARIOS, TRANSCRIPTS, run_replay, transcript_paths
from tests.providers.test_claude_replay import Harness

pytestmark = pytest.mark.skipif(not claude_acp_available(), reason=SKIP_REASON)

RECORD = os.environ.get("AGENTD_RECORD_ACP") == "1"


@pytest.fixture
def world(tmp_path):
    w = ClaudeAcpWorld(tmp_path / "claude")
    yield w
    w.close()


def carried(requests: list[dict[str, Any]], earlier: str, last: str) -> bool:
    """Whether a model request for ``last`` carried ``earlier`` before it (Claude
    makes side calls with tools too — a suggestion after a turn — so not just the last request)."""
    return any(earlier in texts and last in texts and texts.index(earlier) < texts.index(last)
               for texts in map(user_texts, requests))


# -- adapter scenarios, recorded -------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCENARIOS["claude"]))
async def test_scenario_against_real_claude_agent_acp(name, world, tmp_path):
    raw = tmp_path / "recorded"
    cwd = tmp_path / "ws"
    cwd.mkdir()
    header = {"provider": "acp", "agent": "@agentclientprotocol/claude-agent-acp", "version": CLAUDE_ACP_VERSION,
              "note": f"scenario {name} (tests/providers/test_acp_replay.py)"}
    async with trio.open_nursery() as nursery:
        adapter = AcpAdapter(world.provider_config(), home=tmp_path / "agentd-home", request_timeout=60,
                             spawn=recording(raw / f"acp_claude_{name}.ndjson", header))
        facts = await SCENARIOS["claude"][name](Harness(nursery, adapter, live=True), str(cwd))
        nursery.cancel_scope.cancel()
    if "file" in facts:
        assert (cwd / facts["file"]).exists(), "the agent really did it in the workspace"
    if name == "resume":
        assert carried(world.model_requests(), "remember pineapple", "which fruit?"), "the resumed session sent the earlier turn"
    if name == "fork":
        assert carried(world.model_requests(), "the color is teal", "in the fork"), "the native fork sent the source's turn"

    sanitized = tmp_path / "sanitized"
    for path in transcript_paths("claude", name, raw):
        sanitize(path, sanitized / path.name, [tmp_path])
    await run_replay("claude", name, tmp_path / "replay", directory=sanitized)
    if RECORD:
        for old in transcript_paths("claude", name):
            old.unlink(missing_ok=True)
        for path in sanitized.iterdir():
            shutil.copy(path, TRANSCRIPTS / path.name)


# -- end to end through the daemon -----------------------------------------------------------


DAEMON = 'default_provider = "claude_acp"\ninterrupt_grace = 30'


def providers_config(world: ClaudeAcpWorld) -> str:
    return world.provider_toml() + "\n" + world.provider_toml("claude_acp_idle", idle_timeout=1)


@pytest.fixture(scope="module")
def acp_daemon(tmp_path_factory, module_paths):
    """The module's daemon and world (``tests/integration/shared.py``) for the
    tests through the daemon that need only threads of their own; the daemon
    SIGKILL test starts its own."""
    shared_world = ClaudeAcpWorld(tmp_path_factory.mktemp("acp-world") / "claude")
    try:
        with module_daemon(module_paths, providers_config(shared_world), daemon=DAEMON, claude_acp=shared_world) as shared:
            yield shared
    finally:
        shared_world.close()


@contextlib.asynccontextmanager
async def agentd(world: ClaudeAcpWorld, tmp_path: Path, socket: Path, *, kill: bool = False):
    config = tmp_path / "config.toml"
    config.write_text(f"[daemon]\n{DAEMON}\n\n" + providers_config(world))
    daemon = await start_daemon(tmp_path / "data", socket, config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            client.daemon = daemon
            yield client
    finally:
        if kill:
            await daemon.kill()
        else:
            code = await daemon.terminate()
            assert code == 0, daemon.log_text()[-3000:]


async def new_thread(client: Client, workspace: Path, provider: str = "claude_acp") -> str:
    workspace.mkdir(exist_ok=True)
    return (await client.call("thread.create", provider=provider, workspace=str(workspace)))["threadId"]


async def event(client: Client, thread_id: str, type_: str) -> dict[str, Any]:
    return await wait_event(client, lambda e: e["type"] == type_, thread_id=thread_id, timeout=90)


async def assistant_texts(client: Client, thread_id: str) -> list[str]:
    return [m["text"] for m in (await client.call("thread.get", threadId=thread_id))["messages"] if m["role"] == "assistant"]


async def test_a_text_turn_and_the_agent_in_the_listing(acp_daemon, tmp_path):
    async with connect(acp_daemon) as client:
        thread_id = await new_thread(client, tmp_path / "ws")
        run = await send_and_wait(client, thread_id, "hello there")
        assert run["status"] == "completed", run
        assert await assistant_texts(client, thread_id) == ["Reply 1: hello there"]
        listed = {p["name"]: p for p in (await client.call("providers.list"))["providers"]}["claude_acp"]
        assert listed["usable"] and listed["agent"]["name"] == "@agentclientprotocol/claude-agent-acp"
        assert listed["version"] == CLAUDE_ACP_VERSION and listed["agentCapabilities"]["loadSession"] is True


async def test_a_bash_permission_is_an_approval_and_a_write_a_file_change(acp_daemon, tmp_path):
    async with connect(acp_daemon) as client:
        workspace = tmp_path / "ws"
        thread_id = await new_thread(client, workspace)
        sent = await client.call("thread.message.send", threadId=thread_id, text="ASK_APPROVAL")
        request = (await event(client, thread_id, "approval.requested"))["payload"]["request"]
        assert "touch approved-by-user.txt" in request["detail"]["command"]
        await client.call("approval.respond", requestId=request["id"], decision="accept")
        run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=90)
        assert run["status"] == "completed" and (workspace / "approved-by-user.txt").exists()
        nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
        (command,) = [n for n in nodes if n["kind"] == "command_execution"]
        (approval,) = [n for n in nodes if n["kind"] == "approval"]
        assert approval["parentNodeId"] == command["id"] and command["status"] == "completed"

        sent = await client.call("thread.message.send", threadId=thread_id, text=f"WRITE_FILE:{workspace}/new.txt")
        request = (await wait_event(client, lambda e: e["type"] == "approval.requested" and e.get("runId") == sent["runId"],
                                    thread_id=thread_id, timeout=90))["payload"]["request"]
        await client.call("approval.respond", requestId=request["id"], decision="accept")
        run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=90)
        assert run["status"] == "completed" and (workspace / "new.txt").read_text() == "written by the fake model\n"
        nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
        (change,) = [n for n in nodes if n["kind"] == "file_change"]
        assert change["status"] == "completed" and "+written by the fake model" in change["detail"]["changes"][0]["diff"]
        checkpoints = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
        assert any(c.get("runId") == run["id"] for c in checkpoints)


async def test_interrupt_then_idle_reap_and_session_load(acp_daemon, tmp_path):
    async with connect(acp_daemon) as client:
        thread_id = await new_thread(client, tmp_path / "ws", "claude_acp_idle")
        sent = await client.call("thread.message.send", threadId=thread_id, text="GO_SLOW")
        await answer_begun(client, thread_id, sent["runId"], timeout=60)
        await client.call("run.interrupt", runId=sent["runId"])
        run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=90)
        assert (run["status"], run["reason"]) == ("interrupted", "interrupted")
        first = await send_and_wait(client, thread_id, "remember pineapple")
        assert first["status"] == "completed"
        stopped = await event(client, thread_id, "session.stopped")
        assert stopped["payload"]["session"]["reason"] == "idle_timeout"
        second = await send_and_wait(client, thread_id, "which fruit?")
        assert second["status"] == "completed"
        resumed = await event(client, thread_id, "provider_thread.resumed")
        assert resumed["payload"]["nativeTurnCount"] == 2
        own = requests_in(acp_daemon.world.model_requests(), str(tmp_path / "ws"))
        assert carried(own, "remember pineapple", "which fruit?"), "session/resume carried the earlier turns"
        assert (await assistant_texts(client, thread_id))[-1].endswith("which fruit?")


async def test_a_sigkilled_daemon_leaves_no_agent_process(world, tmp_path, short_dir):
    """F12: the runtime dies with the daemon — claude-agent-acp and the
    ``claude`` it started for the session (which outlived it by minutes,
    holding its MCP relay, before the guard knew of it)."""
    async with agentd(world, tmp_path, short_dir / "s.sock", kill=True) as client:
        thread_id = await new_thread(client, tmp_path / "ws")
        sent = await client.call("thread.message.send", threadId=thread_id, text="GO_SLOW")
        await answer_begun(client, thread_id, sent["runId"], timeout=60)
        (session,) = (await client.call("daemon.status"))["sessions"]
        pid = session["pid"]
        own = children_of(pid)
        assert any(b"claude" in Path(f"/proc/{child}/cmdline").read_bytes() for child in own), "the adapter's claude"
    await wait_process_gone(pid, timeout=30)
    for child in own:
        await wait_process_gone(child, timeout=30)
    daemon = await start_daemon(tmp_path / "data", short_dir / "s2.sock", config=tmp_path / "config.toml")
    try:
        async with Client.connect(daemon.socket) as client:
            run = (await client.call("run.get", runId=sent["runId"]))["run"]
            assert run["status"] in ("failed", "interrupted") and run["reason"], run
    finally:
        assert await daemon.terminate() == 0


async def test_delegation_to_another_agent_through_agentds_tool(acp_daemon, tmp_path):
    """SPEC F9 from an ACP agent: agentd's tool came in session/new's
    mcpServers; Claude's call of delegate_task is an approval (agentd_tool =
    "ask"), and the scripted agent's answer comes back into the turn."""
    async with connect(acp_daemon) as client:
        thread_id = await new_thread(client, tmp_path / "ws")
        run, accepted = await run_accepting(client, thread_id, "DELEGATE_TO:scripted: say hello from the child")
        assert run["status"] == "completed", run
        assert any("delegate_task" in str(r["detail"].get("title")) for r in accepted), accepted
        answer = (await assistant_texts(client, thread_id))[-1]
        assert answer.startswith("The delegated task answered:") and "say hello from the child" in answer
        children = (await client.call("thread.list"))["threads"]
        assert any(t.get("parentThreadId") == thread_id and t["provider"] == "scripted" for t in children)

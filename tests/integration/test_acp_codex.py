"""The ACP adapter against a second real ACP agent, offline: Codex through the
pinned ``@zed-industries/codex-acp`` (issue 25) — not Claude, and driven by
the project's fake OpenAI Responses server as it is (see
``tests/integration/acp_worlds.py`` for why this one).

The scenarios of ``tests/providers/test_acp_replay.py`` (``codex``) run
against the real agent, each exchange recorded, sanitized and replayed at
once (saved to ``tests/fixtures/transcripts/`` with ``AGENTD_RECORD_ACP=1``):
a text turn, a command's permission as an approval, an interrupt, and
``session/resume`` in a new process with the earlier turn in the model's request.

End to end through a daemon's socket, as a client (one daemon for the module):
an ``apply_patch`` as a file change with the run's checkpoint diff (F13); the
codex-acp process SIGKILLed mid-turn (F11: before any node, a new attempt on
a new process that resumes the session; after one, the run fails
``provider_crashed``; the thread goes on either way); an idle reap then
``session/resume``; a SIGKILLed daemon (F12); a portable fork and a rebuilt
rollback (F6, F14: codex-acp has no ``session/fork`` and no rewind);
delegation from a codex-acp thread and to one through agentd's tool (F9);
and usage — codex-acp reports the context window's fill only, so no tokens
are counted.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest
import trio

from agentd.actors.providers.acp import AcpAdapter
from agentd.actors.providers.transport import recording
from agentd.launch import start_daemon
from agentd.protocol.client import Client
from scripts.offline.codex import user_texts
from tests.helpers import answer_begun, run_accepting, script, stored_events, wait_event, wait_process_gone, wait_run_terminal
from tests.integration.acp_worlds import CODEX_ACP, CODEX_ACP_VERSION, SKIP_REASON, CodexAcpWorld, codex_acp_available, sanitize
from tests.providers.test_acp_replay import SCENARIOS, TRANSCRIPTS, run_replay, transcript_paths
from tests.providers.test_claude_replay import Harness

pytestmark = pytest.mark.skipif(not codex_acp_available(), reason=SKIP_REASON)

RECORD = os.environ.get("AGENTD_RECORD_ACP") == "1"


@pytest.mark.parametrize("name", sorted(SCENARIOS["codex"]))
async def test_scenario_against_real_codex_acp(name, tmp_path):
    cwd = tmp_path / "ws"
    cwd.mkdir()
    world = CodexAcpWorld(tmp_path / "codex", cwd)
    raw = tmp_path / "recorded"
    header = {"provider": "acp", "agent": "@zed-industries/codex-acp", "version": CODEX_ACP_VERSION,
              "note": f"scenario {name} (tests/providers/test_acp_replay.py)"}
    try:
        async with trio.open_nursery() as nursery:
            adapter = AcpAdapter(world.provider_config(), home=tmp_path / "agentd-home", request_timeout=60,
                                 spawn=recording(raw / f"acp_codex_{name}.ndjson", header))
            facts = await SCENARIOS["codex"][name](Harness(nursery, adapter, live=True), str(cwd))
            nursery.cancel_scope.cancel()
        if "file" in facts:
            assert (cwd / facts["file"]).exists(), "the agent really did it in the workspace"
        if name == "resume":
            assert any("remember pineapple" in texts and texts[-1] == "which fruit?"
                       for texts in map(user_texts, world.model_requests())), "session/resume carried the earlier turn"
    finally:
        world.close()

    sanitized = tmp_path / "sanitized"
    for path in transcript_paths("codex", name, raw):
        sanitize(path, sanitized / path.name, [tmp_path])
    await run_replay("codex", name, tmp_path / "replay", directory=sanitized)
    if RECORD:
        for old in transcript_paths("codex", name):
            old.unlink(missing_ok=True)
        for path in sanitized.iterdir():
            shutil.copy(path, TRANSCRIPTS / path.name)


# -- end to end through the daemon's socket, as a client ---------------------------------------
#
# One daemon for these tests (tests/conftest.py module_paths), with one Codex world: the fake
# Responses server inside each codex-acp's loopback-only namespace, every request in one log.
# codex-acp 0.16.0 advertises sessionCapabilities {list, resume, close} and no fork: a fork
# is portable (F6), a rollback rebuilt (F14), a resume ``session/resume``.

#: the workspaces of the tests below, each trusted in the world's config.toml
WORKSPACES = ("edit", "crash", "lineage", "delegate_from", "delegate_allowed", "delegate_to", "usage", "restart", "crash_node", "idle")


@pytest.fixture(scope="module")
def codex_agentd(module_paths):
    """The module's daemon and its Codex world: providers ``codex_acp`` and ``basic`` (scripted)."""
    from scripts.offline.world import toml_value
    from tests.helpers import daemon_for_module

    data, socket = module_paths
    root = data.parent / "world"
    workspaces = {name: root / "ws" / name for name in WORKSPACES}
    for path in workspaces.values():
        path.mkdir(parents=True)
    world = CodexAcpWorld(root / "codex", workspaces["edit"])
    with open(world.codex.codex_home / "config.toml", "a") as f:
        f.writelines(f'\n[projects."{path}"]\ntrust_level = "trusted"\n' for path in list(workspaces.values())[1:])
    table = {"kind": "acp", "binary": str(CODEX_ACP), "env": world.env(), "wrapper": list(world.codex.wrapper)}
    instance = "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items() if v)
    config = root / "config.toml"
    config.write_text('[daemon]\ndefault_provider = "codex_acp"\ninterrupt_grace = 30\n\n'
                      f'[providers.codex_acp]\n{instance}\n[providers.codex_acp_allow]\n{instance}agentd_tool = "allow"\n'
                      f'\n[providers.codex_acp_idle]\n{instance}idle_timeout = 1\n'
                      '\n[providers.basic]\nkind = "scripted"\n')
    try:
        with daemon_for_module(start_daemon, data, socket, config=config) as daemon:
            yield daemon, world, workspaces, config
    finally:
        world.close()


@pytest.fixture
async def client(codex_agentd):
    daemon = codex_agentd[0]
    async with Client.connect(daemon.socket) as connected:
        yield connected


@pytest.fixture
def world(codex_agentd):
    return codex_agentd[1]


@pytest.fixture
def workspaces(codex_agentd):
    return codex_agentd[2]


async def new_thread(client: Client, workspace: Path, provider: str = "codex_acp") -> str:
    return (await client.call("thread.create", provider=provider, workspace=str(workspace)))["threadId"]


async def assistant_texts(client: Client, thread_id: str) -> list[str]:
    return [m["text"] for m in (await client.call("thread.get", threadId=thread_id))["messages"] if m["role"] == "assistant"]


def requests_with(world: CodexAcpWorld, text: str) -> list[list[str]]:
    """The user texts of every model request whose last user text ends with
    ``text`` (a handoff comes as a text block before the message: one user message)."""
    return [texts for texts in map(user_texts, world.model_requests()) if texts and texts[-1].endswith(text)]


async def test_an_apply_patch_is_a_file_change_and_the_runs_checkpoint_has_it(client, workspaces):
    """F13: codex-acp reports Codex's ``apply_patch`` as a ``tool_call`` of kind
    ``edit`` with a ``diff`` — a ``file_change`` node — and the run's
    checkpoint's diff holds the added file. (The fake answers WRITE_FILE with
    a freeform ``custom_tool_call``, as Codex offers apply_patch to gpt-5.4.)"""
    workspace = workspaces["edit"]
    thread_id = await new_thread(client, workspace)
    run, accepted = await run_accepting(client, thread_id, "WRITE_FILE please")
    assert run["status"] == "completed", run
    assert accepted == [], "a patch inside the trusted workspace (under /tmp) needs no approval"
    assert (workspace / "patched.txt").read_text() == "patched by the fake model\n"
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    (change,) = [n for n in nodes if n["kind"] == "file_change"]
    assert change["status"] == "completed" and change["detail"]["kind"] == "edit"
    assert change["detail"]["changes"] == [{"path": str(workspace / "patched.txt"), "kind": "add",
                                            "diff": "--- /dev/null\n+++ b/patched.txt\n@@ -0,0 +1 @@\n+patched by the fake model\n"}]
    diff = await client.call("run.diff", runId=run["id"])
    assert [(f["path"], f["change"]) for f in diff["files"]] == [("patched.txt", "added")]
    assert "+patched by the fake model" in diff["patch"]
    assert (await assistant_texts(client, thread_id))[-1].startswith("Tool finished:")


async def test_codex_acps_sandbox_does_not_open_the_daemons_working_directory(client, world, workspaces):
    """codex-acp 0.16.0 makes its process's working directory its sandbox's
    writable root (the session's ``cwd`` only moves the turn's directory):
    agentd starts it in an empty directory of the instance's, so the folder
    the daemon was started in (here the test's own) is not writable to it."""
    run, _ = await run_accepting(client, await new_thread(client, workspaces["usage"]), "where is my sandbox")
    assert run["status"] == "completed", run
    (texts,) = requests_with(world, "where is my sandbox")
    (body,) = [b for b in world.model_requests() if user_texts(b) == texts]
    context = json.dumps(body["input"])
    assert f'<entry access=\\"write\\"><path>{os.getcwd()}</path>' not in context, context[:3000]
    assert "/providers/codex_acp/cwd</root>" in context, context[:3000]


async def test_a_sigkilled_codex_acp_mid_turn_is_recovered_and_the_thread_goes_on(client, world, workspaces):
    """F11 on the real agent: codex-acp SIGKILLed while its turn streams text
    (no node yet: nothing touched the world). The session is marked crashed
    and the run gets a new attempt (``provider_recovery``) on a new process,
    which ``session/resume``s the session (codex-acp advertises resume): the
    retried turn completes, and the thread's next message's model request
    carries the turn before the crash. (A crash after a node fails the run
    ``provider_crashed`` instead: turns.on_session_exited.)"""
    thread_id = await new_thread(client, workspaces["crash"])
    first, _ = await run_accepting(client, thread_id, "remember pineapple")
    assert first["status"] == "completed", first
    sent = await client.call("thread.message.send", threadId=thread_id, text="GO_SLOW")
    await answer_begun(client, thread_id, sent["runId"], timeout=60)
    (session,) = [s for s in (await client.call("daemon.status"))["sessions"] if s["threadId"] == thread_id]
    os.kill(session["pid"], signal.SIGKILL)
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=90)
    assert run["status"] == "completed" and run["attemptCount"] == 2, run
    attempts = (await client.call("run.get", runId=run["id"]))["attempts"]
    assert [(a["number"], a["reason"], a["status"]) for a in attempts] == [(1, "initial", "failed"), (2, "provider_recovery", "completed")], attempts
    await wait_process_gone(session["pid"], timeout=30)
    crashed = await wait_event(client, lambda e: e["type"] == "session.error" and e["payload"]["session"]["id"] == session["id"],
                               thread_id=thread_id, timeout=30)
    assert crashed["payload"]["session"]["reason"] == "crashed: signal 9"
    resumed = await wait_event(client, lambda e: e["type"] == "provider_thread.resumed", thread_id=thread_id, timeout=30)
    assert resumed["runId"] == run["id"]

    after, _ = await run_accepting(client, thread_id, "which fruit?")
    assert after["status"] == "completed", after
    (texts,) = requests_with(world, "which fruit?")
    assert "remember pineapple" in texts, texts


async def test_a_sigkilled_codex_acp_after_a_node_fails_the_run_and_the_thread_goes_on(client, workspaces):
    """F11, the other branch: codex-acp SIGKILLed while its command waits on
    the person's approval — a node exists, so re-running could repeat what it
    did: the run fails ``provider_crashed`` (not retried), the approval can no
    longer be answered (``not_resumable``), and the next message works."""
    thread_id = await new_thread(client, workspaces["crash_node"])
    sent = await client.call("thread.message.send", threadId=thread_id, text="ASK_APPROVAL please")
    asked = await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=thread_id, timeout=60)
    (session,) = [s for s in (await client.call("daemon.status"))["sessions"] if s["threadId"] == thread_id]
    os.kill(session["pid"], signal.SIGKILL)
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=60)
    assert (run["status"], run["attemptCount"]) == ("failed", 1) and run["reason"].startswith("provider_crashed"), run
    gone = await wait_event(client, lambda e: e["type"] == "approval.not_resumable", thread_id=thread_id, timeout=30)
    assert gone["payload"]["request"]["id"] == asked["payload"]["request"]["id"]
    assert (await client.call("thread.requests", threadId=thread_id))["requests"] == []
    after, _ = await run_accepting(client, thread_id, "still there?")
    assert after["status"] == "completed", after
    assert (await assistant_texts(client, thread_id))[-1], "the thread answered"


async def test_an_idle_reaped_codex_acp_session_is_resumed(client, world, workspaces):
    """F11 after an idle reap (``idle_timeout = 1``): the session is stopped,
    and the next message ``session/resume``s it in a new process —
    ``nativeTurnCount`` is the prompts this daemon sent it — with the earlier
    turn in the model's request."""
    thread_id = await new_thread(client, workspaces["idle"], provider="codex_acp_idle")
    first, _ = await run_accepting(client, thread_id, "remember kiwi")
    assert first["status"] == "completed", first
    stopped = await wait_event(client, lambda e: e["type"] == "session.stopped", thread_id=thread_id, timeout=30)
    assert stopped["payload"]["session"]["reason"] == "idle_timeout"
    second, _ = await run_accepting(client, thread_id, "which fruit was it?")
    assert second["status"] == "completed", second
    resumed = await wait_event(client, lambda e: e["type"] == "provider_thread.resumed", thread_id=thread_id, timeout=30)
    assert resumed["payload"]["nativeTurnCount"] == 1, resumed
    (texts,) = requests_with(world, "which fruit was it?")
    assert texts == ["remember kiwi", "which fruit was it?"], texts


async def test_a_fork_is_portable_and_a_rollback_is_rebuilt(client, world, workspaces):
    """F6 and F14 on an agent without ``session/fork`` or a rewind: the fork's
    first message starts a new ACP session given a stored handoff of the
    source's runs (portable), and ``rollback.toRun`` puts the files back and
    retires the source's session (``providerRollback: rebuilt``): the next
    message's session is given the runs up to the target only."""
    workspace = workspaces["lineage"]
    source = await new_thread(client, workspace)
    first, _ = await run_accepting(client, source, "the color is teal")
    assert first["status"] == "completed", first
    source_native = (await client.call("thread.get", threadId=source))["thread"]["providerThreadId"]

    fork = (await client.call("thread.fork", threadId=source))["threadId"]
    forked, _ = await run_accepting(client, fork, "in the fork")
    assert forked["status"] == "completed", forked
    (transfer,) = [t for t in (await client.call("thread.transfers", threadId=fork))["transfers"] if t["type"] == "fork"]
    assert transfer["status"] == "consumed" and transfer["handoffId"], transfer
    handoff = (await client.call("handoff.get", handoffId=transfer["handoffId"]))["handoff"]["text"]
    assert "the color is teal" in handoff
    (texts,) = requests_with(world, "in the fork")
    assert texts[-1] == handoff + "\nin the fork", "the handoff came before the message, in the new session's first prompt"
    assert (await client.call("thread.get", threadId=fork))["thread"]["providerThreadId"] != source_native

    # (After the fork: the fake would take the keyword in a handoff as the fork's own.)
    second, _ = await run_accepting(client, source, "WRITE_FILE please")
    assert second["status"] == "completed" and (workspace / "patched.txt").exists(), second
    rolled = await client.call("rollback.toRun", threadId=source, targetOrdinal=1)
    assert rolled["providerRollback"] == "rebuilt" and rolled["rolledBackRunIds"] == [second["id"]], rolled
    assert "patched.txt" in rolled["restoredFiles"] and not (workspace / "patched.txt").exists()
    assert source_native in rolled["retiredProviderThreadIds"]
    after, _ = await run_accepting(client, source, "which color?")
    assert after["status"] == "completed", after
    (texts,) = requests_with(world, "which color?")
    assert "the color is teal" in texts[-1] and "WRITE_FILE" not in " ".join(texts), texts
    assert (await client.call("thread.get", threadId=source))["thread"]["providerThreadId"] != source_native


async def test_a_codex_acp_thread_delegates_through_agentds_tool(client, world, workspaces):
    """F9 from codex-acp: agentd's tool came in ``session/new``'s ``mcpServers``
    (Codex offers it as the ``mcp__agentd`` namespace); the model's
    ``delegate_task`` call runs a scripted child, whose answer is the tool's
    output in Codex's next model request."""
    thread_id = await new_thread(client, workspaces["delegate_from"])
    run, accepted = await run_accepting(client, thread_id, "DELEGATE_TO:basic: tango")
    assert run["status"] == "completed", run
    # agentd_tool = "ask" (the default): codex-acp's MCP approval is an agentd approval.
    (asked,) = accepted
    assert asked["detail"]["title"] == "Approve MCP tool call"
    assert asked["decisions"] == ["accept", "acceptForSession", "decline"]
    (child,) = [t for t in (await client.call("thread.list"))["threads"] if t.get("parentThreadId") == thread_id]
    assert (child["relationshipToParent"], child["createdBy"], child["provider"]) == ("delegated_task", "agent", "basic")
    spawn, result = (await client.call("thread.transfers", threadId=child["id"]))["transfers"]
    assert (spawn["type"], result["type"], result["status"], result["runId"]) == ("subagent_spawn", "subagent_result", "consumed", run["id"])
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    (tool,) = [n for n in nodes if n["id"] == spawn["sourcePoint"]["nodeId"]]
    assert tool["title"] == "Tool: agentd/delegate_task" and tool["status"] == "completed", tool
    outputs = [item for item in world.model_requests()[-1]["input"] if item.get("type") == "function_call_output"]
    assert "tango" in json.dumps(outputs[-1]), outputs
    assert (await assistant_texts(client, thread_id))[-1].startswith("Tool finished:")


async def test_agentd_tool_allow_preapproves_codex_acps_mcp_approval(client, workspaces):
    """F9 with ``agentd_tool = "allow"``: codex-acp titles its permission
    "Approve MCP tool call" (its tool call: ``Tool: agentd/delegate_task``,
    ``rawInput.server_name`` ``agentd``); agentd knows it for its own tool and
    allows it without asking."""
    thread_id = await new_thread(client, workspaces["delegate_allowed"], provider="codex_acp_allow")
    run, accepted = await run_accepting(client, thread_id, "DELEGATE_TO:basic: tango")
    assert run["status"] == "completed", run
    assert accepted == [], "agentd's own tool was pre-approved"
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    assert [n for n in nodes if n["kind"] == "approval"] == []
    (tool,) = [n for n in nodes if n["title"] == "Tool: agentd/delegate_task"]
    assert tool["status"] == "completed" and "You said: tango" in json.dumps(tool["detail"]["rawOutput"])


async def test_a_scripted_thread_delegates_to_codex_acp(client, world, workspaces):
    """F9 to codex-acp: a scripted agent's ``delegate`` step calls agentd's tool
    with ``provider = "codex_acp"``; the child thread's run is a codex-acp
    session whose model request carries the task's handoff and instructions,
    and its final answer comes back to the scripted agent."""
    parent = await new_thread(client, workspaces["delegate_to"], provider="basic")
    instructions = "count the files named quebec"
    run, _ = await run_accepting(client, parent, script({"delegate": {"instructions": instructions, "provider": "codex_acp", "wait": True}}))
    assert run["status"] == "completed", run
    (child,) = [t for t in (await client.call("thread.list"))["threads"] if t.get("parentThreadId") == parent]
    assert (child["createdBy"], child["provider"], child["workspace"]) == ("agent", "codex_acp", str(workspaces["delegate_to"]))
    (child_run,) = (await client.call("thread.get", threadId=child["id"]))["runs"]
    assert child_run["status"] == "completed" and child_run["provider"] == "codex_acp"
    spawn = (await client.call("thread.transfers", threadId=child["id"]))["transfers"][0]
    task_text = (await client.call("handoff.get", handoffId=spawn["handoffId"]))["handoff"]["text"]
    (texts,) = requests_with(world, instructions)
    assert texts[-1] == task_text + "\n" + instructions
    answer = (await assistant_texts(client, parent))[-1]
    assert answer.startswith("delegated task completed: You said:") and instructions in answer, answer


async def test_usage_codex_acp_reports_is_the_context_fill_not_tokens_spent(client, world, workspaces):
    """What codex-acp 0.16.0 reports of usage: a ``usage_update`` after each
    model response — ``used`` is the last response's tokens in the context
    window (the fake's 10 in + 5 out = 15, the same every turn), ``size`` the
    window — and no ``usage`` on the prompt's answer. agentd counts only
    tokens spent (protocol/README "ACP providers"), so the run's and the
    thread's ``usage`` stay null and no ``run.usage`` event comes; claude-agent-acp's
    prompt answers do carry ``usage`` (tests/providers/test_acp_replay.py)."""
    thread_id = await new_thread(client, workspaces["usage"])
    for text in ("count me once", "count me twice"):
        run, _ = await run_accepting(client, thread_id, text)
        assert run["status"] == "completed" and run["usage"] is None, run
    assert (await client.call("thread.get", threadId=thread_id))["thread"]["usage"] is None
    events = await stored_events(client, thread_id)
    assert not [e for e in events if e["type"] == "run.usage"]
    assert len(requests_with(world, "count me twice")) == 1, "the model was asked (and reported its usage)"


async def test_a_sigkilled_daemon_leaves_no_codex_acp_and_the_thread_resumes_after(codex_agentd, short_dir):
    """F12 with codex-acp (a daemon of the test's own, same config and world):
    the daemon SIGKILLed while a turn streams takes its agent with it (the
    process guard); the restarted daemon closes the run honestly, and the
    thread's next message resumes the session in a new codex-acp
    (``session/resume``) with the earlier turn in the model's request."""
    _daemon, world, workspaces, config = codex_agentd
    data = short_dir / "data"
    daemon = await start_daemon(data, short_dir / "s.sock", config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = await new_thread(client, workspaces["restart"])
            first, _ = await run_accepting(client, thread_id, "remember mango")
            assert first["status"] == "completed", first
            sent = await client.call("thread.message.send", threadId=thread_id, text="GO_SLOW")
            await answer_begun(client, thread_id, sent["runId"], timeout=60)
            (session,) = [s for s in (await client.call("daemon.status"))["sessions"] if s["threadId"] == thread_id]
    finally:
        await daemon.kill()
    await wait_process_gone(session["pid"], timeout=30)
    daemon = await start_daemon(data, short_dir / "s2.sock", config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            run = (await client.call("run.get", runId=sent["runId"]))["run"]
            assert (run["status"], run["reason"]) == ("interrupted", "daemon_restart"), run
            after, _ = await run_accepting(client, thread_id, "which fruit now?")
            assert after["status"] == "completed", after
            # The same ACP session, resumed (session/resume) in a new codex-acp: the earlier
            # turn is in its history; the run cut off by the restart comes as a delta handoff.
            (transfer,) = [t for t in (await client.call("thread.transfers", threadId=thread_id))["transfers"]
                           if t["type"] == "provider_handoff"]
            handoff = (await client.call("handoff.get", handoffId=transfer["handoffId"]))["handoff"]
            assert handoff["strategy"] == "delta" and transfer["status"] == "consumed", handoff
            (texts,) = requests_with(world, "which fruit now?")
            assert texts[-1] == handoff["text"] + "\nwhich fruit now?" and "remember mango" in texts[:-1], texts
    finally:
        assert await daemon.terminate() == 0

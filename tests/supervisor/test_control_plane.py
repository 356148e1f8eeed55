"""An agent's commands cannot drive agentd's control plane (hostile-round
issue, item 11; SPEC F9, F15, F20).

Agents run as the person's uid, and every command they run could reach the
daemon's socket: one answered its own agent's pending approval. Now a peer
that is an agent's runtime or anything it started — a double-forked
daemon included, since runtimes are child subreapers — gets ``forbidden``
for every control method, while reads stay open; agentd's tool methods need
the session's own credential, presented by a process of that session's
runtime; and a client agentd did not start (this test) still controls
everything. The commands are real ones, run by the scripted agent's
``command`` step; ``scripts/agent_peer.py`` is the hostile client.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from agentd.actors.providers.agentd_tool import AgentdTool
from agentd.actors.providers.subreaper import subreaper_command
from agentd.actors.providers.tool_credentials import ToolCredentials
from agentd.protocol.client import Client
from agentd.protocol.errors import Forbidden
from agentd.supervisor.peers import AgentProcesses
from tests.helpers import script, wait_event, wait_run_terminal


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (conftest's): these tests need only threads of
    their own (issue 28 item 13)."""
    return module_daemon

PEER = str(Path(__file__).resolve().parents[2] / "scripts" / "agent_peer.py")
TIMEOUT = 60
APPROVAL = {"approval": {"kind": "command", "command": "rm -rf build"}}
CONTROL = ("approve", "stop", "interrupt", "rollback", "send")


async def pending_approval(client: Client, thread_id: str) -> dict:
    event = await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=thread_id, timeout=TIMEOUT)
    return event["payload"]["request"]


async def still_pending(client: Client, thread_id: str, request_id: str) -> bool:
    requests = (await client.call("thread.requests", threadId=thread_id))["requests"]
    return any(r["id"] == request_id and r["status"] == "pending" for r in requests)


async def command_nodes(client: Client, run_id: str) -> list[dict]:
    nodes = (await client.call("run.get", runId=run_id))["nodes"]
    return [n for n in nodes if n["kind"] == "command_execution"]


async def session_of(client: Client, thread_id: str) -> dict:
    [session] = [s for s in (await client.call("daemon.status"))["sessions"] if s["threadId"] == thread_id]
    return session


async def approve_and_finish(client: Client, thread_id: str, run_id: str, request_id: str) -> str:
    """The person (this test, no agent's process) answers; the run ends."""
    answered = await client.call("approval.respond", requestId=request_id, decision="accept")
    assert answered["status"] == "resolved"
    run = await wait_run_terminal(client, thread_id, run_id, timeout=TIMEOUT)
    assert run["status"] == "completed", run
    messages = (await client.call("thread.get", threadId=thread_id))["messages"]
    return "\n".join(m["text"] for m in messages if m["role"] == "assistant" and m["runId"] == run_id)


async def test_the_agentd_cli_run_by_an_agent_is_refused_approve_stop_and_rollback(client, daemon):
    """Item 11: ``python -m agentd approve|stop|rollback`` as another
    agent's command (its environment holds AGENTD_SOCKET) gets
    ``forbidden``; the approval stays pending, and the person approves it."""
    victim = (await client.call("thread.create", title="victim"))["threadId"]
    sent = await client.call("thread.message.send", threadId=victim, text=script(APPROVAL, {"say": "went on"}))
    request = await pending_approval(client, victim)
    cli = [sys.executable, "-m", "agentd"]
    attacker = (await client.call("thread.create", title="attacker"))["threadId"]
    attack = await client.call("thread.message.send", threadId=attacker, text=script(
        {"command": {"argv": [*cli, "approve", request["id"]]}},
        {"command": {"argv": [*cli, "stop", victim]}},
        {"command": {"argv": [*cli, "rollback", victim, "0", "--yes"]}},
    ))
    run = await wait_run_terminal(client, attacker, attack["runId"], timeout=TIMEOUT)
    assert run["status"] == "completed", run
    nodes = await command_nodes(client, run["id"])
    assert [n["status"] for n in nodes] == ["failed"] * 3, nodes
    for node in nodes:
        assert node["detail"]["exitCode"] == 1, node
        assert "refused" in node["detail"]["aggregatedOutput"] and "agent" in node["detail"]["aggregatedOutput"], node
    assert await still_pending(client, victim, request["id"])
    assert "approval: accept" in await approve_and_finish(client, victim, sent["runId"], request["id"])


async def test_a_double_forked_daemon_of_the_agents_command_is_refused_at_its_own_approval(client, short_dir):
    """Item 11: the command daemonises (fork, setsid, fork; the middle exits),
    so the process that connects is reparented — to the agent runtime, a
    child subreaper — and then tries every control method against its own
    agent's pending approval: each is ``forbidden``, a read is not, and
    agentd's tool without the session's credential is ``forbidden`` too."""
    thread_id = (await client.call("thread.create", title="self"))["threadId"]
    report_path = short_dir / "report.sock"
    with trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM) as listener:
        await listener.bind(str(report_path))
        listener.listen(1)
        sent = await client.call("thread.message.send", threadId=thread_id, text=script(
            {"command": {"argv": [sys.executable, PEER, "--detach", "--thread", thread_id, "--report", str(report_path),
                                  "--calls", ",".join((*CONTROL, "create", "create-as-agent", "read", "delegate"))]}},
            APPROVAL,
            {"say": "went on"},
        ))
        with trio.fail_after(TIMEOUT):
            conn, _ = await listener.accept()
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = await conn.recv(65536)
                    assert chunk, f"the peer closed its report early: {data!r}"
                    data += chunk
    report = json.loads(data)
    assert "error" not in report, report
    session = await session_of(client, thread_id)
    assert report["ppid"] == session["pid"], "the daemonised process was not reparented to the agent runtime"
    assert report["results"] == {**{name: "forbidden" for name in CONTROL}, "create": "forbidden",
                                 "create-as-agent": "ok", "read": "ok", "delegate": "forbidden"}
    made = [t for t in (await client.call("thread.list"))["threads"] if t["title"] == "made by a command"]
    assert [t["createdBy"] for t in made] == ["agent"]
    assert report["stillPending"] is True
    assert await still_pending(client, thread_id, report["requestId"])
    assert "approval: accept" in await approve_and_finish(client, thread_id, sent["runId"], report["requestId"])
    [node] = await command_nodes(client, sent["runId"])
    assert node["status"] == "completed" and node["detail"]["exitCode"] == 0, node


async def test_an_agents_command_cannot_use_another_sessions_credential(client, daemon):
    """Item 11: a command that reads another session's credential file (the
    person's files are the agent's too) still cannot delegate as that
    session: the credential counts only from that session's own processes."""
    victim = (await client.call("thread.create", title="victim"))["threadId"]
    sent = await client.call("thread.message.send", threadId=victim, text=script(APPROVAL))
    request = await pending_approval(client, victim)
    credentials = daemon.data_dir / "run" / "tool-credentials"
    attacker = (await client.call("thread.create", title="thief"))["threadId"]
    attack = await client.call("thread.message.send", threadId=attacker, text=script(
        {"command": {"argv": [sys.executable, PEER, "--thread", victim, "--calls", "steal",
                              "--steal", request["sessionId"], str(credentials)]}}))
    run = await wait_run_terminal(client, attacker, attack["runId"], timeout=TIMEOUT)
    [node] = await command_nodes(client, run["id"])
    report = json.loads(node["detail"]["aggregatedOutput"])
    assert report["results"] == {"steal": "forbidden"}, report
    tasks = [t for t in (await client.call("thread.list"))["threads"] if t["parentThreadId"] == victim]
    assert tasks == []
    await approve_and_finish(client, victim, sent["runId"], request["id"])


async def test_the_tool_methods_refuse_a_session_id_without_its_credential(client):
    """Item 11: a session id is no proof, even from the person's client."""
    thread_id = (await client.call("thread.create"))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread_id, text=script(APPROVAL))
    request = await pending_approval(client, thread_id)
    for credential in (None, "not-the-credential"):
        extra = {"credential": credential} if credential else {}
        with pytest.raises(Forbidden, match="credential"):
            await client.call("task.delegate", instructions="x", sessionId=request["sessionId"], **extra)
        with pytest.raises(Forbidden, match="credential"):
            await client.call("task.result", taskId=thread_id, sessionId=request["sessionId"], **extra)
    await approve_and_finish(client, thread_id, sent["runId"], request["id"])


async def test_a_command_step_runs_in_the_workspace_and_changes_files(client, tmp_path):
    """The scripted agent's ``command`` step: a real command in the thread's
    workspace (or a folder under it), its exit code and output in a
    ``command_execution`` node; a file it writes is in the run's checkpoint."""
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    thread_id = (await client.call("thread.create", workspace=str(workspace)))["threadId"]
    writer = "import os, sys; open('made.txt', 'w').write('by a command'); print(os.getcwd()); sys.exit(3)"
    sent = await client.call("thread.message.send", threadId=thread_id, text=script(
        {"command": {"argv": [sys.executable, "-c", writer], "cwd": "sub"}},
        {"command": {"argv": ["sh", "-c", "echo out; echo err >&2"]}},
    ))
    run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=TIMEOUT)
    assert run["status"] == "completed", run
    first, second = await command_nodes(client, run["id"])
    assert first["status"] == "failed" and first["detail"]["exitCode"] == 3
    assert first["detail"]["aggregatedOutput"].strip() == str((workspace / "sub").resolve())
    assert second["status"] == "completed" and second["detail"]["aggregatedOutput"] == "out\nerr\n"
    assert second["title"] == "sh -c 'echo out; echo err >&2'"
    assert (workspace / "sub" / "made.txt").read_text() == "by a command"
    diff = await client.call("checkpoint.diff", checkpointId=run["checkpointId"])
    assert [f["path"] for f in diff["files"]] == ["sub/made.txt"]


def test_the_credential_reaches_the_runtimes_by_a_files_path_never_in_an_argv(tmp_path):
    """Item 11: Codex's ``-c`` overrides and Claude's ``--mcp-config`` are
    argv, which every user can read in /proc: they name the endpoint and a
    file (or the environment variable) that holds the token; only the
    daemon, those files and Codex's environment hold the secret."""
    credentials = ToolCredentials(tmp_path / "creds")
    credentials.reset()
    credentials.mcp_url = "http://127.0.0.1:4711/mcp"

    async def issue() -> None:
        await credentials.issue("pss_1")

    trio.run(issue)
    secret = (tmp_path / "creds" / "pss_1").read_text()
    assert len(secret) >= 32 and (tmp_path / "creds" / "pss_1").stat().st_mode & 0o777 == 0o600
    assert credentials.check("pss_1", secret) and not credentials.check("pss_1", secret + "x")
    tool = AgentdTool(socket="/run/agentd.sock", credentials=credentials)
    argv = [*tool.codex_args("pss_1", preapproved=False), *tool.claude_args("pss_1", preapproved=False)]
    assert all(secret not in arg for arg in argv)
    assert str(tmp_path / "creds" / "pss_1") in " ".join(argv)
    assert tool.scripted_env("pss_1")["AGENTD_TOOL_CREDENTIAL"] == str(tmp_path / "creds" / "pss_1")


def test_a_process_tree_walk_finds_the_runtime_of_a_daemonised_grandchild():
    """Item 11, the walk itself: a runtime started as a child subreaper (as
    agentd starts every one) keeps a double-forked grandchild in its tree;
    this test process, which started before the "daemon", is the person's."""
    grandchild_code = (
        "import os, sys, time\n"
        "r, w = os.pipe()\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        os.write(w, str(os.getpid()).encode()); os.close(w)\n"
        "        sys.stdin.read(); os._exit(0)\n"
        "    os._exit(0)\n"
        "os.close(w); print(os.read(r, 32).decode(), flush=True); sys.stdin.read()\n"
    )
    daemon_pid = os.getpid()
    runtime = subprocess.Popen(subreaper_command([sys.executable, "-c", grandchild_code]),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(runtime.stdout.readline())
        from agentd.actors.providers.procinfo import process_start_ticks

        runtimes = [("pss_rt", runtime.pid, process_start_ticks(runtime.pid))]
        processes = AgentProcesses(lambda: runtimes, daemon_pid=daemon_pid)
        processes.daemon_ticks = process_start_ticks(runtime.pid) - 1  # "the daemon" started just before it
        found = processes.identify(grandchild)
        assert found.agent_process and found.session_id == "pss_rt", found
        assert processes.identify(runtime.pid).session_id == "pss_rt"
        person = processes.identify(os.getppid())
        assert not person.agent_process, person
        # A runtime whose recorded start time is not this process's is not it (a reused pid).
        runtimes[:] = [("pss_rt", runtime.pid, process_start_ticks(runtime.pid) + 1)]
        assert processes.identify(grandchild).session_id is None
        # Once it exited (it ends with the stdin it shares), it is no one agentd can tell: refused.
        pidfd = os.pidfd_open(grandchild)
    finally:
        runtime.stdin.close()
        runtime.wait(timeout=TIMEOUT)
    try:
        assert select.select([pidfd], [], [], TIMEOUT)[0], "the grandchild did not exit"
        gone = processes.identify(grandchild, pidfd)
    finally:
        os.close(pidfd)
    assert gone.agent_process and gone.session_id is None, gone


async def test_over_the_websocket_an_agents_command_with_the_token_is_refused_too(tmp_path, short_dir):
    """Item 11 (SPEC F20): the WebSocket's token is a file of the person's,
    which an agent's command can read. Its client end is found in /proc and
    told apart like a Unix-socket peer: ``forbidden`` for control, a read
    is fine; the person's own WebSocket client (this test) approves."""
    import trio_websocket

    from agentd.launch import start_daemon

    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", extra_args=["--websocket-port", "0"])
    try:
        async with Client.connect(daemon.socket) as client:
            url = (await client.call("daemon.status"))["websocket"]
            port = int(url.rsplit(":", 1)[1].strip("/"))
            token_file = tmp_path / "data" / "websocket.token"
            victim = (await client.call("thread.create", title="victim"))["threadId"]
            sent = await client.call("thread.message.send", threadId=victim, text=script(APPROVAL, {"say": "went on"}))
            request = await pending_approval(client, victim)
            attacker = (await client.call("thread.create", title="attacker"))["threadId"]
            attack = await client.call("thread.message.send", threadId=attacker, text=script(
                {"command": {"argv": [sys.executable, PEER, "--thread", victim, "--websocket", str(port),
                                      str(token_file), "--calls", ",".join((*CONTROL, "read"))]}}))
            run = await wait_run_terminal(client, attacker, attack["runId"], timeout=TIMEOUT)
            [node] = await command_nodes(client, run["id"])
            report = json.loads(node["detail"]["aggregatedOutput"])
            assert report["results"] == {**{name: "forbidden" for name in CONTROL}, "read": "ok"}, report
            assert await still_pending(client, victim, request["id"])
            token = token_file.read_text().strip()
            with trio.fail_after(TIMEOUT):
                async with trio_websocket.open_websocket("127.0.0.1", port, f"/?token={token}", use_ssl=False) as ws:
                    await ws.send_message(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "approval.respond", "params": {
                        "requestId": request["id"], "decision": "accept"}}))
                    answer = json.loads(await ws.get_message())
            assert answer["result"]["status"] == "resolved", answer
            run = await wait_run_terminal(client, victim, sent["runId"], timeout=TIMEOUT)
            assert run["status"] == "completed", run
    finally:
        await daemon.terminate()

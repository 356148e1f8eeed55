"""Delegated tasks through agentd's own MCP tool (SPEC F9), end to end: a
scripted agent's ``delegate`` step posts to the daemon's MCP endpoint — the
one agentd configures into Codex and Claude sessions — whose tools call
``task.delegate`` / ``task.result`` in the daemon.

``basic`` is a second scripted instance without native fork: the child runs
on another provider than its parent.
"""

from __future__ import annotations

import os
import sys

import pytest
import trio
import trio.testing

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError, LimitExceeded
from tests.helpers import daemon_for_module, script, wait_event, wait_run_terminal

#: seconds a run that delegates may take on a busy 2-core machine (the tool
#: is served by the daemon: no process starts for it)
SLOW = 60

CONFIG = """
[daemon]
delegate_max_depth = {depth}
delegate_max_fanout = {fanout}
{extra}

[providers.basic]
kind = "scripted"
capabilities = {{ nativeFork = false }}
"""


async def _start(tmp_path, short_dir, *, depth: int = 3, fanout: int = 8, extra: str = ""):
    config = tmp_path / "config.toml"
    config.write_text(CONFIG.format(depth=depth, fanout=fanout, extra=extra))
    return await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)


@pytest.fixture(scope="module")
def shared_daemon(module_paths):
    """One daemon (depth 3, fan-out 8) for the module's tests that need only
    threads of their own (issue 28 item 13: a start and stop is about 2 s
    here); those about a limit or a restart start their own. Its exit status
    is checked after the module."""
    data_dir, socket = module_paths
    config = data_dir.parent / "config.toml"
    config.write_text(CONFIG.format(depth=3, fanout=8, extra=""))
    with daemon_for_module(start_daemon, data_dir, socket, config=config) as daemon:
        yield daemon


@pytest.fixture
def daemon(shared_daemon):
    return shared_daemon


@pytest.fixture
async def client(daemon):
    async with Client.connect(daemon.socket) as c:
        yield c


async def send_and_wait(client: Client, thread_id: str, text: str) -> dict:
    sent = await client.call("thread.message.send", threadId=thread_id, text=text)
    return await wait_run_terminal(client, thread_id, sent["runId"], timeout=SLOW)


def delegate(instructions: str, *, wait: bool, provider: str = "basic", **extra) -> str:
    return script({"delegate": {"provider": provider, "instructions": instructions, "wait": wait, **extra}})


async def answer_of(client: Client, thread_id: str, run_id: str) -> str:
    messages = (await client.call("thread.get", threadId=thread_id))["messages"]
    return "\n".join(m["text"] for m in messages if m["role"] == "assistant" and m["runId"] == run_id)


async def only_child(client: Client, parent_id: str) -> dict:
    threads = (await client.call("thread.list"))["threads"]
    children = [t for t in threads if t["parentThreadId"] == parent_id]
    assert len(children) == 1, children
    return children[0]


async def start_a_hanging_task(client: Client) -> tuple[str, dict, str, str]:
    """A parent whose run delegates (and waits for) a task that reports its
    history and hangs; returns once the task has said something:
    ``(parent id, the send's answer, task thread id, task run id)``."""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    sent = await client.call("thread.message.send", threadId=parent,
                             text=delegate(script({"reportHistory": {}}, {"hang": {}}), wait=True))
    delegated = await wait_event(client, lambda e: e["type"] == "task.delegated", thread_id=parent, timeout=SLOW)
    child_id, child_run = delegated["payload"]["taskId"], delegated["payload"]["runId"]
    await wait_event(client, lambda e: e["type"] == "message.completed", thread_id=child_id)
    return parent, sent, child_id, child_run


async def transfers(client: Client, thread_id: str) -> list[dict]:
    return (await client.call("thread.transfers", threadId=thread_id))["transfers"]


async def test_f9_delegate_and_wait_the_childs_answer_is_the_tools_result(client):
    """F9: wait: true — a child thread on basic does the task; its final
    answer is the tool's result, said by the parent in the same turn."""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    task = script({"write": {"path": "notes.txt", "content": "done"}}, {"say": "the answer is kilo"})
    run = await send_and_wait(client, parent, delegate(task, wait=True))
    assert run["status"] == "completed", run
    assert "delegated task completed: the answer is kilo" in await answer_of(client, parent, run["id"])

    child = await only_child(client, parent)
    assert child["relationshipToParent"] == "delegated_task" and child["createdBy"] == "agent"
    assert child["provider"] == "basic" and child["rootThreadId"] == parent
    detail = await client.call("thread.get", threadId=child["id"])
    [child_run] = detail["runs"]
    assert child_run["status"] == "completed" and child_run["provider"] == "basic"
    assert detail["messages"][0]["role"] == "user" and detail["messages"][0]["text"] == task

    # The spawn: from the parent's delegate_task tool node, its handoff the task.
    spawn, result = await transfers(client, child["id"])
    parent_nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    [tool] = [n for n in parent_nodes if n["kind"] == "tool" and n["title"] == "delegate_task"]
    assert spawn["type"] == "subagent_spawn" and spawn["createdBy"] == "agent"
    assert spawn["sourceThreadId"] == parent and spawn["targetThreadId"] == child["id"]
    assert spawn["sourcePoint"]["nodeId"] == tool["id"] and spawn["sourcePoint"]["runId"] == run["id"]
    assert spawn["status"] == "consumed" and spawn["runId"] == child_run["id"]
    handoff = (await client.call("handoff.get", handoffId=spawn["handoffId"]))["handoff"]
    assert handoff["strategy"] == "subagent_task" and task in handoff["text"]
    attempt = (await client.call("run.get", runId=child_run["id"]))["attempts"][0]
    assert attempt["extraHandoffIds"] == [handoff["id"]]

    # The result: back to the parent, consumed by the turn that waited for it.
    assert result["type"] == "subagent_result" and result["sourceThreadId"] == child["id"]
    assert result["targetThreadId"] == parent and result["status"] == "consumed" and result["runId"] == run["id"]
    text = (await client.call("handoff.get", handoffId=result["handoffId"]))["handoff"]["text"]
    assert "Final answer: the answer is kilo" in text and "Files changed: notes.txt" in text
    assert result in await transfers(client, parent) and spawn in await transfers(client, parent)

    # Nothing is injected again into the parent's next run.
    follow = await send_and_wait(client, parent, script({"reportHistory": {}}))
    assert (await client.call("run.get", runId=follow["id"]))["attempts"][0]["extraHandoffIds"] == []


async def recall(client: Client, thread_id: str, *words: str) -> tuple[dict, dict[str, str]]:
    run = await send_and_wait(client, thread_id, script({"recall": list(words)}))
    answer = await answer_of(client, thread_id, run["id"])
    assert answer.startswith("recall: "), answer
    return run, dict(pair.split("=") for pair in answer[len("recall: "):].split())


async def test_f9_delegate_without_waiting_the_result_reaches_the_next_run_as_a_stored_handoff(client):
    """F9: wait: false — the tool answers with the task id at once; the
    child's result is a pending subagent_result handoff that the parent's
    next run takes in (``context`` to the recall oracle), once."""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    # The child's answer ("history: 0 turns + N chars of context") has words
    # that are nowhere in the parent's own turns.
    run = await send_and_wait(client, parent, delegate(script({"reportHistory": {}}), wait=False))
    assert run["status"] == "completed", run
    child = await only_child(client, parent)
    assert f"delegated task {child['id']}" in await answer_of(client, parent, run["id"])
    [child_run] = (await client.call("thread.get", threadId=child["id"]))["runs"]
    await wait_run_terminal(client, child["id"], child_run["id"])
    ended = await wait_event(client, lambda e: e["type"] == "task.ended", thread_id=parent, timeout=SLOW)
    assert ended["payload"]["taskId"] == child["id"] and ended["payload"]["status"] == "completed"

    [result] = [t for t in await transfers(client, parent) if t["type"] == "subagent_result"]
    assert result["status"] == "pending", "nothing took it in yet"
    nxt, where = await recall(client, parent, "chars", "mike")
    assert where == {"chars": "context", "mike": "absent"}
    [result] = [t for t in await transfers(client, parent) if t["type"] == "subagent_result"]
    assert result["status"] == "consumed" and result["runId"] == nxt["id"]
    assert (await client.call("run.get", runId=nxt["id"]))["attempts"][0]["extraHandoffIds"] == [result["handoffId"]]

    # task_result after the fact says the same, and injects nothing again.
    answer = await client.call("task.result", taskId=child["id"])
    assert answer["status"] == "completed" and answer["finalAnswer"].startswith("history: 0 turns + ")
    await send_and_wait(client, parent, "and now?")
    last = (await client.call("thread.get", threadId=parent))["runs"][-1]
    assert (await client.call("run.get", runId=last["id"]))["attempts"][0]["extraHandoffIds"] == []


async def test_f9_f10_stopping_the_parent_stops_its_task_and_the_result_waits_for_the_next_run(client):
    """F10 + F9: Stop of the parent while its task runs interrupts the
    parent's turn, then the child's (depth-first); the result says so and
    is taken in by the parent's next run, not by the stopped turn."""
    parent, sent, child_id, child_run = await start_a_hanging_task(client)

    await client.call("thread.stop", threadId=parent)
    parent_run = await wait_run_terminal(client, parent, sent["runId"], timeout=SLOW)
    child = await wait_run_terminal(client, child_id, child_run)
    assert parent_run["status"] == "interrupted" and child["status"] == "interrupted"
    [result] = [t for t in await transfers(client, parent) if t["type"] == "subagent_result"]
    assert result["status"] == "pending", "the stopped turn never got it"
    text = (await client.call("handoff.get", handoffId=result["handoffId"]))["handoff"]["text"]
    assert "ended: interrupted" in text and "Final answer: history: 0 turns + " in text

    await client.call("thread.queue.release", threadId=parent)
    _, where = await recall(client, parent, "chars")
    assert where == {"chars": "context"}


async def test_f9_a_crash_of_the_childs_provider(client):
    """F9 + F11: the child's runtime crashes once: recovered like any run, and
    the parent gets the answer; a runtime that keeps crashing fails the task,
    and the parent is told so, with why."""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    run = await send_and_wait(client, parent, delegate(script({"crash": 9, "once": True}, {"say": "survived"}), wait=True))
    assert "delegated task completed: survived" in await answer_of(client, parent, run["id"])
    child = await only_child(client, parent)
    attempts = (await client.call("run.get", runId=(await client.call("thread.get", threadId=child["id"]))["runs"][0]["id"]))["attempts"]
    assert [a["reason"] for a in attempts] == ["initial", "provider_recovery"]

    run = await send_and_wait(client, parent, delegate(script({"crash": 9}), wait=True))
    said = await answer_of(client, parent, run["id"])
    assert "delegated task failed: provider_crash_loop" in said and "(no answer)" in said, said


async def test_f9_limits_depth_and_fan_out_are_clear_tool_errors(tmp_path, short_dir):
    """F9: past ``delegate_max_depth`` or ``delegate_max_fanout`` the tool
    answers with an error naming the limit; nothing is created."""
    daemon = await _start(tmp_path, short_dir, depth=1, fanout=1)
    try:
        async with Client.connect(daemon.socket) as client:
            parent = (await client.call("thread.create", title="lead"))["threadId"]
            nested = delegate(delegate(script({"say": "too deep"}), wait=True), wait=True)
            run = await send_and_wait(client, parent, nested)
            said = await answer_of(client, parent, run["id"])
            assert "delegate failed: Error executing tool delegate_task: delegation depth limit" in said, said
            assert "delegate_max_depth" in said
            child = await only_child(client, parent)
            assert [t for t in (await client.call("thread.list"))["threads"] if t["parentThreadId"] == child["id"]] == []

            busy = (await client.call("thread.create", title="busy"))["threadId"]
            run = await send_and_wait(client, busy, script(
                {"delegate": {"provider": "basic", "instructions": script({"hang": {}}), "wait": False}},
                {"delegate": {"provider": "basic", "instructions": script({"say": "second"}), "wait": False}},
            ))
            said = await answer_of(client, busy, run["id"])
            assert "delegate failed: Error executing tool delegate_task: delegation fan-out limit" in said, said
            with pytest.raises(LimitExceeded) as info:
                await client.call("task.delegate", parentThreadId=busy, instructions="more")
            assert info.value.data["limit"] == "delegate_max_fanout"
            working = await only_child(client, busy)
            await client.call("thread.stop", threadId=working["id"])
    finally:
        assert await daemon.terminate() == 0


async def test_f9_f15_a_childs_approvals_are_listed_for_the_parent(client):
    """F15 + F9: a delegated child's approval is a request of the child,
    listed for the parent with ``includeChildren``, and answerable."""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    sent = await client.call("thread.message.send", threadId=parent, text=delegate(
        script({"approval": {"kind": "command", "command": "make deploy"}}), wait=True))
    delegated = await wait_event(client, lambda e: e["type"] == "task.delegated", thread_id=parent, timeout=SLOW)
    child_id = delegated["payload"]["taskId"]
    await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=child_id)
    assert (await client.call("thread.requests", threadId=parent))["requests"] == []
    [request] = (await client.call("thread.requests", threadId=parent, includeChildren=True))["requests"]
    assert request["threadId"] == child_id and request["detail"]["command"] == "make deploy"
    await client.call("approval.respond", requestId=request["id"], decision="accept")
    run = await wait_run_terminal(client, parent, sent["runId"], timeout=SLOW)
    assert "delegated task completed: approval: accept" in await answer_of(client, parent, run["id"])


async def test_f9_f12_sigkill_while_a_task_runs(tmp_path, short_dir):
    """F12 + F9: the daemon is SIGKILLed while a delegated task runs: after
    the restart both runs are interrupted (daemon_restart), the parent's
    delegate_task tool node is incomplete, both threads are idle, and the
    task — cut off — owes nothing (seed 003): its result is readable with
    task.result and superseded, never taken in by the parent's next run."""
    daemon = await _start(tmp_path, short_dir)
    try:
        async with Client.connect(daemon.socket) as client:
            parent, sent, child_id, child_run = await start_a_hanging_task(client)
    finally:
        await daemon.kill()
    daemon = await _start(tmp_path, short_dir)
    try:
        async with Client.connect(daemon.socket) as client:
            for thread_id, run_id in ((parent, sent["runId"]), (child_id, child_run)):
                detail = await client.call("run.get", runId=run_id)
                assert (detail["run"]["status"], detail["run"]["reason"]) == ("interrupted", "daemon_restart")
                assert (await client.call("thread.get", threadId=thread_id))["thread"]["status"] == "idle"
            nodes = (await client.call("run.get", runId=sent["runId"]))["nodes"]
            [tool] = [n for n in nodes if n["title"] == "delegate_task"]
            assert tool["status"] == "incomplete"
            assert (await answer_of(client, child_id, child_run)).startswith("history: 0 turns + ")

            answer = await client.call("task.result", taskId=child_id)
            assert answer["status"] == "interrupted" and answer["outcome"] == "interrupted: daemon_restart"
            _, where = await recall(client, parent, "chars")
            assert where == {"chars": "absent"}
            [result] = [t for t in await transfers(client, parent) if t["type"] == "subagent_result"]
            assert result["status"] == "superseded" and result["error"].startswith("cut off by a restart")
    finally:
        assert await daemon.terminate() == 0


async def test_f9_f6_a_native_subagent_with_a_thread_of_its_own_is_a_child_thread(client):
    """F9: a subagent the provider spawns in a native thread of its own (the
    shape of a Codex spawnAgent call) is a child AppThread (subagent,
    createdBy agent) linked to its node by a natively resolved
    subagent_spawn; messaging the child resumes that native thread, and
    forking from the completed node forks it natively (F6)."""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    run = await send_and_wait(client, parent, script(
        {"subagent": {"thread": True, "steps": [{"say": "the word is oscar"}]}},
        {"subagent": {"steps": [{"say": "no thread of my own"}]}},
    ))
    assert run["status"] == "completed", run
    child = await only_child(client, parent)
    assert (child["relationshipToParent"], child["createdBy"], child["provider"]) == ("subagent", "agent", "scripted")
    nodes = [n for n in (await client.call("run.get", runId=run["id"]))["nodes"] if n["kind"] == "subagent"]
    assert len(nodes) == 2, "both are child nodes; only the one with a thread of its own is a child thread"
    [spawn] = await transfers(client, child["id"])
    assert (spawn["type"], spawn["status"], spawn["resolution"]) == ("subagent_spawn", "consumed", "native")
    assert spawn["sourcePoint"]["nodeId"] == nodes[0]["id"] and spawn["handoffId"] is None
    created = await wait_event(client, lambda e: e["type"] == "subagent.thread_created", thread_id=parent)
    assert created["nodeId"] == nodes[0]["id"] and created["payload"]["threadId"] == child["id"]

    # The child is the subagent's own conversation: it resumes natively.
    _, where = await recall(client, child["id"], "oscar", "thread")
    assert where == {"oscar": "native", "thread": "absent"}, "its own turn, not the other subagent's"
    fork = await client.call("thread.fork", threadId=parent, sourcePoint={"type": "node", "nodeId": nodes[0]["id"]})
    [fork_transfer] = await transfers(client, fork["threadId"])
    assert fork_transfer["sourcePoint"]["nativeThreadId"] == spawn["sourcePoint"]["nativeThreadId"]
    _, where = await recall(client, fork["threadId"], "oscar")
    assert where == {"oscar": "native"}
    [fork_transfer] = await transfers(client, fork["threadId"])
    assert (fork_transfer["status"], fork_transfer["resolution"]) == ("consumed", "native")


async def test_f9_a_task_works_in_a_copy_of_the_workspace_or_a_folder_of_its_own(client, tmp_path):
    """F9 ``workspace``: ``fork`` copies the parent's workspace (the task's
    changes stay in the copy), ``new`` gives the task an empty folder."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "base.txt").write_text("from the parent")
    parent = (await client.call("thread.create", title="lead", workspace=str(workspace)))["threadId"]
    for mode in ("fork", "new"):
        run = await send_and_wait(client, parent, delegate(script({"write": {"path": "child.txt", "content": mode}}),
                                                           wait=True, workspace=mode))
        assert "delegated task completed" in await answer_of(client, parent, run["id"])
    children = [t for t in (await client.call("thread.list"))["threads"] if t["parentThreadId"] == parent]
    fork, new = sorted(children, key=lambda t: t["createdAt"])
    assert fork["workspace"] != str(workspace) and new["workspace"] != str(workspace)
    assert (workspace / "base.txt").exists() and not (workspace / "child.txt").exists(), "the parent's files are untouched"
    assert open(f"{fork['workspace']}/base.txt").read() == "from the parent"
    assert open(f"{fork['workspace']}/child.txt").read() == "fork"
    assert not os.path.exists(f"{new['workspace']}/base.txt")
    assert open(f"{new['workspace']}/child.txt").read() == "new"


async def test_f9_the_runtimes_get_agentd_mcp_endpoint_with_the_sessions_token(tmp_path):
    """F9: how Codex (``-c`` TOML overrides and the token in its
    environment), Claude (``--mcp-config`` naming a 0600 file) and the
    scripted agent (its environment) are told where agentd's MCP endpoint
    is, with the session's bearer token — never the token in an argv."""
    import json
    import stat
    import tomllib

    from agentd.actors.providers.agentd_tool import AgentdTool
    from agentd.actors.providers.tool_credentials import ToolCredentials

    credentials = ToolCredentials(tmp_path / "creds")
    credentials.reset()
    tool = AgentdTool(socket="/run/a d/agentd.sock", credentials=credentials)
    assert tool.codex_args("pss_1", preapproved=True) == [] and tool.claude_args("pss_1", preapproved=True) == []
    credentials.mcp_url = "http://127.0.0.1:4711/mcp"
    for session in ("pss_1", "pss_2", "pss_3"):
        await credentials.issue(session)
    token = credentials.token("pss_1")
    assert token is not None and token.startswith("pss_1.")
    args = tool.codex_args("pss_1", preapproved=True)
    assert args[::2] == ["-c"] * (len(args) // 2)
    config: dict = {}
    for override in args[1::2]:
        key, _, value = override.partition("=")
        config[key] = tomllib.loads(f"v = {value}")["v"]
    assert config["mcp_servers.agentd.url"] == "http://127.0.0.1:4711/mcp"
    assert config["mcp_servers.agentd.bearer_token_env_var"] == "AGENTD_MCP_TOKEN"
    assert tool.codex_env("pss_1") == {"AGENTD_MCP_TOKEN": token, "AGENTD_MCP_URL": "http://127.0.0.1:4711/mcp"}
    credentials.mcp_socket = "/run/a d/agentd.sock.mcp"
    assert tool.runtime_env("pss_1") == {"AGENTD_MCP_URL": "http://127.0.0.1:4711/mcp",
                                         "AGENTD_MCP_SOCKET": "/run/a d/agentd.sock.mcp"}
    assert config["mcp_servers.agentd.default_tools_approval_mode"] == "approve"
    assert "mcp_servers.agentd.default_tools_approval_mode" not in " ".join(tool.codex_args("pss_1", preapproved=False))
    assert all(token.split(".")[1] not in arg for arg in args)

    flag, path, *rest = tool.claude_args("pss_2", preapproved=False)
    assert flag == "--mcp-config" and rest == []
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    server = json.loads(open(path).read())["mcpServers"]["agentd"]
    assert server == {"type": "http", "url": "http://127.0.0.1:4711/mcp",
                      "headers": {"Authorization": f"Bearer {credentials.token('pss_2')}"}}
    assert tool.claude_args("pss_2", preapproved=True)[2:] == [
        "--allowedTools", "mcp__agentd__delegate_task,mcp__agentd__task_result,mcp__agentd__task_cancel"]
    env = tool.scripted_env("pss_3")
    assert env["AGENTD_MCP_URL"] == "http://127.0.0.1:4711/mcp" and env["AGENTD_SESSION_ID"] == "pss_3"
    assert env["AGENTD_TOOL_CREDENTIAL"] == str(credentials.path("pss_3"))
    await credentials.revoke("pss_2")
    assert not os.path.exists(path) and credentials.token("pss_2") is None


async def test_f9_a_delegation_that_arrives_before_its_tool_call_node_waits_for_it(daemon, client):
    """F9: the provider reports its tool call on its own pipe while the call
    comes through ``agentd mcp`` and the socket, so the call can arrive
    first. A ``task.delegate`` from the running turn's session that finds no
    tool-call node yet waits for it: the spawn's source point is the node of
    the call, not the run's root node. (The test speaks for the session as
    its ``agentd mcp`` would, with the session's credential from its file.)"""
    parent = (await client.call("thread.create", title="lead"))["threadId"]
    sent = await client.call("thread.message.send", threadId=parent, text=script(
        {"approval": {"kind": "command", "command": "go"}}, {"tool": {"name": "delegate_task", "seconds": 3}}))
    asked = await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=parent)
    request = asked["payload"]["request"]
    delegated: dict = {}
    async with Client.connect(daemon.socket) as other, trio.open_nursery() as nursery:
        async def delegate_from_the_session() -> None:
            credential = (daemon.data_dir / "run" / "tool-credentials" / request["sessionId"]).read_text()
            delegated.update(await other.call("task.delegate", sessionId=request["sessionId"], provider="basic",
                                              credential=credential, instructions=script({"say": "done"})))

        nursery.start_soon(delegate_from_the_session)
        await trio.testing.wait_all_tasks_blocked()  # the delegation is sent
        # Answered after the delegation on the same connection was read and
        # started: it is in flight before the turn reports its tool call.
        await other.call("daemon.status")
        await client.call("approval.respond", requestId=request["id"], decision="accept")
    run = await wait_run_terminal(client, parent, sent["runId"], timeout=SLOW)
    assert run["status"] == "completed", run
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    [tool] = [n for n in nodes if n["kind"] == "tool" and n["title"] == "delegate_task"]
    [spawn] = [t for t in await transfers(client, delegated["threadId"]) if t["type"] == "subagent_spawn"]
    assert spawn["sourcePoint"]["nodeId"] == tool["id"], (spawn["sourcePoint"], run["rootNodeId"])


def task_copies(tmp_path) -> list[str]:
    """The ``fork`` copies made under the data dir's workspaces."""
    where = tmp_path / "data" / "workspaces"
    return sorted(str(p) for p in where.iterdir() if p.name.startswith("task-")) if where.exists() else []


async def test_f9_concurrent_fork_delegations_past_the_fan_out_leave_no_copy(tmp_path, short_dir):
    """Hostile-round issue item 8, SPEC F9: eight concurrent ``task.delegate
    {workspace: fork}`` against a fan-out of 3. The slot is taken before the
    copy, so exactly 3 pass (concurrent calls cannot all pass the check
    before any is counted), the other 5 are ``limit_exceeded`` — and only the
    3 tasks' copies exist: a refused delegation copies nothing."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "big.bin").write_bytes(os.urandom(256 * 1024))
    daemon = await _start(tmp_path, short_dir, fanout=3)
    try:
        async with Client.connect(daemon.socket) as client:
            parent = (await client.call("thread.create", title="lead", workspace=str(workspace)))["threadId"]
            made: list[dict] = []
            refused: list[LimitExceeded] = []

            async def one() -> None:
                try:
                    made.append(await client.call("task.delegate", parentThreadId=parent, provider="basic",
                                                  workspace="fork", instructions=script({"hang": True})))
                except LimitExceeded as exc:
                    refused.append(exc)

            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(one)
            assert (len(made), len(refused)) == (3, 5)
            assert {exc.data["limit"] for exc in refused} == {"delegate_max_fanout"}
            workspaces = sorted([(await client.call("thread.get", threadId=m["taskId"]))["thread"]["workspace"]
                                 for m in made])
            assert task_copies(tmp_path) == workspaces, "a copy for every task, and none for a refusal"
            await client.call("thread.stop", threadId=parent)
    finally:
        assert await daemon.terminate() == 0


async def test_f9_a_fork_larger_than_the_copy_limit_is_refused_and_nothing_is_left(tmp_path, short_dir):
    """Hostile-round issue item 8, SPEC F9: ``[daemon] delegate_max_copy_bytes``
    bounds a ``fork`` copy. A workspace over it is ``limit_exceeded`` with
    the size named, no task is made, no partial copy is left; a workspace
    under it is copied."""
    workspace = tmp_path / "project"
    (workspace / "deep").mkdir(parents=True)
    (workspace / "small.txt").write_text("small")
    (workspace / "deep" / "big.bin").write_bytes(b"x" * 300_000)
    daemon = await _start(tmp_path, short_dir, extra="delegate_max_copy_bytes = 200000")
    try:
        async with Client.connect(daemon.socket) as client:
            parent = (await client.call("thread.create", title="lead", workspace=str(workspace)))["threadId"]
            with pytest.raises(LimitExceeded) as info:
                await client.call("task.delegate", parentThreadId=parent, provider="basic", workspace="fork",
                                  instructions=script({"say": "never"}))
            assert info.value.data["limit"] == "delegate_max_copy_bytes" and info.value.data["value"] == 200_000
            assert "delegate_max_copy_bytes" in str(info.value) and "200000" in str(info.value)
            assert task_copies(tmp_path) == []
            assert [t for t in (await client.call("thread.list"))["threads"] if t["parentThreadId"] == parent] == []

            (workspace / "deep" / "big.bin").unlink()
            made = await client.call("task.delegate", parentThreadId=parent, provider="basic", workspace="fork",
                                     instructions=script({"say": "copied"}))
            task = (await client.call("thread.get", threadId=made["taskId"]))["thread"]
            assert task_copies(tmp_path) == [task["workspace"]]
            assert open(f"{task['workspace']}/small.txt").read() == "small"
            # Item 9: a task that completed gives its session back at once.
            await session_stopped(client, made["taskId"], "task_ended")
    finally:
        assert await daemon.terminate() == 0


async def session_stopped(client: Client, thread_id: str, reason: str) -> dict:
    """The ``session.stopped`` of ``thread_id``'s provider session with ``reason``."""
    return await wait_event(client, lambda e: e["type"] == "session.stopped"
                            and e["payload"]["session"]["reason"] == reason, thread_id=thread_id)


async def test_f19_f9_max_sessions_bounds_agents_daemon_wide(tmp_path, short_dir):
    """Hostile-round issue item 9, SPEC F19 + F9 + F10: ``[daemon] max_sessions``
    bounds the provider sessions of the whole daemon. With 2 working, a
    delegated task is refused at ``task.delegate`` and a message that needs
    a new session is refused at ``thread.message.send`` (``limit_exceeded``,
    nothing stored). A task's session is stopped as soon as its run ends
    (here through the parent's Stop), and an idle session is stopped to make
    room before anything is refused."""
    daemon = await _start(tmp_path, short_dir, extra="max_sessions = 2")
    try:
        async with Client.connect(daemon.socket) as client:
            a = (await client.call("thread.create", title="a"))["threadId"]
            a_run = (await client.call("thread.message.send", threadId=a, text=script({"hang": True})))["runId"]
            task = await client.call("task.delegate", parentThreadId=a, provider="basic",
                                     instructions=script({"say": "working"}, {"hang": True}))
            await wait_event(client, lambda e: e["type"] == "message.completed", thread_id=task["taskId"])

            c = (await client.call("thread.create", title="c"))["threadId"]
            with pytest.raises(LimitExceeded) as refused:
                await client.call("thread.message.send", threadId=c, text=script({"say": "hello"}))
            assert (refused.value.data["limit"], refused.value.data["value"]) == ("max_sessions", 2)
            assert "[daemon] max_sessions" in str(refused.value)
            assert sorted(refused.value.data["threadIds"]) == sorted([a, task["taskId"]])
            assert (await client.call("thread.get", threadId=c))["runs"] == [], "nothing stored"
            with pytest.raises(LimitExceeded) as refused:
                await client.call("task.delegate", parentThreadId=a, provider="basic", instructions="more")
            assert refused.value.data["limit"] == "max_sessions"
            assert (await only_child(client, a))["id"] == task["taskId"], "no second task"

            # The parent's Stop ends the task's run: its session is released at once.
            await client.call("thread.stop", threadId=a)
            assert (await wait_run_terminal(client, task["taskId"], task["runId"]))["status"] == "interrupted"
            await session_stopped(client, task["taskId"], "task_ended")
            await wait_run_terminal(client, a, a_run)

            # a's session is idle now: it makes room for c's, which is no work refused.
            b = (await client.call("thread.create", title="b"))["threadId"]
            b_run = (await client.call("thread.message.send", threadId=b, text=script({"hang": True})))["runId"]
            run = await send_and_wait(client, c, script({"say": "hello"}))
            assert run["status"] == "completed", run
            await session_stopped(client, a, "session_limit")
            live = {s["threadId"] for s in (await client.call("daemon.status"))["sessions"]}
            assert live == {b, c}
            await client.call("thread.stop", threadId=b)
            await wait_run_terminal(client, b, b_run)
    finally:
        assert await daemon.terminate() == 0


async def test_f19_concurrent_messages_cannot_all_pass_max_sessions(tmp_path, short_dir):
    """Hostile-round issue item 9, SPEC F19: eight messages sent at once to
    eight idle threads under ``max_sessions = 3``: the place is taken in the
    same step as the check, so exactly 3 runs start and 5 messages are
    ``limit_exceeded`` with nothing stored."""
    daemon = await _start(tmp_path, short_dir, extra="max_sessions = 3")
    try:
        async with Client.connect(daemon.socket) as client:
            threads = [(await client.call("thread.create", title=f"t{i}"))["threadId"] for i in range(8)]
            started: dict[str, str] = {}
            refused: list[str] = []

            async def send(thread_id: str) -> None:
                try:
                    sent = await client.call("thread.message.send", threadId=thread_id, text=script({"hang": True}))
                    started[thread_id] = sent["runId"]
                except LimitExceeded as exc:
                    assert exc.data["limit"] == "max_sessions"
                    refused.append(thread_id)

            async with trio.open_nursery() as nursery:
                for thread_id in threads:
                    nursery.start_soon(send, thread_id)
            assert (len(started), len(refused)) == (3, 5)
            for thread_id in refused:
                assert (await client.call("thread.get", threadId=thread_id))["runs"] == []
            for thread_id, run_id in started.items():
                await client.call("thread.stop", threadId=thread_id)
                await wait_run_terminal(client, thread_id, run_id)
    finally:
        assert await daemon.terminate() == 0


async def test_f9_a_copy_that_grows_past_the_limit_while_copied_leaves_nothing(tmp_path, monkeypatch):
    """Hostile-round issue item 8, SPEC F9: files may grow between the
    measure and the copy; the copy counts again while it writes and, past
    the limit, removes what it wrote (``limit_exceeded``, no partial copy)."""
    from agentd.supervisor import workspace_copy

    source = tmp_path / "project"
    for name in ("a", "b", "c"):
        (source / name).mkdir(parents=True)
        (source / name / "file.bin").write_bytes(b"x" * 1000)
    monkeypatch.setattr(workspace_copy, "measure", lambda _source, _limit: 0)  # as if it had grown since
    target = tmp_path / "copy"
    with pytest.raises(LimitExceeded) as info:
        await workspace_copy.copy_workspace(str(source), target, limit=2500)
    assert info.value.data["limit"] == "delegate_max_copy_bytes" and info.value.data["size"] > 2500
    assert not target.exists()
    assert await workspace_copy.copy_workspace(str(source), target, limit=3000) == 3000
    assert (target / "c" / "file.bin").read_bytes() == b"x" * 1000


async def test_f9_f10_cancelling_a_task_stops_it_and_its_own_tasks_depth_first(client):
    """Issue 23 item 3: ``task.cancel`` interrupts the task's run and stops
    the task it delegated in turn; ``task.result`` then says how each
    ended. The parent's own run goes on."""
    parent = (await client.call("thread.create", title="parent"))["threadId"]
    parent_run = (await client.call("thread.message.send", threadId=parent, text=script({"hang": True})))["runId"]
    task = await client.call("task.delegate", parentThreadId=parent, provider="basic",
                             instructions=script({"say": "on it"}, {"hang": True}))
    grandchild = await client.call("task.delegate", parentThreadId=task["taskId"], provider="basic",
                                   instructions=script({"say": "below"}, {"hang": True}))
    for thread_id in (task["taskId"], grandchild["taskId"]):
        await wait_event(client, lambda e: e["type"] == "message.completed", thread_id=thread_id, timeout=SLOW)

    cancelled = await client.call("task.cancel", taskId=task["taskId"])
    assert (cancelled["taskId"], cancelled["interruptedRunId"], cancelled["cancelledRunIds"]) == (
        task["taskId"], task["runId"], [])
    for made in (task, grandchild):
        assert (await wait_run_terminal(client, made["taskId"], made["runId"], timeout=SLOW))["status"] == "interrupted"
    result = await client.call("task.result", taskId=task["taskId"])
    assert result["status"] == "interrupted" and result["outcome"] == "interrupted: task_cancelled"
    below = await client.call("task.result", taskId=grandchild["taskId"])
    assert below["status"] == "interrupted", "the task's own task stopped with it"
    assert (await client.call("run.get", runId=parent_run))["run"]["status"] == "running", "the parent goes on"

    with pytest.raises(AgentdError) as refused:
        await client.call("task.cancel", taskId=parent)
    assert refused.value.kind == "not_found"
    await client.call("run.interrupt", runId=parent_run)
    await wait_run_terminal(client, parent, parent_run)


async def test_f9_agentd_mcp_offers_task_cancel_beside_delegate_and_result(client, daemon):
    """Issue 23 item 3: the official MCP SDK's client sees agentd's three
    tools, and ``task_cancel`` cancels a task of the thread ``agentd mcp``
    speaks for."""
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    parent = (await client.call("thread.create", title="parent"))["threadId"]
    task = await client.call("task.delegate", parentThreadId=parent, provider="basic",
                             instructions=script({"say": "on it"}, {"hang": True}))
    await wait_event(client, lambda e: e["type"] == "message.completed", thread_id=task["taskId"], timeout=SLOW)
    server = StdioServerParameters(command=sys.executable, args=["-m", "agentd", "mcp", "--thread", parent],
                                   env={**os.environ, "AGENTD_SOCKET": str(daemon.socket)})
    with trio.fail_after(SLOW):
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = [tool.name for tool in (await session.list_tools()).tools]
            assert names == ["delegate_task", "task_result", "task_cancel"]
            answer = await session.call_tool("task_cancel", {"taskId": task["taskId"]})
    assert not answer.is_error, answer
    assert answer.structured_content["interruptedRunId"] == task["runId"]
    assert (await wait_run_terminal(client, task["taskId"], task["runId"], timeout=SLOW))["status"] == "interrupted"

"""Delegation between the real ACP agents and native Codex through agentd's
tool, offline (issue 25: "delegation to and from Codex through agentd's
tool"; SPEC F9, F15), through a daemon's socket as a client.

For each pinned ACP agent — Claude through ``claude-agent-acp`` and Codex
through ``codex-acp`` (``tests/integration/acp_worlds.py``) — both ways:

* the ACP thread's model calls agentd's ``delegate_task`` with ``provider =
  "codex"``: the child is a ``delegated_task`` thread on native Codex (``codex
  app-server``), whose model request holds the task's handoff and
  instructions, and whose answer is the tool's result in the ACP turn;
* a native Codex thread's model calls it with the ACP instance: the child
  is an ACP session whose model request holds the handoff and instructions,
  and its answer is the tool's output in Codex's next model request.

What each runtime really sent is read from the fake model servers' request
logs. One daemon and one set of worlds for the module (``module_paths``):
each runtime has its own fake model (and its own log) inside its own
loopback-only network namespace where ``unshare -rn`` works. Every
delegation asks its approval (``agentd_tool = "ask"``, the default), which
the client accepts. A test is skipped when a runtime it drives is not
installed (``npm ci --prefix tests/integration/runtimes``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from scripts.offline import claude as claude_world
from scripts.offline import codex as codex_world
from scripts.offline.world import toml_value
from tests.helpers import run_accepting
from tests.integration.acp_worlds import (
    CODEX_ACP,
    SKIP_REASON,
    ClaudeAcpWorld,
    CodexAcpWorld,
    claude_acp_available,
    codex_acp_available,
)

HAVE_CODEX = codex_world.codex_binary() is not None
HAVE_CLAUDE_ACP = claude_acp_available()
HAVE_CODEX_ACP = codex_acp_available()

needs_claude_acp = pytest.mark.skipif(not (HAVE_CODEX and HAVE_CLAUDE_ACP),
                                      reason=SKIP_REASON if not HAVE_CLAUDE_ACP else codex_world.SKIP_REASON)
needs_codex_acp = pytest.mark.skipif(not HAVE_CODEX_ACP, reason=SKIP_REASON)
pytestmark = pytest.mark.skipif(not HAVE_CODEX, reason=codex_world.SKIP_REASON)

#: one workspace per test (codex-acp trusts each in its config.toml)
WORKSPACES = ("claude_to_codex", "codex_to_claude", "codex_acp_to_codex", "codex_to_codex_acp")


class Worlds:
    """The module's fake model worlds: native Codex always, each ACP agent where installed."""

    def __init__(self, root: Path, workspaces: dict[str, Path]) -> None:
        self.codex = codex_world.make_world(root / "codex")
        self.claude_acp = ClaudeAcpWorld(root / "claude_acp") if HAVE_CLAUDE_ACP else None
        self.codex_acp = None
        if HAVE_CODEX_ACP:
            self.codex_acp = CodexAcpWorld(root / "codex_acp", workspaces["codex_acp_to_codex"])
            with open(self.codex_acp.codex.codex_home / "config.toml", "a") as f:
                f.writelines(f'\n[projects."{path}"]\ntrust_level = "trusted"\n'
                             for name, path in workspaces.items() if name != "codex_acp_to_codex")

    def config_toml(self) -> str:
        parts = ["[daemon]\ninterrupt_grace = 30\n", self.codex.provider_toml("codex")]
        if self.claude_acp is not None:
            parts.append(self.claude_acp.provider_toml("claude_acp"))
        if self.codex_acp is not None:
            table = {"kind": "acp", "binary": str(CODEX_ACP), "env": self.codex_acp.env(),
                     "wrapper": list(self.codex_acp.codex.wrapper)}
            parts.append("[providers.codex_acp]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items() if v))
        return "\n".join(parts)

    def close(self) -> None:
        for world in (self.codex, self.claude_acp, self.codex_acp):
            if world is not None:
                world.close()


@pytest.fixture(scope="module")
def delegation_agentd(module_paths):
    """The module's daemon (providers ``codex``, ``claude_acp``, ``codex_acp``), its worlds and workspaces."""
    from tests.helpers import daemon_for_module

    data, socket = module_paths
    root = data.parent / "world"
    workspaces = {name: root / "ws" / name for name in WORKSPACES}
    for path in workspaces.values():
        path.mkdir(parents=True)
    worlds = Worlds(root, workspaces)
    config = root / "config.toml"
    config.write_text(worlds.config_toml())
    try:
        with daemon_for_module(start_daemon, data, socket, config=config) as daemon:
            yield daemon, worlds, workspaces
    finally:
        worlds.close()


@pytest.fixture
async def client(delegation_agentd):
    async with Client.connect(delegation_agentd[0].socket) as connected:
        yield connected


@pytest.fixture
def worlds(delegation_agentd) -> Worlds:
    return delegation_agentd[1]


@pytest.fixture
def workspaces(delegation_agentd) -> dict[str, Path]:
    return delegation_agentd[2]


async def delegation(client: Client, workspace: Path, provider: str, to: str, instructions: str) -> dict[str, Any]:
    """A ``provider`` thread in ``workspace`` whose model delegates
    ``instructions`` to ``to`` (the fakes' ``DELEGATE_TO`` keyword), run to
    its end with its approvals accepted: what a test checks of it."""
    parent = (await client.call("thread.create", provider=provider, workspace=str(workspace)))["threadId"]
    run, accepted = await run_accepting(client, parent, f"DELEGATE_TO:{to}: {instructions}")
    assert run["status"] == "completed", run
    assert len(accepted) == 1, accepted  # the delegation's own approval (agentd_tool = "ask")
    (child,) = [t for t in (await client.call("thread.list"))["threads"] if t.get("parentThreadId") == parent]
    assert (child["relationshipToParent"], child["createdBy"], child["provider"]) == ("delegated_task", "agent", to), child
    (child_run,) = (await client.call("thread.get", threadId=child["id"]))["runs"]
    assert (child_run["status"], child_run["provider"]) == ("completed", to), child_run
    spawn, result = (await client.call("thread.transfers", threadId=child["id"]))["transfers"]
    assert (spawn["type"], spawn["status"]) == ("subagent_spawn", "consumed"), spawn
    assert (result["type"], result["status"], result["runId"]) == ("subagent_result", "consumed", run["id"]), result
    # The spawn's source is the parent's tool node of the call.
    nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
    (tool,) = [n for n in nodes if n["id"] == spawn["sourcePoint"]["nodeId"]]
    assert "delegate_task" in tool["title"] and tool["status"] == "completed", tool
    messages = (await client.call("thread.get", threadId=parent))["messages"]
    child_messages = (await client.call("thread.get", threadId=child["id"]))["messages"]
    return {
        "parent": parent, "child": child, "approval": accepted[0],
        "task": (await client.call("handoff.get", handoffId=spawn["handoffId"]))["handoff"]["text"],
        "result": (await client.call("handoff.get", handoffId=result["handoffId"]))["handoff"]["text"],
        "answer": [m["text"] for m in messages if m["role"] == "assistant"][-1],
        "child_answer": [m["text"] for m in child_messages if m["role"] == "assistant"][-1],
    }


def codex_requests_with(world: Any, text: str) -> list[dict[str, Any]]:
    """The Responses requests (native Codex or codex-acp) whose last user text ends with ``text``."""
    return [body for body in world.model_requests() if (texts := codex_world.user_texts(body)) and texts[-1].endswith(text)]


def tool_payload(text: str) -> dict[str, Any]:
    """agentd's ``delegate_task`` answer in a tool output's text (Codex puts
    ``Wall time: …`` and ``Output:`` lines before it)."""
    payload, _ = json.JSONDecoder().raw_decode(text, text.index("{"))
    return payload


def codex_tool_output(world: Any, call_text: str) -> dict[str, Any]:
    """agentd's tool answer in the ``function_call_output`` of the request
    after the turn that said ``call_text`` (native Codex or codex-acp)."""
    outputs = [item for body in world.model_requests() if call_text in " ".join(codex_world.user_texts(body))
               for item in body["input"] if item.get("type") == "function_call_output"]
    assert outputs, "Codex sent the tool's output to its model"
    output = outputs[-1]["output"]
    return tool_payload(output if isinstance(output, str) else json.dumps(output))


# -- claude-agent-acp ------------------------------------------------------------------------


@needs_claude_acp
async def test_a_claude_agent_acp_thread_delegates_to_native_codex(client, worlds, workspaces):
    """claude-agent-acp → Codex: Claude's (fake) model loads agentd's
    ``delegate_task`` with ``ToolSearch`` and calls it with ``provider =
    "codex"``; the permission claude-agent-acp asks for it is the approval.
    The Codex child's model request is the task handoff and the
    instructions; its answer is the tool's result in Claude's next model
    request and in the ACP turn's answer."""
    instructions = "count the files named alpha"
    done = await delegation(client, workspaces["claude_to_codex"], "claude_acp", "codex", instructions)
    assert "delegate_task" in str(done["approval"]["detail"].get("title")), done["approval"]

    (codex_request,) = codex_requests_with(worlds.codex, instructions)
    assert codex_world.user_texts(codex_request) == [done["task"] + "\n" + instructions]
    assert done["child_answer"].startswith("You said: ") and instructions in done["child_answer"]

    # What Claude's model was sent after the tool: the task's result, with the child's answer.
    said = f"DELEGATE_TO:codex: {instructions}"
    blocks = [block for body in worlds.claude_acp.model_requests() if said in claude_world.user_texts(body)
              for message in body["messages"] if isinstance(message["content"], list) for block in message["content"]]
    assert [b["name"] for b in blocks if b.get("type") == "tool_use"][-2:] == ["ToolSearch", "mcp__agentd__delegate_task"]
    results = [block for block in blocks if block.get("type") == "tool_result"]
    content = results[-1]["content"]
    payload = tool_payload(content[0]["text"] if isinstance(content, list) else content)
    assert (payload["status"], payload["finalAnswer"], payload["text"]) == ("completed", done["child_answer"], done["result"])
    assert done["answer"].startswith("The delegated task answered: {") and done["child"]["id"] in done["answer"]


@needs_claude_acp
async def test_native_codex_delegates_to_a_claude_agent_acp_thread(client, worlds, workspaces):
    """Codex → claude-agent-acp: Codex's model calls ``delegate_task`` with
    ``provider = "claude_acp"`` (its MCP elicitation is the approval); the
    child is an ACP session whose model request holds the handoff and the
    instructions, and its answer is the tool's output in Codex's next model
    request."""
    instructions = "count the files named bravo"
    done = await delegation(client, workspaces["codex_to_claude"], "codex", "claude_acp", instructions)
    assert done["approval"]["detail"]["server"] == "agentd", done["approval"]

    # The first request with the instructions is the turn's (Claude may ask
    # its model for a prompt suggestion after the turn, with the turn in it).
    texts = next(texts for texts in map(claude_world.user_texts, worlds.claude_acp.model_requests())
                 if instructions in " ".join(texts))
    assert "\n".join(texts) == done["task"] + "\n" + instructions, texts
    assert done["child_answer"] == f"Reply 1: {instructions}"

    payload = codex_tool_output(worlds.codex, f"DELEGATE_TO:claude_acp: {instructions}")
    assert (payload["status"], payload["finalAnswer"], payload["text"]) == ("completed", done["child_answer"], done["result"])
    assert done["answer"].startswith("Tool finished:")


# -- codex-acp -------------------------------------------------------------------------------


@needs_codex_acp
async def test_a_codex_acp_thread_delegates_to_native_codex(client, worlds, workspaces):
    """codex-acp → Codex: the codex-acp session's model calls agentd's tool
    (from ``session/new``'s ``mcpServers``) with ``provider = "codex"``; its
    MCP approval is the approval. The native Codex child's model request is
    the handoff and the instructions; its answer is the tool's output in
    codex-acp's next model request."""
    instructions = "count the files named charlie"
    done = await delegation(client, workspaces["codex_acp_to_codex"], "codex_acp", "codex", instructions)
    assert done["approval"]["detail"]["title"] == "Approve MCP tool call", done["approval"]

    (codex_request,) = codex_requests_with(worlds.codex, instructions)
    assert codex_world.user_texts(codex_request) == [done["task"] + "\n" + instructions]
    assert done["child_answer"].startswith("You said: ") and instructions in done["child_answer"]

    payload = codex_tool_output(worlds.codex_acp, f"DELEGATE_TO:codex: {instructions}")
    assert (payload["status"], payload["finalAnswer"], payload["text"]) == ("completed", done["child_answer"], done["result"])
    assert done["answer"].startswith("Tool finished:")


@needs_codex_acp
async def test_native_codex_delegates_to_a_codex_acp_thread(client, worlds, workspaces):
    """Codex → codex-acp: the child is a codex-acp session (its own world's
    fake) whose model request holds the handoff and the instructions; its
    answer is the tool's output in native Codex's next model request."""
    instructions = "count the files named delta"
    done = await delegation(client, workspaces["codex_to_codex_acp"], "codex", "codex_acp", instructions)
    assert done["approval"]["detail"]["server"] == "agentd", done["approval"]

    (child_request,) = codex_requests_with(worlds.codex_acp, instructions)
    assert codex_world.user_texts(child_request)[-1] == done["task"] + "\n" + instructions
    assert done["child_answer"].startswith("You said: ") and instructions in done["child_answer"]

    payload = codex_tool_output(worlds.codex, f"DELEGATE_TO:codex_acp: {instructions}")
    assert (payload["status"], payload["finalAnswer"], payload["text"]) == ("completed", done["child_answer"], done["result"])
    assert done["answer"].startswith("Tool finished:")

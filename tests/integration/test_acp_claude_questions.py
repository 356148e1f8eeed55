"""Claude's own question tool through the real claude-agent-acp, offline (issue 25, SPEC F15, F16).

The pinned ``@agentclientprotocol/claude-agent-acp`` 0.101.0 gets Claude's
``AskUserQuestion`` tool use as a permission check of the Claude Agent SDK
and, since agentd advertises ``clientCapabilities.elicitation.form``, asks it
as an ACP form elicitation (``elicitation/create``): one ``question_0``
field, a ``oneOf`` of the options (its ``const`` the option's label, its
``description`` the option's), the question as the form's ``message``, the
question's header as the field's title, and an optional free-text
``question_0_custom`` field ("Other"). agentd makes that a ``user_input``
request; the person's answer goes back as the form's content, the agent
folds it into the tool's ``answers``, and Claude sends it to the model as the
tool's result.

The fake Anthropic model asks on ``ASK_USER`` (``scripts/offline/fake_anthropic.py``)
and answers ``The person answered: <the tool's result>``. Skipped when the
pinned runtimes are not installed.
"""

from __future__ import annotations

import pytest

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from scripts.offline import fake_anthropic
from tests.helpers import wait_event, wait_run_terminal
from tests.integration.acp_worlds import SKIP_REASON, ClaudeAcpWorld, claude_acp_available

pytestmark = pytest.mark.skipif(not claude_acp_available(), reason=SKIP_REASON)


@pytest.fixture
def world(tmp_path):
    w = ClaudeAcpWorld(tmp_path / "claude")
    yield w
    w.close()


async def test_ask_user_question_is_a_question_and_the_answer_reaches_the_model(world, tmp_path, short_dir):
    config = tmp_path / "config.toml"
    config.write_text('[daemon]\ndefault_provider = "claude_acp"\n\n' + world.provider_toml())
    workspace = tmp_path / "ws"
    workspace.mkdir()
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", provider="claude_acp", workspace=str(workspace)))["threadId"]
            sent = await client.call("thread.message.send", threadId=thread_id, text="ASK_USER please")
            asked = await wait_event(client, lambda e: e["type"] == "user_input.requested", thread_id=thread_id, timeout=90)
            request = asked["payload"]["request"]
            assert request["kind"] == "user_input" and request["runId"] == sent["runId"]
            assert request["detail"]["method"] == "elicitation/create"
            choice, other = request["detail"]["questions"]
            assert choice["question"] == fake_anthropic.ASK_QUESTION and choice["header"] == "Color"
            assert choice["options"] == ["Red", "Blue"]
            assert choice["optionDetails"] == [{"label": "Red", "description": "Warm and loud."},
                                               {"label": "Blue", "description": "Calm."}]
            assert choice["optional"] is True, "the agent marks nothing required (the person may skip)"
            assert other["header"] == "Other" and "options" not in other and other["optional"] is True

            await client.call("user-input.respond", requestId=request["id"],
                              answers={choice["id"]: "Blue", other["id"]: ""})
            run = await wait_run_terminal(client, thread_id, sent["runId"], timeout=90)
            assert run["status"] == "completed", run
            nodes = (await client.call("run.get", runId=run["id"]))["nodes"]
            (question,) = [n for n in nodes if n["kind"] == "user_input_request"]
            (tool,) = [n for n in nodes if n["id"] == question["parentNodeId"]]
            # The tool call the question is under: kind "other" (a tool node), "Asking for your
            # input", then titled with the question; its output is the tool's result.
            assert (tool["kind"], tool["status"], tool["detail"]["title"]) == ("tool", "completed", fake_anthropic.ASK_QUESTION)
            assert question["status"] == "completed" and '="Blue"' in tool["detail"]["output"]
            answer = [m["text"] for m in (await client.call("thread.get", threadId=thread_id))["messages"]
                      if m["role"] == "assistant"][-1]
            assert answer.startswith("The person answered:") and f'"{fake_anthropic.ASK_QUESTION}"="Blue"' in answer, answer
    finally:
        assert await daemon.terminate() == 0

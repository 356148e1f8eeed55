"""The provider's history mode (issue 23 item 6; SPEC F6, F14; seed 002:
"check historyMode before rollback; on legacy history fail explicitly, since
Codex cannot roll it back"; same for fork).

``old`` is a scripted instance started with ``--history-mode legacy``: its
threads report ``historyMode: legacy`` as a Codex thread made under the
legacy history contract does, and it refuses ``thread/rollback`` and
``thread/fork`` on them, as Codex would."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError
from tests.helpers import configured_module_daemon, script, send_and_wait, stored_events, wait_run_terminal

CONFIG = """
[providers.old]
kind = "scripted"
args = ["--history-mode", "legacy"]
"""


@pytest.fixture(scope="module")
def shared_daemon(module_paths):
    """One daemon for the module (issue 28 item 13): each test works on
    threads of its own."""
    with configured_module_daemon(module_paths, CONFIG) as daemon:
        yield daemon


@pytest.fixture
async def client(shared_daemon):
    async with Client.connect(shared_daemon.socket) as c:
        yield c


async def _thread_with_two_runs(client: Client, provider: str, tmp_path: Path) -> tuple[str, list[dict]]:
    workspace = tmp_path / f"ws-{provider}"
    workspace.mkdir()
    thread = (await client.call("thread.create", title=provider, provider=provider, workspace=str(workspace)))["threadId"]
    for number in (1, 2):
        run = await send_and_wait(client, thread, script({"write": {"path": "f.txt", "content": f"run {number}"}}))
        assert run["status"] == "completed", run
    return thread, (await client.call("thread.get", threadId=thread))["runs"]


async def _provider_threads(client: Client, thread_id: str) -> list[dict]:
    return [e["payload"]["providerThread"] for e in await stored_events(client, thread_id)
            if e["type"] == "provider_thread.created"]


async def test_f14_a_legacy_history_is_not_rolled_back_unless_rebuilding_is_allowed(client, tmp_path):
    """rollback.toRun on a thread whose provider thread has a legacy history
    is unsupported, before anything changes; with allowRebuild the files go
    back and the agent's memory is rebuilt."""
    thread, runs = await _thread_with_two_runs(client, "old", tmp_path)
    [pt] = await _provider_threads(client, thread)
    assert pt["historyMode"] == "legacy"

    with pytest.raises(AgentdError) as refused:
        await client.call("rollback.toRun", threadId=thread, targetOrdinal=1)
    assert refused.value.kind == "unsupported"
    assert refused.value.data["historyMode"] == "legacy" and refused.value.data["providerThreadId"] == pt["id"]
    assert "allowRebuild" in str(refused.value)
    assert (tmp_path / "ws-old" / "f.txt").read_text() == "run 2", "nothing changed"
    assert [r["status"] for r in (await client.call("thread.get", threadId=thread))["runs"]] == ["completed"] * 2
    kinds = [c["kind"] for c in (await client.call("checkpoint.list", threadId=thread))["checkpoints"]]
    assert "pre_rollback" not in kinds

    back = await client.call("rollback.toRun", threadId=thread, targetOrdinal=1, allowRebuild=True)
    assert back["providerRollback"] == "rebuilt" and "legacy history" in back["providerRollbackReason"]
    assert back["retiredProviderThreadIds"] == [pt["id"]]
    assert (tmp_path / "ws-old" / "f.txt").read_text() == "run 1"
    assert back["rolledBackRunIds"] == [runs[1]["id"]]


async def test_f14_a_paginated_history_still_rolls_back_natively(client, tmp_path):
    """The default scripted instance reports paginated: the same rollback is native."""
    thread, _runs = await _thread_with_two_runs(client, "scripted", tmp_path)
    [pt] = await _provider_threads(client, thread)
    assert pt["historyMode"] == "paginated"
    back = await client.call("rollback.toRun", threadId=thread, targetOrdinal=1)
    assert back["providerRollback"] == "native"


async def test_f6_a_fork_of_a_legacy_history_is_portable_and_says_why(client, tmp_path):
    """A fork at run 1 of a legacy thread is not forked natively (no orphan
    native fork is made): it resolves portably, and its reason names the
    legacy history."""
    thread, runs = await _thread_with_two_runs(client, "old", tmp_path)
    forked = await client.call("thread.fork", threadId=thread, sourcePoint={"type": "run", "runId": runs[0]["id"]})
    sent = await client.call("thread.message.send", threadId=forked["threadId"], text="go on from run 1")
    run = await wait_run_terminal(client, forked["threadId"], sent["runId"])
    assert run["status"] == "completed", run
    [transfer] = [t for t in (await client.call("thread.transfers", threadId=forked["threadId"]))["transfers"]
                  if t["type"] == "fork"]
    assert transfer["status"] == "consumed" and transfer["resolution"] == "portable"
    resolved = [e for e in await stored_events(client, forked["threadId"]) if e["type"] == "run.context_resolved"]
    assert any("legacy history" in (e["payload"].get("reason") or "") for e in resolved), resolved

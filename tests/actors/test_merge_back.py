"""Merge-back through the socket (SPEC F7): a fork's work comes home with a
message on the thread it was forked from, as a stored ``delta`` handoff —
proved with the scripted agent's ``recall`` oracle (what the source's agent
sees, and where)."""

from __future__ import annotations

import pytest

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError
from tests.helpers import script, send_and_wait, wait_event
from tests.actors.test_lineage import client, recall, say, shared_daemon, transfers  # noqa: F401 - the fixtures

NOISY_FORK_RUN = script(
    {"say": "narration: thinking about zulu first"},
    {"tool": {"name": "pytest -q", "seconds": 0}},
    {"write": {"path": "notes.txt", "content": "found it\n"}},
    {"say": "conclusion: the answer is kilo"},
)


async def merge_transfers(client: Client, thread_id: str) -> list[dict]:
    return [t for t in await transfers(client, thread_id) if t["type"] == "merge_back"]


async def handoff_of(client: Client, transfer: dict) -> dict:
    return (await client.call("handoff.get", handoffId=transfer["handoffId"]))["handoff"]


async def test_merge_back_brings_the_forks_conclusions_and_again_only_whats_new(client):
    """F7: the source's next run sees the fork's conclusions in ``context`` —
    not its narration, nor the messages that asked for them; merging again
    carries only the fork's runs since the last merge."""
    source = (await client.call("thread.create", title="main"))["threadId"]
    await send_and_wait(client, source, say("alpha"))
    forked = await client.call("thread.fork", threadId=source)
    fork = forked["threadId"]
    first = await send_and_wait(client, fork, NOISY_FORK_RUN)
    second = await send_and_wait(client, fork, say("lima"))
    assert (first["status"], second["status"]) == ("completed", "completed")

    seen = await recall(client, source, "alpha", "kilo", "lima", "zulu", mergeBack={"forkThreadId": fork})
    assert seen == {"alpha": "native", "kilo": "context", "lima": "context", "zulu": "absent"}

    (merge,) = await merge_transfers(client, source)
    (fork_transfer,) = [t for t in await transfers(client, fork) if t["type"] == "fork"]
    assert (merge["status"], merge["resolution"], merge["sourceThreadId"], merge["targetThreadId"]) == (
        "consumed", "portable", fork, source)
    assert merge["basePoint"] == fork_transfer["sourcePoint"], "the first merge starts at the fork point"
    assert merge["sourcePoint"]["runId"] == second["id"] and merge["sourcePoint"]["threadId"] == fork
    assert merge["sourceRunIds"] == [first["id"], second["id"]]
    assert merge in await merge_transfers(client, fork), "listed under the fork too"
    handoff = await handoff_of(client, merge)
    assert (handoff["strategy"], handoff["transferId"], handoff["threadId"]) == ("delta", merge["id"], source)
    assert handoff["coveredRunIds"] == [first["id"], second["id"]]
    text = handoff["text"]
    assert text.startswith("[agentd context handoff: delta (merge-back)]")
    assert "Conclusion: conclusion: the answer is kilo" in text and "Commands and tests run: pytest -q" in text
    assert "notes.txt (added, +1 −0)" in text and "checkpoint diff" in text, "files from the fork's checkpoint diff"
    assert "zulu" not in text and "@script" not in text, "no narration, no transcript"
    assert handoff["size"] == len(text) <= handoff["cap"]
    merged_run = (await client.call("thread.get", threadId=source))["runs"][-1]
    resolved = await wait_event(client, lambda e: e["type"] == "run.context_resolved" and e["runId"] == merged_run["id"],
                                thread_id=source)
    assert resolved["payload"] == {"kind": "delta", "reason": merge["reason"], "transferId": merge["id"],
                                   "handoffId": handoff["id"]}

    # Nothing new in the fork: nothing to merge.
    with pytest.raises(AgentdError) as info:
        await client.call("thread.message.send", threadId=source, text="again", mergeBack={"forkThreadId": fork})
    assert info.value.kind == "invalid_state" and "nothing new to merge" in info.value.message

    third = await send_and_wait(client, fork, say("mike"))
    seen = await recall(client, source, "mike", mergeBack={"forkThreadId": fork})
    assert seen == {"mike": "context"}
    again = (await merge_transfers(client, source))[-1]
    assert again["sourceRunIds"] == [third["id"]] and again["basePoint"] == merge["sourcePoint"]
    text = (await handoff_of(client, again))["text"]
    assert "mike" in text and "lima" not in text and "kilo" not in text, "only what happened since the last merge"
    # The fork never sees the source's runs after the fork point.
    assert (await recall(client, fork, "alpha", "mike", "kilo"))["alpha"] == "native"


async def test_merge_back_errors(client):
    """F7: only a fork of this thread merges back; steering with it is refused."""
    source = (await client.call("thread.create"))["threadId"]
    await send_and_wait(client, source, say("alpha"))
    other = (await client.call("thread.create"))["threadId"]
    task = (await client.call("thread.create", parentThreadId=source))["threadId"]
    fork = (await client.call("thread.fork", threadId=source))["threadId"]
    grandchild = (await client.call("thread.fork", threadId=fork))["threadId"]
    for fork_id, kind in [(other, "invalid_params"), (task, "invalid_params"), (grandchild, "invalid_params"),
                          (source, "invalid_params"), ("thr_missing", "not_found"), (fork, "invalid_state")]:
        with pytest.raises(AgentdError) as info:
            await client.call("thread.message.send", threadId=source, text="merge", mergeBack={"forkThreadId": fork_id})
        assert info.value.kind == kind, (fork_id, info.value)
        if kind == "invalid_params":
            assert info.value.data.get("field") == "mergeBack.forkThreadId" and "is not a fork of" in info.value.message
    await send_and_wait(client, fork, say("kilo"))
    with pytest.raises(AgentdError) as info:
        await client.call("thread.message.send", threadId=source, text="merge", mergeBack={"forkThreadId": fork},
                          dispatchMode={"type": "steer_active", "targetRunId": "run_x"})
    assert info.value.kind == "invalid_params"
    assert (await client.call("thread.get", threadId=source))["runs"][-1]["ordinal"] == 1, "nothing was stored"
    assert await merge_transfers(client, source) == []


async def test_merge_back_of_a_fork_in_its_own_workspace_copies_nothing_and_says_what_differs(client, tmp_path):
    """F7: merge-back never touches files; for a fork in another workspace the
    answer and the handoff say which files differ here."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir(), there.mkdir()
    (here / "same.txt").write_text("same\n")
    (there / "same.txt").write_text("same\n")
    source = (await client.call("thread.create", workspace=str(here)))["threadId"]
    await send_and_wait(client, source, say("alpha"))
    fork = (await client.call("thread.fork", threadId=source, workspace=str(there)))["threadId"]
    await send_and_wait(client, fork, script({"write": {"path": "new.txt", "content": "x\n"}},
                                             {"write": {"path": "same.txt", "content": "same\n"}},
                                             {"say": "done"}))
    sent = await client.call("thread.message.send", threadId=source, text="what did the fork do?",
                             mergeBack={"forkThreadId": fork})
    assert sent["mergeBack"]["forkWorkspace"] == str(there) and sent["mergeBack"]["filesDiffer"] == ["new.txt"]
    run = await send_and_wait(client, source, say("after"))
    assert run["status"] == "completed"
    (merge,) = await merge_transfers(client, source)
    text = (await handoff_of(client, merge))["text"]
    assert f"own workspace ({there}); merge-back copied no files. Files that differ from this thread's workspace: new.txt" in text
    assert not (here / "new.txt").exists(), "nothing was copied"


STUCK = '[providers.stuck]\nkind = "codex"\nbinary = "{binary}"\n'


async def test_sigkill_during_a_merges_resolution_leaves_it_failed_never_half_consumed(tmp_path, short_dir):
    """F7/F12: the merge is resolved (its handoff stored) for a runtime that
    never answers, then the daemon is SIGKILLed: after the restart the merge
    is ``failed`` — not consumed — and merging again carries the same runs."""
    stuck = tmp_path / "stuck-runtime"
    stuck.write_text("#!/bin/sh\nexec sleep 3600\n")
    stuck.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text(STUCK.format(binary=stuck))
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            source = (await client.call("thread.create"))["threadId"]
            await send_and_wait(client, source, say("alpha"))
            fork = (await client.call("thread.fork", threadId=source))["threadId"]
            work = await send_and_wait(client, fork, say("kilo"))
            await client.call("thread.message.send", threadId=source, text="merge", provider="stuck",
                              mergeBack={"forkThreadId": fork})
            resolved = await wait_event(client, lambda e: e["type"] == "context_transfer.resolved"
                                        and e["payload"]["transfer"]["type"] == "merge_back", thread_id=source)
            assert resolved["payload"]["transfer"]["status"] == "resolved_portable"
    finally:
        await daemon.kill()
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            (merge,) = await merge_transfers(client, source)
            assert merge["status"] == "failed" and merge["error"].startswith("daemon_restart")
            assert merge["consumedAt"] is None and merge["handoffId"]
            seen = await recall(client, source, "kilo", provider="scripted", mergeBack={"forkThreadId": fork})
            assert seen == {"kilo": "context"}
            failed, again = await merge_transfers(client, source)
            assert again["status"] == "consumed" and again["sourceRunIds"] == [work["id"]] == failed["sourceRunIds"]
    finally:
        assert await daemon.terminate() == 0



async def test_a_merge_back_whose_run_is_cancelled_is_superseded_and_the_fork_can_be_merged_again(client):
    """Issue 23 item 10: the merge-back of a queued message whose run is
    cancelled ends ``superseded`` (never ``pending`` for ever); the fork's
    runs are still owed, so the next merge-back carries them."""
    source = (await client.call("thread.create", title="main"))["threadId"]
    await send_and_wait(client, source, say("alpha"))
    fork = (await client.call("thread.fork", threadId=source))["threadId"]
    done = await send_and_wait(client, fork, say("kilo"))
    busy = await client.call("thread.message.send", threadId=source, text=script({"tool": {"name": "wait", "hang": True}}))
    await wait_event(client, lambda e: e["type"] == "tool.started" and e.get("runId") == busy["runId"], thread_id=source)
    queued = await client.call("thread.message.send", threadId=source, text="merge it", mergeBack={"forkThreadId": fork})
    await client.call("queued-run.cancel", runId=queued["runId"])
    (merge,) = await merge_transfers(client, source)
    assert (merge["id"], merge["status"]) == (queued["mergeBack"]["transferId"], "superseded")
    assert "was cancelled" in merge["error"]
    event = await wait_event(client, lambda e: e["type"] == "context_transfer.superseded", thread_id=source)
    assert event["payload"]["transfer"]["id"] == merge["id"] and event["runId"] == queued["runId"]
    await client.call("run.interrupt", runId=busy["runId"])

    seen = await recall(client, source, "kilo", mergeBack={"forkThreadId": fork})
    assert seen == {"kilo": "context"}, "a superseded merge-back is no merge: the fork's run is still owed"
    again = (await merge_transfers(client, source))[-1]
    assert again["status"] == "consumed" and again["sourceRunIds"] == [done["id"]]

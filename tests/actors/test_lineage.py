"""Lineage through the socket (SPEC F4, F5, F6, F8): forks and provider
switches on real scripted-agent processes, proved with the agent's ``recall``
oracle — for each word, whether the agent sees it in its own native history,
only in a stored handoff, or not at all.

``scripted`` forks natively; ``basic`` is another scripted instance (its own
native store) without native fork, so it takes the portable paths.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError
from tests.helpers import configured_module_daemon, script, send_and_wait, stored_events, wait_event

CONFIG = """
[providers.basic]
kind = "scripted"
capabilities = { nativeFork = false }
"""


@pytest.fixture(scope="module")
def shared_daemon(module_paths):
    """One daemon for the module: every test works on threads of its own
    (issue 28 item 13: a start and stop is about 2 s here). Its exit status
    is checked after the module."""
    with configured_module_daemon(module_paths, CONFIG) as daemon:
        yield daemon


@pytest.fixture
async def client(shared_daemon):
    async with Client.connect(shared_daemon.socket) as c:
        yield c


def say(word: str) -> str:
    return script({"say": f"the word is {word}"})


async def recall(client: Client, thread_id: str, *words: str, **params) -> dict[str, str]:
    """Ask the thread's agent where it sees ``words``; ``{word: native|context|absent}``."""
    run = await send_and_wait(client, thread_id, script({"recall": list(words)}), **params)
    assert run["status"] == "completed", run
    messages = (await client.call("thread.get", threadId=thread_id))["messages"]
    answer = next(m["text"] for m in reversed(messages) if m["role"] == "assistant" and m["runId"] == run["id"])
    assert answer.startswith("recall: "), answer
    return dict(pair.split("=") for pair in answer[len("recall: "):].split())


async def three_runs(client: Client, provider: str | None = None) -> tuple[str, list[dict]]:
    params = {"provider": provider} if provider else {}
    thread_id = (await client.call("thread.create", title="source", **params))["threadId"]
    runs = [await send_and_wait(client, thread_id, say(word)) for word in ("alpha", "bravo", "charlie")]
    assert [r["status"] for r in runs] == ["completed"] * 3
    return thread_id, runs


async def transfers(client: Client, thread_id: str) -> list[dict]:
    return (await client.call("thread.transfers", threadId=thread_id))["transfers"]


async def test_fork_makes_only_a_thread_and_a_pending_transfer(client):
    """F6: thread.fork → a new idle AppThread with fork lineage and a pending
    transfer; no provider session, provider thread or handoff."""
    source, runs = await three_runs(client)
    sessions_before = (await client.call("daemon.status"))["sessions"]
    forked = await client.call("thread.fork", threadId=source, sourcePoint={"type": "run", "runId": runs[1]["id"]})
    fork = (await client.call("thread.get", threadId=forked["threadId"]))
    thread = fork["thread"]
    assert (thread["parentThreadId"], thread["relationshipToParent"], thread["rootThreadId"]) == (source, "fork", source)
    assert (thread["sideChat"], thread["createdBy"], thread["status"]) == (False, "user", "idle")
    assert thread["providerThreadId"] is None and fork["runs"] == []
    assert thread["provider"] == "scripted", "the fork's default provider is its source's"
    (transfer,) = await transfers(client, forked["threadId"])
    assert transfer["id"] == forked["transferId"]
    assert (transfer["type"], transfer["status"], transfer["handoffId"]) == ("fork", "pending", None)
    assert transfer["sourcePoint"]["runId"] == runs[1]["id"] and transfer["sourcePoint"]["type"] == "run"
    assert transfer["sourceRunIds"] == [runs[0]["id"], runs[1]["id"]]
    assert (await transfers(client, source)) == [transfer], "listed under the source too"
    assert (await client.call("daemon.status"))["sessions"] == sessions_before, "no provider work"
    forked_event = await wait_event(client, lambda e: e["type"] == "thread.forked", thread_id=source)
    assert forked_event["payload"]["forkThreadId"] == forked["threadId"] and forked_event["seq"] == forked["seq"]


@pytest.mark.parametrize(("provider", "resolution"), [("scripted", "native"), ("basic", "portable")])
async def test_fork_from_run_2_of_3_sees_runs_1_and_2_and_not_3(client, provider, resolution):
    """F6: the fork's first message resolves the transfer — natively on the
    source's provider when it can fork, else portably — and the fork's agent
    sees the source's runs 1–2 and not run 3; the source never sees the fork."""
    source, runs = await three_runs(client, provider)
    forked = await client.call("thread.fork", threadId=source, sourcePoint={"type": "run", "runId": runs[1]["id"]})
    fork_id = forked["threadId"]
    seen = await recall(client, fork_id, "alpha", "bravo", "charlie")
    expected = "native" if resolution == "native" else "context"
    assert seen == {"alpha": expected, "bravo": expected, "charlie": "absent"}

    (transfer,) = await transfers(client, fork_id)
    assert (transfer["status"], transfer["resolution"]) == ("consumed", resolution)
    assert transfer["lowerFidelity"] == (resolution == "portable")
    assert transfer["consumedAt"] and transfer["resolvedAt"] and transfer["targetProvider"] == provider
    run = (await client.call("thread.get", threadId=fork_id))["runs"][0]
    attempt = (await client.call("run.get", runId=run["id"]))["attempts"][0]
    assert attempt["transferId"] == transfer["id"] and attempt["providerThreadId"] == transfer["targetProviderThreadId"]
    if resolution == "portable":
        handoff = (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]
        assert handoff["id"] == transfer["handoffId"] and handoff["strategy"] == "portable_full"
        assert handoff["coveredRunIds"] == [runs[0]["id"], runs[1]["id"]] and handoff["transferId"] == transfer["id"]
        assert "the word is bravo" in handoff["text"] and "charlie" not in handoff["text"]
        assert handoff["size"] == len(handoff["text"]) <= handoff["cap"] == 32_000
    else:
        assert attempt["handoffId"] is None, "a native fork needs no handoff"
        events = await stored_events(client, fork_id)
        assert "context_handoff.created" not in [e["type"] for e in events]

    # Later runs on the source never leak into the fork, nor the fork's into the source.
    await send_and_wait(client, source, say("delta"))
    await send_and_wait(client, fork_id, say("echo"))
    assert await recall(client, source, "echo", "delta") == {"echo": "absent", "delta": "native"}
    assert (await recall(client, fork_id, "delta", "charlie"))["delta"] == "absent"


async def test_forks_of_forks_and_side_chats(client):
    """F6/F8: a fork of a fork inherits the whole chain up to its point; a
    side chat is a fork shown only inside its parent."""
    source, runs = await three_runs(client)
    first = await client.call("thread.fork", threadId=source, sourcePoint={"type": "run", "runId": runs[0]["id"]})
    await send_and_wait(client, first["threadId"], say("foxtrot"))
    second = await client.call("thread.fork", threadId=first["threadId"], sideChat=True, title="aside")
    thread = (await client.call("thread.get", threadId=second["threadId"]))["thread"]
    assert (thread["sideChat"], thread["title"], thread["rootThreadId"]) == (True, "aside", source)
    assert thread["parentThreadId"] == first["threadId"]
    seen = await recall(client, second["threadId"], "alpha", "bravo", "foxtrot")
    assert seen == {"alpha": "native", "bravo": "absent", "foxtrot": "native"}
    (transfer,) = [t for t in await transfers(client, second["threadId"]) if t["targetThreadId"] == second["threadId"]]
    first_run = (await client.call("thread.get", threadId=first["threadId"]))["runs"][0]
    assert transfer["sourceRunIds"] == [runs[0]["id"], first_run["id"]]
    assert transfer["sourcePoint"]["type"] == "latest_stable"

    # A fork of a fork that has not run yet starts from the same point, portably on basic.
    third = await client.call("thread.fork", threadId=second["threadId"])
    seen = await recall(client, third["threadId"], "alpha", "foxtrot", "charlie", provider="basic")
    assert seen == {"alpha": "context", "foxtrot": "context", "charlie": "absent"}


async def test_forking_an_active_run_uses_its_latest_stable_point_or_says_why_not(client):
    """F6: never fork from partially streamed state."""
    thread_id = (await client.call("thread.create"))["threadId"]
    done = await send_and_wait(client, thread_id, say("alpha"))
    sent = await client.call("thread.message.send", threadId=thread_id,
                             text=script({"say": "the word is bravo"}, {"tool": {"name": "build", "hang": True}}))
    await wait_event(client, lambda e: e["type"] == "tool.started" and e.get("runId") == sent["runId"], thread_id=thread_id)
    with pytest.raises(AgentdError) as info:
        await client.call("thread.fork", threadId=thread_id, sourcePoint={"type": "run", "runId": sent["runId"]})
    assert info.value.kind == "invalid_state" and "a tool is running (build)" in info.value.message
    forked = await client.call("thread.fork", threadId=thread_id)
    (transfer,) = [t for t in await transfers(client, forked["threadId"])]
    assert transfer["sourcePoint"]["runId"] == done["id"], "latest_stable skips the active run"
    assert await recall(client, forked["threadId"], "alpha", "bravo") == {"alpha": "native", "bravo": "absent"}
    await client.call("thread.stop", threadId=thread_id)


async def test_fork_source_errors(client):
    thread_id = (await client.call("thread.create"))["threadId"]
    empty = await client.call("thread.fork", threadId=thread_id)
    (transfer,) = await transfers(client, empty["threadId"])
    assert transfer["sourceRunIds"] == [] and transfer["sourcePoint"]["runId"] is None, "nothing completed: an empty fork"
    run = await send_and_wait(client, thread_id, say("alpha"))
    assert await recall(client, empty["threadId"], "alpha") == {"alpha": "absent"}
    (transfer,) = await transfers(client, empty["threadId"])
    assert (transfer["status"], transfer["resolution"]) == ("consumed", None)
    for point, kind in [
        ({"type": "run", "runId": "run_missing"}, "not_found"),
        ({"type": "checkpoint", "checkpointId": "ckp_missing"}, "not_found"),
        ({"type": "run"}, "invalid_params"),
        ({"type": "sideways"}, "invalid_params"),
    ]:
        with pytest.raises(AgentdError) as info:
            await client.call("thread.fork", threadId=thread_id, sourcePoint=point)
        assert info.value.kind == kind, (point, info.value)
    attempt = (await client.call("run.get", runId=run["id"]))["attempts"][0]
    forked = await client.call("thread.fork", threadId=thread_id,
                               sourcePoint={"type": "provider_thread", "providerThreadId": attempt["providerThreadId"]})
    assert await recall(client, forked["threadId"], "alpha") == {"alpha": "native"}


async def test_thread_create_with_relationship_fork_is_a_fork(client):
    """A thread created with ``relationship: fork`` no longer starts empty."""
    source, _runs = await three_runs(client)
    created = await client.call("thread.create", parentThreadId=source, relationship="fork", createdBy="agent")
    assert created["transferId"]
    thread = (await client.call("thread.get", threadId=created["threadId"]))["thread"]
    assert (thread["relationshipToParent"], thread["createdBy"]) == ("fork", "agent")
    assert await recall(client, created["threadId"], "alpha", "charlie") == {"alpha": "native", "charlie": "native"}


async def test_switch_to_another_provider_and_back_bridges_only_the_delta(client):
    """F5: scripted → basic → scripted. basic sees the earlier words in its
    handoff (context); back on scripted, its own runs are native, the middle
    run comes as a delta handoff covering exactly that run."""
    thread_id = (await client.call("thread.create"))["threadId"]
    first = await send_and_wait(client, thread_id, say("alpha"))
    assert await recall(client, thread_id, "alpha", provider="basic") == {"alpha": "context"}
    middle = (await client.call("thread.get", threadId=thread_id))["runs"][-1]
    seen = await recall(client, thread_id, "alpha", "context", provider="scripted")
    assert seen["alpha"] == "native"
    # "context" is a word of the middle run's answer ("alpha=context"), which only the delta carries.
    assert seen["context"] == "context"

    detail = await client.call("thread.get", threadId=thread_id)
    runs = detail["runs"]
    assert [r["provider"] for r in runs] == ["scripted", "basic", "scripted"], "thread.get shows who ran each run"
    back = (await client.call("run.get", runId=runs[2]["id"]))["attempts"][0]
    one = (await client.call("run.get", runId=first["id"]))["attempts"][0]
    assert back["providerThreadId"] == one["providerThreadId"], "the earlier provider thread is resumed"
    delta = (await client.call("handoff.get", handoffId=back["handoffId"]))["handoff"]
    assert delta["strategy"] == "delta" and delta["coveredRunIds"] == [middle["id"]]
    switch = (await client.call("run.get", runId=middle["id"]))["attempts"][0]
    portable = (await client.call("handoff.get", handoffId=switch["handoffId"]))["handoff"]
    assert portable["strategy"] == "portable_full" and portable["coveredRunIds"] == [first["id"]]
    kinds = [(t["type"], t["status"], t["sourceProvider"], t["targetProvider"]) for t in await transfers(client, thread_id)]
    assert kinds == [("provider_handoff", "consumed", "scripted", "basic"),
                     ("provider_handoff", "consumed", "basic", "scripted")]
    last = (await transfers(client, thread_id))[-1]
    assert last["basePoint"]["runId"] == first["id"] and last["basePoint"]["providerThreadId"] == one["providerThreadId"]


async def test_clean_context_replaces_the_provider_thread_with_a_summary(client):
    """F5: cleanContext → a fresh provider thread with a full_thread_summary;
    the old one is unusable, with the reason, in the graph."""
    thread_id = (await client.call("thread.create"))["threadId"]
    first = await send_and_wait(client, thread_id, say("alpha"))
    assert await recall(client, thread_id, "alpha", cleanContext=True) == {"alpha": "context"}
    runs = (await client.call("thread.get", threadId=thread_id))["runs"]
    old = (await client.call("run.get", runId=first["id"]))["attempts"][0]["providerThreadId"]
    attempt = (await client.call("run.get", runId=runs[-1]["id"]))["attempts"][0]
    assert attempt["providerThreadId"] != old
    handoff = (await client.call("handoff.get", handoffId=attempt["handoffId"]))["handoff"]
    assert handoff["strategy"] == "full_thread_summary" and handoff["reason"].startswith("clean_context")
    unusable = await wait_event(client, lambda e: e["type"] == "provider_thread.unusable", thread_id=thread_id)
    assert unusable["payload"]["providerThreadId"] == old


async def test_a_failed_native_fork_says_why_and_the_retry_resolves_portably(client):
    """F6: a fork whose resolution fails fails its run with the reason, and
    stays usable: the next message resolves it with a portable handoff."""
    source, runs = await three_runs(client)
    forked = await client.call("thread.fork", threadId=source, sourcePoint={"type": "run", "runId": runs[1]["id"]})
    (transfer,) = await transfers(client, forked["threadId"])
    data_dir = Path((await client.call("daemon.status"))["dataDir"])
    native = data_dir / "providers" / "scripted" / "threads" / f"{transfer['sourcePoint']['nativeThreadId']}.json"
    native.unlink()  # the source's native conversation is gone

    failed = await send_and_wait(client, forked["threadId"], say("echo"))
    assert failed["status"] == "failed" and failed["reason"].startswith("context_transfer_failed: native fork failed")
    (transfer,) = await transfers(client, forked["threadId"])
    assert transfer["status"] == "failed" and "native fork failed" in transfer["error"]
    event = await wait_event(client, lambda e: e["type"] == "context_transfer.failed", thread_id=forked["threadId"])
    assert event["payload"]["transfer"]["id"] == transfer["id"] and event["runId"] == failed["id"]
    messages = (await client.call("thread.get", threadId=forked["threadId"]))["messages"]
    assert [m["status"] for m in messages] == ["not_sent"], "the text is kept to send again"

    seen = await recall(client, forked["threadId"], "alpha", "bravo", "charlie", "echo")
    assert seen == {"alpha": "context", "bravo": "context", "charlie": "absent", "echo": "absent"}
    (transfer,) = await transfers(client, forked["threadId"])
    assert (transfer["status"], transfer["resolution"], transfer["lowerFidelity"]) == ("consumed", "portable", True)
    assert transfer["error"].startswith("context_transfer_failed"), "why it went portable stays on the record"


async def test_fork_from_a_completed_subagent_node_and_from_a_provider_turn(client):
    """F6 source points: a completed node (without a native thread of its
    own, the fork point is the end of its run) and a provider turn."""
    thread_id = (await client.call("thread.create"))["threadId"]
    first = await send_and_wait(client, thread_id, script({"subagent": {"steps": [{"say": "the word is alpha"}]}}))
    await send_and_wait(client, thread_id, say("bravo"))
    (node,) = [n for n in (await client.call("run.get", runId=first["id"]))["nodes"] if n["kind"] == "subagent"]
    forked = await client.call("thread.fork", threadId=thread_id, sourcePoint={"type": "node", "nodeId": node["id"]})
    (transfer,) = await transfers(client, forked["threadId"])
    assert (transfer["sourcePoint"]["nodeId"], transfer["sourcePoint"]["runId"]) == (node["id"], first["id"])
    # Issue 23 item 8: the child's own checkpoint is the fork's baseline.
    (child,) = [c for c in (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
                if c["scope"] == "child" and c["nodeId"] == node["id"]]
    assert transfer["sourcePoint"]["checkpointId"] == child["id"]
    assert await recall(client, forked["threadId"], "alpha", "bravo") == {"alpha": "native", "bravo": "absent"}

    attempt = (await client.call("run.get", runId=first["id"]))["attempts"][0]
    forked = await client.call("thread.fork", threadId=thread_id, sourcePoint={
        "type": "provider_thread", "providerThreadId": attempt["providerThreadId"], "providerTurnId": attempt["providerTurnId"]})
    assert await recall(client, forked["threadId"], "alpha", "bravo", provider="basic") == {"alpha": "context", "bravo": "absent"}
    with pytest.raises(AgentdError) as info:
        await client.call("thread.fork", threadId=thread_id, sourcePoint={"type": "node", "nodeId": "nod_missing"})
    assert info.value.kind == "not_found"


async def test_fork_from_a_checkpoint_is_a_fork_at_its_run(client):
    """F6: ``{type: checkpoint}`` forks at the run the checkpoint is the state
    after (a baseline: the run before it); ``latest_stable`` names the newest
    completed run's checkpoint too. Natively on scripted, portably on basic."""
    source, runs = await three_runs(client)
    checkpoints = (await client.call("checkpoint.list", threadId=source))["checkpoints"]
    of_run = {c["runId"]: c for c in checkpoints if c["kind"] == "run"}
    second = of_run[runs[1]["id"]]
    assert second["status"] == "captured"
    forked = await client.call("thread.fork", threadId=source, sourcePoint={"type": "checkpoint", "checkpointId": second["id"]})
    (transfer,) = await transfers(client, forked["threadId"])
    point = transfer["sourcePoint"]
    assert (point["type"], point["checkpointId"], point["runId"]) == ("checkpoint", second["id"], runs[1]["id"])
    assert transfer["sourceRunIds"] == [runs[0]["id"], runs[1]["id"]]
    assert await recall(client, forked["threadId"], "alpha", "bravo", "charlie") == {
        "alpha": "native", "bravo": "native", "charlie": "absent"}
    (transfer,) = await transfers(client, forked["threadId"])
    assert transfer["resolution"] == "native"

    # The baseline before run 1 is an empty fork; portably on basic it is given nothing.
    (baseline,) = [c for c in checkpoints if c["kind"] == "baseline"]
    assert baseline["ordinal"] == 0
    empty = await client.call("thread.fork", threadId=source, sourcePoint={"type": "checkpoint", "checkpointId": baseline["id"]})
    (transfer,) = await transfers(client, empty["threadId"])
    assert transfer["sourceRunIds"] == [] and transfer["sourcePoint"]["checkpointId"] == baseline["id"]
    assert await recall(client, empty["threadId"], "alpha", provider="basic") == {"alpha": "absent"}

    latest = await client.call("thread.fork", threadId=source)
    (transfer,) = await transfers(client, latest["threadId"])
    assert transfer["sourcePoint"]["type"] == "latest_stable"
    assert (transfer["sourcePoint"]["runId"], transfer["sourcePoint"]["checkpointId"]) == (runs[2]["id"], of_run[runs[2]["id"]]["id"])
    seen = await recall(client, latest["threadId"], "alpha", "charlie", provider="basic")
    assert seen == {"alpha": "context", "charlie": "context"}

    # A checkpoint of another thread is not found here.
    with pytest.raises(AgentdError) as info:
        await client.call("thread.fork", threadId=forked["threadId"], sourcePoint={"type": "checkpoint", "checkpointId": second["id"]})
    assert info.value.kind == "not_found"


async def test_a_portable_fork_from_a_checkpoint_is_told_the_files_at_it(client):
    """Issue 23 item 9: a fork from a ``checkpoint`` source point resolved
    portably gets a ``checkpoint_context`` handoff (resolution
    ``checkpoint_context``): the conversation up to the checkpoint and the
    state of the files there — its counts and the files it changed."""
    source = (await client.call("thread.create", title="source", provider="basic"))["threadId"]
    first = await send_and_wait(client, source, script({"write": {"path": "kept.txt", "content": "one\n"}}, {"say": "alpha"}))
    await send_and_wait(client, source, script({"write": {"path": "later.txt", "content": "two\n"}}, {"say": "bravo"}))
    forked = await client.call("thread.fork", threadId=source,
                               sourcePoint={"type": "checkpoint", "checkpointId": first["checkpointId"]})
    seen = await recall(client, forked["threadId"], "alpha", "bravo", provider="basic")
    assert seen == {"alpha": "context", "bravo": "absent"}
    (transfer,) = await transfers(client, forked["threadId"])
    assert (transfer["status"], transfer["resolution"]) == ("consumed", "checkpoint_context")
    handoff = (await client.call("handoff.get", handoffId=transfer["handoffId"]))["handoff"]
    text = handoff["text"]
    assert handoff["strategy"] == "checkpoint_context" and text.startswith("[agentd context handoff: checkpoint_context]")
    assert f"checkpoint {first['checkpointId']}, the workspace at the end of run 1" in text
    assert "kept.txt (added, +1 −0)" in text and "later.txt" not in text
    assert text.endswith("[end of handoff]") and handoff["size"] == len(text) <= handoff["cap"]

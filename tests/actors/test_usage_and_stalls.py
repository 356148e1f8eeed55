"""Token usage and cost on runs and threads, and stalled runs, over the socket
on the scripted agent (issue 28 "Usage and cost", "Stalled runs"; F2, F17, F20).

The scripted agent's ``usage`` step reports tokens as a runtime does; the
config's ``[pricing."MODEL"]`` prices them. ``[daemon] stall_after`` is short
here (the agent's own ``tool`` step is the silence), so the test waits for
events, never for time.
"""

from __future__ import annotations

import pytest

from agentd.protocol.client import Client
from tests.cli_helpers import run as agentd
from tests.helpers import configured_module_daemon, script, stored_events, wait_event, wait_run_terminal

CONFIG = """
[daemon]
stall_after = 1

[pricing."model-a"]
input = 2.0
output = 8.0
cached_input = 0.5
"""


@pytest.fixture(scope="module")
def shared_daemon(module_paths):
    """One daemon for the module (issue 28 item 13): each test reads the usage,
    stalls and rows of threads of its own."""
    with configured_module_daemon(module_paths, CONFIG) as daemon:
        yield daemon


@pytest.fixture
async def priced(shared_daemon):
    async with Client.connect(shared_daemon.socket) as connected:
        yield shared_daemon, connected


@pytest.fixture
def client(priced):
    return priced[1]


async def run_to_end(client: Client, thread_id: str, text: str) -> dict:
    sent = await client.call("thread.message.send", threadId=thread_id, text=text)
    return await wait_run_terminal(client, thread_id, sent["runId"])


async def test_usage_lands_on_the_run_summed_on_the_thread_and_priced_where_known(client):
    thread_id = (await client.call("thread.create"))["threadId"]
    first = await run_to_end(client, thread_id, script(
        {"usage": {"inputTokens": 1000, "cachedInputTokens": 400, "outputTokens": 200, "reasoningTokens": 50,
                   "model": "model-a"}},
        {"say": "one"},
        {"usage": {"inputTokens": 500, "outputTokens": 100, "model": "model-a"}},
    ))
    assert first["status"] == "completed"
    assert first["usage"] == {"inputTokens": 1500, "cachedInputTokens": 400, "outputTokens": 300,
                              "reasoningTokens": 50, "models": ["model-a"]}
    # (1500 - 400) * 2 + 400 * 0.5 + 300 * 8 per million
    assert first["cost"] == pytest.approx((1100 * 2.0 + 400 * 0.5 + 300 * 8.0) / 1e6)

    # A model without a price: that run's cost is unknown, and so is the thread's from then on.
    second = await run_to_end(client, thread_id, script({"usage": {"inputTokens": 10, "outputTokens": 5, "model": "other"}}))
    assert second["usage"]["inputTokens"] == 10 and second["cost"] is None
    got = await client.call("thread.get", threadId=thread_id)
    thread = got["thread"]
    assert thread["usage"] == {"inputTokens": 1510, "cachedInputTokens": 400, "outputTokens": 305,
                               "reasoningTokens": 50, "models": ["model-a", "other"]}
    assert thread["cost"] is None
    assert [run["usage"]["outputTokens"] for run in got["runs"]] == [300, 5]

    # Each report is an event with the run's and the thread's totals as they are then.
    reports = [e for e in await stored_events(client, thread_id) if e["type"] == "run.usage"]
    assert [r["payload"]["usage"]["inputTokens"] for r in reports] == [1000, 1500, 10]
    assert [r["payload"]["threadUsage"]["inputTokens"] for r in reports] == [1000, 1500, 1510]
    assert reports[0]["payload"]["cost"] == pytest.approx((600 * 2.0 + 400 * 0.5 + 200 * 8.0) / 1e6)
    assert reports[-1]["payload"]["threadCost"] is None
    assert all(r["runId"] and r["nodeId"] for r in reports)


async def test_agentd_show_and_threads_print_usage_and_cost(priced):
    daemon, client = priced
    thread_id = (await client.call("thread.create", title="metered"))["threadId"]
    await run_to_end(client, thread_id, script(
        {"usage": {"inputTokens": 12000, "cachedInputTokens": 2000, "outputTokens": 900, "model": "model-a"}}))
    cost = (10000 * 2.0 + 2000 * 0.5 + 900 * 8.0) / 1e6
    shown = (await agentd(daemon, "show", thread_id)).stdout.decode().splitlines()
    used = f"tokens 12.0k in (2.0k cached), 900 out, cost {cost:.4f}"
    assert shown[0].endswith(f"status=idle — {used}")
    assert any(line.startswith("└─ run 1 ") and line.endswith(f"completed — {used}") for line in shown), shown
    rows = (await agentd(daemon, "threads")).stdout.decode().splitlines()
    assert rows[0].split()[7:9] == ["TOKENS", "COST"]
    row = next(r for r in rows if r.startswith(thread_id)).split()
    assert row[5:10] == ["-", "12.0k", "/", "900", f"{cost:.4f}"], row


async def test_a_run_without_reports_has_no_usage_and_no_cost(client):
    thread_id = (await client.call("thread.create"))["threadId"]
    run = await run_to_end(client, thread_id, "hello")
    assert run["usage"] is None and run["cost"] is None
    assert (await client.call("thread.get", threadId=thread_id))["thread"]["usage"] is None


async def test_a_silent_provider_stalls_its_run_which_goes_on_when_it_speaks(priced):
    daemon, client = priced
    thread_id = (await client.call("thread.create"))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread_id, text=script(
        {"say": "starting"}, {"tool": {"name": "quiet job", "seconds": 8}}, {"say": "done"},
    ))
    run_id = sent["runId"]
    stalled = await wait_event(client, lambda e: e["type"] == "run.stalled" and e["runId"] == run_id, thread_id=thread_id)
    payload = stalled["payload"]
    assert payload["runId"] == run_id and payload["silentFor"] == 1
    # Marked at the step it is silent in: the running tool.
    got = await client.call("run.get", runId=run_id)
    tool = next(n for n in got["nodes"] if n["kind"] == "tool")
    assert payload["nodeId"] == stalled["nodeId"] == tool["id"]
    assert got["run"]["status"] == "running" and got["run"]["stalledSince"] is not None
    shown = (await agentd(daemon, "show", thread_id)).stdout.decode()
    assert f"run 1 {run_id} running STALLED (no word from the agent for " in shown
    rows = (await agentd(daemon, "threads")).stdout.decode().splitlines()
    assert " STALLED " in next(r for r in rows if r.startswith(thread_id))

    unstalled = await wait_event(client, lambda e: e["type"] == "run.unstalled" and e["runId"] == run_id,
                                 thread_id=thread_id, after_seq=stalled["seq"])
    assert unstalled["payload"]["silentFor"] >= 1
    run = await wait_run_terminal(client, thread_id, run_id)
    # A stall never ends a run by itself.
    assert run["status"] == "completed" and run["stalledSince"] is None

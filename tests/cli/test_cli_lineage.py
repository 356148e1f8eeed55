"""The lineage commands of ``agentd`` against a real daemon: fork, lineage, handoff."""

from __future__ import annotations

import json

import pytest

from agentd.protocol.client import Client
from tests.helpers import configured_module_daemon, script, send_and_wait
from tests.cli.test_cli import run

CONFIG = '[providers.basic]\nkind = "scripted"\ncapabilities = { nativeFork = false }\n'


@pytest.fixture(scope="module")
def daemon(module_paths):
    """One daemon for the module (issue 28 item 13), with a second scripted
    instance (``basic``) to switch to: each test works on threads of its own."""
    with configured_module_daemon(module_paths, CONFIG) as process:
        yield process


async def test_fork_lineage_and_handoff(daemon, client):
    thread_id = (await run(daemon, "new", "--title", "src")).stdout.decode().strip()
    first = await send_and_wait(client, thread_id, script({"say": "the word is alpha"}))
    await send_and_wait(client, thread_id, script({"say": "the word is bravo"}))

    fork_id = (await run(daemon, "fork", thread_id, "--from", first["id"], "--side")).stdout.decode().strip()
    assert fork_id.startswith("thr_")
    latest = json.loads((await run(daemon, "fork", thread_id, "--json")).stdout)
    assert latest["transferId"].startswith("xfr_")

    await send_and_wait(client, fork_id, "hello")
    # A switch on the source: its handoff is drawn with strategy and size.
    run_ = await send_and_wait(client, thread_id, "again", provider="scripted", cleanContext=True)
    shown = (await run(daemon, "lineage", thread_id)).stdout.decode()
    assert f"forked at run 1 → {fork_id} (consumed)" in shown
    assert f"forked at run 2 → {latest['threadId']} (pending)" in shown
    assert "scripted → scripted (clean_context" in shown and "full_thread_summary" in shown and "chars (cap 32,000)" in shown

    forked = (await run(daemon, "lineage", fork_id)).stdout.decode()
    assert f"parent {thread_id} (fork, side chat)" in forked
    assert f"fork of {thread_id} at run {first['id']}: consumed (native)" in forked

    # agentd show draws the same lineage under the run tree: forks, handoffs with strategy and size.
    shown = (await run(daemon, "show", thread_id)).stdout.decode()
    assert "lineage:" in shown and f"forked at run 1 → {fork_id} (consumed)" in shown
    assert "full_thread_summary" in shown and "chars (cap 32,000)" in shown
    fork_shown = (await run(daemon, "show", fork_id)).stdout.decode()
    assert f"parent {thread_id} (fork, side chat)" in fork_shown and f"fork of {thread_id}" in fork_shown

    attempt = (await client.call("run.get", runId=run_["id"]))["attempts"][0]
    text = (await run(daemon, "handoff", attempt["handoffId"])).stdout.decode()
    assert text.startswith("[agentd context handoff: full_thread_summary]") and "the word is bravo" in text
    missing = await run(daemon, "handoff", "hof_missing", check=False)
    assert missing.returncode == 1 and "no handoff hof_missing" in missing.stderr.decode()


async def test_send_switches_provider_and_cleans_context(daemon):
    """``agentd send --provider`` moves the thread to another instance with a
    handoff; ``--clean-context`` starts a fresh provider thread (SPEC F5)."""
    thread_id = (await run(daemon, "new")).stdout.decode().strip()
    await run(daemon, "send", thread_id, script({"say": "the word is alpha"}))
    switched = await run(daemon, "send", thread_id, script({"recall": ["alpha"]}), "--provider", "basic")
    assert "recall: alpha=context" in switched.stdout.decode()
    cleaned = await run(daemon, "send", thread_id, script({"recall": ["alpha"]}), "--clean-context")
    assert "recall: alpha=context" in cleaned.stdout.decode()
    async with Client.connect(daemon.socket) as client:
        runs = (await client.call("thread.get", threadId=thread_id))["runs"]
    assert [r["provider"] for r in runs] == ["scripted", "basic", "basic"]
    assert runs[-1]["cleanContext"] is True


async def test_show_draws_delegated_and_subagent_children(daemon, client):
    """F8/F9 in ``agentd show``: every child thread is drawn with its
    relationship (delegated tasks and subagents, whoever made them); a
    thread without lineage shows none."""
    parent = (await client.call("thread.create", title="parent"))["threadId"]
    task = (await client.call("thread.create", title="a task", parentThreadId=parent, createdBy="agent"))["threadId"]
    sub = (await client.call("thread.create", title="a sub", parentThreadId=parent, relationship="subagent",
                             createdBy="agent"))["threadId"]
    shown = (await run(daemon, "show", parent)).stdout.decode()
    assert f'delegated_task child → {task} "a task" (created by agent, idle, 0 run(s))' in shown
    assert f'subagent child → {sub} "a sub" (created by agent, idle, 0 run(s))' in shown
    child = (await run(daemon, "show", task)).stdout.decode()
    assert f"parent {parent} (delegated_task), root {parent}" in child
    lonely = (await client.call("thread.create"))["threadId"]
    assert "lineage:" not in (await run(daemon, "show", lonely)).stdout.decode()


async def test_send_merge_back_and_show_draws_it(daemon, client):
    """F7 on the command line: ``agentd send THREAD --merge-back FORK`` says
    what comes home; ``agentd show`` draws the merge-back on both threads;
    merging a thread that is no fork of this one is a one-line error."""
    thread_id = (await run(daemon, "new", "--title", "main")).stdout.decode().strip()
    await send_and_wait(client, thread_id, script({"say": "the word is alpha"}))
    fork_id = (await run(daemon, "fork", thread_id)).stdout.decode().strip()
    await send_and_wait(client, fork_id, script({"say": "the fork found kilo"}))
    sent = await run(daemon, "send", thread_id, script({"recall": ["kilo"]}), "--merge-back", fork_id)
    out, err = sent.stdout.decode(), sent.stderr.decode()
    assert "recall: kilo=context" in out
    assert f"merging back {fork_id}: 1 run(s)" in out + err
    shown = (await run(daemon, "show", thread_id)).stdout.decode()
    assert f"merge-back from {fork_id} at latest_stable" in shown and "into run 2: consumed (portable)" in shown
    assert "delta" in shown and "chars (cap 32,000)" in shown
    assert f"merged back into {thread_id} at run 1: consumed (portable)" in (await run(daemon, "show", fork_id)).stdout.decode()
    other = (await run(daemon, "new")).stdout.decode().strip()
    refused = await run(daemon, "send", thread_id, "hi", "--merge-back", other, check=False)
    assert refused.returncode != 0 and f"thread {other} is not a fork of thread {thread_id}" in refused.stderr.decode()

"""Rename, delete and export a thread through the socket (issue 28,
"Delete and rename", "Search and export")."""

from __future__ import annotations

import json
import subprocess

import pytest
import trio

from agentd.protocol.client import Client
from agentd.protocol.errors import InvalidParams, InvalidState, NotFound
from tests.helpers import script, send_and_wait, stored_events, wait_event, wait_run_terminal


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (issue 28 item 13): each test works on threads of its own,
    and searches for words only its own threads hold."""
    return module_daemon


async def search(client: Client, query: str, **params) -> list[dict]:
    return (await client.call("thread.search", query=query, **params))["hits"]


def shadow_refs(data_dir, thread_id: str) -> list[str]:
    """The checkpoint refs of ``thread_id`` in every shadow repository of the data dir."""
    refs = []
    for head in (data_dir / "checkpoints").rglob("HEAD"):
        git_dir = head.parent
        out = subprocess.run(["git", "--git-dir", str(git_dir), "for-each-ref", "--format=%(refname)",
                              f"refs/agentd/{thread_id}/"], capture_output=True, text=True)
        refs += out.stdout.split()
    return refs


async def test_rename_changes_the_title_with_an_event_and_the_search_follows(client):
    thread = (await client.call("thread.create", title="old walrus"))["threadId"]
    answer = await client.call("thread.update", threadId=thread, title="  new narwhal ")
    assert answer["changed"] == ["title"] and answer["thread"]["title"] == "new narwhal"
    event = await wait_event(client, lambda e: e["type"] == "thread.updated", thread_id=thread)
    assert event["seq"] == answer["seq"] and event["payload"]["thread"]["title"] == "new narwhal"
    assert (await client.call("thread.get", threadId=thread))["thread"]["title"] == "new narwhal"
    assert [h["threadId"] for h in await search(client, "narwhal")] == [thread]
    assert await search(client, "walrus") == []
    same = await client.call("thread.update", threadId=thread, title="new narwhal")
    assert same["changed"] == []
    with pytest.raises(InvalidParams):
        await client.call("thread.update", threadId=thread, title="   ")
    with pytest.raises(NotFound):
        await client.call("thread.update", threadId="thr_nope", title="x")


async def test_delete_is_refused_while_a_run_is_active_then_takes_the_thread_out(client, daemon, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    thread = (await client.call("thread.create", title="doomed", workspace=str(workspace)))["threadId"]
    first = await send_and_wait(client, thread, script({"write": {"path": "a.txt", "content": "quokka"}},
                                                       {"say": "wrote the quokka file"}))
    assert first["status"] == "completed"
    fork = (await client.call("thread.fork", threadId=thread))["threadId"]
    await send_and_wait(client, fork, "the fork remembers quokka too")
    assert shadow_refs(daemon.data_dir, thread)

    sent = await client.call("thread.message.send", threadId=thread,
                             text=script({"approval": {"kind": "command", "command": "ls"}}))
    asked = await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=thread)
    with pytest.raises(InvalidState) as refused:
        await client.call("thread.delete", threadId=thread)
    assert "stop it first" in refused.value.message
    await client.call("approval.respond", requestId=asked["payload"]["request"]["id"], decision="accept")
    await wait_run_terminal(client, thread, sent["runId"])

    refs = shadow_refs(daemon.data_dir, thread)
    deleted = await client.call("thread.delete", threadId=thread)
    assert deleted["runs"] == 2 and deleted["messages"] >= 4 and deleted["checkpoints"] >= 2
    assert deleted["refsDropped"] == len(refs) > 0
    assert deleted["childThreadIds"] == [fork]
    # The thread's own stream is gone with it (not_found); the daemon's log keeps the event.
    event = await wait_event(client, lambda e: e["type"] == "thread.deleted" and e["threadId"] == thread)
    assert event["seq"] == deleted["seq"] and event["payload"]["childThreadIds"] == [fork]

    with pytest.raises(NotFound):
        await client.call("thread.get", threadId=thread)
    with pytest.raises(NotFound):
        await client.call("run.get", runId=first["id"])
    with pytest.raises(NotFound):
        await client.call("thread.message.send", threadId=thread, text="hello?")
    assert thread not in {t["id"] for t in (await client.call("thread.list"))["threads"]}
    assert shadow_refs(daemon.data_dir, thread) == []
    # Its search entries went; the fork keeps its own history, naming its source.
    assert {h["threadId"] for h in await search(client, "quokka")} == {fork}
    kept = await client.call("thread.get", threadId=fork)
    assert kept["thread"]["parentThreadId"] == thread and len(kept["runs"]) == 1
    assert [t["targetThreadId"] for t in (await client.call("thread.transfers", threadId=fork))["transfers"]] == [fork]
    with pytest.raises(NotFound):
        await client.call("thread.delete", threadId=thread)


async def test_a_delete_racing_a_message_is_one_or_the_other(client):
    """The delete runs in the thread's actor: either the message's run came
    first (the delete is refused) or the delete did (the message is
    ``not_found``); never a run of a deleted thread."""
    for _ in range(5):
        thread = (await client.call("thread.create"))["threadId"]
        outcome: dict[str, object] = {}

        async def send() -> None:
            try:
                outcome["send"] = await client.call("thread.message.send", threadId=thread, text="hi")
            except NotFound as exc:
                outcome["send"] = exc

        async def delete() -> None:
            try:
                outcome["delete"] = await client.call("thread.delete", threadId=thread)
            except InvalidState as exc:
                outcome["delete"] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            nursery.start_soon(delete)
        if isinstance(outcome["delete"], dict):
            assert isinstance(outcome["send"], NotFound)
            with pytest.raises(NotFound):
                await client.call("thread.get", threadId=thread)
        else:
            assert isinstance(outcome["send"], dict)
            await wait_run_terminal(client, thread, outcome["send"]["runId"])
            await client.call("thread.delete", threadId=thread)


async def test_export_as_markdown_and_as_one_json_document(client, tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    thread = (await client.call("thread.create", title="Export me", workspace=str(workspace)))["threadId"]
    await send_and_wait(client, thread, script({"command": {"argv": ["true"]}}, {"write": {"path": "n.txt", "content": "1"}},
                                               {"say": "All **done**."}))
    await send_and_wait(client, thread, "second question")

    md = await client.call("thread.export", threadId=thread)
    assert md["format"] == "markdown" and md.get("document") is None
    text = md["markdown"]
    assert text.startswith("# Export me\n")
    assert "## Run 1 — completed" in text and "## Run 2 — completed" in text
    assert "> second question" in text and "All **done**." in text
    assert "- ran `true` (exit 0)" in text

    doc = (await client.call("thread.export", threadId=thread, format="json"))["document"]
    assert doc["thread"]["id"] == thread
    assert [r["run"]["ordinal"] for r in doc["runs"]] == [1, 2]
    assert all(r["attempts"] and r["nodes"] for r in doc["runs"])
    assert len(doc["messages"]) == 4 and doc["checkpoints"]
    assert set(doc) == {"thread", "runs", "messages", "transfers", "handoffs", "checkpoints"}
    json.dumps(doc)
    with pytest.raises(NotFound):
        await client.call("thread.export", threadId="thr_nope")
    with pytest.raises(InvalidParams):
        await client.call("thread.export", threadId=thread, format="pdf")
    assert any(e["type"] == "thread.created" for e in await stored_events(client, thread))

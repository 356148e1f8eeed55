"""``thread.search`` through the socket (issue 28, "Search and export"): the
FTS5 index beside the store finds titles, user messages, answers and
handoffs; it is derived — a missing, corrupt or stale index file is
rebuilt or caught up at start — and bad query syntax is ``invalid_params``."""

from __future__ import annotations

import shutil

import pytest

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import InvalidParams, NotFound
from tests.helpers import send_and_wait


async def search(client: Client, query: str, **params) -> list[dict]:
    return (await client.call("thread.search", query=query, **params))["hits"]


async def test_search_finds_titles_messages_and_answers(client):
    first = (await client.call("thread.create", title="Ninja build plans"))["threadId"]
    other = (await client.call("thread.create", title="Other"))["threadId"]
    run = await send_and_wait(client, first, "please use zebra striping in the table")
    assert run["status"] == "completed"
    await send_and_wait(client, other, "zebra crossings are elsewhere")

    hits = await search(client, "zebra")
    kinds = {(h["threadId"], h["kind"]) for h in hits}
    # The user's message and the scripted agent's answer ("You said: …") of both threads.
    assert kinds == {(first, "user"), (first, "answer"), (other, "user"), (other, "answer")}
    user_hit = next(h for h in hits if h["threadId"] == first and h["kind"] == "user")
    assert user_hit["runId"] == run["id"] and user_hit["messageId"] == run["userMessageId"]
    assert "**zebra**" in user_hit["snippet"] and user_hit["score"] > 0

    assert [(h["threadId"], h["kind"]) for h in await search(client, "ninja")] == [(first, "title")]
    only = await search(client, "zebra", threadId=other)
    assert {h["threadId"] for h in only} == {other}
    assert len(await search(client, "zebra", limit=1)) == 1
    assert await search(client, '"zebra striping"') and not await search(client, '"striping zebra"')
    assert {h["threadId"] for h in await search(client, "zeb*")} == {first, other}


async def test_a_bad_query_is_invalid_params_not_a_crash(client):
    for query in ('"unclosed', "AND", "zebra NOT", "NEAR("):
        with pytest.raises(InvalidParams) as caught:
            await search(client, query)
        assert caught.value.data["field"] == "query"
        assert "not valid" in caught.value.message
    with pytest.raises(NotFound):
        await search(client, "x", threadId="thr_none")
    assert (await client.call("daemon.status"))["pid"]  # still serving


async def test_the_index_is_rebuilt_when_missing_or_corrupt_and_caught_up_when_stale(data_dir, socket_path):
    index = data_dir / "search.sqlite3"
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            thread = (await client.call("thread.create", title="Rebuild me"))["threadId"]
            await send_and_wait(client, thread, "aardvark")
            assert len(await search(client, "aardvark")) == 2
    finally:
        assert await daemon.terminate() == 0
    stale = data_dir / "stale-index"
    shutil.copy(index, stale)

    # Stale: an index of an earlier state is caught up from the event log.
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            await send_and_wait(client, thread, "buffalo")
    finally:
        assert await daemon.terminate() == 0
    shutil.copy(stale, index)
    for suffix in ("-wal", "-shm"):
        (data_dir / f"search.sqlite3{suffix}").unlink(missing_ok=True)
    for damage in ("stale", "missing", "corrupt"):
        if damage == "missing":
            index.unlink()
        elif damage == "corrupt":
            index.write_bytes(b"this is not a database" * 100)
        daemon = await start_daemon(data_dir, socket_path)
        try:
            async with Client.connect(socket_path) as client:
                assert len(await search(client, "buffalo")) == 2, damage
                assert len(await search(client, "aardvark")) == 2, damage
                assert [h["kind"] for h in await search(client, "rebuild")] == ["title"]
        finally:
            assert await daemon.terminate() == 0

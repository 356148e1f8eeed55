"""Assistant text is stored append-only (SPEC F2 streamed text, F12 reopen
after a restart): a flush writes only its new text as a chunk, reads join the
chunks back into whole messages, and a data dir written before (every
message's text inline, rewritten by each flush) keeps working unchanged."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import lmdb

from agentd.actors.turns import TEXT_FLUSH_BYTES
from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.store.batch import SEP, WriteBatch
from agentd.store.db import Store, struct_copy
from agentd.store.records import CHUNKED_MESSAGE_VERSION, ConversationMessage
from tests.helpers import script, send_and_wait, stored_events

OLD_STORE = Path(__file__).resolve().parents[1] / "fixtures" / "old_store"


def _appended(events: list[dict], message_id: str) -> str:
    parts = [(e["payload"]["offset"], e["payload"]["text"]) for e in events
             if e["type"] == "message.appended" and e["payload"]["messageId"] == message_id]
    assert [offset for offset, _ in parts] == [sum(len(t) for _, t in parts[:i]) for i in range(len(parts))]
    return "".join(text for _, text in parts)


async def test_f2_chunks_join_into_the_message_and_an_update_keeps_them(tmp_path):
    """Store level: a head (version 2) plus chunks reads as the whole text;
    updating the head (a status) never touches the text; a version 1 record
    beside it still carries its text inline."""
    store = Store(tmp_path / "store", inline_commits=True)
    try:
        head = ConversationMessage(id="msg_a", thread_id="thr_a", role="assistant", status="streaming")
        old = ConversationMessage(id="msg_b", thread_id="thr_a", role="assistant", text="inline text")
        batch = WriteBatch()
        batch.put_message_head(head)
        batch.put(old)
        batch.append_text("msg_a", 0, "héllo ")
        await store.commit(batch)
        batch = WriteBatch()
        batch.append_text("msg_a", 6, "wörld")
        batch.put_message_head(struct_copy(head, status="complete"))
        await store.commit(batch)
        got = store.get(ConversationMessage, "msg_a")
        assert (got.text, got.status) == ("héllo wörld", "complete")
        assert [m.text for m in store.thread_messages("thr_a")] == ["héllo wörld", "inline text"]
        with store.env.begin() as txn:
            stored = txn.get(b"msg_a", db=store.dbs["messages"])
        assert stored[0] == CHUNKED_MESSAGE_VERSION and "héllo".encode() not in stored
    finally:
        store.close()


def _stored_text_bytes(data_dir: Path, message_id: str) -> tuple[int, int]:
    """(bytes of the message's record, bytes of its chunks) in the store."""
    env = lmdb.open(str(data_dir / "store"), max_dbs=64, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            record = txn.get(message_id.encode(), db=env.open_db(b"messages", txn=txn, create=False))
            chunks = txn.cursor(db=env.open_db(b"message_text", txn=txn, create=False))
            prefix = message_id.encode() + SEP
            total = 0
            if chunks.set_range(prefix):
                for key, value in chunks:
                    if not key.startswith(prefix):
                        break
                    total += len(value)
        return len(record), total
    finally:
        env.close()


async def test_f2_a_streamed_answer_is_stored_once_and_read_whole(data_dir, socket_path):
    """Through the socket: an answer of four flushes' worth (TEXT_FLUSH_BYTES)
    in 64 deltas is stored as chunks holding its text exactly once, with a
    small record; thread.get and the event replay return the whole message."""
    # The agent says a 1/64 part 64 times, so the script (the user's message) stays small.
    part = "".join(f"line {i:06} of the answer\n" for i in range(TEXT_FLUSH_BYTES))[:4 * TEXT_FLUSH_BYTES // 64]
    answer = part * 64
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create"))["threadId"]
            run = await send_and_wait(client, thread_id, script({"say": part, "repeat": 64, "chunks": 64}))
            assert run["status"] == "completed"
            (message,) = [m for m in (await client.call("thread.get", threadId=thread_id))["messages"]
                          if m["role"] == "assistant"]
            assert message["text"] == answer and message["status"] == "complete"
            events = await stored_events(client, thread_id)
            assert _appended(events, message["id"]) == answer
            completed = [e for e in events if e["type"] == "message.completed"]
            assert completed[-1]["payload"]["length"] == len(answer)
    finally:
        await daemon.terminate()
    record_bytes, chunk_bytes = _stored_text_bytes(data_dir, message["id"])
    assert chunk_bytes == len(answer.encode()), "each character is stored once"
    assert record_bytes < 1024, "the message record does not carry the text"


async def test_f12_a_data_dir_of_the_old_format_keeps_working(tmp_path, socket_path):
    """A data dir written by agentd before chunks (tests/fixtures/old_store,
    made by scripts/make_old_store_fixture.py with that agentd): its complete
    answer and the answer it was streaming when it was SIGKILLed read back
    whole; new answers on the same store are chunked; both survive a restart."""
    info = json.loads((OLD_STORE / "info.json").read_text())
    with tarfile.open(OLD_STORE / "data.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    data_dir = tmp_path / "data"
    new_answer = "a new answer in a new format " * 100

    async def check(client: Client) -> None:
        detail = await client.call("thread.get", threadId=info["threadId"])
        assistant = {m["runId"]: m for m in detail["messages"] if m["role"] == "assistant"}
        assert assistant[info["completeRunId"]]["text"] == "the old answer, streamed in chunks"
        killed = assistant[info["killedRunId"]]
        assert killed["status"] == "interrupted"
        assert killed["text"] and ("partial " * 1024).startswith(killed["text"])
        events = await stored_events(client, info["threadId"])
        assert _appended(events, killed["id"]) == killed["text"], "what was durable is what the events said"

    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            await check(client)
            thread_id = (await client.call("thread.create"))["threadId"]
            assert (await send_and_wait(client, thread_id, script({"say": new_answer, "chunks": 7})))["status"] == "completed"
    finally:
        await daemon.terminate()
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            await check(client)
            messages = (await client.call("thread.get", threadId=thread_id))["messages"]
            assert [m["text"] for m in messages if m["role"] == "assistant"] == [new_answer]
    finally:
        await daemon.terminate()

"""Streamed text is published at once and made durable rarely (issue 24
part 3; SPEC F2 streamed text, F12 a restart, F20 the event log).

What a crash may take back is only the streaming tail no ``message.appended``
covers yet — never a committed record, never an event a client was sent with
a ``seq`` — and a client that resumes from the last ``seq`` it saw gets a
consistent log: everything after it, nothing it saw changed."""

from __future__ import annotations

import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.store.batch import WriteBatch
from agentd.store.db import Store
from tests.helpers import TERMINAL, script, send_and_wait, stored_events

LONG = "".join(f"word{i:04} " for i in range(400))  # 4,000 characters


def _text_of(events: list[dict], message_id: str) -> str:
    """A message's text as its durable appends place it (each at its offset)."""
    text = ""
    for event in events:
        if event["type"] == "message.appended" and event["payload"]["messageId"] == message_id:
            assert event["payload"]["offset"] == len(text), "appends follow each other without a gap"
            text += event["payload"]["text"]
    return text


async def _stream_until_killed(client: Client, thread_id: str) -> dict:
    """Stream the second answer of a run and, while it streams, commit a
    queued message (a write of the thread that carries the text before it);
    return what the client saw when it stopped watching."""
    seen: list[dict] = []
    texts: dict[str, str] = {}
    async with client.subscribe(thread_id=thread_id) as events:
        run = await client.call("thread.message.send", threadId=thread_id, text=script(
            {"say": "the first answer", "chunks": 4},
            {"tool": {"name": "lint", "seconds": 0}},
            {"say": LONG, "chunks": 400, "perSecond": 50},
        ))
        queued = covered = None
        with trio.fail_after(60):
            async for event in events:
                seen.append(event)
                if event["type"] == "message.delta":
                    payload = event["payload"]
                    texts[payload["messageId"]] = texts.get(payload["messageId"], "") + payload["text"]
                live_text = next((text for text in texts.values() if text.startswith("word")), "")
                if len(live_text) >= 400 and queued is None:
                    queued = await client.call("thread.message.send", threadId=thread_id, text="and then?")
                if queued is not None and event["type"] == "message.created" and \
                        event["payload"]["message"]["id"] == queued["messageId"]:
                    covered = len(live_text)  # every delta seen so far came before this commit
                if covered is not None and len(live_text) >= covered + 400:
                    break
    return {"run": run, "queued": queued, "seen": seen, "covered": covered, "live_text": live_text}


async def test_f12_sigkill_mid_stream_loses_only_the_tail_no_append_covered(data_dir, socket_path):
    """SIGKILL while an answer streams: the committed records (the first
    answer, the tool, the queued message) all survive; the streaming answer
    keeps exactly the text its durable appends held — at least all that was
    streamed before the last commit of the thread, not the tail after it —
    and ends ``interrupted`` with that length; a client resuming from the
    last seq it saw gets only events after it, and the log up to it is what
    the client was sent."""
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create"))["threadId"]
            got = await _stream_until_killed(client, thread_id)
    finally:
        await daemon.kill()
    durable_seen = [e for e in got["seen"] if not e.get("ephemeral")]
    last_seq = max(e["seq"] for e in got["seen"])  # a delta carries the last durable seq, never one of its own

    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            detail = await client.call("thread.get", threadId=thread_id)
            by_id = {m["id"]: m for m in detail["messages"]}
            first, second = [m for m in detail["messages"] if m["role"] == "assistant"]
            assert (first["text"], first["status"]) == ("the first answer", "complete")
            assert second["status"] == "interrupted"
            assert got["covered"] <= len(second["text"]) < len(got["live_text"]), \
                "the text streamed before the queued message's commit is durable; the tail after it is not"
            assert LONG.startswith(second["text"])
            assert by_id[got["queued"]["messageId"]]["text"] == "and then?", "a committed message is never lost"
            nodes = (await client.call("run.get", runId=got["run"]["runId"]))["nodes"]
            assert [n["status"] for n in nodes if n["kind"] == "tool"] == ["completed"]

            log = await stored_events(client, thread_id)
            before = [(e["seq"], e["type"]) for e in log if e["seq"] <= last_seq]
            assert before == [(e["seq"], e["type"]) for e in durable_seen], "nothing the client was sent is taken back"
            assert _text_of(log, second["id"]) == second["text"]
            (closed,) = [e for e in log if e["type"] == "message.completed" and e["payload"]["messageId"] == second["id"]]
            assert closed["seq"] > last_seq and closed["payload"] == {
                "messageId": second["id"], "status": "interrupted", "length": len(second["text"])}

            resumed = []
            async with client.subscribe(thread_id=thread_id, after_seq=last_seq) as events:
                async for event in events:
                    resumed.append(event)
                    if event["seq"] >= log[-1]["seq"]:
                        break
            assert [e["seq"] for e in resumed] == [e["seq"] for e in log if e["seq"] > last_seq]
            assert all(b["seq"] > a["seq"] for a, b in zip(resumed, resumed[1:]))
    finally:
        assert await daemon.terminate() == 0


async def test_f2_the_answer_is_durable_before_its_run_completes(data_dir, socket_path):
    """A client that saw ``run.completed`` can lose the daemon at once: after
    a SIGKILL right then, the run is completed and its answer whole."""
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            thread_id = (await client.call("thread.create"))["threadId"]
            run = await send_and_wait(client, thread_id, script({"say": LONG, "chunks": 400}))
            assert run["status"] == "completed"
    finally:
        await daemon.kill()
    daemon = await start_daemon(data_dir, socket_path)
    try:
        async with Client.connect(socket_path) as client:
            assert (await client.call("run.get", runId=run["id"]))["run"]["status"] == "completed"
            messages = (await client.call("thread.get", threadId=thread_id))["messages"]
            assert [(m["text"], m["status"]) for m in messages if m["role"] == "assistant"] == [(LONG, "complete")]
    finally:
        assert await daemon.terminate() == 0


async def test_f2_a_durable_write_of_the_thread_carries_the_text_streamed_before_it(client):
    """A command committed while an answer streams (here a queued message)
    carries the text streamed so far ahead of its own events: a subscriber
    sees every delta before it covered by a ``message.appended`` before it."""
    thread_id = (await client.call("thread.create"))["threadId"]
    live = 0
    async with client.subscribe(thread_id=thread_id) as events:
        await client.call("thread.message.send", threadId=thread_id,
                          text=script({"say": LONG, "chunks": 400, "perSecond": 200}))
        queued = None
        appended = 0
        with trio.fail_after(60):
            async for event in events:
                kind = event["type"]
                if kind == "message.delta":
                    live = event["payload"]["offset"] + len(event["payload"]["text"])
                elif kind == "message.appended":
                    appended = event["payload"]["offset"] + len(event["payload"]["text"])
                elif kind == "message.created" and queued is not None and \
                        event["payload"]["message"]["id"] == queued["messageId"]:
                    assert appended == live > 0, "every delta before the commit is durable with it"
                    break
                if live >= 200 and queued is None:
                    queued = await client.call("thread.message.send", threadId=thread_id, text="next")
    await client.call("thread.stop", threadId=thread_id)


async def test_f2_paced_deltas_deliver_the_whole_text_and_a_bad_pace_fails_the_turn(client):
    """``say`` with ``perSecond`` streams every delta, in order; a pace that
    is not a positive number fails the turn with a reason."""
    thread_id = (await client.call("thread.create"))["threadId"]
    text = "0123456789" * 30
    deltas = []
    async with client.subscribe(thread_id=thread_id) as events:
        sent = await client.call("thread.message.send", threadId=thread_id,
                                 text=script({"say": text, "chunks": 30, "perSecond": 2000}))
        with trio.fail_after(30):
            async for event in events:
                if event["type"] == "message.delta":
                    deltas.append(event["payload"]["text"])
                run = event["payload"].get("run")
                if event.get("runId") == sent["runId"] and run and run["status"] in TERMINAL:
                    break
    assert run["status"] == "completed" and "".join(deltas) == text and len(deltas) == 30
    for bad in (0, -1, "fast"):
        failed = await send_and_wait(client, thread_id, script({"say": "x", "perSecond": bad}))
        assert failed["status"] == "failed" and "perSecond" in failed["reason"]


async def test_f2_appended_text_is_stored_once_and_replayed_whole(tmp_path):
    """Store level: a ``message.appended`` whose text its batch stores as a
    chunk is stored without the text; the replay gives it back; a chunk that
    is gone makes the event an ``event.corrupt`` placeholder, not a crash."""
    store = Store(tmp_path / "store", inline_commits=True)
    try:
        text = "streamed text that is stored exactly once " * 10
        batch = WriteBatch()
        batch.append_text("msg_a", 0, text)
        batch.event("message.appended", thread_id="thr_a", messageId="msg_a", offset=0, text=text)
        batch.event("message.appended", thread_id="thr_a", messageId="msg_a", offset=9, text="not a chunk")
        committed = await store.commit(batch)
        assert committed.events[0].payload["text"] == text, "published with its text"
        with store.env.begin() as txn:
            raw = [bytes(v) for _k, v in txn.cursor(db=store.dbs["events"])]
        assert not any(text.encode() in value for value in raw) and any(b"not a chunk" in value for value in raw)
        replayed = store.events_after(0, thread_id="thr_a")
        assert [e.payload for e in replayed] == [
            {"messageId": "msg_a", "offset": 0, "text": text},
            {"messageId": "msg_a", "offset": 9, "text": "not a chunk"},
        ]
        with store.env.begin(write=True) as txn:
            txn.delete(b"msg_a\x00" + (0).to_bytes(8, "big"), db=store.dbs["message_text"])
        assert [e.type for e in store.events_after(0)] == ["event.corrupt", "message.appended"]
    finally:
        store.close()


async def test_f17_every_subscriber_sees_every_delta_once_in_order_before_the_run_ends(daemon, client):
    """Issue 24 §3: deltas handed straight to waiting subscriptions (no
    wake-up of their streams) reach a thread's subscriber and an all-threads
    subscriber on another connection alike — paced and in a burst, each
    delta once, at its offset, each message's close covering exactly the
    text its deltas carried, and ``run.completed`` after the last delta."""
    thread_id = (await client.call("thread.create"))["threadId"]
    text = "".join(f"t{i:03} " for i in range(300))  # 1,500 characters in 300 deltas
    async with Client.connect(daemon.socket) as other:
        async with client.subscribe(thread_id=thread_id) as mine, other.subscribe() as everyone:
            sent = await client.call("thread.message.send", threadId=thread_id, text=script(
                {"say": text, "chunks": 150, "perSecond": 500}, {"say": text, "chunks": 150}))

            async def watch(events) -> list[dict]:
                seen = []
                with trio.fail_after(60):
                    async for event in events:
                        if event.get("threadId") != thread_id:
                            continue
                        seen.append(event)
                        run = event["payload"].get("run")
                        if event.get("runId") == sent["runId"] and run and run["status"] in TERMINAL:
                            return seen
                return seen

            results: dict[str, list[dict]] = {}

            async def into(name: str, events) -> None:
                results[name] = await watch(events)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(into, "mine", mine)
                nursery.start_soon(into, "everyone", everyone)
    for seen in results.values():
        assert seen[-1]["payload"]["run"]["status"] == "completed"
        live: dict[str, str] = {}
        durable: dict[str, int] = {}
        last_seq = 0
        for event in seen:
            assert event["seq"] >= last_seq, "seqs never go back"
            last_seq = event["seq"]
            payload = event["payload"]
            if event["type"] == "message.delta":
                message = payload["messageId"]
                assert payload["offset"] == len(live.get(message, "")), "each delta once, in order"
                live[message] = live.get(message, "") + payload["text"]
            elif event["type"] == "message.appended":
                durable[payload["messageId"]] = payload["offset"] + len(payload["text"])
            elif event["type"] == "message.completed":
                assert durable.get(payload["messageId"], 0) == len(live[payload["messageId"]]) == payload["length"]
        assert sorted(live.values()) == [text, text]
    assert [e["seq"] for e in results["mine"]] == [e["seq"] for e in results["everyone"]]

"""The store: group commit, durability, the event log and replay-then-live (F20)."""

from __future__ import annotations

import errno
import os
import threading

import lmdb
import pytest
import trio
import trio.testing

from agentd.store import writer as writer_module
from agentd.store.batch import WriteBatch
from agentd.store.db import Store
from agentd.store.errors import StoreError
from agentd.store.hub import EventHub, Resync, replay_then_live
from agentd.store.records import AppThread, Event


def thread_batch(i: int, command_id: str | None = None) -> WriteBatch:
    batch = WriteBatch()
    batch.put(AppThread(id=f"thr_{i:022d}", title=f"t{i}"))
    batch.event("thread.created", thread_id=f"thr_{i:022d}", n=i)
    if command_id:
        batch.set_receipt(command_id, "thread.create", {"threadId": f"thr_{i:022d}"}, 0.0)
    return batch


@pytest.fixture
def store(tmp_path):
    hub = EventHub()
    s = Store(tmp_path / "store", on_commit=hub.publish, map_size=1 << 28)
    s.hub = hub
    yield s
    s.close()


async def test_group_commit_shares_one_transaction_between_waiting_batches(store, nursery):
    """Batches that queue while a transaction is being written share the next one."""
    await nursery.start(store.writer.serve)
    gate = threading.Event()
    entered = threading.Event()
    original = store.writer._write

    def slow_first(group):
        if not entered.is_set():
            entered.set()
            gate.wait()
        return original(group)

    store.writer._write = slow_first
    results = {}

    async def commit(i):
        results[i] = await store.commit(thread_batch(i))

    nursery.start_soon(commit, 0)
    await trio.to_thread.run_sync(entered.wait)  # the writer is inside transaction 1
    async with trio.open_nursery() as inner:
        for i in range(1, 51):
            inner.start_soon(commit, i)
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert store.writer.transactions == 2
    assert store.writer.batches_committed == 51
    seqs = sorted(r.seq for r in results.values())
    assert seqs == list(range(1, 52)), "every batch got its own gap-free seq"


async def test_commits_are_durable_across_reopen(tmp_path, nursery):
    path = tmp_path / "store"
    s = Store(path, map_size=1 << 28)
    await nursery.start(s.writer.serve)
    for i in range(5):
        await s.commit(thread_batch(i, command_id=f"c{i}"))
    s.close()
    again = Store(path, map_size=1 << 28)
    assert again.last_seq == 5
    assert [t.title for t in again.list_threads()] == [f"t{i}" for i in range(5)]
    assert again.receipt("c3").result == {"threadId": f"thr_{3:022d}", "seq": 4}
    assert [e.seq for e in again.events_after(2)] == [3, 4, 5]
    again.close()


async def test_a_data_dir_with_a_dropped_index_still_opens(tmp_path, nursery):
    """Older agentd kept ``idx_thread_provider_threads``; nothing reads it
    now and a data dir that has it opens, reads and commits as before."""
    path = tmp_path / "store"
    s = Store(path, map_size=1 << 28)
    await nursery.start(s.writer.serve)
    await s.commit(thread_batch(1))
    s.close()
    env = lmdb.open(str(path), map_size=1 << 28, max_dbs=64)
    legacy = env.open_db(b"idx_thread_provider_threads")
    with env.begin(write=True) as txn:
        txn.put(f"thr_{1:022d}".encode() + b"\x00pth_old", b"", db=legacy)
    env.close()
    again = Store(path, map_size=1 << 28)
    await nursery.start(again.writer.serve)
    assert again.get(AppThread, f"thr_{1:022d}").title == "t1"
    assert (await again.commit(thread_batch(2))).seq == 2
    again.close()


def test_reads_are_typed_by_record_class(store):
    assert store.get(AppThread, "thr_missing") is None
    with pytest.raises(TypeError, match="not a stored record type"):
        store.get(dict, "thr_missing")


async def test_a_bad_batch_fails_alone(store, nursery):
    await nursery.start(store.writer.serve)
    bad = thread_batch(99)
    bad.ops.append(("no_such_db", b"k", b"v"))
    outcomes = {}

    async def commit(name, batch):
        try:
            outcomes[name] = (await store.commit(batch)).seq
        except StoreError as exc:
            outcomes[name] = exc

    async with trio.open_nursery() as inner:
        inner.start_soon(commit, "good1", thread_batch(1))
        inner.start_soon(commit, "bad", bad)
        inner.start_soon(commit, "good2", thread_batch(2))
    assert isinstance(outcomes["bad"], StoreError)
    assert sorted([outcomes["good1"], outcomes["good2"]]) == [1, 2]
    assert store.thread(f"thr_{99:022d}") is None, "nothing of the bad batch was written"
    assert store.last_seq == 2


async def test_a_write_on_a_full_disk_says_the_disk_is_full(store, nursery, monkeypatch):
    """LMDB reports a full disk as ENOSPC or, when a write comes up short, as
    EIO (issue 9, item 10): either way the error names the full disk."""
    await nursery.start(store.writer.serve)
    free = {"bytes": 0}
    real_statvfs = os.statvfs

    def statvfs(path):
        real = real_statvfs(path)
        return os.statvfs_result((real.f_bsize, 4096, real.f_blocks, 0, free["bytes"] // 4096, *real[5:]))

    monkeypatch.setattr(writer_module.os, "statvfs", statvfs)
    for words in ("Input/output error", "No space left on device"):
        def broken(group, words=words):
            raise lmdb.Error(f"mdb_txn_commit: {words}")

        monkeypatch.setattr(store.writer, "_write", broken)
        with pytest.raises(StoreError) as caught:
            await store.commit(thread_batch(1))
        assert "disk holding agentd's store" in caught.value.message and "0 bytes free" in caught.value.message
        assert words in caught.value.message
    # With room on the disk, an I/O error is only that; other errors are unchanged.
    free["bytes"] = 1 << 30
    assert "disk" not in writer_module.describe_write_failure(OSError(errno.EIO, "Input/output error"), str(store.path))
    assert writer_module.describe_write_failure(lmdb.MapFullError("map full"), str(store.path)) == "write failed: map full"


async def test_inline_mode_commits_on_the_loop(tmp_path, nursery):
    s = Store(tmp_path / "inline", inline_commits=True, map_size=1 << 28)
    await nursery.start(s.writer.serve)
    result = await s.commit(thread_batch(1))
    assert result.seq == 1 and s.thread(f"thr_{1:022d}") is not None
    s.close()


async def test_replay_then_live_has_no_gap_and_no_duplicate(store, nursery):
    """Events committed while a subscriber replays arrive exactly once, in order."""
    await nursery.start(store.writer.serve)
    for i in range(1200):  # more than two replay pages
        await store.commit(thread_batch(i))
    seen = []
    done = trio.Event()

    async def subscriber():
        async for events in replay_then_live(store, store.hub, thread_id=None, after_seq=100):
            seen.extend(e["seq"] for e in events)
            await trio.sleep(0)  # let writers interleave with the replay
            if seen and seen[-1] >= 1500:
                done.set()
                return

    nursery.start_soon(subscriber)
    for i in range(1200, 1500):
        await store.commit(thread_batch(i))
    await done.wait()
    assert seen == list(range(101, 1501))


async def test_thread_filtered_replay(store, nursery):
    await nursery.start(store.writer.serve)
    for i in range(10):
        await store.commit(thread_batch(i % 2))
    events = store.events_after(0, thread_id=f"thr_{1:022d}")
    assert [e.seq for e in events] == [2, 4, 6, 8, 10]


async def test_slow_subscriber_is_told_to_resync_instead_of_blocking(store, nursery):
    await nursery.start(store.writer.serve)
    stream = replay_then_live(store, store.hub, thread_id=None, after_seq=0, capacity=10)
    await store.commit(thread_batch(0))
    first = await stream.__anext__()  # replayed seq 1; now live
    assert [e["seq"] for e in first] == [1]
    for i in range(1, 30):  # nobody reads: the buffer overflows, the writer never waits
        await store.commit(thread_batch(i))
    with pytest.raises(Resync) as info:
        await stream.__anext__()
    assert info.value.after_seq == 1
    await stream.aclose()


async def test_a_subscriber_buffer_is_bounded_in_bytes_of_every_event_not_only_text():
    """Hostile round item 12a (F20): events that carry no ``text`` (a run
    record, a checkpoint's summary) count too: a subscriber that takes
    nothing is cut off past the buffer's bytes (8 MiB), long before its
    10,000 events, and ``on_overflow`` tells its stream at once."""
    import msgspec

    from agentd.store.hub import DEFAULT_BYTE_CAPACITY, EventHub
    from agentd.store.records import Event

    hub = EventHub()
    told: list[bool] = []
    sub = hub.subscribe(on_overflow=lambda: told.append(True))
    summary = {"checkpoint": {"summary": {"skipped": [{"path": "p" * 90, "reason": "too_large"}] * 1000}}}
    published = 0
    while not sub.overflowed and published < 1000:
        published += 1
        hub.publish([Event(seq=published, type="checkpoint.captured", payload=summary)])
    size = len(msgspec.json.encode(summary))  # about 120 KB
    assert sub.overflowed and told == [True]
    assert published * size >= DEFAULT_BYTE_CAPACITY, "not before the byte bound"
    assert published <= DEFAULT_BYTE_CAPACITY // size + 1, f"{published} events of {size} bytes were buffered"
    with pytest.raises(Resync):
        await sub.take()
    sub.close()


def test_full_disk_note_names_a_full_disk_and_only_then(monkeypatch, tmp_path):
    """Issue 9 item 10: a runtime that died on a full disk is reported as such."""
    import os
    from types import SimpleNamespace

    from agentd.store.writer import full_disk_note

    assert full_disk_note(str(tmp_path), below=1) is None
    monkeypatch.setattr(os, "statvfs", lambda _path: SimpleNamespace(f_bavail=3, f_frsize=4096))
    note = full_disk_note(str(tmp_path))
    assert note is not None and "full" in note and "12288 bytes free" in note and str(tmp_path) in note


async def test_a_waiting_subscriber_takes_live_deltas_at_once_and_in_order_with_commits(store, nursery):
    """Issue 24 §3 (F17): while the stream waits with everything before
    yielded, a delta goes to its ``direct`` on the publisher's turn (no wake-up
    of the stream) and is written at the hub's flush; once a committed event
    waits in its buffer, later deltas queue behind it, so the order is the
    publish order; a ``direct`` that refuses (no room) leaves the delta to the stream."""
    await nursery.start(store.writer.serve)
    thread_id = f"thr_{0:022d}"
    out: list[tuple[str, int | str]] = []  # ("direct" | "stream", seq or text)
    flushed: list[int] = []
    accept = [True]

    def direct(event):
        if accept[0]:
            out.append(("direct", event["payload"]["text"]))
        return accept[0]

    stream = replay_then_live(store, store.hub, thread_id=thread_id, after_seq=0, direct=direct,
                              flush=lambda: flushed.append(len(out)))
    await store.commit(thread_batch(0))
    assert [e["seq"] for e in await stream.__anext__()] == [1]  # replayed; the next call waits live
    batches: list[list[dict]] = []

    consuming = trio.CancelScope()

    async def consume() -> None:
        with consuming:
            async for events in stream:
                batches.append(events)
        await stream.aclose()

    nursery.start_soon(consume)
    await trio.testing.wait_all_tasks_blocked()
    hub = store.hub
    hub.publish_ephemeral("message.delta", thread_id=thread_id, text="a")
    hub.publish_ephemeral("message.delta", thread_id=thread_id, text="b")
    assert out == [("direct", "a"), ("direct", "b")] and flushed == [] and batches == []
    hub.flush()
    assert flushed == [2]
    hub.flush()  # nothing new: no write
    assert flushed == [2]
    hub.publish([Event(seq=2, type="x", thread_id=thread_id)])  # a commit waits in the buffer ...
    hub.publish_ephemeral("message.delta", thread_id=thread_id, text="c")  # ... so this one queues behind it
    accept[0] = False
    await trio.testing.wait_all_tasks_blocked()
    hub.publish_ephemeral("message.delta", thread_id=thread_id, text="d")  # refused: buffered for the stream
    await trio.testing.wait_all_tasks_blocked()
    assert [[e.get("payload", {}).get("text", e["seq"]) for e in batch] for batch in batches] == [[2, "c"], ["d"]]
    assert out == [("direct", "a"), ("direct", "b")]
    consuming.cancel()


async def test_a_delta_no_one_subscribes_to_is_not_even_built():
    hub = EventHub()
    sub = hub.subscribe("thr_other")
    hub.publish_ephemeral("message.delta", thread_id="thr_1", text="a")
    assert not sub._buffer
    sub.close()


# -- lazy batches: bookkeeping that rides with the next commit (issue 24 §3) ------------


def _recorder():
    done = []

    def record(result, error):
        done.append((trio.current_time(), result, error))

    return done, record


async def test_a_lazy_batch_rides_in_the_next_commit_ahead_of_it(store, nursery):
    """A lazy batch costs no synced transaction of its own: the next batch
    anyone commits takes it along, ahead of itself (its events first)."""
    await nursery.start(store.writer.serve)
    done, record = _recorder()
    store.writer.commit_lazy(thread_batch(1), record)
    store.writer.commit_lazy(thread_batch(2), record)
    await trio.testing.wait_all_tasks_blocked()
    assert store.writer.transactions == 0 and store.thread(f"thr_{1:022d}") is None
    result = await store.commit(thread_batch(3))
    assert store.writer.transactions == 1 and store.writer.batches_committed == 3
    assert [r.events[0].seq for _at, r, _e in done] == [1, 2] and result.events[0].seq == 3
    assert all(error is None for *_, error in done)
    assert store.thread(f"thr_{1:022d}") is not None


async def test_a_lazy_batch_alone_is_written_after_the_delay_and_not_before(tmp_path, autojump_clock):
    """With nothing else to ride with, a lazy batch is written LAZY_DELAY
    after it was queued (virtual time), in a transaction of its own."""
    hub = EventHub()
    store = Store(tmp_path / "store", on_commit=hub.publish, map_size=1 << 28)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.writer.serve)
            written = trio.Event()
            done = []

            def record(result, error):
                done.append((trio.current_time(), result, error))
                written.set()

            queued = trio.current_time()
            store.writer.commit_lazy(thread_batch(1), record)
            await written.wait()
            (at, result, error), = done
            assert error is None and result.events[0].type == "thread.created"
            assert at - queued >= writer_module.LAZY_DELAY
            assert store.writer.transactions == 1
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_lazy_batches_are_written_when_the_writer_stops(tmp_path):
    """A daemon that stops writes what waited (it is not dropped)."""
    path = tmp_path / "store"
    store = Store(path, on_commit=lambda events: None, map_size=1 << 28)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.writer.serve)
        store.writer.commit_lazy(thread_batch(7), lambda result, error: None)
        nursery.cancel_scope.cancel()
    with pytest.raises(StoreError, match="shutting down"):
        store.writer.commit_lazy(thread_batch(8), lambda result, error: None)
    store.close()
    reopened = Store(path, on_commit=lambda events: None, map_size=1 << 28)
    try:
        assert reopened.thread(f"thr_{7:022d}") is not None
    finally:
        reopened.close()


async def test_a_lazy_batch_that_cannot_be_written_is_reported_to_its_caller(store, nursery):
    """A lazy batch that fails (here: the disk) fails alone, and says so."""
    await nursery.start(store.writer.serve)
    done, record = _recorder()
    original = store.writer._write

    def refuse_thread_1(group):
        if any(p.batch.events and p.batch.events[0].payload.get("n") == 1 for p in group):
            raise lmdb.DiskError("no space left")
        return original(group)

    store.writer._write = refuse_thread_1
    store.writer.commit_lazy(thread_batch(1), record)
    result = await store.commit(thread_batch(2))
    assert result.events[0].type == "thread.created"
    (_at, failed, error), = done
    assert failed is None and isinstance(error, StoreError)

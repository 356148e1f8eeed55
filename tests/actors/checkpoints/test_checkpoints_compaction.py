"""Compaction of the shadow repositories and the per-file size cap (SPEC F13,
issue 10): every checkpoint a ref names survives, objects nothing reaches
go, the repack never waits for the workspace's lock and the prune always
does; the compactor runs after every ``after`` captures; the configured cap
skips larger files (reported) and a restore leaves them alone."""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from pathlib import Path

import trio
import trio.testing

from agentd.actors.checkpoints import CheckpointEngine, checkpoint_ref
from agentd.actors.checkpoints.compaction import Compactor
from agentd.launch import start_daemon
from agentd.protocol.client import Client
from tests.helpers import script, send_and_wait
from tests.actors.checkpoints.test_checkpoints_engine import user_home, write  # noqa: F401 - the autouse fixture

_REF = iter(range(1, 1_000_000))


def ref() -> str:
    return checkpoint_ref("thr_compact", "root", next(_REF))


async def objects(engine: CheckpointEngine, ws: Path) -> dict[str, int]:
    """``git count-objects -v`` of the workspace's shadow."""
    async with engine.locked(ws) as locked:
        out = (await locked.shadow.run(["count-objects", "-v"])).stdout.decode()
    return {k: int(v) for k, v in (line.split(": ") for line in out.splitlines()) if v.isdigit()}


async def exists(engine: CheckpointEngine, ws: Path, oid: str) -> bool:
    async with engine.locked(ws) as locked:
        return (await locked.shadow.run(["cat-file", "-e", oid], ok=(0, 1, 128))).returncode == 0


async def three_checkpoints(engine: CheckpointEngine, ws: Path):
    """c1, c2 (ref then deleted: its commit is unreachable), c3 against c1."""
    write(ws / "a.txt", "a\n")
    c1 = await engine.capture(ws, ref())
    write(ws / "x.txt", "only in c2\n")
    c2 = await engine.capture(ws, ref(), base=c1.commit)
    (ws / "x.txt").unlink()
    write(ws / "y.txt", "y\n")
    c3 = await engine.capture(ws, ref(), base=c1.commit)
    await engine.delete_refs(ws, [c2.ref])
    return c1, c2, c3


async def test_compact_keeps_every_checkpoint_and_drops_what_nothing_reaches(tmp_path):
    ws = tmp_path / "ws"
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1, c2, c3 = await three_checkpoints(engine, ws)
    before = await objects(engine, ws)
    assert before["count"] > 0 and await exists(engine, ws, c2.commit)

    await engine.compact(ws)
    after = await objects(engine, ws)
    assert (after["count"], after["packs"]) == (0, 1), after
    assert not await exists(engine, ws, c2.commit), "the commit no ref reaches is pruned"
    assert await exists(engine, ws, c1.commit) and await exists(engine, ws, c3.commit)
    async with engine.locked(ws) as locked:
        await locked.shadow.run(["fsck", "--connectivity-only", "--no-dangling"])
    diff = await engine.diff(ws, c3.commit, c1.commit)
    assert [(f.path, f.change) for f in diff.files] == [("y.txt", "added")]
    # Captures go on after a compaction, from the same index.
    write(ws / "z.txt", "z\n")
    c4 = await engine.capture(ws, ref(), base=c3.commit)
    assert [(f.path, f.change) for f in c4.files] == [("z.txt", "added")]
    restored = await engine.restore(ws, c1.commit, safety_ref=ref())
    assert restored.complete and sorted(os.listdir(ws)) == ["a.txt"]


async def test_the_repack_runs_beside_a_capture_and_the_prune_waits_for_its_lock(tmp_path):
    ws = tmp_path / "ws"
    engine = CheckpointEngine(tmp_path / "checkpoints")
    _c1, c2, _c3 = await three_checkpoints(engine, ws)
    asked = trio.Event()
    hold = engine.locks.hold

    @asynccontextmanager
    async def noting_hold(*args, **kwargs):
        asked.set()  # the compaction asks for the lock: its repack is done
        async with hold(*args, **kwargs):
            yield

    done = trio.Event()

    async def compact() -> None:
        await engine.compact(ws)
        done.set()

    async with trio.open_nursery() as nursery:
        async with engine.locked(ws) as locked:  # as a capture would hold it
            engine.locks.hold = noting_hold
            nursery.start_soon(compact)
            await asked.wait()
            stats = dict(line.split(": ") for line in
                         (await locked.shadow.run(["count-objects", "-v"])).stdout.decode().splitlines())
            assert stats["packs"] == "1", "the repack did not wait for the lock"
            assert (await locked.shadow.run(["cat-file", "-e", c2.commit], ok=(0, 1, 128))).returncode == 0, \
                "nothing is pruned while the lock is held"
            assert not done.is_set()
        await done.wait()
    engine.locks.hold = hold
    assert not await exists(engine, ws, c2.commit)


async def test_the_compactor_compacts_a_workspace_after_every_n_captures(tmp_path):
    ws, other = tmp_path / "ws", tmp_path / "other"
    engine = CheckpointEngine(tmp_path / "checkpoints")
    compactor = Compactor(engine, after=3, delay=0)
    real = os.path.realpath(os.fsencode(ws))
    write(other / "o.txt", "o\n")
    async with trio.open_nursery() as nursery:
        await nursery.start(compactor.serve)
        last = None
        for i in range(2):
            write(ws / f"f{i}.txt", f"{i}\n")
            last = await engine.capture(ws, ref(), base=last.commit if last else None)
        await engine.capture(other, ref())  # another workspace's captures count for it alone
        assert compactor.counts[real] == 2 and not compactor.due and not compactor.done
        write(ws / "f2.txt", "2\n")
        last = await engine.capture(ws, ref(), base=last.commit)
        await compactor.wait_done(real, 1)
        assert (await objects(engine, ws))["count"] == 0
        assert compactor.counts[real] == 0 and os.path.realpath(os.fsencode(other)) not in compactor.done
        nursery.cancel_scope.cancel()


async def test_a_compaction_cut_off_by_a_restart_is_queued_again_by_the_next_capture(tmp_path):
    ws = tmp_path / "ws"
    engine = CheckpointEngine(tmp_path / "checkpoints")
    compactor = Compactor(engine, after=1, delay=3600)
    real = os.path.realpath(os.fsencode(ws))
    write(ws / "a.txt", "a\n")
    first_life = trio.CancelScope()

    async def serve_once() -> None:
        with first_life:
            await compactor.serve()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_once)
        first = await engine.capture(ws, ref())
        await trio.testing.wait_all_tasks_blocked()
        assert compactor.due == {real}, "queued, waiting out its delay"
        first_life.cancel()
    assert not compactor.due and not compactor.done
    compactor.delay = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(compactor.serve)
        write(ws / "b.txt", "b\n")
        await engine.capture(ws, ref(), base=first.commit)
        await compactor.wait_done(real, 1)
        nursery.cancel_scope.cancel()


def test_compact_after_zero_never_compacts(tmp_path):
    engine = CheckpointEngine(tmp_path / "checkpoints")
    Compactor(engine, after=0, delay=0)
    assert engine.on_capture is None


async def test_the_configured_size_cap_skips_and_reports_larger_files_and_a_restore_leaves_them(tmp_path, short_dir):
    """``[checkpoints] max_file_bytes`` through the daemon: the run's summary
    lists the skipped file with its size; a restore neither removes nor
    rewrites it."""
    config = tmp_path / "config.toml"
    config.write_text("[checkpoints]\nmax_file_bytes = 1000\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    try:
        async with Client.connect(daemon.socket) as client:
            thread_id = (await client.call("thread.create", workspace=str(ws)))["threadId"]
            run1 = await send_and_wait(client, thread_id, script(
                {"write": {"path": "small.txt", "content": "s" * 1000}},
                {"write": {"path": "big.log", "content": "b" * 1001}}))
            listed = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
            summary = next(c for c in listed if c["id"] == run1["checkpointId"])["summary"]
            assert summary["skipped"] == [{"path": "big.log", "reason": "too_large", "size": 1001, "pathBytes": None}]
            assert summary["filesChanged"] == 1
            run2 = await send_and_wait(client, thread_id, script(
                {"write": {"path": "small.txt", "content": "changed"}},
                {"write": {"path": "big.log", "content": "c" * 2000}}))
            assert run2["status"] == "completed"
            restored = await client.call("checkpoint.restore", checkpointId=run1["checkpointId"])
            assert restored["complete"] and restored["restored"] == ["small.txt"]
            assert (ws / "small.txt").read_text() == "s" * 1000
            assert (ws / "big.log").read_text() == "c" * 2000, "a file over the cap is left alone"
    finally:
        assert await daemon.terminate() == 0

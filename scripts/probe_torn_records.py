"""Tear random records of a real daemon's store and see what it costs (issue 20).

    python scripts/probe_torn_records.py [--threads 8] [--tears 12] [--seed N]

Builds a store with THREADS threads (plain answers, a file write, an approval
left pending on one), stops the daemon, cuts TEARS random records of random
kinds in half with py-lmdb (as a bad or full disk would), starts the daemon
again and then, with one client connected all along: lists threads, reads
every thread, sends every thread a message and waits for its run, lists
checkpoints, replays the event log, runs ``agentd doctor``. It prints what
degraded, what failed and how, and checks the invariants: the daemon never
restarts a part (no "restarting" in its log), the one client is never
dropped, and every thread none of whose records were torn completes its run.
Local only; bounded in count and time. Exit 1 if an invariant broke.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lmdb
import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client
from agentd.protocol.errors import AgentdError
from agentd.store.batch import DATABASES
from agentd.store.db import DEFAULT_MAP_SIZE
from agentd.store.records import RECORD_KINDS

TERMINAL = ("completed", "failed", "interrupted", "cancelled", "rolled_back")


def script(*steps: dict) -> str:
    return "@script\n" + json.dumps(list(steps))


async def wait_run(client: Client, thread_id: str, run_id: str, timeout: float = 30.0) -> str:
    with trio.move_on_after(timeout):
        async with client.subscribe(thread_id=thread_id) as events:
            async for event in events:
                run = event["payload"].get("run")
                if event.get("runId") == run_id and run and run["status"] in TERMINAL:
                    return run["status"]
    return "timeout"


def tear_random(data: Path, rng: random.Random, count: int) -> list[tuple[str, str, str]]:
    """Cut ``count`` random records in half; (kind, key, owning thread or '')."""
    env = lmdb.open(str(data / "store"), map_size=DEFAULT_MAP_SIZE, max_dbs=len(DATABASES) + 8)
    torn = []
    try:
        with env.begin(write=True) as txn:
            candidates = []
            for kind in RECORD_KINDS:
                if kind in ("receipts",):
                    continue
                db = env.open_db(kind.encode(), txn=txn, create=False)
                for key, value in txn.cursor(db=db):
                    candidates.append((kind, bytes(key), bytes(value)))
            for kind, key, value in rng.sample(candidates, min(count, len(candidates))):
                db = env.open_db(kind.encode(), txn=txn, create=False)
                txn.put(key, value[: max(1, len(value) // 2)], db=db)
                owner = ""
                if b"thr_" in value:
                    at = value.index(b"thr_")
                    owner = value[at:at + 26].decode(errors="replace")
                shown = str(int.from_bytes(key, "big")) if kind == "events" else key.decode(errors="replace")
                torn.append((kind, shown, owner))
    finally:
        env.close()
    return torn


async def probe(threads: int, tears: int, seed: int) -> int:
    rng = random.Random(seed)
    base = Path(tempfile.mkdtemp(prefix="ad-torn-"))
    data, sock = base / "data", base / "s.sock"
    ids: list[str] = []
    try:
        daemon = await start_daemon(data, sock)
        try:
            async with Client.connect(sock) as client:
                for i in range(threads):
                    thread_id = (await client.call("thread.create", title=f"t{i}"))["threadId"]
                    ids.append(thread_id)
                    for text in ("hello", script({"write": {"path": f"f{i}.txt", "content": "x" * i}}), "bye"):
                        sent = await client.call("thread.message.send", threadId=thread_id, text=text)
                        await wait_run(client, thread_id, sent["runId"])
        finally:
            await daemon.terminate()
        torn = tear_random(data, rng, tears)
        hit_threads = {owner for _kind, _key, owner in torn if owner}
        print(f"seed {seed}: {threads} threads, tore {len(torn)} records:")
        for kind, key, owner in torn:
            print(f"  {kind:18} {key}  (thread {owner or '?'})")

        started = time.monotonic()
        daemon = await start_daemon(data, sock)
        broken: list[str] = []
        counts = {"completed": 0, "refused": 0, "other": 0}
        try:
            async with Client.connect(sock) as client:
                listed = (await client.call("thread.list"))["threads"]
                corrupt = [t for t in listed if t.get("corrupt")]
                print(f"thread.list: {len(listed)} entries, {len(corrupt)} corrupt")
                for thread_id in ids:
                    try:
                        got = await client.call("thread.get", threadId=thread_id)
                        unreadable = len(got["unreadable"])
                    except AgentdError as exc:
                        unreadable = f"get {exc.kind}"
                    try:
                        sent = await client.call("thread.message.send", threadId=thread_id, text="after the tear")
                        status = await wait_run(client, thread_id, sent["runId"])
                    except AgentdError as exc:
                        status = f"refused {exc.kind}"
                    key = "completed" if status == "completed" else "refused" if status.startswith("refused") else "other"
                    counts[key] += 1
                    print(f"  {thread_id}: unreadable={unreadable} run={status}")
                    if status != "completed" and thread_id not in hit_threads:
                        broken.append(f"untouched thread {thread_id} did not complete: {status}")
                target = (await client.call("daemon.status"))["lastSeq"]
                replayed = 0
                async with client.subscribe() as events:
                    async for event in events:
                        replayed += 1
                        if event["seq"] >= target:
                            break
                print(f"replayed {replayed} events up to seq {target}")
                await client.call("daemon.status")  # the same client, still connected
        except AgentdError as exc:
            broken.append(f"the client was dropped or the daemon failed: {exc!r}")
        finally:
            await daemon.terminate()
        log = daemon.log_text()
        if "restarting" in log:
            broken.append("a supervisor child restarted")
        doctor = subprocess.run([sys.executable, "-m", "agentd", "doctor", "--data-dir", str(data), "--json"],
                                capture_output=True, text=True, timeout=60)
        found = json.loads(doctor.stdout)["corrupt"] if doctor.stdout else []
        print(f"agentd doctor: {len(found)} unreadable of {len(torn)} torn (exit {doctor.returncode})")
        if len(found) < len([t for t in torn if t[0] != "events"]):
            broken.append("agentd doctor missed torn records")
        print(f"runs after the tear: {counts}; {time.monotonic() - started:.1f}s")
        for line in broken:
            print(f"BROKEN: {line}")
        print("ok" if not broken else f"{len(broken)} invariant(s) broken")
        return 1 if broken else 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--tears", type=int, default=12)
    parser.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(2), "big"))
    args = parser.parse_args()
    return trio.run(probe, args.threads, args.tears, args.seed)


if __name__ == "__main__":
    sys.exit(main())

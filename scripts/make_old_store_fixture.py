"""Write tests/fixtures/old_store/data.tar.gz: a data dir as an agentd from
before append-only message text left it (every message's text inline, in one
record rewritten by each flush), for tests/store/test_text_chunks.py.

Run it with that older agentd importable, e.g. from a checkout of main before
the change (commit 2aabff3), linked as a package named ``agentd``::

    git clone -q REPO /tmp/old/src && ln -s /tmp/old/src /tmp/old/agentd
    PYTHONPATH=/tmp/old python scripts/make_old_store_fixture.py

It makes one thread with a complete streamed answer, then sends a long
answer and SIGKILLs the daemon while it streams (after its first durable
append), so the store also holds a ``streaming`` message with partial text.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import lmdb
import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "old_store" / "data.tar.gz"
COMPLETE = "the old answer, streamed in chunks"


def script(*steps: dict) -> str:
    return "@script\n" + json.dumps(list(steps))


async def make(base: Path) -> dict:
    data, sock = base / "data", base / "s.sock"
    env = {**os.environ}
    daemon = await start_daemon(data, sock, env=env)
    try:
        async with Client.connect(sock) as client:
            thread = (await client.call("thread.create", title="old store"))["threadId"]
            first = await client.call("thread.message.send", threadId=thread,
                                      text=script({"say": COMPLETE, "chunks": 5}))
            async with client.subscribe(thread_id=thread) as events:
                async for event in events:
                    if event["type"] == "run.completed" and event["runId"] == first["runId"]:
                        break
            second = await client.call("thread.message.send", threadId=thread,
                                       text=script({"say": "partial ", "repeat": 1024, "chunks": 8192}))
            async with client.subscribe(thread_id=thread) as events:
                async for event in events:
                    if event["type"] == "message.appended" and event["runId"] == second["runId"]:
                        break
    finally:
        await daemon.kill()
    return {"threadId": thread, "completeRunId": first["runId"], "killedRunId": second["runId"]}


def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="old-store-", dir="/tmp"))
    (base / "compact").mkdir()
    try:
        info = trio.run(make, base)
        stores = [p.parent for p in (base / "data").rglob("data.mdb")]
        for store in stores:  # compacted: only the pages in use
            env = lmdb.open(str(store), max_dbs=64)
            env.copy(str(base / "compact"), compact=True)
            env.close()
            shutil.move(str(base / "compact" / "data.mdb"), str(store / "data.mdb"))
            (store / "lock.mdb").unlink(missing_ok=True)
        OUT.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(OUT, "w:gz") as tar:
            tar.add(base / "data", arcname="data")
        (OUT.parent / "info.json").write_text(json.dumps(info, indent=1) + "\n")
        print("wrote", OUT, OUT.stat().st_size, "bytes;", info)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

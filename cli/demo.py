"""``agentd demo``: a fresh daemon, one thread, two runs, their checkpoints and a
rollback, on the scripted agent.

It is the README's first command: it shows the daemon's main job end to end
and exits 0 only if every step did what it should.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import trio

from agentd.render import render_tree
from agentd.stream import stream_run
from agentd.protocol.client import Client
from agentd.launch import start_daemon

SCRIPT = [
    {"say": "I will write a note for you.", "chunks": 4},
    {"write": {"path": "notes/hello.txt", "content": "hello from agentd\n"}},
    {"say": "Done: notes/hello.txt is written.", "chunks": 3},
]


class DemoFailed(Exception):
    pass


def _check(condition: bool, what: str) -> None:
    if not condition:
        raise DemoFailed(what)


async def _demo(data_dir: Path) -> None:
    socket = Path(tempfile.mkdtemp(prefix="agentd-demo-")) / "agentd.sock"
    daemon = await start_daemon(data_dir, socket)
    try:
        async with Client.connect(socket) as client:
            status = await client.call("daemon.status")
            print(f"== agentd {status['version']} started (pid {status['pid']}), socket {socket}")
            created = await client.call("thread.create", title="demo")
            thread_id = created["threadId"]
            print(f"== thread.create -> {thread_id}")

            print("== thread.message.send 'Hello, agentd!' (streaming the answer)")
            run = await stream_run(client, thread_id, "Hello, agentd!", after_seq=created["seq"])
            _check(run["status"] == "completed", f"first run ended {run['status']}: {run.get('reason')}")

            print("== a scripted turn with a tool call that writes a file")
            text = "@script\n" + json.dumps(SCRIPT)
            last = (await client.call("daemon.status"))["lastSeq"]
            run = await stream_run(client, thread_id, text, after_seq=last)
            _check(run["status"] == "completed", f"second run ended {run['status']}: {run.get('reason')}")

            detail = await client.call("thread.get", threadId=thread_id)
            workspace = Path(detail["thread"]["workspace"])
            written = (workspace / "notes" / "hello.txt").read_text()
            _check(written == "hello from agentd\n", f"the tool wrote {written!r}")
            print(f"== {workspace / 'notes' / 'hello.txt'}: {written.strip()!r}")

            runs = [await client.call("run.get", runId=r["id"]) for r in detail["runs"]]
            print("== the thread's graph")
            for line in render_tree(detail["thread"], runs):
                print("   " + line)
            nodes = runs[1]["nodes"]
            _check(any(n["kind"] == "file_change" and n["status"] == "completed" for n in nodes), "no completed file_change node")

            checkpoints = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"]
            print("== checkpoints (the workspace after each run, in a shadow git repository)")
            for c in checkpoints:
                s = c.get("summary") or {}
                print(f"   {c['kind']:8} ordinal {c['ordinal']}  {c['status']}  {s.get('filesChanged', 0)} file(s) changed")
            _check([c["status"] for c in checkpoints] == ["captured"] * 3, f"checkpoints: {checkpoints}")

            print("== rollback.toRun 1: files and the agent's memory go back to after the first run")
            back = await client.call("rollback.toRun", threadId=thread_id, targetOrdinal=1)
            note = workspace / "notes" / "hello.txt"
            _check(not note.exists(), "the note is still there after the rollback")
            statuses = [r["status"] for r in (await client.call("thread.get", threadId=thread_id))["runs"]]
            _check(statuses == ["completed", "rolled_back"], f"runs after the rollback: {statuses}")
            print(f"   notes/hello.txt is gone; run 2 is rolled_back; agent memory: {back['providerRollback']}")
            undo = await client.call("checkpoint.restore", checkpointId=back["safetyCheckpointId"])
            _check(undo["complete"] and note.exists(), "the safety checkpoint did not bring the note back")
            print("   checkpoint.restore of the safety checkpoint brings the note back: nothing is lost")
    finally:
        code = await daemon.terminate()
        shutil.rmtree(socket.parent, ignore_errors=True)
    _check(code == 0, f"the daemon exited {code} on SIGTERM:\n{daemon.log_text()[-2000:]}")
    print("== daemon stopped cleanly; demo passed")


def run_demo(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="agentd-demo-data-"))
    try:
        trio.run(_demo, data_dir)
    except DemoFailed as exc:
        print(f"demo FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.data_dir and not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)
        elif args.keep or args.data_dir:
            print(f"== data dir kept at {data_dir}")
    return 0

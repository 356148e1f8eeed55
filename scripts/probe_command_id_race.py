"""Probe: does one commandId sent at once to two threads run once? (hostile-round item 6)

Starts a real daemon on a temporary data dir (local only, the built-in
scripted agent), makes two threads, and sends ``--pairs`` pairs of
``thread.message.send`` with the same commandId, one to each thread, both
lines of a pair in one write on one connection (the daemon reads them in
the same wake-up), plus the same again from two connections at once. Then
it counts, per commandId, the runs the two threads hold, and whether both
answers were the same receipt. Prints the figures and a JSON summary;
bounded by ``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from agentd.launch import start_daemon  # noqa: E402
from agentd.protocol.client import Client  # noqa: E402


def request(request_id: str, thread_id: str, command_id: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "thread.message.send", "params": {
        "threadId": thread_id, "text": f"race {command_id}", "commandId": command_id,
        "dispatchMode": {"type": "queue_after_active"}}}).encode() + b"\n"


async def read_answers(stream: trio.SocketStream, buffer: bytearray, wanted: set[str]) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    while wanted - set(answers):
        while (end := buffer.find(b"\n")) < 0:
            data = await stream.receive_some(65536)
            if not data:
                raise EOFError("the daemon closed the connection")
            buffer += data
        message = json.loads(bytes(buffer[:end]))
        del buffer[: end + 1]
        if message.get("id") in wanted:
            answers[message["id"]] = message
    return answers


async def one_connection(socket: str, threads: tuple[str, str], pairs: int) -> list[tuple[Any, Any]]:
    """Both requests of a pair in one write."""
    out = []
    stream = await trio.open_unix_socket(socket)
    buffer = bytearray()
    async with stream:
        for pair in range(pairs):
            command_id = f"one-{pair}"
            await stream.send_all(request(f"{pair}a", threads[0], command_id) + request(f"{pair}b", threads[1], command_id))
            answers = await read_answers(stream, buffer, {f"{pair}a", f"{pair}b"})
            out.append((answers[f"{pair}a"], answers[f"{pair}b"]))
    return out


async def two_connections(socket: str, threads: tuple[str, str], pairs: int) -> list[tuple[Any, Any]]:
    """Each request of a pair from its own connection, sent together."""
    out = []
    first, second = await trio.open_unix_socket(socket), await trio.open_unix_socket(socket)
    buffers = (bytearray(), bytearray())
    async with first, second:
        for pair in range(pairs):
            command_id = f"two-{pair}"
            got: dict[int, Any] = {}

            async def send(n: int, stream: trio.SocketStream) -> None:
                await stream.send_all(request(f"{pair}{n}", threads[n], command_id))
                got[n] = (await read_answers(stream, buffers[n], {f"{pair}{n}"}))[f"{pair}{n}"]

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send, 0, first)
                nursery.start_soon(send, 1, second)
            out.append((got[0], got[1]))
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="pcr-"))
    daemon = await start_daemon(work / "data", work / "agentd.sock", timeout=60)
    try:
        with trio.fail_after(args.timeout):
            async with Client.connect(daemon.socket) as client:
                threads = ((await client.call("thread.create"))["threadId"], (await client.call("thread.create"))["threadId"])
                answers = await one_connection(str(daemon.socket), threads, args.pairs)
                answers += await two_connections(str(daemon.socket), threads, args.pairs)
                runs: Counter[str] = Counter()
                for thread_id in threads:
                    detail = await client.call("thread.get", threadId=thread_id)
                    texts = {m["runId"]: m["text"] for m in detail["messages"] if m["role"] == "user"}
                    for run in detail["runs"]:
                        runs[texts[run["id"]].removeprefix("race ")] += 1
    finally:
        with trio.CancelScope(shield=True):
            await daemon.terminate()
        shutil.rmtree(work, ignore_errors=True)
    pairs = len(answers)
    same_receipt = sum(1 for a, b in answers if "result" in a and a.get("result") == b.get("result"))
    executions = Counter(runs.values())
    return {"pairs": pairs, "singleExecutions": executions.get(1, 0), "doubleExecutions": executions.get(2, 0),
            "neverExecuted": pairs - sum(executions.values()), "sameReceipt": same_receipt}


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=50, help="pairs per way of sending (default 50, so 100 in all)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds the whole probe may take")
    args = parser.parse_args()
    f = trio.run(main, args)
    print(f"commandId race: {f['pairs']} pairs, {f['singleExecutions']} single executions, "
          f"{f['doubleExecutions']} double, {f['neverExecuted']} never; both answers the same receipt: "
          f"{f['sameReceipt']}/{f['pairs']}")
    print(json.dumps(f))


if __name__ == "__main__":
    cli()

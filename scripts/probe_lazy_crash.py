"""Probe: SIGKILL the daemon while bookkeeping waits to ride with the next
commit (issue 24 §3, protocol/README "Bookkeeping rides with the next commit").

Each round starts a daemon, sends a message whose scripted answer streams
and then hangs, and SIGKILLs the daemon at a point that rotates round by
round (with seeded delays): at the run's first event, 0–240 ms after
``session.starting`` (while the runtime starts: the session's ready, the
baseline and the provider thread wait to ride with the run's start), at
``run.started``, at the answer's last delta, or up to 20 ms after it.
After a restart it checks what the protocol promises:

* every event a subscriber saw before the kill is still in the log, the same;
* the run is ``interrupted`` (``daemon_restart``; ``cancelled`` if it had not
  started), never re-run, never completed;
* the answer is ``complete`` with the whole text, or ``interrupted`` with a
  prefix of what was streamed;
* the thread takes a new message and answers it.

    python scripts/probe_lazy_crash.py [--rounds 12] [--seed 5]

Prints one line per round and a JSON summary; exits 1 on a violation.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from agentd.launch import start_daemon  # noqa: E402
from agentd.protocol.client import Client  # noqa: E402

POINTS = ("first_event", "session_starting", "run_started", "last_delta", "after_last_delta")
ANSWER = "lazy bookkeeping "
TERMINAL = ("run.completed", "run.failed", "run.interrupted", "run.cancelled")


async def one_round(base: Path, point: str, delay: float) -> list[str]:
    data, socket = base / "data", base / "s.sock"
    daemon = await start_daemon(data, socket)
    seen: list[dict] = []
    streamed = ""
    async with Client.connect(daemon.socket) as client:
        thread_id = (await client.call("thread.create", title="lazy"))["threadId"]
        script = "@script\n" + json.dumps([{"say": ANSWER * 8, "chunks": 8}, {"hang": True}])
        async with client.subscribe(thread_id=thread_id) as stream:
            await client.call("thread.message.send", threadId=thread_id, text=script)
            with trio.fail_after(30):
                async for event in stream:
                    if event.get("ephemeral"):
                        streamed += event["payload"]["text"]
                    else:
                        seen.append(event)
                    hit = ((point == "first_event" and not event.get("ephemeral"))
                           or (point == "session_starting" and event["type"] == "session.starting")
                           or (point == "run_started" and event["type"] == "run.started")
                           or (point in ("last_delta", "after_last_delta") and len(streamed) >= len(ANSWER * 8)))
                    if hit:
                        if point == "after_last_delta":
                            await trio.sleep(delay)
                        elif point == "session_starting":  # while the runtime starts: its ready may wait
                            await trio.sleep(delay * 12)
                        break
    await daemon.kill()
    problems: list[str] = []
    daemon = await start_daemon(data, socket)
    try:
        async with Client.connect(daemon.socket) as client:
            stored = {}
            last = (await client.call("daemon.status"))["lastSeq"]
            async with client.subscribe() as stream:  # every thread's: the log up to ``last``
                with trio.fail_after(30):
                    async for event in stream:
                        if not event.get("ephemeral"):
                            stored[event["seq"]] = event
                        if event.get("seq", 0) >= last:
                            break
            for event in seen:
                again = stored.get(event["seq"])
                if again is None or again["type"] != event["type"]:
                    problems.append(f"event {event['seq']} {event['type']} seen before the kill is gone")
            detail = await client.call("thread.get", threadId=thread_id)
            run = detail["runs"][0]
            # Killed before the run started it is cancelled (its message not sent), else interrupted.
            expected = {("interrupted", "daemon_restart")} | (
                {("cancelled", "daemon_restart")} if point in ("first_event", "session_starting") else set())
            if (run["status"], (run.get("reason") or "").split(":")[0]) not in expected:
                problems.append(f"run {run['status']} ({run.get('reason')})")
            answers = [m for m in detail["messages"] if m["role"] == "assistant"]
            for message in answers:
                text = message.get("text") or ""
                if message["status"] == "complete" and text != ANSWER * 8:
                    problems.append(f"a complete answer of {len(text)} characters, not {len(ANSWER * 8)}")
                elif message["status"] not in ("complete", "interrupted"):
                    problems.append(f"answer {message['status']}")
                elif not (ANSWER * 8).startswith(text):
                    problems.append("the answer's text is not a prefix of what was streamed")
            async with client.subscribe(thread_id=thread_id, after_seq=last) as stream:
                after = await client.call("thread.message.send", threadId=thread_id, text="again")
                status = None
                with trio.fail_after(30):
                    async for event in stream:
                        if event.get("runId") == after["runId"] and event["type"] in TERMINAL:
                            status = event["type"]
                            break
            if status != "run.completed":
                problems.append(f"the next run ended {status}")
    finally:
        await daemon.terminate()
    return problems


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    rnd = random.Random(args.seed)
    violations = 0
    counts: dict[str, int] = {}
    for n in range(args.rounds):
        point = POINTS[n % len(POINTS)]
        delay = rnd.uniform(0.0, 0.02)
        with tempfile.TemporaryDirectory(prefix="lazy-", dir="/tmp") as base:
            problems = await one_round(Path(base), point, delay)
        counts[point] = counts.get(point, 0) + 1
        violations += bool(problems)
        print(f"round {n} ({point}, {delay * 1000:.1f} ms): {'ok' if not problems else '; '.join(problems)}")
    print(json.dumps({"seed": args.seed, "rounds": args.rounds, "points": counts, "violations": violations}))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(trio.run(main))

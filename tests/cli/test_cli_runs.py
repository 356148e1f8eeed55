"""``agentd`` run control as a person uses it (issue 13): Stop never wedges a
thread, ``send`` says where its run waits, retries show, and the protocol's
queue, request and plan methods have commands."""

from __future__ import annotations

import os

import pytest
import trio

from tests.cli_helpers import first_line, run, spawn
from tests.helpers import script, wait_event, wait_run_terminal


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (conftest's): these tests need only threads of
    their own (issue 28 item 13); a test about everything it holds takes
    ``own_daemon``."""
    return module_daemon


HANG = script({"tool": {"name": "long job", "hang": True}})


async def new_thread(daemon) -> str:
    return (await run(daemon, "new")).stdout.decode().strip()


async def detached(daemon, thread_id: str, text: str) -> str:
    return (await run(daemon, "send", thread_id, text, "--detach")).stdout.decode().strip()


async def test_a_message_after_stop_runs_and_send_says_what_waits(own_daemon, own_client):
    daemon, client = own_daemon, own_client  # `agentd threads` lists every thread: only this test's
    thread_id = await new_thread(daemon)
    active = await detached(daemon, thread_id, HANG)
    await wait_event(client, lambda e: e["type"] == "tool.started", thread_id=thread_id)
    held = await detached(daemon, thread_id, "queued before the stop")
    stopped = await run(daemon, "stop", thread_id)
    assert first_line(stopped.stdout) == (f"stopped: interrupt requested for {active}; runs queued before now are held "
                                          f"(`agentd release {thread_id}` starts them)")
    sent = await run(daemon, "send", thread_id, "after the stop")
    assert sent.stdout.decode() == "You said: after the stop\n"
    err = sent.stderr.decode().splitlines()
    assert err[0].startswith("run 2 accepted: run_")
    assert err[1] == f"queue held: 1 run waits; `agentd release {thread_id}` starts it"
    assert err[-1] == "run 2 completed"

    threads = (await run(daemon, "threads")).stdout.decode().splitlines()
    assert threads[0].split() == ["THREAD", "STATUS", "PROVIDER", "RUNS", "ACTIVE", "RUN", "QUEUED", "TOKENS",
                                 "COST", "TITLE"]
    assert threads[1].split()[:7] == [thread_id, "idle", "scripted", "3", "-", "1", "(1"]
    shown = (await run(daemon, "show", thread_id)).stdout.decode().splitlines()
    assert shown[1:3] == [f"  queued: {held} (run 3, held)", f"  queue held: 1 run waits; `agentd release {thread_id}` starts it"]
    assert f"└─ run 3 {held} queued (held)" in shown

    released = await run(daemon, "release", thread_id)
    assert first_line(released.stdout) == f"queue released on {thread_id}: held runs start in order"
    assert (await wait_run_terminal(client, thread_id, held))["status"] == "completed"


async def test_send_says_where_its_run_waits_and_when_it_starts(daemon, client):
    thread_id = await new_thread(daemon)
    active = await detached(daemon, thread_id, HANG)
    await wait_event(client, lambda e: e["type"] == "tool.started", thread_id=thread_id)
    async with spawn(daemon, "send", thread_id, "next") as send:
        err = await send.wait_for("ahead)", on="err")
        assert err.splitlines()[0].startswith("run 2 accepted: run_")
        assert err.splitlines()[1] == f"queued behind run {active} (1 ahead)"
        interrupted = await run(daemon, "interrupt", active)
        assert first_line(interrupted.stdout) == f"interrupt requested for {active}"
        assert await send.finish() == 0
    assert send.err.decode().splitlines()[2:] == ["run 2 started", "run 2 completed"]
    assert send.out.decode() == "You said: next\n"


async def test_a_retried_run_says_so_instead_of_repeating_silently(daemon):
    thread_id = await new_thread(daemon)
    sent = await run(daemon, "send", thread_id, script({"say": "thinking"}, {"crash": 9, "once": True}, {"say": "done"}))
    out = sent.stdout.decode().splitlines()
    retry = next(i for i, line in enumerate(out) if line.startswith("[retry]"))
    assert out[retry].startswith("[retry] attempt 2 (provider_recovery): provider_crashed: ")
    assert out[:retry] == ["thinking"] and out[retry + 1:] == ["thinking", "done"]


async def test_cancel_reorder_and_requests(daemon, client):
    thread_id = await new_thread(daemon)
    await detached(daemon, thread_id, script({"approval": {"kind": "command", "command": "make deploy"}}))
    request = (await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=thread_id))["payload"]["request"]
    q1, q2, q3 = [await detached(daemon, thread_id, text) for text in ("one", "two", "three")]

    assert (await run(daemon, "requests", thread_id)).stdout.decode().splitlines() == [
        f"[approval needed: make deploy] {request['id']}",
        f"  answer with: agentd approve {request['id']}   (--deny to decline, --always to allow for the session)",
    ]
    assert first_line((await run(daemon, "cancel", q2)).stdout) == f"{q2} cancelled"
    assert first_line((await run(daemon, "reorder", thread_id, q3, q1)).stdout) == f"queue: {q3}, {q1}"
    wrong = await run(daemon, "reorder", thread_id, q1, check=False)
    assert wrong.returncode == 1 and first_line(wrong.stderr).startswith("agentd: RUN… must name exactly the queued runs")
    await run(daemon, "approve", request["id"])
    assert (await wait_run_terminal(client, thread_id, q1))["status"] == "completed"
    runs = {r["id"]: r for r in (await client.call("thread.get", threadId=thread_id))["runs"]}
    assert runs[q3]["ordinal"] < runs[q1]["ordinal"] and runs[q2]["status"] == "cancelled"
    assert first_line((await run(daemon, "requests", thread_id)).stdout) == f"nothing waits for an answer on thread {thread_id}"


async def test_approve_always_where_the_request_offers_it(daemon, client):
    """``agentd approve --always`` is ``acceptForSession`` (SPEC F15): the
    scripted agent then grants the same approval without asking; a request
    that does not offer it refuses it, naming what it offers."""
    thread_id = await new_thread(daemon)
    make = {"approval": {"kind": "command", "command": "make"}}
    once = {"approval": {"kind": "command", "command": "make deploy", "decisions": ["accept", "decline"]}}
    run_id = await detached(daemon, thread_id, script(make, make, once))
    first = (await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=thread_id))["payload"]["request"]
    assert first["decisions"] == ["accept", "acceptForSession", "decline"]
    await run(daemon, "approve", first["id"], "--always")
    second = (await wait_event(client, lambda e: e["type"] == "approval.requested" and e["payload"]["request"]["id"] != first["id"],
                               thread_id=thread_id))["payload"]["request"]
    assert second["detail"]["command"] == "make deploy" and second["decisions"] == ["accept", "decline"]
    wrong = await run(daemon, "approve", second["id"], "--always", check=False)
    assert wrong.returncode == 1
    assert first_line(wrong.stderr) == (f"agentd: request {second['id']} does not offer decision acceptForSession; "
                                        f"it offers accept, decline")
    await run(daemon, "approve", second["id"])
    assert (await wait_run_terminal(client, thread_id, run_id))["status"] == "completed"
    messages = (await client.call("thread.get", threadId=thread_id))["messages"]
    said = [m["text"] for m in messages if m["role"] == "assistant"]
    assert said == ["approval: acceptForSession", "approval: acceptForSession (remembered)", "approval: accept"]


async def test_implement_a_proposed_plan(daemon, client):
    thread_id = await new_thread(daemon)
    sent = await run(daemon, "send", thread_id, script({"proposePlan": "# Plan\n1. write it\n2. test it"}, {"proposePlan": "# Other"}))
    lines = sent.stdout.decode().splitlines()
    plans = [line.split()[2] for line in lines if line.startswith("[proposed plan] ")]
    assert lines[:4] == [f"[proposed plan] {plans[0]} — implement with `agentd implement {plans[0]}`",
                         "  # Plan", "  1. write it", "  2. test it"]
    done = await run(daemon, "implement", plans[0])
    run_id = first_line(done.stdout).split()[1]
    assert first_line(done.stdout) == f"run {run_id} implements {plans[0]} on {thread_id}; `agentd show {thread_id}` follows it"
    again = await run(daemon, "implement", plans[0], check=False)
    assert (again.returncode, first_line(again.stderr)) == (1, f"agentd: plan {plans[0]} is already implemented (by {run_id})")
    child = await run(daemon, "implement", plans[1], "--new-thread")
    assert first_line(child.stdout).startswith("thread thr_") and f"implements {plans[1]}" in first_line(child.stdout)
    assert (await wait_run_terminal(client, thread_id, run_id))["status"] == "completed"
    shown = (await run(daemon, "show", thread_id)).stdout.decode()
    assert f"  {plans[0]} implemented — by {run_id}" in shown


async def test_retry_runs_a_failed_run_again_as_its_next_attempt(daemon, client):
    """Issue 23 item 5: ``agentd retry RUN`` after a failure; the run's next
    attempt finishes it (the scripted step fails only the first time)."""
    thread_id = await new_thread(daemon)
    run_id = await detached(daemon, thread_id, script({"fail": "flaky network", "once": True}, {"say": "done"}))
    assert (await wait_run_terminal(client, thread_id, run_id))["status"] == "failed"
    retried = await run(daemon, "retry", run_id)
    assert first_line(retried.stdout).startswith(f"run {run_id} retried as attempt 2 (att_")
    done = await wait_event(client, lambda e: e["type"] == "run.completed" and e.get("runId") == run_id, thread_id=thread_id)
    assert done["payload"]["run"]["attemptCount"] == 2
    again = await run(daemon, "retry", run_id, check=False)
    assert again.returncode == 1 and "only a failed or interrupted run" in again.stderr.decode()


async def test_send_with_images(daemon, tmp_path):
    """Issue 26: ``send --image PATH`` (repeatable) sends the files with the
    message; the scripted agent says what it got. A file that is no image
    type is refused before anything is sent."""
    import base64
    import hashlib

    png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    (tmp_path / "a.png").write_bytes(png)
    (tmp_path / "b.PNG").write_bytes(png)
    (tmp_path / "notes.txt").write_text("not an image")
    thread_id = await new_thread(daemon)
    sent = await run(daemon, "send", thread_id, script({"reportImages": True}), "--image", str(tmp_path / "a.png"),
                     "--image", str(tmp_path / "b.PNG"))
    line = f"image image/png {len(png)} bytes sha256={hashlib.sha256(png).hexdigest()}"
    assert sent.stdout.decode().splitlines() == [line, line]
    refused = await run(daemon, "send", thread_id, "hi", "--image", str(tmp_path / "notes.txt"), check=False)
    assert refused.returncode != 0
    assert "--image" in refused.stderr.decode() and "not a .png" in refused.stderr.decode()


async def test_send_image_of_a_fifo_or_a_device_is_refused_at_once(daemon, tmp_path):
    """``send --image`` reads a regular file only, and no more than a message
    may carry: a FIFO named ``.png`` would wait forever, ``/dev/zero`` behind a
    ``.png`` symlink would be read without end."""
    os.mkfifo(tmp_path / "pipe.png")
    os.symlink("/dev/zero", tmp_path / "zero.png")
    (tmp_path / "big.png").write_bytes(b"\x89PNG" + bytes(10 << 20))
    thread_id = await new_thread(daemon)
    for name, why in (("pipe.png", "named pipe"), ("zero.png", "device"), ("big.png", "at most 9 MiB")):
        refused = await run(daemon, "send", thread_id, "hi", "--image", str(tmp_path / name), check=False)
        assert refused.returncode == 1 and why in refused.stderr.decode(), (name, refused.stderr)


async def test_send_file_of_a_device_is_refused_after_what_a_message_may_hold(daemon, tmp_path):
    """``send --file /dev/zero`` was read without end; it is read up to what a
    message may hold, then refused with nothing sent. A process substitution
    (a pipe the person made) still works."""
    thread_id = await new_thread(daemon)
    refused = await run(daemon, "send", thread_id, "--file", "/dev/zero", check=False)
    assert refused.returncode == 1 and "more than a message may" in refused.stderr.decode()
    fifo = tmp_path / "from-a-pipe"
    os.mkfifo(fifo)

    async def write_it() -> None:
        await trio.to_thread.run_sync(fifo.write_text, "piped in\n")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_it)
        sent = await run(daemon, "send", thread_id, "--file", str(fifo))
    assert sent.stdout.decode().strip() == "You said: piped in"

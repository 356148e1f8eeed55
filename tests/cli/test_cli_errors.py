"""``agentd`` errors and signals as a person meets them (issue 13): one line
on stderr and a trustworthy exit code — 1 for an error, 2 for a usage error,
130 after Ctrl-C, 141 when the reader goes away — and never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import trio

from agentd.launch import start_daemon
from tests.cli_helpers import WAIT, agentd_argv, assert_no_traceback, first_line, run, spawn
from tests.helpers import script, wait_event, wait_run_terminal


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (conftest's): these tests need only threads of
    their own (issue 28 item 13); a test about everything it holds takes
    ``own_daemon``."""
    return module_daemon

HANG = script({"tool": {"name": "long job", "hang": True}})


def _commands() -> list[str]:
    """The parser's commands, in its order (the unknown-command error lists them all)."""
    import argparse

    from agentd.main import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


COMMANDS = _commands()


async def new_thread(daemon) -> str:
    return (await run(daemon, "new")).stdout.decode().strip()


ERRORS = [
    (["show", "thr_missing"], 1, "agentd: no thread thr_missing; `agentd threads` lists the threads"),
    (["send", "thr_missing", "hi"], 1, "agentd: no thread thr_missing; `agentd threads` lists the threads"),
    (["interrupt", "run_missing"], 1, "agentd: no run run_missing; `agentd show THREAD` lists a thread's runs"),
    (["cancel", "run_missing"], 1, "agentd: no run run_missing; `agentd show THREAD` lists a thread's runs"),
    (["approve", "req_missing"], 1, "agentd: no request req_missing; `agentd requests THREAD` lists what waits for an answer"),
    (["implement", "art_missing"], 1, "agentd: no plan art_missing; `agentd show THREAD` lists a thread's proposed plans"),
    (["restore", "ckp_missing"], 1, "agentd: no checkpoint ckp_missing; `agentd checkpoints THREAD` lists a thread's checkpoints"),
    (["handoff", "hof_missing"], 1, "agentd: no handoff hof_missing; `agentd lineage THREAD` shows a thread's handoffs"),
    (["new", "--title", "t" * 600], 2, "agentd: argument --title: the title is 600 characters; it may have at most 500; "
                                      "see `agentd new --help`"),
    (["show", ""], 2, "agentd: argument thread: the thread id is empty; see `agentd show --help`"),
    (["interrupt", "r" * 129], 2, "agentd: argument RUN|NODE: the run id is 129 characters; an id has at most 128; "
                                  "see `agentd interrupt --help`"),
    (["events", "--after", "-5"], 2, "agentd: argument --after: -5 is negative; it counts from 0; see `agentd events --help`"),
    (["approve", " "], 2, "agentd: argument request: the request id is empty; see `agentd approve --help`"),
    (["answer", "req_x", "blue"], 2, "agentd: answers are KEY=VALUE, not 'blue': e.g. `agentd answer req_x color=blue` "
                                     "(`agentd requests THREAD` shows the keys)"),
    (["send", "thr_x"], 2, "agentd: give the message as TEXT, as - (read from stdin) or with --file PATH; see `agentd send --help`"),
    (["sned", "thr_x"], 2, "agentd: argument COMMAND: invalid choice: 'sned' (choose from "
                           + ", ".join(repr(name) for name in COMMANDS) + "); see `agentd --help`"),
]


async def test_an_error_is_one_line_and_an_exit_code(daemon):
    """Each case, against one daemon: exactly one line on stderr, nothing on stdout."""
    got: dict[int, tuple[int, list[str], bytes]] = {}

    async def one(index: int, args: list[str]) -> None:
        result = await run(daemon, *args, check=False)
        got[index] = (result.returncode, result.stderr.decode().splitlines(), result.stdout)

    async with trio.open_nursery() as nursery:
        for index, (args, _code, _line) in enumerate(ERRORS):
            nursery.start_soon(one, index, args)
    wrong = [f"agentd {' '.join(args)}: got {got[i][0]} {got[i][1]} {got[i][2]!r}, expected {code} {line!r}"
             for i, (args, code, line) in enumerate(ERRORS) if got[i] != (code, [line], b"")]
    assert not wrong, "\n".join(wrong)


async def test_a_non_utf8_argument_is_a_usage_error(daemon):
    argv = [os.fsencode(a) for a in agentd_argv(daemon, "send", "thr_x")]
    result = await trio.run_process([*argv[:5], b"\xffhi", *argv[5:]], capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 2
    assert first_line(result.stderr) == "agentd: argument 3 (b'\\xffhi') is not valid UTF-8; agentd takes UTF-8 text"
    assert_no_traceback(result.stderr)


async def test_answering_twice_and_with_the_wrong_command(daemon, client):
    thread_id = await new_thread(daemon)
    await run(daemon, "send", thread_id, script({"approval": {"kind": "command", "command": "make"}}), "--detach")
    request = (await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=thread_id))["payload"]["request"]
    wrong = await run(daemon, "answer", request["id"], "x=1", check=False)
    assert (wrong.returncode, first_line(wrong.stderr)) == (
        1, f"agentd: request {request['id']} is an approval, not a question; answer it with `agentd approve {request['id']}`")
    assert first_line((await run(daemon, "approve", request["id"])).stdout) == f"{request['id']} resolved"
    again = await run(daemon, "approve", request["id"], check=False)
    assert (again.returncode, first_line(again.stderr)) == (1, f"agentd: request {request['id']} is already resolved")

    await run(daemon, "send", thread_id, script({"ask": {"questions": [
        {"id": "color", "question": "Which color?", "options": ["red", "blue"]}, {"id": "size", "question": "How big?"}]}}), "--detach")
    question = (await wait_event(client, lambda e: e["type"] == "user_input.requested", thread_id=thread_id))["payload"]["request"]
    wrong = await run(daemon, "approve", question["id"], check=False)
    assert (wrong.returncode, first_line(wrong.stderr)) == (
        1, f"agentd: request {question['id']} is a question, not an approval; "
           f"answer it with `agentd answer {question['id']} color=red size=…`")
    missing = await run(daemon, "answer", question["id"], "color=blue", check=False)
    assert (missing.returncode, first_line(missing.stderr)) == (1, "agentd: answers lack size; answer every question")
    assert (await run(daemon, "answer", question["id"], "color=blue", "size=big")).returncode == 0


async def test_serve_twice_on_one_data_dir_or_one_socket(daemon, short_dir, tmp_path):
    argv = [sys.executable, "-m", "agentd", "serve"]
    same_dir = subprocess.run([*argv, "--data-dir", str(daemon.data_dir), "--socket", str(short_dir / "other.sock")],
                              capture_output=True, text=True, timeout=WAIT)
    assert same_dir.returncode == 1
    assert same_dir.stderr.splitlines()[0] == (
        f"agentd: another agentd (pid {daemon.pid}) is using data dir {daemon.data_dir}; stop it first, or use another --data-dir")
    same_socket = subprocess.run([*argv, "--data-dir", str(tmp_path / "other"), "--socket", str(daemon.socket)],
                                 capture_output=True, text=True, timeout=WAIT)
    assert same_socket.returncode == 1
    assert same_socket.stderr.splitlines()[-1] == (
        f"agentd: another agentd is already listening on {daemon.socket}; stop it first, or use another --socket")
    assert_no_traceback(same_dir.stderr, same_socket.stderr)


# -- the daemon going away -------------------------------------------------------------------


@pytest.fixture
async def mortal(tmp_path, short_dir):
    """A daemon the test kills."""
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock")
    try:
        yield daemon
    finally:
        await daemon.kill()


async def test_the_daemon_dying_mid_send_is_an_error(mortal):
    thread_id = await new_thread(mortal)
    async with spawn(mortal, "send", thread_id, HANG) as send:
        await send.wait_for("long job: started")
        run_id = send.err.decode().splitlines()[0].rpartition(" ")[2]
        await mortal.kill()
        assert await send.finish() == 1
    assert send.err.decode().splitlines()[-1] == (
        f"agentd: the daemon closed the connection before run {run_id} ended; "
        f"`agentd show {thread_id}` tells how it ended once the daemon is back")


async def test_the_daemon_dying_mid_follow_is_an_error(mortal):
    thread_id = await new_thread(mortal)
    async with spawn(mortal, "events", "--follow") as events:
        await events.wait_for("thread.created")
        await mortal.kill()
        assert await events.finish() == 1
    assert first_line(events.err) == ("agentd: the daemon closed the connection after seq 1; "
                                      "resume with `agentd events --follow --after 1` once it is back")
    assert thread_id in events.out.decode()


async def test_a_reader_that_goes_away_ends_the_command_quietly(own_daemon, own_client):
    """``agentd events --follow | head -1``: the next line meets a closed pipe.
    (A daemon of its own: its first event is this test's thread.created.)"""
    daemon, client = own_daemon, own_client
    await new_thread(daemon)
    read_end, write_end = os.pipe()
    process = await trio.lowlevel.open_process(agentd_argv(daemon, "events", "--follow"), stdin=subprocess.DEVNULL,
                                               stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        assert b"thread.created" in await trio.to_thread.run_sync(reader.readline)
    await client.call("thread.create", title="one more line")
    with trio.fail_after(WAIT):
        await process.wait()
        err = await process.stderr.receive_some(65536)
    assert (process.returncode, err) == (141, b"")


# -- Ctrl-C ---------------------------------------------------------------------------------


async def test_ctrl_c_interrupts_the_run_and_says_so(daemon, client):
    thread_id = await new_thread(daemon)
    async with spawn(daemon, "send", thread_id, HANG) as send:
        await send.wait_for("long job: started")
        run_id = send.err.decode().splitlines()[0].rpartition(" ")[2]
        send.interrupt()
        assert await send.finish() == 130
    lines = send.err.decode().splitlines()
    assert lines[1:] == [f"agentd: interrupting run {run_id} (Ctrl-C again to leave it to the daemon)",
                         "run 1 interrupted (interrupted)"]
    assert (await client.call("run.get", runId=run_id))["run"]["status"] == "interrupted"


async def test_a_second_ctrl_c_detaches_and_leaves_the_run_to_the_daemon(daemon, client):
    thread_id = await new_thread(daemon)
    # A runtime that ignores the interrupt keeps the run going after the first Ctrl-C.
    async with spawn(daemon, "send", thread_id, script({"say": "working"}, {"hang": True, "ignoreInterrupt": True})) as send:
        await send.wait_for("working")
        run_id = send.err.decode().splitlines()[0].rpartition(" ")[2]
        send.interrupt()
        await send.wait_for("agentd: interrupting", on="err")
        send.interrupt()
        assert await send.finish() == 130
    assert send.err.decode().splitlines()[-1] == (
        f"agentd: detached; run {run_id} goes on in the daemon (`agentd show {thread_id}`)")
    # The daemon ends the run itself once the interrupt's grace period is over.
    assert (await wait_run_terminal(client, thread_id, run_id, timeout=WAIT))["status"] == "interrupted"


async def test_ctrl_c_on_a_queued_run_cancels_it(daemon, client):
    thread_id = await new_thread(daemon)
    first = (await run(daemon, "send", thread_id, HANG, "--detach")).stdout.decode().strip()
    async with spawn(daemon, "send", thread_id, "later") as send:
        await send.wait_for(f"queued behind run {first} (1 ahead)", on="err")
        send.interrupt()
        assert await send.finish() == 130
    assert send.err.decode().splitlines()[-1] == "run 2 cancelled (cancelled_by_user)"
    await client.call("run.interrupt", runId=first)


async def test_detach_returns_once_the_run_is_accepted(daemon, client):
    thread_id = await new_thread(daemon)
    result = await run(daemon, "send", thread_id, "hello", "--detach")
    run_id = result.stdout.decode().strip()
    assert run_id.startswith("run_") and result.stderr == b""
    assert (await wait_run_terminal(client, thread_id, run_id))["status"] == "completed"


async def test_ctrl_c_at_a_prompt_interrupts_the_run(daemon):
    """At a terminal ``send`` asks the person; Ctrl-C there interrupts the
    run instead of waiting for an answer."""
    import pty

    thread_id = await new_thread(daemon)
    leader, follower = pty.openpty()
    try:
        async with spawn(daemon, "send", thread_id, script({"approval": {"kind": "command", "command": "make"}}),
                         stdin=follower) as send:
            os.close(follower)
            await send.wait_for("approve make? [y/N] ")
            send.interrupt()
            assert await send.finish() == 130
    finally:
        os.close(leader)
    assert send.err.decode().splitlines()[-1] == "run 1 interrupted (interrupted)"

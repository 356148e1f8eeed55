"""The ``agentd`` command line against a real daemon (F20), as a person uses it."""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import subprocess
import sys

import pytest

from agentd.launch import start_daemon
from agentd.main import build_parser
from agentd.protocol import wire
from tests.cli_helpers import agentd_argv, assert_no_traceback, run, spawn
from tests.helpers import script


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (conftest's): these tests need only threads of
    their own (issue 28 item 13); a test about everything it holds takes
    ``own_daemon``."""
    return module_daemon


def agentd(daemon, *args: str) -> list[str]:
    return agentd_argv(daemon, *args)


async def test_new_send_show_threads_status(own_daemon):
    daemon = own_daemon  # `agentd threads` lists every thread: only this test's
    thread_id = (await run(daemon, "new", "--title", "cli")).stdout.decode().strip()
    assert thread_id.startswith("thr_")
    sent = await run(daemon, "send", thread_id, "hello there")
    assert "You said: hello there" in sent.stdout.decode()
    assert "run 1 completed" in sent.stderr.decode()
    sent = await run(daemon, "send", thread_id, script({"write": {"path": "f.txt", "content": "x"}}))
    assert "[file_change] write f.txt: completed" in sent.stdout.decode()
    shown = (await run(daemon, "show", thread_id)).stdout.decode()
    assert "run 2" in shown and "file_change write f.txt completed" in shown
    threads = json.loads((await run(daemon, "threads", "--json")).stdout)["threads"]
    assert [t["id"] for t in threads] == [thread_id]
    status = json.loads((await run(daemon, "status", "--json")).stdout)
    assert status["pid"] == daemon.pid
    events = (await run(daemon, "events", "--thread", thread_id)).stdout.decode()
    assert "run.completed" in events


async def test_send_fails_clearly_without_a_daemon(tmp_path, short_dir):
    result = subprocess.run(
        [sys.executable, "-m", "agentd", "threads", "--data-dir", str(tmp_path), "--socket", str(short_dir / "none.sock")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr == f"agentd: no daemon is listening on {short_dir / 'none.sock'}; start one with `agentd serve`\n"


def serve_once(tmp_path, short_dir, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``agentd serve`` expected to refuse to start (a started daemon would time out)."""
    result = subprocess.run(
        [sys.executable, "-m", "agentd", "serve", "--data-dir", str(tmp_path / "d"), "--socket", str(short_dir / "s.sock"), *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )
    assert_no_traceback(result.stdout, result.stderr)
    return result


def test_serve_refuses_a_config_file_that_does_not_exist(tmp_path, short_dir):
    """Only the default location (<data-dir>/config.toml) may be absent."""
    missing = tmp_path / "no" / "such" / "file.toml"
    result = serve_once(tmp_path, short_dir, "--config", str(missing))
    assert result.returncode != 0
    assert result.stderr.startswith("agentd: ") and str(missing) in result.stderr, result.stderr


def test_serve_refuses_an_agentd_config_that_does_not_exist(tmp_path, short_dir):
    missing = tmp_path / "gone.toml"
    result = serve_once(tmp_path, short_dir, env={"AGENTD_CONFIG": str(missing)})
    assert result.returncode != 0
    assert result.stderr.startswith("agentd: ") and str(missing) in result.stderr, result.stderr


def test_a_client_command_refuses_the_daemons_config_option(tmp_path, short_dir):
    result = subprocess.run(
        [sys.executable, "-m", "agentd", "threads", "--config", str(tmp_path / "x.toml"),
         "--data-dir", str(tmp_path), "--socket", str(short_dir / "none.sock")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"agentd: unrecognized arguments: --config {tmp_path / 'x.toml'}; see `agentd --help`\n"


CLIENT_COMMANDS = [
    ["new"], ["send", "T", "hi"], ["threads"], ["show", "T"], ["events"], ["status"], ["providers"],
    ["stop", "T"], ["interrupt", "R"], ["approve", "Q"], ["answer", "Q", "k=v"], ["release", "T"],
    ["cancel", "R"], ["reorder", "T", "R1", "R2"], ["requests", "T"], ["implement", "P"],
]


@pytest.mark.parametrize("argv", [
    *([*command, "--config", "c.toml"] for command in CLIENT_COMMANDS),
    ["send", "T", "hi", "--json"], ["serve", "--json"], ["demo", "--socket", "s"], ["demo", "--config", "c.toml"],
    ["demo", "--json"],
], ids=" ".join)
def test_commands_take_only_the_options_they_use(argv, capsys):
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert "unrecognized arguments" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["serve", "--config", "c.toml", "--data-dir", "d", "--socket", "s"], ["demo", "--data-dir", "d", "--keep"],
    *([*command, "--data-dir", "d", "--socket", "s"] for command in CLIENT_COMMANDS),
    *([*command, "--json"] for command in CLIENT_COMMANDS if command[0] != "send"),
], ids=" ".join)
def test_commands_take_the_options_they_use(argv):
    build_parser().parse_args(argv)


async def test_approval_shown_inline_and_answered_from_another_command(daemon):
    thread_id = (await run(daemon, "new")).stdout.decode().strip()
    text = script({"approval": {"kind": "command", "command": "make deploy"}})
    async with spawn(daemon, "send", thread_id, text) as send:
        out = await send.wait_for("answer with")
        line = next(l for l in out.splitlines() if l.startswith("[approval needed: make deploy]"))
        request_id = line.split()[-1]
        assert request_id.startswith("req_")
        assert out.splitlines()[-1] == f"  answer with: agentd approve {request_id}   (--deny to decline, --always to allow for the session)"
        approved = await run(daemon, "approve", request_id, "--deny")
        assert approved.stdout.decode() == f"{request_id} resolved\n"
        assert await send.finish() == 0
    assert "approval: decline" in send.out.decode()


async def test_send_answers_questions_at_a_terminal(daemon):
    """Attached to a terminal, ``agentd send`` asks the person and answers."""
    thread_id = (await run(daemon, "new")).stdout.decode().strip()
    text = script({"ask": {"questions": [{"id": "color", "question": "Which color?", "options": ["red", "blue"]}]}})
    leader, follower = pty.openpty()
    try:
        async with spawn(daemon, "send", thread_id, text, stdin=follower) as send:
            os.close(follower)
            await send.wait_for("[question: Which color?]")
            os.write(leader, b"blue\n")
            assert await send.finish() == 0
    finally:
        os.close(leader)
    assert "answers: color=blue" in send.out.decode()


async def test_stop_and_interrupt_commands(daemon):
    thread_id = (await run(daemon, "new")).stdout.decode().strip()
    hang = script({"tool": {"name": "forever", "hang": True}})
    async with spawn(daemon, "send", thread_id, hang) as send:
        await send.wait_for("forever: started")
        stopped = await run(daemon, "stop", thread_id)
        assert "are held" in stopped.stdout.decode()
        assert await send.finish() == 1, "the run ended interrupted"
    assert send.err.decode().splitlines()[-1] == "run 1 interrupted (stopped)"
    shown = (await run(daemon, "show", thread_id)).stdout.decode()
    assert "interrupted" in shown


# -- input and answers (issue 13) ------------------------------------------------------------


async def test_send_reads_the_message_from_stdin_or_a_file(daemon, tmp_path):
    thread_id = (await run(daemon, "new")).stdout.decode().strip()
    piped = await run(daemon, "send", thread_id, "-", stdin="from stdin: ünïcode\n".encode())
    assert piped.stdout.decode() == "You said: from stdin: ünïcode\n"
    long_text = "0123456789" * 20_000  # past what one argument may carry (128 KiB)
    path = tmp_path / "message.txt"
    path.write_text(long_text)
    from_file = await run(daemon, "send", thread_id, "--file", str(path))
    assert from_file.stdout.decode() == f"You said: {long_text}\n"


async def test_send_refuses_input_it_cannot_send(daemon, tmp_path):
    thread_id = (await run(daemon, "new")).stdout.decode().strip()
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9".encode("latin-1"))
    too_long = tmp_path / "long.txt"
    too_long.write_text("x" * (wire.MAX_TEXT + 1))
    cases = [
        (["--file", str(latin1)], f"agentd: {latin1} is not UTF-8 text (byte 3); agentd sends text in UTF-8"),
        (["--file", str(too_long)], "agentd: the message is 1,048,577 characters; the limit is 1,048,576"),
        (["--file", str(tmp_path / "absent.txt")], f"agentd: cannot read {tmp_path / 'absent.txt'}: No such file or directory"),
        (["-"], "agentd: the message is empty; there is nothing to send"),
    ]
    for args, line in cases:
        result = await run(daemon, "send", thread_id, *args, check=False)
        assert (result.returncode, result.stderr.decode().splitlines()) == (1, [line]), args
    assert (await run(daemon, "show", thread_id)).stdout.decode().count(" run ") == 0, "nothing was sent"


async def test_a_question_outside_a_terminal_lists_keys_options_and_the_command(daemon):
    thread_id = (await run(daemon, "new")).stdout.decode().strip()
    text = script({"ask": {"questions": [{"id": "color", "question": "Which color?", "options": ["red", "blue"]},
                                         {"id": "size", "question": "How big?"}]}})
    async with spawn(daemon, "send", thread_id, text) as send:
        out = await send.wait_for("answer with:")
        request_id = out.splitlines()[0].rpartition(" ")[2]
        assert out.splitlines() == [
            f"[question: Which color?; How big?] {request_id}",
            "  color: Which color? (one of: red, blue)",
            "  size: How big?",
            f"  answer with: agentd answer {request_id} color=red size=…",
        ]
        await run(daemon, "answer", request_id, "color=blue", "size=big")
        assert await send.finish() == 0
    assert "answers: color=blue, size=big" in send.out.decode()


# -- help and output (issue 13) --------------------------------------------------------------


def all_parsers(parser=None):
    parser = parser or build_parser()
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from all_parsers(sub)


def test_every_option_and_argument_has_help_text():
    missing = [f"{p.prog} {a.option_strings or a.dest}" for p in all_parsers() for a in p._actions
               if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and not a.help]
    assert not missing, f"without help text: {missing}"


def test_version_and_the_socket_lookup_order():
    version = subprocess.run([sys.executable, "-m", "agentd", "--version"], capture_output=True, text=True, timeout=60)
    assert (version.returncode, version.stdout) == (0, "agentd 0.1.0\n")
    help_text = subprocess.run([sys.executable, "-m", "agentd", "threads", "--help"], capture_output=True, text=True,
                               timeout=60).stdout
    flat = " ".join(help_text.split())
    assert ("--socket PATH the daemon's Unix socket (default: $AGENTD_SOCKET, else $XDG_RUNTIME_DIR/agentd/agentd.sock, "
            "else <data-dir>/run/agentd.sock)") in flat


async def test_status_shows_the_websocket_and_providers_their_capabilities(tmp_path, short_dir):
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", extra_args=["--websocket-port", "0"])
    try:
        status = (await run(daemon, "status")).stdout.decode().splitlines()
        websocket = next(line for line in status if line.startswith("websocket: "))
        assert re.fullmatch(rf"websocket: ws://127\.0\.0\.1:\d+/ \(token in {re.escape(str(daemon.data_dir))}/websocket\.token\)",
                            websocket), websocket
        providers = (await run(daemon, "providers")).stdout.decode().splitlines()
        assert providers[0].split()[:2] == ["scripted", "scripted"]
        assert providers[1] == "  can: steer, nativeFork, interrupt, rollback, structuredQuestions, emptyThreads"
    finally:
        await daemon.terminate()


async def test_events_show_a_payload_summary_and_show_indents_messages(daemon):
    thread_id = (await run(daemon, "new", "--title", "summaries")).stdout.decode().strip()
    sent = await run(daemon, "send", thread_id, script(
        {"plan": [{"step": "look", "status": "completed"}, {"step": "write", "status": "in_progress"}]},
        {"say": "first line\nsecond line"},
    ))
    assert sent.stdout.decode().splitlines() == ["[todo] 2 steps", "  [x] look", "  [~] write", "first line", "second line"]
    events = (await run(daemon, "events", "--thread", thread_id)).stdout.decode().splitlines()
    summaries = {}
    for line in events:
        _seq, type_, _thread, _run, *summary = line.split(None, 4)
        summaries.setdefault(type_, summary[0] if summary else "")
    assert summaries["thread.created"] == "'summaries'"
    assert summaries["message.appended"] == "+'first line second line' at 0"
    assert summaries["run.completed"] == "run 1 completed"
    assert summaries["plan.finalized"] == "todo_list final, 2 steps"
    shown = (await run(daemon, "show", thread_id)).stdout.decode().split("\nMessages\n", 1)[1].splitlines()
    assert shown[3:6] == ["  assistant · run 1 · complete", "    first line", "    second line"]
    assert shown[0] == "  user · run 1 · complete" and shown[1] == "    @script"


async def test_a_delete_step_is_named_a_delete_not_a_write(daemon, client):
    """Issue 28 item 5: the node of a scripted ``delete`` step says delete."""
    thread_id = (await client.call("thread.create"))["threadId"]
    sent = await run(daemon, "send", thread_id, script({"write": {"path": "gone.txt", "content": "x"}},
                                                       {"delete": {"path": "gone.txt"}}))
    out = sent.stdout.decode()
    assert "[file_change] write gone.txt: completed" in out and "[file_change] delete gone.txt: completed" in out


async def test_providers_shows_what_an_instance_really_does_even_without_its_binary(tmp_path, short_dir):
    """Issue 28 item 3: a Claude instance says it cannot steer or roll back
    (its native capabilities), also when its binary is missing here."""
    config = tmp_path / "config.toml"
    config.write_text('[providers.claude]\nkind = "claude"\nbinary = "/nonexistent/claude"\n')
    daemon = await start_daemon(tmp_path / "data", short_dir / "s.sock", config=config)
    try:
        listed = {p["name"]: p for p in json.loads((await run(daemon, "providers", "--json")).stdout)["providers"]}
        caps = listed["claude"]["capabilities"]
        assert listed["claude"]["usable"] is False
        assert (caps["steer"], caps["rollback"], caps["interrupt"], caps["nativeFork"]) == (False, False, True, True)
        lines = (await run(daemon, "providers")).stdout.decode().splitlines()
        claude = lines.index(next(line for line in lines if line.startswith("claude")))
        assert "cannot: steer, rollback" in lines[claude + 1]
    finally:
        await daemon.terminate()

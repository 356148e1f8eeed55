"""The ``agentd`` command line against a real daemon (F20), as a person uses it."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest
import trio

from agentd.main import build_parser
from tests.cli_helpers import agentd_argv, run
from tests.helpers import script


def agentd(daemon, *args: str) -> list[str]:
    return agentd_argv(daemon, *args)


async def test_new_send_show_threads_status(daemon):
    thread_id = (await run(daemon, "new", "--title", "cli")).stdout.decode().strip()
    assert thread_id.startswith("thr_")
    sent = await run(daemon, "send", thread_id, "hello there")
    assert "You said: hello there" in sent.stdout.decode()
    assert "run 1 completed" in sent.stderr.decode()
    sent = await run(daemon, "send", thread_id, script({"write": {"path": "f.txt", "content": "x"}}))
    assert "[file_change] write f.txt: completed" in sent.stdout.decode()
    shown = (await run(daemon, "show", thread_id)).stdout.decode()
    assert "run 2" in shown and "file_change write f.txt completed" in shown
    threads = json.loads((await run(daemon, "threads", "--json")).stdout)
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
    assert result.returncode == 1 and "no daemon is listening" in result.stderr


def serve_once(tmp_path, short_dir, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``agentd serve`` expected to refuse to start (a started daemon would time out)."""
    return subprocess.run(
        [sys.executable, "-m", "agentd", "serve", "--data-dir", str(tmp_path / "d"), "--socket", str(short_dir / "s.sock"), *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )


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
    assert "unrecognized arguments: --config" in result.stderr


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
    process = await trio.lowlevel.open_process(agentd(daemon, "send", thread_id, text), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    buffer = b""
    with trio.fail_after(60):
        while b"answer with" not in buffer:
            chunk = await process.stdout.receive_some(4096)
            assert chunk, buffer.decode()
            buffer += chunk
    line = next(l for l in buffer.decode().splitlines() if l.startswith("[approval needed: make deploy]"))
    request_id = line.split()[-1]
    assert request_id.startswith("req_")
    approved = await run(daemon, "approve", request_id, "--deny")
    assert "resolved" in approved.stdout.decode()
    with trio.fail_after(60):
        while True:
            chunk = await process.stdout.receive_some(4096)
            if not chunk:
                break
            buffer += chunk
        await process.wait()
    assert "approval: decline" in buffer.decode()
    assert process.returncode == 0


async def test_send_answers_questions_at_a_terminal(daemon):
    """Attached to a terminal, ``agentd send`` asks the person and answers."""
    thread_id = (await run(daemon, "new")).stdout.decode().strip()
    text = script({"ask": {"questions": [{"id": "color", "question": "Which color?", "options": ["red", "blue"]}]}})
    leader, follower = pty.openpty()
    process = await trio.lowlevel.open_process(agentd(daemon, "send", thread_id, text), stdin=follower, stdout=subprocess.PIPE)
    os.close(follower)
    buffer = b""
    with trio.fail_after(60):
        while b"answers:" not in buffer:
            chunk = await process.stdout.receive_some(4096)
            assert chunk, buffer.decode()
            buffer += chunk
            if b"[question: Which color?]" in buffer and b"answered" not in buffer:
                os.write(leader, b"blue\n")
                buffer += b"answered"
        await process.wait()
    os.close(leader)
    assert "answers: color=blue" in buffer.decode()
    assert process.returncode == 0


async def test_stop_and_interrupt_commands(daemon):
    thread_id = (await run(daemon, "new")).stdout.decode().strip()
    hang = script({"tool": {"name": "forever", "hang": True}})
    process = await trio.lowlevel.open_process(agentd(daemon, "send", thread_id, hang), stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    buffer = b""
    with trio.fail_after(60):
        while b"forever: started" not in buffer:
            chunk = await process.stdout.receive_some(4096)
            assert chunk, buffer.decode()
            buffer += chunk
    stopped = await run(daemon, "stop", thread_id)
    assert "are held" in stopped.stdout.decode()
    with trio.fail_after(60):
        await process.wait()
    assert process.returncode == 1, "the run ended interrupted"
    shown = (await run(daemon, "show", thread_id)).stdout.decode()
    assert "interrupted" in shown

"""The rough edges a new user of ``agentd`` hit (issue 28) and what its
client commands load (issue 24, section 5), through the CLI as a person
uses it (F20)."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest

from agentd.main import build_parser
from tests.cli_helpers import first_line, run, spawn
from tests.helpers import script, send_and_wait, wait_event, wait_run_terminal


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (conftest's): these tests need only threads of
    their own (issue 28 item 13); a test about everything it holds takes
    ``own_daemon``."""
    return module_daemon

HANG = script({"tool": {"name": "long job", "hang": True}})


async def new_thread(daemon) -> str:
    return (await run(daemon, "new")).stdout.decode().strip()


# -- options anywhere (issue 28, 1) -------------------------------------------------------------


@pytest.mark.parametrize("flags", [["--steer"], ["--restart"], ["--queue"], ["--detach"], ["--provider", "codex"],
                                   ["--queue", "--detach"], ["--file", "m.txt"]], ids=" ".join)
def test_send_takes_its_options_between_thread_and_text(flags):
    args = build_parser().parse_args(["send", "T", *flags, "use ninja"])
    assert (args.thread, args.text) == ("T", "use ninja")
    before = build_parser().parse_args(["send", *flags, "T", "use ninja"])
    assert vars(before) == vars(args)


@pytest.mark.parametrize(("argv", "expected"), [
    (["--socket", "S", "--data-dir=D", "show", "T"], ["show", "--socket", "S", "--data-dir=D", "T"]),
    (["--json", "threads", "--socket", "S"], ["threads", "--json", "--socket", "S"]),
    (["--version"], ["--version"]), (["--socket", "S"], ["--socket", "S"]), (["show", "--json", "T"], ["show", "--json", "T"]),
], ids=str)
def test_where_the_daemon_is_may_also_come_before_the_command(argv, expected):
    from agentd.main import command_first

    assert command_first(argv) == expected


async def test_options_before_the_command_reach_it(own_daemon):
    daemon = own_daemon  # `agentd threads` lists every thread: only this test's
    thread_id = await new_thread(daemon)
    where = ["--data-dir", str(daemon.data_dir), f"--socket={daemon.socket}"]
    result = subprocess.run([sys.executable, "-m", "agentd", *where, "--json", "threads"], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert [t["id"] for t in json.loads(result.stdout)["threads"]] == [thread_id]


async def test_the_readmes_steer_line_steers_the_active_run(daemon, client):
    thread_id = await new_thread(daemon)
    first = (await run(daemon, "send", thread_id, "--detach", script(
        {"approval": {"kind": "command", "command": "make"}}, {"say": "done"}))).stdout.decode().strip()
    request = (await wait_event(client, lambda e: e["type"] == "approval.requested", thread_id=thread_id))["payload"]["request"]
    steered = await run(daemon, "send", thread_id, "--steer", "use ninja", "--detach")
    assert steered.stdout.decode().strip() == first, "a steer joins the active run"
    await run(daemon, "approve", request["id"])
    assert (await wait_run_terminal(client, thread_id, first))["status"] == "completed"
    texts = [m["text"] for m in (await client.call("thread.get", threadId=thread_id))["messages"]]
    assert "use ninja" in texts and any("steered: use ninja" in t for t in texts)


# -- errors in CLI terms (issue 28, 9) ----------------------------------------------------------


async def test_errors_name_the_cli_command_not_the_protocol_method(daemon, client):
    thread_id = await new_thread(daemon)
    active = (await run(daemon, "send", thread_id, HANG, "--detach")).stdout.decode().strip()
    await wait_event(client, lambda e: e["type"] == "tool.started", thread_id=thread_id)
    queued = (await run(daemon, "send", thread_id, "later", "--queue", "--detach")).stdout.decode().strip()
    checkpoint = (await client.call("checkpoint.list", threadId=thread_id))["checkpoints"][0]["id"]
    cases = [
        (["interrupt", queued], f"agentd: run {queued} is queued, not running: cancel it with `agentd cancel {queued}`"),
        (["cancel", active], f"agentd: run {active} is running, not queued: interrupt it with `agentd interrupt {active}`"),
        (["restore", checkpoint], f"agentd: thread {thread_id} has run {active} running: stop it (`agentd stop {thread_id}`) "
                                  "before restoring a checkpoint"),
        (["rollback", thread_id, "0", "--yes"], f"agentd: thread {thread_id} has run {active} running: stop it "
                                                f"(`agentd stop {thread_id}`) before rolling back"),
    ]
    for args, line in cases:
        result = await run(daemon, *args, check=False)
        assert (result.returncode, result.stderr.decode().splitlines()) == (1, [line]), args
    last = (await client.call("daemon.status"))["lastSeq"]
    beyond = await run(daemon, "events", "--after", str(last + 100), check=False)
    assert (beyond.returncode, first_line(beyond.stderr)) == (
        1, f"agentd: --after {last + 100} is beyond the last event ({last}); use --after 0 or a seq this daemon printed")
    await run(daemon, "stop", thread_id)


@pytest.mark.parametrize("args", [["events", "--after", "-5"], ["events", "--after", "x"], ["rollback", "T", "-1", "--yes"]],
                         ids=" ".join)
async def test_a_negative_sequence_or_ordinal_is_a_usage_error(daemon, args):
    result = await run(daemon, *args, check=False)
    assert result.returncode == 2 and result.stdout == b""
    assert first_line(result.stderr).endswith(f"; see `agentd {args[0]} --help`"), result.stderr


def test_every_protocol_phrase_is_said_in_cli_terms():
    from agentd.messages import in_cli_terms

    data = {"threadId": "thr_a", "runId": "run_b"}
    said = {
        "lift it with thread.unquarantine (agentd unquarantine thr_a) or restart": "lift it with `agentd unquarantine thr_a` or restart",
        "stop one (thread.stop), or raise the limit": "stop one (`agentd stop THREAD`), or raise the limit",
        "send with dispatchMode queue_after_active to run after it, or steer_active to change it":
            "send with --queue to run after it, or --steer to change it",
        "subscriber fell behind; resubscribe with afterSeq=7": "subscriber fell behind; resume with `agentd events --after 7`",
        "restore it with checkpoint.restore and include naming the folder":
            "restore it with `agentd restore CHECKPOINT --include FOLDER`",
        "no thread thr_a; list threads with thread.list": "no thread thr_a; `agentd threads` lists the threads",
        "invalid params for events.subscribe: Expected `int` >= 0 - at `$.afterSeq`": "--after: expected `int` >= 0",
        "invalid params for thread.fork: Expected `str` - at `$.sourcePoint.runId`": "--from: expected `str`",
        "invalid params for thread.search: Expected `str` of length >= 1 - at `$.query`":
            "QUERY: expected `str` of length >= 1",
    }
    assert {message: in_cli_terms(message, data) for message in said} == said


# -- one --json rule (issue 28, 11) -------------------------------------------------------------


async def test_json_is_the_methods_result_object_for_every_command(own_daemon, own_client):
    daemon, client = own_daemon, own_client  # `threads` and `status` against the daemon's answers: nothing else in it
    thread_id = await new_thread(daemon)
    first = await send_and_wait(client, thread_id, "hello")
    ran = await send_and_wait(client, thread_id, "again", provider="scripted", cleanContext=True)
    handoff = (await client.call("run.get", runId=ran["id"]))["attempts"][0]["handoffId"]
    same = {
        ("threads",): ("thread.list", {}),
        ("providers",): ("providers.list", {}),
        ("status",): ("daemon.status", {}),
        ("lineage", thread_id): ("thread.transfers", {"threadId": thread_id}),
        ("requests", thread_id): ("thread.requests", {"threadId": thread_id}),
        ("checkpoints", thread_id): ("checkpoint.list", {"threadId": thread_id}),
        ("handoff", handoff): ("handoff.get", {"handoffId": handoff}),
    }
    volatile = {"uptime", "subscribers", "loadedActors", "sessions"}  # daemon.status changes between two calls
    for args, (method, params) in same.items():
        printed = json.loads((await run(daemon, *args, "--json")).stdout)
        answered = await client.call(method, **params)
        assert isinstance(printed, dict) and set(printed) == set(answered), args
        assert {k: v for k, v in printed.items() if k not in volatile} == {k: v for k, v in answered.items() if k not in volatile}
    shown = json.loads((await run(daemon, "show", thread_id, "--json")).stdout)
    detail = await client.call("thread.get", threadId=thread_id)
    assert {k: shown[k] for k in detail} == detail, "show: thread.get's answer as it is"
    assert [d["run"]["id"] for d in shown["runDetails"]] == [first["id"], ran["id"]] and shown["requests"] == []


# -- the question prompt (issue 28, 10) ---------------------------------------------------------


async def test_at_the_prompt_a_number_picks_an_option_and_a_non_option_is_asked_again(daemon):
    thread_id = await new_thread(daemon)
    text = script({"ask": {"questions": [{"id": "color", "question": "Which color?", "options": ["red", "blue"]},
                                         {"id": "size", "question": "How big?"}]}})
    leader, follower = pty.openpty()
    try:
        async with spawn(daemon, "send", thread_id, text, stdin=follower) as send:
            os.close(follower)
            await send.wait_for("Which color? [1 red, 2 blue] ")
            os.write(leader, b"green\n")
            await send.wait_for("agentd: 'green' is not an option; type its number (1-2) or its text", on="err")
            os.write(leader, b"2\n")
            await send.wait_for("How big? ")
            os.write(leader, b"7\n")  # no options: the text itself
            assert await send.finish() == 0
    finally:
        os.close(leader)
    assert "answers: color=blue, size=7" in send.out.decode()


def test_choose_an_option():
    from agentd.stream import choose

    question = {"options": ["red", "blue", "3"]}
    assert [choose(question, r) for r in ("blue", "BLUE", "1", "3", "4", "", "green")] == [
        "blue", "blue", "red", "3", None, None, None]
    assert choose({**question, "allowOther": True}, "green") == "green"
    assert choose({"question": "free"}, "anything") == "anything"


# -- shell completion (issue 28, 12) ------------------------------------------------------------


def completion(shell: str) -> str:
    return subprocess.run([sys.executable, "-m", "agentd", "completion", shell], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def test_bash_sources_the_completion_script_and_completes_commands_and_options():
    script_text = completion("bash")
    probe = (f"source /dev/stdin <<'EOF'\n{script_text}EOF\n"
             "complete -p agentd\n"
             "complete_words() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); _agentd; echo \"${COMPREPLY[*]}\"; }\n"
             "complete_words agentd se\n"
             "complete_words agentd send T --st\n"
             "complete_words agentd completion ''\n")
    done = subprocess.run(["bash", "--norc", "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["complete -o bashdefault -o default -F _agentd agentd",
                                        "serve search send", "--steer", "bash zsh fish"]


async def test_bash_completes_a_thread_argument_with_the_daemons_thread_ids(own_daemon, tmp_path):
    daemon = own_daemon  # it completes every thread id: only this test's
    thread_id = await new_thread(daemon)
    shim = tmp_path / "bin" / "agentd"  # the agentd on PATH the script calls, whatever the install
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m agentd \"$@\"\n")
    shim.chmod(0o755)
    where = f"--data-dir {daemon.data_dir} --socket {daemon.socket}"
    probe = (f"source /dev/stdin <<'EOF'\n{completion('bash')}EOF\n"
             # completes the word after its arguments, an empty one
             "c() { COMP_WORDS=(\"$@\" ''); COMP_CWORD=$#; _agentd; echo \"[${COMPREPLY[*]}]\"; }\n"
             f"c agentd show {where}\n"  # THREAD
             f"c agentd events {where} --thread\n"  # --thread's value
             f"c agentd send {where} {thread_id}\n"  # TEXT: nothing to offer
             f"c agentd reorder {where} {thread_id}\n")  # RUN…
    done = subprocess.run(["bash", "--norc", "-c", probe], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"[{thread_id}]", f"[{thread_id}]", "[]", "[]"]


def test_bash_sources_it_from_process_substitution_as_the_readme_says():
    argv = " ".join([sys.executable, "-m", "agentd", "completion", "bash"])
    done = subprocess.run(["bash", "--norc", "-c", f"source <({argv}) && complete -p agentd"],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, "complete -o bashdefault -o default -F _agentd agentd\n"), done.stderr


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_name_every_command_and_option(shell):
    from agentd.completion import command_specs

    text = completion(shell)
    for spec in command_specs(build_parser()):
        assert spec.name in text
        for option in spec.options:
            long = [f for f in option.flags if f.startswith("--")][0]
            assert (long if shell == "zsh" else f"-l {long[2:]}") in text, (spec.name, long)


# -- what client commands load (issue 24, section 5) ------------------------------------------

#: modules a client command that asks and prints never needs
HEAVY = ("trio", "msgspec", "agentd.actors", "agentd.store", "agentd.protocol.client", "agentd.supervisor.daemon")


def loaded_by(*argv: str) -> tuple[int, list[str]]:
    """Run ``agentd ARGV`` in a fresh interpreter; its exit code and the heavy modules it imported."""
    code = ("import sys\nfrom agentd.main import main\n"
            "try:\n    code = main(sys.argv[1:])\nexcept SystemExit as exc:\n    code = exc.code\n"
            f"heavy = sorted(m for m in sys.modules if m.startswith({HEAVY!r}))\n"
            "print(code, *heavy, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    status, *heavy = done.stderr.splitlines()[-1].split()
    return int(status), heavy


async def test_version_threads_and_show_import_neither_trio_nor_the_daemon(daemon):
    thread_id = await new_thread(daemon)
    await run(daemon, "send", thread_id, "hello")
    where = ["--data-dir", str(daemon.data_dir), "--socket", str(daemon.socket)]
    assert loaded_by("--version") == (0, [])
    assert loaded_by("threads", *where) == (0, [])
    assert loaded_by("show", thread_id, *where) == (0, [])
    assert loaded_by("show", "thr_missing", *where) == (1, []), "an error is reported without them too"

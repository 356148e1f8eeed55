"""An agent's control codes are shown, not obeyed, at the person's terminal
(SPEC F20): an answer, a command or a file name holding ``ESC ] 52`` (the
clipboard), cursor moves, ``\\r`` or a bidi override reached the terminal raw
through ``agentd send`` and ``agentd show``. Pipes get the text as it is."""

from __future__ import annotations

import os
import pty
import subprocess

import trio

from agentd.terminal_text import shown
from tests.cli_helpers import agentd_argv, run
from tests.helpers import script

HOSTILE = "a \x1b]52;c;ZWNobyBwd25lZA==\x07 b \x1b[2J\x1b[1A c\rd \x1b[8mhidden\x1b[0m \u202eevil \x9b5n"


def test_control_codes_become_visible_marks_and_the_clis_colours_pass():
    assert shown(HOSTILE) == ("a ^[]52;c;ZWNobyBwd25lZA==^G b ^[[2J^[[1A c^Md ^[[8mhidden\x1b[0m <U+202E>evil "
                              "<U+009B>5n")
    assert shown("\x1b[32m+added\x1b[0m\n\ttab") == "\x1b[32m+added\x1b[0m\n\ttab"
    assert shown("plain ünïcode") == "plain ünïcode"


def at_terminal(argv: list[str]) -> str:
    """What ``argv`` writes to a terminal (a pty), both streams."""
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
        os.close(follower)
        out = b""
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the pty's other end closed
                break
            if not data:
                break
            out += data
        assert process.wait(timeout=60) == 0
    finally:
        os.close(leader)
    return out.decode(errors="replace")


async def test_send_and_show_at_a_terminal_show_an_agents_escape_codes(daemon):
    thread_id = (await run(daemon, "new")).stdout.decode().strip()
    message = script({"say": HOSTILE}, {"command": {"argv": ["printf", "\\033]0;TITLE\\007"]}})
    sent = await trio.to_thread.run_sync(at_terminal, agentd_argv(daemon, "send", thread_id, message))
    shown_answer = await trio.to_thread.run_sync(at_terminal, agentd_argv(daemon, "show", thread_id))
    for out in (sent, shown_answer):
        assert "\x1b]" not in out and "\x07" not in out and "\u202e" not in out and "\x9b" not in out, out
        assert "^[]52;c;" in out
    piped = (await run(daemon, "show", thread_id)).stdout.decode()
    assert "\x1b]52;c;" in piped, "a pipe gets the text as it is"

"""A runtime's ``stderr.log`` replaced by an agent's command never stops the
daemon (SPEC F20): a FIFO in its place made the next session's start wait on
the event loop for a reader — every thread and every client with it — and a
symlink sent the log wherever it pointed. It is agentd's own file: whatever
stands in its place is removed and the file made anew."""

from __future__ import annotations

import os

import trio

from tests.helpers import script, send_and_wait


async def test_a_fifo_or_a_symlink_in_place_of_the_stderr_log_is_replaced(client, data_dir, tmp_path):
    first = (await client.call("thread.create"))["threadId"]
    assert (await send_and_wait(client, first, "hi"))["status"] == "completed"
    log = data_dir / "providers" / "scripted" / "stderr.log"
    assert log.is_file()
    outside = tmp_path / "outside.txt"
    outside.write_text("the user's file\n")
    for swap in (f"mkfifo {log}", f"ln -s {outside} {log}"):
        run = await send_and_wait(client, first, script({"command": {"argv": ["sh", "-c", f"rm -f {log} && {swap}"]}}))
        assert run["status"] == "completed"
        other = (await client.call("thread.create"))["threadId"]  # a new session: its runtime is spawned
        with trio.fail_after(30):
            assert (await send_and_wait(client, other, "still there?"))["status"] == "completed"
            await client.call("daemon.status")
        assert log.is_file() and not log.is_symlink(), swap
    assert outside.read_text() == "the user's file\n", "nothing was written through the symlink"
    assert oct(os.stat(log).st_mode & 0o777) == oct(0o600)

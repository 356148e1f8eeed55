"""``agentd search``, ``export``, ``rename`` and ``rm`` against a real daemon
(issue 28): ``rm`` asks at a terminal and needs ``--yes`` elsewhere."""

from __future__ import annotations

import json
import os
import pty

import pytest

from agentd.protocol.client import Client
from tests.cli_helpers import run, spawn
from tests.helpers import send_and_wait


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (issue 28 item 13): each test works on threads of
    its own and searches for words only they hold."""
    return module_daemon


async def _thread(daemon, title: str, text: str) -> str:
    async with Client.connect(daemon.socket) as client:
        thread_id = (await client.call("thread.create", title=title))["threadId"]
        await send_and_wait(client, thread_id, text)
    return thread_id


async def test_search_export_and_rename(daemon, tmp_path):
    thread_id = await _thread(daemon, "Capybara notes", "tell me about capybaras")
    out = (await run(daemon, "search", "capybara*")).stdout.decode().splitlines()
    assert out[0].startswith(thread_id) and any("[title] **Capybara** notes" in line for line in out)
    assert len(out) == 3  # the title, the message and the answer
    hits = json.loads((await run(daemon, "search", "capybaras", "--json", "--limit", "1")).stdout)["hits"]
    assert len(hits) == 1 and hits[0]["threadId"] == thread_id
    bad = await run(daemon, "search", '"open', check=False)
    assert bad.returncode != 0 and "not valid" in bad.stderr.decode()

    markdown = (await run(daemon, "export", thread_id)).stdout.decode()
    assert markdown.startswith("# Capybara notes") and "> tell me about capybaras" in markdown
    target = tmp_path / "t.json"
    await run(daemon, "export", thread_id, "--format", "json", "-o", str(target))
    assert json.loads(target.read_text())["thread"]["id"] == thread_id

    assert "now titled 'Giant rodents'" in (await run(daemon, "rename", thread_id, "Giant rodents")).stdout.decode()
    assert "already has that title" in (await run(daemon, "rename", thread_id, "Giant rodents")).stdout.decode()
    assert "[title] **Giant** rodents" in (await run(daemon, "search", "giant")).stdout.decode()


async def test_rm_asks_at_a_terminal_and_needs_yes_elsewhere(daemon):
    thread_id = await _thread(daemon, "to remove", "gone soon")
    refused = await run(daemon, "rm", thread_id, check=False)
    assert refused.returncode == 2 and "--yes" in refused.stderr.decode()

    leader, follower = pty.openpty()
    try:
        async with spawn(daemon, "rm", thread_id, stdin=follower) as cmd:
            os.close(follower)
            await cmd.wait_for("Delete it? [y/N]")
            os.write(leader, b"n\n")
            assert await cmd.finish() == 1
    finally:
        os.close(leader)
    assert "1 run(s), 2 message(s)" in cmd.err.decode() and "nothing was deleted" in cmd.err.decode()
    assert (await run(daemon, "show", thread_id)).returncode == 0

    done = await run(daemon, "rm", thread_id, "--yes")
    assert f"deleted thread {thread_id}: 1 run(s), 2 message(s)" in done.stdout.decode()
    gone = await run(daemon, "show", thread_id, check=False)
    assert gone.returncode != 0
    assert (await run(daemon, "search", "gone")).stdout == b""


async def test_a_fork_of_a_deleted_thread_says_its_source_was_deleted(daemon):
    source = await _thread(daemon, "source", "first words")
    async with Client.connect(daemon.socket) as client:
        fork = (await client.call("thread.fork", threadId=source))["threadId"]
    assert "(fork), root" in (await run(daemon, "lineage", fork)).stdout.decode()
    await run(daemon, "rm", source, "--yes")
    lineage = (await run(daemon, "lineage", fork)).stdout.decode()
    assert f"parent {source} (fork, deleted)" in lineage
    assert "fork of " + source in lineage  # the transfer that made it is kept


async def test_titles_queries_and_output_files_are_refused_in_a_persons_words(daemon, tmp_path):
    """Issue 28 item 9, found by hand: `rename` refused a 129-character title
    as "the title id" although titles may have 500; an empty or overlong
    query answered in the protocol's words; an unwritable `-o` was an
    "unexpected error"."""
    thread_id = await _thread(daemon, "limits", "about limits")
    long_title = "t" * 400  # longer than any id, within a title's 500
    assert "now titled" in (await run(daemon, "rename", thread_id, long_title)).stdout.decode()
    for argv, said in (
        (["rename", thread_id, "x" * 501], "the title is 501 characters; it may have at most 500"),
        (["rename", thread_id, "  "], "the title is empty"),
        (["new", "--title", "y" * 600], "the title is 600 characters; it may have at most 500"),
        (["fork", thread_id, "--title", "z" * 501], "the title is 501 characters"),
        (["search", ""], "the search query is empty"),
        (["search", "q" * 1001], "the search query is 1,001 characters; it may have at most 1,000"),
    ):
        refused = await run(daemon, *argv, check=False)
        err = refused.stderr.decode()
        assert refused.returncode == 2 and said in err and "$." not in err and " id " not in err, (argv, err)
    unwritable = await run(daemon, "export", thread_id, "-o", str(tmp_path / "no-such-dir" / "t.md"), check=False)
    err = unwritable.stderr.decode()
    assert unwritable.returncode == 1 and "cannot write" in err and "No such file" in err and "unexpected" not in err


def test_the_clis_text_limits_are_the_protocols():
    """The CLI keeps its own copies (importing protocol/wire.py loads msgspec)."""
    import msgspec

    from agentd import parser
    from agentd.protocol import wire

    title_meta = [m for m in wire.Title.__metadata__ if isinstance(m, msgspec.Meta)][0]
    assert parser.MAX_TITLE == title_meta.max_length
    assert parser.MAX_QUERY == wire.MAX_QUERY

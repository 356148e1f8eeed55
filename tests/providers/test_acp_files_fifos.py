"""An ACP agent's ``fs/read_text_file`` / ``fs/write_text_file`` on a named
pipe (FIFO) it made in the workspace is refused at once (SPEC F20, issue 25):
a plain open of a FIFO waits forever for its other end, which would leave a
worker thread of the daemon waiting and the agent's request unanswered."""

from __future__ import annotations

import os

import pytest
import trio

from agentd.actors.providers import acp_files
from agentd.actors.providers.base import ProviderRuntimeError


async def test_reading_or_writing_a_fifo_is_refused_not_waited_on(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.mkfifo(workspace / "pipe")
    with trio.fail_after(10):
        with pytest.raises(ProviderRuntimeError) as read:
            await acp_files.read_text(str(workspace), str(workspace / "pipe"))
        with pytest.raises(ProviderRuntimeError) as written:
            await acp_files.write_text(str(workspace), str(workspace / "pipe"), "into the pipe?")
    assert "named pipe" in str(read.value) and "named pipe" in str(written.value)
    (workspace / "f.txt").write_text("one\ntwo\nthree\n")
    assert await acp_files.read_text(str(workspace), str(workspace / "f.txt"), line=2, limit=1) == "two\n"


async def test_a_read_through_a_folder_swapped_for_a_symlink_after_the_check_is_refused(tmp_path):
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    (workspace / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("outside")
    (workspace / "sub" / "secret.txt").write_text("inside")
    target = acp_files.confined(str(workspace), str(workspace / "sub" / "secret.txt"))
    (workspace / "sub" / "secret.txt").unlink()
    (workspace / "sub").rmdir()
    (workspace / "sub").symlink_to(outside)  # the swap, after the check
    with pytest.raises(acp_files.OutsideWorkspace):
        acp_files._read(os.path.realpath(workspace), target, None, None)


async def test_a_write_to_a_hard_link_of_a_file_outside_leaves_that_file_alone(tmp_path):
    """An agent a sandbox keeps to its workspace can still ``ln ~/.bashrc x``
    there; ``fs/write_text_file`` of ``x`` replaces the workspace's name with a
    new file (its mode kept) and never writes into the linked one."""
    workspace, outside = tmp_path / "ws", tmp_path / "bashrc"
    workspace.mkdir()
    outside.write_text("the user's own\n")
    os.link(outside, workspace / "x")
    os.chmod(workspace / "x", 0o640)
    written = await acp_files.write_text(str(workspace), str(workspace / "x"), "the agent's\n")
    assert written.before == "the user's own\n"
    assert outside.read_text() == "the user's own\n", "the file outside is untouched"
    assert (workspace / "x").read_text() == "the agent's\n"
    assert os.stat(workspace / "x").st_mode & 0o777 == 0o640
    assert sorted(p.name for p in workspace.iterdir()) == ["x"], "no temporary file left"


async def test_a_path_with_a_nul_byte_is_the_agents_error_not_its_sessions_end(tmp_path):
    """``fs/read_text_file`` of ``"/ws/a\\u0000b"`` raised ValueError out of the
    request's task, which ended the agent's whole connection."""
    from types import SimpleNamespace

    from agentd.actors.providers.acp_client import INVALID_PARAMS, AgentRequests

    answered: list[tuple] = []

    class Peer:
        async def respond(self, request_id, result):
            answered.append(("result", request_id, result))

        async def respond_error(self, request_id, code, message):
            answered.append(("error", request_id, code, message))

    async with trio.open_nursery() as nursery:
        requests = AgentRequests(None, Peer(), None, nursery, {"s1": SimpleNamespace(cwd=str(tmp_path))})
        await requests._answer(7, "fs/read_text_file", {"sessionId": "s1", "path": str(tmp_path / "a\x00b")})
        (tmp_path / "f.txt").write_text("fine")
        await requests._answer(8, "fs/read_text_file", {"sessionId": "s1", "path": str(tmp_path / "f.txt")})
        requests.close()
    assert answered[0] == ("error", 7, INVALID_PARAMS, "fs/read_text_file: embedded null byte")
    assert answered[1][:2] == ("result", 8), "the same connection answers the next request"

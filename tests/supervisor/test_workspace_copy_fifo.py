"""A delegated task's ``workspace: fork`` copy never opens a named pipe
(SPEC F9, F20): an agent's ``mkfifo`` in the parent's workspace made the copy
wait forever in a worker thread, and the delegate_task call with it. Regular
files, folders and symlinks are copied; a FIFO is left out."""

from __future__ import annotations

import os

import trio

from agentd.supervisor import workspace_copy


async def test_a_fork_copy_leaves_a_fifo_out_and_copies_the_rest(tmp_path):
    source, target = tmp_path / "ws", tmp_path / "copy"
    (source / "sub").mkdir(parents=True)
    (source / "sub" / "f.txt").write_text("content")
    os.mkfifo(source / "pipe")
    os.symlink("sub/f.txt", source / "link")
    with trio.fail_after(20):
        copied = await workspace_copy.copy_workspace(str(source), target, limit=1 << 20)
    assert copied == len("content")
    assert (target / "sub" / "f.txt").read_text() == "content"
    assert os.readlink(target / "link") == "sub/f.txt"
    assert not os.path.lexists(target / "pipe")

"""A message's images are files of agentd's own (issue 26): a folder of them
swapped for a symlink by a process of the user (an agent's command) is
refused, never written through, and the thread stays usable (F20)."""

from __future__ import annotations

import base64
import os

import pytest

from agentd.protocol.errors import AgentdError
from tests.helpers import script, send_and_wait, wait_run_terminal

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def image(data: str = PNG) -> list[dict[str, str]]:
    return [{"type": "image", "mimeType": "image/png", "data": data}]


async def test_an_images_folder_swapped_for_a_symlink_is_refused_not_written_through(client, data_dir, tmp_path):
    thread_id = (await client.call("thread.create"))["threadId"]
    sent = await client.call("thread.message.send", threadId=thread_id, text=script({"reportImages": True}),
                             attachments=image())
    folder = data_dir / "attachments" / thread_id
    assert [p.name for p in folder.iterdir()], "the image is kept as a file of the thread's"
    assert (await wait_run_terminal(client, thread_id, sent["runId"]))["status"] == "completed"
    outside = tmp_path / "outside"
    outside.mkdir()
    for kept in folder.iterdir():
        kept.unlink()
    folder.rmdir()
    os.symlink(outside, folder)
    other = base64.b64encode(base64.b64decode(PNG) + b"more").decode()
    with pytest.raises(AgentdError) as refused:
        await client.call("thread.message.send", threadId=thread_id, text="again", attachments=image(other))
    assert "symlink" in refused.value.message
    assert list(outside.iterdir()) == [], "nothing was written where the symlink points"
    run = await send_and_wait(client, thread_id, "without images")
    assert run["status"] == "completed", "the thread is still usable"

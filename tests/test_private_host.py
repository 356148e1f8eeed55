"""A hostile host (issue 9): agents die with a SIGKILLed daemon while what
their tools started is left alone (F12), and what the daemon keeps is
private to its user."""

from __future__ import annotations

import os
import stat


from agentd.actors.providers.procinfo import process_start_ticks
from agentd.launch import start_daemon
from agentd.protocol.client import Client

from .helpers import script, wait_event, wait_process_gone


async def test_a_sigkilled_daemon_takes_its_agents_but_not_their_tools_processes(tmp_path, short_dir):
    data_dir = tmp_path / "d"
    proc = await start_daemon(data_dir, short_dir / "g.sock")
    background = None
    try:
        async with Client.connect(proc.socket) as client:
            thread_id = (await client.call("thread.create"))["threadId"]
            await client.call("thread.message.send", threadId=thread_id, text=script(
                {"tool": {"name": "server", "background": True, "seconds": 0}},
                {"hang": True, "ignoreInterrupt": True},
            ))
            started = await wait_event(
                client, lambda e: e["type"] == "tool.completed", thread_id=thread_id,
            )
            background = started["payload"]["node"]["detail"]["pid"]
            (session,) = (await client.call("daemon.status"))["sessions"]
            agent = session["pid"]
        await proc.kill()
        await wait_process_gone(agent)  # the guard killed it: no daemon start needed
        assert process_start_ticks(background) is not None, "a tool's own process is not agentd's to kill"
        # The next start reports what the old runtime's tools left running.
        proc = await start_daemon(data_dir, short_dir / "g.sock")
        async with Client.connect(proc.socket) as client:
            warning = await wait_event(client, lambda e: e["type"] == "runtime.warning", thread_id=thread_id)
        assert background in warning["payload"]["pids"]
        assert str(background) in warning["payload"]["message"]
        assert process_start_ticks(background) is not None
        await proc.terminate()
    finally:
        await proc.kill()
        if background is not None and process_start_ticks(background) is not None:
            os.kill(background, 9)


async def test_the_data_dir_and_what_it_holds_are_private(tmp_path, short_dir):
    data_dir = tmp_path / "d"
    data_dir.mkdir(mode=0o755)
    os.chmod(data_dir, 0o755)
    proc = await start_daemon(data_dir, short_dir / "p.sock")
    try:
        assert stat.S_IMODE(os.stat(data_dir).st_mode) == 0o700
        async with Client.connect(proc.socket) as client:
            thread_id = (await client.call("thread.create"))["threadId"]
            from .helpers import send_and_wait

            run = await send_and_wait(client, thread_id, "hello")
            assert run["status"] == "completed"
        for path in (data_dir / "providers").rglob("*"):
            if path.is_file():
                assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0, f"{path} is readable by others"
    finally:
        await proc.terminate()

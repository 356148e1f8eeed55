"""The launcher ties a daemon's life to its launcher's process, not to the
thread that forked it (issue 9, defect 1), and repeated signals never turn an
orderly shutdown into a death by signal (defect 9)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import trio

from agentd.launch import start_daemon
from agentd.protocol.client import Client

from tests.helpers import wait_process_gone

LAUNCHER = textwrap.dedent("""
    import sys, threading, trio
    from agentd.launch import start_daemon

    box = {}

    def launch():
        async def main():
            box["daemon"] = await start_daemon(sys.argv[1], sys.argv[2])
        trio.run(main)

    # The daemon is started from a thread that then ends, as trio's worker
    # threads do: its life must not follow that thread's.
    thread = threading.Thread(target=launch)
    thread.start()
    thread.join()
    print(box["daemon"].pid, flush=True)
    sys.stdin.read()  # until the test kills us
""")


async def test_the_daemon_outlives_its_launching_thread_and_dies_with_its_launcher(tmp_path, short_dir):
    data_dir, sock = tmp_path / "d", short_dir / "a.sock"
    launcher = await trio.lowlevel.open_process(
        [sys.executable, "-c", LAUNCHER, str(data_dir), str(sock)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )
    try:
        with trio.fail_after(60):
            line = b""
            while not line.endswith(b"\n"):
                line += await launcher.stdout.receive_some(64)
        pid = int(line)
        async with Client.connect(sock) as client:
            assert (await client.call("daemon.status"))["pid"] == pid
        launcher.kill()
        await launcher.wait()
        await wait_process_gone(pid)
        log = (data_dir / "daemon.log").read_text()
        assert "the process that launched agentd is gone" in log
        assert "Traceback" not in log
        assert not sock.exists(), "an orderly shutdown removes its socket"
    finally:
        if launcher.returncode is None:
            launcher.kill()
            await launcher.wait()


async def test_two_quick_sigterms_end_the_daemon_cleanly(tmp_path, short_dir):
    # The gap between the two signals is the scenario (a person pressing
    # Ctrl-C twice, a service manager repeating itself), not a wait for state.
    for trial, gap in enumerate((0.0, 0.02, 0.05, 0.1, 0.2)):
        proc = await start_daemon(tmp_path / f"d{trial}", short_dir / f"{trial}.sock")
        proc.process.send_signal(signal.SIGTERM)
        await trio.sleep(gap)
        if proc.process.returncode is None:
            proc.process.send_signal(signal.SIGTERM)
        code = await proc.terminate()
        assert code == 0, f"gap {gap}s: exit {code}\n" + proc.log_text()[-2000:]

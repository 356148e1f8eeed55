"""The process guard's own process (F12: runtimes die with the daemon),
started at every daemon start: standard library only, no trio, no site —
it kills what it was told of once its stdin ends."""

from __future__ import annotations

import subprocess
import sys

from agentd.actors.providers import guard_process
from agentd.actors.providers.procinfo import process_start_ticks


def test_the_guard_kills_what_it_was_told_of_when_its_stdin_ends():
    sleeper, other = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sleep", "60"])
    guard = subprocess.Popen(guard_process.command(), stdin=subprocess.PIPE)
    try:
        guard.stdin.write(f"{sleeper.pid} {process_start_ticks(sleeper.pid)}\n".encode())
        # Another start time than the process that has this pid now: not the one meant, left alone.
        guard.stdin.write(f"{other.pid} {process_start_ticks(other.pid) + 1}\n".encode())
        guard.stdin.close()
        assert guard.wait(timeout=30) == 0
        assert sleeper.wait(timeout=30) == -9
        assert other.poll() is None
    finally:
        for process in (sleeper, other, guard):
            process.kill()
            process.wait()


def test_the_guard_loads_no_trio_and_no_agentd():
    folder = guard_process.command()[-1].split("sys.path.append(")[1].split(")")[0]
    loaded = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.append({folder}); import guard_process; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in ('trio', 'agentd', 'site')))"],
        capture_output=True, text=True, check=True, timeout=30).stdout.strip()
    assert loaded == "[]"

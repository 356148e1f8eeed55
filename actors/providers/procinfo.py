"""What /proc says about a process: enough to never signal a reused pid."""

from __future__ import annotations

import os


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat
    field 22), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    rest = data[data.rfind(b")") + 2 :].split()
    try:
        return int(rest[19])  # fields 3.. start at index 0, so field 22 is index 19
    except (IndexError, ValueError):
        return None


def is_same_process(pid: int, start_ticks: int | None) -> bool:
    """True if ``pid`` is alive and is the process that started at ``start_ticks``."""
    if start_ticks is None:
        return False
    return process_start_ticks(pid) == start_ticks


def process_group_members(pgid: int) -> list[int]:
    """Pids of the live (non-zombie) processes in process group ``pgid``."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2 :].split()
        try:
            state, group = rest[0], int(rest[2])  # fields 3 (state) and 5 (pgrp)
        except (IndexError, ValueError):
            continue
        if group == pgid and state != b"Z":
            members.append(int(entry.name))
    return sorted(members)

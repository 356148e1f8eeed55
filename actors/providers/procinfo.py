"""What /proc says about a process: enough to never signal a reused pid."""

from __future__ import annotations

import os


def _stat_fields(pid: int) -> list[bytes] | None:
    """/proc/PID/stat from field 3 (state) on, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    return data[data.rfind(b")") + 2 :].split()


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat
    field 22), or None if there is no such process."""
    rest = _stat_fields(pid)
    try:
        return int(rest[19]) if rest is not None else None  # field 22 is index 19
    except (IndexError, ValueError):
        return None


def process_parent_and_start(pid: int) -> tuple[int, int] | None:
    """``(parent pid, start ticks)`` of a live process (/proc/PID/stat fields
    4 and 22), or None if there is no such process or it is a zombie (whose
    parent no longer says where it came from)."""
    rest = _stat_fields(pid)
    try:
        if rest is None or rest[0] == b"Z":
            return None
        return int(rest[1]), int(rest[19])
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


def children_of(pid: int) -> list[int]:
    """Pids of the live (non-zombie) processes whose parent is ``pid``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        rest = _stat_fields(int(entry.name))
        try:
            if rest is not None and rest[0] != b"Z" and int(rest[1]) == pid:
                found.append(int(entry.name))
        except (IndexError, ValueError):
            continue
    return sorted(found)

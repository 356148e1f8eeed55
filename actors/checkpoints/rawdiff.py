"""Parsing git's ``diff --raw -z`` and ``--raw --numstat -z`` output."""

from __future__ import annotations

from dataclasses import dataclass

from .names import exact, shown
from .results import Change, FileChange

#: git's empty tree, valid in every SHA-1 repository without being stored
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

_CHANGES: dict[str, Change] = {"A": "added", "D": "deleted", "M": "modified", "T": "modified", "R": "renamed"}


@dataclass(frozen=True)
class RawEntry:
    """One ``--raw`` record: modes and blob ids of both sides, status letter, path(s)."""

    old_mode: str
    new_mode: str
    old_oid: str
    new_oid: str
    status: str
    path: bytes
    #: the source path of a rename or copy
    old_path: bytes | None = None


def parse_raw_numstat(out: bytes) -> tuple[list[RawEntry], list[tuple[int | None, int | None]]]:
    """Split ``git diff --raw [--numstat] -z`` output into raw records and, in
    the same order, numstat counts (``None`` for a binary side)."""
    tokens = out.split(b"\0")
    raws: list[RawEntry] = []
    stats: list[tuple[int | None, int | None]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if not token:
            continue
        if token.startswith(b":"):
            old_mode, new_mode, old_oid, new_oid, status = token[1:].decode().split(" ")
            if status[0] in "RC":
                raws.append(RawEntry(old_mode, new_mode, old_oid, new_oid, status[0], tokens[i + 1], tokens[i]))
                i += 2
            else:
                raws.append(RawEntry(old_mode, new_mode, old_oid, new_oid, status[0], tokens[i]))
                i += 1
        else:
            added, deleted, path = token.split(b"\t", 2)
            if not path:  # a rename: the two paths follow
                i += 2
            stats.append((None if added == b"-" else int(added), None if deleted == b"-" else int(deleted)))
    return raws, stats


def file_changes(out: bytes) -> list[FileChange]:
    """The files of ``git diff --raw --numstat -z -M`` output."""
    raws, stats = parse_raw_numstat(out)
    if len(stats) != len(raws):
        stats = [(0, 0)] * len(raws)
    files = []
    for raw, (added, deleted) in zip(raws, stats):
        binary = added is None or deleted is None
        files.append(FileChange(
            path=shown(raw.path), change=_CHANGES.get(raw.status, "modified"),
            insertions=added or 0, deletions=deleted or 0, binary=binary,
            old_path=shown(raw.old_path) if raw.old_path is not None else None,
            path_bytes=exact(raw.path), old_path_bytes=exact(raw.old_path) if raw.old_path is not None else None,
        ))
    return files

"""What the engine returns: msgspec Structs that encode to the protocol's
camelCase JSON as they are.

Paths are workspace-relative ``str`` as ``names.shown`` gives them: valid
Unicode always (they go into LMDB records and onto the JSON wire), with each
byte of a name that is not UTF-8 as ``\\xNN``; such a name also carries its
bytes in base64 (``path_bytes`` on an entry, or a ``path_bytes`` map from the
shown string for lists of plain paths). ``names.raw`` gives the bytes back.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Change = Literal["added", "modified", "deleted", "renamed"]
#: why a file of the workspace is not in a checkpoint
SkipReason = Literal["too_large", "unreadable", "unsupported_type", "ignored"]
#: why a restore left a path as it was
NotRestoredReason = Literal[
    "exists_unstored",       # the checkpoint adds it, but the disk has one whose bytes no checkpoint holds
    "directory_in_the_way",  # a non-empty directory is where the file goes
    "parent_not_directory",  # a parent is a symlink or a file
    "nested_repository",     # it is inside a nested repository, which is never modified
    "write_failed",
    "delete_failed",
    "aborted",               # an earlier failure ended the restore before this path
]


class _Struct(msgspec.Struct, kw_only=True, rename="camel", frozen=True):
    pass


class FileChange(_Struct, frozen=True):
    """One file of a diff between two checkpoints.

    Attributes:
        path: the path in the newer checkpoint (the old one for ``deleted``).
        change: ``added``, ``modified`` (content, mode or type), ``deleted``, ``renamed``.
        insertions: lines added (0 for binary files).
        deletions: lines removed (0 for binary files).
        binary: git considers either side binary.
        old_path: the path before a rename.
    """

    path: str
    change: Change
    insertions: int = 0
    deletions: int = 0
    binary: bool = False
    old_path: str | None = None
    #: the name's bytes (base64) when it is not UTF-8 (``path`` then shows it with ``\\xNN``)
    path_bytes: str | None = None
    old_path_bytes: str | None = None


class SkippedFile(_Struct, frozen=True):
    """A workspace file left out of a checkpoint, and why (never silently)."""

    path: str
    reason: SkipReason
    #: the file's size, for ``too_large``
    size: int | None = None
    #: the name's bytes (base64) when it is not UTF-8
    path_bytes: str | None = None


class CheckpointSummary(_Struct, frozen=True):
    """A checkpoint against its base: counts, skipped files, nested repositories."""

    files_changed: int = 0
    insertions: int = 0
    deletions: int = 0
    skipped: list[SkippedFile] = []
    #: nested repositories (``path/``), neither stored nor modified
    nested_repos: list[str] = []
    #: the bytes (base64) of each name in ``nested_repos`` that is not UTF-8, by its shown string
    path_bytes: dict[str, str] = {}


class CaptureResult(_Struct, frozen=True):
    """A captured checkpoint.

    Attributes:
        ref: the checkpoint's ref, ``refs/agentd/<thread>/<scope>/<n>``.
        commit: the shadow commit the ref points at (the base's own commit when
            nothing changed: ``changed`` is then False).
        tree: its tree (workspace-relative paths).
        base: the commit diffed against (and the new commit's parent), if any.
        changed: the tree differs from the base's.
        summary: counts, skipped files and nested repositories.
        files: the changed files against the base.
    """

    ref: str
    commit: str
    tree: str
    base: str | None
    changed: bool
    summary: CheckpointSummary
    files: list[FileChange] = []


class DiffResult(_Struct, frozen=True):
    """Files and patch between two checkpoints; ``patch`` is cut at the
    requested size with ``truncated`` set."""

    base: str | None
    target: str
    files: list[FileChange]
    patch: str
    truncated: bool


class NotRestored(_Struct, frozen=True):
    """A path a restore did not put back, and why."""

    path: str
    reason: NotRestoredReason
    detail: str | None = None
    #: the name's bytes (base64) when it is not UTF-8
    path_bytes: str | None = None


class RestoreResult(_Struct, frozen=True):
    """What a restore did.

    Attributes:
        target: the commit restored.
        safety: the safety checkpoint captured first; restoring it undoes this restore.
        written: paths written as the target has them.
        deleted: paths removed because the target lacks them.
        not_restored: paths left as they were, each with the reason.
        complete: every path was restored.
        error: what ended the restore early, if something did.
        path_bytes: the bytes (base64) of each name in ``written`` and
            ``deleted`` that is not UTF-8, by its shown string.
    """

    target: str
    safety: CaptureResult
    written: list[str] = []
    deleted: list[str] = []
    not_restored: list[NotRestored] = []
    complete: bool = True
    error: str | None = None
    path_bytes: dict[str, str] = {}

    @property
    def restored_files(self) -> int:
        """How many paths now match the target."""
        return len(self.written) + len(self.deleted)

"""Errors of the checkpoint engine.

Every error carries a short machine-readable ``reason`` so that the caller can
record a Checkpoint with status ``error`` (or refuse a command) and say why,
never silently: ``str(exc)`` is the sentence for a person.
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Base of every checkpoint engine error.

    Attributes:
        reason: a stable code (``git_missing``, ``workspace_refused``, ...).
    """

    reason = "checkpoint_error"

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        if reason is not None:
            self.reason = reason


class GitUnavailableError(CheckpointError):
    """The ``git`` binary is missing, cannot be run, or is too old (< 2.32)."""

    reason = "git_missing"


class WorkspaceError(CheckpointError):
    """The workspace is not an existing directory."""

    reason = "workspace_missing"


class WorkspaceRefusedError(CheckpointError):
    """The workspace is a folder checkpoints refuse to snapshot (the home
    folder itself, Desktop, Documents, Downloads, the filesystem root)."""

    reason = "workspace_refused"


class ShadowMismatchError(CheckpointError):
    """The shadow repository directory belongs to another workspace (its
    ``workspace`` file names a different path)."""

    reason = "shadow_mismatch"


class WorkspaceBusyError(CheckpointError):
    """Another process held the workspace's shadow lock past the timeout."""

    reason = "busy"


class CheckpointExistsError(CheckpointError):
    """The checkpoint ref already exists: refs are create-only."""

    reason = "ref_exists"


class UnknownCheckpointError(CheckpointError):
    """The commit or ref is not a checkpoint of this workspace's shadow."""

    reason = "unknown_checkpoint"


class GitCommandError(CheckpointError):
    """A git command failed unexpectedly.

    Attributes:
        args_: the git arguments (without the executable).
        returncode: its exit status.
        stderr: the last part of its standard error, decoded.
    """

    reason = "git_failed"

    def __init__(self, args: list[str | bytes], returncode: int, stderr: bytes) -> None:
        self.args_ = args
        self.returncode = returncode
        self.stderr = stderr.decode(errors="replace").strip()[-2000:]
        shown = " ".join(a if isinstance(a, str) else a.decode(errors="replace") for a in args[:4])
        super().__init__(f"git {shown} failed (exit {returncode}): {self.stderr or 'no message'}")

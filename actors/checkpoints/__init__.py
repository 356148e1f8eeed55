"""Workspace checkpoints: a shadow git repository per workspace, captures,
diffs and restores that never touch the user's ``.git``, ignored files or
nested repositories (SPEC F13/F14, ``CHECKPOINTS.md``).

```python
from agentd.actors.checkpoints import CheckpointEngine, checkpoint_ref

engine = CheckpointEngine(data_dir / "checkpoints")
base = await engine.capture(ws, checkpoint_ref(thread_id, "root", 0))
run1 = await engine.capture(ws, checkpoint_ref(thread_id, "root", 1), base=base.commit)
patch = await engine.diff(ws, run1.commit, base.commit, max_bytes=65536)
undo = await engine.restore(ws, base.commit, safety_ref=checkpoint_ref(thread_id, "pre_rollback", 1))
await engine.restore(ws, undo.safety.commit, safety_ref=checkpoint_ref(thread_id, "pre_rollback", 2))
```

Modules, one job each: ``engine`` (the facade), ``layout`` (where the
workspace is, seen from git), ``shadow`` (the shadow repository on disk),
``gitproc`` (scrubbed env, awaited git), ``locks`` (per-workspace
serialization), ``capture``, ``diff``, ``restore``, ``catfile`` (blob
stream), ``paths`` (nested/blocked parents), ``rawdiff`` (git output
parsing), ``refs``, ``results``, ``errors``.
"""

from .engine import DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_PATCH_BYTES, CheckpointEngine, LockedWorkspace
from .errors import (
    CheckpointError,
    CheckpointExistsError,
    GitCommandError,
    GitUnavailableError,
    ShadowMismatchError,
    UnknownCheckpointError,
    WorkspaceBusyError,
    WorkspaceError,
    WorkspaceRefusedError,
)
from .refs import checkpoint_ref
from .results import (
    CaptureResult,
    CheckpointSummary,
    DiffResult,
    FileChange,
    NotRestored,
    RestoreResult,
    SkippedFile,
)

__all__ = [
    "DEFAULT_MAX_FILE_BYTES", "DEFAULT_MAX_PATCH_BYTES", "CaptureResult", "CheckpointEngine", "CheckpointError",
    "CheckpointExistsError", "CheckpointSummary", "DiffResult", "FileChange", "GitCommandError",
    "GitUnavailableError", "LockedWorkspace", "NotRestored", "RestoreResult", "ShadowMismatchError", "SkippedFile",
    "UnknownCheckpointError", "WorkspaceBusyError", "WorkspaceError", "WorkspaceRefusedError", "checkpoint_ref",
]

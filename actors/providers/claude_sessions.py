"""What the Claude adapter reads from Claude's own session files.

Claude keeps each session in ``$CLAUDE_CONFIG_DIR/projects/<cwd>/<id>.jsonl``
(one JSON object per line). The adapter reads them best effort, off the event
loop (``trio.to_thread``): a resume reports how many turns the session has,
and a fork needs the directory the session ran in (Claude finds a session by
it). Behind a wrapper with a filesystem of its own the files are not visible
here, and both answers are None.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import msgspec

from ..regular_files import open_regular

_decoder = msgspec.json.Decoder()


def session_file(config_dir: Path, session: str) -> Path | None:
    """The session's file, if exactly one is found."""
    try:
        paths = list((config_dir / "projects").glob(f"*/{session}.jsonl"))
    except OSError:
        return None
    return paths[0] if len(paths) == 1 else None


def _entries(config_dir: Path, session: str, marker: bytes) -> Iterator[dict[str, Any]]:
    """The session file's entries whose line contains ``marker``."""
    path = session_file(config_dir, session)
    if path is None:
        return
    try:
        # a FIFO in its place (the agent runs as the user) is refused, not waited on
        with os.fdopen(open_regular(path, follow_symlinks=True), "rb") as f:
            for line in f:
                if marker in line:
                    try:
                        entry = _decoder.decode(line)
                    except msgspec.DecodeError:
                        continue
                    if isinstance(entry, dict):
                        yield entry
    except OSError:
        return


def count_turns(config_dir: Path, session: str) -> int | None:
    """The user prompts in the session (None when it cannot be read here)."""
    prompts = {
        e["promptId"] for e in _entries(config_dir, session, b'"promptId"')
        if e.get("type") == "user" and not e.get("isSidechain") and isinstance(e.get("promptId"), str)
    }
    return len(prompts) or None


def session_cwd(config_dir: Path, session: str) -> str | None:
    """The directory the session ran in (None when it cannot be read here)."""
    for entry in _entries(config_dir, session, b'"cwd"'):
        cwd = entry.get("cwd")
        if isinstance(cwd, str):
            return cwd
    return None

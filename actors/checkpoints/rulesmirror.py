"""A work tree of nothing but the workspace's ignore files, for listing the
tracked files the ignore rules ignore without git reading every file's type.

``git ls-files -c -i --exclude-standard`` (git 2.39) ``lstat``-s every
tracked file as soon as one rule matches folders only (``build/``): it asks
each path's type on disk. A file never matches such a rule. Run in a work
tree that holds only the ``.gitignore`` files (copied, in their folders),
each of those ``lstat`` calls fails at once, git reads the same rules, and
for every path that is a file or a symlink on disk the answer is the one the
real work tree gives. A tracked path that is a folder on disk now is the one
that could differ, and the capture drops it from the index whatever the rules
say (``classify``). Used for a seeded capture at the repository's top only:
a workspace below it also reads ignore files above it, which its listing does
not show.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable

from ..regular_files import read_regular

NAME = b".gitignore"
#: the mirror's folder in the shadow folder (never in the workspace)
MIRROR = b"rules.agentd-mirror"


def is_ignore_file(path: bytes) -> bool:
    """Whether the work-tree-relative ``path`` names an ignore file git reads."""
    return path == NAME or path.endswith(b"/" + NAME)


def make(top: bytes, paths: Iterable[bytes], into: bytes) -> None:
    """Copy the ignore files ``paths`` (work-tree-relative) that are regular
    files under ``top`` into the new folder ``into`` (blocking). git opens an
    ignore file without following a symlink, so neither does this."""
    os.makedirs(into, mode=0o700)
    for path in dict.fromkeys(paths):
        try:
            # Not a FIFO either: an open of one would wait forever (``regular_files``).
            data = read_regular(os.path.join(top, path))
        except OSError:
            continue
        target = os.path.join(into, path)
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        with open(target, "wb") as f:
            f.write(data)


def remove(into: bytes) -> None:
    """Remove a mirror ``make`` made (blocking)."""
    shutil.rmtree(into, ignore_errors=True)

"""Removing a folder tree that an agent's commands may have filled.

``shutil.rmtree`` recurses once per folder level (Python 3.11), and an
agent's command can nest folders ~2,000 deep inside PATH_MAX, past Python's
recursion limit: the ``RecursionError`` is no ``OSError``, so
``ignore_errors`` does not hold it, and the caller failed instead of the
folder going. Such a tree is left to ``rm -rf``, which walks it without
recursing (and, like ``rmtree``, never follows a symlink).
"""

from __future__ import annotations

import os
import shutil
import subprocess


def remove_tree(path: str | bytes | os.PathLike[str]) -> None:
    """Remove ``path`` and everything beneath it, as far as it can be
    removed (errors are ignored, as ``shutil.rmtree(ignore_errors=True)``);
    blocking: call it off the event loop."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--", os.fsdecode(path)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

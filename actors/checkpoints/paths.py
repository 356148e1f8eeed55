"""Which directories of a workspace a path may be read or written through.

A path whose parent (below the workspace root) holds a ``.git`` entry is
inside a nested repository, which the engine never touches; a path whose
parent is a symlink or a file is "blocked": following it would read or write
outside the workspace. Blocking calls: use from a worker thread.
"""

from __future__ import annotations

import os
import stat

#: (kind, directory) where kind is "nested" or "blocked"; None: the path may be used
Status = tuple[str, bytes] | None


class PathGuard:
    """Caches the status of the directories below ``start`` in ``root``.

    Args:
        root: an absolute directory (the shadow's work tree, or the workspace).
        start: the directory (relative to ``root``, ``b""`` for itself) below
            which paths are checked; it is trusted.
        allow_nested: directories (relative to ``root``) that are not
            "nested" even when they hold a ``.git`` (a restore the person
            asked to include them in).
    """

    def __init__(self, root: bytes, start: bytes = b"", *, allow_nested: set[bytes] | frozenset[bytes] = frozenset()) -> None:
        self.root = root
        self.start = start
        self.allow_nested = allow_nested
        self._dirs: dict[bytes, Status] = {start: None}

    def inside_allowed_nested(self, path: bytes) -> bool:
        """Whether ``path`` is inside one of ``allow_nested`` (or is one)."""
        return any(path == d or path.startswith(d + b"/") for d in self.allow_nested)

    def status(self, directory: bytes) -> Status:
        """The status of ``directory`` (relative to ``root``): the first
        ancestor at or below ``start`` that is nested or blocked, else None.
        A directory that does not exist is fine (it would be created)."""
        # The ancestors not known yet, nearest first: a loop, not a recursion (an
        # agent's command can nest folders as deep as PATH_MAX allows, ~2,000).
        unknown: list[bytes] = []
        result: Status = None
        while True:
            found = self._dirs.get(directory, False)
            if found is not False:
                result = found  # type: ignore[assignment]
                break
            parent = os.path.dirname(directory)
            if parent == directory or not directory:
                break
            unknown.append(directory)
            directory = parent
        for directory in reversed(unknown):
            if result is None:
                full = os.path.join(self.root, directory)
                try:
                    st = os.lstat(full)
                except (FileNotFoundError, NotADirectoryError):
                    pass
                else:
                    if not stat.S_ISDIR(st.st_mode):
                        result = ("blocked", directory)
                    elif directory not in self.allow_nested and os.path.lexists(os.path.join(full, b".git")):
                        result = ("nested", directory)
            self._dirs[directory] = result
        return result

    def of(self, path: bytes) -> Status:
        """The status of the directory holding ``path`` (a ``.git`` component
        itself is always inside a nested repository, or is the user's own)."""
        if b".git" in path.split(b"/"):
            return ("nested", os.path.dirname(path))
        return self.status(os.path.dirname(path))

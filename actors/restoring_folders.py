"""The folders restores are writing right now (workspace_guard.py): runs of
other threads wait for them to end before they start there."""

from __future__ import annotations

import trio

from .workspace_guard import overlaps


class RestoringFolders:
    """The folders restores are writing right now (resolved paths), so that
    a run of another thread that starts meanwhile waits for them to end
    instead of working — and taking its baseline — in a half-restored tree."""

    def __init__(self) -> None:
        self._folders: dict[int, str] = {}
        self._next = 0
        self._changed = trio.Event()

    def add(self, folder: str) -> int:
        self._next += 1
        self._folders[self._next] = folder
        return self._next

    def remove(self, token: int) -> None:
        self._folders.pop(token, None)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until_free(self, folder: str) -> None:
        """Return once no restore writes in ``folder`` (resolved) or around it."""
        while any(overlaps(folder, other) for other in self._folders.values()):
            await self._changed.wait()

"""A one-shot answer to a mailbox item that waits for one: a command's
result, or a starter's ``StartPlan``."""

from __future__ import annotations

from typing import Any

import trio


class Reply:
    """A one-shot answer to a command: a result or an AgentdError."""

    def __init__(self) -> None:
        self._done = trio.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def set(self, value: Any) -> None:
        """Answer with ``value`` (ignored once answered)."""
        if not self._done.is_set():
            self._value = value
            self._done.set()

    def fail(self, error: BaseException) -> None:
        """Answer with ``error`` (ignored once answered)."""
        if not self._done.is_set():
            self._error = error
            self._done.set()

    async def wait(self) -> Any:
        """The answer; raises the error the command failed with."""
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value

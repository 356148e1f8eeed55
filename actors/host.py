"""What an actor and its effect executors need of the daemon around them.

The registry (registry.py) is that host. The actor and the executors are
typed against this Protocol, not the registry, so that the registry may
import them and nothing below it imports the registry back: cross-thread
work (waking a thread, sending it a message, stopping a task) is an effect
the executor carries out through these methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from agentd.store.db import Store
    from agentd.store.hub import EventHub
    from agentd.store.records import CommandReceipt

    from .checkpoints import CheckpointEngine
    from .config import DaemonConfig
    from .messages import Handler
    from .providers.base import SessionHost
    from .restoring_folders import RestoringFolders


class TaskWaiters(Protocol):
    def ended(self, task_id: str) -> None: ...


class ActorHost(Protocol):
    """The daemon as a thread's actor sees it."""

    store: Store
    hub: EventHub
    sessions: SessionHost
    config: DaemonConfig
    checkpoints: CheckpointEngine | None
    wall_clock: Callable[[], float]
    shutting_down: bool
    restoring: RestoringFolders

    @property
    def tasks(self) -> TaskWaiters: ...

    @property
    def workspaces_folder(self) -> str: ...

    def retire(self, actor: Any) -> bool:
        """Drop the idle ``actor`` unless something reached its mailbox."""

    def check_receipt(self, receipt: CommandReceipt, method: str) -> Any:
        """The stored answer of a repeated commandId."""

    def wake(self, thread_id: str) -> None:
        """Load another thread's actor."""

    def checked_workspace(self, workspace: str | None) -> str | None:
        """A client's workspace as the daemon accepts it."""

    def active_runs(self) -> list[tuple[str, str, str, str]]:
        """``(thread, run, status, workspace)`` of every active run."""

    async def send_internal(self, thread_id: str, text: str) -> Any:
        """The daemon's own message to another thread."""

    async def call(self, thread_id: str, handler: Handler, params: Any, command_id: str | None = None, *,
                   method: str) -> Any:
        """A command to another thread's actor, answered."""

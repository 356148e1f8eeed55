"""When shadow repositories are compacted: ``Compactor``, a daemon child task.

Every capture writes loose objects, and a capture whose tree did not change
leaves a commit no ref reaches; a shadow grows without bound unless it is
repacked and pruned (``gc.auto=0`` keeps git from doing it by surprise, in
the middle of a capture). The compactor counts captures per workspace (the
engine's ``on_capture``) and, once a workspace has had ``after`` of them,
compacts it ``delay`` seconds later — after the run whose capture tipped the
count has ended — with ``CheckpointEngine.compact``; a shadow just seeded
from the user's repository (``seed``) is compacted ``delay`` seconds after
its seed whatever the count, so it stops borrowing the user's objects soon: the repack runs beside
captures, the prune waits for the workspace's lock, so it never runs while a
capture holds it. One workspace at a time, in a worker process (git), never on
the event loop. A failure is logged and the count starts again: a shadow
that cannot be compacted still captures. A repack cut off (the daemon
stopped) leaves at most git's temp pack files, which the next prune removes.
"""

from __future__ import annotations

import logging
import math
import os

import trio

from .engine import CheckpointEngine

log = logging.getLogger(__name__)


class Compactor:
    """Compacts each workspace's shadow after every ``after`` captures.

    Args:
        engine: the engine whose captures are counted (its ``on_capture`` is taken).
        after: captures of a workspace between compactions; 0 never compacts.
        delay: seconds from the capture that reached ``after`` to the compaction.
    """

    def __init__(self, engine: CheckpointEngine, *, after: int, delay: float) -> None:
        self.engine = engine
        self.after = after
        self.delay = delay
        #: captures of each workspace since its last compaction
        self.counts: dict[bytes, int] = {}
        #: workspaces waiting for their compaction (never twice in the queue)
        self.due: set[bytes] = set()
        #: compactions done, by workspace (for tests and status)
        self.done: dict[bytes, int] = {}
        self._send, self._receive = trio.open_memory_channel(math.inf)
        self._compacted = trio.Event()
        if after > 0:
            engine.on_capture = self.captured
            # A seeded shadow reads the user's objects until compacted: never wait ``after`` captures for that.
            engine.on_seed = self.seeded

    def captured(self, workspace: bytes) -> None:
        """Count a capture of ``workspace``; queue its compaction at ``after``."""
        count = self.counts[workspace] = self.counts.get(workspace, 0) + 1
        if count >= self.after and workspace not in self.due:
            self.due.add(workspace)
            self._send.send_nowait(workspace)

    def seeded(self, workspace: bytes) -> None:
        """``workspace``'s shadow was seeded from the user's repository: queue
        its compaction (``delay`` seconds on), which copies the borrowed objects."""
        if workspace not in self.due:
            self.due.add(workspace)
            self._send.send_nowait(workspace)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Compact the workspaces as they come due, one at a time, until cancelled."""
        task_status.started()
        async for workspace in self._receive:
            try:
                await trio.sleep(self.delay)
                # Captures from now on count towards the next compaction.
                self.counts[workspace] = 0
                try:
                    await self.engine.compact(workspace)
                except Exception:  # noqa: BLE001 - a shadow that cannot be compacted still captures
                    log.exception("compacting the checkpoints of %s failed", os.fsdecode(workspace))
                else:
                    self.done[workspace] = self.done.get(workspace, 0) + 1
            finally:
                # Cancelled (a stop or a restart of this child): the next capture queues it again.
                self.due.discard(workspace)
            self._compacted.set()
            self._compacted = trio.Event()

    async def wait_done(self, workspace: bytes, count: int) -> None:
        """Wait until ``workspace`` was compacted ``count`` times (for tests and tools)."""
        while self.done.get(workspace, 0) < count:
            await self._compacted.wait()

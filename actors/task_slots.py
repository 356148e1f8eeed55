"""Fan-out slots of delegations in flight (hostile-round issue item 8, SPEC F9).

``task.delegate`` checks the fan-out limit, then copies a ``fork`` workspace
and asks the parent's actor to commit the child: several awaits in which
other calls for the same parent run. Counting only the children already
stored let every concurrent call pass the check before any was counted. A
call therefore *takes a slot* in the same step as it checks (no await in
between); the slot counts as a working task until the call ends, and is
named after its child once the parent's actor makes one, so a child that is
both stored and still held by its slot counts once.
"""

from __future__ import annotations

from agentd.store.db import Store
from agentd.store.records import AppThread

from .delegation import TaskSlot, check_limits

__all__ = ["TaskSlot", "TaskSlots"]


class TaskSlots:
    """The slots held now, by parent thread."""

    def __init__(self) -> None:
        self._held: dict[str, list[TaskSlot]] = {}

    def take(self, store: Store, parent: AppThread, *, max_depth: int, max_fanout: int) -> TaskSlot:
        """Check the depth and fan-out limits counting the slots held now,
        and take one for a new delegation from ``parent``.

        Raises:
            LimitExceeded: as ``delegation.check_limits``.
        """
        held = self._held.get(parent.id, [])
        check_limits(store, parent, max_depth=max_depth, max_fanout=max_fanout, in_flight=held)
        slot = TaskSlot(parent.id)
        self._held.setdefault(parent.id, []).append(slot)
        return slot

    def release(self, slot: TaskSlot) -> None:
        """The delegation ended (its child is stored, or it was refused)."""
        held = self._held.get(slot.parent_id)
        if held is not None and slot in held:
            held.remove(slot)
            if not held:
                del self._held[slot.parent_id]

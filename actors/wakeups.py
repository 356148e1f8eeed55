"""Wake-ups: a delegated task's end gives its parent a run of its own
(SPEC F9, F10; seed 000 "Stop").

A task delegated with ``wake: true`` is listed on its parent
(``AppThread.wakeTaskIds``) and marked on itself (``wakesParent``). When the
task's first run ends, its actor commits the ``subagent_result`` transfer
with the run's end (delegation.py) and then — after the commit, as the
``WakeParent`` effect — sends ``task.wake`` to the parent's actor, which
handles it here:

- the task is still owed a wake-up: a run of the parent's own is queued like
  any run (``createdBy: system``), its message a short note, and the result
  transfer is bound to it (``runId``), so that run — and no other — takes the
  stored ``subagent_result`` handoff in as its input (``take_inbox``);
- a Stop dropped the wake-up first (``run_control.drop_wakeups``): the result
  ends ``superseded`` (reason ``stopped: …``) — still readable with
  ``task.result``, never taken in by itself;
- the running turn already took the result (a waiting ``task_result``):
  nothing is queued.

A restart owes nothing (seed 003): a task cut off by it has its result made
``superseded`` (``delegation.owed_results``) and wakes no one, and a wake-up
run still queued at the restart is cancelled with every other queued run,
its result ``superseded`` with it (store/reconcile.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentd.store.db import struct_copy
from agentd.store.records import ContextTransfer, to_wire

from . import graph, run_control
from .context import ThreadContext
from .effects import Decision, StartNext
from .messages import Command

#: why a result that came after its wake-up was dropped is not taken in
DROPPED = "stopped: a Stop dropped the wake-up this task owed before it ended; read the result with task.result"


@dataclass(frozen=True)
class TaskWake:
    """``task.wake``, sent by a task's actor to its parent's after the task's
    run ended: ``transfer_id`` is the result it committed."""

    thread_id: str
    task_id: str
    transfer_id: str


def wake_note(task_id: str, title: str, outcome: str) -> str:
    """The wake-up run's message: what woke the thread; the result itself is
    the stored handoff the run takes in after it."""
    what = f" ({title})" if title else ""
    return (f"[agentd] The task you delegated, {task_id}{what}, has ended ({outcome}). "
            "Its result follows; carry on from it.")


def task_woke(ctx: ThreadContext, command: Command) -> Decision:
    """``task.wake`` in the parent's actor: queue the wake-up run, or settle
    the result of a wake-up a Stop dropped."""
    params: TaskWake = command.params
    state = ctx.state
    transfer = ctx.store.get(ContextTransfer, params.transfer_id)
    if transfer is None or transfer.target_thread_id != state.thread_id or transfer.status != "pending":
        return Decision(reply={"woken": False})
    batch = ctx.batch()
    if params.task_id not in state.thread.wake_task_ids:
        dropped = struct_copy(transfer, status="superseded", error=DROPPED)
        batch.put(dropped)
        batch.emit("context_transfer.superseded", transfer=to_wire(dropped))
        return Decision(batch, {"woken": False}, seq=False)
    graph.set_thread(batch, state, wake_task_ids=[t for t in state.thread.wake_task_ids if t != params.task_id])
    task = ctx.store.thread(params.task_id)
    outcome = transfer.reason.removeprefix("task ") if transfer.reason else "ended"
    run, _message = run_control.enqueue(
        batch, state, wake_note(params.task_id, task.title if task else "", outcome), state.thread.provider,
        dispatch_mode="queue_after_active", root_of=run_control.root_of(ctx), created_by="system",
    )
    bound = struct_copy(transfer, run_id=run.id)
    batch.put(bound)
    batch.emit("task.woke", run_id=run.id, node_id=run.root_node_id, taskId=params.task_id, transferId=transfer.id,
               wakeRunId=run.id)
    return Decision(batch, {"woken": True, "runId": run.id}, [StartNext()], seq=False)

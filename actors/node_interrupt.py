"""Interrupt one node of a running turn (SPEC F10; seed 000 "interrupt targets
a run or a node"): ``node.interrupt {nodeId}``.

The run goes on; only the node ends. How depends on what the node is:

- a call of agentd's ``delegate_task`` that made tasks still working: those
  tasks are cancelled (``task.cancel``, depth-first, each in its own actor);
  the tool call then answers with their (interrupted) results, as the
  runtime's own tool call does;
- a running item the provider can interrupt on its own (its adapter's
  ``interruptible_items``: the scripted agent's tools, commands and
  subagents): the provider is asked (``InterruptItem``) and the node ends
  ``interrupted`` when the provider reports it;
- anything else is ``unsupported``, with the reason (Codex and Claude Code
  have no per-item interrupt in the pinned versions: interrupt the run).
"""

from __future__ import annotations

from typing import Literal

from agentd.protocol import results
from agentd.protocol.errors import InvalidState, NotFound, Unsupported
from agentd.store.records import NODE_TERMINAL, ContextTransfer, ExecutionNode, RUN_TERMINAL

from .context import ThreadContext
from .delegation import DELEGATED_TASK, is_tool_call, task_run
from .effects import NO_SEQ, CancelTasks, Commit, InterruptItem, Transition, with_seq
from .messages import Command


def _running_node(ctx: ThreadContext, node_id: str) -> ExecutionNode:
    """The node, open in the thread's running turn (errors say what else it is)."""
    active = ctx.state.active
    # The attempt's nodes are kept by their provider item id.
    node = next((n for n in active.nodes.values() if n.id == node_id), None) if active is not None else None
    if node is not None and node.status not in NODE_TERMINAL:
        return node
    stored = node or ctx.store.get(ExecutionNode, node_id)
    if stored is None or stored.thread_id != ctx.thread_id:
        raise NotFound(f"no node {node_id} in thread {ctx.thread_id}", nodeId=node_id)
    if stored.kind == "root_turn":
        raise InvalidState(f"node {node_id} is run {stored.run_id}'s root: interrupt the run (agentd interrupt RUN)",
                           nodeId=node_id, runId=stored.run_id)
    status = stored.status if stored.status in NODE_TERMINAL else "not running"
    raise InvalidState(f"node {node_id} is {status}: only a running node of the running turn is interrupted",
                       nodeId=node_id, status=stored.status)


def _working_tasks(ctx: ThreadContext, node: ExecutionNode) -> list[str]:
    """The delegated tasks ``node`` (a delegate_task call) made whose run has not ended."""
    store = ctx.store
    out = []
    for child in store.thread_children(ctx.thread_id):
        if child.relationship_to_parent != DELEGATED_TASK:
            continue
        spawn = next((t for t in store.thread_transfers(child.id) if t.type == "subagent_spawn"), None)
        if not isinstance(spawn, ContextTransfer) or spawn.source_point.node_id != node.id:
            continue
        run = task_run(store, child.id)
        if run is not None and run.status not in RUN_TERMINAL:
            out.append(child.id)
    return out


def node_interrupt(ctx: ThreadContext, command: Command) -> Transition:
    """``node.interrupt``: end one running node; the run goes on."""
    node = _running_node(ctx, command.params.node_id)
    active = ctx.state.active
    assert active is not None
    if node.kind == "root_turn":
        raise InvalidState(f"node {node.id} is the run's root: interrupt the run (agentd interrupt {active.run.id})",
                           nodeId=node.id, runId=active.run.id)
    tasks = _working_tasks(ctx, node) if is_tool_call(node) else []
    adapter = ctx.adapter(active.run.provider)
    turn = active.provider_turn
    via: Literal["provider", "task_cancel"]
    if tasks:
        via = "task_cancel"
    elif (node.kind in adapter.interruptible_items and node.provider_item_id and turn is not None
          and turn.native_turn_id is not None and active.attempt.provider_thread_id):
        provider_thread = ctx.state.provider_thread
        assert provider_thread is not None, "a turn started without a provider thread"
        # Asked before anything is recorded: a refusal is the caller's error.
        yield InterruptItem(provider_thread.native_thread_id, turn.native_turn_id, node.provider_item_id)
        via = "provider"
    else:
        why = (adapter.item_interrupt_why if node.kind not in adapter.interruptible_items
               else "the provider has not named this item yet"
               if not (node.provider_item_id and turn is not None and turn.native_turn_id is not None)
               else "the provider has not named this turn's thread yet")
        raise Unsupported(f"node {node.id} ({node.kind} {node.title}) cannot be interrupted on {active.run.provider}: "
                          f"{why}; interrupt the run instead", nodeId=node.id, provider=active.run.provider)
    batch = ctx.batch()
    batch.emit("node.interrupt_requested", run_id=active.run.id, node_id=node.id, via=via, taskIds=tasks)
    result = results.NodeInterruptResult(node_id=node.id, run_id=active.run.id, via=via, task_ids=tasks, seq=NO_SEQ)
    batch.record_receipt(command.command_id, command.method, result)
    committed = yield Commit(batch)
    if tasks:
        yield CancelTasks(tuple(tasks))
    return with_seq(result, committed.seq)

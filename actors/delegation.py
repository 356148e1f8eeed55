"""Delegated tasks: one agent hands a piece of work to another (SPEC F9).

An agent calls agentd's own MCP tool ``delegate_task`` (``agentd mcp``, which
speaks to the daemon's ``task.delegate``); a person's client may call that
method too. The graph gets the same shape a fork has (F8), with
``createdBy: agent``:

- in the delegating (parent) thread's actor, ``delegate`` commits, in one
  batch, the child AppThread (``relationship: delegated_task``), its first
  run on the chosen provider, and a ``subagent_spawn`` ContextTransfer from
  the parent's running tool node to the child, whose stored ContextHandoff
  (``strategy: subagent_task``) holds the instructions and their framing;
- the child's first run start takes that handoff in like any other stored
  context (``take_inbox``), and its turn marks the transfer ``consumed``;
- when the child's first run ends, ``result_on_run_end`` adds to the same
  batch as the run's end a ``subagent_result`` transfer back to the parent
  with a ``subagent_result`` handoff: the final answer, files changed and the
  outcome. A waiting ``task.result`` (the tool's ``wait: true``) delivers it
  as the tool's result and marks it consumed by the parent's running turn
  (``consume_result``); otherwise it stays ``pending`` and the parent's next
  run takes it in as stored context (``take_inbox``).

Nothing reaches an agent that is not a stored handoff: the task's
instructions, and every result, can be read back with ``handoff.get``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

import msgspec

from agentd.protocol import results
from agentd.protocol.errors import InvalidState, LimitExceeded
from agentd.store.db import Store, struct_copy
from agentd.store.ids import new_id
from agentd.store.records import (
    NODE_TERMINAL,
    RUN_TERMINAL,
    AppThread,
    ContextHandoff,
    ContextTransfer,
    ConversationMessage,
    ExecutionNode,
    ProviderThread,
    Run,
    SourcePoint,
    WorkspaceSource,
    to_wire,
)

from . import graph, run_control
from .context import ThreadContext
from .effects import NO_SEQ, Decision, StopSession, Wake
from .graph import ThreadBatch
from .handoff import _paths  # the paths a file-change node names, as handoffs show them
from .lineage import provider_settings
from .messages import Command
from .own_workspace import for_thread, own_workspace
from .state import ActiveRun, ThreadState

if TYPE_CHECKING:
    from .providers.base import SessionClaim

#: the relationship of a thread an agent delegated a task to
DELEGATED_TASK = "delegated_task"
#: relationships that count towards the depth of a delegation tree
NESTING = frozenset({"delegated_task", "subagent"})
#: transfers a run start takes in besides the thread's own context
INBOX_TYPES = frozenset({"subagent_spawn", "subagent_result"})
#: the names agentd's MCP tools carry in the runtimes' tool items
TOOL_NAMES = ("delegate_task",)
#: characters of a task's final answer carried back to its parent
ANSWER_CAP = 16_000


# -- reads ---------------------------------------------------------------------------------


def delegation_depth(store: Store, thread: AppThread) -> int:
    """How deep ``thread`` sits in a tree of delegated tasks and subagents (0: not delegated)."""
    depth = 0
    seen = {thread.id}
    while thread.parent_thread_id and thread.relationship_to_parent in NESTING:
        parent = store.thread(thread.parent_thread_id)
        if parent is None or parent.id in seen:
            break
        seen.add(parent.id)
        depth += 1
        thread = parent
    return depth


def task_run(store: Store, task_id: str) -> Run | None:
    """A delegated task's run: its thread's first."""
    return next((run for run in store.thread_runs(task_id) if run.ordinal == 1), None)


def working_tasks(store: Store, thread_id: str) -> list[AppThread]:
    """The thread's delegated tasks whose run has not ended."""
    working = []
    for child in store.thread_children(thread_id):
        if child.relationship_to_parent != DELEGATED_TASK:
            continue
        run = task_run(store, child.id)
        if run is None or run.status not in RUN_TERMINAL:
            working.append(child)
    return working


def spawn_transfer(store: Store, task_id: str) -> ContextTransfer | None:
    """The ``subagent_spawn`` transfer that made task ``task_id``."""
    return next((t for t in store.thread_transfers(task_id)
                 if t.type == "subagent_spawn" and t.target_thread_id == task_id), None)


def result_transfer_id(run_id: str) -> str:
    """The ``subagent_result`` transfer of a task run: one per run, found by its id."""
    return "xfr_r" + run_id.partition("_")[2]


def is_tool_call(node: ExecutionNode) -> bool:
    """A running node of a call of agentd's tool."""
    return node.status not in NODE_TERMINAL and any(name in (node.title or "") for name in TOOL_NAMES)


def tool_node(active: ActiveRun) -> ExecutionNode:
    """The running node of the parent's tool call (the newest running node
    named after agentd's tool), else the run's root node."""
    running = [node for node in active.nodes.values() if is_tool_call(node)]
    return running[-1] if running else active.root


# -- native subagents with a thread of their own ---------------------------------------------


def spawned_native_thread(node: ExecutionNode) -> str | None:
    """The native thread a subagent node's provider spawned for it: Codex's
    ``collabAgentToolCall`` ``spawnAgent`` (and the scripted agent's
    ``subagent {thread: true}``) name it in ``receiverThreadIds``. Other collab
    calls (wait, sendInput, …) name agents spawned earlier; Claude's Task tool
    runs inside the parent's session and names none."""
    detail = node.detail
    if node.kind != "subagent" or detail.get("tool", "spawnAgent") != "spawnAgent":
        return None
    receivers = detail.get("receiverThreadIds")
    if isinstance(receivers, list) and receivers and isinstance(receivers[0], str) and receivers[0]:
        return receivers[0]
    return None


def subagent_provider_thread(store: Store, thread_id: str, native: str) -> ProviderThread | None:
    """The provider thread of ``thread_id``'s subagent child that ``native`` backs, if any."""
    for child in store.thread_children(thread_id):
        if child.relationship_to_parent == "subagent" and child.provider_thread_id:
            pt = store.get(ProviderThread, child.provider_thread_id)
            if pt is not None and pt.native_thread_id == native:
                return pt
    return None


def native_subagent(ctx: ThreadContext, batch: ThreadBatch, node: ExecutionNode) -> AppThread | None:
    """A completed subagent node whose provider gave it a thread of its own
    becomes a child AppThread (``relationship: subagent``, ``createdBy:
    agent``) backed by that native thread — a person can open it, message it
    (the native thread is resumed) and fork it — linked to the node by a
    ``subagent_spawn`` transfer that the provider resolved natively. Returns
    the child, if one was made (once per native thread)."""
    native = spawned_native_thread(node)
    state = ctx.state
    active = state.active
    if native is None or node.status != "completed" or active is None:
        return None
    store = ctx.store
    if subagent_provider_thread(store, state.thread_id, native) is not None:
        return None
    provider = active.run.provider
    parent = state.thread
    now = batch.now
    child = ctx.new_thread_record(
        title="subagent: " + (str(node.detail.get("prompt") or node.title or "subagent").splitlines() or [""])[0][:120],
        provider=provider, workspace=parent.workspace, parent=parent, relationship="subagent", created_by="agent",
    )
    pt = ProviderThread(
        id=new_id("pth"), thread_id=child.id, provider=provider, kind=ctx.adapter(provider).kind,
        native_thread_id=native, created_at=now, updated_at=now,
        settings=provider_settings(ctx.config.providers.get(provider)),
    )
    child = struct_copy(child, provider_thread_id=pt.id)
    point = SourcePoint(type="node", thread_id=parent.id, run_id=active.run.id, node_id=node.id, provider=provider,
                        provider_thread_id=active.attempt.provider_thread_id, native_thread_id=native)
    transfer = ContextTransfer(
        id=new_id("xfr"), type="subagent_spawn", source_thread_id=parent.id, target_thread_id=child.id,
        source_point=point, status="consumed", resolution="native", source_provider=provider, target_provider=provider,
        target_provider_thread_id=pt.id, reason="native subagent: the provider spawned it in a thread of its own",
        created_by="agent", created_at=now, resolved_at=now, consumed_at=now,
    )
    batch.put_all(child, pt, transfer)
    batch.event("thread.created", thread_id=child.id, at=now, thread=to_wire(child))
    batch.event("context_transfer.created", thread_id=child.id, at=now, transfer=to_wire(transfer))
    batch.emit("subagent.thread_created", run_id=active.run.id, node_id=node.id, threadId=child.id,
               transferId=transfer.id, nativeThreadId=native)
    return child


# -- delegate: in the parent's actor ----------------------------------------------------------


@dataclass(eq=False)
class TaskSlot:
    """One delegation in flight under ``parent_id`` (task_slots.py)."""

    parent_id: str
    #: the child thread, once the parent's actor has made it (set before its commit)
    child_id: str | None = None
    #: the caller gave up (cancelled, or failed) before a child was made:
    #: the parent's actor must not make one now (its workspace copy is gone)
    abandoned: bool = False


@dataclass(frozen=True)
class DelegateCommand:
    """``task.delegate`` as the daemon resolved it, for the parent's actor."""

    parent_thread_id: str
    instructions: str
    provider: str
    #: the child's workspace (None: a folder of its own)
    workspace: str | None
    workspace_mode: str
    wait: bool
    max_depth: int
    max_fanout: int
    #: the fan-out slot ``task.delegate`` took for it (None: not taken through task.delegate)
    slot: TaskSlot | None = None
    #: the place among ``[daemon] max_sessions`` held for the task's session
    session_claim: SessionClaim | None = None
    #: the task's end gives the parent a run of its own (``wakeups.py``)
    wake: bool = False
    #: ``workspace: worktree``: the worktree (or copy) planned for the task (issue 27)
    workspace_source: WorkspaceSource | None = None


def check_limits(
    store: Store, parent: AppThread, *, max_depth: int, max_fanout: int, in_flight: Iterable[TaskSlot] = (),
) -> None:
    """Refuse a delegation past the configured depth or fan-out. ``in_flight``:
    other delegations from ``parent`` under way (task_slots.py), each a
    working task — once, when its child is already stored.

    Raises:
        LimitExceeded: with which limit, where, and the config key that sets it.
    """
    depth = delegation_depth(store, parent) + 1
    if depth > max_depth:
        raise LimitExceeded(
            f"delegation depth limit: a task delegated from thread {parent.id} would sit {depth} levels deep, "
            f"over the limit of {max_depth} ([daemon] delegate_max_depth); do this part of the work yourself",
            limit="delegate_max_depth", value=max_depth, threadId=parent.id,
        )
    working = [t.id for t in working_tasks(store, parent.id)]
    pending = [slot for slot in in_flight if slot.child_id is None or slot.child_id not in working]
    count = len(working) + len(pending)
    if count >= max_fanout:
        starting = f" ({len(pending)} of them being made now)" if pending else ""
        raise LimitExceeded(
            f"delegation fan-out limit: thread {parent.id} already has {count} delegated tasks working{starting}, "
            f"the limit is {max_fanout} ([daemon] delegate_max_fanout); wait for one to end (task_result) first",
            limit="delegate_max_fanout", value=max_fanout, threadId=parent.id,
            workingTaskIds=working + [slot.child_id for slot in pending if slot.child_id],
        )


def task_text(parent: AppThread, run: Run | None, command: DelegateCommand) -> str:
    """The ``subagent_task`` handoff: how the task is framed, and its instructions."""
    where = {
        "same": "in the same workspace as the agent that delegated it",
        "fork": "in a copy of that agent's workspace (your changes do not touch its files)",
        "new": "in a workspace of its own",
        "worktree": "in a git worktree of that agent's repository on a branch of its own (your changes do not touch its files)",
    }[command.workspace_mode]
    origin = f"thread {parent.id}" + (f" ({parent.title})" if parent.title else "")
    if run is not None:
        origin += f", run {run.ordinal} on {run.provider}"
    return (
        "[agentd context handoff: subagent_task]\n"
        f"Another agent ({origin}) delegated a task to you through agentd. You work {where}. "
        "Your final answer, the files you change and how your turn ends are given back to it, so end with "
        "a short, complete answer.\n"
        "The task (it is also your first message):\n"
        f"{command.instructions}\n"
        "[end of handoff]"
    )


def delegate(ctx: ThreadContext, command: Command) -> Decision:
    """``task.delegate`` in the parent's actor: the child thread, its first
    run and the ``subagent_spawn`` transfer with its handoff, in one batch;
    then the child's actor is woken to start the run."""
    params: DelegateCommand = command.params
    store = ctx.store
    state = ctx.state
    parent = state.thread
    check_limits(store, parent, max_depth=params.max_depth, max_fanout=params.max_fanout)
    active = state.active
    if active is not None:
        run: Run | None = active.run
        node: ExecutionNode | None = tool_node(active)
    else:
        done = [r for r in store.thread_runs(parent.id) if r.status == "completed"]
        run = done[-1] if done else None
        node = store.get(ExecutionNode, run.root_node_id) if run and run.root_node_id else None
    title = "task: " + (params.instructions.strip().splitlines() or [""])[0][:120]
    child = ctx.new_thread_record(
        title=title, provider=params.provider, workspace=params.workspace, parent=parent,
        relationship=DELEGATED_TASK, created_by="agent",
    )
    if params.wake:
        child = struct_copy(child, wakes_parent=True)
    if params.workspace_source is not None:
        placed = for_thread(params.workspace_source, child.id)
        child = struct_copy(child, workspace=own_workspace(placed), workspace_source=placed)
    slot = params.slot
    if slot is not None:
        if slot.abandoned:
            raise InvalidState(f"the task.delegate call for thread {parent.id} was given up before its task was made",
                               threadId=parent.id)
        # From here the child counts as this slot's (no await since the check above).
        slot.child_id = child.id
    if params.session_claim is not None:
        params.session_claim.thread_id = child.id  # held until the child's run starts
    batch = ctx.batch()
    now = batch.now
    if params.wake:
        graph.set_thread(batch, state, wake_task_ids=[*state.thread.wake_task_ids, child.id])
    point = SourcePoint(type="node" if node is not None else "run", thread_id=parent.id,
                        run_id=run.id if run else None, node_id=node.id if node else None,
                        provider=run.provider if run else parent.provider)
    transfer_id = new_id("xfr")
    text = task_text(parent, run, params)
    handoff = ContextHandoff(
        id=new_id("hof"), thread_id=child.id, strategy="subagent_task", reason="delegate_task", text=text,
        created_at=now, transfer_id=transfer_id, size=len(text), cap=len(text), target_provider=params.provider,
    )
    transfer = ContextTransfer(
        id=transfer_id, type="subagent_spawn", source_thread_id=parent.id, target_thread_id=child.id,
        source_point=point, source_provider=point.provider, target_provider=params.provider, handoff_id=handoff.id,
        reason=(f"delegate_task (workspace {params.workspace_mode}, wait {str(params.wait).lower()}"
                + (", wake true)" if params.wake else ")")),
        created_by="agent", created_at=now,
    )
    # The child's records and events, in a batch of its own thread merged
    # into this one: the thread, its first run and the transfer are durable
    # together or not at all.
    child_batch = ThreadBatch(thread_id=child.id, now=now)
    child_state = ThreadState(child, [], None)
    child_batch.put(child)
    child_batch.emit("thread.created", thread=to_wire(child))
    child_run, _message = graph.new_run(child_batch, child_state, params.instructions, params.provider,
                                        dispatch_mode="start_immediately")
    child_batch.put_all(transfer, handoff)
    child_batch.emit("context_transfer.created", transfer=to_wire(transfer))
    result = results.TaskDelegateResult(task_id=child.id, thread_id=child.id, run_id=child_run.id,
                                        transfer_id=transfer.id, handoff_id=handoff.id, provider=params.provider, seq=NO_SEQ)
    delegated = {k: v for k, v in msgspec.to_builtins(result).items() if k != "seq"}
    batch.emit("task.delegated", run_id=run.id if run else None, node_id=node.id if node else None,
               **delegated, wait=params.wait, wake=params.wake, workspace=child.workspace)
    batch.ops.extend(child_batch.ops)
    batch.events.extend(child_batch.events)
    batch.record_receipt(command.command_id, command.method, result)
    return Decision(batch, result, [Wake(child.id)])


# -- the result: in the child's actor as its task run ends -----------------------------------------


def _files_changed(nodes: Iterable[ExecutionNode]) -> list[str]:
    files: list[str] = []
    for node in nodes:
        if node.kind == "file_change" and node.status == "completed":
            for path in _paths(node):
                if path not in files:
                    files.append(path)
    return files


def result_fields(run: Run, messages: Iterable[ConversationMessage], nodes: Iterable[ExecutionNode]) -> dict[str, Any]:
    """What a task gives back: ``finalAnswer`` (its last answer), ``filesChanged``
    and ``outcome`` (the run's status, and why when it did not complete)."""
    attempt = run.selected_attempt_id
    answers = [m for m in messages if m.role == "assistant" and m.text and (attempt is None or m.attempt_id == attempt)]
    answers.sort(key=lambda m: m.created_at)
    answer = answers[-1].text if answers else ""
    if len(answer) > ANSWER_CAP:
        answer = answer[:ANSWER_CAP] + " (… cut)"
    own = [n for n in nodes if attempt is None or n.attempt_id == attempt]
    outcome = run.status if run.status == "completed" else f"{run.status}" + (f": {run.reason}" if run.reason else "")
    return {"finalAnswer": answer, "filesChanged": _files_changed(own), "outcome": outcome, "status": run.status}


def result_text(task: AppThread, run: Run, fields: dict[str, Any]) -> str:
    """The ``subagent_result`` handoff's text."""
    files = fields["filesChanged"]
    lines = [
        "[agentd context handoff: subagent_result]",
        f"The task you delegated (task {task.id}, run on {run.provider}) ended: {fields['outcome']}.",
        "Final answer: " + (fields["finalAnswer"] or "(no answer)"),
        "Files changed: " + ("; ".join(files) if files else "none"),
        "[end of handoff]",
    ]
    return "\n".join(lines)


def build_result(
    batch: ThreadBatch, task: AppThread, run: Run, messages: Iterable[ConversationMessage],
    nodes: Iterable[ExecutionNode], spawn: ContextTransfer | None, parent_provider: str | None,
    *, cut_off: str | None = None,
) -> tuple[ContextTransfer, ContextHandoff]:
    """Put the task run's ``subagent_result`` transfer and handoff into
    ``batch``; ``cut_off``: why the task owes nothing (a restart cut it off),
    so its result is ``superseded`` — readable, never taken in by itself."""
    assert task.parent_thread_id is not None
    fields = result_fields(run, messages, nodes)
    text = result_text(task, run, fields)
    transfer_id = result_transfer_id(run.id)
    handoff = ContextHandoff(
        id=new_id("hof"), thread_id=task.parent_thread_id, strategy="subagent_result", reason=fields["outcome"],
        text=text, created_at=batch.now, transfer_id=transfer_id, covered_run_ids=[run.id], covered_run_count=1,
        size=len(text), cap=len(text), target_provider=parent_provider,
    )
    transfer = ContextTransfer(
        id=transfer_id, type="subagent_result", source_thread_id=task.id, target_thread_id=task.parent_thread_id,
        source_point=SourcePoint(type="run", thread_id=task.id, run_id=run.id, provider=run.provider),
        source_provider=run.provider, target_provider=parent_provider, handoff_id=handoff.id, source_run_ids=[run.id],
        reason=f"task {fields['outcome']}", created_by="agent", created_at=batch.now,
        status="superseded" if cut_off else "pending", error=cut_off,
    )
    batch.put_all(transfer, handoff)
    batch.emit("context_transfer.created", run_id=run.id, node_id=run.root_node_id, transfer=to_wire(transfer))
    # Placed on the parent, at the tool node that delegated the task.
    point = spawn.source_point if spawn is not None else None
    batch.event("task.ended", thread_id=task.parent_thread_id, run_id=point.run_id if point else None,
                node_id=point.node_id if point else None, at=batch.now, taskId=task.id, runId=run.id,
                status=run.status, outcome=fields["outcome"], transferId=transfer.id, handoffId=handoff.id)
    return transfer, handoff


def result_on_run_end(ctx: ThreadContext, batch: ThreadBatch, run: Run) -> bool:
    """When the ending run is a delegated task's, its result goes into the
    same batch as the run's end. Returns whether it did."""
    state = ctx.state
    task = state.thread
    active = state.active
    if task.relationship_to_parent != DELEGATED_TASK or task.parent_thread_id is None or run.ordinal != 1 or active is None:
        return False
    store = ctx.store
    # The run's records as this batch leaves them: stored ones, overlaid
    # with what the actor holds (the text flushed at the barrier, open nodes).
    messages = {m.id: m for m in store.thread_messages(task.id) if m.run_id == run.id}
    messages.update({open_.record.id: open_.record for open_ in active.messages.values()})
    nodes = {n.id: n for n in store.run_nodes(run.id)}
    nodes.update({n.id: n for n in active.nodes.values()})
    parent = store.thread(task.parent_thread_id)
    build_result(batch, task, run, messages.values(), nodes.values(), spawn_transfer(store, task.id),
                 parent.provider if parent else None)
    return True


#: why a delegated task's session is stopped when its run ends
TASK_ENDED = "task_ended"


def release_task_session(ctx: ThreadContext) -> Iterable[Any]:
    """A delegated task's run ended (completed, failed, or stopped by its
    parent's Stop): its provider session is stopped now rather than at its
    idle timeout — no one sends the task more work unless its parent messages
    it again, and that message resumes it as after an idle reap. Kept when a
    run of the thread waits to start."""
    if ctx.state.next_queued() is None and ctx.live_session_id() is not None:
        yield StopSession(TASK_ENDED)


# -- taking stored context in at a run start ----------------------------------------------------


#: why the result of a task cut off by a restart is not taken in by itself
CUT_OFF = ("cut off by a restart: the task owes nothing (no wake-up, not taken in by the next run); "
           "its result is read with task.result")


def owed_results(ctx: ThreadContext, batch: ThreadBatch) -> list[tuple[ContextTransfer, ContextHandoff]]:
    """In the parent's actor: results of tasks whose run a restart (or their
    actor's failure) ended, with no actor there to write them, put into
    ``batch`` — once: their id is the run's. Such a task owes nothing (seed
    003: no scan of an old task's scope): its result is ``superseded``, read
    with ``task.result``, and it wakes no one."""
    store = ctx.store
    made = []
    for child in store.thread_children(ctx.thread_id):
        if child.relationship_to_parent != DELEGATED_TASK:
            continue
        run = task_run(store, child.id)
        if run is None or run.status not in RUN_TERMINAL or store.get(ContextTransfer, result_transfer_id(run.id)):
            continue
        made.append(build_result(
            batch, child, run, [m for m in store.thread_messages(child.id) if m.run_id == run.id],
            store.run_nodes(run.id), spawn_transfer(store, child.id), ctx.state.thread.provider, cut_off=CUT_OFF,
        ))
    cut = {transfer.source_thread_id for transfer, _handoff in made}
    if cut & set(ctx.state.thread.wake_task_ids):
        graph.set_thread(batch, ctx.state, wake_task_ids=[t for t in ctx.state.thread.wake_task_ids if t not in cut])
    return made


def make_owed_results(ctx: ThreadContext, _command: Command) -> Decision:
    """In the parent's actor, for ``task.result``: the results owed by tasks
    a restart ended, made now."""
    batch = ctx.batch()
    made = owed_results(ctx, batch)
    return Decision(batch if made else None, {"made": [transfer.id for transfer, _handoff in made]}, seq=False)


def pending_inbox(ctx: ThreadContext, batch: ThreadBatch) -> list[tuple[ContextTransfer, ContextHandoff]]:
    """Delegation transfers into the thread not yet taken in, oldest first,
    with their stored handoffs: those bound to no run, or to the run that
    starts (a wake-up's result is its own run's input). Results owed since a
    restart are made now — ``superseded``, not taken in."""
    store = ctx.store
    thread_id = ctx.thread_id
    active = ctx.state.active
    starting = active.run.id if active is not None else None
    owed_results(ctx, batch)
    out = []
    for transfer in store.thread_transfers(thread_id):
        if transfer.run_id is not None and transfer.run_id != starting:
            continue
        if transfer.target_thread_id == thread_id and transfer.type in INBOX_TYPES and transfer.status == "pending":
            handoff = store.get(ContextHandoff, transfer.handoff_id) if transfer.handoff_id else None
            if handoff is not None:
                out.append((transfer, handoff))
    return out


def take_inbox(ctx: ThreadContext, batch: ThreadBatch, context: str | None) -> str | None:
    """At a run start: the delegation handoffs the attempt's turn carries
    after its own context (``context``), recorded on the attempt; the turn's
    start marks them consumed (``inbox_consumed``). Returns the whole text."""
    state = ctx.state
    active = state.active
    assert active is not None
    inbox = pending_inbox(ctx, batch)
    if not inbox:
        return context
    active.context.inbox = [transfer for transfer, _ in inbox]
    attempt = struct_copy(active.attempt, extra_handoff_ids=[handoff.id for _, handoff in inbox])
    batch.put(attempt)
    active.attempt = attempt
    batch.emit("run.context_resolved", run_id=active.run.id, node_id=active.root.id, kind="inbox",
               reason=f"{len(inbox)} stored delegation handoff(s)",
               transferIds=[t.id for t, _ in inbox], handoffIds=[h.id for _, h in inbox])
    texts = [context] if context else []
    texts += [handoff.text for _, handoff in inbox]
    return "\n\n".join(texts)


def inbox_consumed(batch: ThreadBatch, state: ThreadState) -> None:
    """The attempt's turn began: it took its delegation handoffs in."""
    active = state.active
    if active is None or not active.context.inbox:
        return
    for transfer in active.context.inbox:
        consumed = struct_copy(transfer, status="consumed", resolution="portable", run_id=active.run.id,
                               target_provider=active.run.provider, resolved_at=batch.now, consumed_at=batch.now,
                               target_provider_thread_id=active.attempt.provider_thread_id)
        batch.put(consumed)
        batch.emit("context_transfer.consumed", run_id=active.run.id, node_id=active.root.id, transfer=to_wire(consumed))
    active.context.inbox = []


# -- delivering a result as the tool's answer ----------------------------------------------------


@dataclass(frozen=True)
class ConsumeResult:
    """A waiting ``task.result`` delivers ``transfer_id`` to the parent's
    turn, if ``attempt_id`` (the attempt that asked) is still running."""

    thread_id: str
    transfer_id: str
    attempt_id: str | None


def consume_result(ctx: ThreadContext, command: Command) -> Decision:
    """Mark a task's result ``consumed`` by the parent's running turn (it is
    the tool call's answer there), unless that turn is gone: then it stays
    ``pending`` and the thread's next run takes it in."""
    params: ConsumeResult = command.params
    active = ctx.state.active
    transfer = ctx.store.get(ContextTransfer, params.transfer_id)
    if transfer is None or transfer.target_thread_id != ctx.thread_id:
        raise InvalidState(f"no result transfer {params.transfer_id} for thread {ctx.thread_id}")
    if transfer.status != "pending":
        consumed = transfer.status == "consumed" and active is not None and transfer.run_id == active.run.id
        return Decision(reply={"consumed": consumed})
    if active is None or params.attempt_id is None or active.attempt.id != params.attempt_id:
        return Decision(reply={"consumed": False})
    batch = ctx.batch()
    woke = ctx.state.queued_run(transfer.run_id) if transfer.run_id is not None else None
    if woke is not None:
        # The result woke the thread while its turn waited for it: the turn
        # has it now, so the wake-up run has nothing left to carry.
        run_control.cancel_queued_run(ctx, batch, woke, "its task's result was delivered to the turn that waited for it",
                                      supersede=False)
    transfer = struct_copy(transfer, status="consumed", resolution="portable", run_id=active.run.id,
                           target_provider=active.run.provider, resolved_at=batch.now, consumed_at=batch.now,
                           target_provider_thread_id=active.attempt.provider_thread_id)
    batch.put(transfer)
    node = tool_node(active)
    batch.emit("context_transfer.consumed", run_id=active.run.id, node_id=node.id, transfer=to_wire(transfer),
               via="tool_result")
    return Decision(batch, {"consumed": True}, seq=False)

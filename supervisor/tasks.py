"""Delegated tasks over the protocol (SPEC F9): ``task.delegate``,
``task.result`` and ``thread.requests {includeChildren}``.

These are daemon-owned methods that run thread commands in turn — never one
command inside another, since a command holds only its own thread's lock
(F18): ``task.delegate`` resolves who delegates and where the task works,
then the parent's actor commits the child (``delegation.delegate``), which
starts its run; ``task.result`` waits, outside every actor, for the task's
run to end and then asks the parent's actor to deliver the result to its
running turn (``delegation.consume_result``).

agentd's MCP tools (supervisor/mcp_tools.py, served by the daemon) are the
usual caller: they name the delegating thread by ``sessionId``, the
provider session whose token the call came with, and proves it with that session's ``credential`` (``authorize_tool_call``),
so an agent cannot speak for a thread it does not run in.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import trio

from agentd.actors import delegation, run_control, worktrees
from agentd.actors.checkpoints.gitproc import Git
from agentd.actors.delegation import ConsumeResult, DelegateCommand
from agentd.actors.providers.base import SessionClaim
from agentd.actors.task_slots import TaskSlot
from agentd.protocol import wire
from agentd.protocol.errors import Forbidden, InvalidParams, NotFound
from agentd.protocol.server import Connection
from agentd.store.db import Store
from agentd.store.hub import Resync
from agentd.store.records import (
    RUN_TERMINAL,
    AppThread,
    ContextHandoff,
    ContextTransfer,
    ProviderSession,
    WorkspaceSource,
    to_wire,
)

from . import workspace_copy
from .context import DaemonContext


def delegating_thread(context: DaemonContext, session_id: str | None, thread_id: str | None) -> AppThread:
    """The thread that delegates: the one the provider session ``session_id``
    runs, else ``thread_id``.

    Raises:
        InvalidParams: neither is given.
        NotFound: it names nothing.
    """
    store = context.store
    if session_id is not None:
        session = store.get(ProviderSession, session_id)
        if session is None or session.thread_id is None:
            raise NotFound(f"no provider session {session_id}; agentd's tool speaks for the sessions agentd started",
                           sessionId=session_id)
        thread_id = session.thread_id
    if thread_id is None:
        raise InvalidParams("task.delegate needs parentThreadId (or the sessionId of the session that asks)",
                            field="parentThreadId")
    thread = store.thread(thread_id)
    if thread is None:
        raise NotFound(f"no thread {thread_id}", threadId=thread_id)
    return thread


def authorize_tool_call(context: DaemonContext, connection: Connection, method: str, session_id: str | None,
                        credential: str | None) -> None:
    """Who may call agentd's tool methods (``access: tool``).

    A ``sessionId`` counts only with that session's live credential (a
    session id alone is no proof: it is in ``daemon.status`` and in the
    environment of the agent's commands). A peer that is an agent's process
    must name its session that way, and be a process of that session's own
    runtime: its runtime or what that started, not another agent's, nor
    a command that read another session's credential. The person's clients
    may also delegate for a thread by ``parentThreadId`` alone
    (``agentd mcp --thread``).

    Raises:
        InvalidParams: a credential without the session it belongs to.
        Forbidden: any other call this does not allow.
    """
    if credential is not None and session_id is None:
        raise InvalidParams(f"{method}: a credential comes with the sessionId it belongs to", field="sessionId")
    if session_id is not None:
        credentials = context.credentials
        if credentials is None or not credentials.check(session_id, credential):
            raise Forbidden(
                f"{method} for session {session_id} needs that session's tool credential (its MCP token, or the file "
                "AGENTD_TOOL_CREDENTIAL names); a session id is no proof",
                method=method, sessionId=session_id,
            )
    peer = connection.peer
    if not peer.agent_process:
        return
    if session_id is None:
        raise Forbidden(
            f"{method} is refused: this connection comes from {peer.why}, and an agent's processes reach agentd's "
            "tool only through the MCP endpoint agentd configured for their session (with its token)",
            method=method, pid=peer.pid,
        )
    if peer.session_id != session_id:
        raise Forbidden(
            f"{method} is refused: the credential of session {session_id} came from {peer.why}, not from a process "
            "of that session's runtime",
            method=method, pid=peer.pid, sessionId=session_id,
        )


async def task_delegate(context: DaemonContext, params: wire.TaskDelegateParams, _conn: Connection) -> dict[str, Any]:
    """``task.delegate``: a child thread and its first run, with the task's
    instructions as a stored ``subagent_spawn`` handoff.

    The limits come first and nothing is made past them: depth and fan-out
    with a slot taken in the same step (task_slots.py), so concurrent calls
    cannot all pass; a place among ``[daemon] max_sessions`` for the task's
    session; then a ``fork`` copy, bounded in bytes. A copy whose
    task is not made — refused by the parent's actor, failed, or the call
    cancelled — is removed."""
    authorize_tool_call(context, _conn, "task.delegate", params.session_id, params.credential)
    registry = context.registry
    config = registry.config
    parent = delegating_thread(context, params.session_id, params.parent_thread_id)
    provider = params.provider or parent.provider
    if provider not in config.providers:
        raise InvalidParams(
            f"unknown provider {provider!r} for the task; configured: {', '.join(sorted(config.providers))}",
            field="provider",
        )
    if params.command_id is not None and (receipt := context.store.receipt(params.command_id)) is not None:
        return registry.check_receipt(receipt, "task.delegate")
    slot = context.task_slots.take(context.store, parent, max_depth=config.delegate_max_depth,
                                  max_fanout=config.delegate_max_fanout)
    copy: Path | None = None
    claim: SessionClaim | None = None
    source: WorkspaceSource | None = None
    try:
        # The task's session, within [daemon] max_sessions (idle sessions are
        # stopped to make room): refused here, before anything is made.
        claim = await context.sessions.claim_session(None)
        workspace: str | None = None
        if params.workspace == "same":
            workspace = parent.workspace
        elif params.workspace == "fork":
            target = registry.workspaces_dir / f"task-{uuid.uuid4().hex}"
            if await trio.to_thread.run_sync(os.path.isdir, parent.workspace):
                await workspace_copy.copy_workspace(parent.workspace, target, limit=config.delegate_max_copy_bytes)
                copy = target
            workspace = str(target)
        elif params.workspace == "worktree":
            # Planned now (read-only), made at the task's first run, which starts at once.
            source = await worktrees.plan(
                git_of(context), kind="worktree", source_thread_id=parent.id, source_workspace=parent.workspace,
                fork_thread_id="pending", root=worktrees.worktrees_root(registry.workspaces_folder), checkpoint_id=None)
        await _tool_call_recorded(context, params.session_id, parent.id)
        command = DelegateCommand(
            parent_thread_id=parent.id, instructions=params.instructions, provider=provider, workspace=workspace,
            workspace_mode=params.workspace, wait=params.wait, max_depth=config.delegate_max_depth,
            max_fanout=config.delegate_max_fanout, slot=slot, session_claim=claim, wake=params.wake,
            workspace_source=source,
        )
        answer: dict[str, Any] = await registry.call(parent.id, delegation.delegate, command, params.command_id,
                                                     method="task.delegate")
        return answer
    except BaseException as exc:
        if _task_not_made(context.store, slot, exc):
            slot.abandoned = True  # the parent's actor, if it still holds the command, makes nothing
            if claim is not None:
                context.sessions.release_claim(claim)
            if copy is not None:
                await workspace_copy.remove_copy(copy)
        raise
    finally:
        context.task_slots.release(slot)


def git_of(context: DaemonContext) -> Git:
    """The git the checkpoint engine runs (``$AGENTD_CHECKPOINT_GIT``), else ``git``."""
    engine = context.registry.checkpoints
    return engine.git if engine is not None else Git(os.environ.get("AGENTD_CHECKPOINT_GIT"))


def _task_not_made(store: Store, slot: TaskSlot, exc: BaseException) -> bool:
    """Whether a ``task.delegate`` that raised ``exc`` made no child, nor
    will: its parent's actor never named one, or named one whose commit
    failed. A call cancelled after the actor named the child may be
    committing it just now: that child keeps its copy."""
    if slot.child_id is None:
        return True
    cancelled = isinstance(exc, trio.Cancelled) or (
        isinstance(exc, BaseExceptionGroup) and exc.subgroup(trio.Cancelled) is not None)
    return not cancelled and store.thread(slot.child_id) is None


#: how long a delegation from a running turn waits for that turn's tool-call node
TOOL_CALL_WAIT = 3.0


async def _tool_call_recorded(context: DaemonContext, session_id: str | None, parent_id: str) -> None:
    """Wait (at most ``TOOL_CALL_WAIT``) until the parent's running turn that
    asks has its call of agentd's tool recorded as a node, so that the
    spawn's source point is that node. The provider reports the call on its
    own pipe while the call itself comes through the MCP endpoint: either
    can reach the daemon first. Past the wait (a provider that reports no
    such node), the source point is the run's root node."""
    if _asking_attempt(context, session_id, parent_id) is None:
        return
    with trio.move_on_after(TOOL_CALL_WAIT):
        while True:
            events = context.hub.subscribe(parent_id)  # before the check: no missed event
            try:
                if _has_tool_call(context.store, parent_id):
                    return
                await events.take()
            except Resync:
                pass  # overflowed: a new subscription, and the store is read again
            finally:
                events.close()


def _has_tool_call(store: Store, thread_id: str) -> bool:
    thread = store.thread(thread_id)
    if thread is None or thread.active_run_id is None:
        return True  # no running turn to wait for
    return any(delegation.is_tool_call(node) for node in store.run_nodes(thread.active_run_id))


def _asking_attempt(context: DaemonContext, session_id: str | None, parent_id: str) -> str | None:
    """The attempt of the parent's running turn when the asking session runs
    the parent (the tool's answer is then delivered there), else None."""
    if session_id is None:
        return None
    session = context.store.get(ProviderSession, session_id)
    if session is None or session.thread_id != parent_id:
        return None
    thread = context.store.thread(parent_id)
    run = context.store.run(thread.active_run_id) if thread and thread.active_run_id else None
    return run.selected_attempt_id if run is not None and run.status not in RUN_TERMINAL else None


async def task_cancel(context: DaemonContext, params: wire.TaskCancelParams, conn: Connection) -> Any:
    """``task.cancel``: stop a delegated task and the tasks it delegated,
    depth-first, each in its own actor (run_control.task_cancel). An agent's
    session may cancel only its own thread's tasks (or theirs, below them)."""
    authorize_tool_call(context, conn, "task.cancel", params.session_id, params.credential)
    store = context.store
    task = store.thread(params.task_id)
    if task is None or task.relationship_to_parent != delegation.DELEGATED_TASK or task.parent_thread_id is None:
        raise NotFound(f"no delegated task {params.task_id}", taskId=params.task_id)
    if params.session_id is not None:
        session = store.get(ProviderSession, params.session_id)
        asking = session.thread_id if session is not None else None
        if asking is None or asking not in _ancestors(store, task):
            raise Forbidden(f"task.cancel is refused: task {task.id} was not delegated by session "
                            f"{params.session_id}'s thread (or a task below it)",
                            method="task.cancel", sessionId=params.session_id, taskId=task.id)
    return await context.registry.call(task.id, run_control.task_cancel, params, params.command_id,
                                       method="task.cancel")


def _ancestors(store: Store, thread: AppThread) -> set[str]:
    """The threads ``thread`` was delegated from, up the tree (not itself)."""
    found: set[str] = set()
    while thread.parent_thread_id and thread.parent_thread_id not in found:
        found.add(thread.parent_thread_id)
        parent = store.thread(thread.parent_thread_id)
        if parent is None or parent.relationship_to_parent not in delegation.NESTING:
            break
        thread = parent
    return found


async def task_result(context: DaemonContext, params: wire.TaskResultParams, _conn: Connection) -> dict[str, Any]:
    """``task.result``: where a delegated task stands; its result once it
    ended (with ``wait``, once it ends). Asked from the parent's session, the
    result is delivered to (``consumed`` by) the parent's running turn."""
    authorize_tool_call(context, _conn, "task.result", params.session_id, params.credential)
    store = context.store
    registry = context.registry
    task = store.thread(params.task_id)
    if task is None or task.relationship_to_parent != delegation.DELEGATED_TASK or task.parent_thread_id is None:
        raise NotFound(f"no delegated task {params.task_id}", taskId=params.task_id)
    attempt = _asking_attempt(context, params.session_id, task.parent_thread_id)
    while True:
        ended = registry.tasks.watch(task.id)  # taken before the check: no missed wake-up
        run = delegation.task_run(store, task.id)
        transfer = store.get(ContextTransfer, delegation.result_transfer_id(run.id)) if run is not None else None
        if run is not None and run.status in RUN_TERMINAL and transfer is None:
            # Ended by a restart, with no actor to write the result: the
            # parent's actor makes it (once), then it is read again.
            await registry.call(task.parent_thread_id, delegation.make_owed_results, task.parent_thread_id,
                                method="task.result")
            transfer = store.get(ContextTransfer, delegation.result_transfer_id(run.id))
        if transfer is not None or not params.wait:
            break
        await ended.wait()
    answer: dict[str, Any] = {"taskId": task.id, "threadId": task.id, "runId": run.id if run else None,
                              "status": run.status if run else "not_started"}
    if transfer is None or run is None:
        answer["text"] = (f"Task {task.id} is {answer['status']}; its result comes when its run ends "
                          "(ask again, or wait).")
        return answer
    handoff = store.get(ContextHandoff, transfer.handoff_id) if transfer.handoff_id else None
    fields = delegation.result_fields(run, [m for m in store.thread_messages(task.id) if m.run_id == run.id],
                                      store.run_nodes(run.id))
    consumed = False
    if attempt is not None:
        delivered = await registry.call(task.parent_thread_id, delegation.consume_result,
                                        ConsumeResult(task.parent_thread_id, transfer.id, attempt), method="task.result")
        consumed = delivered["consumed"]
    transfer = store.get(ContextTransfer, transfer.id) or transfer
    return {**answer, **fields, "transferId": transfer.id, "handoffId": transfer.handoff_id,
            "transfer": to_wire(transfer), "delivered": consumed, "text": handoff.text if handoff else ""}


async def thread_requests(context: DaemonContext, params: wire.ThreadRequestsParams, _conn: Connection) -> dict[str, Any]:
    """``thread.requests``: the thread's pending requests and, with
    ``includeChildren``, those of its delegated children, depth-first."""
    store = context.store
    if store.thread(params.thread_id) is None:
        raise NotFound(f"no thread {params.thread_id}", threadId=params.thread_id)
    requests = list(store.pending_requests(params.thread_id))
    if params.include_children:
        stack = [c for c in reversed(store.thread_children(params.thread_id)) if c.relationship_to_parent in delegation.NESTING]
        seen = {params.thread_id}
        while stack:
            child = stack.pop()
            if child.id in seen:
                continue
            seen.add(child.id)
            requests += store.pending_requests(child.id)
            stack.extend(c for c in reversed(store.thread_children(child.id)) if c.relationship_to_parent in delegation.NESTING)
    return {"requests": [to_wire(r) for r in requests]}

"""The method table: every protocol method, declared once.

An entry names the method, who owns it, its handler and who may call it (``access``: reads are open to every client, agentd's tool
methods need an agent session's credential, commands are the person's).
Its params and result Structs are the method's signature, declared in the
protocol layer (``protocol/signatures.py``) so the schema can be read without
the daemon; every entry takes them from there. The server decodes params with it, the router dispatches with it, thread
actors run the handlers they are given, and a test checks that
``protocol/README.md`` documents exactly these methods. Adding a method
touches this table, its signature, its handler and the README — nothing else.

Thread-owned methods carry a ``route``: which thread's actor handles the call,
from the params (reading the store when the params name a run, a request, a
message or a plan). An id that names nothing is ``not_found`` here, before
any actor is disturbed.
"""

from __future__ import annotations

from typing import Any, Protocol

from agentd.actors import (archiving, artifacts, node_interrupt, requests, restoring, rollback, run_control, steering,
                           thread_admin, transfers)
from agentd.actors.workspace_guard import refusing_while_shared
from agentd.protocol import wire
from agentd.protocol.errors import NotFound
from agentd.protocol.methods import Access, Method, MethodTable, run_now
from agentd.protocol.signatures import SIGNATURES
from agentd.store.db import Store
from agentd.store.records import Checkpoint, ConversationMessage, ExecutionNode, PlanArtifact, Run, RuntimeRequest

from . import export, mcp_tools, queries, run_diff, search, subscriptions, tasks
from . import thread_admin as thread_deletion


class _NamesThread(Protocol):
    """Params that name the thread they act on."""

    @property
    def thread_id(self) -> str: ...


#: the records a thread-owned method's params may name instead of the thread
_Owned = Run | RuntimeRequest | ConversationMessage | PlanArtifact | ExecutionNode | Checkpoint


def by_thread(_store: Store, params: _NamesThread) -> str:
    return params.thread_id


def _owner_thread(store: Store, kind: type[_Owned], record_id: str, what: str) -> str:
    record = store.get(kind, record_id)
    if record is None:
        raise NotFound(f"no {what} {record_id}", **{f"{what}Id": record_id})
    return record.thread_id


def by_run(store: Store, params: Any) -> str:
    return _owner_thread(store, Run, params.run_id, "run")


def by_request(store: Store, params: Any) -> str:
    return _owner_thread(store, RuntimeRequest, params.request_id, "request")


def by_message(store: Store, params: Any) -> str:
    return _owner_thread(store, ConversationMessage, params.message_id, "message")


def by_plan(store: Store, params: Any) -> str:
    return _owner_thread(store, PlanArtifact, params.plan_id, "plan")


def by_node(store: Store, params: Any) -> str:
    return _owner_thread(store, ExecutionNode, params.node_id, "node")


def by_checkpoint(store: Store, params: Any) -> str:
    return _owner_thread(store, Checkpoint, params.checkpoint_id, "checkpoint")


def _daemon(name: str, handler: Any, *, access: Access | Any, quick: Any = None) -> Method:
    params, result = SIGNATURES[name]
    return Method(name, params, "daemon", handler, quick=quick, access=access, result=result)


def _read(name: str, handler: Any, *, access: Access = "open") -> Method:
    """A daemon-owned method that never blocks: answered where the request is read, with no task.
    A read is open to every client unless ``access`` says otherwise."""
    return _daemon(name, handler, access=access, quick=run_now(handler))


def _thread(name: str, handler: Any, route: Any) -> Method:
    """A thread-owned method: a command of the person's, closed to agents' processes."""
    params, result = SIGNATURES[name]
    return Method(name, params, "thread", handler, route, access="control", result=result)


def thread_create_access(params: wire.ThreadCreateParams) -> Access:
    """An agent's process may make a thread only as an agent's (``createdBy:
    agent``): a thread by itself runs nothing, and one marked as the
    person's or the system's would speak for them. One given MCP servers
    (processes its runtimes start) is the person's to make, as
    ``thread.update`` is."""
    return "open" if params.created_by == "agent" and not params.mcp_servers else "control"


METHODS = MethodTable([
    # commands
    _daemon("thread.create", queries.thread_create, quick=queries.thread_create_quick, access=thread_create_access),
    _thread("thread.message.send", steering.message_send, by_thread),
    _thread("run.interrupt", run_control.run_interrupt, by_run),
    _thread("run.retry", run_control.run_retry, by_run),
    _thread("node.interrupt", node_interrupt.node_interrupt, by_node),
    _thread("thread.stop", run_control.thread_stop, by_thread),
    _thread("thread.queue.release", run_control.queue_release, by_thread),
    _thread("queued-run.cancel", run_control.queued_run_cancel, by_run),
    _thread("queued-run.reorder", run_control.queued_run_reorder, by_thread),
    _thread("queued-message.promote-to-steer", steering.queued_message_promote_to_steer, by_message),
    _thread("approval.respond", requests.approval_respond, by_request),
    _thread("user-input.respond", requests.user_input_respond, by_request),
    _thread("plan.implement", artifacts.plan_implement, by_plan),
    _thread("thread.fork", transfers.thread_fork, by_thread),
    _read("run.resume", queries.run_resume),
    _daemon("task.delegate", tasks.task_delegate, access="tool"),
    _daemon("task.cancel", tasks.task_cancel, access="tool"),
    # Restores refuse while another thread runs in the folder they write (workspace_guard).
    _thread("checkpoint.restore", refusing_while_shared(restoring.checkpoint_restore), by_checkpoint),
    _thread("rollback.toRun", refusing_while_shared(rollback.rollback_to_run), by_thread),
    _thread("rollback.node", refusing_while_shared(rollback.rollback_node), by_node),
    _daemon("thread.unquarantine", queries.thread_unquarantine, access="control"),
    _thread("thread.update", thread_admin.thread_update, by_thread),
    # Runs in the thread's actor (race-free with a run starting), then drops its refs.
    _daemon("thread.delete", thread_deletion.thread_delete, access="control"),
    _thread("thread.archive", archiving.thread_archive, by_thread),
    _thread("thread.unarchive", archiving.thread_unarchive, by_thread),
    # reads
    _read("thread.list", queries.thread_list),
    _read("thread.get", queries.thread_get),
    _read("run.get", queries.run_get),
    _read("thread.requests", tasks.thread_requests),
    _daemon("task.result", tasks.task_result, access="tool"),
    _daemon("mcp.endpoint", mcp_tools.mcp_endpoint, access="tool"),
    _read("thread.transfers", queries.thread_transfers),
    _read("handoff.get", queries.handoff_get),
    _read("daemon.status", queries.daemon_status),
    # A login code is a way to the WebSocket's token: the person's, not an agent's.
    _read("web.loginCode", queries.web_login_code, access="control"),
    _daemon("providers.list", queries.providers_list, access="open"),
    _read("checkpoint.list", queries.checkpoint_list),
    _daemon("checkpoint.diff", queries.checkpoint_diff, access="open"),
    _daemon("run.diff", run_diff.run_diff, access="open"),
    _daemon("thread.search", search.thread_search, access="open"),
    _daemon("thread.export", export.thread_export, access="open"),
    # events
    _daemon("events.subscribe", subscriptions.subscribe, access="open"),
    _read("events.unsubscribe", subscriptions.unsubscribe),
])

"""``thread.export``: one thread as Markdown or as one JSON document.

Built from the store in a worker thread (a thread of many runs reads many
records; the event loop never waits for it). Markdown is the conversation a
person reads — messages, tool calls and commands summarized one line each,
handoffs marked; JSON is every record of the thread in its wire form: the
thread, its runs (each with its attempts, nodes and artifacts), messages,
transfers, handoffs and checkpoints.
"""

from __future__ import annotations

import datetime
from typing import Any

import trio

from agentd.protocol import wire
from agentd.protocol.errors import NotFound
from agentd.protocol.server import Connection
from agentd.store.db import Store
from agentd.store.records import AppThread, ContextHandoff, ConversationMessage, ExecutionNode, Run, to_wire

from .context import DaemonContext

#: node kinds a Markdown export leaves out (the answers are shown as messages)
_QUIET_KINDS = frozenset({"root_turn", "agent_message", "reasoning"})


async def thread_export(context: DaemonContext, params: wire.ThreadExportParams, _conn: Connection) -> dict[str, Any]:
    """``thread.export {threadId, format}``: the thread as ``markdown`` (text) or ``json`` (``document``)."""
    store = context.store
    thread = store.thread(params.thread_id)
    if thread is None:
        raise NotFound(f"no thread {params.thread_id}; list threads with thread.list", threadId=params.thread_id)
    if params.format == "json":
        document = await trio.to_thread.run_sync(export_document, store, thread)
        return {"threadId": thread.id, "format": "json", "document": document}
    text = await trio.to_thread.run_sync(export_markdown, store, thread)
    return {"threadId": thread.id, "format": "markdown", "markdown": text}


def _handoffs_of(store: Store, thread: AppThread, attempts: list[Any]) -> list[ContextHandoff]:
    """The handoffs the thread's attempts were given and its transfers carry, oldest first."""
    ids: list[str] = []
    for attempt in attempts:
        ids += [attempt.handoff_id] if attempt.handoff_id else []
        ids += list(attempt.extra_handoff_ids)
    ids += [t.handoff_id for t in store.thread_transfers(thread.id) if t.handoff_id]
    found = {}
    for handoff_id in dict.fromkeys(ids):
        handoff = store.get(ContextHandoff, handoff_id)
        if handoff is not None:
            found[handoff.id] = handoff
    return sorted(found.values(), key=lambda h: h.created_at)


def export_document(store: Store, thread: AppThread) -> dict[str, Any]:
    """Every record of ``thread``, as one JSON-ready document (in a worker thread)."""
    runs = []
    attempts_all: list[Any] = []
    for run in store.thread_runs(thread.id):
        attempts = store.run_attempts(run.id)
        attempts_all += attempts
        runs.append({"run": to_wire(run), "attempts": [to_wire(a) for a in attempts],
                     "nodes": [to_wire(n) for n in store.run_nodes(run.id)],
                     "artifacts": [to_wire(a) for a in store.run_artifacts(run.id)]})
    return {
        "thread": to_wire(thread),
        "runs": runs,
        "messages": [to_wire(m) for m in store.thread_messages(thread.id)],
        "transfers": [to_wire(t) for t in store.thread_transfers(thread.id)],
        "handoffs": [to_wire(h) for h in _handoffs_of(store, thread, attempts_all)],
        "checkpoints": [to_wire(c) for c in store.thread_checkpoints(thread.id)],
    }


def _when(at: float | None) -> str:
    if not at:
        return "?"
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _quote(text: str) -> str:
    return "\n".join("> " + line if line else ">" for line in text.splitlines() or [""])


def node_line(node: ExecutionNode) -> str | None:
    """One line for a step of a run (None: not shown in an export)."""
    if node.kind in _QUIET_KINDS:
        return None
    what = node.title or node.kind
    detail = node.detail or {}
    if node.kind == "command_execution":
        command = detail.get("command") or what
        code = detail.get("exitCode")
        ending = f"exit {code}" if code is not None else node.status
        return f"- ran `{command}` ({ending})"
    if node.kind == "file_change":
        return f"- {what} ({node.status})"
    return f"- [{node.kind}] {what} ({node.status})"


def _run_markdown(store: Store, run: Run, messages: list[ConversationMessage],
                  handoffs: dict[str, ContextHandoff]) -> list[str]:
    out = [f"## Run {run.ordinal} — {run.status}" + (f" ({run.reason})" if run.reason else ""),
           f"*{_when(run.started_at or run.created_at)} · {run.provider}*", ""]
    for attempt in store.run_attempts(run.id):
        for handoff_id in [attempt.handoff_id, *attempt.extra_handoff_ids]:
            handoff = handoffs.get(handoff_id) if handoff_id else None
            if handoff is not None:
                out += [f"**Handoff** ({handoff.strategy}, {handoff.size} characters, `{handoff.id}`): "
                        f"the agent was given this context.", ""]
    for message in messages:
        who = "You" if message.role == "user" else "Agent"
        status = "" if message.status == "complete" else f" ({message.status})"
        out += [f"**{who}**{status}:", "", _quote(message.text) if message.role == "user" else message.text, ""]
        if message.role == "user":
            steps = [line for n in store.run_nodes(run.id) if (line := node_line(n)) is not None]
            if steps:
                out += ["Steps:", "", *steps, ""]
    return out


def export_markdown(store: Store, thread: AppThread) -> str:
    """The thread as Markdown (in a worker thread)."""
    runs = store.thread_runs(thread.id)
    attempts = [a for run in runs for a in store.run_attempts(run.id)]
    handoffs = {h.id: h for h in _handoffs_of(store, thread, attempts)}
    by_run: dict[str | None, list[ConversationMessage]] = {}
    for message in store.thread_messages(thread.id):
        by_run.setdefault(message.run_id, []).append(message)
    out = [f"# {thread.title or thread.id}", "",
           f"Thread `{thread.id}` · {thread.provider} · {thread.workspace or 'its own workspace'} · "
           f"created {_when(thread.created_at)}"]
    if thread.parent_thread_id:
        parent = store.thread(thread.parent_thread_id)
        source = f"`{thread.parent_thread_id}`" + ("" if parent is not None else " (deleted)")
        out.append(f"{(thread.relationship_to_parent or 'child').replace('_', ' ')} of {source}")
    out.append("")
    for run in runs:
        out += _run_markdown(store, run, by_run.get(run.id, []), handoffs)
    return "\n".join(out).rstrip() + "\n"

"""Approvals and user-input requests (SPEC F15).

A provider request becomes an app-owned RuntimeRequest (the provider's id is
only a reference), a node in the graph, and the run and thread ``waiting``.
Answering goes back through the live provider callback; when that callback is
gone (its session died, the daemon restarted) the request is marked
``not_resumable`` and the caller gets that error, never a fake success.
Requests still pending when an attempt ends are closed by the completion
barrier (``graph.requests_not_resumable``).

Handlers (one per method): ``approval_respond``, ``user_input_respond``.
"""

from __future__ import annotations

from typing import Any, Iterable

from agentd.protocol.errors import InvalidParams, InvalidState, NotFound, NotResumable
from agentd.store.db import struct_copy
from agentd.store.ids import new_id
from agentd.store.records import NODE_TERMINAL, ExecutionNode, NodeStatus, PlanArtifact, RuntimeRequest, to_wire

from . import graph
from .context import ThreadContext
from agentd.protocol import results

from .effects import NO_SEQ, AnswerRequest, Commit, Decision, Transition
from .graph import EVENT_PREFIX, ThreadBatch
from .messages import Command
from .providers.base import ProviderRuntimeError, RequestOpened
from .state import ThreadState

#: request kind -> the kind of its node
NODE_KIND = {"approval": "approval", "user_input": "user_input_request"}
#: what every approval takes, and what one from a provider that names none offers
BASE_DECISIONS = ("accept", "decline")
#: the decisions that allow (the approval's node ends ``completed``)
ALLOWING = ("accept", "acceptForSession")


def offered_decisions(request: RuntimeRequest) -> list[str]:
    """The decisions an approval takes: those its provider offered, else
    ``accept`` and ``decline`` (a provider that names none, an older store)."""
    return list(request.decisions) or list(BASE_DECISIONS)


# -- transitions ------------------------------------------------------------------------


def request_opened(batch: ThreadBatch, state: ThreadState, event: RequestOpened) -> RuntimeRequest:
    """The provider waits on the user: a RuntimeRequest with its node (and,
    for questions, a ``questions`` artifact); the run and thread wait."""
    active = state.active
    assert active is not None
    now = batch.now
    node_kind = NODE_KIND.get(event.kind, event.kind)
    node = active.nodes.get(event.item_id or "")
    if node is None or node.kind != node_kind:
        # The provider has no item of its own for the request (Codex asks
        # about a command item): the request gets its node under that item.
        parent = graph.parent_node(active, event.item_id)
        node = ExecutionNode(
            id=new_id("nod"), thread_id=state.thread_id, run_id=active.run.id, attempt_id=active.attempt.id,
            parent_node_id=parent.id, kind=node_kind, status="running", title=event.kind,
            provider_item_id=None, detail=event.detail, created_at=now,
        )
        batch.put(node)
        batch.emit(f"{node_kind}.started", run_id=active.run.id, node_id=node.id, node=to_wire(node))
    decisions = [d for d in event.decisions if d in ("accept", "acceptForSession", "decline")] or list(BASE_DECISIONS)
    request = RuntimeRequest(
        id=new_id("req"), thread_id=state.thread_id, run_id=active.run.id, attempt_id=active.attempt.id,
        node_id=node.id, kind=event.kind, provider_request_ref=event.request_ref, session_id=active.session_id,
        detail=event.detail, decisions=decisions if event.kind == "approval" else [], created_at=now,
    )
    batch.put(request)
    payload: dict[str, Any] = {"request": to_wire(request), "node": to_wire(node)}
    if event.kind == "user_input":
        artifact = PlanArtifact(
            id=new_id("art"), thread_id=state.thread_id, run_id=active.run.id, node_id=node.id, kind="questions",
            questions=list(event.detail.get("questions", [])), request_id=request.id, created_at=now, updated_at=now,
        )
        batch.put(artifact)
        payload["artifact"] = to_wire(artifact)
    batch.emit(f"{EVENT_PREFIX.get(event.kind, event.kind)}.requested", run_id=active.run.id, node_id=node.id, **payload)
    run = active.run
    if run.status != "waiting":
        run = struct_copy(run, status="waiting")
        batch.put(run)
        batch.emit("run.waiting", run_id=run.id, node_id=active.root.id, run=to_wire(run))
    graph.set_thread(batch, state, status="waiting")
    active.run = run
    active.requests[request.id] = request
    # A node made for the request is keyed by the request; the provider's
    # own request item keeps its item id.
    key = event.item_id if node.provider_item_id is not None and event.item_id else request.id
    active.nodes.setdefault(key, node)
    return request


def resolve(
    batch: ThreadBatch, state: ThreadState, request: RuntimeRequest, response: dict[str, Any], node_status: NodeStatus,
    event_type: str, *, artifacts: Iterable[PlanArtifact],
) -> RuntimeRequest:
    """The provider took the answer: the request is resolved, its node ends
    with ``node_status``, its questions (among the run's ``artifacts``) are
    answered, and the run runs again once no request is pending."""
    active = state.active
    assert active is not None
    now = batch.now
    request = struct_copy(request, status="resolved", response=response, resolved_at=now)
    batch.put(request)
    active.requests.pop(request.id, None)
    batch.emit(event_type, run_id=active.run.id, node_id=request.node_id, request=to_wire(request))
    node = next((n for n in active.nodes.values() if n.id == request.node_id), None)
    if node is not None and node.status not in NODE_TERMINAL:
        node = struct_copy(node, status=node_status, detail={**node.detail, **response}, ended_at=now)
        batch.put(node)
        batch.emit(f"{node.kind}.{node.status}", run_id=active.run.id, node_id=node.id, node=to_wire(node))
        for key, value in list(active.nodes.items()):
            if value.id == node.id:
                active.nodes[key] = node
    for artifact in artifacts:
        if artifact.request_id == request.id:
            batch.put(struct_copy(artifact, status="answered", answers=response.get("answers", {}), updated_at=now))
    if not active.requests:
        active.run = struct_copy(active.run, status="running")
        batch.put(active.run)
        graph.set_thread(batch, state, status="running")
        batch.emit("run.running", run_id=active.run.id, node_id=active.root.id, run=to_wire(active.run))
    return request


# -- in the actor -----------------------------------------------------------------------


def on_request_opened(ctx: ThreadContext, event: RequestOpened) -> Decision:
    """The provider asks the person something (``request_opened``)."""
    batch = ctx.batch()
    request_opened(batch, ctx.state, event)
    return Decision(batch)


def _pending_request(ctx: ThreadContext, request_id: str, kind: str) -> RuntimeRequest:
    request = ctx.store.get(RuntimeRequest, request_id)
    if request is None or request.thread_id != ctx.thread_id:
        raise NotFound(f"no request {request_id}; list pending requests with thread.requests", requestId=request_id)
    if request.kind != kind:
        method = "approval.respond" if request.kind == "approval" else "user-input.respond"
        raise InvalidParams(f"request {request_id} is a {request.kind} request; answer it with {method}", field="requestId")
    if request.status == "not_resumable":
        raise NotResumable(f"request {request_id} can no longer be answered: {request.reason}", requestId=request_id)
    if request.status != "pending":
        raise InvalidState(f"request {request_id} is already {request.status}", requestId=request_id, status=request.status)
    return request


def _answer(ctx: ThreadContext, request: RuntimeRequest, response: dict[str, Any]) -> Transition:
    """Send ``response`` through the live callback, or mark the request
    not_resumable and raise NotResumable."""
    active = ctx.state.active
    why = None
    if active is None or request.id not in active.requests:
        why = "its run is no longer active"
    elif ctx.live_session_id() != request.session_id or request.session_id is None:
        why = "the provider session that asked has ended"
    else:
        try:
            yield AnswerRequest(request.session_id, request.provider_request_ref or "", response)
            return
        except ProviderRuntimeError as exc:
            why = f"the provider could not take the answer ({exc})"
    batch = ctx.batch()
    graph.mark_not_resumable(batch, request, why)
    if active is not None:
        active.requests.pop(request.id, None)
    yield Commit(batch)
    raise NotResumable(f"request {request.id} can no longer be answered: {why}", requestId=request.id)


def _resolve(
    ctx: ThreadContext, command: Command, request: RuntimeRequest, response: dict[str, Any], node_status: NodeStatus,
    event_type: str,
) -> Decision:
    active = ctx.state.active
    assert active is not None
    batch = ctx.batch()
    resolve(batch, ctx.state, request, response, node_status, event_type, artifacts=ctx.store.run_artifacts(active.run.id))
    result = results.RequestRespondResult(request_id=request.id, status="resolved", seq=NO_SEQ)
    batch.record_receipt(command.command_id, command.method, result)
    return Decision(batch, result)


def check_options(questions: list[dict[str, Any]], answers: dict[str, Any]) -> None:
    """An answer to a question with options is one of them (or several, as a
    list), unless the question takes free text too (``allowOther``; issue 28
    item 10: ``color=green`` for red/blue is refused, not passed on).

    Raises:
        InvalidParams: naming the question, the answer and its options.
    """
    for question in questions:
        options = [str(o) for o in question.get("options") or []]
        if not options or question.get("allowOther"):
            continue
        given = answers.get(str(question.get("id")))
        if question.get("optional") and given in (None, "", []):
            continue  # an optional question left unanswered
        values = given if isinstance(given, list) else [given]
        wrong = [str(v) for v in values if str(v) not in options]
        if wrong:
            raise InvalidParams(
                f"answer {', '.join(map(repr, wrong))} to {question.get('id')!r} is not one of its options: "
                f"{', '.join(options)}", field=f"answers.{question.get('id')}", options=options,
            )


# -- handlers ---------------------------------------------------------------------------


def approval_respond(ctx: ThreadContext, command: Command) -> Transition:
    """``approval.respond``: accept (once or for the session) or decline a
    pending approval, with one of the decisions its provider offered."""
    params = command.params
    request = _pending_request(ctx, params.request_id, "approval")
    offered = offered_decisions(request)
    if params.decision not in offered:
        raise InvalidParams(f"request {request.id} does not offer decision {params.decision}; it offers "
                            f"{', '.join(offered)}", field="decision", decisions=offered)
    yield from _answer(ctx, request, {"decision": params.decision})
    node_status: NodeStatus = "completed" if params.decision in ALLOWING else "cancelled"
    return _resolve(ctx, command, request, {"decision": params.decision}, node_status, "approval.resolved")


def user_input_respond(ctx: ThreadContext, command: Command) -> Transition:
    """``user-input.respond``: answer every question of a user-input request."""
    params = command.params
    request = _pending_request(ctx, params.request_id, "user_input")
    questions = request.detail.get("questions", [])
    missing = [q.get("id") for q in questions if q.get("id") not in params.answers and not q.get("optional")]
    if missing:
        raise InvalidParams(f"answers lack {', '.join(map(str, missing))}; answer every question", field="answers")
    check_options(questions, params.answers)
    yield from _answer(ctx, request, {"answers": params.answers})
    return _resolve(ctx, command, request, {"answers": params.answers}, "completed", "user_input.resolved")

"""Text output of the ``agentd`` command: a thread as a tree, its messages,
requests and plans, and one line per event."""

from __future__ import annotations

from typing import Any

TODO_MARK = {"completed": "[x]", "in_progress": "[~]", "inProgress": "[~]"}


def indent(text: str, prefix: str = "    ") -> list[str]:
    """``text`` line by line under ``prefix`` (an empty text is one empty line)."""
    return [prefix + line for line in (text.splitlines() or [""])]


def snippet(text: str, width: int = 60) -> str:
    """The start of ``text`` on one line, quoted."""
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= width else flat[: width - 1] + "…")


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def held_line(count: int, thread_id: str) -> str:
    """What a held queue means for the person, and what to do."""
    one = count == 1
    return f"queue held: {plural(count, 'run')} {'waits' if one else 'wait'}; `agentd release {thread_id}` starts {'it' if one else 'them'}"


def count(tokens: int) -> str:
    """A token count in a few characters: ``950``, ``12.3k``, ``4.1M``."""
    if tokens < 1000:
        return str(tokens)
    if tokens < 1_000_000:
        return f"{tokens / 1000:.1f}k"
    return f"{tokens / 1_000_000:.1f}M"


def cost_text(cost: float | None) -> str:
    """A cost in the price table's unit (null: not known, never guessed)."""
    return "" if cost is None else f"{cost:.4f}" if cost < 100 else f"{cost:.2f}"


def usage_text(usage: dict[str, Any] | None, cost: float | None) -> str:
    """Tokens used (and their cost where known), or "" when none were reported."""
    if not usage:
        return ""
    cached = f" ({count(usage['cachedInputTokens'])} cached)" if usage.get("cachedInputTokens") else ""
    reasoning = f" ({count(usage['reasoningTokens'])} reasoning)" if usage.get("reasoningTokens") else ""
    text = f"tokens {count(usage['inputTokens'])} in{cached}, {count(usage['outputTokens'])} out{reasoning}"
    return text + (f", cost {cost_text(cost)}" if cost is not None else "")


def stalled_text(run: dict[str, Any], now: float) -> str:
    """`` STALLED …`` for a running run whose provider has gone quiet, else ""."""
    since = run.get("stalledSince")
    if since is None or run["status"] not in ("running", "waiting"):
        return ""
    return f" STALLED (no word from the agent for {max(0, round(now - since))} s)"


# -- a thread ----------------------------------------------------------------------------


def render_tree(thread: dict[str, Any], runs: list[dict[str, Any]], now: float = 0.0) -> list[str]:
    """The thread, its runs, attempts and nodes as an indented tree (``now``:
    the wall clock, for how long a stalled run has been silent)."""
    used = usage_text(thread.get("usage"), thread.get("cost"))
    lines = [f"{thread['id']} \"{thread['title']}\" provider={thread['provider']} status={thread['status']}"
             + (f" — {used}" if used else "")]
    for r_index, detail in enumerate(runs):
        run = detail["run"]
        last_run = r_index == len(runs) - 1
        branch, stem = ("└─", "   ") if last_run else ("├─", "│  ")
        reason = f" reason={run['reason']}" if run.get("reason") else ""
        held = " (held)" if run["status"] == "queued" and run["id"] in held_run_ids(thread) else ""
        used = usage_text(run.get("usage"), run.get("cost"))
        lines.append(f"{branch} run {run['ordinal']} {run['id']} {run['status']}{held}{reason}{stalled_text(run, now)}"
                     + (f" — {used}" if used else ""))
        children = [("attempt", a) for a in detail["attempts"]]
        by_parent: dict[str | None, list[dict]] = {}
        for node in detail["nodes"]:
            by_parent.setdefault(node.get("parentNodeId"), []).append(node)
        children += [("node", n) for n in by_parent.get(None, [])]
        for c_index, (what, item) in enumerate(children):
            last = c_index == len(children) - 1
            b = "└─" if last else "├─"
            if what == "attempt":
                pt = f" providerThread={item['providerThreadId']}" if item.get("providerThreadId") else ""
                lines.append(f"{stem}{b} attempt {item['number']} ({item['reason']}) {item['status']}{pt}")
            else:
                _render_node(lines, item, by_parent, stem + b, stem + ("   " if last else "│  "))
    return lines


def _render_node(lines: list[str], node: dict, by_parent: dict, head: str, stem: str) -> None:
    summary = f" — {node['summary']}" if node.get("summary") else ""
    lines.append(f"{head} {node['kind']} {node['title']} {node['status']}{summary}")
    kids = by_parent.get(node["id"], [])
    for index, child in enumerate(kids):
        last = index == len(kids) - 1
        _render_node(lines, child, by_parent, stem + ("└─" if last else "├─"), stem + ("   " if last else "│  "))


def held_run_ids(thread: dict[str, Any]) -> set[str]:
    """The queued runs a Stop holds."""
    return set(thread.get("heldRunIds") or []) if thread.get("queueHeld") else set()


def queue_lines(thread: dict[str, Any], runs: list[dict[str, Any]]) -> list[str]:
    """The active run, the queued runs and a held queue, for ``show``."""
    by_id = {r["id"]: r for r in runs}
    held = held_run_ids(thread)
    lines = []
    active = by_id.get(thread.get("activeRunId") or "")
    if active is not None:
        lines.append(f"active run: {active['id']} (run {active['ordinal']}, {active['status']})")
    queued = [r for r in runs if r["status"] == "queued"]
    if queued:
        shown = ", ".join(f"{r['id']} (run {r['ordinal']}{', held' if r['id'] in held else ''})" for r in queued)
        lines.append(f"queued: {shown}")
    waiting = [r for r in queued if r["id"] in held]
    if waiting:
        lines.append(held_line(len(waiting), thread["id"]))
    return lines


def message_lines(messages: list[dict[str, Any]], runs: list[dict[str, Any]]) -> list[str]:
    """Messages under a header, each with its text indented."""
    if not messages:
        return []
    ordinal = {r["id"]: r["ordinal"] for r in runs}
    lines = ["", "Messages"]
    for message in messages:
        where = f" · run {ordinal[message['runId']]}" if message.get("runId") in ordinal else ""
        lines.append(f"  {message['role']}{where} · {message['status']}")
        lines += indent(message["text"])
    return lines


def plan_lines(artifacts: list[dict[str, Any]]) -> list[str]:
    """The proposed plans among a thread's artifacts, for ``show``."""
    plans = [a for a in artifacts if a["kind"] == "proposed_plan"]
    if not plans:
        return []
    lines = ["", "Proposed plans"]
    for plan in plans:
        todo = f"implement with `agentd implement {plan['id']}`" if plan["status"] == "proposed" else f"by {plan.get('implementedBy')}"
        lines.append(f"  {plan['id']} {plan['status']} — {todo}")
        lines += indent(plan.get("text") or "")
    return lines


# -- requests ---------------------------------------------------------------------------


def describe_request(request: dict[str, Any]) -> str:
    detail = request.get("detail", {})
    if request["kind"] == "approval":
        return f"approval needed: {detail.get('command') or detail.get('kind') or 'an action'}"
    questions = "; ".join(q.get("question", "") for q in detail.get("questions", []))
    return f"question: {questions}"


def answer_command(request: dict[str, Any]) -> str:
    """The exact command that answers ``request``."""
    if request["kind"] == "approval":
        return f"agentd approve {request['id']}"
    pairs = []
    for question in request.get("detail", {}).get("questions", []):
        options = question.get("options") or []
        pairs.append(f"{question.get('id')}={options[0] if options else '…'}")
    return f"agentd answer {request['id']} {' '.join(pairs)}"


def request_lines(request: dict[str, Any]) -> list[str]:
    """A request for a reader who answers it with another command: its
    questions' keys and options, and the command."""
    lines = [f"[{describe_request(request)}] {request['id']}"]
    for question in request.get("detail", {}).get("questions", []):
        options = question.get("options") or []
        choice = f" (one of: {', '.join(map(str, options))})" if options else ""
        lines.append(f"  {question.get('id')}: {question.get('question', '')}{choice}")
    deny = ""
    if request["kind"] == "approval":
        always = ", --always to allow for the session" if "acceptForSession" in (request.get("decisions") or []) else ""
        deny = f"   (--deny to decline{always})"
    lines.append(f"  answer with: {answer_command(request)}{deny}")
    return lines


# -- plans while a run streams ------------------------------------------------------------


def todo_lines(artifact: dict[str, Any]) -> list[str]:
    steps = artifact.get("steps") or []
    lines = [f"[todo] {plural(len(steps), 'step')}"]
    for step in steps:
        lines.append(f"  {TODO_MARK.get(str(step.get('status')), '[ ]')} {step.get('step', '')}")
    return lines


def proposed_plan_lines(artifact: dict[str, Any]) -> list[str]:
    lines = [f"[proposed plan] {artifact['id']} — implement with `agentd implement {artifact['id']}`"]
    return lines + indent(artifact.get("text") or "", "  ")


def describe_node_event(event: dict[str, Any]) -> str | None:
    """A one-line description of an activity, or None for events not shown."""
    kind, _, phase = event["type"].rpartition(".")
    node = event["payload"].get("node")
    if node is None or kind in ("root_turn", "approval", "user_input_request", "plan") or "request" in event["payload"]:
        return None
    title = node.get("title") or kind
    return f"[{kind}] {title}: {phase}"


# -- one line per event (``agentd events``) -------------------------------------------------


def event_summary(event: dict[str, Any]) -> str:
    """The payload in a few words: the text of an append, the reason of an end, …"""
    kind = event["type"]
    p = event.get("payload") or {}
    if kind in ("message.delta", "message.appended"):
        return f"+{snippet(p.get('text', ''))} at {p.get('offset')}"
    if "message" in p and isinstance(p["message"], dict):
        m = p["message"]
        return f"{m.get('role')} {m.get('status')} {snippet(m.get('text', ''))}"
    if kind == "message.completed":
        return f"{p.get('status')}, {p.get('length')} characters"
    if "run" in p and isinstance(p["run"], dict):
        r = p["run"]
        extra = f" {p['why']}" if p.get("why") else (f" ({p['dispatchMode']})" if p.get("dispatchMode") else "")
        return f"run {r.get('ordinal')} {r.get('status')}" + (f": {r['reason']}" if r.get("reason") else "") + extra
    if "node" in p and "request" not in p:
        n = p["node"]
        return f"{n.get('title') or n.get('kind')} {n.get('status')}" + (f": {n['summary']}" if n.get("summary") else "")
    if "request" in p:
        r = p["request"]
        answer = r.get("response") or {}
        return describe_request(r) + (f" → {answer}" if answer else "") + (f": {r['reason']}" if r.get("reason") else "")
    if "artifact" in p:
        a = p["artifact"]
        return f"{a.get('kind')} {a.get('status')}" + (f", {plural(len(a['steps']), 'step')}" if a.get("steps") else "")
    if "session" in p:
        s = p["session"]
        return f"{s.get('provider')} {s.get('status')}" + (f" pid {s['pid']}" if s.get("pid") else "") + (f": {s['reason']}" if s.get("reason") else "")
    if "providerThread" in p:
        pt = p["providerThread"]
        return f"{pt.get('provider')} {pt.get('status')}, native {pt.get('nativeThreadId')}"
    if "handoff" in p:
        h = p["handoff"]
        return f"{h.get('strategy')}: {h.get('reason')}, {plural(len(h.get('text') or ''), 'character')}"
    if kind == "runtime.warning":
        return str(p.get("message", ""))
    if kind == "run.usage":
        return f"{usage_text(p.get('usage'), p.get('cost'))}; thread {usage_text(p.get('threadUsage'), p.get('threadCost'))}"
    if kind in ("run.stalled", "run.unstalled"):
        return f"silent for {p.get('silentFor')} s"
    if "queuedRunIds" in p:
        return f"queued: {', '.join(p['queuedRunIds']) or 'none'}"
    if "thread" in p:
        return f"{snippet(p['thread'].get('title') or '')}"
    if kind == "daemon.reconciled":
        counts = ", ".join(f"{k} {v}" for k, v in p.items() if isinstance(v, int) and v)
        return f"{p.get('reason')}: {counts or 'nothing open'}"
    if "reason" in p:
        return str(p["reason"])
    if kind == "run.steer_requested":
        return f"{p.get('strategy')} ({p.get('mode')})"
    return ", ".join(f"{k}={v}" for k, v in p.items() if not isinstance(v, (dict, list)))[:80]


def event_line(event: dict[str, Any]) -> str:
    return (f"{event['seq']:>8} {event['type']:24} {event.get('threadId') or '-'} {event.get('runId') or '-'}  "
            f"{event_summary(event)}").rstrip()

"""Handoff text: what a provider thread that lacks part of a conversation is
told about it (SPEC F5 ContextHandoff, F6 portable fork, F4 replacement).

Built from the stored graph, never from a transcript dump: per run, the user's
messages, the final answers, the files changed (file-change nodes), the
commands run and how they ended, decisions (approvals, proposed plans) and
questions left open — no protocol noise. The text is capped; when the runs do
not fit, the oldest are dropped first (their ids are recorded), and a run too
long on its own is cut (recorded too), so what the agent was *not* told is as
auditable as what it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from agentd.store.db import Store
from agentd.store.records import (
    Checkpoint,
    ContextHandoff,
    ConversationMessage,
    ExecutionNode,
    HandoffStrategy,
    PlanArtifact,
    Run,
)

#: how each strategy introduces itself to the agent
INTRO: dict[str, str] = {
    "portable_full": (
        "You are continuing a conversation that so far ran elsewhere (another agent, or the thread this one "
        "was forked from). What happened so far, oldest first:"
    ),
    "delta": (
        "While you were away, this conversation went on with another agent. What happened since your last "
        "turn here, oldest first:"
    ),
    "full_thread_summary": (
        "This conversation continues in a fresh session; the earlier one is not used ({reason}). "
        "What happened so far, oldest first:"
    ),
    "checkpoint_context": (
        "You are continuing this conversation from a checkpoint: the files and the conversation as they "
        "were at that point ({reason}). What happened up to it, oldest first:"
    ),
    "merge_back": (
        "{who} ({fork}) went on on its own since {since}. What it concluded and did, "
        "oldest first (its conversation is not repeated here, and none of its files were copied here):"
    ),
    "portable_context": "What happened so far, oldest first:",
}

COMMAND_KINDS = frozenset({"command_execution", "tool", "mcp_tool_call"})
#: how every handoff's text ends
END = "\n[end of handoff]"
#: files a checkpoint_context handoff names before "and N more"
FILES_NAMED = 200
ANSWER_LIMIT = 4000  # characters of one answer before it is cut in a run's section


@dataclass
class BuiltHandoff:
    """A handoff's text and what it stands for."""

    text: str
    covered_run_ids: list[str]
    dropped_run_ids: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    cap: int = 0

    @property
    def size(self) -> int:
        return len(self.text)

    def with_section(self, section: str) -> BuiltHandoff:
        """This handoff with ``section`` last, before its end marker (the
        cap still holds: the section is cut first)."""
        body = self.text.removesuffix(END)
        room = max(0, self.cap - len(body) - len(END) - 2) if self.cap else len(section)
        text = body + "\n\n" + section[:room] + END
        return BuiltHandoff(text=text, covered_run_ids=self.covered_run_ids, dropped_run_ids=self.dropped_run_ids,
                            dropped=self.dropped, cap=self.cap)


def _runs_and_messages(store: Store, run_ids: list[str]) -> tuple[list[Run], dict[str, list[ConversationMessage]]]:
    """The stored runs of ``run_ids`` (in order) and their messages by run id."""
    runs = [run for run in (store.run(run_id) for run_id in run_ids) if run is not None]
    messages: dict[str, list[ConversationMessage]] = {}
    for thread_id in dict.fromkeys(run.thread_id for run in runs):
        for message in store.thread_messages(thread_id):
            if message.run_id is not None:
                messages.setdefault(message.run_id, []).append(message)
    return runs, messages


def build_handoff(
    store: Store, run_ids: Iterable[str], *, strategy: HandoffStrategy, reason: str, cap: int,
) -> BuiltHandoff:
    """The handoff text for ``run_ids`` (oldest first), at most ``cap`` characters."""
    run_ids = list(run_ids)
    runs, messages = _runs_and_messages(store, run_ids)
    threads = {thread_id: store.thread(thread_id) for thread_id in dict.fromkeys(run.thread_id for run in runs)}
    titles = {thread_id: (thread.title if thread else "") for thread_id, thread in threads.items()}
    home = runs[-1].thread_id if runs else None
    merged = _merged_texts(store, runs)
    sections = [
        (run.id, run_section(run, messages.get(run.id, []), store.run_nodes(run.id), store.run_artifacts(run.id),
                             where=None if run.thread_id == home else titles.get(run.thread_id) or run.thread_id,
                             merged=merged.get(run.id, ())))
        for run in runs
    ]
    header = f"[agentd context handoff: {strategy}]\n" + INTRO.get(strategy, INTRO["portable_context"]).format(reason=reason)
    dropped_ids: list[str] = []
    dropped: list[str] = []
    stored = {run.id for run in runs}
    missing = [run_id for run_id in run_ids if run_id not in stored]
    if missing:
        dropped.append(f"{len(missing)} run(s) no longer stored: {', '.join(missing)}")
    # Oldest first out, until the rest fits; the newest run always stays (cut if need be).
    text = _assemble(header, sections, dropped_ids)
    while len(sections) > 1 and len(text) > cap:
        dropped_ids.append(sections.pop(0)[0])
        text = _assemble(header, sections, dropped_ids)
    if dropped_ids:
        dropped.insert(0, f"{len(dropped_ids)} oldest run(s) left out to fit {cap} characters")
    if len(text) > cap and sections:
        run_id, section = sections[-1]
        marker = "\n(… cut to fit the handoff cap)"
        over = len(text) - cap + len(marker)
        sections[-1] = (run_id, section[: max(0, len(section) - over)] + marker)
        dropped.append(f"the end of run {run_id} cut to fit {cap} characters")
        text = _assemble(header, sections, dropped_ids)[:cap]
    return BuiltHandoff(text=text, covered_run_ids=run_ids, dropped_run_ids=dropped_ids, dropped=dropped, cap=cap)


def _merged_texts(store: Store, runs: list[Run]) -> dict[str, list[str]]:
    """Per run, the merge-back handoffs its turn took in (SPEC F7): part of
    what that run was given, so part of what a later agent is told of it."""
    out: dict[str, list[str]] = {}
    wanted = {run.id for run in runs}
    for thread_id in dict.fromkeys(run.thread_id for run in runs):
        for transfer in store.thread_transfers(thread_id):
            if (transfer.type == "merge_back" and transfer.target_thread_id == thread_id and transfer.run_id in wanted
                    and transfer.status == "consumed" and transfer.handoff_id):
                handoff = store.get(ContextHandoff, transfer.handoff_id)
                if handoff is not None:
                    out.setdefault(transfer.run_id, []).append(handoff.text)
    return out


def _assemble(header: str, sections: list[tuple[str, str]], dropped_ids: list[str]) -> str:
    parts = [header]
    if dropped_ids:
        parts.append(f"(… {len(dropped_ids)} earlier run(s) left out to keep this handoff short …)")
    parts += [text for _id, text in sections]
    return "\n\n".join(parts) + END


def run_section(
    run: Run, messages: list[ConversationMessage], nodes: list[ExecutionNode], artifacts: list[PlanArtifact],
    *, where: str | None = None, merged: Iterable[str] = (),
) -> str:
    """One run as the handoff tells it (with the merge-back handoffs its
    message brought, ``merged``)."""
    status = run.status if run.status == "completed" else f"{run.status}" + (f": {run.reason}" if run.reason else "")
    origin = f" of {where}" if where else ""
    lines = [f"## Run {run.ordinal}{origin} ({status}; agent: {run.provider})"]
    users = [m for m in messages if m.role == "user" and m.text]
    users.sort(key=lambda m: (m.id != run.user_message_id, m.created_at))
    for index, message in enumerate(users):
        lines.append(("User: " if index == 0 else "User (steering): ") + message.text)
    for text in merged:
        lines.append("Brought in with it by a merge-back:\n" + text)
    attempt = run.selected_attempt_id
    answers = [m for m in messages if m.role == "assistant" and m.text and (m.attempt_id == attempt or attempt is None)]
    for message in answers:
        text = message.text if len(message.text) <= ANSWER_LIMIT else message.text[:ANSWER_LIMIT] + " (… cut)"
        lines.append(f"Assistant: {text}")
    if not answers:
        lines.append("Assistant: (no answer)")
    own = [n for n in nodes if n.attempt_id == attempt or attempt is None]
    files = [f"{path}{_outcome(n)}" for n in own if n.kind == "file_change" for path in _paths(n)]
    if files:
        lines.append("Files changed: " + "; ".join(files))
    commands = [f"{_command(n)}{_outcome(n)}" for n in own if n.kind in COMMAND_KINDS]
    if commands:
        lines.append("Commands run: " + "; ".join(commands))
    lines += _decisions_and_questions(own, artifacts)
    return "\n".join(lines)


def _decisions_and_questions(own: list[ExecutionNode], artifacts: list[PlanArtifact]) -> list[str]:
    """A run's decisions (approvals, proposed plans) and the questions it left open."""
    lines = []
    decisions = [_decision(n) for n in own if n.kind == "approval" and n.detail.get("decision")]
    decisions += [f"plan {a.status}: {_first_line(a.text)}" for a in artifacts if a.kind == "proposed_plan"]
    if decisions:
        lines.append("Decisions: " + "; ".join(decisions))
    open_questions = [
        q.get("question", "") for a in artifacts if a.kind == "questions" and a.status != "answered"
        for q in a.questions if isinstance(q, dict)
    ]
    if open_questions:
        lines.append("Open questions: " + "; ".join(open_questions))
    return lines


def _outcome(node: ExecutionNode) -> str:
    if node.status == "completed":
        code = node.detail.get("exitCode")
        return f" (exit {code})" if code not in (None, 0) else ""
    why = node.detail.get("error") or node.summary
    return f" ({node.status}{': ' + str(why) if why else ''})"


def _paths(node: ExecutionNode) -> list[str]:
    return detail_paths(node.detail) or [node.title or "a file"]


def detail_paths(detail: dict[str, Any]) -> list[str]:
    """The paths a file change's detail names (none when it names none)."""
    if isinstance(detail.get("path"), str):
        return [detail["path"]]
    changes = detail.get("changes")
    if isinstance(changes, list):
        paths = [str(c.get("path")) for c in changes if isinstance(c, dict) and c.get("path")]
        if paths:
            return paths
    tool_input: Any = detail.get("input")
    if isinstance(tool_input, dict):
        for key in ("file_path", "notebook_path", "path"):
            if isinstance(tool_input.get(key), str):
                return [tool_input[key]]
    return []


#: the paths a file-change node names
file_paths = _paths


def _command(node: ExecutionNode) -> str:
    detail = node.detail
    tool_input: Any = detail.get("input")
    for value in (detail.get("command"), tool_input.get("command") if isinstance(tool_input, dict) else None):
        if isinstance(value, str) and value:
            return value
    return node.title or node.kind


def _decision(node: ExecutionNode) -> str:
    what = node.detail.get("command") or node.title or "a request"
    return f"{node.detail['decision']} {what!r}"


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:200] if text.strip() else ""


# -- merge-back (SPEC F7) -----------------------------------------------------------------


@dataclass(frozen=True)
class MergeFiles:
    """The files a fork changed over the runs a merge-back carries.

    ``source`` says where the list comes from: ``checkpoint`` (a diff between
    two checkpoints, ``checkpoints`` = ``(base id, target id)``) or ``nodes``
    (the runs' file-change nodes, when there is no such diff). ``differ``:
    when the fork works in another workspace, the files of ``files`` that are
    not the same in this thread's workspace (None: the fork shares it).
    """

    source: str
    files: tuple[str, ...]
    checkpoints: tuple[str, str] | None = None
    fork_workspace: str | None = None
    differ: tuple[str, ...] | None = None


def checkpoint_section(checkpoint: Checkpoint, files: list[str] | None, *, what: str) -> str:
    """What a ``checkpoint_context`` handoff says of the files: which
    checkpoint (``what`` it is the state of), its counts, and the files it
    changed since the checkpoint before it (None: there is none to compare)."""
    summary = checkpoint.summary or {}
    counts = (f"{summary.get('filesChanged', 0)} file(s) changed, +{summary.get('insertions', 0)} "
              f"−{summary.get('deletions', 0)}")
    lines = [f"The files: checkpoint {checkpoint.id}, {what} ({counts} since the checkpoint before it)."]
    if files is None:
        lines.append("There is no earlier checkpoint to compare it with.")
    elif files:
        lines.append("Files it changed: " + "; ".join(files[:FILES_NAMED]) +
                     (f"; and {len(files) - FILES_NAMED} more" if len(files) > FILES_NAMED else ""))
    else:
        lines.append("It changed no file.")
    lines.append("The workspace may have changed since; the checkpoint holds these files as they were.")
    return "\n".join(lines)


def build_merge_handoff(
    store: Store, run_ids: Iterable[str], *, fork_label: str, since: str, files: MergeFiles, reason: str, cap: int,
    delegated: bool = False,
) -> BuiltHandoff:
    """The ``delta`` handoff of a merge-back: per fork run, its conclusion
    (final answer), commands and tests run with their outcome, decisions, open
    questions and unanswered requests; then the files changed (checkpoint diff,
    else file-change nodes) and, for a fork in its own workspace, which of
    them differ here. No user messages, narration or tool output: no
    transcript. At most ``cap`` characters, oldest runs dropped first.
    ``delegated``: the "fork" is a task delegated from this conversation
    (in a worktree or copy of its own), and the handoff calls it that."""
    run_ids = list(run_ids)
    runs, messages = _runs_and_messages(store, run_ids)
    sections = [(run.id, merge_section(run, messages.get(run.id, []), store.run_nodes(run.id), store.run_artifacts(run.id),
                                       with_files=files.source == "nodes"))
                for run in runs]
    header = "[agentd context handoff: delta (merge-back)]\n" + INTRO["merge_back"].format(
        who="A task delegated from this conversation" if delegated else "A fork of this conversation",
        fork=fork_label, since=since)
    footer = _files_footer(files)
    dropped_ids: list[str] = []
    dropped: list[str] = []

    def assemble() -> str:
        return _assemble(header, sections + ([("", footer)] if footer else []), dropped_ids)

    text = assemble()
    while len(sections) > 1 and len(text) > cap:
        dropped_ids.append(sections.pop(0)[0])
        text = assemble()
    if dropped_ids:
        dropped.append(f"{len(dropped_ids)} oldest fork run(s) left out to fit {cap} characters")
    if len(text) > cap:
        dropped.append(f"cut at {cap} characters")
        text = text[: max(0, cap - 20)] + "\n[end of handoff]"
        text = text[:cap]
    return BuiltHandoff(text=text, covered_run_ids=run_ids, dropped_run_ids=dropped_ids, dropped=dropped, cap=cap)


def _files_footer(files: MergeFiles) -> str:
    lines = []
    if files.files:
        where = (f"checkpoint diff {files.checkpoints[0]} → {files.checkpoints[1]}" if files.checkpoints
                 else "its file-change steps")
        lines.append(f"Files the fork changed (from {where}): " + "; ".join(files.files))
    if files.fork_workspace is not None:
        differ = "; ".join(files.differ or ()) or "none of them"
        lines.append(f"The fork works in its own workspace ({files.fork_workspace}); merge-back copied no files. "
                     f"Files that differ from this thread's workspace: {differ}")
    return "\n".join(lines)


def merge_section(
    run: Run, messages: list[ConversationMessage], nodes: list[ExecutionNode], artifacts: list[PlanArtifact],
    *, with_files: bool,
) -> str:
    """One fork run as a merge-back tells it: what it concluded and did."""
    status = run.status if run.status == "completed" else f"{run.status}" + (f": {run.reason}" if run.reason else "")
    lines = [f"## Fork run {run.ordinal} ({status}; agent: {run.provider})"]
    attempt = run.selected_attempt_id
    answers = [m for m in messages if m.role == "assistant" and m.text and (m.attempt_id == attempt or attempt is None)]
    if answers:
        final = answers[-1].text
        lines.append("Conclusion: " + (final if len(final) <= ANSWER_LIMIT else final[:ANSWER_LIMIT] + " (… cut)"))
    else:
        lines.append("Conclusion: (no answer)")
    own = [n for n in nodes if n.attempt_id == attempt or attempt is None]
    if with_files:
        changed = [f"{path}{_outcome(n)}" for n in own if n.kind == "file_change" for path in _paths(n)]
        if changed:
            lines.append("Files changed: " + "; ".join(changed))
    commands = [f"{_command(n)}{_outcome(n)}" for n in own if n.kind in COMMAND_KINDS]
    if commands:
        lines.append("Commands and tests run: " + "; ".join(commands))
    lines += _decisions_and_questions(own, artifacts)
    unanswered = [f"{n.kind.replace('_', ' ')} {n.title or n.detail.get('command') or ''}".rstrip() + f" ({n.status})"
                  for n in own if n.kind in ("approval", "user_input_request")
                  and n.status not in ("completed", "cancelled") and not n.detail.get("decision")]
    if unanswered:
        lines.append("Unanswered requests: " + "; ".join(unanswered))
    return "\n".join(lines)

"""Portable context: the app's own record of a thread, as text a provider
thread that lacks it can be given (SPEC F5 ContextHandoff, F11 replacement).

Built from durable app state only — user and assistant messages of the
thread's earlier runs — so it exists whatever happened to a provider's native
state. The newest runs are kept when the whole history does not fit.
"""

from __future__ import annotations

from agentd.store.db import Store

DEFAULT_LIMIT = 32_000  # characters


def portable_context(store: Store, thread_id: str, *, before_ordinal: int, reason: str, limit: int = DEFAULT_LIMIT) -> tuple[str, int]:
    """Return ``(text, covered_run_count)`` for runs before ``before_ordinal``;
    ``("", 0)`` when there is nothing to hand over."""
    runs = [r for r in store.thread_runs(thread_id) if r.ordinal < before_ordinal and r.status != "queued"]
    if not runs:
        return "", 0
    by_run: dict[str, list] = {}
    for message in store.thread_messages(thread_id):
        if message.run_id is not None and message.text:
            by_run.setdefault(message.run_id, []).append(message)
    sections: list[str] = []
    for run in runs:
        lines = [f"## Run {run.ordinal} ({run.status})"]
        for message in by_run.get(run.id, []):
            who = "User" if message.role == "user" else "Assistant"
            lines.append(f"{who}: {message.text}")
        sections.append("\n".join(lines))
    header = (
        "[agentd context handoff: portable_context]\n"
        f"This conversation continues an earlier one whose provider state could not be used ({reason}).\n"
        "What happened so far, oldest first:\n"
    )
    kept: list[str] = []
    size = len(header)
    for section in reversed(sections):
        if size + len(section) + 2 > limit and kept:
            kept.append(f"(… {len(sections) - len(kept)} earlier runs left out …)")
            break
        kept.append(section[: max(0, limit - size)])
        size += len(section) + 2
    text = header + "\n\n".join(reversed(kept)) + "\n[end of handoff]"
    return text, len(runs)

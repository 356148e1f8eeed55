"""The daemon's sentences in the command line's words.

The daemon speaks to every client, so its errors name protocol methods and
fields (``cancel it with queued-run.cancel``, ``stop it (thread.stop)``,
``afterSeq``). A person at the command line gets the ``agentd`` command
that does it instead, with the ids filled in from the error's data where
it names them. The daemon's messages stay as they are; only their rendering
here changes.
"""

from __future__ import annotations

import re
from typing import Any, Callable

Data = dict[str, Any]


def _id(data: Data, key: str, placeholder: str) -> str:
    value = data.get(key)
    return str(value) if isinstance(value, str) and value else placeholder


def _busy_thread(data: Data) -> str:
    """The thread whose run is in the way: the one other thread an
    ``activeRuns`` list names, else the error's own thread."""
    others = {r.get("threadId") for r in data.get("activeRuns") or [] if isinstance(r, dict)}
    if len(others) == 1:
        return _id({"threadId": others.pop()}, "threadId", "THREAD")
    return _id(data, "threadId", "THREAD") if not others else "THREAD"


#: (phrase in the daemon's words, its replacement from the error's data), most specific first
PHRASES: list[tuple[str, Callable[[Data, re.Match[str]], str]]] = [
    (r"cancel it with queued-run\.cancel", lambda d, m: f"cancel it with `agentd cancel {_id(d, 'runId', 'RUN')}`"),
    (r"interrupt it with run\.interrupt", lambda d, m: f"interrupt it with `agentd interrupt {_id(d, 'runId', 'RUN')}`"),
    (r"stop it \(thread\.stop\)", lambda d, m: f"stop it (`agentd stop {_busy_thread(d)}`)"),
    (r"stop one \(thread\.stop\)", lambda d, m: "stop one (`agentd stop THREAD`)"),
    (r"lift it with thread\.unquarantine \(agentd unquarantine ([^)\s]+)\)", lambda d, m: f"lift it with `agentd unquarantine {m[1]}`"),
    (r"\(thread\.unquarantine lifts it\)", lambda d, m: f"(`agentd unquarantine {_id(d, 'threadId', 'THREAD')}` lifts it)"),
    (r"send with dispatchMode queue_after_active to run after it, or steer_active to change it",
     lambda d, m: "send with --queue to run after it, or --steer to change it"),
    (r"send the message with queue_after_active instead", lambda d, m: "send the message with --queue instead"),
    (r"dispatchMode (\w+) needs targetRunId, the id of the active run", lambda d, m: "--steer and --restart need an active run"),
    (r"runIds must list exactly the queued runs", lambda d, m: "RUN… must name exactly the queued runs"),
    (r"afterSeq (\d+) is beyond the last event \((\d+)\); resubscribe with afterSeq 0 or the last seq you saw from "
     r"this daemon", lambda d, m: f"--after {m[1]} is beyond the last event ({m[2]}); use --after 0 or a seq this daemon printed"),
    (r"resubscribe with afterSeq=(\d+)", lambda d, m: f"resume with `agentd events --after {m[1]}`"),
    (r"restore it with checkpoint\.restore and include naming the folder",
     lambda d, m: "restore it with `agentd restore CHECKPOINT --include FOLDER`"),
    (r"name it in include to restore its files", lambda d, m: "name it with --include to restore its files"),
    (r"^include: ", lambda d, m: "--include: "),
    (r"list threads with thread\.list", lambda d, m: "`agentd threads` lists the threads"),
    (r"list pending requests with thread\.requests", lambda d, m: "`agentd requests THREAD` lists what waits for an answer"),
    (r"checkpoint\.list shows", lambda d, m: "`agentd checkpoints THREAD` shows"),
    (r"roll it back with rollback\.toRun", lambda d, m: "roll it back with `agentd rollback THREAD ORDINAL`"),
]

#: a params field (``data.field``, or ``$.field`` in a validation message) as the CLI names it
ARGUMENTS = {
    "threadId": "THREAD", "runId": "RUN", "requestId": "REQUEST", "planId": "PLAN", "checkpointId": "CHECKPOINT",
    "baseCheckpointId": "--base", "handoffId": "HANDOFF", "title": "--title", "workspace": "--workspace",
    "provider": "--provider", "afterSeq": "--after", "targetOrdinal": "ORDINAL", "text": "TEXT",
    "answers": "KEY=VALUE", "runIds": "RUN…", "include": "--include", "sourcePoint.runId": "--from",
    "mergeBack.forkThreadId": "--merge-back", "query": "QUERY", "limit": "--limit",
}


def _invalid(data: Data, match: re.Match[str]) -> str:
    """``invalid params for M: WHY - at `$.FIELD``` as ``FIELD's argument: why``."""
    argument = ARGUMENTS.get(match["field"])
    why = match["why"][:1].lower() + match["why"][1:]
    return f"{argument}: {why}" if argument else match[0]


PHRASES.append((r"^invalid params for [\w.-]+: (?P<why>.+) - at `\$\.(?P<field>[\w.]+)`$", _invalid))


def in_cli_terms(message: str, data: Data | None = None) -> str:
    """``message`` with each protocol phrase of PHRASES said as the
    ``agentd`` command that does it."""
    data = data or {}
    for pattern, make in PHRASES:
        # re caches compiled patterns; compiling them at import would cost
        # every command ~1 ms, for the few that print an error.
        message = re.sub(pattern, lambda match: make(data, match), message)
    return message

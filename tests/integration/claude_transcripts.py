"""Claude recordings made by the integration tests, turned into the replayable
transcripts of ``tests/fixtures/transcripts/`` (``tests/providers/test_claude_replay.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: the test's tmp dir becomes this in saved transcripts
SANITIZED_ROOT = "/tmp/agentd-claude-test"
#: replays need no real pauses: recorded delays are capped at this many ms
MAX_REPLAY_DELAY_MS = 20
_INIT_KEYS = ("type", "subtype", "session_id", "cwd", "model", "permissionMode", "apiKeySource", "claude_code_version")
_HEAVY_KEYS = ("usage", "modelUsage", "subagent_stats", "fast_mode_state",
               "fast_mode_disabled_reason", "iterations")


def _replace_paths(value: Any, roots: list[str]) -> Any:
    if isinstance(value, str):
        for root in roots:
            value = value.replace(root, SANITIZED_ROOT)
        return value
    if isinstance(value, list):
        return [_replace_paths(v, roots) for v in value]
    if isinstance(value, dict):
        return {k: _replace_paths(v, roots) for k, v in value.items()}
    return value


def _slim(message: dict[str, Any]) -> dict[str, Any]:
    """Drop what the adapter does not read and what makes transcripts huge."""
    kind = message.get("type")
    if kind == "control_response":
        response = dict(message.get("response") or {})
        if isinstance(response.get("response"), dict) and "commands" in response["response"]:
            response["response"] = {}  # the initialize answer: commands, agents, models, …
        return {**message, "response": response}
    if kind == "system" and message.get("subtype") == "init":
        return {k: message[k] for k in _INIT_KEYS if k in message}
    out = {k: v for k, v in message.items() if k not in _HEAVY_KEYS}
    if isinstance(out.get("message"), dict):
        out["message"] = {k: v for k, v in out["message"].items() if k not in _HEAVY_KEYS}
    if kind == "stream_event" and isinstance(out.get("event"), dict):
        event = dict(out["event"])
        if isinstance(event.get("message"), dict):
            event["message"] = {k: v for k, v in event["message"].items() if k not in _HEAVY_KEYS}
        event.pop("usage", None)
        out["event"] = event
    return out


def sanitize(source: Path, target: Path, roots: list[Path]) -> None:
    """Make a recording replayable anywhere and small: the test's paths become
    a fixed one, the launch cwd (and a fork's fresh id) match anything, bulky
    fields the adapter ignores are dropped, pauses are capped, and a final
    exit we asked for (code 0 after end of input) is left to the replay, which
    exits when the adapter closes stdin — so replays exercise the polite stop."""
    names = sorted({str(r) for root in roots for r in (root, root.resolve())}, key=len, reverse=True)
    entries = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    if entries and entries[-1]["type"] == "runtime_exit" and entries[-1].get("code") == 0:
        entries.pop()
    out = []
    for entry in entries:
        entry = _replace_paths(entry, names)
        if "afterMs" in entry:
            entry["afterMs"] = min(entry["afterMs"], MAX_REPLAY_DELAY_MS)
        message = entry.get("message")
        if entry["type"] == "expect_outbound" and message.get("type") == "agentd_launch":
            message["cwd"] = "*"
            if "--fork-session" in message["args"]:
                message["args"][-1] = "*"
        elif entry["type"] == "emit_inbound":
            entry["message"] = _slim(message)
        out.append(entry)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in out))

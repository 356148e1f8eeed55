"""A fake Anthropic Messages API for driving Claude Code offline (stdlib only).

    python scripts/offline/fake_anthropic.py --port-file F --log L [--timings T] [--port P] [--exit-with-parent]

Serves ``POST /v1/messages`` (``?beta=true`` or not, streaming over SSE or
not) and ``POST /v1/messages/count_tokens`` on 127.0.0.1, writes the chosen
port to ``--port-file`` once it listens (atomically: a reader never sees half
a number), and appends every request as one JSON line to ``--log``:
``{"path", "pid", "at", "body"}`` — tests read it to check what the model was
sent (e.g. that a resumed session's request carries the earlier turns).

What the model "does" follows keywords in the last user text of the request:

* ``RUN_COMMAND`` — a ``tool_use`` of the Bash tool running ``echo
  hello-from-bash`` (or the command after ``RUN_COMMAND:`` up to the end of
  the line); Claude runs it and sends the ``tool_result`` back; with
  ``NARRATE`` too, the same message first says ``NARRATION`` in a text block
  (narration before a tool call);
* ``ASK_APPROVAL`` — a Bash tool use that Claude must ask permission for
  (it writes a file), so Claude sends ``control_request can_use_tool``;
* ``CANCEL_TASK:TASK_ID`` — cancel a delegated task through agentd's MCP
  tool ``task_cancel`` (loaded with ``ToolSearch`` first, as for delegation),
  then say ``The cancel answered: …``;
* ``DELEGATE_TO:PROVIDER: INSTRUCTIONS`` — delegate through agentd's MCP
  tool: Claude lists it only as a deferred tool, so first a ``ToolSearch``
  ``select:mcp__agentd__delegate_task``, then (once the tool is loaded) a
  ``tool_use`` of it with ``{instructions, provider, wait: true}``, and
  after its ``tool_result`` a final answer quoting it;
* ``WRITE_FILE:/absolute/path`` — a ``tool_use`` of the Write tool that
  writes ``written by the fake model`` to that path (a file edit, for the
  ACP adapters' tests);
* ``ASK_USER`` — a ``tool_use`` of Claude's ``AskUserQuestion`` tool (one
  question, ``ASK_QUESTION``, with the options of ``ASK_OPTIONS``) where the
  request offers it; after its ``tool_result`` the final answer is ``The
  person answered: <the result>``, so a test sees the answer reach the model;
* ``GO_SLOW`` — a long answer streamed slowly, one word every 0.1 s (60
  words, or N with ``GO_SLOW:N``; for interrupts, steers and crashes);
* otherwise — a plain answer, ``Reply N: <the user's text>`` where N counts
  the user turns the request carries (so a resumed session shows its history).

``--timings`` appends, per streamed main-loop response (one with tools), the
wall-clock times it was asked for, wrote its first ``text_delta`` and wrote
``message_stop``: ``{"requestAt", "firstDeltaAt", "completedAt"}`` (for the
latency benchmark).

The request after a ``tool_result`` ends the turn with a final text message
quoting the result. Side calls (requests without tools, e.g. the title
Claude Code asks a small model for) get a short plain answer.

``--exit-with-parent`` makes the server exit once its parent process is gone:
inside a network namespace the wrapper starts the fake in the background and
then ``exec``s claude, so the fake lives exactly as long as that claude does.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "claude-fake-1"
DEFAULT_COMMAND = "echo hello-from-bash"
#: the text a ``NARRATE`` message says before its tool call
NARRATION = "Let me run that command first."
APPROVAL_COMMAND = "touch approved-by-user.txt && echo wrote-approved-file"
#: the question an ``ASK_USER`` message has the model ask (AskUserQuestion), and its options
ASK_QUESTION = "Which color should the button be?"
ASK_OPTIONS = [{"label": "Red", "description": "Warm and loud."}, {"label": "Blue", "description": "Calm."}]
ASK_TOOL = "AskUserQuestion"
SLOW_CHUNKS = 60
SLOW_PAUSE = 0.1

_ids = itertools.count(1)
_log_lock = threading.Lock()


def _new_id(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{next(_ids):04d}"


# -- reading a request ----------------------------------------------------------


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _user_texts(message: dict[str, Any]) -> list[str]:
    """The text blocks of a message that the person wrote (Claude Code adds
    ``<system-reminder>`` blocks of its own; those are skipped)."""
    out = []
    for block in _blocks(message.get("content")):
        if block.get("type") == "text":
            text = block.get("text", "")
            if not text.lstrip().startswith("<system-reminder>"):
                out.append(text)
    return out


def _is_tool_result(message: dict[str, Any]) -> bool:
    return any(b.get("type") == "tool_result" for b in _blocks(message.get("content")))


def _tool_result_text(message: dict[str, Any]) -> str:
    for block in _blocks(message.get("content")):
        if block.get("type") == "tool_result":
            content = block.get("content")
            if isinstance(content, list):
                return " ".join(b.get("text", "") for b in content if isinstance(b, dict))
            return str(content or "")
    return ""


DELEGATE_TOOL = "mcp__agentd__delegate_task"
CANCEL_TOOL = "mcp__agentd__task_cancel"


def _cancel_target(messages: list[dict[str, Any]]) -> str | None:
    """The task id of the newest ``CANCEL_TASK:ID`` the person wrote, if any."""
    for message in reversed(messages):
        if message.get("role") != "user" or _is_tool_result(message):
            continue
        for text in reversed(_user_texts(message)):
            match = re.search(r"CANCEL_TASK:(\S+)", text)
            if match:
                return match.group(1)
        return None
    return None


def _bash(command: str) -> dict[str, Any]:
    return {"kind": "tool", "name": "Bash", "input": {"command": command, "description": "Run the requested command"}}


def _offers(body: dict[str, Any], name: str) -> bool:
    return any(isinstance(t, dict) and t.get("name") == name for t in body.get("tools") or [])


def _last_tool_use(messages: list[dict[str, Any]]) -> str | None:
    """The name of the newest ``tool_use`` the assistant made in the request's messages."""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            for block in reversed(_blocks(message.get("content"))):
                if block.get("type") == "tool_use":
                    return block.get("name")
    return None


def _delegation(messages: list[dict[str, Any]]) -> tuple[str, str] | None:
    """``(provider, instructions)`` of the newest ``DELEGATE_TO:`` the person wrote, if any."""
    for message in reversed(messages):
        if message.get("role") != "user" or _is_tool_result(message):
            continue
        for text in reversed(_user_texts(message)):
            match = re.search(r"DELEGATE_TO:([A-Za-z0-9_-]+):\s*(.+)", text, re.S)
            if match:
                return match.group(1), match.group(2).strip()
        return None  # the newest message the person wrote does not delegate
    return None


def plan_reply(body: dict[str, Any]) -> dict[str, Any]:
    """What to answer: ``{"kind": "text", "text", "slow"}`` or ``{"kind": "tool", "name", "input"}``."""
    messages = body.get("messages") or []
    if not body.get("tools"):
        return {"kind": "text", "text": "Fake session title", "slow": False}
    # The newest user message (Claude Code may put a ``system`` message after it).
    last = next((m for m in reversed(messages) if m.get("role") == "user"), {})
    if _is_tool_result(last):
        result = _tool_result_text(last).strip()
        delegation = _delegation(messages)
        if delegation is not None and _last_tool_use(messages) == "ToolSearch" and _offers(body, DELEGATE_TOOL):
            provider, instructions = delegation
            return {"kind": "tool", "name": DELEGATE_TOOL,
                    "input": {"instructions": instructions, "provider": provider, "wait": True}}
        if _last_tool_use(messages) == DELEGATE_TOOL:
            return {"kind": "text", "text": f"The delegated task answered: {result[:2000]}", "slow": False}
        cancel = _cancel_target(messages)
        if cancel is not None and _last_tool_use(messages) == "ToolSearch" and _offers(body, CANCEL_TOOL):
            return {"kind": "tool", "name": CANCEL_TOOL, "input": {"taskId": cancel}}
        if _last_tool_use(messages) == ASK_TOOL:
            return {"kind": "text", "text": f"The person answered: {result[:2000]}", "slow": False}
        if _last_tool_use(messages) == CANCEL_TOOL:
            return {"kind": "text", "text": f"The cancel answered: {result[:2000]}", "slow": False}
        return {"kind": "text", "text": f"The command finished: {result[:200]}", "slow": False}
    texts = _user_texts(last)
    text = texts[-1] if texts else ""
    turns = sum(1 for m in messages if m.get("role") == "user" and not _is_tool_result(m) and _user_texts(m))
    if "RUN_COMMAND" in text:
        match = re.search(r"RUN_COMMAND:\s*(.+)", text)
        plan = _bash(match.group(1).strip() if match else DEFAULT_COMMAND)
        return {**plan, "narration": NARRATION if "NARRATE" in text else None}
    if "ASK_APPROVAL" in text:
        return _bash(APPROVAL_COMMAND)
    if "ASK_USER" in text and _offers(body, ASK_TOOL):
        question = {"question": ASK_QUESTION, "header": "Color", "options": ASK_OPTIONS, "multiSelect": False}
        return {"kind": "tool", "name": ASK_TOOL, "input": {"questions": [question]}}
    if "WRITE_FILE:" in text:
        path = text.split("WRITE_FILE:", 1)[1].split()[0]
        return {"kind": "tool", "name": "Write", "input": {"file_path": path, "content": "written by the fake model\n"}}
    if _delegation(messages) is not None:
        if _offers(body, DELEGATE_TOOL):
            provider, instructions = _delegation(messages)
            return {"kind": "tool", "name": DELEGATE_TOOL,
                    "input": {"instructions": instructions, "provider": provider, "wait": True}}
        return {"kind": "tool", "name": "ToolSearch", "input": {"query": f"select:{DELEGATE_TOOL}"}}
    if _cancel_target(messages) is not None:
        if _offers(body, CANCEL_TOOL):
            return {"kind": "tool", "name": CANCEL_TOOL, "input": {"taskId": _cancel_target(messages)}}
        return {"kind": "tool", "name": "ToolSearch", "input": {"query": f"select:{CANCEL_TOOL}"}}
    if "GO_SLOW" in text:
        match = re.search(r"GO_SLOW:(\d+)", text)
        words = " ".join(f"w{i}" for i in range(int(match.group(1)) if match else SLOW_CHUNKS))
        return {"kind": "text", "text": words, "slow": True}
    return {"kind": "text", "text": f"Reply {turns}: {text.strip()}", "slow": False}


def _usage(body: dict[str, Any]) -> dict[str, int]:
    size = len(json.dumps(body.get("messages", [])))
    return {"input_tokens": max(1, size // 4), "output_tokens": 1,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}


def _content(plan: dict[str, Any], tool_id: str) -> list[dict[str, Any]]:
    if plan["kind"] == "tool":
        narration = [{"type": "text", "text": plan["narration"]}] if plan.get("narration") else []
        return narration + [{"type": "tool_use", "id": tool_id, "name": plan["name"], "input": plan["input"]}]
    return [{"type": "text", "text": plan["text"]}]


def _chunks(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


# -- the server ------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-anthropic/1"
    log_path: str | None = None
    timings_path: str | None = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _log(self, body: Any) -> None:
        if self.log_path:
            self._append(self.log_path, {"path": self.path, "pid": os.getpid(), "at": time.time(), "body": body})

    @staticmethod
    def _append(path: str, entry: dict[str, Any]) -> None:
        line = json.dumps(entry) + "\n"
        with _log_lock:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("request-id", _new_id("req"))
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._log(None)
        self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"no {self.path}"}})

    def do_HEAD(self) -> None:  # noqa: N802
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode(errors="replace")}
        self._request_at = time.time()
        self._log(body)
        path = self.path.split("?", 1)[0]
        if path.endswith("/v1/messages/count_tokens"):
            self._json(200, {"input_tokens": _usage(body)["input_tokens"]})
            return
        if not path.endswith("/v1/messages"):
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"no {path}"}})
            return
        plan = plan_reply(body)
        model = body.get("model") or MODEL
        tool_id = _new_id("toolu")
        if not body.get("stream"):
            self._json(200, {
                "id": _new_id("msg"), "type": "message", "role": "assistant", "model": model,
                "content": _content(plan, tool_id), "stop_reason": "tool_use" if plan["kind"] == "tool" else "end_turn",
                "stop_sequence": None, "usage": _usage(body),
            })
            return
        try:
            self._stream(plan, model, tool_id, body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (an interrupt)

    def _event(self, name: str, data: dict[str, Any]) -> None:
        chunk = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.flush()

    def _stream(self, plan: dict[str, Any], model: str, tool_id: str, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("request-id", _new_id("req"))
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        usage = _usage(body)
        first_delta_at = None
        self._event("message_start", {"type": "message_start", "message": {
            "id": _new_id("msg"), "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": usage}})
        index = 0
        if plan["kind"] == "tool":
            if plan.get("narration"):
                self._event("content_block_start", {"type": "content_block_start", "index": 0,
                                                    "content_block": {"type": "text", "text": ""}})
                for part in _chunks(plan["narration"], 8):
                    self._event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                        "delta": {"type": "text_delta", "text": part}})
                self._event("content_block_stop", {"type": "content_block_stop", "index": 0})
                index = 1
            self._event("content_block_start", {"type": "content_block_start", "index": index, "content_block": {
                "type": "tool_use", "id": tool_id, "name": plan["name"], "input": {}}})
            self._event("ping", {"type": "ping"})
            payload = json.dumps(plan["input"])
            for part in _chunks(payload, 24):
                self._event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                    "delta": {"type": "input_json_delta", "partial_json": part}})
            stop = "tool_use"
        else:
            self._event("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
            self._event("ping", {"type": "ping"})
            parts = [w + " " for w in plan["text"].split(" ")] if plan["slow"] else _chunks(plan["text"], 8)
            if plan["slow"]:
                parts[-1] = parts[-1].rstrip()
            for part in parts:
                self._event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                    "delta": {"type": "text_delta", "text": part}})
                if first_delta_at is None:
                    first_delta_at = time.time()
                if plan["slow"]:
                    time.sleep(SLOW_PAUSE)
            stop = "end_turn"
        self._event("content_block_stop", {"type": "content_block_stop", "index": index})
        self._event("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                                      "usage": {"output_tokens": 5}})
        self._event("message_stop", {"type": "message_stop"})
        completed_at = time.time()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        if self.timings_path and body.get("tools"):
            self._append(self.timings_path, {"requestAt": self._request_at, "firstDeltaAt": first_delta_at,
                                             "completedAt": completed_at})


def _watch_parent(server: ThreadingHTTPServer) -> None:
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.2)
    server.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file")
    parser.add_argument("--log")
    parser.add_argument("--timings")
    parser.add_argument("--announce", action="store_true", help="print the port on stdout once listening")
    parser.add_argument("--exit-with-parent", action="store_true")
    args = parser.parse_args(argv)
    Handler.log_path = args.log
    Handler.timings_path = args.timings
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    if args.port_file:
        tmp = f"{args.port_file}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(str(server.server_address[1]))
        os.replace(tmp, args.port_file)
    if args.announce:
        # One line on stdout once listening: whoever started us waits on it, not on a timer.
        print(server.server_address[1], flush=True)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the reader may be gone now
    if args.exit_with_parent:
        threading.Thread(target=_watch_parent, args=(server,), daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())

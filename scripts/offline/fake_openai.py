"""A fake OpenAI Responses API for driving ``codex app-server`` offline.

``POST {base_url}/responses`` streams Server-Sent Events shaped like the real
API (``response.created`` … ``response.completed``). What the "model" does is
chosen from keywords in the last user message, so tests script their turns:

* (no keyword) — a plain reply, streamed as a few ``response.output_text.delta``;
* ``RUN_COMMAND`` — a ``function_call`` to the shell tool (``echo agentd-ran-this``);
* ``ASK_APPROVAL`` — a shell call asking to run outside the sandbox, which
  needs approval under ``approval_policy = "on-request"`` (``touch approved.txt``);
* ``ASK_USER`` — a ``request_user_input`` call (Codex offers it in plan mode);
* ``GO_SLOW`` — a reply streamed slowly (for interrupt and steer tests);
* ``WRITE_FILE`` — an ``apply_patch`` call adding ``patched.txt`` when offered (a
  ``custom_tool_call`` whose input is the patch where the tool is freeform, as
  Codex offers it to models it knows), else a shell call writing the same file
  in the turn's working directory;
* ``NARRATE`` (with a tool keyword) — the response says ``NARRATION`` first,
  an assistant message with ``phase: commentary``, then makes the call;
* ``PHASE:<phase>`` — the reply's message carries that ``phase``
  (``commentary``, ``partial_answer``, ``final_answer``), as newer models mark
  their text;
* ``DELEGATE_TO:PROVIDER: INSTRUCTIONS`` — a call of agentd's MCP tool
  ``delegate_task`` (Codex offers it in the namespace ``mcp__agentd``) with
  ``{instructions, provider, wait: true}``;

and a request whose input ends with a tool's output gets a final message.

Every request is appended to ``--log`` as one JSON line ``{"path", "at",
"body"}``, so tests can check e.g. that a resumed thread's request carries the
earlier turns; ``--timings`` gets, per streamed response, the wall-clock times
its first delta and its ``response.completed`` were written (for benchmarks).
Standard library only; run it as

    python scripts/offline/fake_openai.py --port-file F --log L [--port N] [--timings T] [--exit-with-parent]
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

#: what a NARRATE response says before its tool call
NARRATION = "Let me run that first."

#: the namespace Codex offers agentd's MCP tools in
DELEGATE_NAMESPACE = "mcp__agentd"
#: seconds between deltas of a GO_SLOW reply, and how many there are
SLOW_PAUSE = 0.15
SLOW_DELTAS = 60

_ids = itertools.count(1)
_lock = threading.Lock()


def _next(prefix: str) -> str:
    with _lock:
        return f"{prefix}_{next(_ids)}"


# -- reading a request ---------------------------------------------------------------


def _text_of(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            parts.append(part["text"])
    return "\n".join(parts)


def user_texts(body: dict[str, Any]) -> list[str]:
    """The texts of the user messages in a request, oldest first (Codex's own
    context messages such as ``<environment_context>`` left out)."""
    out = []
    for item in body.get("input") or []:
        if isinstance(item, dict) and item.get("type", "message") == "message" and item.get("role") == "user":
            text = _text_of(item)
            if text.lstrip().startswith("<") and re.match(r"\s*<[a-z_]+>", text) and text.rstrip().endswith(">"):
                continue  # <environment_context>, <user_instructions>, …
            out.append(text)
    return out


def tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            names.append(tool.get("name") or (tool.get("function") or {}).get("name") or tool.get("type", ""))
    return names


def tool_type(body: dict[str, Any], name: str) -> str | None:
    """How the request offers the tool ``name`` (``function``, ``custom``, …), if it does."""
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and (tool.get("name") or (tool.get("function") or {}).get("name")) == name:
            return str(tool.get("type") or "function")
    return None


def last_item(body: dict[str, Any]) -> dict[str, Any]:
    items = body.get("input") or []
    return items[-1] if items and isinstance(items[-1], dict) else {}


# -- choosing the "model's" answer -------------------------------------------------------


def shell_call(body: dict[str, Any], command: str, *, escalate: bool = False) -> dict[str, Any]:
    """A function_call item running ``command`` with whichever shell tool the
    request offers; ``escalate`` asks to run it outside the sandbox, which
    needs the user's approval under ``approval_policy = "on-request"``."""
    names = tool_names(body)
    if "exec_command" in names:
        arguments: dict[str, Any] = {"cmd": command, "yield_time_ms": 5000}
        if escalate:
            arguments.update(sandbox_permissions="require_escalated", justification="May I create approved.txt?")
        return {"name": "exec_command", "arguments": json.dumps(arguments)}
    if "shell_command" in names:
        return {"name": "shell_command", "arguments": json.dumps({"command": command})}
    return {"name": "shell", "arguments": json.dumps({"command": ["bash", "-lc", command]})}


def plan(body: dict[str, Any]) -> dict[str, Any]:
    """What to answer: ``{"text": str, "slow": bool}``, ``{"call": {...}}`` (a
    function call) or ``{"custom": {name, input}}`` (a freeform tool's call)."""
    last = last_item(body)
    if last.get("type") in ("function_call_output", "custom_tool_call_output"):
        output = last.get("output")
        if isinstance(output, dict):
            output = output.get("content") or json.dumps(output)
        elif isinstance(output, list):
            output = " ".join(str(p.get("text", "")) for p in output if isinstance(p, dict))
        first = str(output or "").strip().splitlines()
        return {"text": f"Tool finished: {first[-1] if first else ''}"[:400], "slow": False}
    texts = user_texts(body)
    text = texts[-1] if texts else ""
    if "ASK_USER" in text and "request_user_input" in tool_names(body):
        arguments = {
            "questions": [
                {
                    "id": "color",
                    "header": "Color",
                    "question": "Which color should the button be?",
                    "options": [
                        {"label": "Red (Recommended)", "description": "Warm and loud."},
                        {"label": "Blue", "description": "Calm."},
                    ],
                }
            ]
        }
        return {"call": {"name": "request_user_input", "arguments": json.dumps(arguments)}}
    if "ASK_APPROVAL" in text:
        return {"call": shell_call(body, "touch approved.txt", escalate=True)}
    if "RUN_COMMAND" in text:
        narration = {"narration": NARRATION} if "NARRATE" in text else {}
        return {"call": shell_call(body, "echo agentd-ran-this"), **narration}
    if "WRITE_FILE" in text and "apply_patch" in tool_names(body):
        patch = "*** Begin Patch\n*** Add File: patched.txt\n+patched by the fake model\n*** End Patch\n"
        if tool_type(body, "apply_patch") == "custom":
            # Offered as a freeform tool (Codex's known models): its input is the patch itself.
            return {"custom": {"name": "apply_patch", "input": patch}}
        return {"call": {"name": "apply_patch", "arguments": json.dumps({"input": patch})}}
    if "WRITE_FILE" in text:
        # The fake model's family gets no apply_patch tool from the pinned Codex.
        return {"call": shell_call(body, "printf 'patched by the fake model\\n' > patched.txt")}
    delegation = re.search(r"DELEGATE_TO:([A-Za-z0-9_-]+):\s*(.+)", text, re.S)
    if delegation and DELEGATE_NAMESPACE in tool_names(body):
        arguments = {"instructions": delegation.group(2).strip(), "provider": delegation.group(1), "wait": True}
        return {"call": {"name": "delegate_task", "namespace": DELEGATE_NAMESPACE, "arguments": json.dumps(arguments)}}
    if "GO_SLOW" in text:
        return {"text": " ".join(f"slow{i}" for i in range(SLOW_DELTAS)), "slow": True}
    phase = re.search(r"PHASE:(\w+)", text)
    reply = {"text": f"You said: {text.strip()[-200:]} (turn {len(texts)})", "slow": False}
    return {**reply, "phase": phase.group(1)} if phase else reply


# -- the server ------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    server_version = "fake-openai/1"
    log_path: str | None = None
    timings_path: str | None = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def _log(self, body: Any) -> None:
        if not self.log_path:
            return
        line = json.dumps({"path": self.path, "at": time.time(), "body": body}) + "\n"
        with _lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(line)

    def do_GET(self) -> None:  # noqa: N802
        self._log(None)
        if self.path.rstrip("/").endswith("/models"):
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._json(404, {"error": {"message": f"no {self.path} here", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_undecodable": raw[:200].decode("latin-1")}
        self._log(body)
        if not self.path.rstrip("/").endswith("/responses"):
            self._json(404, {"error": {"message": f"no {self.path} here", "type": "not_found"}})
            return
        try:
            self._stream(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (an interrupt)

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _event(self, kind: str, **fields: Any) -> None:
        data = json.dumps({"type": kind, **fields})
        self.wfile.write(f"event: {kind}\ndata: {data}\n\n".encode())
        self.wfile.flush()

    def _timing(self, **entry: Any) -> None:
        if self.timings_path:
            with _lock, open(self.timings_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    def _stream(self, body: dict[str, Any]) -> None:
        request_at = time.time()
        first_delta_at = None
        answer = plan(body)
        response_id = _next("resp")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        base = {"id": response_id, "object": "response", "model": body.get("model", "fake-model"), "output": []}
        self._event("response.created", response={**base, "status": "in_progress"})
        self._event("response.in_progress", response={**base, "status": "in_progress"})
        output: list[dict[str, Any]] = []
        if answer.get("narration"):
            output.append(self._message(answer["narration"], 0, phase="commentary")[0])
        if "call" in answer:
            index = len(output)
            item = {"type": "function_call", "id": _next("fc"), "call_id": _next("call"), "status": "completed", **answer["call"]}
            self._event("response.output_item.added", output_index=index, item={**item, "arguments": "", "status": "in_progress"})
            self._event("response.function_call_arguments.delta", output_index=index, item_id=item["id"], delta=item["arguments"])
            self._event("response.function_call_arguments.done", output_index=index, item_id=item["id"], arguments=item["arguments"])
            self._event("response.output_item.done", output_index=index, item=item)
            output.append(item)
        elif "custom" in answer:
            # A freeform tool's call: its input streams as text, not JSON arguments.
            index = len(output)
            item = {"type": "custom_tool_call", "id": _next("ctc"), "call_id": _next("call"), "status": "completed",
                    **answer["custom"]}
            self._event("response.output_item.added", output_index=index, item={**item, "input": "", "status": "in_progress"})
            self._event("response.custom_tool_call_input.delta", output_index=index, item_id=item["id"], delta=item["input"])
            self._event("response.custom_tool_call_input.done", output_index=index, item_id=item["id"], input=item["input"])
            self._event("response.output_item.done", output_index=index, item=item)
            output.append(item)
        else:
            message, first_delta_at = self._message(answer["text"], 0, slow=answer.get("slow", False),
                                                    phase=answer.get("phase"))
            output.append(message)
        self._finish(base, output, response_id, request_at, first_delta_at)

    def _message(self, text: str, index: int, *, slow: bool = False,
                 phase: str | None = None) -> tuple[dict[str, Any], float | None]:
        """Stream one assistant message item (with ``phase`` when given);
        returns it done and when its first delta was written."""
        first_delta_at = None
        item_id = _next("msg")
        message = {"type": "message", "id": item_id, "role": "assistant", "status": "in_progress", "content": []}
        if phase:
            message["phase"] = phase
        self._event("response.output_item.added", output_index=index, item=message)
        part = {"type": "output_text", "text": "", "annotations": []}
        self._event("response.content_part.added", output_index=index, content_index=0, item_id=item_id, part=part)
        words = text.split(" ")
        chunks = [" ".join(words[i : i + 3]) + (" " if i + 3 < len(words) else "") for i in range(0, len(words), 3)]
        for chunk in chunks:
            if slow:
                time.sleep(SLOW_PAUSE)
            self._event("response.output_text.delta", output_index=index, content_index=0, item_id=item_id, delta=chunk)
            first_delta_at = first_delta_at or time.time()
        self._event("response.output_text.done", output_index=index, content_index=0, item_id=item_id, text=text)
        part = {"type": "output_text", "text": text, "annotations": []}
        self._event("response.content_part.done", output_index=index, content_index=0, item_id=item_id, part=part)
        done = {**message, "status": "completed", "content": [part]}
        self._event("response.output_item.done", output_index=index, item=done)
        return done, first_delta_at

    def _finish(self, base: dict[str, Any], output: list[dict[str, Any]], response_id: str, request_at: float,
                first_delta_at: float | None) -> None:
        usage = {
            "input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15,
        }
        self._event("response.completed", response={**base, "status": "completed", "output": output, "usage": usage})
        self._timing(response=response_id, requestAt=request_at, firstDeltaAt=first_delta_at, completedAt=time.time())


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def serve(port: int = 0, log_path: str | None = None, host: str = "127.0.0.1", timings_path: str | None = None) -> Server:
    """Start the server in a background thread; returns it (``server_address[1]`` is the port)."""
    handler = type("BoundHandler", (Handler,), {"log_path": log_path, "timings_path": timings_path})
    server = Server((host, port), handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="fake-openai").start()
    return server


def _watch_parent() -> None:
    """Exit once the process that started us is gone (we were reparented)."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.1)
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free one)")
    parser.add_argument("--port-file", help="write the chosen port here once listening")
    parser.add_argument("--log", help="append every request as a JSON line here")
    parser.add_argument("--timings", help="append, per streamed response, when its first delta and its end were written")
    parser.add_argument("--announce", action="store_true", help="print the port on stdout once listening")
    parser.add_argument("--exit-with-parent", action="store_true", help="exit when the parent process ends")
    args = parser.parse_args(argv)
    server = serve(args.port, args.log, timings_path=args.timings)
    if args.port_file:
        tmp = f"{args.port_file}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(str(server.server_address[1]))
        os.replace(tmp, args.port_file)
    if args.announce:
        # One line on stdout once listening: whoever started us waits on it, not on a timer.
        print(server.server_address[1], flush=True)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the reader may be gone now
    if args.exit_with_parent:
        _watch_parent()
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()

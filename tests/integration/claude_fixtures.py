"""A private, offline world for Claude Code: the fake Messages API, a private
CLAUDE_CONFIG_DIR and HOME, and — where ``unshare -rn`` works — a
loopback-only network namespace per runtime process.

A fresh network namespace has its own loopback, so the fake model must run
*inside* it: the provider's ``wrapper`` is a small shell that brings ``lo``
up, starts ``fake_anthropic.py`` on a fixed port (every namespace is empty,
so the port is always free, and ``ANTHROPIC_BASE_URL`` can name it in the
provider's ``env``), waits until it listens, then execs what follows (the
adapter's launcher, which execs claude — one pid throughout). The fake exits
when that process does. Where namespaces are not available the fake runs once
per test on a free port outside, and no wrapper is used (logged). Either way
``HTTP(S)_PROXY`` point at a closed loopback port, so a request that is not
for the fake fails at once instead of leaving the machine.

Imported by ``test_claude.py`` and ``scripts/bench_providers_claude.py``
(the shared conftest.py is left alone on purpose).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.providers.base import ProviderRuntimeError
from actors.providers.config import ProviderConfig

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
FAKE_SERVER = HERE / "fake_anthropic.py"
#: the fake's port inside a private namespace (always free there)
NAMESPACE_PORT = 18766
#: a loopback port nothing listens on: proxies pointed here refuse at once
CLOSED_PORT = 9

SKIP_REASON = (
    "the pinned claude binary is not installed (run: npm ci --prefix tests/integration/runtimes, "
    "or set AGENTD_CLAUDE_BINARY)"
)


def claude_binary() -> Path | None:
    """The claude the tests drive: ``$AGENTD_CLAUDE_BINARY``, else what the
    adapter would find (PATH, then the project-local pinned install)."""
    from actors.providers.claude import find_binary

    try:
        return find_binary(os.environ.get("AGENTD_CLAUDE_BINARY") or None)
    except ProviderRuntimeError:
        return None


@functools.lru_cache(maxsize=1)
def namespace_problem() -> str | None:
    """None if ``unshare -rn`` gives a working loopback-only namespace here, else why not."""
    if os.environ.get("AGENTD_CLAUDE_NAMESPACE") == "0":
        return "switched off with AGENTD_CLAUDE_NAMESPACE=0"
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    if shutil.which("ip") is None:
        return "ip (iproute2) is not installed"
    try:
        result = subprocess.run(
            ["unshare", "-rn", "sh", "-c", "ip link set lo up && ip -o link show lo"],
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -rn failed: {exc}"
    if result.returncode != 0 or "UP" not in result.stdout:
        return f"unshare -rn failed: {(result.stderr or result.stdout).strip()[:200]}"
    return None


def _toml_value(value: Any) -> str:
    """A TOML literal for a string, number, list or table of those."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


@dataclass
class ClaudeWorld:
    """Everything one test's claude runtimes share."""

    root: Path
    binary: Path
    config_dir: Path
    home: Path
    request_log: Path
    timings_log: Path
    port: int
    wrapper: list[str]
    namespaced: bool
    why_not_namespaced: str | None = None
    _server: subprocess.Popen | None = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        """The provider's ``env`` (PROVIDERS.md): the fake's URL and a dummy
        key, private config dir and home, no non-essential traffic, dead-end proxies."""
        proxy = f"http://127.0.0.1:{CLOSED_PORT}"
        return {
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{self.port}",
            "ANTHROPIC_API_KEY": "dummy",
            "CLAUDE_CONFIG_DIR": str(self.config_dir),
            "HOME": str(self.home),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "ALL_PROXY": proxy,
            "https_proxy": proxy, "http_proxy": proxy, "all_proxy": proxy,
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
        }

    def provider_config(self, name: str = "claude", **changes: Any) -> ProviderConfig:
        config = ProviderConfig(name=name, kind="claude", binary=str(self.binary), env=self.env(), wrapper=list(self.wrapper))
        for key, value in changes.items():
            setattr(config, key, value)
        return config

    def provider_toml(self, name: str = "claude", **extra: Any) -> str:
        """A ``[providers.NAME]`` table for agentd's config file."""
        table: dict[str, Any] = {"kind": "claude", "binary": str(self.binary), "env": self.env()}
        if self.wrapper:
            table["wrapper"] = self.wrapper
        table.update(extra)
        return f"[providers.{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in table.items())

    def requests(self) -> list[dict[str, Any]]:
        """Every request the fake model got so far (``{"path", "pid", "at", "body"}``)."""
        if not self.request_log.exists():
            return []
        with open(self.request_log, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def timings(self) -> list[dict[str, Any]]:
        """Per streamed main-loop response: ``{"requestAt", "firstDeltaAt", "completedAt"}`` (wall clock)."""
        if not self.timings_log.exists():
            return []
        with open(self.timings_log, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def model_requests(self) -> list[dict[str, Any]]:
        """Bodies of the main-loop model calls (with tools), oldest first."""
        return [
            r["body"] for r in self.requests()
            if r["path"].split("?")[0].endswith("/v1/messages") and r["body"] and r["body"].get("tools")
        ]

    def close(self) -> None:
        if self._server is not None and self._server.poll() is None:
            self._server.terminate()
            try:
                self._server.wait(5)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()


def make_world(root: Path, *, namespace: bool | None = None) -> ClaudeWorld:
    """Build a ClaudeWorld under ``root`` (a test's tmp dir).

    Args:
        namespace: force (True) or avoid (False) the network namespace; None:
            use it where it works.
    """
    binary = claude_binary()
    if binary is None:
        raise RuntimeError(SKIP_REASON)
    root.mkdir(parents=True, exist_ok=True)
    config_dir, home = root / "claude-config", root / "home"
    config_dir.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    request_log = root / "model-requests.ndjson"
    timings_log = root / "model-timings.ndjson"
    fake_log = root / "fake-server.log"
    problem = namespace_problem()
    use_namespace = problem is None if namespace is None else namespace
    if use_namespace:
        if problem is not None:
            raise RuntimeError(f"no network namespace here: {problem}")
        port_file = f"{root}/fake-port.$$"
        script = (
            "ip link set lo up || exit 97\n"
            f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_SERVER))} --port {NAMESPACE_PORT} "
            f"--port-file \"{port_file}\" --log {shlex.quote(str(request_log))} "
            f"--timings {shlex.quote(str(timings_log))} --exit-with-parent "
            f"</dev/null >/dev/null 2>>{shlex.quote(str(fake_log))} &\n"
            f"i=0; while [ ! -s \"{port_file}\" ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 98; sleep 0.005; done\n"
            f"rm -f \"{port_file}\"\n"
            'exec "$0" "$@"\n'
        )
        return ClaudeWorld(root, binary, config_dir, home, request_log, timings_log, NAMESPACE_PORT,
                           ["unshare", "-rn", "sh", "-c", script], True)
    if problem is not None:
        log.warning("claude tests run without a network namespace: %s", problem)
    port_file = root / "fake-port"
    server = subprocess.Popen(
        [sys.executable, str(FAKE_SERVER), "--port", "0", "--port-file", str(port_file), "--log", str(request_log),
         "--timings", str(timings_log)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(fake_log, "ab"),
    )
    deadline = time.monotonic() + 10
    while not port_file.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"the fake model server did not start: {fake_log.read_text()[-500:]}")
        time.sleep(0.01)
    return ClaudeWorld(root, binary, config_dir, home, request_log, timings_log, int(port_file.read_text()), [], False,
                       problem, server)


def user_texts(body: dict[str, Any]) -> list[str]:
    """The texts the person wrote in a model request, oldest first (Claude's
    own ``<system-reminder>`` blocks left out)."""
    from tests.integration import fake_anthropic

    out = []
    for message in body.get("messages") or []:
        if message.get("role") == "user":
            out.extend(fake_anthropic._user_texts(message))
    return out


# -- transcripts ---------------------------------------------------------------------------------

#: the test's tmp dir becomes this in saved transcripts
SANITIZED_ROOT = "/tmp/agentd-claude-test"
#: replays need no real pauses: recorded delays are capped at this many ms
MAX_REPLAY_DELAY_MS = 20
_INIT_KEYS = ("type", "subtype", "session_id", "cwd", "model", "permissionMode", "apiKeySource", "claude_code_version")
_HEAVY_KEYS = ("usage", "modelUsage", "model_usage_since_last_result", "subagent_stats", "fast_mode_state",
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

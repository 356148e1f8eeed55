"""A private, offline world for ``codex app-server``: a fake model server,
a private CODEX_HOME and HOME, and — where ``unshare -rn`` works — a
loopback-only network namespace per runtime process.

A fresh network namespace has its own loopback, so the fake model must run
*inside* it: the provider's ``wrapper`` is a small shell that brings ``lo``
up, starts ``fake_openai.py`` on a fixed port (every namespace is empty, so
the port is always free), waits until it listens, then execs codex. The fake
exits when codex does. Where namespaces are not available the fake runs once
per test on a free port outside, and no wrapper is used (logged). Either way
``HTTP(S)_PROXY`` point at a closed loopback port, so a request that is not
for the fake fails at once instead of leaving the machine.

Imported by the integration tests (``test_codex.py``) and the benchmark
script; shared conftest.py is left alone on purpose.
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
FAKE_SERVER = HERE / "fake_openai.py"
#: the fake's port inside a private namespace (always free there)
NAMESPACE_PORT = 18765
#: a loopback port nothing listens on: proxies pointed here refuse at once
CLOSED_PORT = 9


def codex_binary() -> Path | None:
    """The codex the tests drive: ``$AGENTD_CODEX_BINARY``, else what the
    adapter would find (PATH, then the project-local pinned install)."""
    from actors.providers.codex import find_binary

    try:
        return find_binary(os.environ.get("AGENTD_CODEX_BINARY") or None)
    except ProviderRuntimeError:
        return None


SKIP_REASON = (
    "the pinned codex binary is not installed (run: npm ci --prefix tests/integration/runtimes, "
    "or set AGENTD_CODEX_BINARY)"
)


@functools.lru_cache(maxsize=1)
def namespace_problem() -> str | None:
    """None if ``unshare -rn`` gives a working loopback-only namespace here,
    else why not."""
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


def codex_config_toml(port: int, *, approval_policy: str = "on-request", model: str = "fake-model") -> str:
    """``$CODEX_HOME/config.toml`` for the fake model (PROVIDERS.md)."""
    features = ("plugins", "apps", "remote_plugin", "plugin_sharing", "tool_suggest", "image_generation",
                "skill_mcp_dependency_install", "in_app_updates")
    return "\n".join([
        f'model = "{model}"',
        'model_provider = "fake"',
        f'approval_policy = "{approval_policy}"',
        'sandbox_mode = "workspace-write"',
        "check_for_update_on_startup = false",
        'web_search = "disabled"',
        "",
        "[model_providers.fake]",
        'name = "fake"',
        f'base_url = "http://127.0.0.1:{port}/v1"',
        'env_key = "FAKE_API_KEY"',
        'wire_api = "responses"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[features]",
        *(f"{name} = false" for name in features),
        "",
    ])


def _toml_value(value: Any) -> str:
    """A TOML literal for a string, list of strings or table of strings
    (JSON string escapes are valid TOML basic-string escapes)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


@dataclass
class CodexWorld:
    """Everything one test's codex runtimes share."""

    root: Path
    binary: Path
    codex_home: Path
    home: Path
    request_log: Path
    timings_log: Path
    port: int
    wrapper: list[str]
    namespaced: bool
    why_not_namespaced: str | None = None
    _server: subprocess.Popen | None = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        """The provider's ``env``: private homes, the fake's key, dead-end proxies."""
        proxy = f"http://127.0.0.1:{CLOSED_PORT}"
        return {
            "CODEX_HOME": str(self.codex_home),
            "HOME": str(self.home),
            "FAKE_API_KEY": "fake-key",
            "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "ALL_PROXY": proxy,
            "https_proxy": proxy, "http_proxy": proxy, "all_proxy": proxy,
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
            "RUST_LOG": "warn",
        }

    def provider_config(self, name: str = "codex", **changes: Any) -> ProviderConfig:
        config = ProviderConfig(name=name, kind="codex", binary=str(self.binary), env=self.env(), wrapper=list(self.wrapper))
        for key, value in changes.items():
            setattr(config, key, value)
        return config

    def provider_toml(self, name: str = "codex", **extra: Any) -> str:
        """A ``[providers.NAME]`` table for agentd's config file."""
        table: dict[str, Any] = {"kind": "codex", "binary": str(self.binary), "env": self.env()}
        if self.wrapper:
            table["wrapper"] = self.wrapper
        table.update(extra)
        return f"[providers.{name}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in table.items())

    def requests(self) -> list[dict[str, Any]]:
        """Every request the fake model got so far (``{"path", "at", "body"}``)."""
        if not self.request_log.exists():
            return []
        with open(self.request_log, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def timings(self) -> list[dict[str, Any]]:
        """Per streamed response: ``{"response", "requestAt", "firstDeltaAt", "completedAt"}`` (wall clock)."""
        if not self.timings_log.exists():
            return []
        with open(self.timings_log, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def model_requests(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests() if r["path"].rstrip("/").endswith("/responses") and r["body"]]

    def close(self) -> None:
        if self._server is not None and self._server.poll() is None:
            self._server.terminate()
            try:
                self._server.wait(5)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()


def make_world(root: Path, *, approval_policy: str = "on-request", namespace: bool | None = None) -> CodexWorld:
    """Build a CodexWorld under ``root`` (a test's tmp dir).

    Args:
        namespace: force (True) or avoid (False) the network namespace;
            None: use it where it works.
    """
    binary = codex_binary()
    if binary is None:
        raise RuntimeError(SKIP_REASON)
    root.mkdir(parents=True, exist_ok=True)
    codex_home, home = root / "codex-home", root / "home"
    codex_home.mkdir(exist_ok=True)
    home.mkdir(exist_ok=True)
    request_log = root / "model-requests.ndjson"
    timings_log = root / "model-timings.ndjson"
    problem = namespace_problem()
    use_namespace = problem is None if namespace is None else namespace
    if use_namespace:
        if problem is not None:
            raise RuntimeError(f"no network namespace here: {problem}")
        port = NAMESPACE_PORT
        port_file = f"{root}/fake-port.$$"
        script = (
            "ip link set lo up || exit 97\n"
            f"{shlex.quote(sys.executable)} {shlex.quote(str(FAKE_SERVER))} --port {port} "
            f"--port-file \"{port_file}\" --log {shlex.quote(str(request_log))} "
            f"--timings {shlex.quote(str(timings_log))} --exit-with-parent &\n"
            f"i=0; while [ ! -s \"{port_file}\" ]; do i=$((i+1)); [ $i -gt 1000 ] && exit 98; sleep 0.01; done\n"
            f"rm -f \"{port_file}\"\n"
            'exec "$0" "$@"\n'
        )
        wrapper = ["unshare", "-rn", "sh", "-c", script]
        world = CodexWorld(root, binary, codex_home, home, request_log, timings_log, port, wrapper, True)
    else:
        if problem is not None:
            log.warning("codex tests run without a network namespace: %s", problem)
        port_file = root / "fake-port"
        server = subprocess.Popen(
            [sys.executable, str(FAKE_SERVER), "--port", "0", "--port-file", str(port_file), "--log", str(request_log),
             "--timings", str(timings_log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(root / "fake.log", "ab"),
        )
        deadline = time.monotonic() + 10
        while not port_file.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fake model server did not start: {(root / 'fake.log').read_text()[-500:]}")
            time.sleep(0.01)
        port = int(port_file.read_text())
        world = CodexWorld(root, binary, codex_home, home, request_log, timings_log, port, [], False, problem, server)
    (codex_home / "config.toml").write_text(codex_config_toml(port, approval_policy=approval_policy))
    return world


def user_texts(body: dict[str, Any]) -> list[str]:
    """The user messages a model request carries (the fake's own reading)."""
    from tests.integration import fake_openai

    return fake_openai.user_texts(body)

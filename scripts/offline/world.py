"""What the Codex and Claude integration fixtures share: a private world for
one real runtime and its fake model server.

Where ``unshare -rn`` works, the runtime runs in a loopback-only network
namespace, and because a fresh namespace has its own loopback the fake model
server must start inside it too: the adapter's ``wrapper`` is a small shell
that starts the fake, waits for it to announce its port (a FIFO, no polling)
and then execs the runtime. Elsewhere the fake runs beside the tests and the
runtime reaches it on 127.0.0.1. Either way no request can leave the machine:
proxies point at a closed port.
"""

from __future__ import annotations

import functools
import json
import os
import select
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from agentd.actors.config import ProviderConfig

CLOSED_PORT = 9  # discard: nothing listens, every proxied request fails at once


@functools.lru_cache(maxsize=None)
def namespace_problem(switch_variable: str) -> str | None:
    """None if ``unshare -rn`` gives a working loopback-only namespace here,
    else why not (``$switch_variable=0`` switches it off on purpose)."""
    if os.environ.get(switch_variable) == "0":
        return f"switched off with {switch_variable}=0"
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


def toml_value(value: Any) -> str:
    """``value`` as a TOML literal (strings, bools, numbers, lists, tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value))


def proxy_env() -> dict[str, str]:
    proxy = f"http://127.0.0.1:{CLOSED_PORT}"
    return {
        "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "ALL_PROXY": proxy,
        "https_proxy": proxy, "http_proxy": proxy, "all_proxy": proxy,
        "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
    }


def _fake_command(fake_server: Path, port: int, request_log: Path, timings_log: Path) -> list[str]:
    return [sys.executable, str(fake_server), "--port", str(port), "--announce", "--log", str(request_log),
            "--timings", str(timings_log), "--exit-with-parent"]


def namespace_wrapper(fake_server: Path, *, port: int, request_log: Path, timings_log: Path, fake_log: Path) -> list[str]:
    """argv to put before the runtime's command: a new network namespace in
    which the fake listens on ``port`` before the runtime starts."""
    command = " ".join(shlex.quote(a) for a in _fake_command(fake_server, port, request_log, timings_log))
    # Isolated and without site (it is stdlib only): the runtime starts after it listens, and
    # site (.pth hooks, the editable finder) would be most of its start (issue 24).
    bridge = shlex.join([sys.executable, "-I", "-S", str(Path(__file__).with_name("mcp_bridge.py"))])
    script = (
        "ip link set lo up || exit 97\n"
        'fifo=$(mktemp -u) && mkfifo "$fifo" || exit 96\n'
        f'{command} </dev/null >"$fifo" 2>>{shlex.quote(str(fake_log))} &\n'
        # Blocks until the fake announces its port: it is listening then.
        'read -r _port <"$fifo"; rm -f "$fifo"\n'
        '[ -n "$_port" ] || exit 98\n'
        # agentd's MCP endpoint is on the host's loopback: bridged in through its Unix socket.
        'if [ -n "$AGENTD_MCP_URL" ] && [ -n "$AGENTD_MCP_SOCKET" ]; then\n'
        '  mkfifo "$fifo" || exit 95\n'
        f'  {bridge} --url "$AGENTD_MCP_URL" --socket "$AGENTD_MCP_SOCKET" --announce --exit-with-parent'
        f' </dev/null >"$fifo" 2>>{shlex.quote(str(fake_log))} &\n'
        '  read -r _bridged <"$fifo"; rm -f "$fifo"\n'
        '  [ -n "$_bridged" ] || exit 94\n'
        'fi\n'
        'exec "$0" "$@"\n'
    )
    return ["unshare", "-rn", "sh", "-c", script]


def start_fake_server(fake_server: Path, *, request_log: Path, timings_log: Path, fake_log: Path,
                      timeout: float = 10.0) -> tuple[subprocess.Popen, int]:
    """Start the fake beside the tests; return it and the port it announced."""
    with open(fake_log, "ab") as log:
        server = subprocess.Popen(_fake_command(fake_server, 0, request_log, timings_log),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
    ready, _, _ = select.select([server.stdout], [], [], timeout)
    line = server.stdout.readline() if ready else b""
    if not line.strip():
        server.kill()
        server.wait()
        raise RuntimeError(f"the fake model server did not start: {fake_log.read_text()[-500:]}")
    return server, int(line)


def _read_ndjson(path: Path) -> list[dict[str, Any]]:
    """The complete lines of an append-only log a fake is writing.

    A line without its newline is still being written (a reader on Linux
    can see part of a large ``write`` to a regular file), so it is left
    for the next read rather than parsed half-way."""
    if not path.exists():
        return []
    with open(path, "rb") as f:
        data = f.read()
    complete = data[: data.rfind(b"\n") + 1]
    return [json.loads(line) for line in complete.decode("utf-8").splitlines() if line.strip()]


@dataclass(kw_only=True)
class FakeModelWorld:
    """Private homes, the fake model and the runtime's launch settings for
    one test. Subclasses name the ``kind`` and give the runtime's ``env()``."""

    kind: ClassVar[str]
    root: Path
    binary: Path
    home: Path
    request_log: Path
    timings_log: Path
    port: int
    wrapper: list[str]
    namespaced: bool
    why_not_namespaced: str | None = None
    _server: subprocess.Popen | None = field(default=None, repr=False)

    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def provider_config(self, name: str | None = None, **changes: Any) -> ProviderConfig:
        config = ProviderConfig(name=name or self.kind, kind=self.kind, binary=str(self.binary), env=self.env(),
                                wrapper=list(self.wrapper))
        for key, value in changes.items():
            setattr(config, key, value)
        return config

    def provider_toml(self, name: str | None = None, **extra: Any) -> str:
        """A ``[providers.NAME]`` table for agentd's config file."""
        table: dict[str, Any] = {"kind": self.kind, "binary": str(self.binary), "env": self.env()}
        if self.wrapper:
            table["wrapper"] = self.wrapper
        table.update(extra)
        return f"[providers.{name or self.kind}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items())

    def requests(self) -> list[dict[str, Any]]:
        """Every request the fake model got so far (``{"path", "at", "body", …}``)."""
        return _read_ndjson(self.request_log)

    def timings(self) -> list[dict[str, Any]]:
        """Per streamed response: when it was asked, its first delta and its end (wall clock)."""
        return _read_ndjson(self.timings_log)

    def close(self) -> None:
        if self._server is not None and self._server.poll() is None:
            self._server.terminate()
            try:
                self._server.wait(5)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait()


def make_fake_world(
    world_class: type[FakeModelWorld], root: Path, fake_server: Path, *, binary: Path, namespace_port: int,
    switch_variable: str, namespace: bool | None, **fields: Any,
) -> FakeModelWorld:
    """The fake model for a world (in a namespace where that works, unless
    ``namespace`` says otherwise) and the world itself."""
    request_log, timings_log = root / "model-requests.ndjson", root / "model-timings.ndjson"
    fake_log = root / "fake-server.log"
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    common = dict(root=root, binary=binary, home=home, request_log=request_log, timings_log=timings_log, **fields)
    problem = namespace_problem(switch_variable)
    use_namespace = problem is None if namespace is None else namespace
    if use_namespace:
        if problem is not None:
            raise RuntimeError(f"no network namespace here: {problem}")
        wrapper = namespace_wrapper(fake_server, port=namespace_port, request_log=request_log,
                                    timings_log=timings_log, fake_log=fake_log)
        return world_class(port=namespace_port, wrapper=wrapper, namespaced=True, **common)
    server, port = start_fake_server(fake_server, request_log=request_log, timings_log=timings_log, fake_log=fake_log)
    return world_class(port=port, wrapper=[], namespaced=False, why_not_namespaced=problem, _server=server, **common)

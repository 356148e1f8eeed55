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

Used by the integration tests (``tests/integration/test_codex.py``) and
``scripts/bench_providers_codex.py``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from agentd.actors.providers.base import ProviderRuntimeError

from . import world

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
FAKE_SERVER = HERE / "fake_openai.py"
#: the fake's port inside a private namespace (always free there)
NAMESPACE_PORT = 18765


def codex_binary() -> Path | None:
    """The codex the tests drive: ``$AGENTD_CODEX_BINARY``, else what the
    adapter would find (PATH, then the project-local pinned install)."""
    from agentd.actors.providers.codex import find_binary

    try:
        return find_binary(os.environ.get("AGENTD_CODEX_BINARY") or None)
    except ProviderRuntimeError:
        return None


SKIP_REASON = (
    "the pinned codex binary is not installed (run: npm ci --prefix tests/integration/runtimes, "
    "or set AGENTD_CODEX_BINARY)"
)


def namespace_problem() -> str | None:
    return world.namespace_problem("AGENTD_CODEX_NAMESPACE")


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


@dataclass(kw_only=True)
class CodexWorld(world.FakeModelWorld):
    """Everything one test's codex runtimes share."""

    kind: ClassVar[str] = "codex"
    codex_home: Path

    def env(self) -> dict[str, str]:
        """The provider's ``env``: private homes, the fake's key, dead-end proxies."""
        return {
            "CODEX_HOME": str(self.codex_home),
            "HOME": str(self.home),
            "FAKE_API_KEY": "fake-key",
            **world.proxy_env(),
            "RUST_LOG": "warn",
        }

    def model_requests(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests() if r["path"].rstrip("/").endswith("/responses") and r["body"]]


def make_world(root: Path, *, approval_policy: str = "on-request", namespace: bool | None = None) -> CodexWorld:
    """Build a CodexWorld under ``root`` (a test's tmp dir).

    Args:
        namespace: force (True) or avoid (False) the network namespace;
            None: use it where it works.
    """
    binary = codex_binary()
    if binary is None:
        raise RuntimeError(SKIP_REASON)
    codex_home = root / "codex-home"
    codex_home.mkdir(parents=True, exist_ok=True)
    made = world.make_fake_world(CodexWorld, root, FAKE_SERVER, binary=binary, namespace_port=NAMESPACE_PORT,
                                 switch_variable="AGENTD_CODEX_NAMESPACE", namespace=namespace, codex_home=codex_home)
    if not made.namespaced and made.why_not_namespaced:
        log.warning("codex tests run without a network namespace: %s", made.why_not_namespaced)
    (codex_home / "config.toml").write_text(codex_config_toml(made.port, approval_policy=approval_policy))
    return made


def user_texts(body: dict[str, Any]) -> list[str]:
    """The user messages a model request carries (the fake's own reading)."""
    from . import fake_openai

    return fake_openai.user_texts(body)

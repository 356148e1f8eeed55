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

Used by the integration tests (``tests/integration/test_claude.py``) and
``scripts/bench_providers_claude.py``.
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
FAKE_SERVER = HERE / "fake_anthropic.py"
#: the fake's port inside a private namespace (always free there)
NAMESPACE_PORT = 18766

SKIP_REASON = (
    "the pinned claude binary is not installed (run: npm ci --prefix tests/integration/runtimes, "
    "or set AGENTD_CLAUDE_BINARY)"
)


def claude_binary() -> Path | None:
    """The claude the tests drive: ``$AGENTD_CLAUDE_BINARY``, else what the
    adapter would find (PATH, then the project-local pinned install)."""
    from agentd.actors.providers.claude import find_binary

    try:
        return find_binary(os.environ.get("AGENTD_CLAUDE_BINARY") or None)
    except ProviderRuntimeError:
        return None


def namespace_problem() -> str | None:
    return world.namespace_problem("AGENTD_CLAUDE_NAMESPACE")


@dataclass(kw_only=True)
class ClaudeWorld(world.FakeModelWorld):
    """Everything one test's claude runtimes share."""

    kind: ClassVar[str] = "claude"
    config_dir: Path

    def env(self) -> dict[str, str]:
        """The provider's ``env`` (PROVIDERS.md): the fake's URL and a dummy
        key, private config dir and home, no non-essential traffic, dead-end proxies."""
        return {
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{self.port}",
            "ANTHROPIC_API_KEY": "dummy",
            "CLAUDE_CONFIG_DIR": str(self.config_dir),
            "HOME": str(self.home),
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1",
            **world.proxy_env(),
        }

    def model_requests(self) -> list[dict[str, Any]]:
        """Bodies of the main-loop model calls (with tools), oldest first."""
        return [
            r["body"] for r in self.requests()
            if r["path"].split("?")[0].endswith("/v1/messages") and r["body"] and r["body"].get("tools")
        ]


def make_world(root: Path, *, namespace: bool | None = None) -> ClaudeWorld:
    """Build a ClaudeWorld under ``root`` (a test's tmp dir).

    Args:
        namespace: force (True) or avoid (False) the network namespace; None:
            use it where it works.
    """
    binary = claude_binary()
    if binary is None:
        raise RuntimeError(SKIP_REASON)
    config_dir = root / "claude-config"
    config_dir.mkdir(parents=True, exist_ok=True)
    made = world.make_fake_world(ClaudeWorld, root, FAKE_SERVER, binary=binary, namespace_port=NAMESPACE_PORT,
                                 switch_variable="AGENTD_CLAUDE_NAMESPACE", namespace=namespace, config_dir=config_dir)
    if not made.namespaced and made.why_not_namespaced:
        log.warning("claude tests run without a network namespace: %s", made.why_not_namespaced)
    return made


def user_texts(body: dict[str, Any]) -> list[str]:
    """The texts the person wrote in a model request, oldest first (Claude's
    own ``<system-reminder>`` blocks left out)."""
    from . import fake_anthropic

    out = []
    for message in body.get("messages") or []:
        if message.get("role") == "user":
            out.extend(fake_anthropic._user_texts(message))
    return out

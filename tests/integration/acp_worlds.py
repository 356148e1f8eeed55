"""Real ACP agents offline, for the ACP adapter's tests (issue 25).

Claude through ``@agentclientprotocol/claude-agent-acp`` (pinned in
``tests/integration/runtimes/package.json``): its Claude Agent SDK starts a
``claude`` binary, here the pinned Claude Code (``CLAUDE_CODE_EXECUTABLE``),
which talks to ``scripts/offline/fake_anthropic.py`` exactly as in the Claude
tests — same private world, same loopback-only network namespace (the
wrapper execs whatever follows it, here the ACP agent). As root the SDK
refuses to run without ``IS_SANDBOX=1``.

Codex through ``@zed-industries/codex-acp`` (a native binary, pinned too):
chosen as the agent that is not Claude because the project's fake OpenAI
Responses server (``scripts/offline/fake_openai.py``) and Codex world drive it
as they are — OpenCode needs a Chat Completions fake and Gemini CLI a fake
Gemini API. It reads ``$CODEX_HOME/config.toml`` like the Codex CLI; its
commands run under bubblewrap, which it does not bundle, so the bwrap that
the pinned ``@openai/codex`` ships is put on its PATH.

Also: recordings of an agent's ACP traffic made replayable anywhere
(:func:`sanitize`), for ``tests/providers/test_acp_replay.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentd.actors.config import ProviderConfig
from scripts.offline import claude as claude_world
from scripts.offline import codex as codex_world
from scripts.offline.world import toml_value

RUNTIMES = Path(__file__).resolve().parent / "runtimes" / "node_modules"
CLAUDE_ACP = RUNTIMES / ".bin" / "claude-agent-acp"
CLAUDE_ACP_VERSION = "0.101.0"
SKIP_REASON = ("the pinned ACP agents and their runtimes are not installed "
               "(run: npm ci --prefix tests/integration/runtimes)")
#: the test's tmp dir becomes this in saved transcripts
SANITIZED_ROOT = "/tmp/agentd-acp-test"
MAX_REPLAY_DELAY_MS = 20


CODEX_ACP = RUNTIMES / "@zed-industries" / "codex-acp-linux-x64" / "bin" / "codex-acp"
CODEX_ACP_VERSION = "0.16.0"
BWRAP = RUNTIMES / "@openai" / "codex-linux-x64" / "vendor" / "x86_64-unknown-linux-musl" / "codex-resources" / "bwrap"


def codex_acp_available() -> bool:
    return CODEX_ACP.exists() and BWRAP.exists() and codex_world.codex_binary() is not None


class CodexAcpWorld:
    """A Codex world (fake Responses API, private CODEX_HOME) whose runtime is codex-acp."""

    def __init__(self, root: Path, workspace: Path) -> None:
        self.codex = codex_world.make_world(root)
        # gpt-5.4: a model codex-acp knows (no "model metadata not found" line in answers);
        # the workspace trusted, so on-request asks only for what needs the sandbox lifted
        toml = codex_world.codex_config_toml(self.codex.port, model="gpt-5.4")
        (self.codex.codex_home / "config.toml").write_text(toml + f'\n[projects."{workspace}"]\ntrust_level = "trusted"\n')
        self.bin = root / "bin"
        self.bin.mkdir(exist_ok=True)
        (self.bin / "bwrap").symlink_to(BWRAP)

    def env(self) -> dict[str, str]:
        import os

        return {**self.codex.env(), "PATH": f"{self.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"}

    def provider_config(self, name: str = "codex_acp", **changes: Any) -> ProviderConfig:
        return ProviderConfig(name=name, kind="acp", binary=str(CODEX_ACP), env=self.env(),
                              wrapper=list(self.codex.wrapper), **changes)

    def model_requests(self) -> list[dict[str, Any]]:
        return self.codex.model_requests()

    def close(self) -> None:
        self.codex.close()


def claude_acp_available() -> bool:
    return CLAUDE_ACP.exists() and claude_world.claude_binary() is not None


class ClaudeAcpWorld:
    """A Claude world (fake Anthropic server, private homes) whose runtime is claude-agent-acp."""

    def __init__(self, root: Path) -> None:
        self.claude = claude_world.make_world(root)

    def env(self) -> dict[str, str]:
        return {**self.claude.env(), "CLAUDE_CODE_EXECUTABLE": str(self.claude.binary), "IS_SANDBOX": "1"}

    def provider_config(self, name: str = "claude_acp", **changes: Any) -> ProviderConfig:
        # mode "default" is the agent's "Manual": it asks before commands and edits
        fields: dict[str, Any] = {"mode": "default", **changes}
        return ProviderConfig(name=name, kind="acp", binary=str(CLAUDE_ACP), env=self.env(),
                              wrapper=list(self.claude.wrapper), **fields)

    def provider_toml(self, name: str = "claude_acp", **extra: Any) -> str:
        table: dict[str, Any] = {"kind": "acp", "binary": str(CLAUDE_ACP), "mode": "default", "env": self.env()}
        if self.claude.wrapper:
            table["wrapper"] = list(self.claude.wrapper)
        table.update(extra)
        return f"[providers.{name}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in table.items())

    def model_requests(self) -> list[dict[str, Any]]:
        return self.claude.model_requests()

    def close(self) -> None:
        self.claude.close()


def _replace(value: Any, roots: list[str]) -> Any:
    if isinstance(value, str):
        for root in roots:
            value = value.replace(root, SANITIZED_ROOT)
        return value
    if isinstance(value, list):
        return [_replace(v, roots) for v in value]
    if isinstance(value, dict):
        return {k: _replace(v, roots) for k, v in value.items()}
    return value


def sanitize(source: Path, target: Path, roots: list[Path]) -> None:
    """The test's paths become SANITIZED_ROOT, pauses are capped, and an exit
    after our end of input is left to the replay (which exits when the
    adapter closes stdin: the replay exercises the polite stop)."""
    names = sorted({str(p) for root in roots for p in (root, root.resolve())}, key=len, reverse=True)
    entries = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    if entries and entries[-1]["type"] == "runtime_exit":
        entries.pop()
    out = []
    for entry in entries:
        entry = _replace(entry, names)
        if "afterMs" in entry:
            entry["afterMs"] = min(entry["afterMs"], MAX_REPLAY_DELAY_MS)
        out.append(json.dumps(entry))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(out) + "\n")

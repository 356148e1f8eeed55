"""The daemon's TOML config: provider instances and daemon settings.

```toml
[daemon]
default_provider = "scripted"
idle_timeout = 600            # seconds a provider session may sit idle
interrupt_grace = 10          # seconds a provider may take to honour an interrupt
unsupported_interrupt = "interrupted"   # or "cancelled": runs stopped because the provider cannot interrupt
websocket_port = 7311         # also serve on ws://127.0.0.1:7311/ (token in <data-dir>/websocket.token)
websocket_origins = []        # browser origins allowed to connect

[providers.basic]
kind = "scripted"
capabilities = { steer = false, nativeFork = false }
idle_timeout = 60
```

``scripted`` always exists, configured or not. A bad file is refused with its
path, the line and the reason, before the daemon starts.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from .providers.base import Capabilities

KINDS = ("scripted", "codex", "claude")
DEFAULT_IDLE_TIMEOUT = 600.0


class ConfigError(Exception):
    """The config file cannot be used; the message names file, line and reason."""


@dataclass
class ProviderConfig:
    name: str
    kind: str
    capabilities: Capabilities = field(default_factory=Capabilities)
    idle_timeout: float | None = None
    binary: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    model: str | None = None
    #: argv put before the runtime's command (e.g. a network-namespace launcher in tests)
    wrapper: list[str] = field(default_factory=list)


@dataclass
class DaemonConfig:
    path: Path | None = None
    default_provider: str = "scripted"
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    #: seconds a provider may take to end an interrupted turn before its session is stopped
    interrupt_grace: float = 10.0
    #: what a run becomes when its provider cannot interrupt and its session is stopped instead
    unsupported_interrupt_status: str = "interrupted"
    #: also serve the protocol on this loopback WebSocket port (None: off)
    websocket_port: int | None = None
    #: browser origins allowed to use the WebSocket (none by default)
    websocket_origins: list[str] = field(default_factory=list)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)


_PROVIDER_KEYS = {"kind", "capabilities", "idle_timeout", "binary", "args", "env", "model", "wrapper"}
_DAEMON_KEYS = {"default_provider", "idle_timeout", "interrupt_grace", "unsupported_interrupt", "websocket_port", "websocket_origins"}
_CAPABILITY_NAMES = ", ".join(f.encode_name for f in msgspec.structs.fields(Capabilities))


def _line_of(text: str, pattern: str) -> int:
    """1-based line of the first match of ``pattern`` (a regex), else 1."""
    for number, line in enumerate(text.splitlines(), 1):
        if re.search(pattern, line):
            return number
    return 1


def load_config(path: Path | None) -> DaemonConfig:
    """Read the config at ``path`` (None or a missing default: built-ins only).

    Raises:
        ConfigError: the file exists but is not valid.
    """
    config = DaemonConfig(path=path)
    config.providers["scripted"] = ProviderConfig(name="scripted", kind="scripted")
    if path is None or not path.exists():
        return config
    text = path.read_text(encoding="utf-8")

    def fail(line: int, reason: str) -> ConfigError:
        return ConfigError(f"{path}:{line}: {reason}")

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        raise fail(int(match.group(1)) if match else 1, f"not valid TOML: {exc}") from None

    for key in data:
        if key not in ("daemon", "providers"):
            raise fail(_line_of(text, rf"^\s*\[?{re.escape(key)}\b"), f"unknown section or key {key!r} (expected [daemon] or [providers.NAME])")

    daemon = data.get("daemon", {})
    for key, value in daemon.items():
        line = _line_of(text, rf"^\s*{re.escape(key)}\s*=")
        if key not in _DAEMON_KEYS:
            raise fail(line, f"unknown [daemon] key {key!r} (expected one of {sorted(_DAEMON_KEYS)})")
        if key == "idle_timeout":
            config.idle_timeout = _positive_number(value, lambda r: fail(line, f"idle_timeout {r}"))
        elif key == "websocket_port":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
                raise fail(line, f"websocket_port must be a port number (0 for any free port), not {value!r}")
            config.websocket_port = value
        elif key == "websocket_origins":
            if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                raise fail(line, "websocket_origins must be a list of origins such as \"http://localhost:3000\"")
            config.websocket_origins = list(value)
        elif key == "interrupt_grace":
            config.interrupt_grace = _positive_number(value, lambda r: fail(line, f"interrupt_grace {r}"))
        elif key == "unsupported_interrupt":
            if value not in ("interrupted", "cancelled"):
                raise fail(line, f"unsupported_interrupt must be \"interrupted\" or \"cancelled\", not {value!r}")
            config.unsupported_interrupt_status = value
        elif key == "default_provider":
            if not isinstance(value, str):
                raise fail(line, "default_provider must be a string")
            config.default_provider = value

    for name, table in data.get("providers", {}).items():
        header = _line_of(text, rf"^\s*\[\s*providers\.{re.escape(name)}\s*\]")
        if not isinstance(table, dict):
            raise fail(header, f"providers.{name} must be a table")
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise fail(header, f"provider name {name!r} must be 1-64 letters, digits, '-' or '_'")
        for key in table:
            if key not in _PROVIDER_KEYS:
                raise fail(_line_of(text, rf"^\s*{re.escape(key)}\s*="), f"unknown key {key!r} in [providers.{name}] (expected one of {sorted(_PROVIDER_KEYS)})")
        kind = table.get("kind")
        if kind not in KINDS:
            raise fail(_line_of(text, r"^\s*kind\s*=") if "kind" in table else header, f"[providers.{name}] kind must be one of {', '.join(KINDS)}, not {kind!r}")
        provider = ProviderConfig(name=name, kind=kind)
        if "capabilities" in table:
            line = _line_of(text, r"^\s*capabilities\s*=")
            try:
                provider.capabilities = msgspec.convert(table["capabilities"], Capabilities)
            except msgspec.ValidationError as exc:
                raise fail(line, f"[providers.{name}] capabilities: {exc} (known: {_CAPABILITY_NAMES})") from None
        if "idle_timeout" in table:
            line = _line_of(text, r"^\s*idle_timeout\s*=")
            provider.idle_timeout = _positive_number(table["idle_timeout"], lambda r: fail(line, f"[providers.{name}] idle_timeout {r}"))
        for key, expected in (("binary", str), ("model", str)):
            if key in table:
                if not isinstance(table[key], expected):
                    raise fail(_line_of(text, rf"^\s*{key}\s*="), f"[providers.{name}] {key} must be a string")
                setattr(provider, key, table[key])
        for key in ("args", "wrapper"):
            if key in table:
                if not (isinstance(table[key], list) and all(isinstance(a, str) for a in table[key])):
                    raise fail(_line_of(text, rf"^\s*{key}\s*="), f"[providers.{name}] {key} must be a list of strings")
                setattr(provider, key, list(table[key]))
        if "env" in table:
            env = table["env"]
            if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
                raise fail(_line_of(text, r"^\s*env\s*="), f"[providers.{name}] env must be a table of strings")
            provider.env = dict(env)
        config.providers[name] = provider

    if config.default_provider not in config.providers:
        raise fail(_line_of(text, r"^\s*default_provider\s*="), f"default_provider {config.default_provider!r} is not a configured provider")
    return config


def _positive_number(value: Any, fail) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise fail(f"must be a positive number of seconds, not {value!r}")
    return float(value)

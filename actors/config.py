"""The daemon's TOML config: provider instances and daemon settings.

```toml
[daemon]
default_provider = "scripted"
idle_timeout = 600            # seconds a provider session may sit idle
interrupt_grace = 10          # seconds a provider may take to honour an interrupt
unsupported_interrupt = "interrupted"   # or "cancelled": runs stopped because the provider cannot interrupt
websocket_port = 7311         # also serve on ws://127.0.0.1:7311/ (token in <data-dir>/websocket.token)
websocket_origins = []        # browser origins allowed to connect
web = false                   # serve the web console on the WebSocket's port (default port 7311)
allow_broad_workspaces = false  # let / or the home folder itself be a workspace
handoff_max_chars = 32000     # cap on a context handoff's text (what is dropped is recorded)
handoff_max_bridges = 3       # delta handoffs in a row before a fresh provider thread
handoff_max_runs_behind = 20  # runs a returning provider thread may miss before a fresh one
delegate_max_depth = 3        # how deep delegated tasks may nest
delegate_max_fanout = 8       # delegated tasks one thread may have working at once
delegate_max_copy_bytes = 536870912  # a workspace: fork copy may hold at most this many bytes
max_sessions = 16             # provider sessions (agent runtimes) the daemon runs at once
thread_failure_limit = 3      # a thread whose actor fails this often within
thread_failure_period = 60    # this many seconds is quarantined (thread.unquarantine)
stall_after = 300             # seconds a running run's provider may say nothing before run.stalled (0: off)

[pricing."gpt-5.5"]           # per million tokens, for the cost beside a run's usage
input = 1.25
output = 10.0
cached_input = 0.125          # optional: cached input at the input price otherwise

[checkpoints]
max_file_bytes = 10485760     # larger files are neither stored nor restored (reported as too_large)
compact_after = 100           # captures of a workspace before its shadow repository is compacted (0: never)
compact_delay = 30            # seconds after that capture before compacting (when the workspace is quiet)

[providers.basic]
kind = "scripted"
capabilities = { steer = false, nativeFork = false }
idle_timeout = 60
agentd_tool = "ask"           # agentd's MCP tool in its sessions: ask | allow | off
```

The file's shape is the ``ConfigFile`` Struct below: msgspec decodes the
parsed TOML into it, so types, bounds and unknown keys are checked by the
declarations, not by hand. ``scripted`` always exists, configured or not. A
bad file is refused with its path, the line and the reason, before the daemon
starts; a file that was asked for (``--config``, ``$AGENTD_CONFIG``) must exist.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from .providers.base import Capabilities

DEFAULT_IDLE_TIMEOUT = 600.0
#: a fork copy's cap unless configured: 512 MiB — a project with its
#: dependencies installed, not a home folder
DEFAULT_DELEGATE_MAX_COPY_BYTES = 512 * 1024 * 1024
#: provider sessions at once unless configured: a fixed, modest number — a
#: Codex or Claude session is a few processes and ~150 MB (a 3 x 3 delegation
#: tree, 13 sessions, measured 41 processes and 1.9 GB), so 16 stay within a
#: laptop's memory while depth x fan-out alone would allow 584
DEFAULT_MAX_SESSIONS = 16

#: a duration in seconds, greater than zero
Seconds = Annotated[float, msgspec.Meta(gt=0)]
#: a TCP port; 0 asks for any free port
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
#: the NAME of ``[providers.NAME]``
ProviderName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
ProviderKind = Literal["scripted", "codex", "claude", "acp"]
AgentdTool = Literal["ask", "allow", "off"]
#: what a run becomes when its provider cannot interrupt and its session is stopped instead
InterruptOutcome = Literal["interrupted", "cancelled"]


class ConfigError(Exception):
    """The config file cannot be used; the message names file, line and reason."""


class ProviderTable(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A ``[providers.NAME]`` table."""

    kind: ProviderKind
    capabilities: Capabilities = msgspec.field(default_factory=Capabilities)
    idle_timeout: Seconds | None = None
    binary: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    model: str | None = None
    #: the agent's session mode (``kind = "acp"``: ``session/set_mode``), when it offers modes
    mode: str | None = None
    #: argv put before the runtime's command (e.g. a network-namespace launcher in tests)
    wrapper: list[str] = []
    #: agentd's own MCP tool (``agentd mcp``: delegate_task, task_result) in
    #: this instance's sessions (SPEC F9): ``ask`` — configured, and the
    #: runtime's permission prompt for it is an approval like any other;
    #: ``allow`` — configured and pre-approved; ``off`` — not configured
    agentd_tool: AgentdTool = "ask"


class ProviderConfig(ProviderTable, kw_only=True):
    """A provider instance: its table and the name it is configured under."""

    name: str


class DaemonSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``[daemon]`` table."""

    default_provider: str = "scripted"
    idle_timeout: Seconds = DEFAULT_IDLE_TIMEOUT
    #: seconds a provider may take to end an interrupted turn before its session is stopped
    interrupt_grace: Seconds = 10.0
    unsupported_interrupt_status: InterruptOutcome = msgspec.field(default="interrupted", name="unsupported_interrupt")
    #: also serve the protocol on this loopback WebSocket port (None: off)
    websocket_port: Port | None = None
    #: browser origins allowed to use the WebSocket (none by default)
    websocket_origins: list[str] = []
    #: serve the web console on the WebSocket's port (7311 unless websocket_port says otherwise)
    web: bool = False
    #: allow ``/`` and the home folder itself as a thread's workspace
    allow_broad_workspaces: bool = False
    #: characters a ContextHandoff's text may have; older runs are dropped first (SPEC F5)
    handoff_max_chars: Annotated[int, msgspec.Meta(ge=1000)] = 32_000
    #: a provider thread bridged by this many delta handoffs in a row gets a fresh one instead
    handoff_max_bridges: Annotated[int, msgspec.Meta(ge=0)] = 3
    #: a provider thread that missed more runs than this gets a fresh one instead of a delta
    handoff_max_runs_behind: Annotated[int, msgspec.Meta(ge=0)] = 20
    #: delegated tasks nest at most this deep (a task's task's task…) (SPEC F9)
    delegate_max_depth: Annotated[int, msgspec.Meta(ge=1, le=64)] = 3
    #: a thread has at most this many delegated tasks working at once (SPEC F9)
    delegate_max_fanout: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 8
    #: bytes a delegated task's ``workspace: fork`` copy may hold; a larger
    #: workspace is refused before (or, if it grows, while) it is copied (SPEC F9)
    delegate_max_copy_bytes: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_DELEGATE_MAX_COPY_BYTES
    #: provider sessions (agent runtime processes, each with its own helpers)
    #: the daemon runs at once; past it idle ones are stopped to make room,
    #: else a new one is refused with limit_exceeded (SPEC F19)
    max_sessions: Annotated[int, msgspec.Meta(ge=1, le=4096)] = DEFAULT_MAX_SESSIONS
    #: a thread whose actor fails this many times within ``thread_failure_period``
    #: seconds is quarantined: reads work, commands are refused until
    #: ``thread.unquarantine`` or a daemon restart
    thread_failure_limit: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 3
    thread_failure_period: Seconds = 60.0
    #: seconds a running run's provider may send nothing before the run is
    #: marked stalled (``run.stalled``; it never ends the run); 0: off
    stall_after: Annotated[float, msgspec.Meta(ge=0)] = 300.0


#: a price per million tokens (any currency: the config's own unit)
Price = Annotated[float, msgspec.Meta(ge=0)]


class ModelPrice(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A ``[pricing."MODEL"]`` table: what a million tokens of the model cost.
    Cached input is priced at ``input`` unless ``cached_input`` says otherwise;
    reasoning tokens are output tokens."""

    input: Price
    output: Price
    cached_input: Price | None = None


#: the checkpoint engine's size cap unless configured (actors/checkpoints DEFAULT_MAX_FILE_BYTES)
DEFAULT_CHECKPOINT_MAX_FILE_BYTES = 10 * 1024 * 1024


class CheckpointSettings(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``[checkpoints]`` table (SPEC F13)."""

    #: files larger than this are neither stored nor restored; a checkpoint's
    #: summary lists them (``skipped``, reason ``too_large``, with the size)
    max_file_bytes: Annotated[int, msgspec.Meta(ge=1)] = DEFAULT_CHECKPOINT_MAX_FILE_BYTES
    #: captures of a workspace after which its shadow repository is compacted
    #: (repacked, unreachable objects pruned); 0: never
    compact_after: Annotated[int, msgspec.Meta(ge=0)] = 100
    #: seconds from that capture to the compaction, so it comes when the run has ended
    compact_delay: Annotated[float, msgspec.Meta(ge=0)] = 30.0


class ConfigFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The whole file: ``[daemon]``, ``[checkpoints]``, ``[providers.NAME]`` and ``[pricing."MODEL"]`` tables, nothing else."""

    daemon: DaemonSettings = msgspec.field(default_factory=DaemonSettings)
    checkpoints: CheckpointSettings = msgspec.field(default_factory=CheckpointSettings)
    providers: dict[ProviderName, ProviderTable] = {}
    #: model name -> its price (a run's ``cost`` is known only where its models have one)
    pricing: dict[str, ModelPrice] = {}


def _builtin_providers() -> dict[str, ProviderConfig]:
    return {"scripted": ProviderConfig(name="scripted", kind="scripted")}


class DaemonConfig(DaemonSettings, kw_only=True):
    """What the daemon runs with: the ``[daemon]`` settings, every provider
    instance by name (``scripted`` always) and the file they came from."""

    path: Path | None = None
    providers: dict[str, ProviderConfig] = msgspec.field(default_factory=_builtin_providers)
    checkpoints: CheckpointSettings = msgspec.field(default_factory=CheckpointSettings)
    pricing: dict[str, ModelPrice] = {}


def load_config(path: Path | None, *, optional: bool = False) -> DaemonConfig:
    """Read the config at ``path``; None means built-ins only.

    ``optional``: ``path`` is the default location, which may be absent
    (built-ins only); any other path must exist.

    Raises:
        ConfigError: the file is missing (and not optional), unreadable or not valid.
    """
    if path is None:
        return DaemonConfig()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if optional:
            return DaemonConfig(path=path)
        raise ConfigError(f"{path}: no such config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc}") from None

    def fail(keys: list[str | int], reason: str) -> ConfigError:
        return ConfigError(f"{path}:{_line_of(text, keys)}: {reason}")

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"line (\d+)", str(exc))
        raise ConfigError(f"{path}:{int(match.group(1)) if match else 1}: not valid TOML: {exc}") from None
    try:
        file = msgspec.convert(data, ConfigFile)
    except msgspec.ValidationError as exc:
        keys, reason = _explain(data, exc)
        raise fail(keys, reason) from None

    providers = _builtin_providers()
    for name, table in file.providers.items():
        providers[name] = ProviderConfig(name=name, **msgspec.structs.asdict(table))
    config = DaemonConfig(path=path, providers=providers, checkpoints=file.checkpoints, pricing=file.pricing,
                          **msgspec.structs.asdict(file.daemon))
    if config.default_provider not in providers:
        raise fail(["daemon", "default_provider"],
                   f"[daemon] default_provider {config.default_provider!r} is not a configured provider "
                   f"(configured: {', '.join(sorted(providers))})")
    return config


# -- where a validation error is, and what to say about it ------------------------------

_PATH_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")
_ERROR = re.compile(r"^(?P<reason>.*?)(?: - at `(?P<key>key` in `)?(?P<path>\$[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>.*)`$", re.S)
_MISSING = re.compile(r"^Object missing required field `(?P<field>.*)`$", re.S)
#: msgspec speaks JSON; the file is TOML (where nothing is null)
_TOML_WORDS = (("`object`", "`table`"), (" | null`", "`"))


def _explain(data: dict[str, Any], exc: msgspec.ValidationError) -> tuple[list[str | int], str]:
    """The keys of the offending value in ``data`` and a reason for a person.

    msgspec names a dict entry ``[...]`` and a bad dict key ``key` in `PATH``;
    such an entry is found by decoding the file with that dict cut down to one
    entry at a time: the one that fails with the same error is it."""
    match = _ERROR.match(str(exc))
    if match is None:
        return [], str(exc)
    reason, path, bad_key = match["reason"], match["path"] or "$", bool(match["key"])
    keys: list[str | int] = []
    for name, index in _PATH_STEP.findall(path[1:]):
        if name:
            keys.append(name)
        elif index == "...":
            if (narrowed := _narrow(data, keys, str(exc))) is None:
                break  # not expected: the error names the dict itself
            data = narrowed
        else:
            keys.append(int(index))
    else:
        if bad_key and _narrow(data, keys, str(exc)) is not None:
            return keys, f"[{_dotted(keys[:-1])}] name {keys[-1]!r}: {reason}"
    if unknown := _UNKNOWN.match(reason):
        known = _known_keys(keys)
        keys.append(unknown["field"])
        where = f"[{_dotted(keys[:-1])}]" if len(keys) > 1 else "the file"
        return keys, f"unknown key {unknown['field']!r} in {where}" + (f" (expected one of {', '.join(known)})" if known else "")
    if missing := _MISSING.match(reason):
        return keys, f"[{_dotted(keys)}] needs {missing['field']!r}"
    value = _value_at(data, keys)
    if isinstance(info := _type_at(keys), msgspec.inspect.LiteralType):
        reason = f"expected one of {', '.join(map(repr, info.values))}, got {value!r}"
    elif ", got " not in reason:
        reason += f", got {value!r}"
    for msgspec_word, toml_word in _TOML_WORDS:
        reason = reason.replace(msgspec_word, toml_word)
    return keys, f"{_where(keys)}: {reason}"


def _narrow(data: dict[str, Any], keys: list[str | int], error: str) -> dict[str, Any] | None:
    """Find the entry of the dict at ``keys`` that fails with ``error``;
    append its key to ``keys`` and return ``data`` with that dict cut down to it.
    (msgspec reports the first error in the file's order, so an entry that
    fails alone with the same error is the one it meant.)"""
    for key in _value_at(data, keys):
        narrowed = _only(data, keys, key)
        try:
            msgspec.convert(narrowed, ConfigFile)
        except msgspec.ValidationError as exc:
            if str(exc) == error:
                keys.append(key)
                return narrowed  # type: ignore[no-any-return]
    return None


def _only(data: Any, keys: list[str | int], key: str) -> Any:
    """``data`` with the dict at ``keys`` cut down to its entry ``key``."""
    if not keys:
        return {key: data[key]}
    copy: Any = dict(data) if isinstance(data, dict) else list(data)
    copy[keys[0]] = _only(data[keys[0]], keys[1:], key)
    return copy


def _value_at(data: Any, keys: list[str | int]) -> Any:
    for key in keys:
        data = data[key]
    return data


def _type_at(keys: list[str | int]) -> Any:
    """The declared type (``msgspec.inspect``) of the value at ``keys``, or None."""
    info: Any = msgspec.inspect.type_info(ConfigFile)
    for key in keys:
        while isinstance(info, msgspec.inspect.UnionType):  # ``X | None``
            info = next(t for t in info.types if not isinstance(t, msgspec.inspect.NoneType))
        if isinstance(info, msgspec.inspect.StructType):
            info = next((f.type for f in info.fields if f.encode_name == key), None)
        elif isinstance(info, msgspec.inspect.DictType):
            info = info.value_type
        elif isinstance(info, msgspec.inspect.ListType):
            info = info.item_type
        else:
            return None
    return info


def _known_keys(keys: list[str | int]) -> list[str]:
    """The keys the table at ``keys`` may hold, from the declarations."""
    info = _type_at(keys)
    return sorted(f.encode_name for f in info.fields) if isinstance(info, msgspec.inspect.StructType) else []


def _dotted(keys: list[str | int]) -> str:
    return "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in keys).lstrip(".")


def _where(keys: list[str | int]) -> str:
    """How a person would name the value at ``keys``: ``[providers.basic] args[1]``."""
    last = max((i for i, k in enumerate(keys) if isinstance(k, str)), default=0)
    table, rest = keys[:last], keys[last:]
    return f"[{_dotted(table)}] {_dotted(rest)}" if table else _dotted(rest)


# -- the line a key is on ------------------------------------------------------------------

_KEY = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_KEY_PATH = rf"{_KEY}(?:\s*\.\s*{_KEY})*"
_HEADER_LINE = re.compile(rf"^\s*\[\[?\s*(?P<keys>{_KEY_PATH})\s*\]\]?\s*(?:#.*)?$")
_KEY_LINE = re.compile(rf"^\s*(?P<keys>{_KEY_PATH})\s*=")


def _split_keys(dotted: str) -> list[str]:
    keys = []
    for part in re.findall(_KEY, dotted):
        if part.startswith('"'):
            try:
                part = msgspec.json.decode(part)
            except msgspec.DecodeError:  # a TOML escape JSON lacks (\e, \U…)
                part = part[1:-1]
        elif part.startswith("'"):
            part = part[1:-1]
        keys.append(part)
    return keys


def _line_of(text: str, keys: list[str | int]) -> int:
    """The 1-based line that best names ``keys`` (a path of table keys; array
    indices are ignored): the line defining exactly that key within its own
    table, else the closest enclosing table or key, else 1."""
    target = [k for k in keys if isinstance(k, str)]
    best, best_score = 1, -1.0
    table: list[str] = []
    in_string: str | None = None  # inside a multi-line string that started with this delimiter
    for number, line in enumerate(text.splitlines(), 1):
        if in_string is not None:
            if line.count(in_string) % 2:
                in_string = None
            continue
        if header := _HEADER_LINE.match(line):
            table = _split_keys(header["keys"])
            here = table
        elif key := _KEY_LINE.match(line):
            here = table + _split_keys(key["keys"])
        else:
            here = None
        if here is not None:
            if target[: len(here)] == here:
                score = float(len(here))  # the key itself, or a table/key around it
            elif here[: len(target)] == target:
                score = len(target) - 0.5  # inside it (e.g. a sub-table of a table not declared itself)
            else:
                score = -1.0
            if score > best_score:
                best, best_score = number, score
        for delimiter in ('"""', "'''"):
            if line.count(delimiter) % 2:
                in_string = delimiter
                break
    return best

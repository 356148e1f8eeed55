"""``config.toml`` decoded into msgspec Structs: what is accepted, and where an
error is reported (file, the line of the offending key in its own table, reason)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.actors.config import ConfigError, DaemonConfig, ProviderConfig, load_config
from agentd.actors.providers.base import Capabilities


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:"), message
    return message.removeprefix(f"{path}:")


def test_pricing_and_stall_after_decode_and_default(tmp_path):
    """Issue 28: prices per million tokens by model; stall_after 300 s unless set (0: off)."""
    config = load_config(write(tmp_path, '[daemon]\nstall_after = 0\n[pricing."gpt-x"]\ninput = 1.25\noutput = 10\n'))
    assert config.stall_after == 0
    assert config.pricing["gpt-x"].input == 1.25 and config.pricing["gpt-x"].cached_input is None
    assert DaemonConfig().stall_after == 300 and DaemonConfig().pricing == {}


def test_a_full_file_decodes_and_scripted_always_exists(tmp_path):
    config = load_config(write(tmp_path, """\
[daemon]
default_provider = "basic"
idle_timeout = 30
interrupt_grace = 2.5
unsupported_interrupt = "cancelled"
websocket_port = 0
websocket_origins = ["http://localhost:3000"]

[providers.basic]
kind = "scripted"
capabilities = { steer = false, nativeFork = false }
idle_timeout = 60

[providers.my-codex]
kind = "codex"
binary = "/opt/codex"
args = ["-c", "x=1"]
env = { CODEX_HOME = "/tmp/h" }
model = "m"
wrapper = ["nice"]
"""))
    assert config.default_provider == "basic"
    assert config.idle_timeout == 30.0 and config.interrupt_grace == 2.5
    assert config.unsupported_interrupt_status == "cancelled"
    assert config.websocket_port == 0 and config.websocket_origins == ["http://localhost:3000"]
    assert sorted(config.providers) == ["basic", "my-codex", "scripted"]
    assert config.providers["scripted"] == ProviderConfig(name="scripted", kind="scripted")
    basic = config.providers["basic"]
    assert basic.name == "basic" and basic.idle_timeout == 60.0
    assert basic.capabilities == Capabilities(steer=False, native_fork=False)
    codex = config.providers["my-codex"]
    assert (codex.kind, codex.binary, codex.args, codex.env, codex.model, codex.wrapper) == (
        "codex", "/opt/codex", ["-c", "x=1"], {"CODEX_HOME": "/tmp/h"}, "m", ["nice"])


def test_the_checkpoints_table_sets_the_size_cap_and_compaction(tmp_path):
    """SPEC F13: the per-file size cap and when shadow repositories are compacted."""
    config = load_config(write(tmp_path, "[checkpoints]\nmax_file_bytes = 4096\ncompact_after = 0\ncompact_delay = 1.5\n"))
    assert (config.checkpoints.max_file_bytes, config.checkpoints.compact_after, config.checkpoints.compact_delay) == (
        4096, 0, 1.5)
    defaults = load_config(None).checkpoints
    assert (defaults.max_file_bytes, defaults.compact_after) == (10 * 1024 * 1024, 100)


def test_defaults_without_a_file():
    for config in (load_config(None), DaemonConfig()):
        assert list(config.providers) == ["scripted"] and config.default_provider == "scripted"
        assert config.idle_timeout == 600.0 and config.interrupt_grace == 10.0
        assert config.unsupported_interrupt_status == "interrupted" and config.websocket_port is None


def test_the_error_names_the_key_in_its_own_table_not_its_first_occurrence(tmp_path):
    """[daemon] idle_timeout on line 2 is fine; [providers.basic] idle_timeout on line 6 is not."""
    message = error_of(tmp_path, """\
[daemon]
idle_timeout = 30

[providers.basic]
kind = "scripted"
idle_timeout = -5
""")
    assert message.startswith("6: [providers.basic] idle_timeout:"), message
    assert "-5" in message


def test_the_error_names_the_provider_that_is_wrong(tmp_path):
    """msgspec calls a dict entry ``[...]``; the error still names the table and its line."""
    message = error_of(tmp_path, '[providers.a]\nkind = "scripted"\n\n[providers.b]\nkind = "gpt"\n')
    assert message.startswith("5: [providers.b] kind:") and "'gpt'" in message and "'codex'" in message, message
    message = error_of(tmp_path, '[providers.a]\nkind = "scripted"\nenv = { A = "1" }\n[providers.b]\nkind = "codex"\nenv = { B = 2 }\n')
    assert message.startswith("6: [providers.b.env] B:"), message
    message = error_of(tmp_path, '[providers]\na = { kind = "scripted" }\nb = { kind = "scripted", args = ["x", 1] }\n')
    assert message.startswith("3: [providers.b] args[1]:"), message


@pytest.mark.parametrize(("text", "line", "words"), [
    ('[daemon]\nidle_timeout = 0\n', 2, ["[daemon] idle_timeout", "> 0"]),
    ('[daemon]\ninterrupt_grace = true\n', 2, ["[daemon] interrupt_grace", "bool"]),
    ('[daemon]\nwebsocket_port = 65536\n', 2, ["[daemon] websocket_port", "<= 65535"]),
    ('[daemon]\nwebsocket_port = -1\n', 2, ["[daemon] websocket_port", ">= 0"]),
    ('[daemon]\nwebsocket_origins = "http://x"\n', 2, ["[daemon] websocket_origins", "array"]),
    ('[daemon]\nunsupported_interrupt = "gone"\n', 2, ["'interrupted'", "'cancelled'", "'gone'"]),
    ('\n[daemon]\ndefault_provider = "nope"\n', 3, ["'nope' is not a configured provider"]),
    ('[daemon]\nidle_timout = 5\n', 2, ["unknown key 'idle_timout' in [daemon]", "idle_timeout"]),
    ('[daemn]\n', 1, ["unknown key 'daemn'", "daemon, pricing, providers"]),
    ('[providers."bad name"]\nkind = "scripted"\n', 1, ["'bad name'"]),
    ('[daemon]\nstall_after = -1\n', 2, ["[daemon] stall_after", ">= 0"]),
    ('[pricing."m"]\ninput = 1\noutput = -2\n', 3, ["[pricing.m] output", ">= 0"]),
    ('[pricing."m"]\ninput = 1\n', 1, ["[pricing.m] needs 'output'"]),
    ('[providers.basic]\nidle_timeout = 5\n', 1, ["[providers.basic] needs 'kind'"]),
    ('[providers.basic]\nkind = "scripted"\nmodle = "x"\n', 3, ["unknown key 'modle' in [providers.basic]", "model"]),
    ('[providers.basic]\nkind = "scripted"\ncapabilities = { steer = "no" }\n', 3, ["steer", "bool"]),
    ('[providers.basic]\nkind = "scripted"\ncapabilities = { emptyThread = false }\n', 3, ["'emptyThread'", "emptyThreads"]),
    ('[providers.basic]\nkind = "scripted"\nbinary = 3\n', 3, ["[providers.basic] binary", "str"]),
    ('[providers.basic]\nkind = "scripted"\nwrapper = "nice"\n', 3, ["[providers.basic] wrapper", "array"]),
    ('[providers.basic]\nkind = "scripted"\nmodel = """\nidle_timeout = 1\n"""\nidle_timeout = "soon"\n', 6, ["idle_timeout", "str"]),
    ('[daemon\n', 1, ["not valid TOML"]),
    ('[checkpoints]\nmax_file_bytes = 0\n', 2, ["[checkpoints] max_file_bytes", ">= 1"]),
    ('[checkpoints]\nmax_file_bytes = "10M"\n', 2, ["[checkpoints] max_file_bytes", "int"]),
    ('[checkpoints]\ncompact_after = -1\n', 2, ["[checkpoints] compact_after", ">= 0"]),
    ('[checkpoints]\nmax_size = 5\n', 2, ["unknown key 'max_size' in [checkpoints]", "max_file_bytes"]),
    ('[daemon]\ndelegate_max_copy_bytes = 0\n', 2, ["[daemon] delegate_max_copy_bytes", ">= 1"]),
    ('[daemon]\nmax_sessions = 0\n', 2, ["[daemon] max_sessions", ">= 1"]),
    ('[daemon]\nmax_sessions = 1.5\n', 2, ["[daemon] max_sessions", "int"]),
    ('[daemon]\ndelegate_max_copy_bytes = "1G"\n', 2, ["[daemon] delegate_max_copy_bytes", "int"]),
])
def test_a_bad_value_is_refused_with_its_line_and_reason(tmp_path, text, line, words):
    message = error_of(tmp_path, text)
    assert message.startswith(f"{line}: "), message
    for word in words:
        assert word in message, (word, message)


def test_the_delegation_copy_limit(tmp_path):
    """Hostile-round issue item 8, SPEC F9: ``[daemon] delegate_max_copy_bytes``
    bounds a ``workspace: fork`` copy; 512 MiB unless configured."""
    assert load_config(write(tmp_path, "[daemon]\ndelegate_max_copy_bytes = 4096\n")).delegate_max_copy_bytes == 4096
    assert load_config(None).delegate_max_copy_bytes == 512 * 1024 * 1024


def test_the_bound_on_provider_sessions(tmp_path):
    """Hostile-round issue item 9, SPEC F19: ``[daemon] max_sessions`` bounds
    the provider sessions of the whole daemon; 16 unless configured."""
    assert load_config(write(tmp_path, "[daemon]\nmax_sessions = 3\n")).max_sessions == 3
    assert load_config(None).max_sessions == 16


def test_a_missing_file_is_an_error_unless_it_is_the_optional_default(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=f"^{missing}: no such config file"):
        load_config(missing)
    config = load_config(missing, optional=True)
    assert list(config.providers) == ["scripted"]

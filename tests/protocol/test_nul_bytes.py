"""A NUL byte where a text becomes a path, a process's argument or its
environment is the caller's error (``invalid_params`` naming the field), not
an ``internal`` error with a traceback in the daemon's log: no file name and
no exec can hold one (``os`` raised ValueError deep in the handler)."""

from __future__ import annotations

import pytest

from agentd.protocol.errors import InvalidParams


@pytest.fixture
def daemon(module_daemon):
    """The module's daemon (issue 28 item 13): each case refuses a request of its own
    (on a thread of its own)."""
    return module_daemon


@pytest.mark.parametrize(("method", "params", "field"), [
    ("thread.create", {"workspace": "/tmp/a\x00b"}, "workspace"),
    ("thread.update", {"mcpServers": [{"type": "stdio", "name": "x", "command": "/bin/\x00sh"}]}, "mcpServers[0].command"),
    ("thread.update", {"mcpServers": [{"type": "stdio", "name": "x", "command": "sh", "args": ["a\x00"]}]}, "mcpServers[0].args[0]"),
    ("thread.update", {"mcpServers": [{"type": "stdio", "name": "x", "command": "sh", "env": {"A": "\x00"}}]}, "mcpServers[0].env[...]"),
])
async def test_a_nul_byte_in_a_path_or_a_command_is_invalid_params(client, method, params, field):
    if method == "thread.update":
        params = {"threadId": (await client.call("thread.create"))["threadId"], **params}
    with pytest.raises(InvalidParams) as refused:
        await client.call(method, **params)
    assert "without a NUL byte" in refused.value.message
    assert refused.value.data["field"] == field
    assert (await client.call("daemon.status"))["pid"]

"""The credential of agentd's tool channel: one secret per provider session.

The daemon serves agentd's MCP tools itself (``supervisor/mcp_tools.py``),
and every command an agent runs can reach it. The tools must know which
session asks and that it really is that session: a session id is no proof
(it is in ``daemon.status``, in events, in the environment of the agent's
commands). So the daemon makes a random secret for each session it starts;
the session's bearer token for the MCP endpoint is ``<sessionId>.<secret>``
(``token``). The secret is written to a file of its own (0600, in a 0700
folder of the data dir), and — once the endpoint listens — beside it an MCP
client configuration with the URL and the token (``<sessionId>.mcp.json``,
the ``mcpServers`` form Claude Code reads with ``--mcp-config``). A runtime
is told only a path, or the token in its environment — never the secret in
an argv, which every user of the machine can read in ``/proc``. The daemon
keeps the secrets in memory and forgets them, and removes the files, when
the session ends; the folder is emptied at start (what a killed daemon left
is void).

It is no secret from the person's other processes (same uid): the daemon
also checks that a peer presenting it is a process of that session's own
runtime (``supervisor/tasks.py``), so an agent cannot use another session's.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import shutil
from pathlib import Path

from ..regular_files import write_new

# trio is imported where the daemon's methods use it, not here: the scripted agent imports
# this module for ``read_credential`` and starts without trio (see cooperative.py).

#: the environment variable that names the credential file (the scripted agent's)
CREDENTIAL_ENV = "AGENTD_TOOL_CREDENTIAL"
#: the MCP server's name in the runtimes (Claude names its tools ``mcp__agentd__…``)
SERVER_NAME = "agentd"
#: the suffix of a session's MCP client configuration file
CLIENT_CONFIG = ".mcp.json"


class ToolCredentials:
    """The live sessions' tool credentials.

    Args:
        directory: where their files go (emptied and made 0700 by ``reset``).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._secrets: dict[str, str] = {}
        #: agentd's MCP endpoint, once it listens (then ``issue`` writes a client configuration too)
        self.mcp_url: str | None = None
        #: the same endpoint's Unix socket (None: not served on one)
        self.mcp_socket: str | None = None

    def reset(self) -> None:
        """At daemon start: an empty, private folder (no credential of an
        earlier daemon survives it)."""
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory.mkdir(parents=True, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)
        self._secrets.clear()

    def path(self, session_id: str) -> Path:
        """The credential file of ``session_id`` (its name is no secret)."""
        return self.directory / session_id

    def client_config(self, session_id: str) -> Path:
        """The session's MCP client configuration file (written by ``issue``
        when the endpoint listens)."""
        return self.directory / f"{session_id}{CLIENT_CONFIG}"

    def token(self, session_id: str) -> str | None:
        """The session's bearer token for agentd's MCP endpoint (None: no live credential)."""
        secret = self._secrets.get(session_id)
        return f"{session_id}.{secret}" if secret is not None else None

    async def issue(self, session_id: str) -> None:
        """Make the session's credential, before its runtime starts."""
        secret = secrets.token_urlsafe(32)
        files = {self.path(session_id): secret.encode()}
        if self.mcp_url is not None:
            server = {"type": "http", "url": self.mcp_url, "headers": {"Authorization": f"Bearer {session_id}.{secret}"}}
            files[self.client_config(session_id)] = json.dumps({"mcpServers": {SERVER_NAME: server}}).encode()

        def write() -> None:
            for path, data in files.items():
                write_new(path, data)

        import trio

        await trio.to_thread.run_sync(write)
        self._secrets[session_id] = secret

    async def revoke(self, session_id: str) -> None:
        """Forget the session's credential (its session ended)."""
        if self._secrets.pop(session_id, None) is None:
            return

        def remove() -> None:
            self.path(session_id).unlink(missing_ok=True)
            self.client_config(session_id).unlink(missing_ok=True)

        import trio

        await trio.to_thread.run_sync(remove)

    def check(self, session_id: str, credential: str | None) -> bool:
        """Whether ``credential`` is the live credential of ``session_id``."""
        secret = self._secrets.get(session_id)
        return secret is not None and credential is not None and hmac.compare_digest(secret, credential)


def read_credential() -> str | None:
    """In an agent (the scripted one): the credential its environment names, if any."""
    path = os.environ.get(CREDENTIAL_ENV)
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None

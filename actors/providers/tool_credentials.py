"""The credential of agentd's tool channel: one secret per provider session.

``agentd mcp`` (the tool an agent delegates with) is a client of the
daemon's socket, and so is every command the agent runs. The tool methods
(``task.delegate``, ``task.result``) must know which session asks and that
it is really that session's ``agentd mcp``: a session id is no proof (it is
in ``daemon.status``, in events, in the environment of the agent's
commands). So the daemon makes a random secret for each session it starts
and writes it to a file of its own (0600, in a 0700 folder of the data dir);
the runtime is told only the file's path, in the environment it gives
``agentd mcp`` (``AGENTD_TOOL_CREDENTIAL``) — never the secret in an argv,
which every user of the machine can read in ``/proc``. The daemon keeps the
secrets in memory and forgets them, and removes the file, when the session
ends; the folder is emptied at start (what a killed daemon left is void).

It is no secret from the person's other processes (same uid): the daemon
also checks that a peer presenting it is a process of that session's own
runtime (``supervisor/tasks.py``), so an agent cannot use another session's.
"""

from __future__ import annotations

import hmac
import os
import secrets
import shutil
from pathlib import Path

import trio

#: the environment variable that names the credential file for ``agentd mcp``
CREDENTIAL_ENV = "AGENTD_TOOL_CREDENTIAL"


class ToolCredentials:
    """The live sessions' tool credentials.

    Args:
        directory: where their files go (emptied and made 0700 by ``reset``).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._secrets: dict[str, str] = {}

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

    async def issue(self, session_id: str) -> None:
        """Make the session's credential, before its runtime starts."""
        secret = secrets.token_urlsafe(32)
        path = self.path(session_id)

        def write() -> None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, secret.encode())
            finally:
                os.close(fd)

        await trio.to_thread.run_sync(write)
        self._secrets[session_id] = secret

    async def revoke(self, session_id: str) -> None:
        """Forget the session's credential (its session ended)."""
        if self._secrets.pop(session_id, None) is None:
            return
        await trio.to_thread.run_sync(lambda: self.path(session_id).unlink(missing_ok=True))

    def check(self, session_id: str, credential: str | None) -> bool:
        """Whether ``credential`` is the live credential of ``session_id``."""
        secret = self._secrets.get(session_id)
        return secret is not None and credential is not None and hmac.compare_digest(secret, credential)


def read_credential() -> str | None:
    """In ``agentd mcp``: the credential its environment names, if any."""
    path = os.environ.get(CREDENTIAL_ENV)
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="ascii").strip() or None
    except (OSError, UnicodeDecodeError):
        return None

"""Tokens of agentd's MCP endpoint for a thread rather than a session
(SPEC F9): what ``mcp.endpoint`` gives ``agentd mcp --thread``, the person's
relay for an MCP client agentd did not start. A grant lives in memory only,
as long as the connection that asked for it (``supervisor/mcp_tools.py``).
"""

from __future__ import annotations

import hmac
import secrets


class ThreadGrants:
    """The live thread grants: ``mcg_<hex>.<secret>`` tokens."""

    def __init__(self) -> None:
        #: grant id -> (secret, thread id)
        self._grants: dict[str, tuple[str, str]] = {}

    def grant(self, thread_id: str) -> tuple[str, str]:
        """A new token for ``thread_id``: (grant id, token)."""
        grant_id, secret = f"mcg_{secrets.token_hex(16)}", secrets.token_urlsafe(32)
        self._grants[grant_id] = (secret, thread_id)
        return grant_id, f"{grant_id}.{secret}"

    def thread_of(self, grant_id: str, secret: str) -> str | None:
        """The thread of a live grant whose secret is ``secret``, else None."""
        grant = self._grants.get(grant_id)
        return grant[1] if grant is not None and hmac.compare_digest(grant[0], secret) else None

    def revoke(self, grant_id: str) -> None:
        self._grants.pop(grant_id, None)

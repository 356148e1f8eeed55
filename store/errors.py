"""Errors raised by the store."""

from agentd.protocol.errors import InternalError


class StoreError(InternalError):
    """A write could not be made durable; none of its batch was written."""

"""agentd's error types. Each maps to one protocol error kind (``data.kind``).

Raise the most specific one with a sentence a person can act on; the server
turns it into a JSON-RPC error once, at the boundary.
"""

from __future__ import annotations

from typing import Any

# JSON-RPC 2.0 codes
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# agentd's application codes (JSON-RPC reserves -32000..-32099 for servers)
APPLICATION_ERROR = -32000


class AgentdError(Exception):
    """Base of every error a client can be told about."""

    kind = "internal"
    code = APPLICATION_ERROR

    def __init__(self, message: str, **data: Any) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    def to_error(self) -> dict[str, Any]:
        """The JSON-RPC ``error`` object."""
        return {"code": self.code, "message": self.message, "data": {"kind": self.kind, **self.data}}


class ParseError(AgentdError):
    """The request line is not JSON, or is too long."""

    kind = "parse_error"
    code = PARSE_ERROR


class InvalidRequest(AgentdError):
    """The JSON is not a JSON-RPC 2.0 request."""

    kind = "invalid_request"
    code = INVALID_REQUEST


class MethodNotFound(AgentdError):
    kind = "method_not_found"
    code = METHOD_NOT_FOUND


class InvalidParams(AgentdError):
    """A parameter is missing, of the wrong type or out of range (``data.field``)."""

    kind = "invalid_params"
    code = INVALID_PARAMS


class NotFound(AgentdError):
    """The thread, run, node or request named does not exist."""

    kind = "not_found"


class InvalidState(AgentdError):
    """The target exists but is not in a state that allows the command."""

    kind = "invalid_state"


class Unsupported(AgentdError):
    """The provider or this agentd cannot do what was asked."""

    kind = "unsupported"


class NotResumable(AgentdError):
    """A live callback or process the command needs is gone."""

    kind = "not_resumable"


class Conflict(AgentdError):
    """The command conflicts with another (e.g. a commandId reused for another method)."""

    kind = "conflict"


class Overloaded(AgentdError):
    """A bounded queue is full; retry later."""

    kind = "overloaded"


class LimitExceeded(AgentdError):
    """A configured limit refuses the request (a delegated task's depth or fan-out)."""

    kind = "limit_exceeded"


class InternalError(AgentdError):
    """agentd failed; nothing half-written was kept."""

    kind = "internal"
    code = INTERNAL_ERROR


class RestoreIncomplete(AgentdError):
    """A checkpoint's files were put back only in part (``data`` names the
    files restored, those not restored and the safety checkpoint that undoes it)."""

    kind = "restore_incomplete"


class CorruptRecord(AgentdError):
    """A stored record cannot be decoded: it is torn or not agentd's
    (``data``: ``recordKind``, ``recordId``, ``reason``). Nothing was changed;
    ``agentd doctor`` lists every such record."""

    kind = "corrupt_record"

    @classmethod
    def of(cls, record_kind: str, record_id: str, reason: str) -> CorruptRecord:
        """The error for record ``record_id`` of ``record_kind`` (a sub-database's name)."""
        return cls(
            f"the stored {record_kind} record {record_id} is corrupt ({reason}); agentd left it as it is "
            "(agentd doctor lists every corrupt record)",
            recordKind=record_kind, recordId=record_id, reason=reason,
        )

    @property
    def record_kind(self) -> str:
        return str(self.data.get("recordKind", ""))

    @property
    def record_id(self) -> str:
        return str(self.data.get("recordId", ""))

    @property
    def reason(self) -> str:
        return str(self.data.get("reason", ""))


class SchemaTooNew(AgentdError):
    """A stored record was written by a newer agentd (its schema version is
    above what this one reads, and it does not decode as this version)."""

    kind = "schema_too_new"


class ThreadFailed(AgentdError):
    """The thread's actor failed on an unexpected error and was ended; only
    this thread is affected (``data``: ``threadId``, ``reason``,
    ``incidentId`` — the daemon log has its traceback under that id —, and
    ``quarantined`` with ``firstIncidentId`` once it failed too often)."""

    kind = "thread_failed"


class Forbidden(AgentdError):
    """The caller may not do this: a control method asked by an agent's own
    process (or a descendant of it), or a tool method without its session's
    credential."""

    kind = "forbidden"


ERROR_KINDS = {
    cls.kind: cls
    for cls in (
        ParseError,
        InvalidRequest,
        MethodNotFound,
        InvalidParams,
        NotFound,
        InvalidState,
        Unsupported,
        NotResumable,
        Conflict,
        Overloaded,
        RestoreIncomplete,
        LimitExceeded,
        CorruptRecord,
        SchemaTooNew,
        ThreadFailed,
        Forbidden,
        InternalError,
    )
}


def error_from_wire(error: dict[str, Any]) -> AgentdError:
    """Rebuild an AgentdError from a JSON-RPC error object (client side)."""
    data = dict(error.get("data") or {})
    cls = ERROR_KINDS.get(data.pop("kind", ""), AgentdError)
    exc = cls(error.get("message", "unknown error"), **data)
    exc.code = error.get("code", exc.code)
    return exc

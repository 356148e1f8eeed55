"""JSON-RPC 2.0 over an ACP agent's stdio, strictly.

ACP frames one JSON-RPC 2.0 message a line (``"jsonrpc": "2.0"`` in each).
Unlike :class:`jsonl.JsonLinesPeer` — whose runtimes are agentd's own
choice and whose odd lines are logged and skipped — an ACP agent is any
program a person configures, so what breaks the protocol ends the session
with the reason (``on_violation``): a line that is not a JSON-RPC message,
or an answer to a request agentd never sent (or already had answered). A
session that carried on after either could not be trusted to mean what it
says next.

Requests we send wait in a :class:`jsonl.RequestCorrelator`; the agent's
requests and notifications go to the callbacks in the order they came (a
request is answered later with :meth:`AcpPeer.respond`).
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

import msgspec
import trio

from .base import ProviderRuntimeError
from .jsonl import RequestCorrelator, runtime_lines

log = logging.getLogger(__name__)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()

#: JSON-RPC error codes agentd answers with
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
#: ACP: the agent wants an authentication first
AUTH_REQUIRED = -32000
#: ACP: the resource (a session, a file) is not there
RESOURCE_NOT_FOUND = -32002


class AcpError(ProviderRuntimeError):
    """The agent answered a request with a JSON-RPC error."""

    def __init__(self, method: str, error: dict[str, Any]) -> None:
        message = str(error.get("message") or "unknown error")
        data = error.get("data")
        if data:
            message += f" ({data if isinstance(data, str) else _encoder.encode(data).decode()[:500]})"
        super().__init__(f"{method} failed: {message}", code=error.get("code") if isinstance(error.get("code"), int) else None)


class AcpPeer:
    """One ACP agent's stdio.

    Args:
        send: the agent's stdin.
        receive: the agent's stdout.
        on_request: awaited for each request ``(id, method, params)``.
        on_notification: awaited for each notification ``(method, params)``.
        on_violation: called once, with the reason, when the agent breaks
            the protocol; reading stops then.
        request_timeout: default bound on every request's wait.
    """

    def __init__(
        self,
        send: trio.abc.SendStream,
        receive: trio.abc.ReceiveStream,
        *,
        on_request: Callable[[Any, str, dict[str, Any]], Awaitable[None]],
        on_notification: Callable[[str, dict[str, Any]], Awaitable[None]],
        on_violation: Callable[[str], Awaitable[None]],
        request_timeout: float | None = 30.0,
    ) -> None:
        self._send = send
        self._receive = receive
        self._on_request = on_request
        self._on_notification = on_notification
        self._on_violation = on_violation
        self._pending = RequestCorrelator(timeout=request_timeout, timeout_text="the agent did not answer {what} within {limit:g}s")
        self._lock = trio.Lock()
        #: why nothing more can be sent or read (None while the agent is there)
        self.closed: str | None = None
        #: ids of the requests sent (a late answer to one given up on is not a violation)
        self._sent: set[Any] = set()

    async def _write(self, message: dict[str, Any]) -> None:
        data = _encoder.encode({"jsonrpc": "2.0", **message}) + b"\n"
        async with self._lock:
            try:
                await self._send.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise ProviderRuntimeError(f"the agent's input is closed ({exc.__class__.__name__})") from exc

    async def request(self, method: str, params: dict[str, Any], *, timeout: float | None = None, unbounded: bool = False) -> Any:
        """Send a request and wait for its result (``unbounded``: no time
        limit, for ``session/prompt``, which lasts as long as the turn).

        Raises:
            AcpError: the agent answered with an error.
            RequestTimeout: no answer within the bound.
            ProviderRuntimeError: the agent is gone.
        """
        if self.closed:
            raise ProviderRuntimeError(f"cannot send {method}: {self.closed}")

        async def send(request_id: int) -> None:
            self._sent.add(request_id)
            await self._write({"id": request_id, "method": method, "params": params})

        reply = await self._pending.call(method, send, timeout=float("inf") if unbounded else timeout)
        if reply.get("error") is not None:
            raise AcpError(method, reply["error"] if isinstance(reply["error"], dict) else {"message": str(reply["error"])})
        return reply.get("result")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self._write({"method": method, "params": params})

    async def respond(self, request_id: Any, result: Any) -> None:
        """Answer a request the agent made."""
        await self._write({"id": request_id, "result": result})

    async def respond_error(self, request_id: Any, code: int, message: str) -> None:
        await self._write({"id": request_id, "error": {"code": code, "message": message}})

    async def run(self) -> None:
        """Read until the agent's output ends or it breaks the protocol; then
        fail every request still waiting."""
        try:
            async for line in runtime_lines(self._receive, "the ACP agent"):
                why = await self._dispatch(line)
                if why is not None:
                    self.closed = why
                    self._pending.fail_all(why)
                    await self._on_violation(why)
                    return
        finally:
            self.closed = self.closed or "the agent's output ended"
            self._pending.fail_all("the agent exited before answering")

    async def _dispatch(self, line: bytes) -> str | None:
        """Hand one line on; the reason it breaks the protocol, if it does."""
        try:
            message = _decoder.decode(line)
        except msgspec.DecodeError:
            return f"the agent wrote a line that is not JSON: {line[:200]!r}"
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return f"the agent wrote a line that is not a JSON-RPC 2.0 message: {line[:200]!r}"
        method = message.get("method")
        if isinstance(method, str):
            params = message.get("params")
            params = params if isinstance(params, dict) else {}
            if "id" in message:
                await self._on_request(message["id"], method, params)
            else:
                await self._on_notification(method, params)
            return None
        if "result" not in message and "error" not in message:
            return f"the agent wrote a message that is neither a request nor an answer: {line[:200]!r}"
        request_id = message.get("id")
        if self._pending.resolve(request_id, message):
            self._sent.discard(request_id)
        elif request_id in self._sent:
            self._sent.discard(request_id)
            log.info("the ACP agent answered request %r after agentd gave up on it", request_id)
        else:
            return f"the agent answered a request agentd never sent (id {request_id!r})"
        return None

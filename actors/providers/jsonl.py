"""JSON-lines RPC over a child process's stdio, and the process shutdown ladder.

Both the scripted agent and ``codex app-server`` speak JSON-RPC-shaped lines
without the ``"jsonrpc"`` field: requests carry ``id`` and ``method``,
responses ``id`` and ``result``/``error``, notifications only ``method``, and
the runtime may send requests of its own (approvals) that we answer by ``id``.
"""

from __future__ import annotations

import itertools
import logging
import signal
from typing import Any, AsyncIterator, Awaitable, Callable

import msgspec
import trio

from agentd.protocol.framing import LineReader, LineTooLong

from .base import ProviderRuntimeError

log = logging.getLogger(__name__)

MAX_LINE = 64 << 20  # a runtime may send large items (diffs); bounded all the same

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


async def runtime_lines(stream: trio.abc.ReceiveStream, who: str) -> AsyncIterator[bytes]:
    """The non-empty lines a runtime writes, until its output ends; a line
    over MAX_LINE is dropped with a warning (the same framing as the socket)."""
    async for line in LineReader(stream, limit=MAX_LINE).lines():
        if isinstance(line, LineTooLong):
            log.warning("%s sent a line over %d bytes; dropped", who, MAX_LINE)
        else:
            yield line


class JsonLinesPeer:
    """Correlates requests and responses on a pair of byte streams.

    Args:
        send: the runtime's stdin.
        receive: the runtime's stdout.
        on_notification: awaited for each notification, in order.
        on_request: awaited for each request the runtime makes; answer it
            later with ``respond``.
        request_timeout: default bound on every request's wait.
    """

    def __init__(
        self,
        send: trio.abc.SendStream,
        receive: trio.abc.ReceiveStream,
        *,
        on_notification: Callable[[str, dict[str, Any]], Awaitable[None]],
        on_request: Callable[[Any, str, dict[str, Any]], Awaitable[None]],
        request_timeout: float | None = 30.0,
    ) -> None:
        self._send = send
        self._receive = receive
        self._on_notification = on_notification
        self._on_request = on_request
        self._timeout = request_timeout
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel] = {}
        self._send_lock = trio.Lock()
        self._closed: str | None = None

    async def _write(self, message: dict[str, Any]) -> None:
        data = _encoder.encode(message) + b"\n"
        async with self._send_lock:
            try:
                await self._send.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise ProviderRuntimeError(f"the runtime's input is closed ({exc.__class__.__name__})") from exc

    async def request(self, method: str, params: dict[str, Any], *, timeout: float | None = None) -> Any:
        """Send a request and wait for its result.

        Raises:
            ProviderRuntimeError: an error answer, a timeout or a dead runtime.
        """
        if self._closed:
            raise ProviderRuntimeError(f"cannot send {method}: {self._closed}")
        limit = self._timeout if timeout is None else timeout
        if limit is None:
            limit = float("inf")
        request_id = next(self._ids)
        send, receive = trio.open_memory_channel(1)
        self._waiting[request_id] = send
        try:
            await self._write({"id": request_id, "method": method, "params": params})
            with trio.move_on_after(limit) as scope:
                reply = await receive.receive()
            if scope.cancelled_caught:
                raise ProviderRuntimeError(f"{method} got no answer within {limit:g}s")
        finally:
            self._waiting.pop(request_id, None)
        if isinstance(reply, ProviderRuntimeError):
            raise reply
        if "error" in reply:
            error = reply["error"] or {}
            raise ProviderRuntimeError(
                f"{method} failed: {error.get('message', 'unknown error')}", code=error.get("code")
            )
        return reply.get("result")

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        await self._write({"method": method, "params": params})

    async def respond(self, request_id: Any, result: dict[str, Any]) -> None:
        """Answer a request the runtime made."""
        await self._write({"id": request_id, "result": result})

    async def respond_error(self, request_id: Any, code: int, message: str) -> None:
        await self._write({"id": request_id, "error": {"code": code, "message": message}})

    async def run(self) -> None:
        """Read lines until EOF, dispatching each; then fail what still waits."""
        try:
            async for line in runtime_lines(self._receive, "runtime"):
                await self._dispatch(line)
        finally:
            self._closed = "the runtime's output ended"
            for send in list(self._waiting.values()):
                send.send_nowait(ProviderRuntimeError("the runtime exited before answering"))
            self._waiting.clear()

    async def _dispatch(self, line: bytes) -> None:
        try:
            message = _decoder.decode(line)
        except msgspec.DecodeError:
            log.warning("runtime sent a line that is not JSON: %.200r", line)
            return
        if not isinstance(message, dict):
            return
        if "method" in message:
            params = message.get("params") or {}
            if "id" in message:
                await self._on_request(message["id"], message["method"], params)
            else:
                await self._on_notification(message["method"], params)
            return
        waiter = self._waiting.get(message.get("id"))
        if waiter is not None:
            waiter.send_nowait(message)


async def stop_process(
    process: Any,
    *,
    polite: Callable[[], Awaitable[None]] | None = None,
    grace: float = 2.0,
) -> None:
    """The shutdown ladder: polite request, bounded wait, SIGTERM, SIGKILL.

    Runs shielded, so a cancelled caller still leaves no process behind.
    """
    with trio.CancelScope(shield=True):
        if process.returncode is not None:
            return
        if polite is not None:
            with trio.move_on_after(grace / 2):
                try:
                    await polite()
                except Exception:  # noqa: BLE001 - a dying runtime may refuse politely
                    pass
            with trio.move_on_after(grace):
                await process.wait()
            if process.returncode is not None:
                return
        try:
            process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            return
        with trio.move_on_after(grace):
            await process.wait()
        if process.returncode is not None:
            return
        try:
            process.kill()
        except ProcessLookupError:
            return
        # SIGKILL cannot be refused: wait for the reap, however long the kernel takes.
        await process.wait()

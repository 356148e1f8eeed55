"""JSON-lines RPC over a child process's stdio, and the process shutdown ladder.

Both the scripted agent and ``codex app-server`` speak JSON-RPC-shaped lines
without the ``"jsonrpc"`` field: requests carry ``id`` and ``method``,
responses ``id`` and ``result``/``error``, notifications only ``method``, and
the runtime may send requests of its own (approvals) that we answer by ``id``.
:class:`JsonLinesPeer` speaks that framing.

Matching an answer to the request waiting for it does not depend on the
framing: :class:`RequestCorrelator` does it for :class:`JsonLinesPeer` and for
runtimes with framings of their own (Claude's ``control_request`` /
``control_response``).
"""

from __future__ import annotations

import itertools
import logging
import signal
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

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
        elif isinstance(line, bytes):  # (an InputOverloaded needs a budget: this reader has none)
            yield line


class RequestTimeout(ProviderRuntimeError):
    """A bounded wait on the runtime ran out (the runtime may still be alive)."""


class RequestCorrelator:
    """The requests we sent a runtime that still wait for an answer, by id.

    The owner writes each request in its own framing (``call``'s ``send``
    gets the new id), hands every answer it reads to :meth:`resolve`, and
    fails what still waits with :meth:`fail_all` when the runtime is gone.

    Args:
        ids: the request ids, in order (default: 1, 2, 3, …).
        timeout: default bound on every wait (None: unbounded).
        timeout_text: the message of a :class:`RequestTimeout`, formatted
            with ``what`` (``call``'s) and ``limit`` (seconds).
    """

    def __init__(
        self,
        *,
        ids: Iterator[Any] | None = None,
        timeout: float | None = 30.0,
        timeout_text: str = "{what} got no answer within {limit:g}s",
    ) -> None:
        self._ids = itertools.count(1) if ids is None else ids
        self._timeout = timeout
        self._timeout_text = timeout_text
        self._waiting: dict[Any, trio.MemorySendChannel[Any]] = {}

    async def call(self, what: str, send: Callable[[Any], Awaitable[None]], *, timeout: float | None = None) -> Any:
        """Send a request with a fresh id and wait for its answer.

        Args:
            what: the request, for the timeout's message.
            send: writes the request with the id it is given.
            timeout: this wait's bound (default: the correlator's).

        Returns:
            the answer as given to :meth:`resolve`.

        Raises:
            RequestTimeout: no answer within the bound.
            ProviderRuntimeError: ``send`` failed, or :meth:`fail_all` ended the wait.
        """
        limit = self._timeout if timeout is None else timeout
        if limit is None:
            limit = float("inf")
        request_id = next(self._ids)
        sender, receive = trio.open_memory_channel[Any](1)
        self._waiting[request_id] = sender
        try:
            await send(request_id)
            with trio.move_on_after(limit) as scope:
                reply = await receive.receive()
            if scope.cancelled_caught:
                raise RequestTimeout(self._timeout_text.format(what=what, limit=limit))
        finally:
            self._waiting.pop(request_id, None)
        if isinstance(reply, ProviderRuntimeError):
            raise reply
        return reply

    def resolve(self, request_id: Any, reply: Any) -> bool:
        """Hand ``reply`` to the request ``request_id``; False if none waits
        (already answered, given up, or never sent)."""
        waiter = self._waiting.pop(request_id, None)
        if waiter is None:
            return False
        waiter.send_nowait(reply)
        return True

    def fail_all(self, why: str) -> None:
        """End every wait with ``ProviderRuntimeError(why)``."""
        for sender in list(self._waiting.values()):
            try:
                sender.send_nowait(ProviderRuntimeError(why))
            except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                pass  # answered already; the answer wins
        self._waiting.clear()


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
        self._pending = RequestCorrelator(timeout=request_timeout)
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
            RequestTimeout: no answer within the bound.
            ProviderRuntimeError: an error answer or a dead runtime.
        """
        if self._closed:
            raise ProviderRuntimeError(f"cannot send {method}: {self._closed}")

        async def send(request_id: int) -> None:
            await self._write({"id": request_id, "method": method, "params": params})

        reply = await self._pending.call(method, send, timeout=timeout)
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
            self._pending.fail_all("the runtime exited before answering")

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
        self._pending.resolve(message.get("id"), message)


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

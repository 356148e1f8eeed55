"""JSON-RPC 2.0 messages, one JSON object per line, with a size limit.

``LineReader`` never holds more than the limit: an over-long line is reported
once and skipped up to its newline, and the connection stays usable. Given a
shared budget, it also holds its unfinished line against the bytes all
connections together may buffer; past that budget the connection is ended.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import msgspec
import trio

from .wire import MAX_TEXT

if TYPE_CHECKING:
    from .limits import ByteBudget

#: bytes of the longest JSON spelling of one character: a character outside
#: the BMP escaped as a surrogate pair, ``\ud83d\ude00``
MAX_ESCAPED_CHAR = 12
#: bytes in a line: any text of the maximum length (MAX_TEXT characters),
#: however it is escaped, with room for the rest of the request
MAX_LINE = MAX_TEXT * MAX_ESCAPED_CHAR + (1 << 20)  # 13 MiB

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


class LineTooLong:
    """Yielded by LineReader in place of a line that exceeded the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit


class InputOverloaded:
    """Yielded by LineReader, last, when the bytes buffered across all
    connections reached their budget: the connection is to be ended."""

    def __init__(self, limit: int) -> None:
        self.limit = limit


class LineReader:
    """Splits a byte stream into lines of at most ``limit`` bytes.

    It is its own async iterator (``lines()`` returns it): each line costs
    one plain coroutine call, not a resumption of nested async generators —
    the reader task of a busy connection does this once per request.

    Args:
        stream: what to read from (``receive_some``); or
        receive: a coroutine function ``(max_bytes) -> bytes`` to read with
            instead (b"" at the end), e.g. a raw non-blocking descriptor.
            With neither, the bytes are handed in (``feed``) and the lines
            taken with ``next_ready``.
        budget: bytes of unfinished lines all connections may hold together.
    """

    def __init__(
        self, stream: trio.abc.ReceiveStream | None = None, *, limit: int = MAX_LINE, budget: ByteBudget | None = None,
        receive: Callable[[int], Awaitable[bytes | bytearray]] | None = None,
    ) -> None:
        if receive is None and stream is not None:
            receive = stream.receive_some
        #: None: somebody else reads, and hands the bytes to ``feed``
        self._receive = receive
        self._limit = limit
        self._budget = budget
        self._held = 0  # bytes of ``buffer`` held against the budget
        self._buffer = bytearray()
        self._skipping = False
        self._ready: deque[bytes | LineTooLong | InputOverloaded] = deque()
        self._ended = False

    def lines(self) -> LineReader:
        """The lines (and LineTooLong / InputOverloaded reports), in order."""
        return self

    def __aiter__(self) -> LineReader:
        return self

    async def __anext__(self) -> bytes | LineTooLong | InputOverloaded:
        ready = self._ready
        while not ready:
            if self._ended:
                self._hold(0)
                raise StopAsyncIteration
            await self._fill()
        return ready.popleft()

    async def aclose(self) -> None:
        """Stop reading; what was held against the budget is given back."""
        self._ended = True
        self._ready.clear()
        self._buffer.clear()
        self._hold(0)

    def _hold(self, size: int) -> bool:
        """Hold exactly ``size`` buffered bytes against the budget."""
        if self._budget is None:
            return True
        if size > self._held and not self._budget.take(size - self._held):
            return False
        if size < self._held:
            self._budget.release(self._held - size)
        self._held = size
        return True

    async def _fill(self) -> None:
        """Read one chunk and queue the lines it completes."""
        assert self._receive is not None, "this LineReader is fed, not iterated"
        try:
            chunk = await self._receive(65536)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            chunk = b""
        self.feed(chunk)

    @property
    def ended(self) -> bool:
        """The input ended (or was cut off past the budget): nothing more is read."""
        return self._ended

    def next_ready(self) -> bytes | LineTooLong | InputOverloaded | None:
        """The next line (or report) that ``feed`` completed, or None."""
        return self._ready.popleft() if self._ready else None

    def feed(self, chunk: bytes | bytearray) -> None:
        """Take bytes read by someone else (b"": the input ended) and queue
        the lines they complete, for ``next_ready`` or the iterator."""
        if not chunk:
            self._ended = True
            self._hold(0)
            return
        buffer = self._buffer
        buffer += chunk
        ready = self._ready
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            if self._skipping:
                self._skipping = False
            elif end - start > self._limit:
                ready.append(LineTooLong(self._limit))
            else:
                line = bytes(buffer[start:end])
                if line.strip():
                    ready.append(line)
            start = end + 1
        if start:
            del buffer[:start]
        if len(buffer) > self._limit and not self._skipping:
            ready.append(LineTooLong(self._limit))
            self._skipping = True
        if self._skipping:
            buffer.clear()
        if not self._hold(len(buffer)):
            ready.append(InputOverloaded(self._budget.limit if self._budget else 0))
            self._ended = True


def encode(message: dict[str, Any]) -> bytes:
    """One message as a line."""
    return _encoder.encode(message) + b"\n"


def decode(line: bytes) -> Any:
    """Parse one line (raises msgspec.DecodeError)."""
    return _decoder.decode(line)


def response(request_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: Any, error: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def notification(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


class EncodedEvent(dict):  # type: ignore[type-arg]
    """A wire event (a dict, as any other) that also carries its JSON,
    spelled once by whoever made it (the hub, for a streamed delta) and
    shared by every subscriber's line (``subscription_line``)."""

    __slots__ = ("json",)

    def __init__(self, fields: dict[str, Any]) -> None:
        super().__init__(fields)
        #: ``fields`` as JSON (an object: ``{...}``)
        self.json: bytes = _encoder.encode(fields)


def subscription_line(method: str, subscription_id: str, event: dict[str, Any]) -> bytes:
    """The notification line of a subscription's ``event``: the same bytes
    as ``encode(notification(method, {"subscriptionId": ..., **event}))``,
    spliced from the event's own JSON when it carries it (EncodedEvent)."""
    encoded = getattr(event, "json", None)
    if encoded is None:
        return encode(notification(method, {"subscriptionId": subscription_id, **event}))
    return b"".join((b'{"jsonrpc":"2.0","method":', _encoder.encode(method), b',"params":{"subscriptionId":',
                     _encoder.encode(subscription_id), b",", encoded[1:], b"}\n"))

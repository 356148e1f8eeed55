"""JSON-RPC 2.0 messages, one JSON object per line, with a size limit.

``LineReader`` never holds more than the limit: an over-long line is reported
once and skipped up to its newline, and the connection stays usable. Given a
shared budget, it also holds its unfinished line against the bytes all
connections together may buffer; past that budget the connection is ended.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, AsyncIterator

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

    Args:
        budget: bytes of unfinished lines all connections may hold together.
    """

    def __init__(self, stream: trio.abc.ReceiveStream, *, limit: int = MAX_LINE, budget: ByteBudget | None = None) -> None:
        self._stream = stream
        self._limit = limit
        self._budget = budget
        self._held = 0  # bytes of ``buffer`` held against the budget

    async def lines(self) -> AsyncIterator[bytes | LineTooLong | InputOverloaded]:
        try:
            async for line in self._lines():
                yield line
        finally:
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

    async def _lines(self) -> AsyncIterator[bytes | LineTooLong | InputOverloaded]:
        buffer = bytearray()
        skipping = False
        while True:
            try:
                chunk = await self._stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return
            if not chunk:
                return
            buffer += chunk
            start = 0
            while True:
                end = buffer.find(b"\n", start)
                if end < 0:
                    break
                if skipping:
                    skipping = False
                elif end - start > self._limit:
                    yield LineTooLong(self._limit)
                else:
                    line = bytes(buffer[start:end])
                    if line.strip():
                        yield line
                start = end + 1
            del buffer[:start]
            if len(buffer) > self._limit and not skipping:
                yield LineTooLong(self._limit)
                skipping = True
            if skipping:
                buffer.clear()
            if not self._hold(len(buffer)):
                yield InputOverloaded(self._budget.limit if self._budget else 0)
                return


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

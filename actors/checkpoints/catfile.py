"""Reading many blobs through one ``git cat-file --batch`` process, without
blocking the event loop: requests are written by one task while the answers
are read in order."""

from __future__ import annotations

import subprocess
from collections.abc import Awaitable, Callable, Sequence

import trio

from .errors import GitCommandError
from .shadow import Shadow

_CHUNK = 1 << 16


class _Reader:
    """Buffered reads of lines and exact byte counts from a trio stream."""

    def __init__(self, stream: trio.abc.ReceiveStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def _more(self) -> None:
        data = await self.stream.receive_some(_CHUNK)
        if not data:
            raise EOFError("git cat-file ended early")
        self.buffer += data

    async def line(self) -> bytes:
        while (end := self.buffer.find(b"\n")) < 0:
            await self._more()
        found = bytes(self.buffer[:end])
        del self.buffer[:end + 1]
        return found

    async def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            await self._more()
        found = bytes(self.buffer[:size])
        del self.buffer[:size]
        return found


async def stream_blobs(shadow: Shadow, oids: Sequence[str], consume: Callable[[int, bytes], Awaitable[None]]) -> None:
    """Call ``consume(index, content)`` for each blob of ``oids``, in order.

    Raises:
        GitCommandError: an object is missing or cat-file failed.
    """
    if not oids:
        return
    path = await shadow.gitbin.path()
    process = await trio.lowlevel.open_process(
        [path, "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=shadow.env, cwd=shadow.layout.top,
    )
    stdin, stdout, stderr = process.stdin, process.stdout, process.stderr
    assert stdin is not None and stdout is not None and stderr is not None

    async def send() -> None:
        try:
            async with stdin:
                request = "".join(f"{oid}\n" for oid in oids).encode()
                for start in range(0, len(request), _CHUNK):
                    await stdin.send_all(request[start:start + _CHUNK])
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # git died: the reader sees the end of its output

    finished = False
    failure: Exception | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            try:
                await _read_all(stdout, oids, consume)
            except Exception as exc:  # raised bare below, not wrapped in the nursery's ExceptionGroup
                failure = exc
                nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        finished = True
    finally:
        with trio.CancelScope(shield=True):
            if not finished and process.returncode is None:
                process.kill()
            await stdout.aclose()
            await stderr.aclose()
            await process.wait()


async def _read_all(stdout: trio.abc.ReceiveStream, oids: Sequence[str],
                    consume: Callable[[int, bytes], Awaitable[None]]) -> None:
    reader = _Reader(stdout)
    try:
        for index, oid in enumerate(oids):
            header = (await reader.line()).split(b" ")
            if len(header) != 3 or header[1] != b"blob":
                raise GitCommandError(["cat-file", "--batch", oid], 1, b" ".join(header))
            content = await reader.exactly(int(header[2]) + 1)
            await consume(index, content[:-1])
    except EOFError as exc:
        raise GitCommandError(["cat-file", "--batch"], 1, str(exc).encode()) from exc

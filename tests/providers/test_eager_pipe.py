"""The scripted agent's stdout read with one scheduler pass per read
(``scripted.EagerPipe``, issue 24 §3): the same lines as trio's own pipe
stream, whatever the chunks, the end of the output and a close while waiting."""

from __future__ import annotations

import os

import pytest
import trio

from agentd.actors.providers.jsonl import runtime_lines
from agentd.actors.providers.scripted import EagerPipe, eager_reader


def pipe() -> tuple[trio.lowlevel.FdStream, int]:
    read, write = os.pipe()
    return trio.lowlevel.FdStream(read), write


async def test_lines_across_reads_and_the_end_of_the_output():
    stream, write = pipe()
    reader = eager_reader(stream)
    assert isinstance(reader, EagerPipe)
    got: list[bytes] = []

    async def read_all() -> None:
        async for line in runtime_lines(reader, "test"):
            got.append(line)

    writer = trio.lowlevel.FdStream(write)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_all)
        await writer.send_all(b'{"a": 1}\n{"b"')
        await trio.testing.wait_all_tasks_blocked()
        await writer.send_all(b': 2}\n' + b"x" * 70_000 + b"\n")  # more than one read's worth
        await writer.aclose()
    assert got == [b'{"a": 1}', b'{"b": 2}', b"x" * 70_000]
    await reader.aclose()


async def test_a_close_while_waiting_ends_the_read():
    stream, write = pipe()
    reader = EagerPipe(stream)
    async with trio.open_nursery() as nursery:
        async def close_soon() -> None:
            await trio.testing.wait_all_tasks_blocked()
            await stream.aclose()

        nursery.start_soon(close_soon)
        with pytest.raises(trio.ClosedResourceError):
            await reader.receive_some()
    with pytest.raises(trio.ClosedResourceError):
        await reader.receive_some()  # and every read after it
    os.close(write)


def test_a_transport_that_is_no_pipe_is_read_as_it_is():
    send, receive = trio.testing.memory_stream_pair()
    assert eager_reader(receive) is receive

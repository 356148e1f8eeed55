"""How an adapter reaches its runtime: a real process, a recording of one, or
a replay of a recording.

Adapters never open processes themselves; they call a ``Spawn`` function and
get something process-shaped back (``stdin``, ``stdout``, ``pid``,
``returncode``, ``wait()``, ``send_signal()``, ``kill()`` — what ``trio.Process``
has). In production that is ``spawn_process``. Integration tests wrap it with
``recording(path)`` to save the real exchange as an NDJSON transcript; unit
tests replay a transcript with ``replaying(path)``, so each adapter's mapping
is tested fast and without the binary — only the transport is fake.

Transcript format (one JSON object per line):

* ``{"type": "header", "provider": KIND, "version": V, "note": TEXT}``
* ``{"type": "expect_outbound", "message": {...}}`` — the adapter must write a
  line whose JSON contains these fields (a subset match; ``"*"`` matches any value)
* ``{"type": "emit_inbound", "afterMs": N, "message": {...}}`` — the runtime
  writes this line N ms after the previous step
* ``{"type": "runtime_exit", "afterMs": N, "code": C}`` — the runtime exits
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol, cast

import msgspec
import trio

from ..regular_files import NotRegularFile, open_regular
from .guard import watch_spawned
from .subreaper import subreaper_command

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()


def exit_status(returncode: int | None) -> tuple[int | None, int | None]:
    """``(exit_code, signal)`` from a returncode (negative: killed by a signal)."""
    if returncode is None:
        return (None, None)
    if returncode < 0:
        return (None, -returncode)
    return (returncode, None)


class ProcessLike(Protocol):
    """What an adapter uses of its runtime process (read-only: adapters never set them)."""

    @property
    def stdin(self) -> trio.abc.SendStream: ...

    @property
    def stdout(self) -> trio.abc.ReceiveStream: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


Spawn = Callable[..., Awaitable[ProcessLike]]


async def spawn_process(args: list[str], *, env: dict[str, str], cwd: str | None, stderr_path: Path) -> ProcessLike:
    """Start a real runtime process in its own session (a Ctrl-C at the
    daemon's terminal is the daemon's to handle), stderr to a private log
    file, as a child subreaper (what it starts stays in its tree, so agentd
    knows an agent's processes: ``subreaper.py``) and under the daemon's
    process guard (it dies with the daemon)."""
    stderr_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = open_log(stderr_path)
    with open(fd, "ab") as stderr:
        process = await trio.lowlevel.open_process(
            subreaper_command(args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=cwd,
            start_new_session=True,
        )
    watch_spawned(process.pid)
    # trio types a Process's pipes as Optional; both were asked for (PIPE), so they are there.
    assert process.stdin is not None and process.stdout is not None
    return cast(ProcessLike, process)


def open_log(path: Path) -> int:
    """``path`` opened to append to, made (0600) when missing. It is agentd's
    own file, so whatever else stands in its place — a FIFO, whose open would
    stop the event loop until someone reads it, or a symlink, which would send
    the log elsewhere (an agent's command can make either) — is removed and the
    file made anew."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        return open_regular(path, flags, 0o600)
    except NotRegularFile:
        pass
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENXIO):  # a symlink; a FIFO nobody reads
            raise
    os.unlink(path)
    return open_regular(path, flags | os.O_EXCL, 0o600)


# -- recording -----------------------------------------------------------------------


class _Recorder:
    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self.last = trio.current_time()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "wb")
        self.write({"type": "header", **header})

    def write(self, entry: dict[str, Any]) -> None:
        self.file.write(_encoder.encode(entry) + b"\n")
        self.file.flush()

    def since(self) -> int:
        now = trio.current_time()
        ms = int((now - self.last) * 1000)
        self.last = now
        return ms


class _TeeSend(trio.abc.SendStream):
    def __init__(self, inner: trio.abc.SendStream, recorder: _Recorder) -> None:
        self.inner, self.recorder, self.buffer = inner, recorder, b""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.buffer += bytes(data)
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line.strip():
                self.recorder.since()
                self.recorder.write({"type": "expect_outbound", "message": _decoder.decode(line)})
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        await self.inner.aclose()


class _TeeReceive(trio.abc.ReceiveStream):
    def __init__(self, inner: trio.abc.ReceiveStream, recorder: _Recorder) -> None:
        self.inner, self.recorder, self.buffer = inner, recorder, b""
        #: the runtime's output was read to its end
        self.at_end = False
        #: called at that end, and when the stream is closed
        self.on_end: Callable[[], None] = lambda: None

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        if not data:
            self.at_end = True
            self.on_end()
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line.strip():
                try:
                    message = _decoder.decode(line)
                except msgspec.DecodeError:
                    continue
                self.recorder.write({"type": "emit_inbound", "afterMs": self.recorder.since(), "message": message})
        return data

    async def aclose(self) -> None:
        self.at_end = True
        self.on_end()
        await self.inner.aclose()


class _RecordedProcess:
    def __init__(self, process: ProcessLike, recorder: _Recorder) -> None:
        self._process, self._recorder = process, recorder
        self.stdin = _TeeSend(process.stdin, recorder)
        self.stdout = _TeeReceive(process.stdout, recorder)
        self.stdout.on_end = self._finish
        self.pid = process.pid
        self._exit_code: int | None = None

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def wait(self) -> int:
        code = await self._process.wait()
        self._exit_code = code
        self._finish()
        return code

    def _finish(self) -> None:
        # The transcript ends with the exit once the runtime exited and what it
        # wrote before was read: an exit is often seen before its last lines.
        if self._exit_code is None or not self.stdout.at_end or self._recorder.file.closed:
            return
        self._recorder.write({"type": "runtime_exit", "afterMs": self._recorder.since(), "code": self._exit_code})
        self._recorder.file.close()

    def send_signal(self, sig: int) -> None:
        self._process.send_signal(sig)

    def kill(self) -> None:
        self._process.kill()


def recording(path: Path, header: dict[str, Any], spawn: Spawn = spawn_process) -> Spawn:
    """A Spawn that saves each session's exchange; sessions after the first
    go to ``path`` with ``.2``, ``.3``, … before the suffix."""
    count = 0

    async def spawn_recorded(args: list[str], **kwargs: Any) -> ProcessLike:
        nonlocal count
        count += 1
        target = path if count == 1 else path.with_name(f"{path.stem}.{count}{path.suffix}")
        process = await spawn(args, **kwargs)
        return _RecordedProcess(process, _Recorder(target, header))

    return spawn_recorded


# -- replay ------------------------------------------------------------------------


class TranscriptMismatch(AssertionError):
    """The adapter wrote something the transcript did not expect."""


def matches(expected: Any, actual: Any) -> bool:
    """Subset match: every field of ``expected`` is in ``actual`` with an
    equal (or matching) value; ``"*"`` matches anything."""
    if expected == "*":
        return True
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(k in actual and matches(v, actual[k]) for k, v in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(map(matches, expected, actual))
    return bool(expected == actual)


class _ReplaySend(trio.abc.SendStream):
    def __init__(self, replay: ReplayProcess) -> None:
        self.replay, self.buffer = replay, b""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.replay.stdin_closed:
            raise trio.ClosedResourceError("stdin closed")
        self.buffer += bytes(data)
        *lines, self.buffer = self.buffer.split(b"\n")
        for line in lines:
            if line.strip():
                self.replay.outbound.send_nowait(_decoder.decode(line))

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        self.replay.stdin_closed = True
        self.replay.outbound.close()  # end of input: the replay's polite stop
        await trio.lowlevel.checkpoint()


class ReplayProcess:
    """Plays a transcript as if it were the runtime process."""

    def __init__(self, steps: list[dict[str, Any]], nursery: trio.Nursery) -> None:
        self.steps = steps
        self.pid = None
        self.returncode: int | None = None
        self.stdin_closed = False
        self.outbound, self._outbound_receive = trio.open_memory_channel[Any](1000)
        self._stdout_send, self._stdout_receive = trio.open_memory_channel[bytes](1000)
        self.stdin = _ReplaySend(self)
        self.stdout = _ChannelReceive(self._stdout_receive)
        self._exited = trio.Event()
        #: set once every step of the transcript has been played
        self.played = trio.Event()
        self.mismatch: TranscriptMismatch | None = None
        nursery.start_soon(self._play)

    async def _play(self) -> None:
        try:
            for step in self.steps:
                kind = step["type"]
                if kind == "expect_outbound":
                    actual = await self._outbound_receive.receive()
                    if not matches(step["message"], actual):
                        self.mismatch = TranscriptMismatch(f"expected {step['message']!r}, the adapter wrote {actual!r}")
                        raise self.mismatch
                elif kind == "emit_inbound":
                    await trio.sleep(step.get("afterMs", 0) / 1000)
                    await self._stdout_send.send(_encoder.encode(step["message"]) + b"\n")
                elif kind == "runtime_exit":
                    await trio.sleep(step.get("afterMs", 0) / 1000)
                    self._exit(step.get("code", 0))
                    return
            # End of transcript: the runtime waits until stopped.
            self.played.set()
            while not self.stdin_closed:
                await self._outbound_receive.receive()
            self._exit(0)
        except (trio.EndOfChannel, trio.ClosedResourceError):
            self._exit(0)
        except TranscriptMismatch:
            self._exit(99)

    def _exit(self, code: int) -> None:
        if self.returncode is None:
            self.returncode = code
            self._stdout_send.close()
            self._exited.set()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None, "_exit sets it before the event"
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self._exit(-sig)

    def kill(self) -> None:
        self._exit(-signal.SIGKILL)


class _ChannelReceive(trio.abc.ReceiveStream):
    def __init__(self, channel: trio.MemoryReceiveChannel[bytes]) -> None:
        self.channel = channel

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        try:
            return await self.channel.receive()
        except trio.EndOfChannel:
            return b""

    async def aclose(self) -> None:
        await self.channel.aclose()


def load_transcript(path: Path) -> list[dict[str, Any]]:
    with open(path, "rb") as f:
        entries = [_decoder.decode(line) for line in f if line.strip()]
    return [e for e in entries if e["type"] != "header"]


def replaying(paths: list[Path], nursery: trio.Nursery) -> tuple[Spawn, list[ReplayProcess]]:
    """A Spawn that plays ``paths`` in order, one per session opened; also
    returns the list the replays are appended to (to check ``mismatch``)."""
    queue = list(paths)
    started: list[ReplayProcess] = []

    async def spawn_replay(args: list[str], **kwargs: Any) -> ProcessLike:
        if not queue:
            raise RuntimeError("the test opened more sessions than it has transcripts")
        replay = ReplayProcess(load_transcript(queue.pop(0)), nursery)
        started.append(replay)
        await trio.lowlevel.checkpoint()
        return replay

    return spawn_replay, started

"""Hostile clients and a hostile host, shared by ``scripts/chaos.py`` and
``scripts/bench_memory.py``.

* ``memory_of`` / ``MemoryWatch``: a daemon's resident memory, read from
  ``/proc/PID/status`` (``VmRSS``, and its anonymous and file-backed parts:
  LMDB's map counts as file-backed once pages of it are read);
* ``RawConnection``: one socket speaking JSON-RPC lines by hand, so a client
  can subscribe and then stop reading, read slowly, or send a line that never
  ends — things ``agentd.protocol.client.Client`` never does;
* ``big_say``: a scripted message whose answer is ``65,536 × repeat``
  characters streamed in ``chunks`` deltas (more than a message may carry);
* ``PrivateTmpfs``: a small tmpfs mounted in a private user and mount
  namespace (``unshare -rm``), held open by a helper process, so a daemon
  started inside it (``nsenter``, see ``wrapper``) can fill its disk without
  root and without touching anyone else's file systems.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import trio

MiB = 1 << 20
#: the text one ``say`` step repeats; a delta is ``SAY_UNIT * repeat / chunks`` characters
SAY_UNIT = 65_536


def big_say(tag: str, repeat: int, chunks: int) -> str:
    """An ``@script`` message answered by ``SAY_UNIT * repeat`` characters
    (``tag`` first, so that every answer differs) in ``chunks`` deltas."""
    return "@script\n" + json.dumps([{"say": (tag + " ").ljust(SAY_UNIT, "x"), "repeat": repeat, "chunks": chunks}])


# -- memory ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    """Resident memory of a process, in bytes."""

    rss: int
    anon: int
    file: int

    def mib(self) -> dict[str, float]:
        return {"rss": round(self.rss / MiB, 1), "anon": round(self.anon / MiB, 1), "file": round(self.file / MiB, 1)}


def memory_of(pid: int) -> Memory | None:
    """``VmRSS``, ``RssAnon`` and ``RssFile`` of ``pid``; None if it is gone."""
    fields = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    fields[key] = int(value.split()[0]) * 1024
    except OSError:
        return None
    if "VmRSS" not in fields:  # a zombie has no memory left
        return None
    return Memory(fields["VmRSS"], fields.get("RssAnon", 0), fields.get("RssFile", 0))


class MemoryWatch:
    """Samples a process's resident memory every ``interval`` seconds and
    keeps the peak: over the whole watch (``VmRSS`` and ``RssAnon``), and
    since the last ``mark``.

    Args:
        pid: returns the pid to watch now (a daemon restarted has a new one), or None.
    """

    def __init__(self, pid: Callable[[], int | None], interval: float = 0.05) -> None:
        self._pid = pid
        self.interval = interval
        self.peak = 0
        self.peak_anon = 0
        self.window_peak = 0
        self.samples = 0

    def sample(self) -> Memory | None:
        pid = self._pid()
        memory = memory_of(pid) if pid else None
        if memory is not None:
            self.samples += 1
            self.peak = max(self.peak, memory.rss)
            self.peak_anon = max(self.peak_anon, memory.anon)
            self.window_peak = max(self.window_peak, memory.rss)
        return memory

    def mark(self) -> Memory | None:
        """Start a new window; return the memory now."""
        self.window_peak = 0
        return self.sample()

    async def run(self) -> None:
        """Sample until cancelled."""
        while True:
            self.sample()
            await trio.sleep(self.interval)


# -- raw connections -------------------------------------------------------------------------


class RawConnection:
    """One connection to the daemon, JSON-RPC lines by hand."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buffer = bytearray()
        self.received = 0  # bytes read so far

    @classmethod
    async def open(cls, socket: str | os.PathLike, *, timeout: float = 30.0) -> RawConnection:
        """Connect, waiting while the daemon's listen backlog is full.

        On a Unix socket a full backlog fails a non-blocking connect with
        EAGAIN, which trio takes for "in progress": it hands back a socket
        that never connected (its first send fails with ENOTCONN). So the
        peer is checked, and the connect retried until it took.
        """
        with trio.fail_after(timeout):
            while True:
                try:
                    stream = await trio.open_unix_socket(os.fspath(socket))
                except BlockingIOError:
                    stream = None
                if stream is not None:
                    try:
                        stream.socket.getpeername()
                        return cls(stream)
                    except OSError:
                        await stream.aclose()
                await trio.sleep(0.005)

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send_all(json.dumps(message).encode() + b"\n")

    async def request(self, method: str, params: dict[str, Any] | None = None, request_id: int = 1) -> None:
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})

    async def receive(self, *, chunk: int = MiB, pause: float = 0.0) -> dict[str, Any] | None:
        """The next message; None once the daemon closed the connection (an
        end of file, or a reset because our unread request was in its buffer).
        ``chunk`` and ``pause`` make a slow reader: at most ``chunk`` bytes per
        read, ``pause`` seconds after each."""
        while (end := self.buffer.find(b"\n")) < 0:
            try:
                data = await self.stream.receive_some(chunk)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                return None
            self.received += len(data)
            self.buffer += data
            if pause:
                await trio.sleep(pause)
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 1]
        return json.loads(line)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self.stream.aclose()


async def subscribe_raw(socket: str | os.PathLike, after_seq: int) -> RawConnection:
    """A connection subscribed to every event after ``after_seq``, its
    answer read (the stream starts only once the answer is queued)."""
    conn = await RawConnection.open(socket)
    try:
        await conn.request("events.subscribe", {"afterSeq": after_seq})
        answer = await conn.receive()
        if answer is None or "result" not in answer:
            raise RuntimeError(f"events.subscribe failed: {answer}")
    except BaseException:
        await conn.aclose()
        raise
    return conn


@dataclass
class StreamEnd:
    """How a raw subscription's stream ended for its reader."""

    how: str  # "resync", "disconnected", "caught_up" (saw what it waited for) or "unresolved"
    seqs: list[int]  # durable seqs given, in order
    resync_after: int | None = None
    other: list[dict[str, Any]] | None = None  # messages that are neither events nor a resync


async def read_stream(conn: RawConnection, *, until: Callable[[dict[str, Any]], bool] = lambda e: False,
                      chunk: int = MiB, pause: float = 0.0) -> StreamEnd:
    """Read a subscription's messages until ``events.resync``, the end of the
    connection, or an event for which ``until`` is true. Cancel it to bound
    the wait (the ``StreamEnd`` is then lost: use ``read_stream_into``)."""
    end = StreamEnd("unresolved", [])
    await read_stream_into(end, conn, until=until, chunk=chunk, pause=pause)
    return end


async def read_stream_into(end: StreamEnd, conn: RawConnection, *, until: Callable[[dict[str, Any]], bool] = lambda e: False,
                           chunk: int = MiB, pause: float = 0.0) -> None:
    """``read_stream`` filling ``end`` as it goes (so a timeout keeps what was read)."""
    while True:
        message = await conn.receive(chunk=chunk, pause=pause)
        if message is None:
            end.how = "disconnected"
            return
        method, params = message.get("method"), message.get("params") or {}
        if method == "event":
            if not params.get("ephemeral"):
                end.seqs.append(params["seq"])
            if until(params):
                end.how = "caught_up"
                return
        elif method == "events.resync":
            end.how, end.resync_after = "resync", params["afterSeq"]
            return
        else:
            end.other = (end.other or []) + [message]


# -- a disk that fills up ----------------------------------------------------------------------


class Unavailable(Exception):
    """This host cannot do it (no ``unshare``, user namespaces disabled, ...)."""


class PrivateTmpfs:
    """A ``size``-byte tmpfs on ``path``, visible only inside a private user
    and mount namespace that a helper process holds (``unshare -rm``), so the
    file system outlives the daemons started in it and goes with the helper.

    ``wrapper`` is the command prefix that runs a program inside it
    (``nsenter``; the program keeps its pid, see ``agentd.launch.start_daemon``).
    """

    def __init__(self, path: Path, size: int, holder: trio.Process) -> None:
        self.path = path
        self.size = size
        self.holder = holder
        self.wrapper = ["nsenter", "-t", str(holder.pid), "-U", "-m", "--preserve-credentials", "--"]

    @classmethod
    async def mount(cls, path: Path, size: int) -> PrivateTmpfs:
        """Raises:
            Unavailable: with the reason this host cannot."""
        for tool in ("unshare", "nsenter"):
            if shutil.which(tool) is None:
                raise Unavailable(f"{tool} is not installed")
        path.mkdir(parents=True, exist_ok=True)
        script = 'mount -t tmpfs -o size="$2",mode=0700 tmpfs "$1" && echo mounted && exec cat >/dev/null'
        holder = await trio.lowlevel.open_process(
            ["unshare", "-rm", "sh", "-c", script, "sh", str(path), str(size)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        said = b""
        with trio.move_on_after(10):
            while not said.endswith(b"\n"):
                data = await holder.stdout.receive_some(64)
                if not data:
                    break
                said += data
        if said != b"mounted\n":
            with trio.move_on_after(2):
                error = await holder.stderr.receive_some(4096) if holder.stderr else b""
            if holder.returncode is None:
                holder.kill()
            await holder.wait()
            why = (error or b"").decode(errors="replace").strip() or f"exit {holder.returncode}"
            raise Unavailable(f"unshare -rm could not mount a tmpfs: {why}")
        tmpfs = cls(path, size, holder)
        entered = await tmpfs.sh('test "$(stat -f -c %T "$1")" = tmpfs', str(path))
        if entered.returncode != 0:
            await tmpfs.aclose()
            why = entered.stderr.decode(errors="replace").strip() or "the tmpfs is not there"
            raise Unavailable(f"nsenter could not enter the namespace holding the tmpfs: {why}")
        return tmpfs

    async def sh(self, command: str, *args: str) -> subprocess.CompletedProcess:
        """Run ``sh -c command`` inside the namespace (``$1``... are ``args``)."""
        return await trio.run_process([*self.wrapper, "sh", "-c", command, "sh", *args],
                                      capture_stdout=True, capture_stderr=True, check=False)

    async def available(self) -> int:
        """Bytes still free on the tmpfs."""
        done = await self.sh('stat -f -c "%a %S" "$1"', str(self.path))
        blocks, size = done.stdout.split()
        return int(blocks) * int(size)

    async def fill(self) -> int:
        """Fill the tmpfs to its last byte with one file; return its free bytes after."""
        await self.sh('cat /dev/zero > "$1/filler" 2>/dev/null; exit 0', str(self.path))
        return await self.available()

    async def free(self) -> int:
        """Remove what ``fill`` wrote; return the free bytes after."""
        await self.sh('rm -f "$1/filler"', str(self.path))
        return await self.available()

    async def aclose(self) -> None:
        """End the helper: the namespace, the tmpfs and its files go with it."""
        with trio.CancelScope(shield=True):
            if self.holder.stdin is not None:
                await self.holder.stdin.aclose()  # cat reads its end of file
            with trio.move_on_after(5):
                await self.holder.wait()
            if self.holder.returncode is None:
                self.holder.kill()
                await self.holder.wait()


# -- what every probe shares ------------------------------------------------------------


def free_port() -> int:
    """A loopback TCP port free right now (for a daemon's WebSocket)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def report(result: dict[str, Any], table: Callable[[dict[str, Any]], str], *, json_only: bool) -> None:
    """Print a probe's figures: its table for a person (unless ``json_only``), then one JSON line."""
    import json

    if not json_only:
        print(table(result))
    print(json.dumps(result))

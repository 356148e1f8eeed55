"""An asyncio client of the daemon's socket, for ``agentd acp``.

``agentd acp`` runs the ACP SDK (``agent-client-protocol``), which is built
on asyncio; its daemon side is this small client of the protocol
(protocol/README.md): JSON-RPC 2.0, one JSON object per ``\\n``-terminated
line, requests answered by ``id`` in any order, events as ``event``
notifications of a subscription and ``events.resync`` when the daemon cut
one off. It imports no trio (``protocol/client.py`` is the trio client):
one process, one event loop.

``ensure_daemon`` connects to the daemon at the socket or, when none
listens, starts one as the launcher (``agentd.launch``) does — ``agentd
serve --ready-fd`` and a wait for its ``ready`` line, never a poll — but
detached (its own session, no lifeline): several editors share one daemon,
and its threads outlive the editor that happened to start it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator

from agentd.protocol.errors import AgentdError, error_from_wire

#: the longest line read from the daemon (an answer with a whole thread can be long)
LINE_LIMIT = 64 << 20
#: seconds a daemon this process starts may take to say ``ready``
START_TIMEOUT = 30.0
#: the daemons this process started
_started: list[subprocess.Popen[bytes]] = []


class ConnectionLost(AgentdError):
    """The daemon closed the connection (it stopped or restarted)."""

    kind = "connection_lost"


class Subscription:
    """Events of one ``events.subscribe``, in ``seq`` order.

    Iterating yields the event objects (``seq``, ``type``, ``threadId``,
    ``payload``, …); it ends when the daemon asks for a resync
    (``resync_after`` holds the seq to resubscribe after) or the connection
    is lost (``lost`` is True).
    """

    def __init__(self, client: DaemonClient) -> None:
        self._client = client
        self.subscription_id = ""
        self._queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.resync_after: int | None = None
        self.lost = False
        self.last_seq = 0

    def _put(self, message: dict[str, Any] | None) -> None:
        self._queue.put_nowait(message)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> dict[str, Any]:
        message = await self._queue.get()
        if message is None:
            self.lost = self.resync_after is None
            raise StopAsyncIteration
        params = message.get("params") or {}
        if message.get("method") == "events.resync":
            self.resync_after = int(params.get("afterSeq", self.last_seq))
            raise StopAsyncIteration
        event = {k: v for k, v in params.items() if k != "subscriptionId"}
        if not event.get("ephemeral"):
            self.last_seq = int(event.get("seq") or self.last_seq)
        return event

    async def close(self) -> None:
        """Unsubscribe (if the connection is still there)."""
        self._client._subscriptions.pop(self.subscription_id, None)
        if not self._client.closed and self.subscription_id:
            with contextlib.suppress(AgentdError, OSError):
                await self._client.call("events.unsubscribe", subscriptionId=self.subscription_id)


class DaemonClient:
    """One connection to the daemon: concurrent calls and subscriptions."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._subscriptions: dict[str, Subscription] = {}
        #: subscriptions whose ``events.subscribe`` is still being answered (their events may come first)
        self._early: dict[int, Subscription] = {}
        self.closed = False
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(cls, socket: str | os.PathLike[str]) -> DaemonClient:
        """Connect to the socket (raises OSError as ``connect`` does)."""
        reader, writer = await asyncio.open_unix_connection(os.fspath(socket), limit=LINE_LIMIT)
        return cls(reader, writer)

    async def aclose(self) -> None:
        self._read_task.cancel()
        with contextlib.suppress(BaseException):
            await self._read_task
        self._lose()
        self._writer.close()
        with contextlib.suppress(OSError, ConnectionError):
            await self._writer.wait_closed()

    async def wait_closed(self) -> None:
        """Return when the daemon closed the connection."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(self._read_task)

    async def _read_loop(self) -> None:
        try:
            while True:
                try:
                    line = await self._reader.readline()
                except ValueError:  # longer than LINE_LIMIT: skip what is buffered
                    continue
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if isinstance(message, dict):
                    self._dispatch(message)
        except (OSError, ConnectionError):
            pass
        finally:
            self._lose()

    def _lose(self) -> None:
        if self.closed:
            return
        self.closed = True
        lost = {"code": -32000, "message": "the daemon closed the connection", "data": {"kind": "connection_lost"}}
        for future in self._waiting.values():
            if not future.done():
                future.set_result({"error": lost})
        self._waiting.clear()
        for subscription in [*self._subscriptions.values(), *self._early.values()]:
            subscription._put(None)
        self._subscriptions.clear()
        self._early.clear()

    def _dispatch(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        if method in ("event", "events.resync"):
            subscription = self._subscriptions.get((message.get("params") or {}).get("subscriptionId", ""))
            if subscription is not None:
                subscription._put(message)
                if method == "events.resync":
                    self._subscriptions.pop(subscription.subscription_id, None)
            return
        if method is not None:
            return
        request_id = message.get("id")
        future = self._waiting.pop(request_id, None) if isinstance(request_id, int) else None
        if future is None or future.done():
            return
        early = self._early.pop(request_id, None) if isinstance(request_id, int) else None
        if early is not None and "result" in message:
            # Registered before any later line is read: the daemon sends the replay after the answer.
            early.subscription_id = message["result"]["subscriptionId"]
            self._subscriptions[early.subscription_id] = early
        future.set_result(message)

    async def _request(self, method: str, params: dict[str, Any], early: Subscription | None = None) -> Any:
        if self.closed:
            raise ConnectionLost("the daemon closed the connection")
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        if early is not None:
            self._early[request_id] = early
        line = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}) + "\n"
        try:
            self._writer.write(line.encode())
            await self._writer.drain()
        except (OSError, ConnectionError):
            self._lose()
        reply = await future
        if "error" in reply:
            error = error_from_wire(reply["error"])
            if error.kind == "connection_lost":
                raise ConnectionLost(error.message)
            raise error
        return reply.get("result")

    async def call(self, method: str, **params: Any) -> Any:
        """Call ``method`` with camelCase ``params``; return its result.

        Raises:
            AgentdError: the daemon's error (ConnectionLost when it went away).
        """
        return await self._request(method, params)

    async def subscribe(self, *, thread_id: str | None = None, after_seq: int = 0) -> Subscription:
        """Replay the events after ``after_seq`` (of one thread), then follow live ones."""
        subscription = Subscription(self)
        subscription.last_seq = after_seq
        params: dict[str, Any] = {"afterSeq": after_seq}
        if thread_id is not None:
            params["threadId"] = thread_id
        await self._request("events.subscribe", params, early=subscription)
        return subscription


@contextlib.asynccontextmanager
async def _start_lock(data_dir: Path) -> AsyncIterator[None]:
    """One starter at a time per data dir: two editors opened at once start one daemon."""
    run = data_dir / "run"
    run.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(run / "acp-start.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


async def start_detached_daemon(data_dir: Path, socket: Path) -> None:
    """``agentd serve`` in a session of its own, logging to ``<data-dir>/daemon.log``;
    returns once it listens.

    Raises:
        AgentdError: it exited, or did not say ``ready`` within START_TIMEOUT.
    """
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = data_dir / "daemon.log"
    read_fd, write_fd = os.pipe()
    args = [sys.executable, "-m", "agentd", "serve", "--data-dir", str(data_dir), "--socket", str(socket),
            "--ready-fd", str(write_fd)]
    try:
        with open(log_path, "ab") as log:
            process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_fd,),
                                       start_new_session=True, close_fds=True)
    finally:
        os.close(write_fd)
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[bytes] = loop.create_future()

    def on_readable() -> None:
        if not ready.done():
            ready.set_result(os.read(read_fd, 64))

    loop.add_reader(read_fd, on_readable)
    try:
        data = await asyncio.wait_for(ready, START_TIMEOUT)
    except asyncio.TimeoutError:
        data = b""
    finally:
        loop.remove_reader(read_fd)
        os.close(read_fd)
    if not data.startswith(b"ready"):
        if process.poll() is None:
            process.kill()
        tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
        raise AgentdError(f"agentd serve did not start (see {log_path}): {tail.strip().splitlines()[-1:] or ''}")
    # It outlives this process (init adopts it then); held meanwhile so that
    # the Popen object is not collected while it runs.
    _started.append(process)


async def ensure_daemon(data_dir: Path, socket: Path) -> DaemonClient:
    """A connection to the daemon at ``socket``; starts one on ``data_dir`` when none listens."""
    try:
        return await DaemonClient.connect(socket)
    except (FileNotFoundError, ConnectionRefusedError):
        pass
    async with _start_lock(data_dir):
        try:
            return await DaemonClient.connect(socket)  # another editor's agentd acp started it meanwhile
        except (FileNotFoundError, ConnectionRefusedError):
            await start_detached_daemon(data_dir, socket)
    return await DaemonClient.connect(socket)

"""An async client for the agentd socket (used by the CLI, tests and scripts).

```python
async with await Client.connect(socket_path) as client:
    thread = await client.call("thread.create", title="demo")
    async with client.subscribe(thread_id=thread["threadId"]) as events:
        await client.call("thread.message.send", threadId=thread["threadId"], text="hi")
        async for event in events:
            ...
```
"""

from __future__ import annotations

import itertools
import os
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import msgspec
import trio

from . import framing
from .errors import AgentdError, error_from_wire

SUBSCRIPTION_BUFFER = 100_000

#: a JSON-RPC message from the daemon, as decoded
Message = dict[str, Any]


class ConnectionLost(AgentdError):
    """The daemon closed the connection."""

    kind = "connection_lost"


def _refused(error: dict[str, Any]) -> AgentdError:
    """The error of a refusal of the whole connection (an id-less error line
    just before the daemon closed it, e.g. ``overloaded`` past the connection
    cap), marked ``connection_refused = True``: a new connection may be served."""
    exc = error_from_wire(error)
    exc.connection_refused = True  # type: ignore[attr-defined]
    return exc


class Client:
    """One connection to the daemon, with concurrent calls and subscriptions."""

    def __init__(self, stream: trio.SocketStream, nursery: trio.Nursery) -> None:
        self._stream = stream
        self._nursery = nursery
        self._ids = itertools.count(1)
        #: request id -> where its reply goes, and what to call with its result first
        self._waiting: dict[int, tuple[trio.MemorySendChannel[Message], Callable[[Any], None] | None]] = {}
        self._subscriptions: dict[str, trio.MemorySendChannel[Message]] = {}
        self._send_lock = trio.Lock()
        self._lost: str | None = None
        #: the error line without an id the daemon sent last (an ``overloaded``
        #: refusal of the whole connection comes that way, just before it closes)
        self._refusal: dict[str, Any] | None = None
        #: subscriptions closed because their consumer fell behind
        self._fell_behind: set[str] = set()

    @classmethod
    @asynccontextmanager
    async def connect(cls, path: str | os.PathLike[str]) -> AsyncIterator[Client]:
        """Connect to the daemon's socket at ``path``."""
        stream = await trio.open_unix_socket(os.fspath(path))
        try:
            async with trio.open_nursery() as nursery:
                client = cls(stream, nursery)
                nursery.start_soon(client._read_loop)
                try:
                    yield client
                finally:
                    nursery.cancel_scope.cancel()
                    # Shielded: a Cancelled from aclose would replace (and so
                    # swallow) whatever error left the block.
                    with trio.CancelScope(shield=True):
                        await stream.aclose()
        except BaseExceptionGroup as group:
            # The nursery wraps what the block raised; callers get the error
            # itself (an AgentdError, a KeyboardInterrupt), not a group.
            sole = _sole_error(group)
            if sole is None:
                raise
            _raise_keeping_context(sole)

    async def _read_loop(self) -> None:
        try:
            async for line in framing.LineReader(self._stream, limit=64 << 20).lines():
                if not isinstance(line, bytes):
                    continue  # a LineTooLong (an InputOverloaded needs a budget: there is none)
                try:
                    message = framing.decode(line)
                except msgspec.DecodeError:
                    continue
                self._dispatch(message)
        finally:
            self._lost = "the daemon closed the connection"
            # A refusal the daemon sent before closing is what callers are
            # told (e.g. ``overloaded``: retry shortly), not a bare "lost".
            lost = {"error": {"code": -32000, "message": self._lost, "data": {"kind": "connection_lost"}}}
            reply = {"error": self._refusal, "refused": True} if self._refusal is not None else lost
            for send, _ in self._waiting.values():
                send.send_nowait(reply)
            self._waiting.clear()
            for send in self._subscriptions.values():
                send.close()
            self._subscriptions.clear()

    def _dispatch(self, message: Message) -> None:
        self._refusal = message["error"] if "error" in message and message.get("id") is None else None
        if "method" in message:
            params = message.get("params") or {}
            if message["method"] == "event" or message["method"] == "events.resync":
                subscription_id: str = params.get("subscriptionId") or ""  # "": none, never a subscription's
                send = self._subscriptions.get(subscription_id)
                if send is not None:
                    try:
                        send.send_nowait(message)
                    except trio.WouldBlock:
                        # The consumer fell far behind; it must resubscribe.
                        self._fell_behind.add(subscription_id)
                        send.close()
                    if message["method"] == "events.resync":
                        send.close()
            return
        request_id = message.get("id")
        entry = self._waiting.pop(request_id, None) if isinstance(request_id, int) else None
        if entry is not None:
            send, on_result = entry
            if on_result is not None and "result" in message:
                on_result(message["result"])  # synchronously, before any later line
            send.send_nowait(message)

    async def call(self, method: str, _on_result: Callable[[Any], None] | None = None, /, **params: Any) -> Any:
        """Call ``method`` with camelCase ``params``; return its result.

        Raises:
            AgentdError: the daemon's error, as the matching subclass.
        """
        if self._lost:
            if self._refusal is not None:
                raise _refused(self._refusal)
            raise ConnectionLost(self._lost)
        request_id = next(self._ids)
        send, receive = trio.open_memory_channel[Message](1)
        self._waiting[request_id] = (send, _on_result)
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        async with self._send_lock:
            try:
                await self._stream.send_all(framing.encode(message))
            except trio.BrokenResourceError:
                # The daemon closed first (it may have turned this connection
                # away with a line still unread): the read loop ends and
                # answers this call with what it said, or with "lost".
                pass
        reply = await receive.receive()
        if "error" in reply:
            raise _refused(reply["error"]) if reply.get("refused") else error_from_wire(reply["error"])
        return reply["result"]

    @asynccontextmanager
    async def subscribe(self, *, thread_id: str | None = None, after_seq: int = 0) -> AsyncIterator[EventStream]:
        """Replay events after ``after_seq`` and then follow live ones."""
        send, receive = trio.open_memory_channel[Message](SUBSCRIPTION_BUFFER)
        holder: dict[str, str] = {}

        def register(result: dict[str, Any]) -> None:
            holder["id"] = result["subscriptionId"]
            self._subscriptions[result["subscriptionId"]] = send

        params: dict[str, Any] = {"afterSeq": after_seq}
        if thread_id is not None:
            params["threadId"] = thread_id
        result = await self.call("events.subscribe", register, **params)
        subscription_id = result["subscriptionId"]
        stream = EventStream(subscription_id, receive,
                             why_closed=lambda: self._lost if subscription_id not in self._fell_behind else None)
        try:
            yield stream
        finally:
            self._subscriptions.pop(holder.get("id", ""), None)
            if not self._lost:
                with trio.CancelScope(shield=True), trio.move_on_after(2):
                    try:
                        await self.call("events.unsubscribe", subscriptionId=result["subscriptionId"])
                    except AgentdError:
                        pass


class EventStream:
    """Events of one subscription, in ``seq`` order.

    Iterating yields event mappings (``seq``, ``type``, ``threadId``, …). If
    the daemon asks for a resync (or this client's buffer overflowed),
    iteration ends and ``resync_after`` holds the ``seq`` to resubscribe
    after; if the connection was lost, iteration ends and ``lost`` says why.
    """

    def __init__(self, subscription_id: str, receive: trio.MemoryReceiveChannel[Message],
                 why_closed: Callable[[], str | None] | None = None) -> None:
        self.subscription_id = subscription_id
        self._receive = receive
        self._why_closed = why_closed or (lambda: None)
        self.resync_after: int | None = None
        #: why the stream ended, when the connection to the daemon was lost
        self.lost: str | None = None
        self.last_seq = 0

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            message = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            if self.resync_after is None:
                self.lost = self._why_closed()
                if self.lost is None:
                    self.resync_after = self.last_seq  # closed for falling behind
            raise StopAsyncIteration from None
        params = message["params"]
        if message["method"] == "events.resync":
            self.resync_after = params["afterSeq"]
            raise StopAsyncIteration
        event = {k: v for k, v in params.items() if k != "subscriptionId"}
        if not event.get("ephemeral"):
            self.last_seq = event["seq"]
        return event


def _sole_error(group: BaseExceptionGroup) -> BaseException | None:
    """The one exception in (nested) groups besides trio.Cancelled, or None."""
    found: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        elif not isinstance(exc, trio.Cancelled):
            found.append(exc)

    walk(group)
    return found[0] if len(found) == 1 else None


def _raise_keeping_context(exc: BaseException) -> None:
    context = exc.__context__
    try:
        raise exc
    finally:
        exc.__context__ = context
        del exc, context

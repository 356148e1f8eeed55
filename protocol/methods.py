"""What a method is: the entry type of the daemon's one method table.

Each protocol method is declared once, as a ``Method``: its name, its params
and result Structs (from ``signatures.py``), its owner (the daemon itself, or
the actor of one thread) and its handler. The table is filled in by the daemon
(``agentd.supervisor.methods``); the server decodes params with it, the router
dispatches with it, and the contract test checks ``protocol/README.md`` against
it. This module only knows the shape, so the protocol layer imports nothing
above it.
"""

from __future__ import annotations

import re
from collections.abc import Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal, cast

import msgspec

from .errors import InternalError, InvalidParams
from .results import Never
from .wire import Params

Owner = Literal["daemon", "thread"]
#: who may call a method (see "What an agent's processes may call" in
#: protocol/README.md): ``open`` — every client; ``tool`` — agentd's MCP tool:
#: an agent's process only with its session's credential; ``control`` — never
#: a process of an agent (its runtime or anything it started), only the person's
Access = Literal["open", "tool", "control"]


@dataclass(frozen=True)
class Method:
    """One protocol method.

    Attributes:
        name: the JSON-RPC method name (``thread.message.send``).
        params: the Struct its params decode into; the handler receives it typed.
        owner: ``daemon`` methods run in the router; ``thread`` methods run in
            the actor of the thread that ``route`` names, one at a time.
        handler: ``daemon``: ``async (context, params, connection)``, the
            daemon's context (``supervisor/context.py``); ``thread``: a
            transition ``(ctx, command)`` the thread's actor runs
            (``actors/effects.py``): it returns a Decision or yields effects.
        route: ``thread`` methods only: ``(store, params) -> thread id``.
        quick: optional synchronous form of a ``daemon`` handler, run in the
            task that reads the request (the poller), with no task of its own: ``(context,
            params, connection)`` (the router binds the context) returns the result, a ``Later`` (the server
            answers when it is resolved, e.g. a queued durable batch) or
            ``SLOW`` (this call needs the handler: it may block).
        access: who may call it (``Access``), or a function of the decoded
            params that says so (``thread.create`` is open only as an
            agent's). A method declared without one is ``control``: a new
            method is closed to agents until someone decides otherwise.
        result: the Struct its answer must match (``results.py``;
            ``results.Never`` for a method that always answers an error), held
            to it by ``check_result``. None: undeclared (a test's ad-hoc
            method); every method of the daemon's table declares one.
    """

    name: str
    params: type[Params]
    owner: Owner
    handler: Callable[..., Awaitable[Any]]
    route: Callable[[Any, Any], str] | None = None
    quick: Callable[..., Any] | None = None
    access: Access | Callable[[Any], Access] = "control"
    result: type | None = None

    def access_for(self, params: Params) -> Access:
        """Who may make this call, with these params."""
        return self.access(params) if callable(self.access) else self.access

    def __post_init__(self) -> None:
        if (self.owner == "thread") != (self.route is not None):
            raise ValueError(f"{self.name}: a route is what a thread-owned method needs, and only it")
        if self.quick is not None and self.owner != "daemon":
            raise ValueError(f"{self.name}: only a daemon-owned method can be answered where the request is read")

    def decode(self, params: Any) -> Params:
        """Convert raw JSON params to this method's Struct.

        Raises:
            InvalidParams: with ``data.field`` naming the offending field.
        """
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise InvalidParams(f"params of {self.name} must be an object", field=None)
        try:
            return msgspec.convert(params, self.params)
        except msgspec.ValidationError as exc:
            text = str(exc).replace(r"Expected `str` matching regex '^[^\\x00]*\\Z'", "Expected text without a NUL byte")
            match = _FIELD.search(text)
            field = (match.group(1) or match.group(2)) if match else None
            raise InvalidParams(f"invalid params for {self.name}: {text}", field=field) from None

    def check_result(self, result: Any) -> None:
        """Hold a handler's answer to this method's result Struct (the server
        does when ``AGENTD_CHECK_RESULTS`` is set, as the test suite's daemons
        have it): the Struct itself, or the mapping it encodes to.

        Raises:
            ResultMismatch: the answer is not what the schema allows.
        """
        if self.result is None or isinstance(result, self.result):
            return
        if self.result is Never:
            raise ResultMismatch(f"{self.name} never answers with a result, yet its handler returned one")
        try:
            msgspec.convert(result, self.result)
        except msgspec.ValidationError as exc:
            raise ResultMismatch(f"the answer of {self.name} does not match its schema "
                                 f"({self.result.__name__}): {exc}") from None


class ResultMismatch(InternalError):
    """A handler answered something its method's result Struct does not allow:
    a bug of agentd's, reported instead of sent (only when results are checked)."""


#: what a ``quick`` handler returns when this call must run the full handler
SLOW: Any = object()


class Later:
    """A result that is not ready yet (a durable batch on its way to disk).
    Whoever made it calls ``resolve`` or ``fail`` exactly once, on the loop —
    possibly before the server asked to be told (a store that commits inline);
    the server answers then, without a task waiting."""

    __slots__ = ("_callback", "_outcome")

    def __init__(self) -> None:
        self._callback: Callable[[Any, BaseException | None], None] | None = None
        self._outcome: tuple[Any, BaseException | None] | None = None

    def on_done(self, callback: Callable[[Any, BaseException | None], None]) -> None:
        """Call ``callback(result, error)`` when it is done (now, if it is)."""
        if self._outcome is not None:
            callback(*self._outcome)
        else:
            self._callback = callback

    def _done(self, result: Any, error: BaseException | None) -> None:
        if self._callback is not None:
            self._callback(result, error)
        else:
            self._outcome = (result, error)

    def resolve(self, result: Any) -> None:
        self._done(result, None)

    def fail(self, error: BaseException) -> None:
        self._done(None, error)


def run_now(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """A handler that never blocks (it awaits nothing that suspends), as a
    ``quick`` one: its coroutine is run to its end at once. One that does
    suspend is a bug in the method table, reported as such."""

    def quick(*args: Any) -> Any:
        coroutine = cast(Coroutine[Any, Any, Any], handler(*args))
        try:
            coroutine.send(None)
        except StopIteration as done:
            return done.value
        coroutine.close()
        raise RuntimeError(f"{handler.__qualname__} suspended; it cannot be a quick (run_now) handler")

    quick.__qualname__ = f"run_now({handler.__qualname__})"
    return quick


_FIELD = re.compile(r"at `\$\.([A-Za-z0-9_.\[\]]+)`|field `([A-Za-z0-9_]+)`")


class MethodTable(Mapping[str, Method]):
    """The methods by name; built once, read by everyone."""

    def __init__(self, methods: Iterable[Method]) -> None:
        self._methods: dict[str, Method] = {}
        for method in methods:
            if method.name in self._methods:
                raise ValueError(f"method {method.name} is declared twice")
            self._methods[method.name] = method

    def __getitem__(self, name: str) -> Method:
        return self._methods[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._methods)

    def __len__(self) -> int:
        return len(self._methods)

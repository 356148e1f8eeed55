"""What a method is: the entry type of the daemon's one method table.

Each protocol method is declared once, as a ``Method``: its name, its params
Struct, its owner (the daemon itself, or the actor of one thread) and its
handler. The table is filled in by the daemon (``agentd.supervisor.methods``);
the server decodes params with it, the router dispatches with it, and the
contract test checks ``protocol/README.md`` against it. This module only knows
the shape, so the protocol layer imports nothing above it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Literal

import msgspec

from .errors import InvalidParams
from .wire import Params

Owner = Literal["daemon", "thread"]


@dataclass(frozen=True)
class Method:
    """One protocol method.

    Attributes:
        name: the JSON-RPC method name (``thread.message.send``).
        params: the Struct its params decode into; the handler receives it typed.
        owner: ``daemon`` methods run in the router; ``thread`` methods run in
            the actor of the thread that ``route`` names, one at a time.
        handler: ``daemon``: ``async (router, params, connection)``;
            ``thread``: ``async (actor, command)``.
        route: ``thread`` methods only: ``(store, params) -> thread id``.
    """

    name: str
    params: type[Params]
    owner: Owner
    handler: Callable[..., Awaitable[Any]]
    route: Callable[[Any, Any], str] | None = None

    def __post_init__(self) -> None:
        if (self.owner == "thread") != (self.route is not None):
            raise ValueError(f"{self.name}: a route is what a thread-owned method needs, and only it")

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
            text = str(exc)
            match = _FIELD.search(text)
            field = (match.group(1) or match.group(2)) if match else None
            raise InvalidParams(f"invalid params for {self.name}: {text}", field=field) from None


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

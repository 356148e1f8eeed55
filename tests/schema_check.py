"""Every answer and event the suite receives, held to ``agentd schema``'s document.

``conftest.py`` wraps the test client (``Client.call`` and ``EventStream``)
with ``check_result`` and ``check_event``, so each test that talks to a
daemon also checks that what it got is what the exported JSON Schema allows —
the document a client would generate its types from, not the Structs it was
made from. A mismatch fails the test that received it (``SchemaMismatch``).
The daemons of the suite also hold their answers to the Structs before
sending them (``AGENTD_CHECK_RESULTS``); this side catches events too.
"""

from __future__ import annotations

import collections
import functools
import json
from typing import Any

import jsonschema

from agentd import __version__
from agentd.protocol.schema import document


class SchemaMismatch(AssertionError):
    """An answer or event the protocol's JSON Schema does not allow."""


@functools.cache
def schema() -> dict[str, Any]:
    return document(__version__)


@functools.cache
def _validator(pointer: str) -> jsonschema.protocols.Validator:
    """A validator of the schema at ``pointer`` (``methods/NAME/result``, ``events/TYPE``, ``$defs/Event``)."""
    doc = schema()
    node: Any = doc
    for part in pointer.split("/"):
        node = node[part]
    root = {"$schema": doc["$schema"], "$defs": doc["$defs"]}
    root.update(node if isinstance(node, dict) else {"not": {}})
    cls = jsonschema.validators.validator_for(root)
    return cls(root)


#: ``(pointer, value as canonical JSON)`` of values that matched, most recent last. A client
#: receives the same answer again and again (a test polls ``thread.get`` until a state shows,
#: a property test reads a thread until two reads agree, a replay resends stored events):
#: jsonschema's validation of a ``thread.get`` answer is about a millisecond of pure Python,
#: its canonical JSON some microseconds. Only a value equal to one that matched is taken
#: from here (sorted keys; ``1``, ``1.0`` and ``true`` stay apart; a NaN or an infinity is
#: not JSON and is validated every time); a mismatch is never remembered, so it fails every
#: time it is received.
_MATCHED: collections.OrderedDict[tuple[str, str], None] = collections.OrderedDict()
_MATCHED_MAX = 4096


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _check(pointer: str, value: Any, what: str) -> None:
    try:
        key = (pointer, _canonical(value))
    except (TypeError, ValueError, OverflowError):  # not plain JSON: validate it every time
        key = None
    if key is not None and key in _MATCHED:
        _MATCHED.move_to_end(key)
        return
    error = jsonschema.exceptions.best_match(_validator(pointer).iter_errors(value))
    if error is not None:
        where = "/".join(map(str, error.absolute_path)) or "(top)"
        raise SchemaMismatch(f"{what} does not match agentd schema's {pointer} at {where}: {error.message}")
    if key is not None:
        _MATCHED[key] = None
        if len(_MATCHED) > _MATCHED_MAX:
            _MATCHED.popitem(last=False)


def check_result(method: str, result: Any) -> None:
    """Hold the answer of ``method`` to its result schema."""
    if method not in schema()["methods"]:
        raise SchemaMismatch(f"{method} answered, but the schema has no such method")
    _check(f"methods/{method}/result", result, f"the answer of {method}")


def check_event(event: dict[str, Any]) -> None:
    """Hold an event (as the client's stream yields it) to the envelope and its type's payload."""
    _check("$defs/Event", event, f"event {event.get('type')!r} (seq {event.get('seq')})")
    event_type = event["type"]
    if event_type not in schema()["events"]:
        raise SchemaMismatch(f"event type {event_type!r} (seq {event.get('seq')}) is not in the schema")
    _check(f"events/{event_type}", event["payload"], f"the payload of {event_type} (seq {event.get('seq')})")

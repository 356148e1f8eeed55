"""The whole protocol as one JSON Schema document (``agentd schema``).

Generated from the Structs that the daemon decodes params with and holds its
answers and events to (``signatures.py``, ``results.py``, ``events.py``), so
it cannot drift from them:

    {"$schema": …, "version": …,
     "methods": {NAME: {"params": SCHEMA, "result": SCHEMA}},
     "events": {TYPE: SCHEMA},
     "$defs": {…}}

``methods.NAME.result`` is ``false`` for a method that never answers with a
result (``run.resume``). ``events.TYPE`` is the schema of that event's
``payload``; ``$defs.Event`` is the envelope every event comes in (the
``params`` of an ``event`` notification) and ``$defs.Resync`` the
``events.resync`` notification's. Clients can generate their types from it.
This module imports neither trio nor the daemon.
"""

from __future__ import annotations

from typing import Any

import msgspec

from . import results, wire_records
from .events import EVENTS, Event, Resync
from .signatures import SIGNATURES

DIALECT = "https://json-schema.org/draft/2020-12/schema"
REF = "#/$defs/{name}"


def document(version: str) -> dict[str, Any]:
    """The protocol's JSON Schema, for agentd ``version``."""
    answered = {name: sig.result for name, sig in SIGNATURES.items() if sig.result is not results.Never}
    types: list[Any] = [sig.params for sig in SIGNATURES.values()]
    types += answered.values()
    types += EVENTS.values()
    # the envelopes, and the record shapes a hand-written reference names (``ThreadEntry``)
    types += [Event, Resync, *wire_records.RECORDS.values(), results.CorruptThread]
    refs, defs = msgspec.json.schema_components(types, ref_template=REF)
    ref_of = dict(zip(types, refs))
    methods: dict[str, Any] = {
        name: {"params": ref_of[sig.params], "result": ref_of[answered[name]] if name in answered else False}
        for name, sig in SIGNATURES.items()
    }
    return {
        "$schema": DIALECT,
        "version": version,
        "methods": methods,
        "events": {event_type: ref_of[struct] for event_type, struct in EVENTS.items()},
        "$defs": defs,
    }

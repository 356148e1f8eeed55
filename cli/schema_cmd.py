"""``agentd schema``: the protocol as one JSON Schema document, on stdout.

The document is made from the protocol's Structs (``agentd.protocol.schema``):
every method's params and result, every event's payload. It needs no daemon
and no data dir, and this module imports nothing of the daemon (nor trio).

``add_schema_command`` is the one hook in the parser.
"""

from __future__ import annotations

import argparse
import json
import sys

from agentd import __version__
from agentd.protocol.schema import document


def add_schema_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("schema", help="print the protocol as one JSON Schema document (methods, results, events)")
    p.set_defaults(fn=cmd_schema)


def cmd_schema(_args: argparse.Namespace) -> int:
    json.dump(document(__version__), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0

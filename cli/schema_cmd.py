"""``agentd schema``: the protocol as one JSON Schema document, on stdout.

The document is made from the protocol's Structs (``agentd.protocol.schema``):
every method's params and result, every event's payload. It needs no daemon
and no data dir, and this module imports nothing of the daemon (nor trio).

The parser names it as ``schema_cmd:cmd_schema`` (commands.py).
"""

from __future__ import annotations

import argparse
import json
import sys

from agentd import __version__
from agentd.protocol.schema import document


def cmd_schema(_args: argparse.Namespace) -> int:
    json.dump(document(__version__), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0

"""The per-turn overhead agentd adds over driving each real runtime directly.

For Codex (``codex app-server``) and Claude Code (``claude -p`` stream-json),
against the repository's fake model servers on loopback, over ≥ 20 turns each:
submit → first text delta, and the runtime's turn end → the client's
``run.completed``, both directly and through agentd. Prints one JSON object
with the medians, the added milliseconds and the targets (≤ 5 ms added to the
first delta, ≤ 2 ms to completion). A runtime whose binary is missing is
reported as skipped. The measuring code lives beside this file, one module per
runtime (``bench_providers_codex.py``, ``bench_providers_claude.py``).

    python scripts/bench_providers.py [--turns 20] [--only codex|claude]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_providers_claude  # noqa: E402
import bench_providers_codex  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20, help="measured turns per runtime and path")
    parser.add_argument("--only", choices=("codex", "claude"))
    args = parser.parse_args()
    if args.turns < 20:
        parser.error("the medians need at least 20 turns")
    out = {"turns": args.turns, "targets_ms": {"first_delta_added": 5.0, "completion_added": 2.0}}
    for name, module in (("codex", bench_providers_codex), ("claude", bench_providers_claude)):
        if args.only and args.only != name:
            continue
        try:
            out[name] = module.run(args.turns)
        except Exception as exc:  # noqa: BLE001 - a missing binary or fake server is reported, not hidden
            out[name] = {"skipped": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

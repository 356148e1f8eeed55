"""The chaos script (scripts/chaos.py) as a smoke test: a few seeded rounds of
faults against a real daemon must leave every invariant intact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAOS = ROOT / "scripts" / "chaos.py"


def run_chaos(seed: int, rounds: int) -> dict:
    """Run the chaos script; return its final summary, failing with its whole
    output if it found a violation."""
    result = subprocess.run(
        [sys.executable, str(CHAOS), "--seed", str(seed), "--rounds", str(rounds), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    output = f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode == 0, f"chaos --seed {seed} exited {result.returncode}\n{output}"
    final = json.loads(result.stdout.strip().splitlines()[-1])
    assert final.get("final") and final["rounds"] == rounds and final["violations"] == 0, output
    return final


def test_chaos_seed_7_five_rounds():
    final = run_chaos(7, 5)
    assert final["commands"] > 0 and sum(final["faults"].values()) > 0


@pytest.mark.parametrize("seed", [11, 12])
def test_chaos_other_seeds(seed):
    run_chaos(seed, 4)

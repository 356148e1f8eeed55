"""The chaos script (scripts/chaos.py) as a smoke test: a few seeded rounds of
faults against a real daemon must leave every invariant intact.

The seeds are chosen (``chaos.py --plan``) so that, together, they inject
every fault kind: restarts, provider kills, dropped streams and commands, a
slow subscriber, and the hostile clients and host of issue 9 — stalled
subscribers of a multi-megabyte answer, unfinished lines, a connection flood,
a double SIGTERM and a full disk."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing

ROOT = Path(__file__).resolve().parents[2]
CHAOS = ROOT / "scripts" / "chaos.py"


def run_chaos(seed: int, rounds: int) -> dict:
    """Run the chaos script; return its final summary, failing with its whole
    output if it found a violation."""
    result = subprocess.run(
        [sys.executable, str(CHAOS), "--seed", str(seed), "--rounds", str(rounds), "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
    )
    output = f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode == 0, f"chaos --seed {seed} exited {result.returncode}\n{output}"
    final = json.loads(result.stdout.strip().splitlines()[-1])
    assert final.get("final") and final["rounds"] == rounds and final["violations"] == 0, output
    return final


def injected(final: dict, kind: str) -> bool:
    """The fault ran, or this host cannot inject it and the run said why."""
    return final["faults"].get(kind, 0) > 0 or (final["faults"].get(kind + "_skipped", 0) > 0 and kind in final["skipped"])


def test_chaos_seed_7_five_rounds():
    final = run_chaos(7, 5)
    assert final["commands"] > 0 and sum(final["faults"].values()) > 0


def test_chaos_restarts_slow_subscriber_and_unfinished_lines():
    final = run_chaos(2400, 4)
    for kind in ("daemon_kill", "daemon_term", "drop_stream", "slow_subscriber", "partial_lines"):
        assert injected(final, kind), final["faults"]


def test_chaos_stalled_subscribers_connection_flood_double_term_and_a_full_disk():
    final = run_chaos(1816, 3)
    for kind in ("stalled_subscribers", "connection_flood", "double_term", "disk_full"):
        assert injected(final, kind), final["faults"]


# -- the script itself ---------------------------------------------------------------------


def load_chaos():
    """scripts/chaos.py as a module (its dataclasses need it in sys.modules)."""
    if "chaos_script" not in sys.modules:
        spec = importlib.util.spec_from_file_location("chaos_script", CHAOS)
        module = importlib.util.module_from_spec(spec)
        sys.modules["chaos_script"] = module
        spec.loader.exec_module(module)
    return sys.modules["chaos_script"]


@pytest.fixture
def chaos_module():
    return load_chaos()


@pytest.fixture
def chaos(chaos_module):
    args = argparse.Namespace(seed=1, rounds=1, json=True, full_every=25, fail_fast=False, keep=False, dir=None,
                              with_fault=None, plan=False)
    run = chaos_module.Chaos(args)
    yield run
    shutil.rmtree(run.socket_dir, ignore_errors=True)


async def test_a_daemon_that_vanishes_while_receipts_are_rechecked_is_a_fatal_violation_not_a_crash(
        chaos_module, chaos, nursery):
    """Issue 9, item 10: the re-check of receipts raised the lost connection
    out of the script with a traceback."""
    listener = trio.socket.socket(trio.socket.AF_UNIX)
    await listener.bind(str(chaos.socket))
    listener.listen(8)

    serving = trio.CancelScope()

    async def vanish() -> None:  # reads a request, then the "daemon" is gone
        with serving:
            while True:
                conn, _ = await listener.accept()
                with conn:
                    await conn.recv(65536)

    nursery.start_soon(vanish)
    for index in range(3):
        command = chaos_module.Command(f"c1.1.{index}", "thread.create", {"title": "t"}, 1, "create")
        command.result = {"threadId": f"thr_{index}", "seq": index + 1}
        chaos.ledger[command.cid] = command
    plan = chaos_module.RoundPlan(1, [], [], [], False, 0, True, [])
    with pytest.raises(chaos_module.Fatal) as caught:
        await chaos.check_receipts(plan)
    assert "while re-checking 3 receipts" in str(caught.value)
    serving.cancel()
    await trio.testing.wait_all_tasks_blocked()
    listener.close()
    chaos.socket.unlink()
    # With nothing listening any more, the next check is fatal too, and says why.
    with pytest.raises(chaos_module.Fatal) as caught:
        await chaos.check_receipts(plan)
    assert chaos_module.fatal_message(caught.value) == str(caught.value)


async def test_a_host_without_unshare_skips_the_full_disk_with_its_reason(monkeypatch, tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import hostile
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    monkeypatch.setattr(hostile.shutil, "which", lambda name: None if name == "unshare" else "/usr/bin/" + name)
    with pytest.raises(hostile.Unavailable, match="unshare is not installed"):
        await hostile.PrivateTmpfs.mount(tmp_path / "data", 1 << 20)


def test_the_plan_is_the_schedule_a_run_plays():
    """``--plan`` prints what the CI seeds above rely on."""
    result = subprocess.run([sys.executable, str(CHAOS), "--seed", "1816", "--rounds", "3", "--plan"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    final = json.loads(result.stdout.strip().splitlines()[-1])
    for kind in ("stalled_subscribers", "connection_flood", "double_term", "disk_full"):
        assert final["faults"].get(kind), final

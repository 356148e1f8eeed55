"""The README's first command, ``agentd demo``, end to end: a fresh daemon,
two runs, their checkpoints, a rollback and its undo — exit 0 only when every
step did what it should."""

from __future__ import annotations

import subprocess
import sys


def test_the_demo_passes(tmp_path):
    result = subprocess.run([sys.executable, "-m", "agentd", "demo", "--data-dir", str(tmp_path / "data")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert "Traceback" not in out + result.stderr
    for line in ("== checkpoints", "run 2 is rolled_back; agent memory: native",
                 "brings the note back", "demo passed"):
        assert line in out, out

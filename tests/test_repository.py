"""The repository itself: no merge left half-done."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(rb"^(<{7} |={7}$|>{7} )", re.MULTILINE)


def test_no_conflict_markers_in_tracked_files():
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode != 0:  # not a git checkout (an unpacked sdist): nothing to check
        return
    marked = []
    for name in listed.stdout.split(b"\0"):
        path = ROOT / name.decode()
        if not name or not path.is_file() or path.suffix in (".msgpack",):
            continue
        if MARKER.search(path.read_bytes()):
            marked.append(name.decode())
    assert not marked, f"merge conflict markers in: {marked}"

"""A small workspace captured without a git listing when nothing was
created, deleted or renamed since the last capture (``checkpoints.quiet``;
SPEC F13, issue 24 §3/§4).

The property: after any sequence of the changes an agent or a person makes —
edits that keep a file's size, edits that keep its mtime, modes, new and
deleted files and folders, renames, names that are not UTF-8, ignored files,
ignore rules that change, a folder swapped for a symlink, a nested
repository — a capture that may use
the snapshot gives the same tree, modes and summary as one that lists the
workspace with git every time; and when nothing changed it runs no git at
all. ``quiet.MARGIN`` is 0 here and each change waits until the file clock
has moved past the last capture, so that the snapshot is used as soon as it
can be (the margin itself is tested on its own, with a shifted clock).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from agentd.actors.checkpoints import CheckpointEngine, checkpoint_ref
from agentd.actors.checkpoints import capture as capture_module
from agentd.actors.checkpoints import quiet
from agentd.actors.checkpoints.shadow import Shadow


def write(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)


def after_the_clock(scratch: Path) -> None:
    """Until a file changed now gets a ctime later than this moment: changes
    made after it cannot share a timestamp with what a capture recorded."""
    now = time.time_ns()
    while True:
        scratch.write_bytes(b"x")
        if scratch.stat().st_ctime_ns > now:
            return


class Counted:
    """The git commands each capture runs (by subcommand)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.commands: list[str] = []
        real = Shadow.run

        async def run(shadow, args, **kwargs):
            self.commands.append(str(args[0]))
            return await real(shadow, args, **kwargs)

        monkeypatch.setattr(Shadow, "run", run)


async def _without_snapshot(shadow, snapshot, excludes, since):
    return None


def seed_workspace(ws: Path) -> None:
    for i in range(8):
        write(ws / "src" / f"m{i}.py", f"module {i}\n")
    write(ws / "src" / "deep" / "x.txt", "x\n")
    write(ws / "README.md", "readme\n")
    write(ws / ".gitignore", "*.log\nbuild/\n")
    write(ws / "build" / "out.bin", "built\n")
    (ws / "empty").mkdir()


def change(rng: random.Random, ws: Path, step: int) -> str:
    """One random change of ``ws`` (the same for the same ``rng`` state); its name."""
    files = sorted(Path(top) / name for top, folders, names in os.walk(ws) for name in names
                   if ".git" not in Path(top).relative_to(ws).parts and "build" not in Path(top).relative_to(ws).parts
                   and name != ".gitignore" and not os.path.islink(os.path.join(top, name)))
    kind = rng.choice(["nothing", "nothing", "same_size", "other_size", "keep_mtime", "chmod", "exec", "new",
                       "new_folder", "delete", "rename", "ignored", "in_ignored", "rules", "symlink_swap",
                       "nested", "folder_mode", "into_empty", "bytes_name"])
    target = rng.choice(files) if files else None
    if kind == "same_size" and target:
        target.write_bytes(b"Z" * len(target.read_bytes()))
    elif kind == "other_size" and target:
        target.write_bytes(target.read_bytes() + f"step {step}\n".encode())
    elif kind == "keep_mtime" and target:
        st = target.stat()
        target.write_bytes(b"Q" * st.st_size)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif kind == "chmod" and target:
        target.chmod(0o600 if target.stat().st_mode & 0o777 != 0o600 else 0o644)
    elif kind == "exec" and target:
        target.chmod(target.stat().st_mode ^ 0o100)
    elif kind == "new":
        write(ws / "src" / f"new{step}.py", f"new {step}\n")
    elif kind == "new_folder":
        write(ws / f"pkg{step}" / "a" / "b.txt", "b\n")
    elif kind == "delete" and target:
        target.unlink()
    elif kind == "rename" and target:
        target.rename(target.with_name(target.name + ".moved"))
    elif kind == "ignored":
        write(ws / "src" / f"trace{step}.log", "log\n")
    elif kind == "in_ignored":
        write(ws / "build" / f"more{step}.bin", "more\n")
    elif kind == "rules":
        rules = (ws / ".gitignore").read_text()
        (ws / ".gitignore").write_text(rules.replace("*.log\n", "") if "*.log" in rules else "*.log\n" + rules)
    elif kind == "symlink_swap" and (ws / "src" / "deep").is_dir() and not (ws / "src" / "deep").is_symlink():
        (ws / "src" / "deep").rename(ws / "deep_moved")
        os.symlink("../deep_moved", ws / "src" / "deep")
    elif kind == "nested" and not (ws / "src" / "deep" / ".git").exists() and (ws / "src" / "deep").is_dir():
        subprocess.run(["git", "init", "-q", str(ws / "src" / "deep")], check=True)
    elif kind == "folder_mode":
        (ws / "src").chmod(0o700 if (ws / "src").stat().st_mode & 0o777 != 0o700 else 0o755)
    elif kind == "bytes_name":  # a name that is not UTF-8, new or edited in place
        with open(os.path.join(os.fsencode(ws / "src"), b"caf\xe9-\xff.txt"), "ab") as odd:
            odd.write(b"bytes\n")
    elif kind == "into_empty":
        write(ws / "empty" / f"e{step}.txt", "e\n")
    else:
        kind = "nothing"
    return kind


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_capture_from_the_snapshot_is_the_one_git_would_list(tmp_path, monkeypatch, seed):
    """F13: the same checkpoints as a git listing, change after change; no git when nothing changed."""
    monkeypatch.setattr(quiet, "MARGIN", 0.0)
    counted = Counted(monkeypatch)
    rng = random.Random(seed)
    quiet_ws, plain_ws = tmp_path / "quiet", tmp_path / "plain"
    seed_workspace(quiet_ws)
    seed_workspace(plain_ws)
    quiet_engine, plain_engine = CheckpointEngine(tmp_path / "store-q"), CheckpointEngine(tmp_path / "store-p")
    scratch = tmp_path / "clock"
    bases = {"q": None, "p": None}
    git_free = 0
    real_listing = capture_module._quiet_listing
    for step in range(24):
        if step:
            after_the_clock(scratch)
            state = rng.getstate()
            kind = change(rng, quiet_ws, step)
            rng.setstate(state)
            assert change(rng, plain_ws, step) == kind
        else:
            kind = "first"
        had_snapshot = bool(quiet_engine._shadows) and next(iter(quiet_engine._shadows.values())).quiet is not None
        counted.commands.clear()
        q = await quiet_engine.capture(quiet_ws, checkpoint_ref("thr_q", "root", step), base=bases["q"])
        quiet_commands = list(counted.commands)
        monkeypatch.setattr(capture_module, "_quiet_listing", _without_snapshot)
        try:
            p = await plain_engine.capture(plain_ws, checkpoint_ref("thr_p", "root", step), base=bases["p"])
        finally:
            monkeypatch.setattr(capture_module, "_quiet_listing", real_listing)
        (q_shadow,) = quiet_engine._shadows.values()
        (p_shadow,) = plain_engine._shadows.values()
        where = f"seed {seed}, step {step} ({kind}): git ran {quiet_commands}"
        assert q.tree == p.tree, where
        assert await q_shadow.commit_modes(q.commit) == await p_shadow.commit_modes(p.commit), where
        assert (q.changed, q.summary.files_changed, q.summary.skipped, q.summary.nested_repos) == (
            p.changed, p.summary.files_changed, p.summary.skipped, p.summary.nested_repos), where
        if kind == "nothing" and had_snapshot:
            assert quiet_commands == [], where
        git_free += not quiet_commands
        bases = {"q": q.commit, "p": p.commit}
    assert git_free >= 2, f"seed {seed}: the snapshot was never used"


async def test_a_quiet_workspace_is_captured_without_git_and_a_change_is_seen(tmp_path, monkeypatch):
    """F13: an unchanged small workspace costs no git spawn; an edit that keeps
    size and mtime costs no listing and is in the checkpoint."""
    monkeypatch.setattr(quiet, "MARGIN", 0.0)
    counted = Counted(monkeypatch)
    ws = tmp_path / "ws"
    seed_workspace(ws)
    engine = CheckpointEngine(tmp_path / "store")
    first = await engine.capture(ws, checkpoint_ref("thr_a", "root", 0))
    second = await engine.capture(ws, checkpoint_ref("thr_a", "root", 1), base=first.commit)
    after_the_clock(tmp_path / "clock")
    counted.commands.clear()
    third = await engine.capture(ws, checkpoint_ref("thr_a", "root", 2), base=second.commit)
    assert counted.commands == []
    assert third.commit == second.commit and not third.changed
    after_the_clock(tmp_path / "clock")
    target = ws / "src" / "m3.py"
    st = target.stat()
    target.write_bytes(b"Z" * st.st_size)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    counted.commands.clear()
    fourth = await engine.capture(ws, checkpoint_ref("thr_a", "root", 3), base=third.commit)
    assert "ls-files" not in counted.commands
    assert [f.path for f in fourth.files] == ["src/m3.py"]
    diff = await engine.diff(ws, fourth.commit, third.commit)
    assert "ZZZ" in diff.patch


async def test_what_changed_within_the_margin_is_listed_with_git(tmp_path, monkeypatch):
    """F13: a snapshot is kept only when everything it records is older than
    ``quiet.MARGIN`` at its capture's start: files just written are listed
    with git again; the same files seen later are trusted."""
    ws = tmp_path / "ws"
    seed_workspace(ws)
    engine = CheckpointEngine(tmp_path / "store")
    first = await engine.capture(ws, checkpoint_ref("thr_m", "root", 0))
    await engine.capture(ws, checkpoint_ref("thr_m", "root", 1), base=first.commit)
    (shadow,) = engine._shadows.values()
    assert shadow.quiet is None  # written a moment ago: within the margin
    later = time.time() + 2 * quiet.MARGIN
    monkeypatch.setattr(capture_module.time, "time", lambda: later)
    await engine.capture(ws, checkpoint_ref("thr_m", "root", 2), base=first.commit)
    assert shadow.quiet is not None


async def test_a_workspace_of_many_folders_gets_no_snapshot(tmp_path, monkeypatch):
    """F13: past ``quiet.MAX_FOLDERS`` folders (an ignored dependency tree, say) the workspace is listed with git."""
    monkeypatch.setattr(quiet, "MARGIN", 0.0)
    monkeypatch.setattr(quiet, "MAX_FOLDERS", 4)
    ws = tmp_path / "ws"
    seed_workspace(ws)
    for i in range(5):
        (ws / "build" / f"dep{i}").mkdir(parents=True)
    engine = CheckpointEngine(tmp_path / "store")
    first = await engine.capture(ws, checkpoint_ref("thr_f", "root", 0))
    after_the_clock(tmp_path / "clock")
    await engine.capture(ws, checkpoint_ref("thr_f", "root", 1), base=first.commit)
    (shadow,) = engine._shadows.values()
    assert shadow.quiet is None
    shutil.rmtree(ws / "build")
    after_the_clock(tmp_path / "clock")
    await engine.capture(ws, checkpoint_ref("thr_f", "root", 2), base=first.commit)
    assert shadow.quiet is not None


async def test_an_ignore_rule_dropped_in_place_brings_its_files_back(tmp_path, monkeypatch):
    """F13: a ``.gitignore`` edited in place changes no folder; the files its
    old rule ignored are the workspace's now, so the capture lists it with git."""
    monkeypatch.setattr(quiet, "MARGIN", 0.0)
    ws = tmp_path / "ws"
    seed_workspace(ws)
    write(ws / "src" / "trace.log", "log\n")
    engine = CheckpointEngine(tmp_path / "store")
    first = await engine.capture(ws, checkpoint_ref("thr_r", "root", 0))
    second = await engine.capture(ws, checkpoint_ref("thr_r", "root", 1), base=first.commit)
    (shadow,) = engine._shadows.values()
    assert shadow.quiet is not None
    after_the_clock(tmp_path / "clock")
    with open(ws / ".gitignore", "r+") as rules:  # in place: the folder's entries stay as they are
        rules.write("#.log\n")
    third = await engine.capture(ws, checkpoint_ref("thr_r", "root", 2), base=second.commit)
    assert sorted(f.path for f in third.files) == [".gitignore", "src/trace.log"]


async def test_an_ignore_file_that_is_not_stored_keeps_the_workspace_listed_with_git(tmp_path, monkeypatch):
    """F13: an ignore file the rules ignore is never stored, so an edit of it
    changes no stored file: such a workspace gets no snapshot, and the files
    its dropped rule ignored are captured."""
    monkeypatch.setattr(quiet, "MARGIN", 0.0)
    ws = tmp_path / "ws"
    seed_workspace(ws)
    write(ws / ".gitignore", "*.log\nbuild/\nsub/.gitignore\n")
    write(ws / "sub" / ".gitignore", "*.tmp\n")
    write(ws / "sub" / "a.tmp", "tmp\n")
    engine = CheckpointEngine(tmp_path / "store")
    first = await engine.capture(ws, checkpoint_ref("thr_i", "root", 0))
    second = await engine.capture(ws, checkpoint_ref("thr_i", "root", 1), base=first.commit)
    (shadow,) = engine._shadows.values()
    assert shadow.quiet is None
    after_the_clock(tmp_path / "clock")
    with open(ws / "sub" / ".gitignore", "r+") as rules:
        rules.write("#.tmp\n")
    third = await engine.capture(ws, checkpoint_ref("thr_i", "root", 2), base=second.commit)
    assert [f.path for f in third.files] == ["sub/a.tmp"]


def test_times_of_whole_seconds_are_not_trusted():
    """F13: a file system that keeps whole seconds (FAT keeps two) could give
    a later change the recorded ctime: no snapshot there, however old."""
    old = 1_700_000_000
    fine = {b"a": (0o100644, 1, 1, 1, old * 10**9 + 123, old * 10**9 + 456, 0, 0)}
    whole = {b"a": (0o100644, 1, 1, 1, old * 10**9, old * 10**9, 0, 0)}
    assert quiet.settled(fine, old + 10)
    assert not quiet.settled(whole, old + 10)
    assert not quiet.settled(fine, old)  # changed after the capture began


def _second_starts(after: int = 0) -> None:
    """Until a second later than ``after`` has begun, by the file clock too
    (it lags ``time.time()`` by up to a tick), with half of it left."""
    while int(time.time()) <= after or not 0.05 < time.time() % 1 < 0.5:
        pass


@pytest.mark.parametrize("snapshot", [True, False])
async def test_an_edit_that_keeps_size_and_mtime_in_the_second_of_a_mode_change_is_seen(tmp_path, monkeypatch, snapshot):
    """F13: git compares whole seconds of ctime and mtime; after an exec bit
    changed and a capture within one second (git records the file's stat), an edit of the same size that puts the
    old mtime back (``touch -r``, ``cp -p``, an extracted archive) reads as
    unchanged to ``ls-files -m`` and to ``update-index``. The capture compares
    the file's own status to the nanosecond with what the last capture saw,
    and has git read such a file again — with and without the snapshot."""
    monkeypatch.setattr(quiet, "MARGIN", 0.0 if snapshot else 1000.0)
    ws = tmp_path / "ws"
    seed_workspace(ws)
    engine = CheckpointEngine(tmp_path / "store")
    first = await engine.capture(ws, checkpoint_ref("thr_k", "root", 0))
    target = ws / "src" / "m3.py"
    written = int(target.stat().st_mtime)
    for attempt in range(20):
        _second_starts(after=written)  # git's racy check is off: the mtime is of an earlier second than the index
        began = int(time.time())
        target.chmod(target.stat().st_mode ^ 0o100)  # git keeps the exec bit: it records the file's stat anew
        base = await engine.capture(ws, checkpoint_ref("thr_k", "root", 2 * attempt + 1), base=first.commit)
        after_the_clock(tmp_path / "clock")
        st = target.stat()
        target.write_bytes(b"Z" * st.st_size)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        if int(time.time()) != began:
            target.write_text("module 3\n")  # the second ran out: put it back and try again
            os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
            continue
        (shadow,) = engine._shadows.values()
        assert (shadow.quiet is not None) == snapshot
        edited = await engine.capture(ws, checkpoint_ref("thr_k", "root", 2 * attempt + 2), base=base.commit)
        assert [f.path for f in edited.files] == ["src/m3.py"]
        return
    pytest.fail("no second was long enough for a chmod, a capture and an edit")

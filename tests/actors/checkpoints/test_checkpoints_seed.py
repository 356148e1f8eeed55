"""A first capture in a git repository seeded from the user's index and
object store (issue 24 §2, SPEC F13/F14): the baseline is exactly the one an
unseeded capture makes, every byte of a dirty tree comes back from it, the
user's ``.git`` is never written (bytes and mtimes), and a checkpoint stays
restorable when the user prunes and rewrites history.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import trio

from agentd.actors.checkpoints import CheckpointEngine, checkpoint_ref
from agentd.actors.checkpoints import seed as seed_module
from agentd.actors.checkpoints.compaction import Compactor
from agentd.actors.checkpoints.modes import Modes
from tests.actors.checkpoints.test_checkpoints_engine import ugit, user_home, write  # noqa: F401 - the fixture

CAP = 4096
COUNT = [0]


def ref(scope: str = "root") -> str:
    COUNT[0] += 1
    return checkpoint_ref("thr_seed", scope, COUNT[0])


def files(root: Path, skip=lambda rel: False) -> dict[str, tuple]:
    """Every file and symlink under ``root`` with its bytes (or target) and
    permission bits; the top ``.git`` and ``skip(rel)`` paths left out."""
    found: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in list(dirnames) + filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if skip(rel):
                if name in dirnames:
                    dirnames.remove(name)
                continue
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(os.path.join(dirpath, name)))
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ("file", Path(dirpath, name).read_bytes(), oct(st.st_mode & 0o777))
    return found


def git_dir_state(git_dir: Path) -> dict[str, tuple]:
    """Every entry of a ``.git``: bytes (files), mtimes and modes (all)."""
    out: dict[str, tuple] = {}
    for path in [git_dir, *git_dir.rglob("*")]:
        st = os.lstat(path)
        content = path.read_bytes() if stat.S_ISREG(st.st_mode) else None
        out[str(path.relative_to(git_dir))] = (content, st.st_mtime_ns, st.st_mode, st.st_size)
    return out


def not_stored(rel: str) -> bool:
    """What no checkpoint holds here: ignored files, the nested repository, the file over the cap."""
    return (rel.startswith(("build", "vendor")) or rel.endswith(".log") or rel in ("big.bin", "sub/big.bin")
            or rel == ".git")


def make_dirty_repo(top: Path, prefix: str = "", *, init: bool = True) -> Path:
    """A repository whose workspace (``top/prefix``) is dirty in every way
    the index can differ from the disk (``init``: make the repository)."""
    if init:
        ugit(top, "init", "-q")
    ws = top / prefix if prefix else top
    for i in range(40):
        write(ws / "src" / f"m{i:02}.py", f"module {i}\n" * 10)
    write(ws / "tool.sh", "#!/bin/sh\necho hi\n", exec_=True)
    write(ws / "secret.env", "TOKEN=1\n")
    os.chmod(ws / "secret.env", 0o600)
    os.symlink("src/m00.py", ws / "link.py")
    write(ws / "keep.log", "tracked, but ignored by the rules\n")
    write(ws / "big.bin", os.urandom(CAP * 2))
    write(ws / "assumed.txt", "as committed\n")
    write(ws / "sparse.txt", "skip-worktree\n")
    write(top / ".gitignore", "build/\n*.log\n")
    if prefix:
        write(top / "elsewhere" / "other.txt", "outside the workspace\n")
    ugit(top, "add", "-A")
    ugit(top, "add", "-f", os.path.join(prefix, "keep.log"))
    ugit(top, "commit", "-q", "-m", "first")
    nested = ws / "vendor" / "lib"
    nested.mkdir(parents=True)
    ugit(nested, "init", "-q")
    write(nested / "lib.py", "lib\n")
    ugit(nested, "add", "-A")
    ugit(nested, "commit", "-q", "-m", "lib")
    sha = ugit(nested, "rev-parse", "HEAD").decode().strip()
    ugit(top, "update-index", "--add", "--cacheinfo", f"160000,{sha},{os.path.join(prefix, 'vendor/lib')}")
    ugit(top, "commit", "-q", "-m", "a submodule")
    ugit(top, "gc", "-q")  # the objects in a pack, as in a real repository
    # Dirty: modified (same size), deleted, staged, untracked, assume-unchanged but changed, intent-to-add,
    # skip-worktree, an exec bit and a mode changed.
    write(ws / "src" / "m01.py", "MODULE 1\n" * 10)
    (ws / "src" / "m02.py").unlink()
    write(ws / "src" / "m03.py", "staged\n")
    ugit(top, "add", os.path.join(prefix, "src/m03.py"))
    write(ws / "notes" / "todo.txt", "untracked\n")
    ugit(top, "update-index", "--assume-unchanged", os.path.join(prefix, "assumed.txt"))
    write(ws / "assumed.txt", "changed on disk\n")
    write(ws / "intent.txt", "intent to add\n")
    ugit(top, "add", "-N", os.path.join(prefix, "intent.txt"))
    ugit(top, "update-index", "--skip-worktree", os.path.join(prefix, "sparse.txt"))
    write(ws / "sparse.txt", "changed while skip-worktree\n")
    os.chmod(ws / "src" / "m04.py", 0o755)
    os.chmod(ws / "src" / "m05.py", 0o640)
    write(ws / "build" / "out.o", os.urandom(1000))
    return ws


async def capture(root: Path, ws: Path, monkeypatch, *, seeded: bool):
    engine = CheckpointEngine(root, max_file_bytes=CAP)
    with monkeypatch.context() as m:
        if not seeded:
            m.setattr(seed_module, "can_seed", lambda shadow: False)
        result = await engine.capture(ws, ref())
    return engine, result


def state(root: Path) -> dict:
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    return json.loads((folder / "state.json").read_text())


def commit_modes(root: Path, commit: str) -> Modes:
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    env = {**os.environ, "GIT_DIR": str(folder / "shadow.git")}
    return Modes.parse(subprocess.run(["git", "cat-file", "commit", commit], env=env, capture_output=True,
                                      check=True).stdout)


@pytest.fixture(params=["top", "subdir", "subdir-cut", "worktree"])
def dirty(request, tmp_path, monkeypatch):
    """The dirty workspace in four layouts: the repository's top, a subfolder
    (its index cut by update-index, or rewritten in Python), a linked worktree."""
    if request.param == "subdir-cut":
        monkeypatch.setattr(seed_module, "GIT_DROP_LIMIT", 0)
    if request.param == "worktree":
        main = tmp_path / "main"
        main.mkdir()
        ugit(main, "init", "-q")
        write(main / "base.txt", "base\n")
        ugit(main, "add", "-A")
        ugit(main, "commit", "-q", "-m", "base")
        top = tmp_path / "wt"
        ugit(main, "worktree", "add", "-q", "-b", "wt", str(top))  # its .git is a file
        ugit(top, "rm", "-q", "base.txt")
        return make_dirty_repo(top, init=False)
    top = tmp_path / "repo"
    top.mkdir()
    return make_dirty_repo(top, "" if request.param == "top" else "pkg/app")


async def test_a_seeded_baseline_is_the_unseeded_one_and_brings_back_every_byte(dirty, tmp_path, monkeypatch):
    ws = dirty
    before = files(ws, skip=not_stored)
    _, plain = await capture(tmp_path / "plain", ws, monkeypatch, seeded=False)
    engine, seeded = await capture(tmp_path / "seeded", ws, monkeypatch, seeded=True)
    assert state(tmp_path / "seeded")["borrowed"], "the capture was seeded"
    assert not state(tmp_path / "plain")["borrowed"]
    assert seeded.tree == plain.tree
    assert commit_modes(tmp_path / "seeded", seeded.commit) == commit_modes(tmp_path / "plain", plain.commit)
    assert seeded.summary == plain.summary
    assert {(s.path, s.reason) for s in seeded.summary.skipped} == {("big.bin", "too_large")}
    assert seeded.summary.nested_repos == ["vendor/lib/"]
    # The agent changes everything; the baseline brings every byte and mode back.
    write(ws / "src" / "m01.py", "agent\n")
    (ws / "src" / "m06.py").unlink()
    write(ws / "src" / "new.py", "new\n")
    os.chmod(ws / "secret.env", 0o644)
    write(ws / "secret.env", "TOKEN=2\n")
    (ws / "link.py").unlink()
    write(ws / "link.py", "not a link now\n")
    (ws / "notes" / "todo.txt").unlink()
    write(ws / "assumed.txt", "the agent's\n")
    result = await engine.restore(ws, seeded.commit, safety_ref=ref("pre_rollback"))
    assert result.complete, result.not_restored
    assert files(ws, skip=not_stored) == before
    assert (ws / "build" / "out.o").exists() and (ws / "vendor" / "lib" / "lib.py").read_text() == "lib\n"


async def test_the_users_repository_is_never_written(tmp_path, monkeypatch):
    top = tmp_path / "repo"
    top.mkdir()
    ws = make_dirty_repo(top)
    (top / ".git" / "objects" / "info").mkdir(exist_ok=True)
    before = git_dir_state(top / ".git")
    engine = CheckpointEngine(tmp_path / "store", max_file_bytes=CAP)
    base = await engine.capture(ws, ref())
    # Bytes the user's pack already holds, in new and changed files: git writing them with the user's
    # store in view would touch the user's pack's mtime ("freshen").
    write(ws / "copy.py", (ws / "src" / "m07.py").read_bytes())
    write(ws / "src" / "m01.py", "module 1\n" * 10)
    run1 = await engine.capture(ws, ref(), base=base.commit)
    assert run1.summary.files_changed == 2
    await engine.restore(ws, base.commit, safety_ref=ref("pre_rollback"))
    await engine.diff(ws, run1.commit, base.commit)
    await engine.compact(ws)
    assert not state(tmp_path / "store")["borrowed"]
    assert git_dir_state(top / ".git") == before


async def test_a_restore_after_the_user_prunes_works_before_and_after_the_compaction(tmp_path, monkeypatch):
    top = tmp_path / "repo"
    top.mkdir()
    ws = make_dirty_repo(top)
    before = files(ws, skip=not_stored)
    engine = CheckpointEngine(tmp_path / "store", max_file_bytes=CAP)
    base = await engine.capture(ws, ref())
    # Before the compaction: what the seed borrowed is what the user's index and refs reach, which gc keeps.
    ugit(top, "gc", "-q", "--prune=now")
    write(ws / "src" / "m01.py", "agent\n")
    first = await engine.restore(ws, base.commit, safety_ref=ref("pre_rollback"))
    assert first.complete and files(ws, skip=not_stored) == before
    await engine.compact(ws)
    assert not state(tmp_path / "store")["borrowed"]
    # After it: the user rewrites history, expires the reflog, prunes — and then removes the repository.
    ugit(top, "update-index", "--no-assume-unchanged", "assumed.txt")
    ugit(top, "checkout", "-q", "--orphan", "rewritten")
    ugit(top, "read-tree", "--empty")
    ugit(top, "commit", "-q", "--allow-empty", "-m", "nothing")
    ugit(top, "branch", "-D", "master" if b"master" in ugit(top, "branch") else "main")
    ugit(top, "stash", "clear")
    ugit(top, "reflog", "expire", "--expire=now", "--all")
    ugit(top, "gc", "-q", "--prune=now")
    shutil.rmtree(top / ".git")
    for path in (ws / "src").iterdir():
        path.write_text("rewritten\n")
    second = await engine.restore(ws, base.commit, safety_ref=ref("pre_rollback"))
    assert second.complete, second.not_restored
    assert files(ws, skip=not_stored) == before


async def test_the_compactor_stops_a_seeded_shadow_borrowing_at_once(tmp_path):
    top = tmp_path / "repo"
    top.mkdir()
    ws = make_dirty_repo(top)
    engine = CheckpointEngine(tmp_path / "store", max_file_bytes=CAP)
    compactor = Compactor(engine, after=100, delay=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(compactor.serve)
        await engine.capture(ws, ref())
        assert state(tmp_path / "store")["borrowed"]
        await compactor.wait_done(engine.workspace_key(ws), 1)
        nursery.cancel_scope.cancel()
    assert not state(tmp_path / "store")["borrowed"]


def test_index_versions_2_3_and_4_read_alike(tmp_path):
    from agentd.actors.checkpoints.userindex import read_index

    ws = tmp_path / "repo"
    ws.mkdir()
    ugit(ws, "init", "-q")
    for i in range(30):
        write(ws / "deep" / f"d{i % 3}" / f"name-{i:02}-{'x' * (i * 7)}.txt", f"{i}\n")
    ugit(ws, "add", "-A")
    ugit(ws, "commit", "-q", "-m", "first")
    found = {}
    for version in ("2", "3", "4"):
        ugit(ws, "update-index", "--index-version", version)
        entries = read_index((ws / ".git" / "index").read_bytes())
        found[version] = (entries.paths, entries.sizes, entries.version)
    assert found["2"][:2] == found["3"][:2] == found["4"][:2]
    assert found["4"][2] == 4  # (git writes 2 for 3 when no entry needs extended flags)
    assert found["2"][0] == ugit(ws, "ls-files", "-z").split(b"\0")[:-1]


@pytest.mark.parametrize("how", ["split", "no-checksum"])
async def test_an_index_seeding_cannot_read_falls_back_and_one_without_checksum_is_seeded(how, tmp_path):
    top = tmp_path / "repo"
    top.mkdir()
    ws = make_dirty_repo(top)
    index = top / ".git" / "index"
    if how == "split":
        ugit(top, "update-index", "--split-index")
    else:  # as a newer git's index.skipHash writes it
        data = index.read_bytes()
        index.write_bytes(data[:-20] + bytes(20))
    before = files(ws, skip=not_stored)
    engine = CheckpointEngine(tmp_path / "store", max_file_bytes=CAP)
    base = await engine.capture(ws, ref())
    assert bool(state(tmp_path / "store")["borrowed"]) == (how == "no-checksum")
    write(ws / "src" / "m01.py", "agent\n")
    result = await engine.restore(ws, base.commit, safety_ref=ref("pre_rollback"))
    assert result.complete and files(ws, skip=not_stored) == before


@pytest.mark.parametrize("how", ["symlinked-folder", "same-size-and-mtime", "index-without-nanoseconds"])
async def test_the_seeds_own_stat_check_misses_no_change_git_would_see(how, tmp_path, monkeypatch):
    """The seeded capture reads each file's stat once and compares it with
    the user's index itself (``seedscan``, in place of ``diff-files``): a
    folder swapped for a symlink, bytes changed with the recorded size and
    mtime put back (only the ctime tells), or an index whose writer kept no
    nanoseconds all give the unseeded capture's tree, and the bytes come back."""
    top = tmp_path / "repo"
    top.mkdir()
    ws = make_dirty_repo(top)
    # An hour old, and the index refreshed since: its entries are not racy, so their stat data decides.
    old = int((os.stat(top / ".git" / "index").st_mtime - 3600) * 1e9)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            os.utime(os.path.join(dirpath, name), ns=(old, old), follow_symlinks=False)
    subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=top, env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"},
                   capture_output=True)
    if how == "symlinked-folder":
        os.rename(ws / "src", ws / "src2")
        os.symlink("src2", ws / "src")
    elif how == "same-size-and-mtime":
        path = ws / "src" / "m07.py"
        st = os.stat(path)
        path.write_bytes(b"M" + path.read_bytes()[1:])
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        index = top / ".git" / "index"
        st = os.stat(index)
        data = bytearray(index.read_bytes())
        from agentd.actors.checkpoints.userindex import read_index

        for start, _ in read_index(bytes(data)).spans:
            data[start + 4:start + 8] = bytes(4)  # ctime nanoseconds
            data[start + 12:start + 16] = bytes(4)  # mtime nanoseconds
        body = bytes(data[:-20])
        import hashlib

        index.write_bytes(body + hashlib.sha1(body).digest())
        os.utime(index, ns=(st.st_atime_ns, st.st_mtime_ns))
        write(ws / "src" / "m08.py", "module 8\n" * 9 + "MODULE 8\n")  # same size, new mtime
    before = files(ws, skip=not_stored)
    _, plain = await capture(tmp_path / "plain", ws, monkeypatch, seeded=False)
    engine, seeded = await capture(tmp_path / "seeded", ws, monkeypatch, seeded=True)
    assert state(tmp_path / "seeded")["borrowed"], "the capture was seeded"
    assert seeded.tree == plain.tree
    assert commit_modes(tmp_path / "seeded", seeded.commit) == commit_modes(tmp_path / "plain", plain.commit)
    for path in (ws / "src").iterdir():
        if path.is_file():
            path.write_text("agent\n")
    result = await engine.restore(ws, seeded.commit, safety_ref=ref("pre_rollback"))
    assert result.complete, result.not_restored
    assert files(ws, skip=not_stored) == before


async def test_tracked_files_the_rules_ignore_are_found_as_in_the_real_work_tree(tmp_path, monkeypatch):
    """F13 (issue 24 §2): the seed lists the tracked files the ignore rules
    ignore against a mirror of the ignore files (``rulesmirror``): tracked
    files in a folder a folder-only rule ignores, ones a deeper ``.gitignore``
    (tracked, or untracked and new) ignores, a symlinked ``.gitignore`` git
    does not read, and a tracked file that became a folder a rule names all
    end as in the unseeded capture."""
    top = tmp_path / "repo"
    top.mkdir()
    ugit(top, "init", "-q")
    write(top / ".gitignore", "out/\n*.tmp\n")
    for rel in ("out/keep.txt", "src/a.tmp", "src/deep/x.gen", "src/deep/y.txt", "lib/z.gen", "docs/d.txt",
                "was_file"):
        write(top / rel, f"{rel}\n")
    write(top / "src" / "deep" / ".gitignore", "*.gen\n")
    write(top / "elsewhere.txt", "*.txt\n")
    ugit(top, "add", "-A")
    ugit(top, "add", "-f", "out/keep.txt", "src/a.tmp", "src/deep/x.gen")
    ugit(top, "commit", "-q", "-m", "first")
    write(top / "lib" / ".gitignore", "z.gen\n")  # untracked, and new
    os.symlink("../elsewhere.txt", top / "docs" / ".gitignore")  # git does not follow it
    (top / "was_file").unlink()
    write(top / "was_file" / "inner.txt", "now a folder\n")
    write(top / ".gitignore", "out/\n*.tmp\nwas_file/\n")
    before = files(top, skip=lambda rel: rel.startswith(("out", "was_file")) or rel.endswith((".tmp", ".gen")))
    _, plain = await capture(tmp_path / "plain", top, monkeypatch, seeded=False)
    engine, seeded = await capture(tmp_path / "seeded", top, monkeypatch, seeded=True)
    assert state(tmp_path / "seeded")["borrowed"], "the capture was seeded"
    assert seeded.tree == plain.tree
    (top / "docs" / "d.txt").write_text("changed\n")
    result = await engine.restore(top, seeded.commit, safety_ref=ref("pre_rollback"))
    assert result.complete, result.not_restored
    assert files(top, skip=lambda rel: rel.startswith(("out", "was_file")) or rel.endswith((".tmp", ".gen"))) == before


async def test_what_a_cut_off_seed_leaves_in_the_shadow_is_swept(tmp_path, monkeypatch):
    """A daemon killed during a seeded capture leaves its pinned index copy
    and its ignore-files mirror in the shadow folder; the next use of the
    workspace removes both (never anything in the workspace)."""
    top = tmp_path / "repo"
    top.mkdir()
    ws = make_dirty_repo(top)
    engine, _ = await capture(tmp_path / "store", ws, monkeypatch, seeded=True)
    (folder,) = [p for p in (tmp_path / "store").iterdir() if p.is_dir()]
    (folder / "shadow.git" / "index.agentd-pinned").write_bytes(b"left by a killed daemon")
    write(folder / "rules.agentd-mirror" / "src" / ".gitignore", "*\n")
    before = files(ws, skip=not_stored)
    await engine.capture(ws, ref())
    assert not (folder / "shadow.git" / "index.agentd-pinned").exists()
    assert not (folder / "rules.agentd-mirror").exists()
    assert files(ws, skip=not_stored) == before

"""The checkpoint engine (agentd.actors.checkpoints) on real git and real
folders: captures, diffs and restores that give back exactly a checkpoint's
files and never touch the user's ``.git``, ignored files, files over the size
cap or nested repositories (SPEC F13/F14, issue 10, CHECKPOINTS.md).

The last test is a Hypothesis property test over random writes, deletes,
captures, restores and undos in three layouts (a plain folder, a repository,
a subfolder of a repository): after every restore the workspace holds exactly
the restored checkpoint's files, ignored files excepted (and unchanged).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from agentd.actors.checkpoints import (
    CheckpointEngine,
    CheckpointError,
    CheckpointExistsError,
    GitUnavailableError,
    ShadowMismatchError,
    UnknownCheckpointError,
    WorkspaceBusyError,
    WorkspaceError,
    WorkspaceRefusedError,
    checkpoint_ref,
)
from agentd.actors.checkpoints import restore as restore_module
from agentd.actors.checkpoints.errors import GitCommandError
from agentd.actors.checkpoints.shadow import TEMP_PREFIX


# -- helpers ----------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def user_home(tmp_path, monkeypatch):
    """A private $HOME (no host git config) and no inherited GIT_* variable."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    for name in list(os.environ):
        if name.startswith("GIT_"):
            monkeypatch.delenv(name)
    return home


def ugit(cwd, *args: str) -> bytes:
    """The user's own git (their $HOME config; a fixed identity)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="u", GIT_AUTHOR_EMAIL="u@x", GIT_COMMITTER_NAME="u", GIT_COMMITTER_EMAIL="u@x",
               GIT_CONFIG_NOSYSTEM="1")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True).stdout


def write(path: Path, data: bytes | str, *, exec_: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(0o755 if exec_ else 0o644)


def tree_hash(root: Path) -> dict[str, str]:
    """Every entry under ``root``: file bytes, symlink targets, directories."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = str(full.relative_to(root))
            if full.is_symlink():
                found[rel] = "link:" + os.readlink(full)
            elif full.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = hashlib.sha256(full.read_bytes()).hexdigest() + oct(full.stat().st_mode)
    return found


def snapshot(root: Path, *, skip=lambda rel: False) -> dict[str, tuple]:
    """The workspace's files as a checkpoint holds them: (kind, bytes, exec)
    per path; ``.git`` at the top, empty directories and ``skip(rel)`` paths left out."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if skip(rel):
                if name in dirnames:
                    dirnames.remove(name)
                continue
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(full))
            elif stat.S_ISREG(st.st_mode):
                found[rel] = ("file", Path(full).read_bytes(), bool(st.st_mode & 0o100))
    return found


def temp_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob(TEMP_PREFIX.decode() + "*")]


def shadow_git(root: Path) -> Path:
    (folder,) = [p for p in root.iterdir() if p.is_dir()]
    return folder / "shadow.git"


def shadow_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in shadow_git(root).rglob("*") if p.is_file())


def shadow_objects(root: Path) -> int:
    out = subprocess.run(["git", "count-objects", "-v"], env={**os.environ, "GIT_DIR": str(shadow_git(root))},
                         capture_output=True, text=True, check=True).stdout
    counts = dict(line.split(": ") for line in out.splitlines())
    return int(counts["count"]) + int(counts["in-pack"])


def make_user_repo(ws: Path) -> None:
    """A repository with a commit, a stash entry, a staged and an untracked file."""
    ws.mkdir(parents=True, exist_ok=True)
    ugit(ws, "init", "-q")
    write(ws / "README.md", "# project\n")
    write(ws / "src" / "main.py", "print('hi')\n" * 20)
    write(ws / ".gitignore", "build/\n*.log\n")
    ugit(ws, "add", "-A")
    ugit(ws, "commit", "-q", "-m", "first")
    write(ws / "README.md", "# project\nstashed edit\n")
    ugit(ws, "stash", "-q")
    write(ws / "staged.txt", "staged\n")
    ugit(ws, "add", "staged.txt")
    write(ws / "notes.txt", "untracked notes\n")


def make_build_output(ws: Path, megabytes: int = 2) -> None:
    for i in range(megabytes):
        write(ws / "build" / f"obj{i}.o", os.urandom(1 << 20))
    write(ws / "app.log", "log line\n")


def ignored(rel: str) -> bool:
    return rel == "build" or rel.startswith("build/") or rel.endswith(".log")


REF = 0


def ref(scope: str = "root") -> str:
    """A fresh checkpoint ref."""
    global REF
    REF += 1
    return checkpoint_ref("thr_test", scope, REF)


# -- the scenario of issue 10, in three layouts -----------------------------------------------------


@pytest.fixture(params=["repo", "plain", "subdir"])
def layout(request, tmp_path):
    """(workspace, the user's .git or None) for each layout."""
    if request.param == "repo":
        ws = tmp_path / "ws"
        make_user_repo(ws)
        return ws, ws / ".git"
    if request.param == "subdir":
        top = tmp_path / "mono"
        make_user_repo(top)
        write(top / ".gitignore", "build/\n*.log\n*.env\n")  # an uncommitted rule of the parent
        ws = top / "pkg" / "app"
        write(ws / "README.md", "# project\n")
        write(ws / "src" / "main.py", "print('hi')\n" * 20)
        write(ws / "notes.txt", "untracked notes\n")
        write(ws / "secret.env", "TOKEN=1\n")  # ignored by the parent's .gitignore
        return ws, top / ".git"
    ws = tmp_path / "ws"
    write(ws / "README.md", "# project\n")
    write(ws / "src" / "main.py", "print('hi')\n" * 20)
    write(ws / ".gitignore", "build/\n*.log\n")
    write(ws / "notes.txt", "untracked notes\n")
    return ws, None


async def test_three_captures_restore_to_the_first_and_undo(layout, tmp_path):
    ws, user_git = layout
    make_build_output(ws)
    skip = lambda rel: ignored(rel) or rel.endswith(".env")  # noqa: E731
    user_git_before = tree_hash(user_git) if user_git else None
    build_before = tree_hash(ws / "build") | {"mtimes": str([p.stat().st_mtime_ns for p in (ws / "build").iterdir()])}
    engine = CheckpointEngine(tmp_path / "checkpoints")

    c1 = await engine.capture(ws, ref())
    snap1 = snapshot(ws, skip=skip)
    assert c1.changed and c1.base is None and c1.summary.skipped == []

    # writes, a delete, a rename, binary files, an exec bit, a symlink, empty dirs
    write(ws / "README.md", "# project\nmore\n")
    (ws / "notes.txt").unlink()
    (ws / "src" / "main.py").rename(ws / "src" / "app.py")
    write(ws / "img.bin", bytes(range(256)) * 10)
    write(ws / "run.sh", "#!/bin/sh\necho run\n", exec_=True)
    os.symlink("README.md", ws / "link")
    (ws / "empty" / "sub").mkdir(parents=True)
    write(ws / "docs" / "a.md", "a\n")
    c2 = await engine.capture(ws, ref(), base=c1.commit)
    files = {f.path: f for f in c2.files}
    assert files["src/app.py"].change == "renamed" and files["src/app.py"].old_path == "src/main.py"
    assert files["img.bin"].change == "added" and files["img.bin"].binary
    assert files["README.md"].change == "modified" and files["README.md"].insertions == 1
    assert files["notes.txt"].change == "deleted" and files["notes.txt"].deletions == 1
    assert {"run.sh", "link", "docs/a.md"} <= set(files) and not any(p.startswith("empty") for p in files)
    assert c2.summary.files_changed == len(c2.files)
    assert c2.summary.insertions == sum(f.insertions for f in c2.files)

    # binary change, delete, a directory becomes a file, deep new dirs, mode change
    write(ws / "img.bin", os.urandom(3000))
    (ws / "link").unlink()
    shutil.rmtree(ws / "docs")
    write(ws / "docs", "docs is a file now\n")
    write(ws / "x" / "y" / "z.txt", "deep\n")
    (ws / "run.sh").chmod(0o644)
    c3 = await engine.capture(ws, ref(), base=c2.commit)
    snap3 = snapshot(ws, skip=skip)
    assert c3.changed and {f.path for f in c3.files} >= {"img.bin", "link", "docs", "docs/a.md", "x/y/z.txt", "run.sh"}

    back = await engine.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    assert back.complete and back.not_restored == [] and back.error is None
    assert snapshot(ws, skip=skip) == snap1
    assert not (ws / "x").exists() and not (ws / "docs").exists()  # parents it emptied are gone
    assert (ws / "empty" / "sub").is_dir()  # a directory it did not empty stays
    assert back.safety.tree == c3.tree
    assert set(back.written) | set(back.deleted) == {f.path for f in (await engine.diff(ws, c1.commit, c3.commit)).files} | {"src/main.py", "src/app.py"}
    assert temp_files(ws) == []

    undo = await engine.restore(ws, back.safety.commit, safety_ref=ref("pre_rollback"))
    assert undo.complete and snapshot(ws, skip=skip) == snap3

    if user_git is not None:
        assert tree_hash(user_git) == user_git_before, "the user's .git changed"
        assert b"stash@{0}" in ugit(ws, "stash", "list")
    assert tree_hash(ws / "build") | {"mtimes": str([p.stat().st_mtime_ns for p in (ws / "build").iterdir()])} == build_before
    assert (ws / "app.log").read_text() == "log line\n"
    if (ws / "secret.env").exists():
        assert "secret.env" not in {f.path for f in (await engine.diff(ws, c3.commit)).files}


async def test_ignored_build_output_is_never_copied_nor_removed(tmp_path):
    ws = tmp_path / "ws"
    make_user_repo(ws)
    for i in range(40):  # 40 MB of incompressible build output
        write(ws / "build" / "deep" / f"out{i}.o", os.urandom(1 << 20))
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    write(ws / "README.md", "changed\n")
    await engine.capture(ws, ref(), base=c1.commit)
    assert shadow_bytes(tmp_path / "checkpoints") < 1 << 20
    assert shadow_objects(tmp_path / "checkpoints") < 20
    before = tree_hash(ws / "build")
    result = await engine.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    assert result.complete and tree_hash(ws / "build") == before


async def test_nested_repositories_are_reported_and_never_touched(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "top.txt", "top\n")
    nested = ws / "vendor" / "lib"
    make_user_repo(nested)
    (ws / "empty_repo").mkdir()
    ugit(ws / "empty_repo", "init", "-q")  # no commit: `git add -A` fails on these
    write(ws / "empty_repo" / "f.txt", "f\n")
    index = nested / ".git" / "index"
    mtime = index.stat().st_mtime_ns
    before = tree_hash(nested) | tree_hash(ws / "empty_repo")
    engine = CheckpointEngine(tmp_path / "checkpoints")

    c1 = await engine.capture(ws, ref())
    assert c1.summary.nested_repos == ["empty_repo/", "vendor/lib/"]
    write(nested / "README.md", "edited inside the nested repository\n")
    write(ws / "top.txt", "top 2\n")
    c2 = await engine.capture(ws, ref(), base=c1.commit)
    assert [f.path for f in c2.files] == ["top.txt"]
    assert c2.summary.nested_repos == ["empty_repo/", "vendor/lib/"]
    result = await engine.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    assert result.complete and (ws / "top.txt").read_text() == "top\n"
    assert (nested / "README.md").read_text() == "edited inside the nested repository\n"
    after = tree_hash(nested) | tree_hash(ws / "empty_repo")
    assert after == {**before, "README.md": after["README.md"]}
    assert index.stat().st_mtime_ns == mtime

    # A repository created over a captured folder: from then on it is left alone.
    write(ws / "pkg" / "a.txt", "a\n")
    c3 = await engine.capture(ws, ref(), base=c2.commit)
    ugit(ws / "pkg", "init", "-q")
    write(ws / "pkg" / "a.txt", "a, inside a repository now\n")
    c4 = await engine.capture(ws, ref(), base=c3.commit)
    assert "pkg/" in c4.summary.nested_repos
    result = await engine.restore(ws, c3.commit, safety_ref=ref("pre_rollback"))
    assert (ws / "pkg" / "a.txt").read_text() == "a, inside a repository now\n"
    assert {(n.path, n.reason) for n in result.not_restored} <= {("pkg/a.txt", "nested_repository"),
                                                                 ("pkg/a.txt", "exists_unstored")}


async def test_a_file_over_the_cap_is_reported_and_left_alone(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "data.bin", b"small")
    write(ws / "a.txt", "a\n")
    engine = CheckpointEngine(tmp_path / "checkpoints", max_file_bytes=1000)
    c1 = await engine.capture(ws, ref())
    assert c1.summary.skipped == []
    big = os.urandom(5000)
    write(ws / "data.bin", big)
    write(ws / "huge.bin", os.urandom(2000))
    c2 = await engine.capture(ws, ref(), base=c1.commit)
    skipped = {s.path: (s.reason, s.size) for s in c2.summary.skipped}
    assert skipped == {"data.bin": ("too_large", 5000), "huge.bin": ("too_large", 2000)}
    assert [f.path for f in c2.files] == ["data.bin"] and c2.files[0].change == "deleted"
    assert shadow_bytes(tmp_path / "checkpoints") < 20_000
    result = await engine.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    assert [(n.path, n.reason) for n in result.not_restored] == [("data.bin", "exists_unstored")]
    assert not result.complete
    assert (ws / "data.bin").read_bytes() == big and (ws / "huge.bin").exists()


async def test_user_config_hooks_and_signing_do_not_leak_and_bytes_round_trip(tmp_path, user_home):
    hooks = user_home / "hooks"
    write(hooks / "pre-commit", "#!/bin/sh\nexit 1\n", exec_=True)
    write(user_home / ".gitconfig", f"[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = false\n"
                                    f"[core]\n\thooksPath = {hooks}\n\tautocrlf = true\n\texcludesFile = ~/.myignore\n")
    write(user_home / ".myignore", "*.secret\n")
    ws = tmp_path / "ws"
    write(ws / ".gitattributes", "* text=auto eol=lf\n")
    crlf = b"line one\r\nline two\r\n"
    write(ws / "win.txt", crlf)
    write(ws / "token.secret", "s3cret\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    all_files = {f.path for f in (await engine.diff(ws, c1.commit)).files}
    assert all_files == {".gitattributes", "win.txt"}  # the user's excludesFile is honoured
    write(ws / "win.txt", "changed\n")
    result = await engine.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    assert result.complete and (ws / "win.txt").read_bytes() == crlf


async def test_inherited_git_variables_do_not_reach_the_shadow(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    make_user_repo(ws)
    before = tree_hash(ws / ".git")
    monkeypatch.setenv("GIT_DIR", str(ws / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(ws / ".git" / "index"))
    monkeypatch.setenv("GIT_WORK_TREE", str(ws))
    monkeypatch.setenv("GIT_OBJECT_DIRECTORY", str(ws / ".git" / "objects"))
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    write(ws / "new.txt", "new\n")
    c2 = await engine.capture(ws, ref(), base=c1.commit)
    assert [f.path for f in c2.files] == ["new.txt"]
    await engine.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    assert not (ws / "new.txt").exists()
    assert tree_hash(ws / ".git") == before


async def test_names_git_would_quote_or_glob(tmp_path):
    ws = tmp_path / "ws"
    names = ["sp ace.txt", "ünï.txt", "-dash", "star*.txt", "[x].txt", "new\nline", "#hash", "!bang", "tail "]
    for name in names:
        write(ws / "d" / name, name)
    raw = os.path.join(os.fsencode(ws), b"caf\xe9.txt")
    with open(raw, "wb") as f:
        f.write(b"latin-1 name")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    snap = snapshot(ws)
    assert len(snap) == len(names) + 1
    shutil.rmtree(ws / "d")
    os.remove(raw)
    c2 = await engine.capture(ws, ref(), base=c1.commit)
    assert c2.summary.files_changed == len(names) + 1
    result = await engine.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    assert result.complete and snapshot(ws) == snap


async def test_workspace_in_a_folder_the_parent_repository_ignores(tmp_path, user_home):
    # A home-folder repository that ignores everything must not hide the workspace.
    top = tmp_path / "dotfiles"
    top.mkdir()
    ugit(top, "init", "-q")
    write(top / ".gitignore", "*\n")
    ws = top / "projects" / "app"
    write(ws / "a.txt", "a\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    assert [f.path for f in (await engine.diff(ws, c1.commit)).files] == ["a.txt"]


async def test_a_layout_change_keeps_old_checkpoints_valid(tmp_path):
    top = tmp_path / "outer"
    ws = top / "app"
    write(ws / "a.txt", "a\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    ugit(top, "init", "-q")  # the workspace is now a subfolder of a repository
    write(top / ".gitignore", "*.tmp\n")
    write(ws / "b.txt", "b\n")
    write(ws / "c.tmp", "ignored by the parent now\n")
    c2 = await engine.capture(ws, ref(), base=c1.commit)
    assert [f.path for f in c2.files] == ["b.txt"]
    result = await engine.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    assert result.complete and snapshot(ws) == {"a.txt": ("file", b"a\n", False), "c.tmp": snapshot(ws)["c.tmp"]}


async def test_files_a_new_ignore_rule_covers_leave_the_checkpoints(tmp_path):
    top = tmp_path / "mono"
    make_user_repo(top)
    ws = top / "app"
    write(ws / "keep.txt", "keep\n")
    write(ws / "out.cache", "generated\n")
    write(ws / "gen" / "x.txt", "generated\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    assert {f.path for f in (await engine.diff(ws, c1.commit)).files} == {"keep.txt", "out.cache", "gen/x.txt"}
    write(top / ".gitignore", "build/\n*.log\n*.cache\n")  # a rule above the workspace
    write(ws / ".gitignore", "gen/\n")  # and one inside it
    c2 = await engine.capture(ws, ref(), base=c1.commit)
    assert {(s.path, s.reason) for s in c2.summary.skipped} == {("out.cache", "ignored"), ("gen/x.txt", "ignored")}
    assert {f.path: f.change for f in c2.files} == {".gitignore": "added", "out.cache": "deleted",
                                                    "gen/x.txt": "deleted"}
    # a restore to before the rule writes nothing over them and removes nothing: files with
    # other bytes than the checkpoint's are left alone, files already as it has them count as restored
    write(ws / "out.cache", "generated again, in no checkpoint\n")
    before = (ws / "gen" / "x.txt").stat().st_mtime_ns
    result = await engine.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    assert {(n.path, n.reason) for n in result.not_restored} == {("out.cache", "exists_unstored")}
    assert result.written == ["gen/x.txt"] and (ws / "gen" / "x.txt").stat().st_mtime_ns == before
    assert (ws / "out.cache").read_text() == "generated again, in no checkpoint\n"
    assert result.deleted == [".gitignore"]


async def test_a_bad_base_or_target_is_refused(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    with pytest.raises(UnknownCheckpointError):
        await engine.capture(ws, ref(), base="0123456789abcdef0123456789abcdef01234567")
    with pytest.raises(CheckpointError) as caught:
        await engine.capture(ws, ref(), base="--output=/tmp/x")
    assert caught.value.reason == "bad_ref"
    with pytest.raises(UnknownCheckpointError):
        await engine.restore(ws, "abcdef12", safety_ref=ref("pre_rollback"))
    assert sorted(await engine.refs(ws)) == []  # nothing was captured by a refused restore
    assert not os.path.exists("/tmp/x")


# -- diff -------------------------------------------------------------------------------------------


async def test_diff_cuts_the_patch_and_keeps_every_file(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    for i in range(30):
        write(ws / f"f{i:02}.txt", "ünïcode line\n" * 200)
    c2 = await engine.capture(ws, ref(), base=c1.commit)
    full = await engine.diff(ws, c2.commit, c1.commit, max_bytes=10 << 20)
    assert not full.truncated and len(full.files) == 30 and full.files[0].insertions == 200
    cut = await engine.diff(ws, c2.ref, c1.ref, max_bytes=1001)
    assert cut.truncated and len(cut.patch.encode()) <= 1001 and "\ufffd" not in cut.patch
    assert full.patch.startswith(cut.patch) and cut.files == full.files
    with pytest.raises(UnknownCheckpointError):
        await engine.diff(ws, "0123456789abcdef0123456789abcdef01234567")
    with pytest.raises(CheckpointError):
        await engine.diff(ws, "--output=/tmp/x")


# -- refs -------------------------------------------------------------------------------------------


async def test_refs_are_create_only_and_an_unchanged_capture_reuses_its_base(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    first = ref()
    c1 = await engine.capture(ws, first)
    with pytest.raises(CheckpointExistsError):
        await engine.capture(ws, first)
    c2 = await engine.capture(ws, ref(), base=c1.commit)
    assert not c2.changed and c2.commit == c1.commit and c2.files == []
    refs = await engine.refs(ws, "refs/agentd/thr_test/")
    assert refs[first] == c1.commit and refs[c2.ref] == c1.commit
    await engine.delete_refs(ws, [c2.ref])
    await engine.compact(ws)
    assert c2.ref not in await engine.refs(ws)
    with pytest.raises(CheckpointError):
        await engine.capture(ws, "refs/heads/main")


async def test_what_must_be_durable_first_is_awaited_after_the_files_before_the_ref(tmp_path):
    # Issue 24 §3: the run's outbox entry is committed while git reads the
    # workspace; the ref — the checkpoint's existence — waits for it, and is
    # never made when it could not be written.
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    kept, refused = ref(), ref()
    seen: list[bool] = []

    def has_ref(name: str) -> bool:
        listed = subprocess.run(["git", "--git-dir", str(shadow_git(tmp_path / "checkpoints")), "for-each-ref",
                                 "--format=%(refname)"], capture_output=True, text=True, check=True).stdout
        return name in listed.split()

    async def durable() -> None:
        # Called once the files are in the shadow (the capture holds its locks), with no ref yet.
        seen.append(has_ref(kept))

    captured = await engine.capture(ws, kept, before_ref=durable)
    assert seen == [False] and (await engine.refs(ws))[kept] == captured.commit

    async def not_written() -> None:
        raise OSError("the entry could not be written")

    write(ws / "b.txt", "b\n")
    with pytest.raises(OSError, match="could not be written"):
        await engine.capture(ws, refused, base=captured.commit, before_ref=not_written)
    assert refused not in await engine.refs(ws)
    # The shadow is left usable: the same ref is made by the next capture.
    again = await engine.capture(ws, refused, base=captured.commit)
    assert [f.path for f in again.files] == ["b.txt"]


# -- errors -----------------------------------------------------------------------------------------


async def test_git_missing_is_a_specific_error(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for git in ("/nonexistent/git", "agentd-no-such-git"):
        engine = CheckpointEngine(tmp_path / "checkpoints", git=git)
        with pytest.raises(GitUnavailableError) as caught:
            await engine.capture(ws, ref())
        assert caught.value.reason == "git_missing" and "git" in str(caught.value)


async def test_a_git_older_than_2_32_is_refused(tmp_path):
    fake = tmp_path / "old-git"
    write(fake, "#!/bin/sh\necho git version 2.20.1\n", exec_=True)
    (tmp_path / "ws").mkdir()
    with pytest.raises(GitUnavailableError) as caught:
        await CheckpointEngine(tmp_path / "checkpoints", git=str(fake)).capture(tmp_path / "ws", ref())
    assert caught.value.reason == "git_too_old" and "2.20.1" in str(caught.value)


async def test_a_store_folder_of_another_workspace_is_refused(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    await engine.capture(ws, ref())
    (folder,) = (tmp_path / "checkpoints").iterdir()
    (folder / "workspace").write_text("/somewhere/else")
    with pytest.raises(ShadowMismatchError):
        await CheckpointEngine(tmp_path / "checkpoints").capture(ws, ref())


async def test_the_home_folder_is_refused_unless_configured(tmp_path, user_home):
    write(user_home / "a.txt", "a\n")
    with pytest.raises(WorkspaceRefusedError) as caught:
        await CheckpointEngine(tmp_path / "checkpoints").capture(user_home, ref())
    assert "home folder" in str(caught.value) and caught.value.reason == "workspace_refused"
    (user_home / "Downloads").mkdir()
    with pytest.raises(WorkspaceRefusedError):
        await CheckpointEngine(tmp_path / "checkpoints").capture(user_home / "Downloads", ref())
    c1 = await CheckpointEngine(tmp_path / "checkpoints", refused=()).capture(user_home, ref())
    assert c1.changed
    with pytest.raises(WorkspaceError):
        await CheckpointEngine(tmp_path / "checkpoints").capture(tmp_path / "missing", ref())


async def test_a_stale_index_lock_is_removed(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    (shadow_git(tmp_path / "checkpoints") / "index.lock").write_bytes(b"")
    write(ws / "a.txt", "b\n")
    c2 = await engine.capture(ws, ref(), base=c1.commit)
    assert [f.path for f in c2.files] == ["a.txt"]


async def test_a_restore_that_fails_part_way_says_what_was_and_was_not_restored(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    for i in range(6):
        write(ws / f"f{i}.txt", f"{i}\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    for i in range(6):
        write(ws / f"f{i}.txt", f"{i} changed\n")
    write(ws / "new.txt", "new\n")
    await engine.capture(ws, ref(), base=c1.commit)
    (ws / "new.txt").unlink()
    real = restore_module.stream_blobs

    async def fail_after_three(shadow, oids, consume):
        async def limited(index, content):
            if index == 3:
                raise GitCommandError(["cat-file", "--batch"], 1, b"simulated failure")
            await consume(index, content)
        await real(shadow, oids, limited)

    monkeypatch.setattr(restore_module, "stream_blobs", fail_after_three)
    monkeypatch.setattr(restore_module, "BATCH_BYTES", 1)  # write each blob as it comes
    result = await engine.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    assert not result.complete and "simulated failure" in result.error
    assert sorted(result.written) == ["f0.txt", "f1.txt", "f2.txt"]
    assert sorted((n.path, n.reason) for n in result.not_restored) == [
        ("f3.txt", "aborted"), ("f4.txt", "aborted"), ("f5.txt", "aborted")]
    for i in range(6):
        assert (ws / f"f{i}.txt").read_text() == (f"{i}\n" if i < 3 else f"{i} changed\n")
    assert temp_files(ws) == []
    monkeypatch.setattr(restore_module, "stream_blobs", real)
    # the safety checkpoint brings everything back
    undo = await engine.restore(ws, result.safety.commit, safety_ref=ref("pre_rollback"))
    assert undo.complete and all((ws / f"f{i}.txt").read_text() == f"{i} changed\n" for i in range(6))


async def test_temp_files_of_a_killed_restore_are_swept_next_time(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "d" / "a.txt", "a\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    # what a daemon killed between a temp file write and its os.replace leaves
    leftover = ws / "d" / (TEMP_PREFIX.decode() + "0123456789ab")
    write(leftover, "half written\n")
    (shadow_git(tmp_path / "checkpoints").parent / "restore.journal").write_bytes(b"d\0")
    c2 = await CheckpointEngine(tmp_path / "checkpoints").capture(ws, ref(), base=c1.commit)
    assert not leftover.exists() and not c2.changed
    assert not (shadow_git(tmp_path / "checkpoints").parent / "restore.journal").exists()


async def test_a_directory_with_unstored_files_is_never_removed(tmp_path):
    ws = tmp_path / "ws"
    write(ws / ".gitignore", "*.log\n")
    write(ws / "thing", "a file\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    c1 = await engine.capture(ws, ref())
    (ws / "thing").unlink()
    write(ws / "thing" / "inner.txt", "inner\n")
    write(ws / "thing" / "debug.log", "ignored, in no checkpoint\n")
    await engine.capture(ws, ref(), base=c1.commit)
    result = await engine.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    assert [(n.path, n.reason) for n in result.not_restored] == [("thing", "directory_in_the_way")]
    assert result.deleted == ["thing/inner.txt"]
    assert (ws / "thing" / "debug.log").read_text() == "ignored, in no checkpoint\n"


# -- concurrency ------------------------------------------------------------------------------------


async def test_two_workspaces_capture_concurrently(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for ws in (a, b):
        for i in range(50):
            write(ws / f"f{i}.txt", f"{ws.name} {i}\n")
    engine = CheckpointEngine(tmp_path / "checkpoints")
    results = {}

    async def capture(ws, name):
        results[name] = await engine.capture(ws, ref(name))

    async with trio.open_nursery() as nursery:
        for name, ws in (("a1", a), ("b1", b), ("a2", a), ("b2", b)):
            nursery.start_soon(capture, ws, name)
    assert all(r.changed for r in results.values()) and results["a1"].tree == results["a2"].tree
    # not a global lock: b captures while a's lock is held, and a's holder works under it
    async with engine.locked(a) as locked:
        with trio.fail_after(30):
            await engine.capture(b, ref())
        held = await locked.capture(ref(), base=results["a2"].commit)
        assert not held.changed and (await locked.diff(held.commit)).files


async def test_another_process_holding_the_lock_makes_a_capture_wait(tmp_path):
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    first = CheckpointEngine(tmp_path / "checkpoints")
    second = CheckpointEngine(tmp_path / "checkpoints", lock_timeout=0.3)  # separate flock, like another process
    async with first.locked(ws):
        with pytest.raises(WorkspaceBusyError):
            await second.capture(ws, ref())
    assert (await second.capture(ws, ref())).changed


async def test_two_engines_on_one_store_never_reuse_a_stale_tree(tmp_path):
    # Like a daemon and a later one (or a CLI) on the same data dir, one after the other.
    ws = tmp_path / "ws"
    write(ws / "a.txt", "a\n")
    first, second = CheckpointEngine(tmp_path / "checkpoints"), CheckpointEngine(tmp_path / "checkpoints")
    c1 = await first.capture(ws, ref())
    write(ws / "a.txt", "b\n")
    c2 = await second.capture(ws, ref(), base=c1.commit)
    c3 = await first.capture(ws, ref(), base=c1.commit)  # nothing differs from the index second wrote
    assert c3.changed and c3.tree == c2.tree and [f.path for f in c3.files] == ["a.txt"]
    await second.restore(ws, c1.commit, safety_ref=ref("pre_rollback"))
    c4 = await first.capture(ws, ref(), base=c3.commit)
    assert c4.tree == c1.tree and (ws / "a.txt").read_text() == "a\n"


# -- property test ----------------------------------------------------------------------------------

CAP = 2000
TRACKED = ["a.txt", "b.bin", "d/c.txt", "d/e/f.txt", "x", "x/y", "sp ace/ü.txt", "big.dat"]
IGNORED = ["build/out.o", "d/z.log"]
CONTENTS = [b"", b"one\n", b"one\ntwo\n", b"\x00\x01binary\xff", b"one\n" * 50]

edits = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(TRACKED), st.sampled_from(CONTENTS) | st.binary(max_size=40),
              st.booleans()),
    st.tuples(st.just("write_big"), st.just("big.dat"), st.just(b""), st.just(False)),
    st.tuples(st.just("delete"), st.sampled_from(TRACKED + IGNORED)),
    st.tuples(st.just("symlink"), st.sampled_from(["a.txt", "nowhere", "d"])),
    st.tuples(st.just("ignored"), st.sampled_from(IGNORED), st.binary(min_size=1, max_size=20)),
    st.tuples(st.just("mkdir"), st.sampled_from(["empty", "d/empty/deeper"])),
    # several paths at once: written (a byte string per round) or deleted
    st.tuples(st.just("burst"), st.lists(st.sampled_from(TRACKED), min_size=2, max_size=6, unique=True),
              st.binary(max_size=8), st.booleans()),
)
#: a round: a few edits, then a capture, a restore of an earlier checkpoint or an undo of the last restore
rounds = st.tuples(
    st.lists(edits, max_size=8),
    st.sampled_from([("capture",), ("capture",), ("restore", 0), ("restore", 1), ("restore", 2), ("undo",)]),
)
ops = st.lists(rounds, min_size=3, max_size=8).map(lambda rs: [op for edits_, action in rs for op in [*edits_, action]])


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def _user_write(ws: Path, rel: str, data: bytes, exec_: bool) -> None:
    """What a person or an agent does: a file where a directory or a file was."""
    path = ws / rel
    for parent in reversed(path.relative_to(ws).parents[:-1]):
        if (ws / parent).is_symlink() or (ws / parent).is_file():
            (ws / parent).unlink()
    _remove(path)
    write(path, data, exec_=exec_)


def _model(ws: Path) -> dict:
    return snapshot(ws, skip=lambda rel: ignored(rel) or (rel == "big.dat" and os.path.getsize(ws / rel) > CAP
                                                          and not os.path.islink(ws / rel)))


async def run_example(kind: str, sequence: list) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="ckpt-prop-"))
    trace = []
    try:
        if kind == "plain":
            ws, user_git = tmp / "ws", None
            write(ws / ".gitignore", "build/\n*.log\n")
        else:
            top = tmp / "repo"
            make_user_repo(top)
            ws, user_git = (top, top / ".git") if kind == "repo" else (top / "pkg", top / ".git")
            ws.mkdir(exist_ok=True)
        git_before = tree_hash(user_git) if user_git else None
        engine = CheckpointEngine(tmp / "checkpoints", max_file_bytes=CAP)
        checkpoints: list[tuple[str, dict]] = []
        last = None
        undo: tuple[str, dict] | None = None
        for n, op in enumerate(sequence):
            trace.append(op)
            name = op[0]
            if name in ("write", "write_big"):
                data = os.urandom(CAP + 100) if name == "write_big" else op[2]
                _user_write(ws, op[1], data, op[3])
            elif name == "delete":
                _remove(ws / op[1])
            elif name == "burst":
                for i, rel in enumerate(op[1]):
                    if op[3] and i % 2:
                        _remove(ws / rel)
                    else:
                        _user_write(ws, rel, op[2] + rel.encode(), bool(i % 3 == 0))
            elif name == "symlink":
                _user_write(ws, "x", b"", False)
                (ws / "x").unlink()
                os.symlink(op[1], ws / "x")
            elif name == "ignored":
                target = ws / op[1]
                if not any((ws / p).is_file() or (ws / p).is_symlink() for p in Path(op[1]).parents if str(p) != "."):
                    write(target, op[2])
            elif name == "mkdir":
                if not any((ws / p).is_file() or (ws / p).is_symlink() for p in Path(op[1]).parents if str(p) != "."):
                    (ws / op[1]).mkdir(parents=True, exist_ok=True)
            elif name == "capture":
                c = await engine.capture(ws, checkpoint_ref("thr", "root", n), base=last)
                last = c.commit
                checkpoints.append((c.commit, _model(ws)))
                assert {s.path for s in c.summary.skipped} == ({"big.dat"} if (ws / "big.dat").is_file()
                                                               and (ws / "big.dat").stat().st_size > CAP else set())
            elif name in ("restore", "undo") and (checkpoints if name == "restore" else undo):
                if name == "restore":  # 0: the oldest checkpoint, 1: the one before the newest, 2: one by position
                    index = [0, -2 if len(checkpoints) > 1 else -1, n % len(checkpoints)][op[1]]
                    commit, expected = checkpoints[index]
                else:
                    commit, expected = undo
                ignored_before = snapshot(ws, skip=lambda rel: not (ignored(rel) or rel in ("build", "d")))
                before = _model(ws)
                result = await engine.restore(ws, commit, safety_ref=checkpoint_ref("thr", "pre_rollback", n))
                assert result.error is None
                left = {x.path: x.reason for x in result.not_restored}
                assert set(left) <= {"big.dat"} and set(left.values()) <= {"exists_unstored"}, left
                now = _model(ws)
                if left:  # the big file on disk is kept, and is in no checkpoint
                    expected = {k: v for k, v in expected.items() if k != "big.dat"}
                assert now == expected, f"after restoring {commit}"
                assert snapshot(ws, skip=lambda rel: not (ignored(rel) or rel in ("build", "d"))) == ignored_before
                assert temp_files(ws) == []
                undo = (result.safety.commit, before)
                checkpoints.append(undo)
                last = result.safety.commit
        if user_git is not None:
            assert tree_hash(user_git) == git_before
    except BaseException:
        note(f"layout {kind}, ops done:\n  " + "\n  ".join(map(repr, trace)))
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@settings(max_examples=25, deadline=None, derandomize=not os.environ.get("AGENTD_HYPOTHESIS_EXPLORE"),
          database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(kind=st.sampled_from(["plain", "repo", "subdir"]), sequence=ops)
def test_workspace_equals_the_restored_checkpoint(kind, sequence):
    # Sync on purpose: pytest-trio's trio_mode runs async tests only; hypothesis calls this per example.
    trio.run(run_example, kind, sequence)


async def test_a_small_workspace_listed_in_one_spawn_misses_nothing(tmp_path, monkeypatch):
    """F13/F14 (issue 24 §4): a workspace of a few files is listed by one
    ``ls-files`` and a Python read of every mode (``capture._small_listing``);
    after a chmod that keeps git's 644/755, a folder swapped for a symlink, a
    delete, an exec bit dropped and an edit, its checkpoint is the one
    ``diff-files`` beside ``ls-files -o`` would give (modes included), and
    both ways back restore every byte and mode."""
    from agentd.actors.checkpoints import capture as capture_module

    engine = CheckpointEngine(tmp_path / "store")
    results = {}
    for small in (256, 0):
        monkeypatch.setattr(capture_module, "SMALL_TREE", small)
        ws = tmp_path / f"ws{small}"
        for i in range(12):
            write(ws / "pkg" / f"m{i}.py", f"module {i}\n")
        write(ws / "run.sh", "#!/bin/sh\n", exec_=True)
        base = await engine.capture(ws, checkpoint_ref(f"thr_small{small}", "root", 0))
        # A second capture: the first one counted the files (the small listing needs the count).
        base = await engine.capture(ws, checkpoint_ref(f"thr_small{small}", "root", 1), base=base.commit)
        before = tree_hash(ws)
        os.chmod(ws / "pkg" / "m0.py", 0o600)
        os.rename(ws / "pkg", ws / "pkg2")
        os.symlink("pkg2", ws / "pkg")
        (ws / "pkg2" / "m1.py").unlink()
        os.chmod(ws / "run.sh", 0o644)
        write(ws / "pkg2" / "m2.py", "edited\n")
        write(ws / "new.txt", "new\n")
        run = await engine.capture(ws, checkpoint_ref(f"thr_small{small}", "root", 2), base=base.commit)
        after = tree_hash(ws)
        (shadow,) = [s for s in engine._shadows.values() if s.layout.workspace == os.fsencode(os.path.realpath(ws))]
        results[small] = (run.tree, await shadow.commit_modes(run.commit), run.summary.files_changed)
        undo = await engine.restore(ws, base.commit, safety_ref=checkpoint_ref(f"thr_small{small}", "pre_rollback", 1))
        assert undo.complete, undo.not_restored
        assert tree_hash(ws) == before
        redo = await engine.restore(ws, run.commit, safety_ref=checkpoint_ref(f"thr_small{small}", "pre_rollback", 2))
        assert redo.complete, redo.not_restored
        assert tree_hash(ws) == after
    assert results[256] == results[0]
    assert results[256][1].files.get(b"pkg2/m0.py") == 0o600

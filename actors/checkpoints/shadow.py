"""The shadow repository of one workspace, under the engine's root:

```
<root>/<sha256(realpath)[:16]>/
    shadow.git/   the shadow's git dir (own index, objects, refs/agentd/...)
    workspace     the workspace's real path, checked on every open
    lock          flock'ed while the shadow is used (see locks.py)
    state.json    layout, nested repositories, ignore-rules fingerprint
```

The shadow never reads the user's hooks, config or attributes: see
``gitproc.shadow_env`` and the config and ``info/attributes`` written here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..regular_files import NotRegularFile, read_regular
from .errors import ShadowMismatchError, WorkspaceError
from .gitproc import Arg, Git, GitResult, scrubbed_env, shadow_env
from .layout import Layout
from .modes import Modes

if TYPE_CHECKING:
    from .quiet import Snapshot, Status

#: settings of every shadow, appended to the config ``git init`` writes
SHADOW_CONFIG = b"""\
[core]
\tautocrlf = false
\tsafecrlf = false
\tfsmonitor = false
\thooksPath = /dev/null
\tuntrackedCache = true
\tsplitIndex = true
\tquotePath = false
\tlogAllRefUpdates = false
\tsparseCheckout = false
[gc]
\tauto = 0
[maintenance]
\tauto = false
[commit]
\tgpgSign = false
[tag]
\tgpgSign = false
[submodule]
\trecurse = false
"""

#: highest-precedence attributes: bytes go in and come out unchanged
ATTRIBUTES = b"* -text -filter -ident -working-tree-encoding\n"

#: temp files of a restore in progress; never captured
TEMP_PREFIX = b".agentd-tmp-"


def shadow_key(real: bytes) -> str:
    """The shadow folder name of the workspace whose real path is ``real``."""
    return hashlib.sha256(real).hexdigest()[:16]


def ignore_line(path: bytes) -> bytes | None:
    """An ``info/exclude`` line that matches exactly the directory ``path``
    (work-tree-relative), or None when no line can (a newline in the name)."""
    if b"\n" in path or b"\r" in path:
        return None
    return b"/" + re.sub(rb"([\\*?\[\]!# ])", rb"\\\1", path) + b"/"


@dataclass
class ShadowState:
    """What the shadow remembers between captures (``state.json``)."""

    #: the work tree and prefix the index was built for
    top: bytes = b""
    prefix: bytes = b""
    #: nested repositories, work-tree-relative, excluded in ``info/exclude``
    nested: list[bytes] = field(default_factory=list)
    #: hash of the ignore rules the index was last cleaned with
    excludes_fingerprint: str = ""
    #: the ``core.excludesFile`` value written to the shadow's config
    excludes_file: bytes = b""
    #: the user's object directories the shadow reads from until its first
    #: compaction copies what its checkpoints need (``seed``)
    borrowed: list[bytes] = field(default_factory=list)
    #: seeded captures so far (the compaction stops borrowing only if none came during it)
    seeds: int = 0

    def encode(self) -> bytes:
        return json.dumps({
            "top": os.fsdecode(self.top), "prefix": os.fsdecode(self.prefix),
            "nested": [os.fsdecode(p) for p in self.nested],
            "excludesFingerprint": self.excludes_fingerprint, "excludesFile": os.fsdecode(self.excludes_file),
            "borrowed": [os.fsdecode(p) for p in self.borrowed], "seeds": self.seeds,
        }).encode()

    @classmethod
    def decode(cls, data: bytes) -> ShadowState:
        raw = json.loads(data)
        return cls(os.fsencode(raw["top"]), os.fsencode(raw["prefix"]), [os.fsencode(p) for p in raw["nested"]],
                   raw["excludesFingerprint"], os.fsencode(raw["excludesFile"]),
                   [os.fsencode(p) for p in raw.get("borrowed", [])], int(raw.get("seeds", 0)))


def _read(path: bytes) -> bytes:
    try:
        # a FIFO put in its place (an agent runs as the user) is refused, not waited on
        return read_regular(path, follow_symlinks=True)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError, NotRegularFile):
        return b""


def _write_atomic(path: bytes, data: bytes) -> None:
    tmp = path + b".tmp-" + secrets.token_hex(4).encode()
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class Shadow:
    """An opened shadow repository (use ``Shadow.open`` under the workspace's locks).

    Attributes:
        dir: the shadow folder ``<root>/<key>``.
        git_dir: ``<dir>/shadow.git``.
        layout: the workspace as the shadow sees it.
        state: see ``ShadowState``.
    """

    def __init__(self, git: Git, folder: bytes, layout: Layout, state: ShadowState) -> None:
        self.gitbin = git
        self.dir = folder
        self.git_dir = os.path.join(folder, b"shadow.git")
        self.layout = layout
        self.state = state
        self.env: dict[str, str] = {}
        self.write_env: dict[str, str] = {}
        self._set_envs()
        #: the workspace tree of the index as last written, None once the index changed since
        self.index_tree: str | None = None
        self._index_stat: tuple[int, int, int] | None = None
        #: commit -> tree of the checkpoints this process made or read
        self.trees: dict[str, str] = {}
        #: commit -> the file modes it records (commits never change, so this is never stale)
        self.modes: dict[str, Modes] = {}
        #: the modes of what the index holds, as the last capture (or restore) left it
        self.modes_current: Modes | None = None
        #: the index's (inode, size, mtime) right after that capture
        self.modes_index_stat: tuple[int, int, int] | None = None
        #: files that capture read within git's one-second blind spot (``modes.recent``)
        self.modes_recent: set[bytes] = set()
        #: about how many files the index holds, once a capture counted them (``capture.SMALL_TREE``)
        self.tracked_count: int | None = None
        #: a small workspace as its last capture left it (``quiet``), None when the next one must list it with git
        self.quiet: Snapshot | None = None
        #: the index file's stat after a small workspace's last capture, and the status of the files
        #: that capture listed, read before git hashed them (``quiet.unseen_by_git``)
        self.seen: tuple[tuple[int, int, int] | None, dict[bytes, Status]] | None = None

    @staticmethod
    def folder(root: bytes, real: bytes) -> bytes:
        """``<root>/<key>`` for the workspace at ``real``."""
        return os.path.join(root, shadow_key(real).encode())

    @staticmethod
    def lock_file(root: bytes, real: bytes) -> bytes:
        """The ``lock`` file of the workspace's shadow (its folder is created)."""
        folder = Shadow.folder(root, real)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        return os.path.join(folder, b"lock")

    @staticmethod
    def check_owner(folder: bytes, real: bytes) -> bool:
        """Whether the shadow folder exists for ``real``.

        Raises:
            ShadowMismatchError: its ``workspace`` file names another path.
        """
        recorded = _read(os.path.join(folder, b"workspace"))
        if recorded and recorded != real:
            raise ShadowMismatchError(
                f"the checkpoint store {os.fsdecode(folder)} belongs to {os.fsdecode(recorded)}, "
                f"not {os.fsdecode(real)}")
        return bool(recorded) and os.path.exists(os.path.join(folder, b"shadow.git", b"HEAD"))

    @classmethod
    async def open(cls, git: Git, root: bytes, layout: Layout) -> Shadow:
        """Open the workspace's shadow, creating it the first time; drop the
        index when the layout changed (the next capture rebuilds it; old
        checkpoints stay valid). Call with the workspace's locks held.

        Raises:
            ShadowMismatchError: the folder belongs to another workspace.
        """
        real = layout.workspace
        folder = cls.folder(root, real)
        os.makedirs(folder, mode=0o700, exist_ok=True)
        cls.check_owner(folder, real)
        git_dir = os.path.join(folder, b"shadow.git")
        if not os.path.exists(os.path.join(git_dir, b"HEAD")):
            await cls._init(git, folder, git_dir)
        if not _read(os.path.join(folder, b"workspace")):
            _write_atomic(os.path.join(folder, b"workspace"), real)
        raw = _read(os.path.join(folder, b"state.json"))
        state = ShadowState.decode(raw) if raw else ShadowState()
        shadow = cls(git, folder, layout, state)
        if (state.top, state.prefix) != (layout.top, layout.prefix):
            try:
                os.unlink(os.path.join(git_dir, b"index"))
            except FileNotFoundError:
                pass
            state.top, state.prefix, state.nested, state.excludes_fingerprint = layout.top, layout.prefix, [], ""
            shadow.save_state()
        if state.excludes_file != layout.excludes_file:
            await git.run(["config", "--file", os.path.join(git_dir, b"config"), "core.excludesFile", layout.excludes_file],
                          env=scrubbed_env(), cwd=folder)
            state.excludes_file = layout.excludes_file
            shadow.save_state()
        return shadow

    @staticmethod
    async def _init(git: Git, folder: bytes, git_dir: bytes) -> None:
        if os.path.lexists(git_dir):  # a half-made shadow of an init that did not finish: ours, no checkpoint in it
            shutil.rmtree(git_dir)
        tmp = git_dir + b".tmp-" + secrets.token_hex(4).encode()
        await git.run(["init", "-q", "--bare", "--template=", tmp], env=scrubbed_env(), cwd=folder)
        config = os.path.join(tmp, b"config")
        text = _read(config).replace(b"\tbare = true", b"\tbare = false")
        _write_atomic(config, text + SHADOW_CONFIG)
        os.makedirs(os.path.join(tmp, b"info"), exist_ok=True)
        _write_atomic(os.path.join(tmp, b"info", b"attributes"), ATTRIBUTES)
        os.rename(tmp, git_dir)

    def _set_envs(self) -> None:
        """``write_env``: git that writes objects (never sees the user's store:
        git "freshens" an object it finds there by touching the user's file's
        mtime); ``env``: every other git, which reads the borrowed objects."""
        self.write_env = shadow_env(self.git_dir, self.layout.top)
        self.env = dict(self.write_env)
        if self.state.borrowed:
            self.env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = ":".join(map(os.fsdecode, self.state.borrowed))

    def borrow(self, objects: bytes) -> None:
        """Read ``objects`` (the user's object directory) from now on, until
        ``stop_borrowing``; recorded in ``state.json`` first."""
        if objects not in self.state.borrowed:
            self.state.borrowed.append(objects)
        self.state.seeds += 1
        self.save_state()
        self._set_envs()

    def stop_borrowing(self) -> None:
        """Every object the checkpoints and the index reach is the shadow's own now."""
        self.state.borrowed = []
        self.save_state()
        self._set_envs()

    @property
    def borrowing(self) -> bool:
        """Whether some checkpoint may still need the user's objects."""
        return bool(self.state.borrowed)

    def remember_modes(self, modes: Modes) -> None:
        """Record ``modes`` as those of what the index holds now."""
        self.modes_current, self.modes_index_stat = modes, self._stat_index()

    def index_stat(self) -> tuple[int, int, int] | None:
        """The index file's (inode, size, mtime), None when there is none."""
        return self._stat_index()

    def _stat_index(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(os.path.join(self.git_dir, b"index"))
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_size, st.st_mtime_ns

    def cached_index_tree(self) -> str | None:
        """The tree ``write-tree`` would give now, if known: the index is the
        one it was last written from (this process did not change it, and its
        inode, size and mtime say no other process did)."""
        if self.index_tree is not None and self._stat_index() == self._index_stat:
            return self.index_tree
        return None

    def remember_index_tree(self, tree: str) -> None:
        """Record ``tree`` as what the index holds now."""
        self.index_tree, self._index_stat = tree, self._stat_index()

    def save_state(self) -> None:
        """Write ``state.json`` atomically."""
        _write_atomic(os.path.join(self.dir, b"state.json"), self.state.encode())

    def refresh_excludes(self) -> str:
        """Write ``info/exclude`` (the user repository's ``info/exclude``, the
        restore temp files, the nested repositories) when it changed, and
        return the fingerprint of the ignore rules no capture listing shows:
        ``info/exclude``, the excludes file, the ``.gitignore`` files above
        the workspace."""
        parts = []
        if self.layout.user_git_dir is not None:
            parts.append(_read(os.path.join(self.layout.user_git_dir, b"info", b"exclude")))
        parts.append(b"\n# agentd: restore temp files, nested repositories\n" + TEMP_PREFIX + b"*\n")
        parts.extend(line + b"\n" for line in map(ignore_line, self.state.nested) if line is not None)
        content = b"".join(parts)
        path = os.path.join(self.git_dir, b"info", b"exclude")
        if _read(path) != content:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _write_atomic(path, content)
        digest = hashlib.sha256(content + b"\0" + _read(self.layout.excludes_file))
        if self.layout.prefix:  # the .gitignore files above the workspace, which no listing shows
            parts = self.layout.prefix.split(b"/")
            for depth in range(len(parts)):
                digest.update(b"\0" + _read(os.path.join(self.layout.top, *parts[:depth], b".gitignore")))
        return digest.hexdigest()

    async def commit_modes(self, commit: str) -> Modes:
        """The file and folder modes checkpoint ``commit`` records (``modes``)."""
        found = self.modes.get(commit)
        if found is None:
            found = Modes.parse((await self.run(["cat-file", "commit", commit])).stdout)
            self.modes[commit] = found
        return found

    async def run(self, args: Sequence[Arg], *, stdin: bytes | None = None, ok: Sequence[int] = (0,),
                  writes: bool = False, index: bytes | None = None, work_tree: bytes | None = None) -> GitResult:
        """Run git on the shadow (work tree = ``layout.top``, cwd there);
        ``writes``: a command that writes objects (see ``_set_envs``);
        ``index``: another index file than the shadow's; ``work_tree``:
        another work tree (and cwd) than the workspace's.

        Raises:
            GitCommandError: see ``Git.run``.
            WorkspaceError: the work tree is gone.
        """
        try:
            env = self.write_env if writes else self.env
            if index is not None:
                env = {**env, "GIT_INDEX_FILE": os.fsdecode(index)}
            if work_tree is not None:
                env = {**env, "GIT_WORK_TREE": os.fsdecode(work_tree)}
            return await self.gitbin.run(args, env=env, cwd=work_tree or self.layout.top, stdin=stdin, ok=ok)
        except FileNotFoundError as exc:
            raise WorkspaceError(f"the workspace {os.fsdecode(self.layout.workspace)} is gone: {exc}") from exc

"""Where a workspace's files are, seen from git: its real path, the shadow's
work tree and the workspace's place in it.

A workspace inside a user's repository is captured with the repository's top
level as the shadow's work tree and ``:(top,literal)<subdir>`` as the pathspec
of every command, so the repository's ``.gitignore`` files above the workspace
and its ``info/exclude`` apply exactly as they do for the user's own git. The
shadow's trees are always written for the workspace folder itself
(``write-tree --prefix``), so paths in checkpoints are workspace-relative
whatever the layout, and a layout change (a ``git init`` in a parent folder)
keeps every old checkpoint valid.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from .errors import WorkspaceError, WorkspaceRefusedError
from .gitproc import Git, scrubbed_env

#: folders under the home folder that are refused by default, besides the home folder itself
REFUSED_IN_HOME = ("Desktop", "Documents", "Downloads")


def default_refused(home: str | None = None) -> list[str]:
    """The folders refused by default: the filesystem root, the home folder
    itself (``$HOME``) and its Desktop, Documents and Downloads."""
    home = home if home is not None else os.environ.get("HOME") or os.path.expanduser("~")
    found = ["/"]
    if home:
        found.append(home)
        found.extend(os.path.join(home, name) for name in REFUSED_IN_HOME)
    return found


def resolve_workspace(path: str | os.PathLike[str] | bytes, refused: Iterable[str | bytes]) -> bytes:
    """The real path of ``path``, checked.

    Raises:
        WorkspaceError: it is not an existing directory.
        WorkspaceRefusedError: it is one of ``refused`` (compared by real path).
    """
    real = os.path.realpath(os.fsencode(path))
    if not os.path.isdir(real):
        raise WorkspaceError(f"checkpoints need an existing folder; {os.fsdecode(real)} is not one")
    for folder in refused:
        folder_real = os.path.realpath(os.fsencode(folder))
        if real == folder_real:
            what = "the filesystem root" if folder_real == b"/" else (
                "your home folder" if os.path.basename(folder_real).decode(errors="replace") not in REFUSED_IN_HOME
                else f"your {os.path.basename(folder_real).decode()} folder")
            raise WorkspaceRefusedError(
                f"checkpoints are off for {os.fsdecode(real)}: it is {what}, too broad to snapshot safely; "
                "open a project folder as the workspace instead")
    return real


def nearest_dotgit(real: bytes) -> bytes | None:
    """The nearest folder at or above ``real`` that holds a ``.git`` entry (a
    few lstat calls: the cheap check that the layout has not changed)."""
    current = real
    while True:
        if os.path.lexists(os.path.join(current, b".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def xdg_excludes_file(env: dict[str, str]) -> bytes:
    """git's default global excludes file: ``$XDG_CONFIG_HOME/git/ignore`` or
    ``~/.config/git/ignore``."""
    xdg = env.get("XDG_CONFIG_HOME")
    if xdg:
        return os.fsencode(os.path.join(xdg, "git", "ignore"))
    return os.fsencode(os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config", "git", "ignore"))


@dataclass(frozen=True)
class Layout:
    """A workspace as the shadow sees it.

    Attributes:
        workspace: the workspace's real path.
        top: the shadow's work tree: the user repository's top level, or the workspace.
        prefix: the workspace relative to ``top`` (``b""`` or ``b"sub/dir"``).
        user_git_dir: the user repository's common git dir (for its ``info/exclude``), if any.
        excludes_file: the user's effective ``core.excludesFile`` (may not exist).
        marker: what ``nearest_dotgit`` said when this layout was found.
        user_index: the user repository's index file (of this worktree), if
            the workspace is in a SHA-1 repository: a first capture reads it
            (``seed``), never writes it.
        user_objects: that repository's object directory (read-only to the shadow).
    """

    workspace: bytes
    top: bytes
    prefix: bytes
    user_git_dir: bytes | None
    excludes_file: bytes
    marker: bytes | None
    user_index: bytes | None = None
    user_objects: bytes | None = None

    def pathspec(self) -> list[bytes]:
        """The pathspec that limits a command to the workspace (none at top)."""
        return [b":(top,literal)" + self.prefix] if self.prefix else []

    def to_top(self, rel: bytes) -> bytes:
        """A workspace-relative path as a work-tree-relative one."""
        return self.prefix + b"/" + rel if self.prefix else rel

    def from_top(self, path: bytes) -> bytes:
        """A work-tree-relative path (under the workspace) as a workspace-relative one."""
        return path[len(self.prefix) + 1:] if self.prefix else path


async def discover(git: Git, real: bytes) -> Layout:
    """Find the layout of the workspace at ``real`` with the user's own git
    discovery (their config, so ``safe.directory`` applies; no ``GIT_*``
    variable; read-only commands).

    A workspace that is not in a repository, or in one whose ignore rules
    ignore the workspace folder itself (a home-folder repository with ``*`` in
    its ``.gitignore``), is captured as a plain folder: its own ``.gitignore``
    files still apply.
    """
    env = scrubbed_env()
    marker = nearest_dotgit(real)
    found = await git.run(["config", "--path", "--get", "core.excludesFile"], env=env, cwd=real, ok=(0, 1, 128))
    excludes = found.stdout.rstrip(b"\n") if found.returncode == 0 and found.stdout.strip() else xdg_excludes_file(env)
    if not os.path.isabs(excludes):
        excludes = os.path.join(real, excludes)
    plain = Layout(real, real, b"", None, excludes, marker)
    if marker is None:
        return plain
    result = await git.run(["rev-parse", "--path-format=absolute", "--show-toplevel", "--git-common-dir",
                            "--git-path", "index", "--git-path", "objects", "--show-object-format"],
                           env=env, cwd=real, ok=(0, 128))
    lines = result.stdout.split(b"\n")
    if result.returncode != 0 or len(lines) < 5 or not lines[0]:
        return plain
    top, common = os.path.realpath(lines[0]), os.path.realpath(lines[1])
    # Seeding reads the user's objects: only when they are SHA-1, as the shadow's are.
    index, objects = (lines[2], lines[3]) if lines[4] == b"sha1" else (None, None)
    if top == real:
        return Layout(real, top, b"", common, excludes, marker, index, objects)
    if not real.startswith(top.rstrip(b"/") + b"/"):
        return plain
    prefix = real[len(top.rstrip(b"/")) + 1:]
    ignored = await git.run(["check-ignore", "-q", "--no-index", "--", prefix + b"/"], env=env, cwd=top, ok=(0, 1, 128))
    if ignored.returncode == 0:
        return plain
    return Layout(real, top, prefix, common, excludes, marker, index, objects)

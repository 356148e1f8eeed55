"""Type-check agentd with mypy, configured by ``[tool.mypy]`` in pyproject.toml.

    python scripts/typecheck.py                 # the whole package: exit 0 when clean
    python scripts/typecheck.py agentd.store    # only these modules/packages (and what they import)

The repository's folders install as ``agentd.*`` through setuptools'
``package-dir`` mapping (``cli/`` is ``agentd``, ``store/`` is ``agentd.store``,
…), which mypy cannot follow: seen from the repository root there is no
``agentd`` package, and the editable install's import hook is invisible to it.
So this script lays out the package as it installs — a temporary ``agentd/``
of symlinks to ``cli/*.py`` and to the layer folders — and runs mypy there.
Errors name the repository's own paths (``store/db.py:12: error: …``).

mypy's incremental cache lives in ``.mypy_cache/`` at the repository root
(ignored by git), so a second run re-checks only what changed; the symlink
tree is built anew each run and carries no state.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the layer folders, each ``agentd.<folder>`` when installed (``cli/`` is ``agentd`` itself)
LAYERS = ("actors", "store", "supervisor", "protocol")


def build_tree(into: Path) -> Path:
    """Lay ``agentd/`` out under ``into`` as setuptools installs it; return the package dir."""
    package = into / "agentd"
    package.mkdir()
    for source in sorted((ROOT / "cli").glob("*.py")):
        (package / source.name).symlink_to(source)
    for folder in LAYERS:
        (package / folder).symlink_to(ROOT / folder, target_is_directory=True)
    return package


def to_repository_path(line: str) -> str:
    """mypy names files by the tree's paths (``agentd/store/db.py``); say the repository's
    (``store/db.py``, ``cli/main.py``)."""
    if not line.startswith("agentd/"):
        return line
    inside = line[len("agentd/"):]
    return inside if inside.split("/", 1)[0] in LAYERS else "cli/" + inside


def run(targets: list[str]) -> subprocess.CompletedProcess[str]:
    """Run mypy on ``targets`` (``-p`` packages/modules; default the whole ``agentd``)."""
    with tempfile.TemporaryDirectory(prefix="agentd-typecheck-") as tmp:
        build_tree(Path(tmp))
        packages = [arg for target in (targets or ["agentd"]) for arg in ("-p", target)]
        done = subprocess.run(
            [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
             "--cache-dir", str(ROOT / ".mypy_cache"), "--python-executable", sys.executable, *packages],
            cwd=tmp, capture_output=True, text=True,
            # mypy resolves ``agentd`` from cwd; a PYTHONPATH or MYPYPATH of the caller's must not
            # bring in another checkout's copy.
            env={key: value for key, value in os.environ.items() if key not in ("MYPYPATH", "PYTHONPATH")},
        )
        done.stdout = "\n".join(to_repository_path(line) for line in done.stdout.splitlines())
        return done


def main() -> int:
    done = run(sys.argv[1:])
    sys.stdout.write(done.stdout + ("\n" if done.stdout else ""))
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())

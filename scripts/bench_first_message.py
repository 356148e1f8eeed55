"""Benchmark of the first message in a real repository (issue 24 §2): its
first delta through agentd, beside the floor measured in the same round.

For each size (default 10,000 and 100,000 tracked files of ~2 KB in
``src/pkgNNN/modNN/``, a ``.gitignore``, an ignored ``build/``, committed and
packed by ``git gc``, then made dirty: 10 files modified, 10 untracked), each
of ``--rounds`` rounds, interleaved:

1. ``git status --porcelain`` of the tree (the floor's first half);
2. a fresh daemon (its own data dir, so no shadow repository exists yet):
   the first delta of a scripted ``say`` in a new thread of an empty
   workspace (the bare turn, the floor's second half), then of a new thread
   whose workspace is the repository (its baseline checkpoint is captured
   before the turn starts);
3. the engine alone: the baseline capture of the repository (seeded from the
   user's index, ``actors/checkpoints/seed.py``), its CPU time (agentd and
   git), and git's own first ``git add -A && git commit`` of a copy.
   ``--unseeded`` also times the capture without the seed (the engine before
   issue 24), once per size: it hashes every file.

Target: first delta in the repository <= 1.5 x (git status + the bare turn).
Prints each figure beside its floor (ms); nothing is asserted.

    python scripts/bench_first_message.py [--sizes 10000,100000] [--rounds 3] [--unseeded] [--repos DIR] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_checkpoints import plain_env, text  # noqa: E402

from agentd.actors.checkpoints import CheckpointEngine, checkpoint_ref  # noqa: E402
from agentd.actors.checkpoints import seed as seed_module  # noqa: E402
from agentd.launch import start_daemon  # noqa: E402
from agentd.protocol.client import Client  # noqa: E402

TARGET_RATIO = 1.5
SAY = "@script\n" + json.dumps([{"say": "hello from the first turn"}])


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, env=plain_env(), check=True, capture_output=True)


def make_repo(ws: Path, files: int) -> None:
    """The measured repository (see the module's docstring)."""
    rng = random.Random(1)
    chunks = [text(rng, 2000) for _ in range(300)]
    for i in range(files):
        path = ws / "src" / f"pkg{i // 1000:03}" / f"mod{(i // 50) % 20:02}" / f"file{i:06}.py"
        if i % 50 == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"# %d\n" % i + chunks[i % 300])
    (ws / ".gitignore").write_text("build/\n*.log\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.o").write_bytes(rng.randbytes(1 << 20))
    git(ws, "init", "-q")
    git(ws, "config", "gc.auto", "0")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "first")
    git(ws, "gc", "-q")
    for i in rng.sample(range(files), 10):
        path = ws / "src" / f"pkg{i // 1000:03}" / f"mod{(i // 50) % 20:02}" / f"file{i:06}.py"
        path.write_bytes(b"# changed\n" + chunks[(i + 1) % 300])
    for i in range(10):
        (ws / "src" / f"untracked{i}.py").write_text(f"new {i}\n")


def ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def cpu_ms() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime) * 1000


def git_status_ms(ws: Path) -> float:
    started = time.perf_counter()
    git(ws, "status", "--porcelain")
    return ms_since(started)


async def first_delta_ms(client: Client, workspace: Path) -> float:
    """Send → first ``message.delta`` of a new thread's first message."""
    thread = (await client.call("thread.create", title="bench first message", workspace=str(workspace)))["threadId"]
    after = (await client.call("daemon.status"))["lastSeq"]
    async with client.subscribe(thread_id=thread, after_seq=after) as events:
        started = time.perf_counter()
        await client.call("thread.message.send", threadId=thread, text=SAY)
        async for event in events:
            if event["type"] == "message.delta":
                return ms_since(started)
            if event["type"].startswith("run.") and event["payload"]["run"]["status"] in ("failed", "cancelled"):
                raise RuntimeError(f"the run ended {event['payload']['run']['status']}")
    raise RuntimeError("the event stream ended before a delta")


async def daemon_round(root: Path, repo: Path, empty: Path) -> tuple[float, float]:
    """A fresh daemon: the bare turn's first delta, then the repository's."""
    data = root / f"data-{time.monotonic_ns()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
    daemon = await start_daemon(data, data / "agentd.sock", env=env)
    try:
        async with Client.connect(data / "agentd.sock") as client:
            bare = await first_delta_ms(client, empty)
            in_repo = await first_delta_ms(client, repo)
    finally:
        await daemon.terminate()
        shutil.rmtree(data, ignore_errors=True)
    return bare, in_repo


async def engine_baseline(root: Path, repo: Path, *, seeded: bool) -> tuple[float, float]:
    """The engine's baseline capture of ``repo`` in a fresh store: (ms, CPU ms)."""
    store = root / f"store-{time.monotonic_ns()}"
    engine = CheckpointEngine(store)
    real = seed_module.can_seed
    if not seeded:
        seed_module.can_seed = lambda shadow: False  # type: ignore[assignment]
    try:
        cpu, started = cpu_ms(), time.perf_counter()
        await engine.capture(repo, checkpoint_ref("bench", "baseline", 0))
        return ms_since(started), cpu_ms() - cpu
    finally:
        seed_module.can_seed = real
        shutil.rmtree(store, ignore_errors=True)


def git_first_commit_ms(repo: Path, root: Path) -> float:
    """git's own first ``add -A && commit`` of the same files (a copy without its .git)."""
    copy = root / f"copy-{time.monotonic_ns()}"
    shutil.copytree(repo, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    try:
        git(copy, "init", "-q")
        started = time.perf_counter()
        git(copy, "add", "-A")
        git(copy, "commit", "-q", "-m", "first")
        return ms_since(started)
    finally:
        shutil.rmtree(copy, ignore_errors=True)


async def bench_size(root: Path, files: int, args: argparse.Namespace) -> dict[str, Any]:
    kept = Path(args.repos) if args.repos else None
    repo, empty = (kept or root) / f"repo{files}", root / f"empty{files}"
    if kept is None or not (repo / ".git").exists():
        make_repo(repo, files)
    empty.mkdir()
    git_status_ms(repo)  # a warm cache for every figure
    rows: dict[str, list[float]] = {k: [] for k in (
        "git_status", "bare_turn", "first_delta", "baseline", "baseline_cpu", "git_first_commit")}
    for _ in range(args.rounds):
        rows["git_status"].append(git_status_ms(repo))
        bare, in_repo = await daemon_round(root, repo, empty)
        rows["bare_turn"].append(bare)
        rows["first_delta"].append(in_repo)
        took, cpu = await engine_baseline(root, repo, seeded=True)
        rows["baseline"].append(took)
        rows["baseline_cpu"].append(cpu)
        if not args.skip_git_commit:
            rows["git_first_commit"].append(git_first_commit_ms(repo, root))
    out: dict[str, Any] = {"files": files, **{k: [round(v, 1) for v in vs] for k, vs in rows.items()}}
    if args.unseeded:
        out["baseline_unseeded"] = [round((await engine_baseline(root, repo, seeded=False))[0], 1)]
    floors = [s + b for s, b in zip(rows["git_status"], rows["bare_turn"])]
    out["floor"] = [round(f, 1) for f in floors]
    out["ratio"] = round(statistics.median(rows["first_delta"]) / statistics.median(floors), 2)
    if kept is None:
        shutil.rmtree(repo, ignore_errors=True)
    return out


def show(label: str, values: list[float]) -> str:
    return f"  {label:<62} " + " / ".join(f"{v:,.0f}" for v in sorted(values))


def report(results: dict[str, Any]) -> None:
    print(f"{results['git']}, {results['cpus']} cpus, load {results['load_at_start']:.1f} at the start, "
          f"{results['load']:.1f} at the end; ms per round, sorted")
    for size in results["sizes"]:
        report_size(size)


def report_size(size: dict[str, Any]) -> None:
    """One size's figures (printed as soon as it is measured, and again at the end)."""
    print(f"\n{size['files']:,} tracked files (10 modified, 10 untracked)", flush=True)
    print(show("first delta of the first message, workspace = the repository", size["first_delta"]))
    print(show("  floor: git status + the bare turn (same round)", size["floor"]))
    print(show("    git status --porcelain", size["git_status"]))
    print(show("    first delta of the first message, an empty workspace", size["bare_turn"]))
    print(show("baseline capture alone (engine, seeded)", size["baseline"]))
    print(show("  its CPU time, agentd + git", size["baseline_cpu"]))
    if size["git_first_commit"]:
        print(show("  git's own first add -A && commit of the same files", size["git_first_commit"]))
    if "baseline_unseeded" in size:
        print(show("  the same capture without the seed (before issue 24)", size["baseline_unseeded"]))
    met = size["ratio"] <= TARGET_RATIO
    print(f"  ratio (medians) {size['ratio']:.2f}x   target <= {TARGET_RATIO}x: {'met' if met else 'NOT met'}",
          flush=True)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    load_at_start = os.getloadavg()[0]
    base = Path(args.dir) if args.dir else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench-first-", dir=base))
    try:
        sizes = []
        for n in args.sizes.split(","):
            sizes.append(await bench_size(root, int(n), args))
            report_size(sizes[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"git": git(Path.cwd(), "--version").stdout.decode().strip(), "cpus": os.cpu_count(),
            "load_at_start": load_at_start, "load": os.getloadavg()[0], "sizes": sizes}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="tracked files per repository, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--unseeded", action="store_true", help="also time one unseeded baseline per size (slow)")
    parser.add_argument("--skip-git-commit", action="store_true", help="do not time git's own first commit")
    parser.add_argument("--dir", help="make the temp folder under this one (default: the system's)")
    parser.add_argument("--repos", help="make the repositories here once and keep them (later runs reuse them)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    results = trio.run(run, args)
    report(results)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

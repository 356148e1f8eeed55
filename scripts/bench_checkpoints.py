"""Benchmark of the checkpoint engine against plain git on the same tree.

Three measures, each interleaved round by round with its plain-git
counterpart on an identical copy of the workspace (CHECKPOINTS.md §2 setup:
10,000 tracked files in src/pkgNN/modNN/, 5 binaries, a .gitignore, an ignored
build/, a committed nested repository, and the user's .git with a commit, a
stash entry and a staged change):

1. capture with 10 (``--changed``) changed files vs ``git add -A && git commit -q``;
2. restore of 100 changed files (70 modified, 15 deleted, 15 added, plus an
   untracked and two ignored files) vs ``git checkout -q <commit>``; the
   engine's restore includes its safety capture, so it is also shown split,
   and compared with plain ``add -A && commit`` + ``checkout``;
3. the added latency of a run end on a 100-file workspace: capture (with its
   ``diff --raw --numstat`` summary) and capture + ``diff`` (patch); then a
   run end where nothing changed (a chat turn: the ``quiet`` snapshot's
   case) vs ``git status --porcelain``.

Targets (issue 24 §4): capture <= 1.0x plain git, restore <= 1.5x ``git
checkout`` alone, a run end on 100 files <= 1.0x plain git (issue 10: a run end
<= 30 ms). Wall time and CPU time (this process and its git children: the
load-independent figure on a shared machine) are both shown. Prints medians
(min-max) in ms; nothing is asserted.

    python scripts/bench_checkpoints.py [--files 10000] [--rounds 10] [--json]
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
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from agentd.actors.checkpoints import CheckpointEngine, checkpoint_ref
from agentd.actors.checkpoints import capture as capture_module
from agentd.actors.checkpoints import quiet
from agentd.actors.checkpoints import restore as restore_module

TARGET_CAPTURE_MS = 300.0
#: issue 24 §4: capture <= 1.0x plain git, restore <= 1.5x git checkout alone
TARGET_CAPTURE_RATIO = 1.0
TARGET_RESTORE_RATIO = 1.5
TARGET_RUN_END_MS = 30.0


def plain_env() -> dict[str, str]:
    """The user's git as in the measurements: no host config, a fixed identity."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_AUTHOR_NAME="u", GIT_AUTHOR_EMAIL="u@x",
               GIT_COMMITTER_NAME="u", GIT_COMMITTER_EMAIL="u@x", LC_ALL="C")
    return env


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=plain_env(), check=True, capture_output=True, text=True).stdout


def text(rng: random.Random, size: int) -> bytes:
    words = ["alpha", "beta", "gamma", "delta", "return", "value", "import", "def", "class", "self", "x", "= 1"]
    out, length = [], 0
    while length < size:
        line = " ".join(rng.choice(words) for _ in range(8)) + "\n"
        out.append(line)
        length += len(line)
    return "".join(out).encode()[:size]


def make_workspace(ws: Path, *, files: int, file_bytes: int, build_mb: int, seed: int = 1) -> list[Path]:
    """The measured workspace; returns its tracked text files."""
    rng = random.Random(seed)
    paths = []
    for i in range(files):
        path = ws / "src" / f"pkg{i // 1000:02}" / f"mod{(i // 50) % 20:02}" / f"file{i:05}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text(rng, file_bytes))
        paths.append(path)
    for i in range(5):
        (ws / "assets").mkdir(exist_ok=True)
        (ws / "assets" / f"blob{i}.bin").write_bytes(rng.randbytes(64 * 1024))
    (ws / ".gitignore").write_text("build/\n*.log\nnode_modules/\n")
    for i in range(build_mb):
        (ws / "build").mkdir(exist_ok=True)
        (ws / "build" / f"out{i}.o").write_bytes(rng.randbytes(1 << 20))
    nested = ws / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    (nested / "lib.py").write_text("lib\n")
    git(nested, "add", "-A")
    git(nested, "commit", "-q", "-m", "lib")
    git(ws, "init", "-q")
    # No background auto-gc: it would repack the repository while it is copied
    # (and run in the middle of a measured commit).
    git(ws, "config", "gc.auto", "0")
    git(ws, "add", "-A")
    git(ws, "commit", "-q", "-m", "first")
    (ws / "README.md").write_text("stash me\n")
    git(ws, "add", "README.md")
    git(ws, "stash", "-q")
    (ws / "staged.txt").write_text("staged\n")
    git(ws, "add", "staged.txt")
    git(ws, "commit", "-q", "-m", "staged")  # so that each copy starts clean; the stash stays
    (ws / "staged2.txt").write_text("staged, uncommitted\n")
    git(ws, "add", "staged2.txt")
    return paths


def stats(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 1), "min": round(min(values), 1), "max": round(max(values), 1)}


def show(label: str, s: dict[str, float]) -> str:
    return f"{label:<58} {s['median']:>8.1f} ({s['min']:.1f}-{s['max']:.1f})"


def change_and_commit(rng: random.Random, rel: list[str], size: int, plain: Path, ours: Path, n: int,
                      changed: int = 10, cpu: list[float] | None = None) -> float:
    """Change ``changed`` files the same way in both trees, then ``git add -A
    && git commit`` the plain one; the plain commit's milliseconds (its CPU
    milliseconds appended to ``cpu``)."""
    for path in rng.sample(rel, changed):
        data = text(rng, size)
        (plain / path).write_bytes(data)
        (ours / path).write_bytes(data)
    before, started = cpu_ms(), time.perf_counter()
    subprocess.run(["git", "add", "-A"], cwd=plain, env=plain_env(), check=True)
    subprocess.run(["git", "commit", "-q", "-m", f"r{n}"], cwd=plain, env=plain_env(), check=True)
    took = (time.perf_counter() - started) * 1000
    if cpu is not None:
        cpu.append(cpu_ms() - before)
    return took


async def bench_capture(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    plain, ours = root / "plain", root / "ours"
    paths = make_workspace(plain, files=args.files, file_bytes=args.file_bytes, build_mb=args.build_mb)
    shutil.copytree(plain, ours, symlinks=True)
    rel = [p.relative_to(plain) for p in paths]
    engine = CheckpointEngine(root / "checkpoints")
    started = time.perf_counter()
    base = (await engine.capture(ours, checkpoint_ref("bench", "root", 0))).commit
    first = (time.perf_counter() - started) * 1000
    rng = random.Random(2)
    plain_ms, ours_ms, plain_cpu, ours_cpu = [], [], [], []
    for n in range(1, args.warmup + args.rounds + 1):
        round_cpu: list[float] = []
        plain_time = change_and_commit(rng, rel, args.file_bytes, plain, ours, n, args.changed, round_cpu)
        cpu, started = cpu_ms(), time.perf_counter()
        result = await engine.capture(ours, checkpoint_ref("bench", "root", n), base=base)
        ours_time, cpu = (time.perf_counter() - started) * 1000, cpu_ms() - cpu
        assert result.summary.files_changed == args.changed, result.summary
        base = result.commit
        if n > args.warmup:
            plain_ms.append(plain_time)
            ours_ms.append(ours_time)
            plain_cpu.append(round_cpu[0])
            ours_cpu.append(cpu)
    return {"first_baseline_ms": round(first, 1), "changed": args.changed, "plain": stats(plain_ms), "ours": stats(ours_ms),
            "plain_cpu": stats(plain_cpu), "ours_cpu": stats(ours_cpu),
            "ratio": round(statistics.median(ours_ms) / statistics.median(plain_ms), 2),
            "ratio_cpu": round(statistics.median(ours_cpu) / statistics.median(plain_cpu), 2)}


async def bench_restore(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    plain, ours = root / "plain", root / "ours"  # made by bench_capture, identical trees
    rel = sorted(str(p.relative_to(ours)) for p in (ours / "src").rglob("*.py"))
    engine = CheckpointEngine(root / "checkpoints")
    git(plain, "add", "-A")
    git(plain, "commit", "-q", "--allow-empty", "-m", "T")
    target_plain = git(plain, "rev-parse", "HEAD").strip()
    target = (await engine.capture(ours, checkpoint_ref("bench", "target", 0))).commit
    safety_ms: list[float] = []
    real_capture = restore_module.capture

    async def timed_capture(*a: Any, **k: Any) -> Any:
        started = time.perf_counter()
        try:
            return await real_capture(*a, **k)
        finally:
            safety_ms.append((time.perf_counter() - started) * 1000)

    restore_module.capture = timed_capture
    rng = random.Random(3)
    plain_commit_ms, plain_checkout_ms, ours_ms, ours_safety_ms, checkout_cpus, ours_cpus = [], [], [], [], [], []
    try:
        for n in range(1, args.warmup + args.rounds + 1):
            chosen = rng.sample(rel, 85)
            for ws in (plain, ours):
                for path in chosen[:70]:
                    (ws / path).write_bytes(f"round {n} {path}\n".encode())
                for path in chosen[70:]:
                    (ws / path).unlink()
                for i in range(15):
                    new = ws / "src" / "added" / f"r{n}_{i}.py"
                    new.parent.mkdir(parents=True, exist_ok=True)
                    new.write_text(f"added {n} {i}\n")
                (ws / f"untracked{n}.txt").write_text("untracked\n")
                (ws / "build" / f"late{n}.o").write_text("ignored\n")
                (ws / f"debug{n}.log").write_text("ignored\n")
            started = time.perf_counter()
            subprocess.run(["git", "add", "-A"], cwd=plain, env=plain_env(), check=True)
            subprocess.run(["git", "commit", "-q", "-m", f"S{n}"], cwd=plain, env=plain_env(), check=True)
            commit_time = (time.perf_counter() - started) * 1000
            cpu, started = cpu_ms(), time.perf_counter()
            subprocess.run(["git", "checkout", "-q", target_plain], cwd=plain, env=plain_env(), check=True)
            checkout_time, checkout_cpu = (time.perf_counter() - started) * 1000, cpu_ms() - cpu
            cpu, started = cpu_ms(), time.perf_counter()
            result = await engine.restore(ours, target, safety_ref=checkpoint_ref("bench", "pre_rollback", n))
            ours_time, restore_cpu = (time.perf_counter() - started) * 1000, cpu_ms() - cpu
            assert result.complete and result.restored_files == 101, (result.restored_files, result.not_restored)
            if n > args.warmup:
                plain_commit_ms.append(commit_time)
                plain_checkout_ms.append(checkout_time)
                ours_ms.append(ours_time)
                ours_safety_ms.append(safety_ms[-1])
                checkout_cpus.append(checkout_cpu)
                ours_cpus.append(restore_cpu)
    finally:
        restore_module.capture = real_capture
    files_only = [t - s for t, s in zip(ours_ms, ours_safety_ms)]
    return {
        "plain_checkout": stats(plain_checkout_ms),
        "plain_commit_then_checkout": stats([a + b for a, b in zip(plain_commit_ms, plain_checkout_ms)]),
        "ours_total": stats(ours_ms), "ours_safety_capture": stats(ours_safety_ms), "ours_files": stats(files_only),
        "plain_checkout_cpu": stats(checkout_cpus), "ours_total_cpu": stats(ours_cpus),
        "ratio_total_vs_checkout": round(statistics.median(ours_ms) / statistics.median(plain_checkout_ms), 2),
        "ratio_total_vs_checkout_cpu": round(statistics.median(ours_cpus) / statistics.median(checkout_cpus), 2),
        "ratio_files_vs_checkout": round(statistics.median(files_only) / statistics.median(plain_checkout_ms), 2),
        "ratio_total_vs_commit_checkout": round(
            statistics.median(ours_ms) / statistics.median([a + b for a, b in zip(plain_commit_ms, plain_checkout_ms)]), 2),
    }


def cpu_ms() -> float:
    """CPU time of this process and its waited-for children (the git runs), in ms."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime) * 1000


async def counted_capture(engine: CheckpointEngine, ws: Path, ref: str, base: str, counting_run_process: Any,
                          counted: list[int]) -> tuple[Any, float, float]:
    """One capture with its git spawns counted (in ``counted[0]``): the result, its ms and its CPU ms."""
    real_run_process = trio.run_process
    cpu, started = cpu_ms(), time.perf_counter()
    counted[0], trio.run_process = 0, counting_run_process
    try:
        result = await engine.capture(ws, ref, base=base)
    finally:
        trio.run_process = real_run_process
    return result, (time.perf_counter() - started) * 1000, cpu_ms() - cpu


async def bench_run_end(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    ws, plain = root / "small", root / "small-plain"
    rng = random.Random(4)
    rel = []
    for i in range(100):
        path = Path(f"dir{i // 10}") / f"f{i:03}.py"
        (ws / path).parent.mkdir(parents=True, exist_ok=True)
        (ws / path).write_bytes(text(rng, 2048))
        rel.append(path)
    shutil.copytree(ws, plain)
    git(plain, "init", "-q")
    git(plain, "add", "-A")
    git(plain, "commit", "-q", "-m", "first")
    engine = CheckpointEngine(root / "checkpoints")
    base = (await engine.capture(ws, checkpoint_ref("small", "root", 0))).commit
    capture_ms, capture_cpu, with_patch_ms, plain_ms, spawn_ms, spawns = [], [], [], [], [], []
    real_run_process = trio.run_process
    counted: list[int] = [0]

    async def counting_run_process(*a: Any, **k: Any) -> Any:
        counted[0] += 1
        return await real_run_process(*a, **k)

    plain_cpu: list[float] = []
    for n in range(1, args.warmup + 2 * args.rounds + 1):
        round_cpu: list[float] = []
        plain_time = change_and_commit(rng, rel, 2048, plain, ws, n, 10, round_cpu)
        started = time.perf_counter()
        subprocess.run(["git", "--version"], env=plain_env(), check=True, capture_output=True)
        spawn_time = (time.perf_counter() - started) * 1000
        started = time.perf_counter()
        result, captured, cpu = await counted_capture(engine, ws, checkpoint_ref("small", "root", n), base,
                                                      counting_run_process, counted)
        await engine.diff(ws, result.commit, base, max_bytes=64 * 1024)
        both = (time.perf_counter() - started) * 1000
        base = result.commit
        if n > args.warmup:
            capture_ms.append(captured)
            capture_cpu.append(cpu)
            plain_cpu.append(round_cpu[0])
            with_patch_ms.append(both)
            plain_ms.append(plain_time)
            spawn_ms.append(spawn_time)
            spawns.append(counted[0])
    quiet_end = await bench_quiet_run_end(engine, ws, plain, base, args, counting_run_process, counted)
    return {"quiet": quiet_end, "git_spawns_per_capture": max(spawns),"capture_with_summary": stats(capture_ms), "capture_cpu": stats(capture_cpu),
            "capture_then_patch": stats(with_patch_ms), "plain": stats(plain_ms), "git_spawn": stats(spawn_ms),
            "plain_cpu": stats(plain_cpu),
            "ratio": round(statistics.median(capture_ms) / statistics.median(plain_ms), 2),
            "ratio_cpu": round(statistics.median(capture_cpu) / statistics.median(plain_cpu), 2)}


async def bench_quiet_run_end(engine: CheckpointEngine, ws: Path, plain: Path, base: str, args: argparse.Namespace,
                              counting_run_process: Any, counted: list[int]) -> dict[str, Any]:
    """A run end where nothing changed (a chat turn) in the same workspace,
    its last change older than the capture's trust margin (``quiet.MARGIN``),
    beside plain git's cheapest look at the same tree (``git status
    --porcelain``) and its ``add -A && commit`` finding nothing to commit."""
    await trio.sleep(quiet.MARGIN)  # the setting, not a wait for state: a person's project is older than this
    base = (await engine.capture(ws, checkpoint_ref("small", "root", 10_000), base=base)).commit
    ours_ms, ours_cpu, status_ms, status_cpu, commit_ms, spawns = [], [], [], [], [], []
    for n in range(10_001, 10_001 + args.warmup + args.rounds):
        cpu, started = cpu_ms(), time.perf_counter()
        subprocess.run(["git", "status", "--porcelain"], cwd=plain, env=plain_env(), check=True, capture_output=True)
        took_status, took_status_cpu = (time.perf_counter() - started) * 1000, cpu_ms() - cpu
        started = time.perf_counter()
        subprocess.run(["git", "add", "-A"], cwd=plain, env=plain_env(), check=True)
        subprocess.run(["git", "commit", "-q", "-m", f"q{n}"], cwd=plain, env=plain_env(), capture_output=True)
        took_commit = (time.perf_counter() - started) * 1000
        result, took, took_cpu = await counted_capture(engine, ws, checkpoint_ref("small", "root", n), base,
                                                       counting_run_process, counted)
        if result.changed:
            raise RuntimeError("the quiet workspace changed")
        if n >= 10_001 + args.warmup:
            ours_ms.append(took)
            ours_cpu.append(took_cpu)
            status_ms.append(took_status)
            status_cpu.append(took_status_cpu)
            commit_ms.append(took_commit)
            spawns.append(counted[0])
    return {"capture": stats(ours_ms), "capture_cpu": stats(ours_cpu), "git_spawns": max(spawns),
            "plain_status": stats(status_ms), "plain_status_cpu": stats(status_cpu), "plain_commit": stats(commit_ms),
            "ratio_vs_status": round(statistics.median(ours_ms) / statistics.median(status_ms), 2),
            "ratio_cpu_vs_status": round(statistics.median(ours_cpu) / statistics.median(status_cpu), 2)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    load_at_start = os.getloadavg()[0]
    if args.no_snapshot:
        async def listed_with_git(*_args: Any) -> None:
            return None

        capture_module._quiet_listing = listed_with_git
    root = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-ckpt-"))
    root.mkdir(parents=True, exist_ok=True)
    capture: dict[str, Any] = {}
    restore: dict[str, Any] = {}
    try:
        if args.only != "run_end":
            capture = await bench_capture(root, args)
            restore = await bench_restore(root, args)
        run_end = await bench_run_end(root, args)
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    return {"files": args.files, "file_bytes": args.file_bytes, "rounds": args.rounds,
            "git": subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip(),
            "cpus": os.cpu_count(), "load": os.getloadavg()[0], "load_at_start": load_at_start,
            "capture": capture, "restore": restore, "run_end": run_end}


def report(r: dict[str, Any]) -> None:
    c, rs, e = r["capture"], r["restore"], r["run_end"]
    print(f"{r['git']}, {r['cpus']} cpus, load {r['load_at_start']:.1f} at the start, {r['load']:.1f} at the end; "
          f"{r['files']} files of {r['file_bytes']} B; "
          f"{r['rounds']} rounds; ms: median (min-max)")
    if c:
        report_capture_and_restore(c, rs)
    report_run_end(e)


def report_capture_and_restore(c: dict[str, Any], rs: dict[str, Any]) -> None:
    print(f"\nfirst baseline capture (seeded from the user's index): {c['first_baseline_ms']:.0f} ms")
    print(f"\ncapture, {c['changed']} changed files")
    print(show("  plain git add -A && git commit -q", c["plain"]))
    print(show("  agentd capture (incl. diff --raw --numstat summary)", c["ours"]))
    print(show("  CPU: plain git (git processes)", c["plain_cpu"]))
    print(show("  CPU: agentd capture (agentd + git)", c["ours_cpu"]))
    ok = c["ratio"] <= TARGET_CAPTURE_RATIO
    print(f"  ratio {c['ratio']:.2f}x (CPU {c['ratio_cpu']:.2f}x)   target <= {TARGET_CAPTURE_RATIO}x: "
          f"{'met' if ok else 'NOT met'}")
    print("\nrestore, 100 changed files (70 modified, 15 deleted, 15 added)")
    print(show("  plain git checkout -q <commit>", rs["plain_checkout"]))
    print(show("  plain git add -A && commit, then checkout", rs["plain_commit_then_checkout"]))
    print(show("  agentd restore, total", rs["ours_total"]))
    print(show("    of which the safety capture", rs["ours_safety_capture"]))
    print(show("    of which the files (diff, deletes, writes, index)", rs["ours_files"]))
    print(show("  CPU: plain git checkout", rs["plain_checkout_cpu"]))
    print(show("  CPU: agentd restore, total (agentd + git)", rs["ours_total_cpu"]))
    ok = rs["ratio_total_vs_checkout"] <= TARGET_RESTORE_RATIO
    print(f"  ratios: total vs checkout {rs['ratio_total_vs_checkout']:.2f}x (CPU "
          f"{rs['ratio_total_vs_checkout_cpu']:.2f}x), target <= {TARGET_RESTORE_RATIO}x: {'met' if ok else 'NOT met'}; "
          f"files vs checkout {rs['ratio_files_vs_checkout']:.2f}x, "
          f"total vs commit+checkout {rs['ratio_total_vs_commit_checkout']:.2f}x")


def report_run_end(e: dict[str, Any]) -> None:
    print("\nrun end on a 100-file workspace, 10 changed")
    print(show("  one git spawn (git --version), for scale", e["git_spawn"]))
    print(show("  plain git add -A && git commit -q on the same files", e["plain"]))
    print(show(f"  capture (with its summary diff; {e['git_spawns_per_capture']} git spawns)", e["capture_with_summary"]))
    print(show("    its CPU time, agentd + git (load-independent)", e["capture_cpu"]))
    print(show("    plain git's CPU time", e["plain_cpu"]))
    print(show("  capture + diff (files and patch)", e["capture_then_patch"]))
    print(f"  target <= {TARGET_RUN_END_MS:.0f} ms: {'met' if e['capture_with_summary']['median'] <= TARGET_RUN_END_MS else 'NOT met'}"
          f" (capture), {'met' if e['capture_then_patch']['median'] <= TARGET_RUN_END_MS else 'NOT met'} (capture + patch);"
          f" capture is {e['ratio']:.2f}x plain git (CPU {e['ratio_cpu']:.2f}x), target <= 1.0x")
    q = e["quiet"]
    print("\nrun end on the same workspace, nothing changed (a chat turn; its last change older than quiet.MARGIN)")
    print(show("  plain git status --porcelain", q["plain_status"]))
    print(show("    its CPU time", q["plain_status_cpu"]))
    print(show("  plain git add -A && git commit -q (nothing to commit)", q["plain_commit"]))
    print(show(f"  capture ({q['git_spawns']} git spawns)", q["capture"]))
    print(show("    its CPU time, agentd + git", q["capture_cpu"]))
    print(f"  capture is {q['ratio_vs_status']:.2f}x git status (CPU {q['ratio_cpu_vs_status']:.2f}x)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000, help="tracked text files (default 10000)")
    parser.add_argument("--file-bytes", type=int, default=2048, help="bytes per text file (default 2048)")
    parser.add_argument("--build-mb", type=int, default=20, help="MB of ignored build output (default 20)")
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds (default 10)")
    parser.add_argument("--changed", type=int, default=10, help="files changed per capture round (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="unmeasured rounds first (default 2)")
    parser.add_argument("--dir", help="work here and keep it (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    parser.add_argument("--no-snapshot", action="store_true",
                        help="list every capture with git, as before the quiet snapshot (capture._quiet_listing off)")
    parser.add_argument("--only", choices=["run_end"], help="measure only this part (the run end: seconds, not minutes)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    results = trio.run(run, args)
    report(results)
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

"""Where the test suite's CPU goes (issue 28 item 13): per test file, and per kind of process.

    python scripts/suite_cpu.py                          # the whole suite (pyproject's addopts: every core)
    python scripts/suite_cpu.py -- tests/actors -x       # pytest's own arguments after --
    python scripts/suite_cpu.py --top 20 --keep /tmp/cpu # fewer rows; keep the raw records

It runs pytest with two additions on PYTHONPATH, both in a temporary directory:

* a plugin (``-p``) that records, around each test (setup, call and teardown), the wall time and
  the CPU of the pytest process (``RUSAGE_SELF``) and of the children it has reaped
  (``RUSAGE_CHILDREN``: the daemons it stopped, the CLI calls, and what *they* reaped: agents,
  guards, git). A module's daemon is reaped after the module's last test, so its whole life is
  that test's: read the table per file, not per test;
* a ``sitecustomize`` that every Python child with ``site`` on (not ``-I``/``-S``) imports at
  start: it logs the process's command line, and at a clean exit its CPU. A process killed by a
  signal is counted without its CPU (it is still in its parent's ``RUSAGE_CHILDREN``).

Then it prints the files by CPU, the kinds of process by CPU, and the whole run's wall and CPU
(this script's ``RUSAGE_CHILDREN``: everything reaped). The records go to ``--keep`` if given.
Children get one more PYTHONPATH entry and a ``sitecustomize``; a test about either would see them.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PLUGIN = '''
import json, os, resource, time
import pytest

def _cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t0, s0, c0 = time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN)
    yield
    record = {"id": item.nodeid, "wall": time.monotonic() - t0,
              "self": _cpu(resource.RUSAGE_SELF) - s0, "children": _cpu(resource.RUSAGE_CHILDREN) - c0}
    with open(os.path.join(os.environ["SUITE_CPU_DIR"], f"tests.{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(record) + "\\n")
'''

SITECUSTOMIZE = '''
import os, sys
if os.environ.get("SUITE_CPU_DIR"):
    def _log(kind):
        import json, resource
        r = resource.getrusage(resource.RUSAGE_SELF)
        try:
            with open(os.path.join(os.environ["SUITE_CPU_DIR"], f"proc.{os.getpid()}.jsonl"), "a") as f:
                f.write(json.dumps({"kind": kind, "argv": sys.orig_argv[1:5], "cpu": r.ru_utime + r.ru_stime}) + "\\n")
        except OSError:
            pass
    _log("start")
    import atexit
    atexit.register(_log, "exit")
'''


def kind_of(argv: list[str]) -> str:
    """A short name for a process: ``-m agentd serve``, ``acp_agent.py``, ``pytest worker``."""
    if argv[:2] == ["-m", "pytest"] or any("exec(eval(" in a for a in argv):  # xdist's workers: execnet
        return "pytest (controller, workers)"
    if argv[:1] == ["-m"] and len(argv) > 1:
        return " ".join(["-m", *argv[1:3]]) if argv[1] == "agentd" else f"-m {argv[1]}"
    return " ".join(Path(a).name if "/" in a else a for a in argv[:2])


def report(records: Path, top: int) -> None:
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for path in records.glob("tests.*.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            row = files[r["id"].split("::", 1)[0]]
            row[0] += 1
            row[1] += r["wall"]
            row[2] += r["self"]
            row[3] += r["children"]
    total = sum(r[2] + r[3] for r in files.values())
    print(f"\nper test file (CPU-s: the pytest process + what it reaped; {total:.0f} in all)")
    print(f"{'CPU':>7} {'self':>6} {'child':>6} {'wall':>6} {'tests':>5}  file")
    for name, (n, wall, own, child) in sorted(files.items(), key=lambda kv: -(kv[1][2] + kv[1][3]))[:top]:
        print(f"{own + child:7.1f} {own:6.1f} {child:6.1f} {wall:6.1f} {n:5d}  {name}")

    kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0, 0.0])
    for path in records.glob("proc.*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        if not lines:
            continue
        row = kinds[kind_of(lines[0]["argv"])]
        row[0] += 1
        if lines[-1]["kind"] == "exit":
            row[1] += 1
            row[2] += lines[-1]["cpu"]
    print("\nper kind of Python process (own CPU-s of those that exited cleanly)")
    print(f"{'started':>7} {'exited':>6} {'CPU':>7} {'each':>6}  process")
    for name, (started, exited, cpu) in sorted(kinds.items(), key=lambda kv: -kv[1][2])[:top]:
        print(f"{int(started):7d} {int(exited):6d} {cpu:7.1f} {cpu / exited if exited else 0:6.2f}  {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=40, help="rows per table (default 40)")
    parser.add_argument("--keep", type=Path, help="a directory to keep the raw records in")
    parser.add_argument("pytest_args", nargs="*", help="pytest's arguments (after --)")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[1]
    work = Path(tempfile.mkdtemp(prefix="suite-cpu-"))
    records = args.keep or work / "records"
    records.mkdir(parents=True, exist_ok=True)
    (work / "suite_cpu_plugin.py").write_text(PLUGIN)
    (work / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(os.environ, SUITE_CPU_DIR=str(records),
               PYTHONPATH=os.pathsep.join(filter(None, [str(work), os.environ.get("PYTHONPATH")])))
    started = time.monotonic()
    try:
        code = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_cpu_plugin", *args.pytest_args],
                              cwd=root, env=env).returncode
        wall = time.monotonic() - started
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        report(records, args.top)
        print(f"\nthe run: {wall:.0f} s wall, {usage.ru_utime:.0f} s user + {usage.ru_stime:.0f} s system CPU, "
              f"pytest exit {code}; load average {os.getloadavg()[0]:.2f} at the end")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())

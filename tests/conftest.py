"""Shared fixtures: a real daemon process on a private data dir and socket,
and a connected client. Seeds of randomized tests are printed on failure.

Every daemon of the suite holds its answers to their result Structs
(``AGENTD_CHECK_RESULTS``, set before agentd is imported here and inherited
by every daemon the suite starts), and the test client holds every answer and
event it receives to ``agentd schema``'s document (``tests/schema_check.py``):
the whole suite exercises the schema."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("AGENTD_CHECK_RESULTS", "1")

import pytest  # noqa: E402 - after the environment the daemons inherit

from agentd.protocol.client import Client, EventStream  # noqa: E402
from agentd.launch import start_daemon  # noqa: E402
from tests import schema_check  # noqa: E402


def _checked_client() -> None:
    """Wrap the client's calls and event streams with the schema checks."""
    call, next_event = Client.call, EventStream.__anext__

    async def checked_call(self, method, _on_result=None, **params):
        result = await call(self, method, _on_result, **params)
        schema_check.check_result(method, result)
        return result

    async def checked_next(self):
        event = await next_event(self)
        schema_check.check_event(event)
        return event

    checked_call.__wrapped__ = call
    checked_next.__wrapped__ = next_event
    Client.call = checked_call
    EventStream.__anext__ = checked_next


_checked_client()


def pytest_configure(config):
    """Child processes compile agentd's modules once per run, not at every start.

    The suite starts a Python process for every daemon, scripted agent and
    its guard, ``agentd mcp`` and CLI call. Under ``PYTHONDONTWRITEBYTECODE``
    each one compiled every agentd module it imports from source again —
    about a third of a CPU-second per daemon start here. The children keep
    the spirit of that setting (nothing is written beside the sources): their
    bytecode goes to a cache of this user's in the temporary directory
    (``PYTHONPYCACHEPREFIX``), which Python validates against the sources'
    mtime and size like any ``__pycache__`` — only a folder of this user's
    that nobody else may write: bytecode found there runs in every child.
    """
    if not sys.flags.dont_write_bytecode or os.environ.get("PYTHONPYCACHEPREFIX"):
        return
    cache = Path(tempfile.gettempdir()) / f"agentd-tests-pycache-{os.getuid()}"
    try:
        cache.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(cache)
    except OSError:
        return
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
        return  # another user's (or a symlink): its bytecode would run in every child
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = str(cache)


#: Files of few but long tests (a property test, mypy, a wheel build, a browser, the real
#: runtimes), dispatched first. ``--dist loadfile`` hands whole files to the workers as they
#: become free; xdist's own order is by number of tests, which left single-test files of
#: 10-35 s for the end, where one worker ran them while the other had nothing left to do
#: (issue 28 item 13). Longest first; the rest keep xdist's order (most tests first).
DISPATCHED_FIRST = (
    "tests/integration/test_claude.py",
    "tests/actors/test_run_control_properties.py",
    "tests/integration/test_codex.py",
    "tests/integration/test_acp_claude.py",
    "tests/protocol/test_web_console.py",
    "tests/actors/test_fault_isolation.py",
    "tests/scripts/test_chaos.py",
    "tests/actors/test_lineage_properties.py",
    "tests/test_types.py",
    "tests/actors/test_wakeup_properties.py",
    "tests/test_packaging.py",
    "tests/integration/test_acp_runtimes.py",
    "tests/integration/test_acp_codex.py",
    "tests/integration/test_delegation_runtimes.py",
    "tests/actors/test_usage_and_stalls.py",
    "tests/integration/test_lineage_runtimes.py",
    "tests/cli/test_launcher.py",
    "tests/store/test_restart.py",
    "tests/protocol/test_web_manage.py",
    "tests/integration/test_rollback_runtimes.py",
    "tests/actors/test_rollback_properties.py",
    "tests/integration/test_worktree_runtimes.py",
)


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): one worker more than the cores. A test waits much of
    its time on its daemon, agents and timers (two workers kept two cores ~66% busy), and a third
    worker fills those waits: the suite in 4:10 instead of 4:54-5:04 on two cores, for the same
    CPU, and a larger share of the machine when other work loads it (issue 28 item 13)."""
    return (os.cpu_count() or 1) + 1


def pytest_collection_modifyitems(session, config, items):
    """In an xdist worker: the files in dispatch order (``DISPATCHED_FIRST``,
    then by number of tests); pyproject's ``--no-loadscope-reorder`` keeps it.
    Every worker sorts the same collection the same way, as xdist requires."""
    if not hasattr(config, "workerinput"):
        return
    files = [item.nodeid.split("::", 1)[0] for item in items]
    count: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    for index, name in enumerate(files):
        count[name] = count.get(name, 0) + 1
        first_seen.setdefault(name, index)
    rank = {name: index for index, name in enumerate(DISPATCHED_FIRST)}

    def key(pair):
        name = pair[0]
        return (rank.get(name, len(rank)), -count[name] if name not in rank else 0, first_seen[name])

    items[:] = [item for _, item in sorted(zip(files, items), key=key)]


#: the pinned Codex, Claude and ACP agents of the real-runtime tests (package.json, package-lock.json)
RUNTIMES = Path(__file__).resolve().parent / "integration" / "runtimes"
RUNTIMES_KEY = pytest.StashKey[str | None]()


def install_runtimes() -> str | None:
    """Install the pinned runtimes with ``npm ci`` when they are not there
    and npm is (once: a later run finds them; offline, npm fails and says
    so): the README's test command is the whole set-up. Why they are not
    there, or None when they are."""
    bins = RUNTIMES / "node_modules" / ".bin"
    if all((bins / name).exists() for name in ("codex", "claude", "claude-agent-acp", "codex-acp")):
        return None
    if os.environ.get("AGENTD_TESTS_NO_NPM"):
        return "not installed, and AGENTD_TESTS_NO_NPM is set"
    npm = shutil.which("npm")
    if npm is None:
        return "not installed, and npm is not on PATH (`npm ci --prefix tests/integration/runtimes` installs them)"
    try:
        subprocess.run([npm, "ci", "--prefix", str(RUNTIMES), "--no-audit", "--no-fund", "--loglevel=error"],
                       check=True, capture_output=True, timeout=900)
    except subprocess.CalledProcessError as exc:
        last = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        return f"`npm ci` of the pinned runtimes failed (offline?): {last[0][:200]}"
    except subprocess.TimeoutExpired:
        return "`npm ci` of the pinned runtimes did not finish within 15 minutes"
    return None


def pytest_sessionstart(session):
    """Before any test is collected (and before xdist starts its workers),
    in the controlling process only: the pinned runtimes are installed."""
    config = session.config
    if not hasattr(config, "workerinput"):
        config.stash[RUNTIMES_KEY] = install_runtimes()


def pytest_report_header(config):
    from tests.browser import ARTIFACTS, missing

    why = missing()
    runtimes = config.stash.get(RUNTIMES_KEY, None)
    return [f"web console browser tests: {'skipped: ' + why if why else f'screenshots in {ARTIFACTS}'}",
            f"real-runtime tests (tests/integration): {'skipped: ' + runtimes if runtimes else 'the pinned Codex and Claude'}"]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Say in the summary what was skipped, and why (issue 28 item 14)."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons: dict[str, int] = {}
    for report in skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reasons[reason.removeprefix("Skipped: ")] = reasons.get(reason.removeprefix("Skipped: "), 0) + 1
    terminalreporter.write_line(f"{len(skipped)} skipped: " + "; ".join(f"{n} × {why}" for why, n in sorted(reasons.items())))


@pytest.fixture
def short_dir():
    """A short directory for sockets (AF_UNIX paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="ad-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def module_paths(tmp_path_factory):
    """A data dir and a short socket path for one daemon shared by a module's
    tests (``tests.helpers.daemon_for_module``)."""
    short = Path(tempfile.mkdtemp(prefix="ad-"))
    yield tmp_path_factory.mktemp("module") / "data", short / "agentd.sock"
    shutil.rmtree(short, ignore_errors=True)


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def socket_path(short_dir):
    return short_dir / "agentd.sock"


@contextlib.asynccontextmanager
async def _test_daemon(data_dir, socket_path):
    """A real ``agentd serve`` child process for one test; SIGTERM after it
    (its log's tail printed when it did not exit cleanly)."""
    proc = await start_daemon(data_dir, socket_path)
    try:
        yield proc
    finally:
        code = await proc.terminate()
        if code not in (0, -9):
            print(proc.log_text()[-4000:])


@pytest.fixture
async def daemon(data_dir, socket_path):
    """A real ``agentd serve`` child process; stopped with SIGTERM after the test."""
    async with _test_daemon(data_dir, socket_path) as proc:
        yield proc


@pytest.fixture
async def client(daemon):
    async with Client.connect(daemon.socket) as c:
        yield c


@pytest.fixture(scope="module")
def module_daemon(module_paths):
    """One daemon (default config) for a whole module (issue 28 item 13: a
    start and stop is about 2 s of this loaded machine). A module whose tests
    need only threads of their own shares it by overriding ``daemon``::

        @pytest.fixture
        def daemon(module_daemon):
            return module_daemon

    Its exit status is checked after the module."""
    from tests.helpers import daemon_for_module

    with daemon_for_module(start_daemon, *module_paths) as proc:
        yield proc


@pytest.fixture
async def own_daemon(data_dir, socket_path):
    """A daemon of the test's own, where the module's ``daemon`` is shared:
    for a test about everything the daemon holds (every thread, every event)."""
    async with _test_daemon(data_dir, socket_path) as proc:
        yield proc


@pytest.fixture
async def own_client(own_daemon):
    async with Client.connect(own_daemon.socket) as c:
        yield c

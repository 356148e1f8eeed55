#!/usr/bin/env python3
"""Chaos run: a seeded fault schedule against a real agentd, checked after every round.

    python scripts/chaos.py --seed 1 --rounds 200          # one JSON line per round
    python scripts/chaos.py --seed 7 --rounds 5 --json     # every line is JSON
    python scripts/chaos.py --seed 7 --rounds 200 --plan   # the schedule only, no daemon
    python scripts/chaos.py --rounds 3 --with-fault partial_lines   # one more such fault every round

A real daemon (``agentd.launch.start_daemon``) runs on a fresh temp data dir
with the built-in scripted agent as its provider, under a descriptor limit of
``DAEMON_NOFILE`` (512, through ``prlimit``) so that its connection cap (the
limit less its reserve of 256) is cheap to reach. Every random choice comes
from ``random.Random(seed)`` and is drawn when a round is *planned*, never from
what the daemon happened to do, so a seed replays the same schedule (the
interleaving of a real multi-process system still varies; a violation prints
its seed and round). ``--plan`` prints it.

Fault model
-----------
Each round, 2-4 clients (one connection each) create threads and send
messages, every command with its own ``commandId``: plain text, and
``@script`` messages that stream ``say`` in chunks, run a short ``tool``,
``write`` a file, crash once (``{"crash": 1, "once": true}``: recovered by a
new attempt), run a tool then crash (the run fails), ``fail``, ``hang``, or run
a tool that hangs. Clients do not wait for their runs, so messages to a busy
thread are queued. Meanwhile faults are injected when the round has produced
a drawn number of durable events (or when the clients are done):

* ``provider_kill``: SIGKILL of a provider process (a pid from
  ``daemon.status`` sessions, busy ones first);
* ``daemon_kill`` / ``daemon_term``: SIGKILL / SIGTERM of the daemon, then a
  restart (a SIGTERM shutdown must exit 0); clients that lose their
  connection retry the same ``commandId`` on the new daemon;
* ``drop_stream``: a raw connection subscribes, reads a few events of the
  replay and closes without unsubscribing;
* dropped commands: a client writes a command on a raw connection and closes
  it without reading the answer, then retries the same ``commandId``;
* slow subscriber: a raw connection subscribes and stops reading while a
  client streams a message of 13,000 deltas; the subscriber must get
  ``events.resync`` (or be disconnected), or, since a 13,000-delta flood fits
  in what the byte-bounded queues let one subscriber keep (``FLOOD_HOLDABLE``),
  the whole flood (counted ``held``); no one else may wait for it;
* ``double_term``: two SIGTERMs 0-199 ms apart (drawn), then a restart like
  ``daemon_term``: the shutdown must absorb the second and exit 0;
* ``stalled_subscribers``: 8-12 raw connections subscribe and never read, 1-2
  read slowly (64 KiB every 20 ms) and one reads at full speed, while a new
  thread streams a 6-10 MiB answer (``{"say": 64 KiB, "repeat": 96-160,
  "chunks": 6-48}``: deltas up to 1.7 MiB). The thread is retired at once (it
  takes no more random messages);
* ``partial_lines``: 48-96 raw connections each send 1-2.5 MiB without a
  newline (60-240 MiB in all, past the daemon's 64 MiB budget for unfinished
  lines and, for some, past the 2 MiB line limit) and hold on;
* ``connection_flood`` (once the clients are done): 4-32 more raw connections
  than the daemon's connection cap, each asking ``daemon.status``, and held
  until all are answered or refused.

Hostile-client faults draw their sizes from their own seeded pick. Besides the
rounds, a round may (2 %, drawn) end with the disk-full scenario: a daemon of
its own whose data dir is an 8 MiB tmpfs in a private user and mount namespace
(``unshare -rm``, held by a helper process, entered with ``nsenter``). It
commits a thread and two runs, starts a run with a 4 MiB answer, fills the
tmpfs during that run's tool step, then creates threads until the store refuses
a commit. Where ``unshare`` or ``nsenter`` is missing, or the host refuses user
namespaces or the mount, the scenario is skipped and the reason printed
(``skipped`` in the summary); likewise ``connection_flood`` without ``prlimit``.

Hanging runs can only be ended by a restart or a provider kill, so a round
with a ``hang`` step always ends with a daemon restart, and a tool that hangs
gets its provider killed once it runs (its run then fails).

Invariants
----------
After each fault-injecting phase, the script waits (following events, bounded
in real time) until every run of a live daemon is terminal, then checks:

1. Committed receipts: repeating a command that got a result, with the same
   ``commandId``, returns the identical result, across restarts (this round's
   commands and a sample of older ones each round; all of them every
   ``--full-every`` rounds and at the end). Exactly once: every thread and
   every run answers exactly one command (a command never ran twice).
2. Event seqs: a replay from a seq just below the last verified one gives
   exactly the tail, gap-free and without duplicates, and events already seen
   are unchanged; ``afterSeq 0`` gives exactly ``1..lastSeq`` every
   ``--full-every`` rounds and at the end. A slow subscriber's resync
   ``afterSeq`` is the last seq it was given.
3. Right after every restart, before anything is sent: every run is terminal,
   no thread has an ``activeRunId``, no node is running/pending and no attempt
   open (re-read for every run not already verified terminal and unchanged),
   no message is queued or streaming, no session was started by itself.
4. Only root nodes end runs: each terminal run has exactly one ``run.<status>``
   event, whose ``nodeId`` is the run's ``rootNodeId``, a ``root_turn`` node
   that counts for the run and ended with the run's status; a completed run
   has exactly one completed root node; no other node counts for the run; a
   run never changes once terminal.
5. No unknown provider process: every scripted-agent process under this data
   dir is a session pid in ``daemon.status`` (zombies excepted); none is left
   after a SIGTERM shutdown or after a restart.
6. Every user message is ``complete`` (its run started and was not
   cancelled), ``not_sent`` (its run was cancelled by a restart, or ended
   before its turn started: the text is kept, nothing was sent) or ``queued``
   with its run still queued.
7. No thread stuck: after each round every thread of the round takes a new
   message that completes.

Plus: a SIGTERM shutdown exits 0 (also after a second SIGTERM) and starts no
provider session once it has begun stopping them; and in a round without
provider kills or restarts, each scripted message ends as its script says
(plain text completes, ``fail`` fails, ...). Violations print the run's event
history to explain themselves.

Hostile clients and host (a violation names ``memory``, ``stalled``,
``overload`` or ``disk``). Resident memory is the daemon's ``VmRSS`` (and
``RssAnon``) from ``/proc/PID/status``, sampled every 50 ms; a fault's baseline
is its value when the fault starts.

8. ``stalled_subscribers``: while they hold on, resident memory stays under
   baseline + twice the answer (its deltas and its durable appends, objects
   shared by every subscriber's buffer) + (2 MiB outbound cap + one delta
   line) per stalled or slow subscriber + ``RSS_ALLOWANCE`` (96 MiB: lines
   being encoded and decoded, the answer being assembled, allocator slack).
   Unbounded queues (the daemon before issue 9) hold about twice the answer
   per subscriber, 12-20 MiB each. Once they read, each stalled subscriber
   gets ``events.resync`` whose ``afterSeq`` is the last seq it was given, or
   is disconnected (an answer small enough for its hub buffer, outbound cap and
   socket to hold may instead arrive whole: counted ``held``); slow ones catch
   up or are resynced likewise; the full-speed one gets every event up to the
   run's end, gap-free, with no resync; every stream is gap-free. Once the
   round's hostile connections are all closed (a slow subscriber of the same
   round holds a bounded buffer until it is read at the end of the round, and
   while it is open the bound above grows by what it may hold), within 10 s
   ``VmRSS`` is back within ``RSS_AFTER_SLACK`` (96 MiB) and ``RssAnon`` within
   ``ANON_AFTER_SLACK`` (48 MiB) of the baseline: the bounded buffers are
   freed; what may stay is allocator slack and pages of the store's map that
   were read (file-backed).
9. ``partial_lines``: other clients, connected and new, are answered (within
   ``WAIT``) while the lines are held; each sender is answered nothing (held),
   a parse error (only past the 2 MiB line limit), or one ``overloaded`` error
   line after which it is closed; when more than the 64 MiB budget surely
   reached the daemon, someone was told ``overloaded``; resident memory stays
   under baseline + 1.25 x 64 MiB + 64 KiB (a read) per connection + 32 MiB,
   and comes back as in 8 after they close.
10. ``connection_flood``: each connection is either served (its
    ``daemon.status`` answered) or gets exactly one ``overloaded`` error line
    and is closed; at least one is refused and at most the cap are served; a
    client connected before is still answered; within ``WAIT`` of closing
    them a new client is served; the daemon logs no traceback meanwhile.
11. Disk full: the daemon stays up and answers reads on the full disk; a
    commit the store refuses says the disk is full (``write failed: ...: the
    disk holding agentd's store ... is full``) — within ``DISK_WRITES``
    (2,000) tries; after the disk is freed the SIGTERM shutdown exits 0, and
    after a restart every receipt repeats identically, the runs and messages
    committed before the disk filled are unchanged, events replay gap-free
    from 1, every run is terminal, and a new message completes; no provider
    process outlives the daemon. How the run in flight ended is printed
    (``disk full: ...``); when its reason does not mention the disk a ``note``
    line names the known defect (issue 9, item 10: the scripted agent crashes
    writing its own files on the full disk and the run blames the crash).

The summary line (``"final": true``) has the fault counts (``faults``), the
outcomes of the hostile-client faults (``hostile``), ``peakRssMiB`` over the
whole run (file-backed pages of the store's map included, so it grows with the
store) and ``peakAnonMiB`` (anonymous memory alone), ``memoryGrowthMiB`` (the
most each memory fault grew resident memory over its baseline) and
``skipped`` faults with the reason.

Threads: at most ``MAX_ACTIVE_THREADS`` take new messages; when more are
created, the oldest is retired (still covered by the restart checks and the
receipt checks, no longer sent to).

All rounds are played even after a violation (runs that stay stuck for
``WAIT`` seconds are cleared by a SIGKILL restart); ``--fail-fast`` stops after
the first round with one. Exit status 0 when nothing was violated, 1 otherwise.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "scripts"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import trio  # noqa: E402

import hostile  # noqa: E402
from agentd.protocol.client import Client, ConnectionLost  # noqa: E402
from agentd.protocol.errors import AgentdError  # noqa: E402
from agentd.protocol.framing import MAX_LINE  # noqa: E402
from agentd.protocol.limits import (  # noqa: E402
    DESCRIPTOR_RESERVE, INPUT_BYTES_TOTAL, MAX_CONNECTIONS, OUTBOUND_BYTES_PER_CONNECTION, OUTBOUND_BYTES_TOTAL,
)
from agentd.launch import DaemonProcess, DaemonStartError, start_daemon  # noqa: E402
from agentd.store.hub import DEFAULT_BYTE_CAPACITY  # noqa: E402

TERMINAL = frozenset({"completed", "failed", "interrupted", "cancelled"})
OPEN_NODE = frozenset({"running", "pending"})
MAX_ACTIVE_THREADS = 4
FLOOD_CHUNKS = 13_000  # > the hub's 10,000-event buffer
#: events of ~200 bytes one stalled subscriber may have waiting within the
#: daemon's bounds: the hub's buffer (10,000) twice (one its stream task took,
#: one filling), its 2 MiB outbound cap, a socket buffer. A 13,000-delta flood
#: fits since the cap is in bytes (it was 1,024 messages): the subscriber may
#: then get the whole flood instead of a resync.
FLOOD_HOLDABLE = 2 * 10_000 + OUTBOUND_BYTES_PER_CONNECTION // 200 + (1 << 20) // 200
HANG_TOOL = "hang-tool"
WAIT = 30.0  # real-time bound of every wait for the daemon
ROUND_TIMEOUT = 120.0
LOST_TEXT = "the daemon closed the connection"  # protocol.client's message when the socket closes

PAYLOAD_WEIGHTS = {
    "plain": 3, "say": 3, "tool": 2, "write": 2, "crash_once": 1.2,
    "tool_crash": 0.8, "fail": 1, "hang": 0.35, "hang_tool": 0.5,
}
FAULT_WEIGHTS = {
    "provider_kill": 4, "daemon_kill": 2, "daemon_term": 1.2, "drop_stream": 1.5,
    "double_term": 0.7, "stalled_subscribers": 0.9, "partial_lines": 0.6, "connection_flood": 0.5,
}
#: faults that wait until the round's clients are done (a connection flood
#: would turn the round's own clients away)
AFTER_CLIENTS = frozenset({"connection_flood"})
RESTARTS = ("daemon_kill", "daemon_term", "double_term", "recovery_restart")
HANGS = ("hang", "hang_tool")
DISK_FULL_CHANCE = 0.02  # per round: the disk-full scenario, on its own daemon

MiB = hostile.MiB
#: the chaos daemon's descriptor limit (``prlimit``): its connection cap is
#: this less the daemon's reserve, 256 connections, cheap to exceed
DAEMON_NOFILE = 512
#: what the daemon may hold beyond its documented bounds while it streams and
#: parses megabyte lines: copies of a line being encoded or decoded, the
#: provider's message being assembled, allocator slack
RSS_ALLOWANCE = 96 * MiB
#: after hostile connections are gone, resident memory must come back to
#: within this of what it was before they came (the bounded buffers are freed;
#: what stays is allocator slack and pages of the store's map that were read)
RSS_AFTER_SLACK = 96 * MiB
ANON_AFTER_SLACK = 48 * MiB
DISK_BYTES = 8 * MiB  # the tmpfs of the disk-full scenario
DISK_WRITES = 2000  # commits tried on the full disk before the store must have refused one


class Fatal(Exception):
    """The run cannot go on (the daemon died, a wait timed out)."""


# -- the plan -------------------------------------------------------------------------


@dataclass
class Command:
    cid: str
    method: str
    params: dict[str, Any]
    round: int
    kind: str  # "create", a payload kind, or "check"
    drop: bool = False  # first written on a raw connection that is closed unanswered
    result: dict[str, Any] | None = None


@dataclass
class Fault:
    kind: str
    trigger: int | None  # durable events since the round began; None: once the clients are done
    pick: int  # victim / window choice, drawn with the plan
    idle_timeout: float  # for the daemon a restart starts


@dataclass
class RoundPlan:
    number: int
    threads: list[str]  # the active threads at the start of the round
    clients: list[list[Command]]
    faults: list[Fault]
    slow_subscriber: bool
    tail_back: int  # how far below the last verified seq the tail replay starts
    full_check: bool
    sample: list[str]  # older commandIds whose receipts are re-checked
    disk_full: bool = False  # the disk-full scenario runs after the round's checks


def script(*steps: dict[str, Any]) -> str:
    return "@script\n" + json.dumps(list(steps))


def payload_text(kind: str, cid: str, rng: random.Random) -> str:
    """The message text of a payload kind; ``cid`` makes every text unique."""
    if kind == "plain":
        return f"hello from {cid}"
    if kind == "say":
        return script({"say": f"{cid} " + "streamed words " * rng.randint(1, 6), "chunks": rng.randint(2, 8)})
    if kind == "tool":
        return script({"tool": {"name": "probe", "seconds": rng.choice([0, 0.01, 0.05])}}, {"say": cid})
    if kind == "write":
        return script({"write": {"path": f"out/{cid}.txt", "content": cid}}, {"say": f"wrote {cid}"})
    if kind == "crash_once":
        return script({"say": cid}, {"crash": 1, "once": True}, {"say": "recovered"})
    if kind == "tool_crash":
        return script({"say": cid}, {"tool": {"name": "probe", "seconds": 0.01}}, {"crash": 2})
    if kind == "fail":
        return script({"say": cid}, {"fail": f"planned failure {cid}"})
    if kind == "hang":
        return script({"say": cid}, {"hang": True})
    if kind == "hang_tool":
        return script({"say": cid}, {"tool": {"name": HANG_TOOL, "hang": True}})
    if kind == "flood":
        return script({"say": (cid + " ").ljust(FLOOD_CHUNKS, "x"), "chunks": FLOOD_CHUNKS})
    raise ValueError(kind)


def expected_outcome(command: Command, run: dict[str, Any]) -> str | None:
    """Why ``run`` is not what its script must give in an undisturbed round, or None."""
    status, reason = run["status"], run.get("reason") or ""
    if command.kind in ("plain", "say", "tool", "write", "flood", "check", "big_say"):
        ok = status == "completed"
    elif command.kind == "fail":
        ok = status == "failed" and reason.startswith("provider_error")
    elif command.kind == "tool_crash":
        ok = status == "failed" and reason.startswith("provider_crashed")
    elif command.kind == "crash_once":  # recovered, unless this thread is in a crash loop
        ok = status == "completed" or (status == "failed" and reason.startswith("provider_crash_loop"))
    else:
        return None
    return None if ok else f"{command.kind} message ended {status} ({reason or 'no reason'})"


# -- processes -------------------------------------------------------------------------


def agent_processes(data_dir: Path) -> dict[int, str]:
    """Live (non-zombie) scripted-agent processes whose ``--home`` is under
    ``data_dir``: pid -> command line."""
    root = os.path.realpath(data_dir)
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0")]
        except OSError:
            continue
        if "agentd.actors.providers.scripted_agent" not in args or "--home" not in args:
            continue
        index = args.index("--home") + 1
        home = os.path.realpath(args[index]) if index < len(args) else ""
        if (home == root or home.startswith(root + os.sep)) and process_alive(int(entry)):
            found[int(entry)] = " ".join(args)
    return found


def process_alive(pid: int) -> bool:
    """True unless the process is gone or a zombie (/proc/PID/stat state Z)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def describe_process(pid: int) -> str:
    """Parent, state and age of a process, from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except OSError:
        return "gone"
    age = uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK")
    return f"ppid {int(fields[1])}, state {fields[0].decode()}, age {age:.2f}s"


async def wait_exit(pid: int, timeout: float) -> float | None:
    """Seconds until ``pid`` exits (via a pidfd, no polling), or None if it
    outlives ``timeout``."""
    started = time.monotonic()
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return 0.0
    try:
        with trio.move_on_after(timeout):
            await trio.lowlevel.wait_readable(fd)
            return time.monotonic() - started
    finally:
        os.close(fd)
    return None


def kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


# -- errors ------------------------------------------------------------------------------


def connection_error(exc: BaseException) -> bool:
    """True if ``exc`` (or every exception in a group) means the daemon's
    socket went away: refused (also with an overloaded line), reset or closed mid-call."""
    if isinstance(exc, BaseExceptionGroup):
        return all(connection_error(e) for e in exc.exceptions)
    if isinstance(exc, (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ConnectionLost)):
        return True
    if getattr(exc, "connection_refused", False):
        return True  # turned away with one line (``overloaded``) and closed: as good as refused
    return isinstance(exc, AgentdError) and exc.message == LOST_TEXT


def error_kind(message: Any) -> str | None:
    """``data.kind`` of a JSON-RPC error line, else None."""
    error = message.get("error") if isinstance(message, dict) else None
    return (error.get("data") or {}).get("kind") if isinstance(error, dict) else None


def daemon_error(exc: BaseException) -> AgentdError | None:
    """The daemon's error answer inside ``exc`` (possibly a group), if any."""
    if isinstance(exc, BaseExceptionGroup):
        for e in exc.exceptions:
            if (found := daemon_error(e)) is not None:
                return found
        return None
    return exc if isinstance(exc, AgentdError) and not connection_error(exc) else None


# -- round progress ------------------------------------------------------------------------


class RoundWatch:
    """Counts the round's durable events so faults can fire at a drawn point."""

    def __init__(self) -> None:
        self.count = 0
        self.clients_done = False
        self._changed = trio.Event()

    def _bump(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def saw_event(self) -> None:
        self.count += 1
        self._bump()

    def finish_clients(self) -> None:
        self.clients_done = True
        self._bump()

    async def wait_for(self, trigger: int | None) -> None:
        while not (self.clients_done or (trigger is not None and self.count >= trigger)):
            await self._changed.wait()


@dataclass
class SlowSubscriber:
    stream: trio.SocketStream
    after_seq: int
    generation: int
    buffer: bytes = b""


# -- the chaos run -------------------------------------------------------------------------


class Chaos:
    def __init__(self, args: argparse.Namespace) -> None:
        self.seed: int = args.seed
        self.rounds: int = args.rounds
        self.json: bool = args.json
        self.full_every: int = args.full_every
        self.fail_fast: bool = args.fail_fast
        self.keep: bool = args.keep
        self.with_faults: list[str] = args.with_fault or []
        self.rng = random.Random(self.seed)
        # AF_UNIX paths are short: the socket always gets its own short dir.
        self.socket_dir = Path(tempfile.mkdtemp(prefix="ac-"))
        self.socket = self.socket_dir / "agentd.sock"
        self.work_dir = Path(tempfile.mkdtemp(prefix="chaos-", dir=args.dir)) if args.dir else self.socket_dir
        self.data_dir = self.work_dir / "data"
        self.daemon: DaemonProcess | None = None
        self.generation = 0  # +1 at each restart
        self.up = trio.Event()  # set while the daemon of this generation serves clients
        self.ledger: dict[str, Command] = {}
        self.run_command: dict[str, str] = {}  # runId -> commandId
        self.thread_command: dict[str, str] = {}  # threadId -> commandId
        self.active: list[str] = []
        self.retired: list[str] = []
        self.created: dict[str, str] = {}  # this round's commandId -> threadId
        self.events: dict[int, tuple] = {}  # seq -> (type, threadId, runId, nodeId)
        self.run_ends: dict[str, list[tuple[int, str, str | None]]] = {}
        self.verified_seq = 0
        self.verified_runs: dict[str, dict[str, Any]] = {}
        self.round = 0
        self.round_faults: Counter = Counter()
        self.fault_totals: Counter = Counter()
        self.run_totals: Counter = Counter()
        self.violations: list[str] = []
        self.reported: set[tuple[str, str]] = set()
        self.round_violations = 0
        self.slow_outcomes: Counter = Counter()
        #: outcomes of the hostile-client faults and scenarios, for the summary
        self.outcomes: dict[str, Counter] = {}
        self.fault_ids = itertools.count()  # commandIds of commands a fault sends
        self.big_threads: set[str] = set()  # threads holding a multi-megabyte answer: retired at once
        self.growth: dict[str, int] = {}  # fault kind -> the most resident memory grew over its baseline
        #: (baseline, what) of this round's memory faults: checked once the round's hostile connections are gone
        self.memory_checks: list[tuple[hostile.Memory, str]] = []
        self.slow_open = False  # the round's slow subscriber (13,000-delta flood) is holding on
        self.memory = hostile.MemoryWatch(self.daemon_pid)
        # The daemon runs with few descriptors, so its connection cap is cheap to reach.
        self.wrapper = ["prlimit", f"--nofile={DAEMON_NOFILE}:{DAEMON_NOFILE}", "--"] if shutil.which("prlimit") else []
        self.skipped: dict[str, str] = {}  # fault kind -> why this host cannot inject it
        if not self.wrapper:
            self.skipped["connection_flood"] = "prlimit is not installed: the daemon's connection cap stays in the thousands"

    # -- output ---------------------------------------------------------------------

    def emit(self, obj: dict[str, Any], text: str | None = None) -> None:
        print(json.dumps(obj) if self.json or text is None else text, flush=True)

    def violation(self, invariant: str, message: str) -> None:
        if (invariant, message) in self.reported:
            return  # the same broken record, seen again in a later round
        self.reported.add((invariant, message))
        text = f"VIOLATION seed={self.seed} round={self.round} [{invariant}] {message}"
        self.violations.append(text)
        self.round_violations += 1
        self.emit({"violation": invariant, "seed": self.seed, "round": self.round, "message": message}, text)

    # -- the daemon -------------------------------------------------------------------

    async def start(self, idle_timeout: float) -> None:
        try:
            self.daemon = await start_daemon(
                self.data_dir, self.socket, extra_args=["--idle-timeout", str(idle_timeout)], timeout=WAIT,
                wrapper=self.wrapper,
            )
        except DaemonStartError as exc:
            raise Fatal(f"daemon did not start: {exc}") from None

    def daemon_pid(self) -> int | None:
        """The pid of the running daemon (None between a stop and a start)."""
        daemon = self.daemon
        return daemon.pid if daemon is not None and daemon.process.returncode is None else None

    def daemon_state(self) -> str:
        """What became of the daemon, to explain a lost connection."""
        daemon = self.daemon
        if daemon is None:
            return "no daemon was started"
        code = daemon.process.returncode
        if code is None:
            return f"daemon pid {daemon.pid} is still running"
        tail = [line for line in daemon.log_text().splitlines() if line.strip()][-3:]
        return f"daemon pid {daemon.pid} exited with code {code}; its log ends: {' | '.join(tail)}"

    def lost_daemon(self, what: str, exc: BaseException) -> Fatal:
        return Fatal(f"lost the daemon {what} ({exc!r}): {self.daemon_state()}")

    async def restart(self, how: str, idle_timeout: float, *, fault: str | None = None,
                      second_term_after: float | None = None) -> None:
        """SIGKILL or SIGTERM the daemon, start a new one, check what it
        reconciled before any client may send, then let clients back in.
        ``second_term_after``: a second SIGTERM that many seconds after the
        first (the shutdown must absorb it and still exit 0)."""
        self.generation += 1
        self.up = trio.Event()
        self.round_faults[fault or "daemon_" + how] += 1
        if how == "kill":
            await self.daemon.kill()
        else:
            async with Client.connect(self.socket) as client:
                before = (await client.call("daemon.status"))["lastSeq"]
            what = "SIGTERM shutdown"
            if second_term_after is not None:
                self.daemon.process.send_signal(signal.SIGTERM)
                await trio.sleep(second_term_after)
                landed = self.daemon.process.returncode is None
                self.outcome("double_term", "second during the shutdown" if landed else "exited within the gap")
                what = f"shutdown after two SIGTERMs {second_term_after * 1000:.0f} ms apart"
            code = await self.daemon.terminate(timeout=WAIT)  # the (second) SIGTERM, unless it has exited
            if code != 0:
                self.violation("shutdown", f"{what} exited {code}, not 0")
            await self.report_leftovers(f"after the {what}")
        await self.start(idle_timeout)
        async with Client.connect(self.socket) as client:
            await self.check_after_restart(client, how)
            if how == "term":
                await self.check_shutdown_events(client, before)
        self.up.set()

    async def recover(self) -> None:
        """After runs got stuck: SIGKILL and restart the daemon so that the
        next rounds start clean (or stop here with ``--fail-fast``)."""
        if self.fail_fast:
            raise Fatal("runs are stuck")
        await self.restart("kill", 600.0, fault="recovery_restart")

    async def wait_up(self) -> int:
        """Wait until the daemon serves clients; return its generation."""
        while not self.up.is_set():
            await self.up.wait()  # a restart may replace the event meanwhile: loop
        if self.daemon.process.returncode is not None:
            raise Fatal(f"the daemon exited by itself with code {self.daemon.process.returncode}")
        return self.generation

    def still_up(self, generation: int) -> bool:
        return self.up.is_set() and self.generation == generation

    async def reconnect_guard(self, generation: int, failures: int) -> int:
        """After a lost connection: fine if a restart began; three losses
        while the same daemon is meant to be up are fatal."""
        if not self.still_up(generation):
            return 0
        if failures >= 3:
            raise Fatal("connections to a daemon that should be up keep failing")
        await trio.lowlevel.checkpoint()
        return failures + 1

    # -- planning ------------------------------------------------------------------------

    def plan_round(self, number: int) -> RoundPlan:
        rng = self.rng
        threads = list(self.active)
        counter = itertools.count()
        clients: list[list[Command]] = []
        hang_threads: set[str] = set()
        plain_hang = False
        weights = [4, 2, 1, 1][: len(threads)]
        for _ in range(rng.randint(2, 4)):
            commands = []
            for _ in range(rng.randint(1, 3)):
                cid = f"c{self.seed}.{number}.{next(counter)}"
                drop = rng.random() < 0.12
                if rng.random() < 0.12:
                    commands.append(Command(cid, "thread.create", {"title": cid}, number, "create", drop))
                    continue
                thread = threads[rng.choices(range(len(threads)), weights)[0]]
                kind = rng.choices(list(PAYLOAD_WEIGHTS), list(PAYLOAD_WEIGHTS.values()))[0]
                if kind in HANGS:
                    hang_threads.add(thread)
                    plain_hang |= kind == "hang"
                text = payload_text(kind, cid, rng)
                commands.append(Command(cid, "thread.message.send", {"threadId": thread, "text": text}, number, kind, drop))
            clients.append(commands)
        faults = []
        for _ in range(rng.choices([0, 1, 2], [3, 4, 2])[0]):
            kind = rng.choices(list(FAULT_WEIGHTS), list(FAULT_WEIGHTS.values()))[0]
            trigger = rng.randint(1, 60)
            faults.append(Fault(kind, None if kind in AFTER_CLIENTS else trigger, rng.randrange(1 << 16),
                                self.draw_idle_timeout()))
        for kind in self.with_faults:  # --with-fault: one more of that kind every round
            if kind != "disk_full":
                faults.append(Fault(kind, None if kind in AFTER_CLIENTS else 1, rng.randrange(1 << 16),
                                    self.draw_idle_timeout()))
        faults.sort(key=lambda f: (f.trigger is None, f.trigger or 0))
        if plain_hang:  # only a restart ends a hang step
            faults.append(Fault(rng.choice(["daemon_kill", "daemon_term"]), None, 0, self.draw_idle_timeout()))
        calm = [t for t in threads if t not in hang_threads]
        slow = rng.random() < 0.1 and bool(calm)
        if slow:
            cid = f"c{self.seed}.{number}.{next(counter)}"
            thread = calm[rng.randrange(len(calm))]
            flood = Command(cid, "thread.message.send", {"threadId": thread, "text": payload_text("flood", cid, rng)}, number, "flood")
            clients[rng.randrange(len(clients))].append(flood)
        full = number == self.rounds or number % self.full_every == 0
        tail_back = rng.randint(0, 40)
        disk_full = rng.random() < DISK_FULL_CHANCE
        if "disk_full" in self.with_faults:
            disk_full = True
        # Drawn apart from the schedule, which so depends on the plan alone (--plan).
        older = sorted(self.ledger)
        sample = random.Random(f"{self.seed}/{number}").sample(older, min(20, len(older)))
        return RoundPlan(number, threads, clients, faults, slow, tail_back, full, sample, disk_full)

    def print_plan(self) -> int:
        """``--plan``: each round's planned faults, with no daemon. The
        schedule depends only on the plan (commands sent, threads created), so
        it is the one a run plays as long as every command is answered."""
        self.draw_idle_timeout()  # the first daemon's, as ``run`` draws it
        self.active = ["thread0", "thread1"]
        names = itertools.count(2)
        totals: Counter = Counter()
        for number in range(1, self.rounds + 1):
            plan = self.plan_round(number)
            commands = [c for cs in plan.clients for c in cs]
            kinds = [f.kind for f in plan.faults] + ["drop_command"] * sum(c.drop for c in commands)
            kinds += ["slow_subscriber"] * plan.slow_subscriber + ["disk_full"] * plan.disk_full
            totals.update(kinds)
            self.emit({"round": number, "seed": self.seed, "commands": len(commands), "faults": dict(Counter(kinds))})
            self.update_pool([f"thread{next(names)}" for c in commands if c.method == "thread.create"])
        self.emit({"final": True, "seed": self.seed, "rounds": self.rounds, "faults": dict(sorted(totals.items()))})
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        shutil.rmtree(self.work_dir, ignore_errors=True)
        return 0

    def draw_idle_timeout(self) -> float:
        # Mostly the default; sometimes short, so the idle reaper races new runs.
        return self.rng.choice([600.0, 600.0, 1.0])

    # -- commands ------------------------------------------------------------------------

    def record(self, command: Command, result: dict[str, Any]) -> None:
        command.result = result
        self.ledger[command.cid] = command
        if command.method == "thread.create":
            self.thread_command[result["threadId"]] = command.cid
            self.created[command.cid] = result["threadId"]
        else:
            self.run_command[result["runId"]] = command.cid

    async def drop_request(self, command: Command, generation: int) -> None:
        """Write the command on a raw connection and close it unanswered."""
        stream = await trio.open_unix_socket(str(self.socket))
        try:
            if not self.still_up(generation):  # may be the next daemon, before its restart checks
                raise trio.BrokenResourceError("the daemon is restarting")
            request = {"jsonrpc": "2.0", "id": 1, "method": command.method,
                       "params": {**command.params, "commandId": command.cid}}
            await stream.send_all(json.dumps(request).encode() + b"\n")
        finally:
            await stream.aclose()

    async def perform(self, client: Client, command: Command, generation: int) -> None:
        if command.drop:
            self.round_faults["drop_command"] += 1
            await self.drop_request(command, generation)
        try:
            result = await client.call(command.method, commandId=command.cid, **command.params)
        except AgentdError as exc:
            if connection_error(exc):
                raise
            self.violation("error", f"{command.method} {command.cid} answered {exc.kind}: {exc.message}")
            return
        self.record(command, result)

    async def client_task(self, commands: list[Command]) -> None:
        """Send ``commands`` in order; after a lost connection, retry the
        unanswered one with the same commandId once the daemon is back."""
        pending = list(commands)
        failures = 0
        while pending:
            generation = await self.wait_up()
            try:
                async with Client.connect(self.socket) as client:
                    if not self.still_up(generation):
                        continue
                    while pending:
                        await self.perform(client, pending[0], generation)
                        pending.pop(0)
            except Exception as exc:
                if not connection_error(exc):
                    raise
                failures = await self.reconnect_guard(generation, failures)

    # -- following events -------------------------------------------------------------------

    async def follow(self, watch: RoundWatch, after_seq: int) -> None:
        """Count the round's durable events, across restarts."""
        last, failures = after_seq, 0
        while True:
            generation = await self.wait_up()
            try:
                async with Client.connect(self.socket) as client:
                    if not self.still_up(generation):
                        continue
                    async with client.subscribe(after_seq=last) as events:
                        async for event in events:
                            if not event.get("ephemeral"):
                                last = event["seq"]
                                watch.saw_event()
            except Exception as exc:
                if (error := daemon_error(exc)) is not None:
                    self.violation("2", f"resubscribing after seq {last} failed: {error.message}")
                    return
                if not connection_error(exc):
                    raise
                failures = await self.reconnect_guard(generation, failures)

    async def replay(self, client: Client, after_seq: int, until_seq: int) -> list[dict[str, Any]]:
        """The durable events after ``after_seq`` up to ``until_seq``
        (resubscribing after a resync, which is allowed)."""
        out: list[dict[str, Any]] = []
        position = after_seq
        with trio.fail_after(WAIT):
            while position < until_seq:
                async with client.subscribe(after_seq=position) as events:
                    async for event in events:
                        if event.get("ephemeral"):
                            continue
                        out.append(event)
                        position = max(position, event["seq"])
                        if event["seq"] >= until_seq:
                            break
                    else:
                        if events.resync_after is None:
                            raise Fatal("the event stream ended without a resync")
                        position = events.resync_after
        return out

    # -- faults ------------------------------------------------------------------------------

    async def fault_task(self, watch: RoundWatch, faults: list[Fault]) -> None:
        for fault in faults:
            await watch.wait_for(fault.trigger)
            await self.inject(fault)

    async def inject(self, fault: Fault) -> None:
        if fault.kind == "daemon_kill":
            await self.restart("kill", fault.idle_timeout)
        elif fault.kind == "daemon_term":
            await self.restart("term", fault.idle_timeout)
        elif fault.kind == "provider_kill":
            await self.kill_provider(fault.pick)
        elif fault.kind == "drop_stream":
            await self.drop_stream(fault.pick)
        elif fault.kind == "double_term":
            await self.restart("term", fault.idle_timeout, fault="double_term", second_term_after=(fault.pick % 200) / 1000)
        else:
            await self.hostile_fault(fault.kind, fault.pick)

    async def kill_provider(self, pick: int, thread_id: str | None = None) -> None:
        """SIGKILL one provider process: of ``thread_id``, else a busy one if any."""
        async with Client.connect(self.socket) as client:
            sessions = (await client.call("daemon.status"))["sessions"]
        sessions = sorted((s for s in sessions if s.get("pid")), key=lambda s: s["threadId"] or "")
        if thread_id is not None:
            sessions = [s for s in sessions if s["threadId"] == thread_id]
        candidates = [s for s in sessions if s.get("busy")] or sessions
        if not candidates:
            self.round_faults["provider_kill_skipped"] += 1
            return
        if kill(candidates[pick % len(candidates)]["pid"]):
            self.round_faults["provider_kill"] += 1

    async def drop_stream(self, pick: int) -> None:
        """Subscribe on a raw connection, read a few replayed events, hang up."""
        async with Client.connect(self.socket) as client:
            last = (await client.call("daemon.status"))["lastSeq"]
        if last == 0:
            return
        after = max(0, last - 1 - pick % 300)
        stream = await trio.open_unix_socket(str(self.socket))
        self.round_faults["drop_stream"] += 1
        seqs = []
        try:
            request = {"jsonrpc": "2.0", "id": 1, "method": "events.subscribe", "params": {"afterSeq": after}}
            await stream.send_all(json.dumps(request).encode() + b"\n")
            buffer, wanted = b"", min(1 + pick % 20, last - after)
            with trio.move_on_after(5):  # a short read is fine: the point is hanging up mid-stream
                while len(seqs) < wanted:
                    data = await stream.receive_some(4096)
                    if not data:
                        break
                    buffer += data
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        message = json.loads(line)
                        if message.get("method") == "event" and not message["params"].get("ephemeral"):
                            seqs.append(message["params"]["seq"])
        finally:
            await stream.aclose()
        if seqs != list(range(after + 1, after + 1 + len(seqs))):
            self.violation("2", f"replay after {after} began {seqs[:10]}, not {after + 1}, {after + 2}, ...")

    # -- hostile clients -------------------------------------------------------------------------

    def outcome(self, kind: str, what: str, count: int = 1) -> None:
        self.outcomes.setdefault(kind, Counter())[what] += count

    def fault_cid(self) -> str:
        """A commandId for a command a fault sends."""
        return f"c{self.seed}.{self.round}.f{next(self.fault_ids)}"

    def log_size(self) -> int:
        try:
            return os.path.getsize(self.daemon.log_path)
        except OSError:
            return 0

    def log_since(self, offset: int) -> str:
        try:
            with open(self.daemon.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    async def hostile_fault(self, kind: str, pick: int) -> None:
        """Run the fault ``kind`` (a method of that name), unless this host cannot."""
        if kind in self.skipped:
            self.round_faults[kind + "_skipped"] += 1
            return
        self.round_faults[kind] += 1
        try:
            await getattr(self, kind)(pick)
        except Exception as exc:
            if not connection_error(exc):
                raise
            raise self.lost_daemon(f"during {kind}", exc) from None

    def memory_now(self, what: str) -> hostile.Memory:
        memory = self.memory.sample()
        if memory is None:
            raise Fatal(f"the daemon is gone {what}: {self.daemon_state()}")
        return memory

    def slow_hold(self) -> int:
        """What the round's stalled slow subscriber may be holding meanwhile, if
        it is open: its outbound cap and two hub buffers of the flood's events
        (10,000 each, about 1 KiB apiece as Python objects)."""
        return OUTBOUND_BYTES_PER_CONNECTION + 2 * 10_000 * 1024 if self.slow_open else 0

    def check_peak(self, kind: str, before: hostile.Memory, bound: int, what: str) -> None:
        """The daemon's resident memory stayed within ``bound`` over ``before``."""
        self.memory.sample()
        peak = max(self.memory.window_peak, before.rss)
        growth = peak - before.rss
        self.growth[kind] = max(self.growth.get(kind, 0), growth)
        if growth > bound:
            self.violation("memory", f"{what}: the daemon's resident memory went from {before.rss / MiB:.0f} MiB to "
                                     f"{peak / MiB:.0f} MiB, more than the {bound / MiB:.0f} MiB its bounds allow")

    async def check_memory_returns(self, before: hostile.Memory, what: str) -> None:
        """Once hostile connections are gone, resident memory comes back to
        within RSS_AFTER_SLACK (anonymous memory within ANON_AFTER_SLACK) of
        ``before``, within 10 s."""
        now = self.memory_now(what)
        with trio.move_on_after(10):
            while now.rss > before.rss + RSS_AFTER_SLACK or now.anon > before.anon + ANON_AFTER_SLACK:
                await trio.sleep(0.1)
                now = self.memory_now(what)
        if now.rss > before.rss + RSS_AFTER_SLACK or now.anon > before.anon + ANON_AFTER_SLACK:
            self.violation("memory", f"{what}: resident memory stayed at {now.mib()} MiB, more than "
                                     f"{RSS_AFTER_SLACK // MiB} MiB (anonymous: {ANON_AFTER_SLACK // MiB} MiB) over the "
                                     f"{before.mib()} MiB before, 10 s after they left")

    def check_stream(self, end: hostile.StreamEnd, after_seq: int, who: str) -> None:
        """A raw subscriber's events are gap-free from ``after_seq``, and a
        resync names the last seq it was given."""
        seqs = end.seqs
        if seqs != list(range(after_seq + 1, after_seq + 1 + len(seqs))):
            self.violation("2", f"{who}'s events after {after_seq} are not gap-free: {describe_seqs(seqs, after_seq)}")
        if end.how == "resync":
            given = seqs[-1] if seqs else after_seq
            if end.resync_after != given:
                self.violation("2", f"{who} got events.resync afterSeq {end.resync_after}, but the last event it was "
                                    f"given is {given}")
        if end.other:
            self.violation("stalled", f"{who} got messages that are neither events nor a resync: {end.other[:2]}")

    async def stalled_subscribers(self, pick: int) -> None:
        """Raw subscribers that stop reading, and one or two that read slowly,
        while a new thread streams a multi-megabyte answer in large deltas;
        one more reads at full speed. See the module docstring."""
        rng = random.Random(pick)
        stalled_count, slow_count = rng.randint(8, 12), rng.randint(1, 2)
        repeat, chunks = rng.randint(96, 160), rng.randint(6, 48)
        answer = hostile.SAY_UNIT * repeat
        line = answer // chunks + 4096  # one delta on the wire
        holders = stalled_count + slow_count
        # The answer's text twice (its deltas and its durable appends: objects
        # every subscriber's hub buffer shares), each holder's outbound cap and
        # the one line that may go past it, and the allowance.
        bound = 2 * answer + holders * (OUTBOUND_BYTES_PER_CONNECTION + line) + RSS_ALLOWANCE + self.slow_hold()
        # What one stalled subscriber can have waiting for it: a hub buffer its
        # stream task took, the one filling, its outbound cap, a line and a
        # socket buffer. An answer past that must end in a resync.
        can_hold = 2 * DEFAULT_BYTE_CAPACITY + OUTBOUND_BYTES_PER_CONNECTION + line + MiB
        where = (f"{stalled_count} stalled and {slow_count} slow subscribers of a {answer / MiB:.1f} MiB answer "
                 f"in {chunks} deltas")
        async with Client.connect(self.socket) as client:
            cid = self.fault_cid()
            create = Command(cid, "thread.create", {"title": cid}, self.round, "create")
            self.record(create, await client.call("thread.create", commandId=cid, title=cid))
            thread_id = create.result["threadId"]
            self.big_threads.add(thread_id)
            last = (await client.call("daemon.status"))["lastSeq"]
            before = self.memory.mark() or self.memory_now("before the stalled subscribers")
            conns: list[hostile.RawConnection] = []
            try:
                for _ in range(holders + 1):
                    conns.append(await hostile.subscribe_raw(self.socket, last))
                fast, slow, stalled = conns[0], conns[1:1 + slow_count], conns[1 + slow_count:]
                cid = self.fault_cid()
                send = Command(cid, "thread.message.send",
                               {"threadId": thread_id, "text": hostile.big_say(cid, repeat, chunks)}, self.round, "big_say")
                self.record(send, await client.call(send.method, commandId=cid, **send.params))
                run_id = send.result["runId"]

                def run_ended(event: dict[str, Any]) -> bool:
                    kind = event.get("type", "")
                    return event.get("runId") == run_id and kind.startswith("run.") and kind[4:] in TERMINAL

                fast_end = hostile.StreamEnd("unresolved", [])
                slow_ends = [hostile.StreamEnd("unresolved", []) for _ in slow]
                with trio.move_on_after(WAIT):
                    async with trio.open_nursery() as nursery:
                        for conn, end in zip(slow, slow_ends):
                            nursery.start_soon(partial(hostile.read_stream_into, end, conn, until=run_ended,
                                                       chunk=64 << 10, pause=0.02))
                        await hostile.read_stream_into(fast_end, fast, until=run_ended)
                self.check_peak("stalled_subscribers", before, bound, f"with {where}")
                # The stalled ones cannot spend the daemon's shared budget for
                # queued events (with this file's sizes they never do): if they
                # could, a resync of the full-speed one would be by design.
                shared_spent = holders * (OUTBOUND_BYTES_PER_CONNECTION + line) + 8 * MiB >= OUTBOUND_BYTES_TOTAL
                if fast_end.how == "resync" and shared_spent:
                    self.outcome("fast_reader", "resync (the shared budget was spent)")
                elif fast_end.how != "caught_up":
                    self.violation("stalled", f"with {where}, a subscriber reading at full speed ended {fast_end.how} "
                                              f"(afterSeq {fast_end.resync_after}) before the answer's run ended")
                self.check_stream(fast_end, last, "the full-speed subscriber")
                for end in slow_ends:
                    self.outcome("slow_readers", end.how)
                    self.check_stream(end, last, "a slow subscriber")
                    if end.how == "unresolved":
                        self.violation("stalled", f"with {where}, a slow subscriber neither caught up nor got "
                                                  f"events.resync within {WAIT:g}s")
                # The stalled ones read now: a resync at the last seq each was given.
                stalled_ends = [hostile.StreamEnd("unresolved", []) for _ in stalled]
                with trio.move_on_after(WAIT):
                    async with trio.open_nursery() as nursery:
                        for conn, end in zip(stalled, stalled_ends):
                            nursery.start_soon(partial(hostile.read_stream_into, end, conn, until=run_ended))
                for end in stalled_ends:
                    self.check_stream(end, last, "a stalled subscriber")
                    if end.how == "caught_up" and 2 * answer <= can_hold:
                        self.outcome("stalled_readers", "held")  # within what the bounds let it keep
                        continue
                    self.outcome("stalled_readers", end.how)
                    if end.how in ("caught_up", "unresolved"):
                        self.violation("stalled", f"with {where}, a subscriber that read nothing until the run ended "
                                                  f"then {'got every event' if end.how == 'caught_up' else 'got no events.resync'}"
                                                  f" and was not disconnected (within {WAIT:g}s)")
            finally:
                for conn in conns:
                    await conn.aclose()
        self.memory_checks.append((before, f"after {where} closed"))

    async def partial_lines(self, pick: int) -> None:
        """Connections that each send a large line and never its newline. See
        the module docstring."""
        rng = random.Random(pick)
        sizes = [rng.randint(MiB, MiB * 5 // 2) for _ in range(rng.randint(48, 96))]
        chunk = 64 << 10  # what the daemon reads at a time, before it counts it
        # The budget, bytearrays' spare room, a chunk being read per connection, and slack.
        bound = INPUT_BYTES_TOTAL * 5 // 4 + len(sizes) * chunk + 32 * MiB + self.slow_hold()
        # Held for sure: what went past a socket buffer, of lines under the line limit.
        held_for_sure = sum(size - (256 << 10) for size in sizes if size <= MAX_LINE)
        where = f"{len(sizes)} connections sending {sum(sizes) / MiB:.0f} MiB of unfinished lines"
        before = self.memory.mark() or self.memory_now("before the unfinished lines")
        conns: list[hostile.RawConnection | None] = [None] * len(sizes)
        replies: list[list[dict[str, Any] | None]] = [[] for _ in sizes]
        junk = memoryview(b"x" * max(sizes))

        async def push(index: int, size: int) -> None:
            conn = conns[index] = await hostile.RawConnection.open(self.socket)
            try:
                await conn.stream.send_all(junk[:size])
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass  # turned away past the budget: its answer is read below

        async def collect(index: int) -> None:
            while True:
                message = await conns[index].receive()
                replies[index].append(message)
                if message is None:
                    return

        try:
            async with Client.connect(self.socket) as probe:
                await probe.call("daemon.status")
                async with trio.open_nursery() as nursery:
                    for index, size in enumerate(sizes):
                        nursery.start_soon(push, index, size)
                try:
                    with trio.fail_after(WAIT):
                        await probe.call("daemon.status")
                        async with Client.connect(self.socket) as fresh:
                            await fresh.call("daemon.status")
                except trio.TooSlowError:
                    self.violation("overload", f"with {where}, the daemon did not answer other clients within {WAIT:g}s")
                # Answers come at once; the connections the daemon holds say nothing.
                with trio.move_on_after(1.5):
                    async with trio.open_nursery() as nursery:
                        for index in range(len(conns)):
                            nursery.start_soon(collect, index)
                refused = [i for i, got in enumerate(replies) if got and got[0] and error_kind(got[0]) == "overloaded"]
                with trio.move_on_after(5):  # those told overloaded are closed after the line
                    async with trio.open_nursery() as nursery:
                        for index in refused:
                            if replies[index][-1] is not None:
                                nursery.start_soon(collect, index)
                self.check_peak("partial_lines", before, bound, f"with {where}")
        finally:
            for conn in conns:
                if conn is not None:
                    await conn.aclose()
        tally = Counter()
        for size, got in zip(sizes, replies):
            kinds = [error_kind(m) if m else "closed" for m in got]
            if not kinds:
                tally["held"] += 1
            elif kinds == ["overloaded", "closed"]:
                tally["overloaded"] += 1
            elif kinds == ["parse_error"] and size > MAX_LINE:
                tally["too_long"] += 1
            else:
                tally["wrong"] += 1
                self.violation("overload", f"with {where}, a connection that sent {size} bytes without a newline was "
                                           f"answered {kinds}: {got[:2]}")
        for what, count in tally.items():
            self.outcome("partial_lines", what, count)
        if held_for_sure > INPUT_BYTES_TOTAL and not tally["overloaded"]:
            self.violation("overload", f"{where}: more than the {INPUT_BYTES_TOTAL // MiB} MiB budget reached the "
                                       f"daemon, and no connection was told overloaded")
        self.memory_checks.append((before, f"after {where} closed"))

    async def connection_flood(self, pick: int) -> None:
        """More connections than the daemon's cap. See the module docstring."""
        cap = max(16, min(MAX_CONNECTIONS, DAEMON_NOFILE - DESCRIPTOR_RESERVE))
        count = cap + random.Random(pick).randint(4, 32)
        where = f"with {count} connections opened against a cap of {cap}"
        log_start = self.log_size()
        conns: list[hostile.RawConnection] = []
        results: list[str] = []

        async def probe(index: int) -> None:
            conn = conns[index]
            try:
                await conn.request("daemon.status")
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass  # turned away already: its line is still to be read
            first = await conn.receive()
            if first is not None and "result" in first:
                results[index] = "served"
            elif first is not None and error_kind(first) == "overloaded":
                results[index] = "refused, not closed"
                results[index] = "refused" if await conn.receive() is None else "refused, then more lines"
            else:
                results[index] = f"answered {first}"

        async with Client.connect(self.socket) as held:
            await held.call("daemon.status")
            try:
                for _ in range(count):
                    conns.append(await hostile.RawConnection.open(self.socket))
                results = ["unanswered"] * len(conns)
                with trio.move_on_after(WAIT):
                    async with trio.open_nursery() as nursery:
                        for index in range(len(conns)):
                            nursery.start_soon(probe, index)
                try:
                    with trio.fail_after(WAIT):
                        await held.call("daemon.status")
                except trio.TooSlowError:
                    self.violation("overload", f"{where}, a client connected before did not get an answer within {WAIT:g}s")
            finally:
                for conn in conns:
                    await conn.aclose()
        tally = Counter(results)
        for what, number in tally.items():
            self.outcome("connection_flood", what if what in ("served", "refused") else "wrong", number)
        wrong = {what: number for what, number in tally.items() if what not in ("served", "refused")}
        if wrong:
            self.violation("overload", f"{where}, connections were neither served nor refused with one overloaded "
                                       f"line and closed: {wrong}")
        if not tally["refused"] or tally["served"] > cap:
            self.violation("overload", f"{where}, {tally['served']} were served and {tally['refused']} refused")
        # Once they are gone, new clients are served (the count drops as the daemon sees them close).
        served_again = False
        with trio.move_on_after(WAIT):
            while not served_again:
                try:
                    async with Client.connect(self.socket) as fresh:
                        await fresh.call("daemon.status")
                    served_again = True
                except Exception as exc:
                    if not connection_error(exc):
                        raise
                    await trio.sleep(0.05)
        if not served_again:
            self.violation("overload", f"{where}, a new client was still not served {WAIT:g}s after they closed")
        logged = self.log_since(log_start)
        if "Traceback" in logged:
            at = logged.index("Traceback")
            self.violation("overload", f"{where}, the daemon logged a traceback: {logged[max(0, at - 200):at + 800]}")

    # -- a disk that fills up ---------------------------------------------------------------------

    async def disk_full(self) -> None:
        """The disk-full scenario, on a daemon of its own whose data dir is a
        small tmpfs in a private mount namespace. See the module docstring."""
        if "disk_full" in self.skipped:
            self.round_faults["disk_full_skipped"] += 1
            return
        root = self.work_dir / f"disk{self.round}"
        data = root / "data"
        socket = self.socket_dir / f"disk{self.round}.sock"
        try:
            tmpfs = await hostile.PrivateTmpfs.mount(data, DISK_BYTES)
        except hostile.Unavailable as exc:
            self.skipped["disk_full"] = str(exc)
            self.round_faults["disk_full_skipped"] += 1
            self.emit({"skipped": "disk_full", "seed": self.seed, "round": self.round, "reason": str(exc)},
                      f"disk_full skipped: {exc}")
            return
        self.round_faults["disk_full"] += 1
        box: list[DaemonProcess] = []
        try:
            await self.fill_disk(tmpfs, socket, box)
        except Exception as exc:
            if not connection_error(exc):
                raise
            state = box[-1].process.returncode if box else None
            log = box[-1].log_text()[-1500:] if box else ""
            self.violation("disk", f"lost the disk-full daemon ({exc!r}; exit code {state}); its log ends: {log}")
        finally:
            with trio.CancelScope(shield=True):
                for daemon in box:
                    if daemon.process.returncode is None:
                        await daemon.kill()
                await tmpfs.aclose()
            if not self.violations or not self.keep:
                shutil.rmtree(root, ignore_errors=True)

    async def start_disk_daemon(self, tmpfs: hostile.PrivateTmpfs, socket: Path, box: list[DaemonProcess]) -> DaemonProcess:
        try:
            daemon = await start_daemon(tmpfs.path, socket, timeout=WAIT, wrapper=tmpfs.wrapper)
        except DaemonStartError as exc:
            raise Fatal(f"the disk-full daemon did not start: {exc}") from None
        box.append(daemon)
        return daemon

    async def fill_disk(self, tmpfs: hostile.PrivateTmpfs, socket: Path, box: list[DaemonProcess]) -> None:
        daemon = await self.start_disk_daemon(tmpfs, socket, box)
        prefix = f"d{self.seed}.{self.round}"
        receipts: dict[str, tuple[str, dict[str, Any], Any]] = {}

        async def call(client: Client, cid: str, method: str, **params: Any) -> Any:
            result = await client.call(method, commandId=cid, **params)
            receipts[cid] = (method, params, result)
            return result

        async with Client.connect(socket) as client:
            thread_id = (await call(client, f"{prefix}.0", "thread.create", title="disk"))["threadId"]
            first = [(await call(client, f"{prefix}.{i}", "thread.message.send", threadId=thread_id, text=text))["runId"]
                     for i, text in ((1, "hello before the disk fills"), (2, script({"say": "kept " * 400, "chunks": 4})))]
            await self.wait_runs(client, 0, set(first))
            kept = await client.call("thread.get", threadId=thread_id)
            kept_seq = (await client.call("daemon.status"))["lastSeq"]
            # A run in flight when the disk fills: it fills during the tool step,
            # then a 4 MiB answer cannot be stored.
            cid = f"{prefix}.3"
            text = script({"say": cid}, {"tool": {"name": "probe", "seconds": 1}},
                          {"say": "z" * hostile.SAY_UNIT, "repeat": 64, "chunks": 16})
            flight = (await call(client, cid, "thread.message.send", threadId=thread_id, text=text))["runId"]
            with trio.fail_after(WAIT):
                async with client.subscribe(after_seq=kept_seq) as events:
                    async for event in events:
                        if event["type"] == "tool.started" and event["runId"] == flight:
                            break
            free = await tmpfs.fill()
            with trio.move_on_after(15):
                await self.wait_runs(client, kept_seq, {flight})
            # Writes go on until the store refuses one: LMDB first reuses the
            # pages it freed, then has to grow its file. The refusal must name
            # the disk; the commands it took are committed like any other.
            answer, accepted = None, 0
            while answer is None and accepted < DISK_WRITES:
                try:
                    await call(client, f"{prefix}.w{accepted}", "thread.create", title=f"on a full disk {accepted}")
                    accepted += 1
                except AgentdError as exc:
                    if connection_error(exc):
                        raise
                    answer = f"{exc.kind}: {exc.message}"
            full = await client.call("thread.get", threadId=thread_id)  # reads go on
            if daemon.process.returncode is not None:
                self.violation("disk", f"the daemon exited with code {daemon.process.returncode} on a full disk")
                return
        flown = next((run for run in full["runs"] if run["id"] == flight), {})
        reason = flown.get("reason") or ""
        self.outcome("disk_full", f"in flight: {flown.get('status')} ({reason_head(reason)})")
        self.outcome("disk_full", "a write refused" if answer else "no write refused")
        self.outcome("disk_full", "commits taken on the full disk", accepted)
        self.emit({"diskFull": {"seed": self.seed, "round": self.round, "free": free, "inFlight": f"{flown.get('status')} ({reason})",
                                "commitsTaken": accepted, "refusal": answer}},
                  f"disk full: the run in flight ended {flown.get('status')} ({reason}); {accepted} more commits taken, "
                  f"then {answer}")
        if flown.get("status") == "failed" and not mentions_disk(reason):
            # Issue 9, item 10: a run that fails because the disk filled says so.
            self.violation("disk", f"the run in flight when the disk filled ended failed ({reason}), "
                                   "a reason that does not say the disk is full")
        if answer is None:
            self.violation("disk", f"with {free} bytes free, the store took {DISK_WRITES} more commits without a refusal")
        elif not mentions_disk(answer):
            self.violation("disk", f"with {free} bytes free, a write was refused with {answer}, which does not say the "
                                   "disk is full")
        # Free the disk, stop the daemon in order, start it again: what was
        # committed is all there, and the thread takes messages again.
        await tmpfs.free()
        code = await daemon.terminate(timeout=WAIT)
        if code != 0:
            self.violation("disk", f"after the disk was freed, the SIGTERM shutdown exited {code}, not 0")
        daemon = await self.start_disk_daemon(tmpfs, socket, box)
        async with Client.connect(socket) as client:
            for cid, (method, params, result) in receipts.items():
                try:
                    again = await client.call(method, commandId=cid, **params)
                except AgentdError as exc:
                    if connection_error(exc):
                        raise
                    again = f"{exc.kind}: {exc.message}"
                if again != result:
                    self.violation("disk", f"after the disk was full, repeating {cid} answered {again}, not {result}")
            after = await client.call("thread.get", threadId=thread_id)
            last = (await client.call("daemon.status"))["lastSeq"]
            seqs = [event["seq"] for event in await self.replay(client, 0, last)]
            if last < kept_seq or seqs != list(range(1, last + 1)):
                self.violation("disk", f"after the disk was full, events replay as {describe_seqs(seqs, 0)} "
                                       f"(lastSeq {last}, {kept_seq} before it filled)")
            now = {run["id"]: run for run in after["runs"]}
            for run in kept["runs"]:
                if now.get(run["id"]) != run:
                    self.violation("disk", f"run {run['id']}, ended before the disk filled, is now {now.get(run['id'])}")
            messages = {message["id"]: message for message in after["messages"]}
            for message in kept["messages"]:
                if messages.get(message["id"]) != message:
                    self.violation("disk", f"message {message['id']}, stored before the disk filled, changed")
            for run in after["runs"]:
                if run["status"] not in TERMINAL:
                    self.violation("disk", f"after the restart, run {run['id']} is {run['status']}")
            sent = await client.call("thread.message.send", commandId=f"{prefix}.5", threadId=thread_id,
                                     text="hello after the disk was freed")
            try:
                ended = await self.wait_runs(client, kept_seq, {sent["runId"]})
            except trio.TooSlowError:
                ended = []
            status = ended[0]["payload"]["run"]["status"] if ended else f"not ended within {WAIT:g}s"
            if status != "completed":
                self.violation("disk", f"after the disk was freed, a new message ended {status}")
        code = await daemon.terminate(timeout=WAIT)
        if code != 0:
            self.violation("disk", f"the disk-full daemon's final SIGTERM shutdown exited {code}, not 0")
        for pid, cmd in agent_processes(tmpfs.path).items():
            kill(pid)
            self.violation("disk", f"provider process {pid} outlived the disk-full daemon: {cmd}")

    # -- slow subscriber -----------------------------------------------------------------------

    async def open_slow_subscriber(self) -> SlowSubscriber:
        """Subscribe on a raw connection, read the answer, then stop reading."""
        async with Client.connect(self.socket) as client:
            last = (await client.call("daemon.status"))["lastSeq"]
        stream = await trio.open_unix_socket(str(self.socket))
        slow = SlowSubscriber(stream, last, self.generation)
        request = {"jsonrpc": "2.0", "id": 1, "method": "events.subscribe", "params": {"afterSeq": last}}
        await stream.send_all(json.dumps(request).encode() + b"\n")
        with trio.fail_after(WAIT):
            while b"\n" not in slow.buffer:
                data = await stream.receive_some(65536)
                if not data:
                    raise Fatal("the daemon hung up on a subscribe")
                slow.buffer += data
        answer, _, slow.buffer = slow.buffer.partition(b"\n")
        if "result" not in json.loads(answer):
            raise Fatal(f"subscribe failed: {answer[:200]!r}")
        self.round_faults["slow_subscriber"] += 1
        self.slow_open = True
        return slow

    async def check_slow_subscriber(self, slow: SlowSubscriber, flood: Command | None) -> None:
        """The stalled subscriber must end with a resync at the last seq it was
        given (or a hang-up) once a flood it could not have buffered ran."""
        flood_ran = False
        if flood is not None and flood.result is not None and slow.generation == self.generation:
            async with Client.connect(self.socket) as client:
                run = (await client.call("run.get", runId=flood.result["runId"]))["run"]
            flood_ran = run["status"] == "completed"
        outcome, seqs = "unresolved", []
        with trio.move_on_after(WAIT if flood_ran else 1):
            outcome = await self.read_slow_subscriber(slow, seqs, flood.result["runId"] if flood_ran else None)
        await slow.stream.aclose()
        self.slow_open = False
        if outcome == "caught_up" and FLOOD_CHUNKS < FLOOD_HOLDABLE:
            outcome = "held"  # the whole flood, within what the bounds let it keep
        self.slow_outcomes[outcome] += 1
        if seqs != list(range(slow.after_seq + 1, slow.after_seq + 1 + len(seqs))):
            self.violation("2", f"the slow subscriber's events after {slow.after_seq} are not gap-free: {seqs[:10]}...")
        if flood_ran and outcome in ("unresolved", "caught_up"):
            self.violation("slow", f"a subscriber that read nothing through {FLOOD_CHUNKS} events got no events.resync "
                                   f"within {WAIT:g}s of being read again, and was not disconnected"
                                   + (" (it got every event)" if outcome == "caught_up" else ""))

    async def read_slow_subscriber(self, slow: SlowSubscriber, seqs: list[int], flood_run: str | None) -> str:
        """Read until a resync, the end of the connection, or the end of the
        flood's run (``caught_up``)."""
        buffer = slow.buffer
        while True:
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                message = json.loads(line)
                params = message.get("params") or {}
                if message.get("method") == "event" and not params.get("ephemeral"):
                    seqs.append(params["seq"])
                    if flood_run is not None and params.get("runId") == flood_run and params["type"][4:] in TERMINAL \
                            and params["type"].startswith("run."):
                        return "caught_up"
                elif message.get("method") == "events.resync":
                    given = seqs[-1] if seqs else slow.after_seq
                    if params["afterSeq"] != given:
                        self.violation("2", f"events.resync says afterSeq {params['afterSeq']} but the last event "
                                            f"sent was {given}")
                    return "resync"
            data = await slow.stream.receive_some(1 << 16)
            if not data:
                return "disconnected"
            buffer += data

    # -- one round ------------------------------------------------------------------------------

    async def play_round(self, plan: RoundPlan) -> None:
        self.round, self.round_violations = plan.number, 0
        self.round_faults, self.created = Counter(), {}
        started = time.monotonic()
        async with Client.connect(self.socket) as client:
            start_seq = (await client.call("daemon.status"))["lastSeq"]
        slow = await self.open_slow_subscriber() if plan.slow_subscriber else None
        self.memory_checks = []
        watch = RoundWatch()
        with trio.fail_after(ROUND_TIMEOUT):
            async with trio.open_nursery() as outer:
                outer.start_soon(self.follow, watch, start_seq)
                async with trio.open_nursery() as inner:
                    inner.start_soon(self.fault_task, watch, plan.faults)
                    async with trio.open_nursery() as clients:
                        for commands in plan.clients:
                            clients.start_soon(self.client_task, commands)
                    watch.finish_clients()
                outer.cancel_scope.cancel()
        new_threads = [self.created[c] for c in sorted(self.created)]
        threads = plan.threads + new_threads
        await self.settle(threads, start_seq)
        if slow is not None:
            flood = next((c for cs in plan.clients for c in cs if c.kind == "flood"), None)
            await self.check_slow_subscriber(slow, flood)
        # Once no hostile connection of the round is left (the slow subscriber
        # above holds a bounded but sizeable buffer until it is read).
        for before, what in self.memory_checks:
            await self.check_memory_returns(before, what)
        disturbed = any(self.round_faults[k] for k in ("provider_kill", *RESTARTS))
        await self.check_not_stuck(threads)
        await self.check_events(plan)
        await self.check_threads(threads, disturbed)
        await self.check_receipts(plan)
        await self.check_processes()
        if plan.disk_full:
            await self.disk_full()
        self.update_pool(new_threads)
        self.summarize(plan, start_seq, time.monotonic() - started)

    def update_pool(self, new_threads: list[str]) -> None:
        # A thread holding a multi-megabyte answer takes no more messages.
        self.active += [t for t in new_threads if t not in self.big_threads]
        self.retired += [t for t in new_threads if t in self.big_threads]
        while len(self.active) > MAX_ACTIVE_THREADS:
            self.retired.append(self.active.pop(0))

    async def settle(self, threads: list[str], after_seq: int) -> None:
        """Follow events until every run of ``threads`` is terminal. A tool
        that hangs gets its provider killed once it is running."""
        async with Client.connect(self.socket) as client:
            last = (await client.call("daemon.status"))["lastSeq"]
            open_runs = {}
            for thread_id in threads:
                for run in (await client.call("thread.get", threadId=thread_id))["runs"]:
                    if run["status"] not in TERMINAL:
                        open_runs[run["id"]] = thread_id
            if not open_runs:
                return
            hanging: dict[str, tuple[str, str]] = {}  # node -> (thread, run), a hang tool running
            killed: set[str] = set()
            position = after_seq
            try:
                with trio.fail_after(WAIT):
                    while open_runs:
                        async with client.subscribe(after_seq=position) as events:
                            async for event in events:
                                if event.get("ephemeral"):
                                    continue
                                position = event["seq"]
                                self.track_hang_tools(event, hanging, open_runs)
                                if not open_runs:
                                    return
                                if position >= last:  # caught up: what is running now is known
                                    for node_id, (thread_id, _run) in list(hanging.items()):
                                        if node_id not in killed:
                                            killed.add(node_id)
                                            await self.kill_provider(0, thread_id)
                        if events.resync_after is None:
                            raise Fatal("the event stream ended while runs were open")
                        position = events.resync_after
            except trio.TooSlowError:
                for run_id, thread_id in sorted(open_runs.items()):
                    history = await self.story(client, thread_id, run_id, after_seq)
                    self.violation("7", f"run {run_id} still not terminal {WAIT:g}s after the round; since seq {after_seq}: {history}")
        await self.recover()

    @staticmethod
    def track_hang_tools(event: dict[str, Any], hanging: dict, open_runs: dict) -> None:
        kind = event["type"]
        if kind == "tool.started" and event["payload"]["node"].get("title") == HANG_TOOL:
            hanging[event["nodeId"]] = (event["threadId"], event["runId"])
        elif kind.startswith("tool."):
            hanging.pop(event["nodeId"], None)
        elif kind.startswith("run.") and kind[4:] in TERMINAL:
            open_runs.pop(event["runId"], None)
            for node_id, (_thread, run_id) in list(hanging.items()):
                if run_id == event["runId"]:
                    del hanging[node_id]

    # -- checks -------------------------------------------------------------------------------

    async def check_after_restart(self, client: Client, how: str) -> None:
        """Invariant 3 (and 5, 6): what a restart must leave, before anything is sent."""
        what = f"after daemon {how} and restart"
        status = await client.call("daemon.status")
        if status["sessions"]:
            self.violation("3", f"{what}: sessions were started by themselves: {status['sessions']}")
        await self.report_leftovers(what)
        for thread in (await client.call("thread.list"))["threads"]:
            if thread["activeRunId"] or thread["status"] != "idle":
                self.violation("3", f"{what}: thread {thread['id']} is {thread['status']} with activeRunId {thread['activeRunId']}")
            detail = await client.call("thread.get", threadId=thread["id"])
            for run in detail["runs"]:
                if run["status"] not in TERMINAL:
                    self.violation("3", f"{what}: run {run['id']} is {run['status']}")
                elif self.verified_runs.get(run["id"]) != run:
                    await self.check_run_closed(client, run, what)
            for message in detail["messages"]:
                if message["status"] in ("queued", "streaming"):
                    self.violation("3", f"{what}: {message['role']} message {message['id']} is still {message['status']}")

    async def check_shutdown_events(self, client: Client, before: int) -> None:
        """No provider session may start once the SIGTERM shutdown has begun
        stopping sessions (queued runs stay queued, to be cancelled at restart)."""
        last = (await client.call("daemon.status"))["lastSeq"]
        stopping_since = None
        for event in await self.replay(client, before, last):
            session = event["payload"].get("session") or {}
            if event["type"] == "daemon.reconciled":
                break
            if stopping_since is None and event["type"] == "session.stopped" and session.get("reason") == "daemon_shutdown":
                stopping_since = event["seq"]
            elif stopping_since is not None and event["type"] == "session.starting":
                self.violation("shutdown", f"provider session {session['id']} of thread {event['threadId']} started at seq "
                                           f"{event['seq']}, during the SIGTERM shutdown (sessions stopping since seq "
                                           f"{stopping_since})")

    async def report_leftovers(self, what: str) -> None:
        """Invariant 5 where no provider process may exist at all."""
        for pid, cmd in agent_processes(self.data_dir).items():
            about = describe_process(pid)
            lived = await wait_exit(pid, 5.0)
            if lived is None:
                kill(pid)
            fate = f"it exited {lived:.2f}s later" if lived is not None else "still alive 5s later (chaos killed it)"
            self.violation("5", f"{what}: provider process {pid} ({about}) is still running; {fate}: {cmd}")

    async def check_run_closed(self, client: Client, run: dict[str, Any], what: str) -> dict[str, Any]:
        detail = await client.call("run.get", runId=run["id"])
        for node in detail["nodes"]:
            if node["status"] in OPEN_NODE:
                self.violation("3", f"{what}: {node['kind']} node {node['id']} of {run['status']} run {run['id']} is {node['status']}")
        for attempt in detail["attempts"]:
            if attempt["status"] not in TERMINAL:
                self.violation("3", f"{what}: attempt {attempt['id']} of {run['status']} run {run['id']} is {attempt['status']}")
        return detail

    async def check_events(self, plan: RoundPlan) -> None:
        """Invariant 2: the tail (or the whole log) replays gap-free and unchanged."""
        async with Client.connect(self.socket) as client:
            last = (await client.call("daemon.status"))["lastSeq"]
            if last < self.verified_seq:
                self.violation("2", f"lastSeq went back from {self.verified_seq} to {last}: committed events were lost")
            start = 0 if plan.full_check else max(0, min(self.verified_seq, last) - plan.tail_back)
            events = await self.replay(client, start, last)
        seqs = [e["seq"] for e in events]
        if seqs != list(range(start + 1, last + 1)):
            self.violation("2", f"replay after {start} is not exactly {start + 1}..{last}: {describe_seqs(seqs, start)}")
        for event in events:
            key = (event["type"], event["threadId"], event["runId"], event["nodeId"])
            known = self.events.get(event["seq"])
            if known is None:
                self.events[event["seq"]] = key
                if key[0].startswith("run.") and key[0][4:] in TERMINAL:
                    self.run_ends.setdefault(key[2], []).append((event["seq"], key[0], key[3]))
            elif known != key:
                self.violation("2", f"event {event['seq']} was {known} and replays as {key}")
        self.verified_seq = max(self.verified_seq, last)

    async def check_threads(self, threads: list[str], disturbed: bool) -> None:
        """Invariants 1 (exactly once), 4, 6, 7 and outcomes, on quiescent threads."""
        async with Client.connect(self.socket) as client:
            for thread_id in threads:
                detail = await client.call("thread.get", threadId=thread_id)
                await self.check_thread(client, detail, disturbed)
            listed = (await client.call("thread.list"))["threads"]
        for thread in listed:
            if thread["id"] not in self.thread_command:
                self.violation("1", f"thread {thread['id']} ({thread['title']!r}) answers no thread.create: a create ran twice?")

    async def check_thread(self, client: Client, detail: dict[str, Any], disturbed: bool) -> None:
        thread = detail["thread"]
        if thread["activeRunId"] or thread["status"] != "idle":
            self.violation("7", f"thread {thread['id']} is {thread['status']} (activeRunId {thread['activeRunId']}) "
                                "though all its runs ended")
        runs = {run["id"]: run for run in detail["runs"]}
        for run in detail["runs"]:
            cid = self.run_command.get(run["id"])
            if cid is None:
                self.violation("1", f"run {run['id']} (ordinal {run['ordinal']}) answers no command: a send ran twice?")
            if run["status"] not in TERMINAL:
                self.violation("7", f"run {run['id']} is {run['status']} after the round settled")
                continue
            known = self.verified_runs.get(run["id"])
            if known is not None:
                if known != run:
                    self.violation("4", f"run {run['id']} changed after it ended: {diff(known, run)}")
                continue
            await self.check_run(client, run)
            self.verified_runs[run["id"]] = run
            self.run_totals[run["status"]] += 1
            command = self.ledger.get(cid) if cid else None
            if command is not None and command.round == self.round and not disturbed and command.kind != "check":
                if (why := expected_outcome(command, run)) is not None:
                    self.violation("outcome", f"run {run['id']} of {command.cid} in a round without kills: {why}")
        for problem, run_id in self.check_messages(detail["messages"], runs):
            if ("6", problem) not in self.reported:  # the story grows each round: report the problem once
                self.reported.add(("6", problem))
                self.violation("6", f"{problem}; {await self.story(client, thread['id'], run_id, 0)}")

    async def check_run(self, client: Client, run: dict[str, Any]) -> None:
        """Invariant 4 for one terminal run (and its nodes and attempts closed)."""
        detail = await self.check_run_closed(client, run, "after the round")
        nodes = {node["id"]: node for node in detail["nodes"]}
        ends = self.run_ends.get(run["id"], [])
        where = f"{run['status']} run {run['id']}"
        if len(ends) != 1:
            self.violation("4", f"{where} has {len(ends)} run.<terminal> events: {ends}")
        for _seq, kind, node_id in ends:
            if kind != "run." + run["status"] or node_id != run["rootNodeId"]:
                self.violation("4", f"{where} (root {run['rootNodeId']}) ended by {kind} on node {node_id}")
        root = nodes.get(run["rootNodeId"])
        if root is None or root["kind"] != "root_turn" or not root["countsForRun"] or root["status"] != run["status"]:
            summary = root and {k: root[k] for k in ("kind", "countsForRun", "status")}
            self.violation("4", f"{where}: its root node {run['rootNodeId']} is {summary}")
        completed_roots = [n for n in nodes.values() if n["kind"] == "root_turn" and n["status"] == "completed"]
        if len(completed_roots) != (1 if run["status"] == "completed" else 0):
            self.violation("4", f"{where} has {len(completed_roots)} completed root nodes")
        for node in nodes.values():
            if node["countsForRun"] and node["kind"] != "root_turn":
                self.violation("4", f"{where}: non-root {node['kind']} node {node['id']} counts for the run")
        selected = next((a for a in detail["attempts"] if a["id"] == run["selectedAttemptId"]), None)
        if selected is None or selected["status"] != run["status"]:
            self.violation("4", f"{where}: its selected attempt is {selected and selected['status']}")

    def check_messages(self, messages: list[dict[str, Any]], runs: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
        """Invariant 6, on a quiescent thread: (problem, runId) pairs."""
        problems = []
        for message in messages:
            if message["role"] != "user":
                if message["status"] == "streaming":
                    self.violation("6", f"assistant message {message['id']} is still streaming after its run ended")
                continue
            run = runs.get(message["runId"])
            status = message["status"]
            run_status = run and run["status"]
            started = bool(run and run.get("startedAt"))
            ok = {
                "complete": started and run_status not in ("queued", "cancelled"),
                # never reached the provider: cancelled by a restart, or the
                # run ended (a crash, a stop) before its turn started
                "not_sent": run_status == "cancelled" or (run_status not in (None, "queued") and not started),
                "queued": run_status == "queued",
            }.get(status, False)
            if not ok:
                problems.append((f"user message {message['id']} is {status} but its run {message['runId']} is {run_status}",
                                 message["runId"]))
        for run in runs.values():
            if not any(m["id"] == run["userMessageId"] and m["role"] == "user" for m in messages):
                problems.append((f"run {run['id']} has no user message {run['userMessageId']}", run["id"]))
        return problems

    async def check_receipts(self, plan: RoundPlan) -> None:
        """Invariant 1: repeated commandIds give the stored answer."""
        if plan.full_check:
            cids = sorted(self.ledger)
        else:
            cids = sorted({c for c, cmd in self.ledger.items() if cmd.round == plan.number} | set(plan.sample))
        limiter = trio.Semaphore(32)

        async def recheck(client: Client, command: Command) -> None:
            async with limiter:
                try:
                    again = await client.call(command.method, commandId=command.cid, **command.params)
                except AgentdError as exc:
                    if connection_error(exc):
                        raise
                    self.violation("1", f"repeating {command.cid} answered {exc.kind}: {exc.message}")
                    return
            if again != command.result:
                self.violation("1", f"repeating {command.cid} answered {again}, first answer was {command.result}")

        try:
            async with Client.connect(self.socket) as client:
                with trio.fail_after(WAIT):
                    async with trio.open_nursery() as nursery:
                        for cid in cids:
                            nursery.start_soon(recheck, client, self.ledger[cid])
        except Exception as exc:
            if not connection_error(exc):
                raise
            raise self.lost_daemon(f"while re-checking {len(cids)} receipts", exc) from None

    async def check_processes(self) -> None:
        """Invariant 5 on a live, quiescent daemon."""
        async with Client.connect(self.socket) as client:
            before = (await client.call("daemon.status"))["sessions"]
            found = agent_processes(self.data_dir)
            after = (await client.call("daemon.status"))["sessions"]
        known = {s["pid"] for s in before + after if s.get("pid")}
        for pid, cmd in found.items():
            if pid not in known and process_alive(pid):
                self.violation("5", f"provider process {pid} is not a session of the daemon: {cmd}")

    async def check_not_stuck(self, threads: list[str]) -> None:
        """Invariant 7: each thread takes a new message, which completes."""
        async with Client.connect(self.socket) as client:
            last = (await client.call("daemon.status"))["lastSeq"]
            waiting = {}
            for index, thread_id in enumerate(threads):
                cid = f"c{self.seed}.{self.round}.k{index}"
                command = Command(cid, "thread.message.send", {"threadId": thread_id, "text": f"still there? {cid}"},
                                  self.round, "check")
                try:
                    result = await client.call(command.method, commandId=cid, **command.params)
                except AgentdError as exc:
                    self.violation("7", f"thread {thread_id} refused a new message: {exc.kind}: {exc.message}")
                    continue
                self.record(command, result)
                waiting[result["runId"]] = thread_id
            try:
                for event in await self.wait_runs(client, last, set(waiting)):
                    run = event["payload"]["run"]
                    if run["status"] != "completed":
                        self.violation("7", f"thread {waiting[run['id']]}: a new message ended {run['status']} ({run['reason']})")
            except trio.TooSlowError:
                self.violation("7", f"new messages did not complete within {WAIT:g}s")
            else:
                return
        await self.recover()

    async def wait_runs(self, client: Client, after_seq: int, run_ids: set[str]) -> list[dict[str, Any]]:
        """The terminal run events of ``run_ids``, following events after ``after_seq``."""
        ended, position = [], after_seq
        with trio.fail_after(WAIT):
            while run_ids:
                async with client.subscribe(after_seq=position) as events:
                    async for event in events:
                        if event.get("ephemeral"):
                            continue
                        position = event["seq"]
                        kind = event["type"]
                        if kind.startswith("run.") and kind[4:] in TERMINAL and event["runId"] in run_ids:
                            run_ids.discard(event["runId"])
                            ended.append(event)
                            if not run_ids:
                                break
                if run_ids and events.resync_after is None:
                    raise Fatal("the event stream ended while runs were open")
                position = events.resync_after or position
        return ended

    # -- reporting ------------------------------------------------------------------------------

    async def story(self, client: Client, thread_id: str, run_id: str, after_seq: int) -> str:
        """The run's events and its thread's session events after ``after_seq``,
        compactly, to explain a violation."""
        last = (await client.call("daemon.status"))["lastSeq"]
        async with client.subscribe(thread_id=thread_id, after_seq=after_seq) as events:
            lines = []
            with trio.move_on_after(5):
                async for event in events:
                    if event.get("ephemeral"):
                        continue
                    session = event["payload"].get("session")
                    if event["runId"] == run_id:
                        attempt = event["payload"].get("attempt") or {}
                        lines.append(f"{event['seq']} {event['type']}" + (f" #{attempt['number']}" if attempt else ""))
                    elif session:
                        lines.append(f"{event['seq']} {event['type']} {session['id'][-6:]} {session.get('reason') or ''}".rstrip())
                    if event["seq"] >= last:
                        break
        return "events: " + ", ".join(lines[-40:])

    def summarize(self, plan: RoundPlan, start_seq: int, seconds: float) -> None:
        runs = Counter()
        for run_id, cid in self.run_command.items():
            if self.ledger[cid].round == plan.number and run_id in self.verified_runs:
                runs[self.verified_runs[run_id]["status"]] += 1
        commands = sum(1 for c in self.ledger.values() if c.round == plan.number)
        self.fault_totals.update(self.round_faults)
        self.emit({
            "round": plan.number, "seed": self.seed, "commands": commands, "runs": dict(sorted(runs.items())),
            "faults": dict(sorted(self.round_faults.items())), "events": self.verified_seq - start_seq,
            "lastSeq": self.verified_seq, "threads": len(self.active), "violations": self.round_violations,
            "seconds": round(seconds, 2), "rssMiB": round((self.memory.sample() or hostile.Memory(0, 0, 0)).rss / MiB, 1),
        })

    # -- main -------------------------------------------------------------------------------------

    async def run(self) -> int:
        started = time.monotonic()
        self.emit({"seed": self.seed, "rounds": self.rounds, "dataDir": str(self.data_dir)},
                  f"seed={self.seed} rounds={self.rounds} data={self.data_dir}")
        try:
            async with trio.open_nursery() as watchers:
                watchers.start_soon(self.memory.run)
                try:
                    await self.start(self.draw_idle_timeout())
                    self.up.set()
                    await self.setup()
                    for number in range(1, self.rounds + 1):
                        await self.play_round(self.plan_round(number))
                        if self.round_violations and self.fail_fast:
                            break
                finally:
                    watchers.cancel_scope.cancel()
        except BaseException as exc:
            if (why := fatal_message(exc)) is None:
                raise
            self.violation("fatal", f"{why}; {self.daemon_state()}")
        finally:
            await self.stop()
        self.emit({
            "final": True, "seed": self.seed, "rounds": self.round, "commands": len(self.ledger),
            "threads": len(self.active) + len(self.retired), "runs": dict(sorted(self.run_totals.items())),
            "faults": dict(sorted(self.fault_totals.items())), "slowSubscribers": dict(self.slow_outcomes),
            "hostile": {kind: dict(sorted(counts.items())) for kind, counts in sorted(self.outcomes.items())},
            "peakRssMiB": round(self.memory.peak / MiB, 1), "peakAnonMiB": round(self.memory.peak_anon / MiB, 1),
            "memoryGrowthMiB": {kind: round(grew / MiB, 1) for kind, grew in sorted(self.growth.items())},
            "skipped": self.skipped, "events": self.verified_seq, "violations": len(self.violations),
            "wallSeconds": round(time.monotonic() - started, 1),
        })
        for text in self.violations[:20]:
            print(text, file=sys.stderr)
        return 1 if self.violations else 0

    async def setup(self) -> None:
        """Round 0: the first two threads."""
        async with Client.connect(self.socket) as client:
            for index in range(2):
                cid = f"c{self.seed}.0.{index}"
                command = Command(cid, "thread.create", {"title": cid}, 0, "create")
                self.record(command, await client.call("thread.create", commandId=cid, title=cid))
                self.active.append(command.result["threadId"])

    async def stop(self) -> None:
        with trio.CancelScope(shield=True):
            if self.daemon is not None and self.daemon.process.returncode is None:
                code = await self.daemon.terminate(timeout=WAIT)
                if code != 0:
                    self.violation("shutdown", f"the final SIGTERM shutdown exited {code}, not 0")
                await self.report_leftovers("after the final SIGTERM shutdown")
        if self.violations and self.keep:
            print(f"kept {self.work_dir} (daemon log: {self.data_dir / 'daemon.log'})", file=sys.stderr)
            return
        shutil.rmtree(self.socket_dir, ignore_errors=True)
        shutil.rmtree(self.work_dir, ignore_errors=True)


def fatal_message(exc: BaseException) -> str | None:
    """What ended the run, if ``exc`` is (a group of) Fatal or a timeout; else None (a bug here)."""
    if isinstance(exc, BaseExceptionGroup):
        parts = [fatal_message(e) for e in exc.exceptions]
        return None if None in parts else "; ".join(parts)
    if isinstance(exc, Fatal):
        return str(exc)
    if connection_error(exc):  # the daemon went away where no restart was planned
        return f"lost the connection to the daemon ({exc!r})"
    if isinstance(exc, trio.TooSlowError):
        return f"a wait for the daemon took more than its bound ({WAIT:g}s, a round {ROUND_TIMEOUT:g}s)"
    return None


def mentions_disk(text: str) -> bool:
    """True if an error or a reason says the disk is full."""
    text = text.lower()
    return "disk" in text or "no space" in text


def reason_head(reason: str | None) -> str:
    """The kind of a reason (``provider_crashed: ...`` -> ``provider_crashed``), for tallies."""
    return (reason or "no reason").split(":")[0][:60]


def describe_seqs(seqs: list[int], start: int) -> str:
    expected = start + 1
    for index, seq in enumerate(seqs):
        if seq != expected:
            return f"at position {index} got {seq}, expected {expected} ({len(seqs)} events)"
        expected += 1
    return f"ends at {expected - 1} ({len(seqs)} events)"


def diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--dir", help="parent directory for the data dir (default: a temp dir)")
    parser.add_argument("--json", action="store_true", help="print every line as JSON")
    parser.add_argument("--full-every", type=int, default=25,
                        help="replay the whole log and repeat every commandId every N rounds (and at the end)")
    parser.add_argument("--fail-fast", action="store_true", help="stop after the first round with a violation")
    parser.add_argument("--keep", action="store_true", help="keep the data dir when something was violated")
    parser.add_argument("--with-fault", action="append", choices=[*FAULT_WEIGHTS, "disk_full"], metavar="KIND",
                        help="also inject a fault of KIND every round (repeatable; changes the schedule): "
                             + ", ".join([*FAULT_WEIGHTS, "disk_full"]))
    parser.add_argument("--plan", action="store_true",
                        help="print the seed's fault schedule without running a daemon (as planned when every "
                             "command is answered)")
    args = parser.parse_args()
    if args.plan:
        sys.exit(Chaos(args).print_plan())
    sys.exit(trio.run(Chaos(args).run))


if __name__ == "__main__":
    main()

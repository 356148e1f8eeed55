"""ThreadRegistry: spawns a ThreadActor on a thread's first command and
retires it from memory when idle, so a thread that is not loaded costs no task.

``thread.create`` is handled here, not by an actor: a new thread has no
state to serialize against.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import trio

from agentd.protocol import results
from agentd.protocol.errors import AgentdError, Conflict, InvalidParams, NotFound, Overloaded
from agentd.protocol.methods import SLOW, Later
from agentd.store.batch import WriteBatch
from agentd.store.db import Store, struct_copy
from agentd.store.hub import EventHub
from agentd.store.ids import new_id
from agentd.store.reconcile import plan_reconciliation
from agentd.store.records import AppThread, CommandReceipt, ProviderThread, to_wire

from .context import thread_record
from .providers import extra_mcp, mcp_secrets
from .failures import FailureBook, Incident, failed_error, reason_of
from .restoring_folders import RestoringFolders
from .messages import Command, Handler
from .reply import Reply
from .providers.base import ProviderEvent, SessionExited, SessionHost
from .checkpoints import CheckpointEngine
from .config import DaemonConfig
from .steering import message_send
from .thread_actor import ThreadActor

log = logging.getLogger(__name__)

#: seconds a command may wait for room in a thread's mailbox before ``overloaded``
COMMAND_ADMISSION_TIMEOUT = 10.0


#: kernel filesystems that show kernel state, not files a project keeps: an
#: agent "working" there reads or pokes the kernel (a workspace of /proc, /sys)
PSEUDO_FILESYSTEMS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
    "pstore", "bpf", "configfs", "fusectl", "mqueue", "hugetlbfs", "binfmt_misc", "efivarfs",
    "selinuxfs", "rpc_pipefs", "nsfs", "autofs",
})
#: the trees of kernel state: a folder of another filesystem mounted inside
#: one (a tmpfs at /sys/fs/cgroup) is refused too
KERNEL_TREES = frozenset({"proc", "sysfs"})
MOUNTINFO = "/proc/self/mountinfo"
#: symlinks followed while resolving a workspace, as the kernel allows (ELOOP past it)
MAX_SYMLINKS = 40


def _mounts(mountinfo: str = MOUNTINFO) -> list[tuple[str, str]]:
    """``(mount point, filesystem type)`` of this process's mounts, in mount
    order (a later mount on the same point hides the earlier one)."""
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        fields = line.split(" ")
        try:
            separator = fields.index("-")
            point, fstype = fields[4], fields[separator + 1]
        except (ValueError, IndexError):
            continue
        # mountinfo escapes space, tab, newline and backslash as octal
        point = point.encode("utf-8", "surrogateescape").decode("unicode_escape").encode("latin-1").decode(
            "utf-8", "surrogateescape")
        mounts.append((point, fstype))
    return mounts


def _filesystem_of(path: str, mounts: list[tuple[str, str]]) -> str | None:
    """The type of the filesystem ``path`` (absolute, resolved) lies on: the
    mount with the longest mount point above it, the latest of equals."""
    best, best_len = None, -1
    for point, fstype in mounts:
        if path == point or point == "/" or path.startswith(point + "/"):
            if len(point) >= best_len:
                best, best_len = fstype, len(point)
    return best


def _symlinks_met(path: Path) -> list[str]:
    """Every symlink met while resolving ``path`` (absolute), one hop at a
    time, so that one inside /proc (``/proc/self/cwd``, a magic link to some
    process's directory) is seen even where its target is not.

    Raises:
        OSError: a symlink loop, or a component that cannot be read.
    """
    met: list[str] = []
    pending = list(path.parts[1:])
    current = "/"
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        if not os.path.islink(candidate):
            current = candidate
            continue
        met.append(candidate)
        if len(met) > MAX_SYMLINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        target = Path(os.readlink(candidate))
        if target.is_absolute():
            current = "/"
        pending[:0] = list(target.parts[1:] if target.is_absolute() else target.parts)
    return met


def _pseudo_filesystem(path: Path, resolved: Path) -> tuple[str, str] | None:
    """``(path, filesystem type)`` of the first kernel pseudo-filesystem that
    the workspace lies on, that a symlink on the way to it does, or (procfs,
    sysfs) that it lies inside; None."""
    mounts = _mounts()
    if not mounts:  # no mountinfo (another OS, a locked-down /proc): judge by the usual places
        mounts = [("/", "unknown"), ("/proc", "proc"), ("/sys", "sysfs"), ("/dev", "devtmpfs")]
    for where in (*_symlinks_met(path), str(resolved)):
        fstype = _filesystem_of(where, mounts)
        if fstype in PSEUDO_FILESYSTEMS:
            return where, fstype
    target = str(resolved)
    for point, fstype in mounts:
        if fstype in KERNEL_TREES and point != "/" and target.startswith(point + "/"):
            return point, fstype
    return None


def check_workspace(raw: str, *, allow_broad: bool = False) -> str:
    """The workspace a thread may use, as given, or ``invalid_params`` saying why.

    A symlink is followed (the agents work in its target; the thread keeps the
    path as given). The filesystem root and the person's home folder itself
    are refused unless ``allow_broad``: an agent there works on everything.
    A directory on a kernel pseudo-filesystem (``/proc``, ``/sys``, ``/dev``:
    procfs, sysfs, devtmpfs, cgroup, ...), or reached through a symlink on
    one (``/proc/self/cwd``), is always refused: it holds kernel state, not a
    project, and a magic link means another directory in every process.
    """
    path = Path(raw)
    if not path.is_absolute():
        raise InvalidParams(f"workspace must be an absolute path, not {raw!r}", field="workspace")
    try:
        is_dir = path.is_dir()
        resolved = path.resolve()
        pseudo = _pseudo_filesystem(path, resolved) if is_dir else None
    except (OSError, RuntimeError) as exc:  # a name too long, a symlink loop, no permission
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise InvalidParams(f"workspace {raw!r} cannot be used: {why}", field="workspace") from None
    if not is_dir:
        raise InvalidParams(f"workspace {raw} is not an existing directory", field="workspace")
    if pseudo is not None:
        where, fstype = pseudo
        if where == str(resolved) and where == os.path.normpath(raw):
            on = "is"
        elif str(resolved).startswith(where + "/"):
            on = f"is inside {where}, which is"
        else:
            on = f"goes through {where}, which is"
        raise InvalidParams(
            f"workspace {raw} {on} on the kernel's {fstype} pseudo-filesystem, not a folder of files; "
            "choose a project folder",
            field="workspace",
        )
    if not allow_broad:
        home = Path.home().resolve()
        if resolved in (Path("/"), home):
            what = "the whole filesystem" if resolved == Path("/") else "your home folder itself"
            raise InvalidParams(
                f"workspace {raw} is {what}: an agent there works on everything in it; choose a project "
                "folder, or set [daemon] allow_broad_workspaces = true",
                field="workspace",
            )
    return str(path)


class ThreadRegistry:
    """Owns the live ThreadActors.

    Args:
        store: the durable store.
        hub: the event hub.
        sessions: the provider-session manager (as the actors see it).
        config: the daemon config (provider instances).
        workspaces_dir: where threads without a workspace get their own folder.
        wall_clock: timestamps for records and events.
        actor_idle_timeout: seconds an idle actor stays in memory.
    """

    def __init__(
        self,
        store: Store,
        hub: EventHub,
        sessions: SessionHost,
        config: DaemonConfig,
        *,
        workspaces_dir: Path,
        wall_clock: Callable[[], float] = time.time,
        actor_idle_timeout: float = 60.0,
        checkpoints: CheckpointEngine | None = None,
    ) -> None:
        self.store = store
        #: the daemon's checkpoint engine (None: runs are not checkpointed)
        self.checkpoints = checkpoints
        self.hub = hub
        self.sessions = sessions
        self.config = config
        self.workspaces_dir = Path(workspaces_dir)
        self._workspaces_folder = str(self.workspaces_dir)
        self.wall_clock = wall_clock
        self.actor_idle_timeout = actor_idle_timeout
        #: set when the daemon begins to stop: no new run starts after it
        self.shutting_down = False
        self._actors: dict[str, ThreadActor] = {}
        #: wake-ups for ``task.result`` callers waiting on a delegated task (SPEC F9)
        self.tasks = TaskWatch()
        #: commandIds whose command is being carried out now, daemon-wide (see ``_reserve``)
        self._commands_in_flight: dict[str, trio.Event] = {}
        self._nursery: trio.Nursery | None = None
        #: failed actors' incidents and the quarantined threads (memory only: a restart lifts them)
        self.failures = FailureBook(config.thread_failure_limit, config.thread_failure_period)
        #: threads whose failed actor is being reconciled: set when it is done
        self._recovering: dict[str, trio.Event] = {}
        #: folders restores are writing: runs of other threads wait to start there
        self.restoring = RestoringFolders()

    async def serve(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Host actors until cancelled."""
        # A supervisor restart starts with no actors: an actor made while the
        # registry was down never ran, and must not swallow commands now.
        self._actors.clear()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    @property
    def loaded(self) -> list[str]:
        """IDs of threads whose actor is in memory."""
        return list(self._actors)

    # -- actors -----------------------------------------------------------------

    def _actor(self, thread_id: str) -> ThreadActor:
        actor = self._actors.get(thread_id)
        if actor is not None:
            return actor
        thread = self.store.thread(thread_id)
        if thread is None:
            raise NotFound(f"no thread {thread_id}; list threads with thread.list", threadId=thread_id)
        queued = [r for r in self.store.thread_runs(thread_id) if r.status == "queued"]
        provider_thread = None
        if thread.provider_thread_id:
            try:
                provider_thread = self.store.get(ProviderThread, thread.provider_thread_id)
            except AgentdError as exc:
                # As a provider thread that cannot be resumed: the next run
                # starts a new one, given the thread's history as a handoff.
                log.warning("thread %s: its provider thread cannot be read (%s); the next run starts a new one",
                            thread_id, exc)
        actor = ThreadActor(self, thread, queued, provider_thread)
        self._actors[thread_id] = actor
        assert self._nursery is not None, "registry is not serving"
        self._nursery.start_soon(self._run_actor, actor)
        return actor

    def wake(self, thread_id: str) -> None:
        """Load the thread's actor, which starts its queued runs (a delegated
        task's first run, committed by its parent's actor). A thread being
        recovered or quarantined is left as it is: its run stays queued."""
        if thread_id in self._recovering or thread_id in self.failures.quarantined:
            log.warning("thread %s not woken: it is %s", thread_id,
                        "quarantined" if thread_id in self.failures.quarantined else "being recovered")
            return
        self._actor(thread_id)

    async def _run_actor(self, actor: ThreadActor) -> None:
        # A temporary child: whatever it raises ends it alone (its thread is
        # reconciled below); only a cancellation of the registry goes on up.
        try:
            await actor.run(idle_timeout=self.actor_idle_timeout)
        except* Exception as group:
            try:
                await self._actor_failed(actor, _lone(group))
            except Exception:  # noqa: BLE001 - never the registry's failure
                log.exception("thread %s: handling the failure of its actor failed", actor.thread_id)
        finally:
            if self._actors.get(actor.thread_id) is actor:
                del self._actors[actor.thread_id]
            actor.send_channel.close()

    # -- failed actors (fault isolation) --------------------------------------------

    async def _actor_failed(self, actor: ThreadActor, error: BaseException) -> None:
        """An actor failed on an unexpected error: only its thread pays.

        At once (no await, so no command slips in): the actor leaves the
        table, every command it was handling or had waiting is answered
        ``thread_failed``, and the thread is marked recovering, which holds
        later commands until the recovery below is durable. Then the
        thread's provider session is stopped and its work reconciled through
        the same path a restart uses (``plan_reconciliation``, scoped to the
        thread): its active run ends ``interrupted`` with reason
        ``thread_failed: …``; its queued runs stay queued."""
        thread_id = actor.thread_id
        incident = Incident(id=new_id("inc"), thread_id=thread_id, reason=reason_of(error),
                            at=trio.current_time(), wall_at=self.wall_clock())
        log.error("thread %s failed (incident %s): %s", thread_id, incident.id, incident.reason, exc_info=error)
        if self._actors.get(thread_id) is actor:
            del self._actors[thread_id]
        done = self._recovering[thread_id] = trio.Event()
        quarantine = self.failures.record(incident)
        reply = failed_error(incident, quarantined=quarantine is not None)
        for command in actor.close_mailbox():
            command.reply.fail(reply)
        if quarantine is not None:
            log.error("thread %s quarantined after %d failures (first incident %s)",
                      thread_id, len(quarantine.incidents), quarantine.first.id)
        try:
            recovered = await self._recover(thread_id, incident, quarantined=quarantine is not None)
            if not recovered:
                self._quarantine_unrecovered(incident)
        finally:
            del self._recovering[thread_id]
            done.set()

    async def _recover(self, thread_id: str, incident: Incident, *, quarantined: bool) -> bool:
        """Stop the thread's session and reconcile its work; whether that is durable."""
        reason = f"thread_failed: {incident.reason} (incident {incident.id})"
        try:
            await self.sessions.stop_session(thread_id, "thread_failed")
            self.sessions.mark_busy(thread_id, False)
            now = self.wall_clock()
            batch, report = plan_reconciliation(self.store, now, reason=reason, thread_id=thread_id)
            counts: dict[str, Any] = report.as_dict()
            batch.event("thread.failed", thread_id=thread_id, at=now, incidentId=incident.id,
                        reason=incident.reason, quarantined=quarantined, **counts)
            await self.store.commit(batch)
        except Exception:  # noqa: BLE001 - a failed recovery quarantines the thread, nothing more
            log.exception("thread %s: recovery after incident %s failed", thread_id, incident.id)
            return False
        # A delegated task that ended this way has a result to read now.
        self.tasks.ended(thread_id)
        return True

    def _quarantine_unrecovered(self, incident: Incident) -> None:
        """The store could not take the recovery: the thread is refused
        commands (it still shows a run as active) until unquarantined."""
        quarantine = self.failures.quarantined.get(incident.thread_id)
        if quarantine is None:
            quarantine = self.failures.quarantine(incident)
        quarantine.recovery_pending = True

    def quarantine_of(self, thread_id: str) -> dict[str, Any] | None:
        """The thread's quarantine as clients see it, or None."""
        quarantine = self.failures.quarantined.get(thread_id)
        return None if quarantine is None else quarantine.to_wire()

    async def unquarantine(self, thread_id: str) -> dict[str, Any]:
        """``thread.unquarantine``: lift a quarantine (a recovery that could
        not be recorded is tried again first)."""
        await self._settled(thread_id)
        if self.store.thread(thread_id) is None:
            raise NotFound(f"no thread {thread_id}; list threads with thread.list", threadId=thread_id)
        quarantine = self.failures.quarantined.get(thread_id)
        if quarantine is not None and quarantine.recovery_pending:
            last = quarantine.incidents[-1]
            if not await self._recover(thread_id, last, quarantined=True):
                raise failed_error(last, quarantined=True)
            quarantine.recovery_pending = False
        released = self.failures.release(thread_id)
        batch = WriteBatch()
        batch.event("thread.unquarantined", thread_id=thread_id, at=self.wall_clock(),
                    firstIncidentId=released.first.id if released else None)
        committed = await self.store.commit(batch)
        return {"threadId": thread_id, "wasQuarantined": released is not None, "seq": committed.seq}

    async def _settled(self, thread_id: str) -> None:
        """Wait while the thread's failed actor is being reconciled."""
        while (recovering := self._recovering.get(thread_id)) is not None:
            await recovering.wait()

    def _refuse_if_quarantined(self, thread_id: str) -> None:
        refusal = self.failures.refusal(thread_id)
        if refusal is not None:
            raise refusal

    def retire(self, actor: ThreadActor) -> bool:
        """Drop an idle actor, unless something reached its mailbox meanwhile.
        Synchronous on purpose: no command can slip in between check and drop."""
        if actor.send_channel.statistics().current_buffer_used or actor.holds_items:
            return False
        if self._actors.get(actor.thread_id) is actor:
            del self._actors[actor.thread_id]
        actor.send_channel.close()
        return True

    async def call(
        self, thread_id: str, handler: Handler, params: Any, command_id: str | None = None, *, method: str,
    ) -> Any:
        """Send a command to a thread's actor and wait for its answer.

        Args:
            thread_id: the thread that owns the command.
            handler: what the actor runs for it (e.g. ``steering.message_send``).
            params: the method's params.
            command_id: the client's commandId, for safe retries.
            method: the method's name, for receipts and errors.

        Raises:
            NotFound: no such thread.
            Overloaded: the thread's mailbox is full.
        """
        if command_id is None:
            return await self._send(thread_id, Command(method, handler, params, reply := Reply()), reply)
        async with self._reserve(command_id):
            return await self._send(thread_id, Command(method, handler, params, reply := Reply(), command_id), reply)

    @asynccontextmanager
    async def _reserve(self, command_id: str) -> AsyncIterator[None]:
        """Hold ``command_id`` for the block, daemon-wide. The receipt an
        actor checks is written only when the command commits, and two
        threads' actors run at once: without this, the same commandId sent
        to two threads at the same moment ran on both. The check and the
        mark are one synchronous step, before any actor sees the command; a
        second caller waits for the first's outcome, then goes on to the
        receipt check (the stored answer, or ``conflict`` for another method)
        — or runs the command itself if the first failed and stored nothing."""
        while (held := self._commands_in_flight.get(command_id)) is not None:
            await held.wait()
        done = self._commands_in_flight[command_id] = trio.Event()
        try:
            yield
        finally:
            del self._commands_in_flight[command_id]
            done.set()

    async def _send(self, thread_id: str, command: Command, reply: Reply) -> Any:
        """Put ``command`` into the thread's mailbox and wait for its answer."""
        for _ in range(3):
            await self._settled(thread_id)
            self._refuse_if_quarantined(thread_id)
            actor = self._actor(thread_id)
            try:
                # A full mailbox (an agent streaming fast) is backpressure, not
                # a refusal: wait for room, in turn with the provider's events,
                # and give up only when the thread stays jammed.
                with trio.move_on_after(COMMAND_ADMISSION_TIMEOUT):
                    await actor.send_channel.send(command)
                    break
                raise Overloaded(
                    f"thread {thread_id} has had a full mailbox for {COMMAND_ADMISSION_TIMEOUT:g}s; retry shortly"
                )
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                continue  # retired between lookup and send; a new actor takes it
        return await reply.wait()

    async def deliver(self, thread_id: str, event: ProviderEvent) -> None:
        """Hand a provider event to its thread's actor (waits if the mailbox is full).

        Dropped: events of a thread being recovered or quarantined (its
        session is stopped; nothing it says can change the reconciled
        state), and a session's exit when the thread has no actor (an actor
        retires only when nothing runs, so there is no run to end)."""
        for _ in range(2):
            if thread_id in self._recovering or thread_id in self.failures.quarantined:
                log.debug("%s of thread %s dropped: the thread failed", type(event).__name__, thread_id)
                return
            if isinstance(event, SessionExited) and thread_id not in self._actors:
                return
            try:
                actor = self._actor(thread_id)
            except NotFound:
                log.warning("provider event for unknown thread %s dropped", thread_id)
                return
            except AgentdError as exc:  # its record cannot be read: the event has no thread to go to
                log.warning("provider event for thread %s dropped: %s", thread_id, exc)
                return
            try:
                try:
                    # Room in the mailbox: no schedule point per event (a
                    # runtime's reader hands over a chunk's deltas in a row;
                    # its next read is the schedule point).
                    actor.send_channel.send_nowait(event)
                except trio.WouldBlock:
                    await actor.send_channel.send(event)
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                continue

    # -- receipts -------------------------------------------------------------------

    @staticmethod
    def check_receipt(receipt: CommandReceipt, method: str) -> dict[str, Any]:
        """The stored answer for a repeated commandId (Conflict if reused for another method)."""
        if receipt.method != method:
            raise Conflict(
                f"commandId {receipt.command_id} was already used for {receipt.method}; use a new commandId",
                commandId=receipt.command_id,
            )
        return receipt.result

    # -- thread.create ----------------------------------------------------------------

    async def create_thread(self, params: Any, command_id: str | None = None) -> dict[str, Any]:
        """SPEC F1: make an AppThread only — no provider session, no provider thread."""
        if command_id is None:
            return await self._create_thread(params, None)
        async with self._reserve(command_id):
            receipt = self.store.receipt(command_id)
            if receipt is not None:
                return self.check_receipt(receipt, "thread.create")
            return await self._create_thread(params, command_id)

    def create_thread_quick(self, params: Any, command_id: str | None = None) -> Later | Any:
        """``create_thread`` without a task: the common case (no command id
        to look up, no parent, no workspace to check on disk) builds its batch
        here and queues it; the answer follows when it is durable. Anything
        else is ``SLOW``: the caller runs ``create_thread``."""
        if command_id is not None or params.parent_thread_id is not None or params.workspace or params.mcp_servers:
            return SLOW
        provider = params.provider or self.config.default_provider
        if provider not in self.config.providers:
            return SLOW  # create_thread says why
        thread = self.new_thread_record(title=params.title or "", provider=provider, workspace=None,
                                        created_by=params.created_by)
        batch = WriteBatch()
        batch.put(thread)
        # The record itself, not a dict of it: encoded once, on disk and on the wire alike.
        batch.event("thread.created", thread_id=thread.id, at=thread.created_at, thread=thread)
        later = Later()

        def done(committed: Any, error: BaseException | None) -> None:
            if error is not None:
                later.fail(error)
            else:
                later.resolve({"threadId": thread.id, "seq": committed.seq})

        self.store.commit_soon(batch, done)
        return later

    async def _create_thread(self, params: Any, command_id: str | None) -> dict[str, Any]:
        provider = params.provider or self.config.default_provider
        if provider not in self.config.providers:
            raise InvalidParams(
                f"unknown provider {provider!r}; configured: {', '.join(sorted(self.config.providers))}",
                field="provider",
            )
        workspace = None
        if params.workspace:
            workspace = check_workspace(params.workspace, allow_broad=self.config.allow_broad_workspaces)
        parent = None
        if params.parent_thread_id is not None:
            parent = self.store.thread(params.parent_thread_id)
            if parent is None:
                raise NotFound(f"no parent thread {params.parent_thread_id}", threadId=params.parent_thread_id)
            if params.relationship == "fork":
                if params.mcp_servers is not None:
                    raise InvalidParams("a fork inherits its source's MCP servers; change them with thread.update",
                                        field="mcpServers")
                # A fork is one thing however it is asked for: thread.fork from
                # the parent's latest stable point, in the parent's actor.
                from agentd.protocol.wire import ThreadForkParams

                from .transfers import thread_fork

                fork = ThreadForkParams(thread_id=parent.id, title=params.title, workspace=params.workspace,
                                        created_by=params.created_by)
                # Straight to the parent's actor: this create already holds the commandId.
                forked = await self._send(
                    parent.id, Command("thread.create", thread_fork, fork, reply := Reply(), command_id), reply)
                if isinstance(forked, results.ThreadForkResult):  # a replayed receipt is its mapping already
                    return {"threadId": forked.thread_id, "transferId": forked.transfer_id, "seq": forked.seq}
                return forked  # type: ignore[no-any-return]
        thread = self.new_thread_record(
            title=params.title or "", provider=provider, workspace=workspace, parent=parent,
            relationship=params.relationship if parent is not None else None,
            side_chat=parent is not None and params.relationship == "side_chat", created_by=params.created_by,
        )
        result: dict[str, Any] = {"threadId": thread.id}
        if params.mcp_servers:
            # As thread.update keeps them (issue 26): the secrets in the
            # thread's file, written before the record naming them is committed.
            given, renamed = extra_mcp.normalize(params.mcp_servers)
            folder = mcp_secrets.folder_beside(self._workspaces_folder)
            await trio.to_thread.run_sync(mcp_secrets.keep, folder, thread.id, extra_mcp.secrets(given))
            thread = struct_copy(thread, mcp_servers=extra_mcp.records(given))
            result["renamed"] = renamed
        batch = WriteBatch()
        batch.put(thread)
        batch.event("thread.created", thread_id=thread.id, at=thread.created_at, thread=to_wire(thread))
        if command_id is not None:
            batch.set_receipt(command_id, "thread.create", result, thread.created_at)
        committed = await self.store.commit(batch)
        return {**result, "seq": committed.seq}

    def checked_workspace(self, workspace: str | None) -> str | None:
        """A client's workspace (``check_workspace``), or None when not given.

        Raises:
            InvalidParams: it cannot be used.
        """
        if not workspace:
            return None
        return check_workspace(workspace, allow_broad=self.config.allow_broad_workspaces)

    def new_thread_record(
        self, *, title: str, provider: str, workspace: str | None, parent: AppThread | None = None,
        relationship: str | None = None, side_chat: bool = False, created_by: str = "user",
    ) -> AppThread:
        """An AppThread record, not yet stored (``context.thread_record``)."""
        return thread_record(now=self.wall_clock(), workspaces_dir=self._workspaces_folder, title=title,
                             provider=provider, workspace=workspace, parent=parent, relationship=relationship,
                             side_chat=side_chat, created_by=created_by)

    @property
    def workspaces_folder(self) -> str:
        """Where threads without a workspace get their own folder."""
        return self._workspaces_folder

    async def send_internal(self, thread_id: str, text: str) -> Any:
        """A message the daemon itself sends to a thread (e.g. a plan to implement)."""
        from agentd.protocol.wire import MessageSendParams

        return await self.call(
            thread_id, message_send, MessageSendParams(thread_id=thread_id, text=text), method="thread.message.send",
        )

    # -- who is running where ---------------------------------------------------------

    def active_runs(self) -> list[tuple[str, str, str, str]]:
        """``(thread id, run id, run status, workspace)`` of every thread with
        a run starting, running or waiting, as the live actors hold them (a
        thread with an active run always has its actor loaded). In memory
        only: the workspaces are as the threads name them, not resolved."""
        out: list[tuple[str, str, str, str]] = []
        for actor in list(self._actors.values()):
            active = actor.state.active
            if active is not None:
                out.append((actor.thread_id, active.run.id, active.run.status, actor.state.thread.workspace))
        return out


class TaskWatch:
    """In-memory wake-ups for ``task.result {wait: true}``: a waiter takes
    the task's event *before* it checks the store, and the task's actor sets
    it once the task's end is durable."""

    def __init__(self) -> None:
        self._events: dict[str, trio.Event] = {}

    def watch(self, task_id: str) -> trio.Event:
        """The event set when task ``task_id`` ends (take it before checking)."""
        return self._events.setdefault(task_id, trio.Event())

    def ended(self, task_id: str) -> None:
        """Task ``task_id`` ended (its result is durable): wake its waiters."""
        event = self._events.pop(task_id, None)
        if event is not None:
            event.set()


def _lone(group: BaseExceptionGroup) -> BaseException:
    """The error an actor failed with: the first leaf of trio's nested groups."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error

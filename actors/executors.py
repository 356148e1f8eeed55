"""Carrying out the effects transitions ask for, in the world outside the
thread's state (SPEC F2, F9, F10, F13, F18).

The actor hands every effect that is not its own (timers, tasks, its queue:
thread_actor.py) to ``Executor.perform``. Effects a transition yields are
awaited here and answered with their result; effects that must not hold the
thread's lock (a steer, an interrupt, a session stop, another thread's
message) run as effect tasks of the actor and report back through its
mailbox. Nothing here decides what the thread does next: an outcome is an
input to the next transition.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from agentd.protocol.errors import CorruptRecord, InvalidState, NotFound, ThreadFailed

from . import effects as fx
from .messages import CascadeDone, InterruptRefused, MailboxItem, SteerDelivered, SteerFailed
from .providers import images, mcp_secrets
from .providers.base import ProviderConnection, ProviderRuntimeError
from .checkpoints.merge import merge_files
from .checkpoints.shadow import Shadow
from .rollback import ChildMemoryRollback, child_memory_rollback
from .run_control import DELEGATED, InternalStop, task_cancel, thread_stop
from .wakeups import TaskWake, task_woke
from .regular_files import open_regular
from .workspace_guard import overlaps, shared_refusal
from . import worktrees
from .worktrees import plan_fork_workspace

if TYPE_CHECKING:
    from .checkpoints import CheckpointEngine
    from .host import ActorHost

log = logging.getLogger(__name__)

#: seconds a provider switch waits for the instance's probe before it goes on
PROBE_GRACE = 3.0


class Executor:
    """The effects of one thread's transitions.

    Args:
        host: the daemon (the registry).
        thread_id: the thread whose actor this serves.
        spawn: runs an async function as an effect task of the actor.
        post: puts an outcome into the actor's mailbox.
    """

    def __init__(self, host: ActorHost, thread_id: str, spawn: Callable[..., None],
                 post: Callable[[MailboxItem], Awaitable[None]]) -> None:
        self.host = host
        self.thread_id = thread_id
        self.spawn = spawn
        self.post = post

    @property
    def engine(self) -> CheckpointEngine:
        engine = self.host.checkpoints
        if engine is None:  # pragma: no cover - transitions check ctx.checkpoints_on first
            raise InvalidState("checkpoints are off in this agentd")
        return engine

    async def perform(self, effect: Any) -> Any:
        """Carry out ``effect``; its result, or the error it raised."""
        sessions = self.host.sessions
        match effect:
            # -- the provider session
            case fx.StopSession(reason=reason):
                self.spawn(sessions.stop_session, self.thread_id, reason)
            # The live connection is taken now, as the transition saw it: a
            # session that is replaced meanwhile does not get another's turn.
            case fx.SendSteer():
                self.spawn(self._send_steer, effect, sessions.live_session(self.thread_id))
            case fx.InterruptTurn():
                self.spawn(self._interrupt_turn, effect, sessions.live_session(self.thread_id))
            case fx.AnswerRequest():
                await self._answer_request(effect)
            case fx.ClaimSession():
                return await sessions.claim_session(self.thread_id)
            case fx.ReleaseClaim() | fx.EndRestore():
                self.release(effect)
            case fx.ProbeProvider(provider=provider):
                return await self._probe(provider)
            case fx.SaveAttachments(attachments=attachments):
                folder = images.folder_beside(self.host.workspaces_folder, self.thread_id)
                return await trio.to_thread.run_sync(images.save, folder, attachments)
            case fx.SaveMcpSecrets(secrets=secrets, beside_old=beside_old):
                folder = mcp_secrets.folder_beside(self.host.workspaces_folder)
                return await trio.to_thread.run_sync(
                    lambda: mcp_secrets.keep(folder, self.thread_id, secrets, beside_old=beside_old))
            case fx.PruneMcpSecrets(secrets=secrets):
                folder = mcp_secrets.folder_beside(self.host.workspaces_folder)
                await trio.to_thread.run_sync(mcp_secrets.prune, folder, self.thread_id, secrets)
            case fx.ReadMcpSecrets():
                folder = mcp_secrets.folder_beside(self.host.workspaces_folder)
                return await trio.to_thread.run_sync(mcp_secrets.read, folder, self.thread_id)
            case fx.CopyMcpSecrets(target_thread_id=target):
                folder = mcp_secrets.folder_beside(self.host.workspaces_folder)
                await trio.to_thread.run_sync(mcp_secrets.keep_copy, folder, self.thread_id, target)
            case fx.AllowRecovery(crash=crash):
                return sessions.allow_recovery(self.thread_id, crash)
            case fx.ListNativeTurns():
                return await self._list_native_turns(effect)
            case fx.RollbackNative():
                _session_id, conn = await sessions.ensure_session(self.thread_id, effect.provider)
                await conn.rollback_thread(effect.native_thread_id, before_turn_id=effect.before_turn_id)
            # -- other threads
            case fx.Wake(thread_id=thread_id):
                self.host.wake(thread_id)
            case fx.SendInternal(thread_id=thread_id, text=text):
                self.spawn(self.host.send_internal, thread_id, text)
            case fx.WakeParent():
                self.spawn(self._wake_parent, effect)
            case fx.RollbackChildMemory(command=command):
                return await self._roll_back_child(command)
            case fx.InterruptItem():
                await self._interrupt_item(effect)
            case fx.CancelTasks(task_ids=task_ids):
                self.spawn(self._cancel_tasks, task_ids)
            case fx.StopChildren(effect_id=effect_id):
                self.spawn(self._stop_children, effect_id)
            case fx.TaskEnded():
                self.host.tasks.ended(self.thread_id)
            case fx.CheckWorkspace(workspace=workspace):
                # It resolves symlinks and reads the mount table: off the loop.
                return await trio.to_thread.run_sync(self.host.checked_workspace, workspace)
            case fx.PlanWorkspace():
                return await plan_fork_workspace(self.host, effect)
            case fx.WorktreeMade(source=source):
                return await trio.to_thread.run_sync(worktrees.is_made, source)
            case fx.RemoveWorktree(source=source):
                await worktrees.remove(self.host.checkpoints, source)
            case fx.RecreateWorktree(source=source, commit=commit):
                return await worktrees.recreate(self.host.checkpoints, source, commit)
            case fx.GuardRestore():
                return await self._guard_restore(effect)
            # -- checkpoints and files
            case fx.Capture():
                return await self._capture(effect)
            case fx.Diff():
                return await self.engine.diff(effect.workspace, effect.commit, effect.base, max_bytes=effect.max_bytes)
            case fx.RestoreFiles():
                return await self._restore(effect)
            case fx.MergeForkFiles():
                return await self._merge_files(effect)
            case fx.CompareFiles():
                return await trio.to_thread.run_sync(differing, effect.theirs, effect.ours, list(effect.paths))
            case _:  # pragma: no cover - a programming error
                raise TypeError(f"unknown effect {effect!r}")
        return None

    def release(self, effect: fx.ReleaseClaim | fx.EndRestore) -> None:
        """Give back a session claim or a restore's mark at once (no await:
        also while the actor is being cancelled)."""
        if isinstance(effect, fx.ReleaseClaim):
            self.host.sessions.release_claim(effect.claim)
        else:
            self.host.restoring.remove(effect.token)

    # -- the provider session ------------------------------------------------------------

    async def _send_steer(self, effect: fx.SendSteer, live: tuple[str, ProviderConnection] | None) -> None:
        try:
            if live is None or effect.native_thread_id is None or effect.native_turn_id is None:
                raise ProviderRuntimeError("the provider session is gone")
            if effect.message.attachments:
                pictures = images.inputs(images.folder_beside(self.host.workspaces_folder, self.thread_id), effect.message)
                await live[1].steer_turn(effect.native_thread_id, effect.native_turn_id, text=effect.message.text,
                                         images=pictures)
            else:
                await live[1].steer_turn(effect.native_thread_id, effect.native_turn_id, text=effect.message.text)
        except ProviderRuntimeError as exc:
            await self.post(SteerFailed(effect.message, str(exc)))
        else:
            await self.post(SteerDelivered(effect.message))

    async def _interrupt_turn(self, effect: fx.InterruptTurn, live: tuple[str, ProviderConnection] | None) -> None:
        try:
            if live is None:
                raise ProviderRuntimeError("the provider session is gone")
            # A turn the provider never named is asked about as None, as before.
            await live[1].interrupt_turn(effect.native_thread_id, effect.native_turn_id)  # type: ignore[arg-type]
        except ProviderRuntimeError as exc:
            await self.post(InterruptRefused(effect.attempt_id, f"the provider refused the interrupt: {exc}"))

    async def _probe(self, provider: str) -> dict[str, Any]:
        """The adapter's probe, as providers.list shows it; one that does not
        answer within ``PROBE_GRACE`` (it holds the thread's lock) is taken
        as usable — only a definite failure refuses a switch."""
        with trio.move_on_after(PROBE_GRACE):
            try:
                return await self.host.sessions.adapter(provider).probe()
            except Exception as exc:  # noqa: BLE001 - a probe that fails says why, as providers.list does
                return {"usable": False, "why": str(exc)}
        return {"usable": True, "why": f"its probe did not answer within {PROBE_GRACE:g}s"}

    async def _answer_request(self, effect: fx.AnswerRequest) -> None:
        live = self.host.sessions.live_session(self.thread_id)
        if live is None or live[0] != effect.session_id:
            raise ProviderRuntimeError("the provider session that asked has ended")
        await live[1].answer_request(effect.request_ref, effect.response)

    async def _list_native_turns(self, effect: fx.ListNativeTurns) -> list[dict[str, Any]]:
        _session_id, conn = await self.host.sessions.ensure_session(self.thread_id, effect.provider)
        if effect.native_thread_id not in conn.loaded_threads:
            await conn.resume_thread(effect.native_thread_id, cwd=effect.cwd)
        return list(await conn.list_turns(effect.native_thread_id))

    # -- other threads -------------------------------------------------------------------

    async def _interrupt_item(self, effect: fx.InterruptItem) -> None:
        live = self.host.sessions.live_session(self.thread_id)
        if live is None:
            raise InvalidState("the provider session of the running turn is gone")
        try:
            await live[1].interrupt_item(effect.native_thread_id, effect.native_turn_id, effect.native_item_id)
        except ProviderRuntimeError as exc:
            raise InvalidState(f"the provider refused to interrupt the item: {exc}") from exc

    async def _cancel_tasks(self, task_ids: tuple[str, ...]) -> None:
        for task_id in task_ids:
            try:
                await self.host.call(task_id, task_cancel, None, method="task.cancel")
            except (NotFound, ThreadFailed, CorruptRecord) as exc:
                log.warning("node interrupt: cancel of task %s: %s", task_id, exc)

    async def _roll_back_child(self, command: ChildMemoryRollback) -> dict[str, Any] | str:
        try:
            answer: dict[str, Any] = await self.host.call(command.thread_id, child_memory_rollback, command,
                                                          method="rollback.node")
        except (NotFound, InvalidState, ThreadFailed, CorruptRecord) as exc:
            return str(exc)
        return answer

    async def _wake_parent(self, effect: fx.WakeParent) -> None:
        try:
            await self.host.call(effect.thread_id, task_woke, TaskWake(effect.thread_id, effect.task_id, effect.transfer_id),
                                 method="task.wake")
        except (NotFound, ThreadFailed, CorruptRecord) as exc:
            # The result is stored either way; only the wake-up is lost.
            log.warning("wake-up of thread %s by task %s: %s", effect.thread_id, effect.task_id, exc)

    async def _stop_children(self, effect_id: str) -> None:
        await stop_delegated_children(self.host, self.thread_id)
        await self.post(CascadeDone(effect_id))

    async def _guard_restore(self, effect: fx.GuardRestore) -> int:
        """Mark the folder as being restored *before* the other threads' runs
        are looked at: a run that became active earlier is seen and refuses
        the restore; one that becomes active later finds the mark when it
        starts, and waits (workspace_guard.py)."""
        # realpath touches the disk (symlinks): in a worker thread.
        mine = await trio.to_thread.run_sync(os.path.realpath, effect.workspace)
        restoring = self.host.restoring
        token = restoring.add(mine)
        try:
            others = [run for run in self.host.active_runs() if run[0] != self.thread_id]

            def resolve() -> list[tuple[str, str, str, str]]:
                return [run for run in others if overlaps(mine, os.path.realpath(run[3]))]

            busy = await trio.to_thread.run_sync(resolve) if others else []
        except BaseException:
            restoring.remove(token)
            raise
        if busy:
            restoring.remove(token)
            raise shared_refusal(effect.method, effect.workspace, self.thread_id, busy)
        return token

    # -- checkpoints ---------------------------------------------------------------------

    async def _capture(self, effect: fx.Capture) -> Any:
        """The engine's capture; its ``durable_first`` batch committed
        meanwhile and durable before the ref is made (``fx.Capture``)."""
        first = effect.durable_first
        if first is None:
            return await self.engine.capture(effect.workspace, effect.ref, base=effect.base)
        written = trio.Event()
        failure: list[BaseException] = []

        def done(_result: Any, error: BaseException | None) -> None:
            if error is not None:
                failure.append(error)
            written.set()

        # Queued now, ahead of anything the transition commits after the
        # capture (the writer keeps the order batches are queued in).
        self.host.store.commit_soon(first, done)

        async def before_ref() -> None:
            await written.wait()
            if failure:
                raise failure[0]

        return await self.engine.capture(effect.workspace, effect.ref, base=effect.base, before_ref=before_ref)

    async def _restore(self, effect: fx.RestoreFiles) -> Any:
        async def record_safety(capture: Any) -> None:
            await self.host.store.commit(effect.record_safety(capture))

        return await self.engine.restore(effect.workspace, effect.commit, safety_ref=effect.safety_ref,
                                         include=effect.include, before_files=record_safety)


    async def _merge_files(self, effect: fx.MergeForkFiles) -> Any:
        engine = self.engine

        async def record_safety(capture: Any) -> None:
            await self.host.store.commit(effect.record_safety(capture))

        fork_git_dir = await trio.to_thread.run_sync(
            lambda: os.path.join(Shadow.folder(engine.root, engine.workspace_key(effect.fork_workspace)), b"shadow.git"))
        async with engine.locked(effect.workspace) as locked:
            return await merge_files(locked.shadow, fork_git_dir=fork_git_dir, fork_base=effect.fork_base,
                                     fork_theirs=effect.fork_theirs, base_here=effect.base_here,
                                     base_ref=effect.base_ref, theirs_ref=effect.theirs_ref, safety_ref=effect.safety_ref,
                                     max_file_bytes=engine.max_file_bytes, markers=effect.markers,
                                     before_files=record_safety)


async def stop_delegated_children(host: ActorHost, thread_id: str) -> None:
    """``thread.stop`` to every delegated descendant of ``thread_id``,
    depth-first, each handled by its own actor (no cross-thread lock)."""
    store = host.store
    stack = [c for c in reversed(store.thread_children(thread_id)) if c.relationship_to_parent in DELEGATED]
    while stack:
        child = stack.pop()
        try:
            await host.call(child.id, thread_stop, InternalStop(child.id), method="thread.stop")
        except NotFound:
            continue
        except (ThreadFailed, CorruptRecord) as exc:
            # A child that failed has no run going (its recovery ended it);
            # its own tasks are still stopped.
            log.warning("stop of delegated task %s: %s", child.id, exc)
        stack.extend(c for c in reversed(store.thread_children(child.id)) if c.relationship_to_parent in DELEGATED)


def differing(fork_ws: str, here: str, paths: list[str]) -> list[str] | None:
    """The paths whose content (or existence) is not the same in both
    folders; None when they are the same folder (blocking)."""
    if os.path.realpath(fork_ws) == os.path.realpath(here):
        return None
    out = []
    for path in paths:
        if os.path.isabs(path) or ".." in path.split("/"):
            continue
        if not _same_file(os.path.join(here, path), os.path.join(fork_ws, path)):
            out.append(path)
    return out


def _same_file(mine: str, theirs: str) -> bool:
    """Whether two paths hold the same: both missing, the same symlink target,
    or regular files of the same bytes (read side by side in chunks, never
    whole: a huge file costs no memory). A symlink is not followed, and a
    FIFO, a device or a folder is never opened (a FIFO's open would wait
    forever): such a path is the same only as a missing one is."""
    ends: list[tuple[str, Any]] = []
    for path in (mine, theirs):
        try:
            if os.path.islink(path):
                ends.append(("symlink", os.readlink(path)))
                continue
            ends.append(("file", open_regular(path)))
        except OSError:
            ends.append(("none", None))
    kinds = [kind for kind, _ in ends]
    try:
        if kinds != ["file", "file"]:
            return kinds[0] == kinds[1] and ends[0][1] == ends[1][1]
        a, b = (fd for _, fd in ends)
        if os.fstat(a).st_size != os.fstat(b).st_size:
            return False
        while True:
            left, right = os.read(a, 1 << 20), os.read(b, 1 << 20)
            if left != right:
                return False
            if not left:
                return True
    finally:
        for kind, fd in ends:
            if kind == "file":
                os.close(fd)

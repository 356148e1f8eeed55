"""Starting an attempt: its context, the runtime, the native thread, the
turn (SPEC F5, F6, F8, F11).

The starter is a task of the thread's actor, one per attempt, that does what
waits on the provider outside the thread's lock. Before any provider work it
asks the actor how the attempt gets its context (``ContextNeeded``): the
actor resolves and commits it (transfers.py, lineage.py) and answers with a
``StartPlan`` — resume a provider thread, fork one natively, or make a new one
— and the exact text of the stored handoff, if any, that goes ahead of the
user's message. Then it opens (or reuses) the provider session, brings up the
native thread and starts the turn. It is an effect task (it imports trio and awaits the provider); the
transitions that take its reports are in starting.py. It reports through
the mailbox:
``ProviderThreadReady`` before the turn starts (so the actor knows the
provider thread before any event of the turn) and ``AttemptStartFailed`` if
it cannot get the turn running.

A native thread that cannot be resumed (or whose runtime's version changed
incompatibly) is not left empty: the starter asks again with the reason, and
the actor replaces it with a new provider thread given a stored
``full_thread_summary`` handoff.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from agentd.protocol.errors import AgentdError
from agentd.store.ids import new_id
from agentd.store.records import Checkpoint, to_wire

from . import lineage, worktrees
from .checkpointing import capture_fields, previous_root
from .checkpoints import checkpoint_ref
from .graph import ThreadBatch
from .messages import AttemptStartFailed, ContextNeeded, MailboxItem, ProviderThreadReady, StartPlan
from .providers import images
from .providers.base import NativeThreadMissing, ProviderConnection, ProviderRuntimeError
from .reply import Reply
from .state import ActiveRun, ThreadState

if TYPE_CHECKING:
    from .host import ActorHost

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StarterHandle:
    """What the starter task uses: the daemon, the thread's state (read:
    its workspace) and the actor's mailbox."""

    host: ActorHost
    state: ThreadState
    post: Callable[[MailboxItem], Awaitable[None]]

    @property
    def thread_id(self) -> str:
        return self.state.thread_id

    @property
    def sessions(self) -> Any:
        return self.host.sessions


async def _context(actor: StarterHandle, attempt_id: str, lost: tuple[str, str] | None = None) -> StartPlan | None:
    """Ask the actor for the attempt's context; None: the run ends instead
    (the actor ended it, or resolving failed and is reported here)."""
    reply = Reply()
    await actor.post(ContextNeeded(attempt_id, reply, lost))
    try:
        plan: StartPlan | None = await reply.wait()
        return plan
    except AgentdError as exc:
        await actor.post(AttemptStartFailed(attempt_id, "context_failed", exc))
        return None


async def _resume(conn: ProviderConnection, plan: StartPlan, cwd: str,
                  servers: dict[str, Any]) -> tuple[int | None, str | None]:
    """Load the plan's provider thread into ``conn``: ``(native turn count, None)``,
    or ``(None, why)`` when it cannot go on."""
    pt = plan.resume
    assert pt is not None
    turns = None
    try:
        if pt.native_thread_id not in conn.loaded_threads:
            turns = (await conn.resume_thread(pt.native_thread_id, cwd=cwd, **servers)).turn_count
    except NativeThreadMissing as exc:
        return None, f"resume failed: {exc}"
    changed = lineage.version_change(pt.settings.get("version"), conn.runtime_version)
    return turns, changed


async def _unbound_session(
    actor: StarterHandle, active: ActiveRun, conn: ProviderConnection, session_id: str,
) -> tuple[str, ProviderConnection]:
    """A session that can start a new native thread. A runtime bound to one
    native session per process (Claude) cannot start another in the same
    process — after a rollback or a clean context retired the old one — so
    its session is stopped (a requested stop, not blamed on this attempt)
    and a new one started."""
    if conn.capabilities.empty_threads or not conn.loaded_threads:
        return session_id, conn
    active.session_id = None
    await actor.sessions.stop_session(actor.thread_id, "new_provider_thread")
    session_id, conn = await actor.sessions.ensure_session(actor.thread_id, active.run.provider)
    active.session_id = session_id
    return session_id, conn


async def ensure_baseline(actor: StarterHandle, active: ActiveRun) -> None:
    """Before the run's root execution starts: make sure a captured root
    checkpoint of ordinal − 1 exists (captured now if not). Run by the
    starter, outside the thread's lock; the record it commits is new and
    touches no state the actor holds."""
    engine = actor.host.checkpoints
    store = actor.host.store
    if engine is None:
        return
    run = active.run
    if previous_root(store, actor.thread_id, run.ordinal) is not None:
        return
    workspace = actor.state.thread.workspace
    # The attempt id makes the ref unique: a baseline whose record a crash
    # lost is never in the way of the next one (refs are create-only).
    ref = checkpoint_ref(actor.thread_id, "baseline", f"{run.ordinal - 1}-{active.attempt.id}")
    try:
        fields = capture_fields(await engine.capture(workspace, ref), ref)
    except Exception as exc:  # noqa: BLE001 - recorded; the run starts anyway
        fields = capture_fields(exc, ref, what=f"thread {actor.thread_id}: baseline capture for run {run.id}")
    batch = ThreadBatch(thread_id=actor.thread_id, now=actor.host.wall_clock())
    checkpoint = Checkpoint(
        id=new_id("ckp"), thread_id=actor.thread_id, run_id=run.id, node_id=active.root.id, scope="root",
        kind="baseline", ordinal=run.ordinal - 1, workspace=workspace, created_at=batch.now, **fields,
    )
    batch.put(checkpoint)
    batch.emit(f"checkpoint.{checkpoint.status}", run_id=run.id, node_id=active.root.id, checkpoint=to_wire(checkpoint))
    # Rides with the run's start, which waits for it: what reads it (the
    # run's end, a child's checkpoint) comes after that commit. A crash before
    # it leaves only an unused shadow ref; the next start captures again.
    store.commit_lazy(batch, f"the baseline checkpoint of run {run.id}")


async def _session_beside_baseline(actor: StarterHandle, active: ActiveRun) -> tuple[str, ProviderConnection]:
    """``ensure_baseline`` and the provider session's start at once (issue 24
    §2: a first message waits for the longer of the two, not their sum). A
    session that fails to start does not cut the capture short: its error is
    raised once the baseline is recorded."""
    found: list[tuple[str, ProviderConnection]] = []
    failed: list[BaseException] = []

    async def session() -> None:
        try:
            session_id, conn = await actor.sessions.ensure_session(actor.thread_id, active.run.provider)
        except Exception as exc:  # noqa: BLE001 - raised below, after the baseline
            failed.append(exc)
            return
        # Known at once (same task, no await in between): an exit of an
        # older session of this thread must not be blamed on this attempt.
        active.session_id = session_id
        found.append((session_id, conn))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(session)
        await ensure_baseline(actor, active)
    if failed:
        raise failed[0]
    return found[0]


async def wait_while_restored(actor: StarterHandle, workspace: str) -> None:
    """Before a run starts in ``workspace``: wait for any restore writing there to end."""
    folder = await trio.to_thread.run_sync(os.path.realpath, workspace)
    await actor.host.restoring.wait_until_free(folder)


def _servers(plan: StartPlan) -> dict[str, Any]:
    """The thread's MCP servers besides agentd's own (an editor's), with
    their secrets (the actor read them with the plan), given where a native
    thread is made, loaded or forked."""
    return {"mcp_servers": list(plan.mcp_servers)} if plan.mcp_servers else {}


async def start_attempt(actor: StarterHandle, active: ActiveRun) -> None:
    """Get ``active``'s attempt running on the provider; report every outcome
    through ``actor``'s mailbox."""
    state = actor.state
    attempt_id = active.attempt.id
    text = active.user_message.text
    # The message's images, passed only when there are some (issue 26).
    extra: dict[str, Any] = {}
    if active.user_message.attachments:
        extra["images"] = images.inputs(images.folder_beside(actor.host.workspaces_folder, actor.thread_id), active.user_message)
    try:
        plan = await _context(actor, attempt_id)
        if plan is None:
            return
        servers = _servers(plan)
        cwd = state.thread.workspace
        # A fork's own worktree (or copy) is made at its first run (issue 27).
        await worktrees.ensure_made(actor.host, state.thread, active.run.id, active.root.id)
        await trio.to_thread.run_sync(lambda: os.makedirs(cwd, mode=0o700, exist_ok=True))
        # Another thread's restore writing here: start after it, on what it put back.
        await wait_while_restored(actor, cwd)
        # Before the root execution starts: the workspace state this run's
        # checkpoint is diffed against (SPEC F13). The provider session starts
        # meanwhile: its runtime is spawned in the daemon's folder and sees
        # the workspace only with the thread or turn, which wait for both.
        session_id, conn = await _session_beside_baseline(actor, active)
        version = conn.runtime_version
        if plan.resume is not None:
            turns, lost = await _resume(conn, plan, cwd, servers)
            if lost is None:
                native = plan.resume.native_thread_id
                # Posted before the turn starts, so the actor knows the
                # provider thread before any event of the turn arrives.
                await actor.post(ProviderThreadReady(attempt_id, session_id, native, created=False,
                                                     resumed_turn_count=turns, provider_thread=plan.resume,
                                                     history_mode=conn.history_mode(native)))
                await conn.start_turn(native, text=text, attempt_id=attempt_id, cwd=cwd, context=plan.context, **extra)
                return
            plan = await _context(actor, attempt_id, lost=(plan.resume.id, lost))
            if plan is None:
                return
            servers = _servers(plan)
            if plan.resume is not None:  # pragma: no cover - lineage replaces a lost provider thread
                await actor.post(AttemptStartFailed(attempt_id, "context_failed", f"{lost}, and it was not replaced"))
                return
        if plan.fork_native_thread_id is not None:
            try:
                native = await conn.fork_thread(plan.fork_native_thread_id, last_turn_id=plan.fork_turn_ref, cwd=cwd,
                                               **servers)
            except ProviderRuntimeError as exc:
                await actor.post(AttemptStartFailed(attempt_id, "context_transfer_failed", f"native fork failed: {exc}"))
                return
            await actor.post(ProviderThreadReady(attempt_id, session_id, native, created=True, runtime_version=version,
                                                 forked=True, history_mode=conn.history_mode(native)))
            await conn.start_turn(native, text=text, attempt_id=attempt_id, cwd=cwd, context=plan.context, **extra)
        elif conn.capabilities.empty_threads:
            native = await conn.create_thread(cwd=cwd, **servers)
            await actor.post(ProviderThreadReady(attempt_id, session_id, native, created=True, runtime_version=version,
                                                 history_mode=conn.history_mode(native)))
            await conn.start_turn(native, text=text, attempt_id=attempt_id, cwd=cwd, context=plan.context, **extra)
        else:
            session_id, conn = await _unbound_session(actor, active, conn, session_id)
            native, _turn = await conn.start_first_turn(text=text, attempt_id=attempt_id, cwd=cwd, context=plan.context,
                                                        **extra, **servers)
            await actor.post(ProviderThreadReady(attempt_id, session_id, native, created=True, runtime_version=version,
                                                 history_mode=conn.history_mode(native)))
    except worktrees.WorkspaceFailed as exc:
        await actor.post(AttemptStartFailed(attempt_id, "workspace_failed", exc))
    except (ProviderRuntimeError, AgentdError, OSError) as exc:
        await actor.post(AttemptStartFailed(attempt_id, "provider_start_failed", exc))

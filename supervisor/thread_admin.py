"""``thread.delete`` on the daemon's side: the deletion itself runs in the
thread's actor (``actors/thread_admin.py``: race-free with a run starting),
then, after its commit, the thread's idle provider session is stopped and
its checkpoints' shadow refs are dropped (their objects go at the next
compaction), and its images and MCP servers' secrets file go. The search index drops the thread's entries when it takes in
``thread.deleted``. A daemon killed between the commit and the refs' drop
leaves refs that name no checkpoint; they cost only their objects."""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

import trio

from agentd.actors import thread_admin
from agentd.actors.providers import images, mcp_secrets
from agentd.actors.trees import remove_tree
from agentd.protocol import wire
from agentd.protocol.server import Connection

from .context import DaemonContext

log = logging.getLogger(__name__)


async def thread_delete(context: DaemonContext, params: wire.ThreadDeleteParams, _conn: Connection) -> dict[str, Any]:
    """``thread.delete {threadId}``: the thread and its records go; forks keep theirs."""
    done: thread_admin.DeleteDone = await context.registry.call(
        params.thread_id, thread_admin.thread_delete, params, None, method="thread.delete")
    deleted = done.deleted
    await context.sessions.stop_session(deleted.thread_id, "thread_deleted")
    dropped = await _drop_refs(context, deleted.checkpoint_refs)
    # Its messages' images (issue 26) go with it.
    folder = images.folder_beside(context.registry.workspaces_folder, deleted.thread_id)
    await trio.to_thread.run_sync(remove_tree, folder)
    # And the secrets of its MCP servers.
    secrets = mcp_secrets.folder_beside(context.registry.workspaces_folder)
    try:
        await trio.to_thread.run_sync(mcp_secrets.remove, secrets, deleted.thread_id)
    except OSError as exc:  # the records are gone; a folder agentd will not touch is said, not followed
        log.warning("thread %s deleted, but its MCP servers' secrets file stays: %s", deleted.thread_id, exc)
    return {"threadId": deleted.thread_id, "runs": deleted.runs, "messages": deleted.messages,
            "nodes": deleted.nodes, "handoffs": deleted.handoffs, "checkpoints": deleted.checkpoints,
            "refsDropped": dropped, "childThreadIds": deleted.child_thread_ids, "seq": done.seq}


async def _drop_refs(context: DaemonContext, refs: list[tuple[str, str]]) -> int:
    """Delete the shadow refs, workspace by workspace; how many were dropped."""
    engine = context.registry.checkpoints
    if engine is None or not refs:
        return 0
    by_workspace: dict[str, list[str]] = defaultdict(list)
    for workspace, ref in refs:
        by_workspace[workspace].append(ref)
    dropped = 0
    for workspace, names in by_workspace.items():
        try:
            await engine.delete_refs(workspace, names)
            dropped += len(names)
        except Exception as exc:  # noqa: BLE001 - the records are gone; a ref left behind costs only space
            log.warning("thread deleted, but its checkpoint refs in %s stay: %s", workspace, exc)
    return dropped

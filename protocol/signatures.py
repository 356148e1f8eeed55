"""The protocol's methods: what each one takes and what it answers.

This is the protocol's half of every method — its name, its params Struct
(``wire.py``) and its result Struct (``results.py``) — kept in the protocol
layer so that ``agentd schema`` and clients can read it without the daemon
(the method table imports every handler, and trio with them). The method
table (``agentd.supervisor.methods``) gives each of these names its owner,
handler and access, and takes the params and the result from here; building
it checks that the two name the same methods.
"""

from __future__ import annotations

from typing import NamedTuple

from . import results as r
from . import wire as w


class Signature(NamedTuple):
    params: type[w.Params]
    #: a Struct, or ``results.Never`` for a method that never answers with a result
    result: type


SIGNATURES: dict[str, Signature] = {
    # commands
    "thread.create": Signature(w.ThreadCreateParams, r.ThreadCreateResult),
    "thread.message.send": Signature(w.MessageSendParams, r.MessageSendResult),
    "run.interrupt": Signature(w.RunInterruptParams, r.RunInterruptResult),
    "run.retry": Signature(w.RunRetryParams, r.RunRetryResult),
    "node.interrupt": Signature(w.NodeInterruptParams, r.NodeInterruptResult),
    "thread.stop": Signature(w.ThreadStopParams, r.ThreadStopResult),
    "thread.queue.release": Signature(w.ThreadIdParams, r.QueueReleaseResult),
    "queued-run.cancel": Signature(w.QueuedRunParams, r.QueuedRunCancelResult),
    "queued-run.reorder": Signature(w.QueueReorderParams, r.QueueReorderResult),
    "queued-message.promote-to-steer": Signature(w.PromoteParams, r.MessageSendResult),
    "approval.respond": Signature(w.ApprovalRespondParams, r.RequestRespondResult),
    "user-input.respond": Signature(w.UserInputRespondParams, r.RequestRespondResult),
    "plan.implement": Signature(w.PlanImplementParams, r.PlanImplementResult),
    "thread.fork": Signature(w.ThreadForkParams, r.ThreadForkResult),
    "run.resume": Signature(w.RunResumeParams, r.Never),
    "task.delegate": Signature(w.TaskDelegateParams, r.TaskDelegateResult),
    "task.cancel": Signature(w.TaskCancelParams, r.TaskCancelResult),
    "checkpoint.restore": Signature(w.CheckpointRestoreParams, r.CheckpointRestoreResult),
    "rollback.toRun": Signature(w.RollbackToRunParams, r.RollbackToRunResult),
    "rollback.node": Signature(w.RollbackNodeParams, r.RollbackNodeResult),
    "thread.unquarantine": Signature(w.ThreadIdParams, r.ThreadUnquarantineResult),
    "thread.update": Signature(w.ThreadUpdateParams, r.ThreadUpdateResult),
    "thread.delete": Signature(w.ThreadDeleteParams, r.ThreadDeleteResult),
    "thread.archive": Signature(w.ThreadArchiveParams, r.ThreadArchiveResult),
    "thread.unarchive": Signature(w.ThreadArchiveParams, r.ThreadUnarchiveResult),
    # reads
    "thread.list": Signature(w.ThreadListParams, r.ThreadListResult),
    "thread.get": Signature(w.ThreadGetParams, r.ThreadGetResult),
    "run.get": Signature(w.RunGetParams, r.RunGetResult),
    "thread.requests": Signature(w.ThreadRequestsParams, r.ThreadRequestsResult),
    "task.result": Signature(w.TaskResultParams, r.TaskResult),
    "mcp.endpoint": Signature(w.McpEndpointParams, r.McpEndpointResult),
    "thread.transfers": Signature(w.ThreadIdParams, r.ThreadTransfersResult),
    "handoff.get": Signature(w.HandoffGetParams, r.HandoffGetResult),
    "daemon.status": Signature(w.NoParams, r.DaemonStatusResult),
    "web.loginCode": Signature(w.NoParams, r.WebLoginCodeResult),
    "providers.list": Signature(w.NoParams, r.ProvidersListResult),
    "checkpoint.list": Signature(w.ThreadIdParams, r.CheckpointListResult),
    "checkpoint.diff": Signature(w.CheckpointDiffParams, r.CheckpointDiffResult),
    "run.diff": Signature(w.RunDiffParams, r.RunDiffResult),
    "thread.search": Signature(w.ThreadSearchParams, r.ThreadSearchResult),
    "thread.export": Signature(w.ThreadExportParams, r.ThreadExportResult),
    # events
    "events.subscribe": Signature(w.SubscribeParams, r.SubscribeResult),
    "events.unsubscribe": Signature(w.UnsubscribeParams, r.EmptyResult),
}

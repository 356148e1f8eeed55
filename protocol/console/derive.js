// What the views show, derived from the model's records with no DOM: labels,
// summaries, which actions a record offers, what a rollback undoes. The
// views draw these; tests/console/*.test.mjs check them under node.

import { TERMINAL } from './model.js';

/** A protocol word as text: `delegated_task` → `delegated task`. */
export const words = (s) => (s ?? '').replaceAll('_', ' ');

/** `n` and the noun, singular for one: `1 file`, `2 files`. */
export function plural(n, one, many = `${one}s`) {
  return `${n.toLocaleString('en')} ${n === 1 ? one : many}`;
}

/** A token count in a few characters: `950`, `12.3k`, `4.1M`. */
export function tokens(n) {
  if (n < 1000) return String(n);
  return n < 1e6 ? `${(n / 1000).toFixed(1)}k` : `${(n / 1e6).toFixed(1)}M`;
}

/**
 * What a run or a thread used: `12.0k in (2.0k cached) · 900 out (50 reasoning) · cost 0.0282`;
 * the cost only where the daemon knew every price (null is never shown as 0). Null without usage.
 */
export function usageText(usage, cost) {
  if (!usage) return null;
  const cached = usage.cachedInputTokens ? ` (${tokens(usage.cachedInputTokens)} cached)` : '';
  const reasoning = usage.reasoningTokens ? ` (${tokens(usage.reasoningTokens)} reasoning)` : '';
  const price = cost === null || cost === undefined ? '' : ` · cost ${cost < 100 ? cost.toFixed(4) : cost.toFixed(2)}`;
  return `${tokens(usage.inputTokens)} in${cached} · ${tokens(usage.outputTokens)} out${reasoning}${price}`;
}

/** Whether a run is going but its agent has said nothing for `[daemon] stall_after` (run.stalled). */
export const isStalled = (run) => run.stalledSince !== null && run.stalledSince !== undefined
  && (run.status === 'running' || run.status === 'waiting');

/**
 * The desktop notification an event deserves while the page is in the
 * background (issue 28): a run that ended, failed or stalled, an approval or
 * a question waiting; null for every other event. `title` is the thread's.
 */
export function notificationFor(ev, title) {
  const p = ev.payload ?? {};
  const where = title || ev.threadId;
  const run = p.run;
  if (ev.type === 'run.completed' && run) return { title: `Run #${run.ordinal} finished`, body: where, tag: ev.runId };
  if ((ev.type === 'run.failed' || ev.type === 'run.interrupted') && run) {
    return { title: `Run #${run.ordinal} ${run.status}`, body: `${where}${run.reason ? `: ${run.reason}` : ''}`, tag: ev.runId };
  }
  if (ev.type === 'run.stalled') return { title: 'A run has stalled', body: `${where}: no word from the agent for ${Math.round(p.silentFor)} s`, tag: ev.runId };
  if (ev.type === 'approval.requested') return { title: 'Approval needed', body: `${where}: ${p.request?.detail?.command ?? p.node?.title ?? 'the agent waits'}`, tag: p.request?.id };
  if (ev.type === 'user_input.requested') return { title: 'A question for you', body: where, tag: p.request?.id };
  return null;
}

/** A checkpoint's one-line summary: `1 file +2 −0`, or its status and why. */
export function checkpointText(cp) {
  const s = cp.summary ?? {};
  // Nothing before it to count against: its diff is the whole workspace (issue 28 item 7).
  const files = cp.baseCheckpointId ? `${plural(s.filesChanged ?? 0, 'file')} +${s.insertions ?? 0} −${s.deletions ?? 0}`
    : 'the whole workspace (no checkpoint before it)';
  if (cp.status === 'captured') return files;
  // a rollback made it stale: what it holds is still there (and can be diffed)
  if (cp.status === 'stale') return `stale${cp.reason ? ` (${words(cp.reason)})` : ''}: ${files}`;
  return `checkpoint ${cp.status}${cp.reason ? `: ${cp.reason}` : ''}`;
}

/** Whether checkpoint.diff can show it: captured, or stale after a rollback (protocol: "they can still be diffed"). */
export const canDiff = (cp) => cp.status === 'captured' || cp.status === 'stale';

/**
 * Whether a run's diff can only be the change between the captures around it
 * (run.diff's `between_baselines`): it started and ended, but has no
 * checkpoint of its own that holds files — a daemon killed under it.
 */
export const approximateDiff = (run, cp) => TERMINAL.has(run.status) && Boolean(run.startedAt) && !(cp && canDiff(cp));

/**
 * The actions a run offers. `latest`: it is the thread's latest run (not
 * rolled back) and nothing else is active or queued — only then can a failed
 * or interrupted run be retried (run.retry).
 */
export function runActions(run, { latest = false } = {}) {
  const ended = run.status === 'failed' || run.status === 'interrupted';
  return {
    interrupt: run.status === 'running' || run.status === 'waiting',
    cancel: run.status === 'queued',
    retry: ended && latest,
    fork: run.status === 'completed' || (ended && Boolean(run.startedAt)),
    rollback: TERMINAL.has(run.status) && run.status !== 'rolled_back' && Boolean(run.startedAt),
  };
}

/** Whether `run` is the one run.retry takes: the latest not rolled back, with nothing active or queued. */
export function isRetryable(runs, run) {
  const live = runs.filter((r) => r.status !== 'rolled_back');
  if (live.some((r) => r.status === 'queued' || r.status === 'running' || r.status === 'waiting')) return false;
  const latest = live.reduce((a, b) => (b.ordinal > a.ordinal ? b : a), live[0]);
  return latest?.id === run.id;
}

/** Whether a node of a run can be interrupted on its own (node.interrupt): a running step, not the run's root. */
export const nodeInterruptible = (node, run) =>
  node.kind !== 'root_turn' && node.status === 'running' && (run.status === 'running' || run.status === 'waiting');

/** Whether the thread has a queued run (Stop holds the queue even when nothing runs). */
export function hasQueued(d) {
  for (const r of d.runs.values()) if (r.status === 'queued') return true;
  return false;
}

/** The threads directly under `threadId`, in the map's order. */
export function childrenOf(threads, threadId) {
  return [...threads.values()].filter((t) => t.parentThreadId === threadId);
}

/** The forks of `threadId`: what the composer can merge back. */
export function forksOf(threads, threadId) {
  return childrenOf(threads, threadId).filter((t) => t.relationshipToParent === 'fork');
}

/** The children whose approvals and questions show on `threadId` too (delegated work, not forks or side chats). */
export function requestChildren(threads, threadId) {
  return childrenOf(threads, threadId).filter((t) => t.relationshipToParent !== 'fork' && t.relationshipToParent !== 'side_chat');
}

/** The pending requests of an open thread (its own and its delegated children's). */
export function pendingRequests(d) {
  return [...d.requests.values()].filter((r) => r.status === 'pending');
}

/** The todo list and the proposed plans shown above the conversation. */
export function shownArtifacts(d) {
  const all = [...d.artifacts.values()];
  // root todo lists are the progress view; a child's stay under its node
  const rootOf = (a) => !a.nodeId || a.nodeId === d.runs.get(a.runId)?.rootNodeId;
  const todo = all.filter((a) => a.kind === 'todo_list' && rootOf(a)).sort((a, b) => a.updatedAt - b.updatedAt).at(-1) ?? null;
  // plans still to decide on, and the latest one whatever became of it
  const proposed = all.filter((a) => a.kind === 'proposed_plan').sort((a, b) => a.createdAt - b.createdAt);
  const plans = proposed.filter((a, i) => a.status === 'proposed' || i === proposed.length - 1);
  return { todo, plans };
}

/** A todo step's mark. */
export const stepMark = (status) => (status === 'completed' ? '☑' : status === 'in_progress' ? '▶' : '☐');

/** What rolling back to `ordinal` (0: the start) undoes, and the checkpoint the files go back to. */
export function rollbackPlan(d, ordinal) {
  const runs = d.runsInOrder();
  const target = runs.find((r) => r.ordinal === ordinal);
  return {
    undone: runs.filter((r) => r.ordinal > ordinal && r.status !== 'rolled_back'),
    checkpoint: target ? d.checkpointOf(target.id) : null,
  };
}

/** A run's nodes by parent id ('' for the roots), in the order given. */
export function nodeChildren(nodes) {
  const children = new Map();
  for (const n of nodes) {
    const key = n.parentNodeId ?? '';
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(n);
  }
  return children;
}

/** A run's label in its thread: `#3`, or its id when the run is not known here. */
export function runLabel(d, runId) {
  const r = d?.runs.get(runId);
  return r ? `#${r.ordinal}` : runId;
}

/**
 * A transfer as seen from thread `d`: which way it goes, the other thread,
 * the providers on each side and the point it was taken at, where the
 * record names them. `sourceDetail` is the source thread's ThreadDetail when
 * the page has it (to name the point's run by its ordinal).
 */
export function transferView(tr, d, sourceDetail = null) {
  const outgoing = tr.sourceThreadId === d.id && tr.targetThreadId !== d.id;
  const self = tr.sourceThreadId === tr.targetThreadId;
  const providers = tr.sourceProvider && tr.targetProvider && tr.sourceProvider !== tr.targetProvider
    ? `${tr.sourceProvider} → ${tr.targetProvider}`
    : tr.targetProvider ?? tr.sourceProvider ?? null;
  return {
    type: words(tr.type),
    arrow: self ? null : outgoing ? '→' : '←',
    otherThreadId: self ? null : outgoing ? tr.targetThreadId : tr.sourceThreadId,
    status: words(tr.status),
    resolution: tr.resolution ? `${tr.resolution}${tr.lowerFidelity ? ', lower fidelity' : ''}` : null,
    providers,
    point: pointText(tr.sourcePoint, sourceDetail),
  };
}

/** Where a source point is: `run #2`, `checkpoint ckp_…`, `the start`; null when it names nothing. */
export function pointText(point, sourceDetail = null) {
  if (!point) return null;
  if (point.checkpointId && point.runId) return `run ${runLabel(sourceDetail, point.runId)}, checkpoint ${point.checkpointId}`;
  if (point.runId) return `run ${runLabel(sourceDetail, point.runId)}`;
  if (point.checkpointId) return `checkpoint ${point.checkpointId}`;
  if (point.nodeId) return `node ${point.nodeId}`;
  if (point.providerThreadId) return `provider thread ${point.providerThreadId}${point.providerTurnId ? ` turn ${point.providerTurnId}` : ''}`;
  return null; // e.g. a latest_stable point of a thread with no completed run: an empty fork
}

/**
 * The name an export of `thread` downloads as (issue 28): its title made safe
 * for any file system, then its id (titles repeat; ids do not), then the
 * format's extension: `fix-the-parser-thr_….md`.
 */
export function exportName(thread, format) {
  const stem = (thread.title ?? '').normalize('NFKD').replace(/[\u0300-\u036f]/g, '')
    .replace(/[^\w.-]+/g, '-').slice(0, 60).replace(/^[-.]+|[-.]+$/g, '');
  return `${stem ? `${stem}-` : ''}${thread.id}.${format === 'json' ? 'json' : 'md'}`;
}

// The run graph pane: runs → attempts → nodes, each run with its
// checkpoint and actions; a run's detail is read (run.get) when it opens.

import { h, button, badge } from './dom.js';
import { $, ui } from './ui.js';
import { words, runActions, isRetryable, nodeInterruptible, nodeChildren, runLabel, checkpointText, canDiff, usageText, isStalled, approximateDiff } from './derive.js';
import { showDiff, showRunDiff, handoffButton } from './dialogs.js';
import { fork, rollback } from './actions.js';

/** A run's element (kept in view.runs), its detail drawn when it is open. */
export function runElement(d, run) {
  const { view } = ui;
  const cp = d.checkpointOf(run.id);
  const open = view.expanded.has(run.id);
  const can = runActions(run, { latest: isRetryable([...d.runs.values()], run) });
  const user = d.messages.get(run.userMessageId);
  const el = h('li', { class: 'run', dataset: { runId: run.id, status: run.status, ordinal: run.ordinal } },
    h('div', { class: 'run-row' },
      h('button', { type: 'button', class: 'toggle', 'aria-expanded': String(open), dataset: { action: 'toggle-run' }, 'aria-label': `Run ${run.ordinal} details`, onclick: () => expandRun(d, run.id, { load: true, open: !view.expanded.has(run.id) }) }, open ? '▾' : '▸'),
      h('span', { class: 'ordinal' }, `#${run.ordinal}`), badge(run.status),
      isStalled(run) ? h('span', { class: 'badge status-stalled', dataset: { stalled: 'true' }, title: 'The agent has said nothing for a while; the run goes on (interrupt it if it should end)' }, 'stalled') : null,
      h('span', { class: 'muted' }, run.provider ?? ''),
      run.reason ? h('span', { class: 'reason' }, run.reason) : null,
      run.supersedesRunId ? h('span', { class: 'reason' }, `supersedes ${runLabel(d, run.supersedesRunId)}`) : null,
      user ? h('span', { class: 'snippet' }, user.text.slice(0, 80)) : null,
      cp ? checkpointBadge(cp) : null,
      approximateDiff(run, cp) ? button('View diff (approximate)', 'run-diff', () => showRunDiff(run), { title: 'The change between the checkpoints around this run: it was cut off before its own' }) : null,
      run.usage ? h('span', { class: 'usage muted', dataset: { usage: 'run' } }, usageText(run.usage, run.cost)) : null,
      h('span', { class: 'actions' },
        can.interrupt ? button('Interrupt', 'interrupt', () => ui.call('run.interrupt', { runId: run.id }).catch(() => {})) : null,
        can.cancel ? button('Cancel', 'cancel', () => ui.call('queued-run.cancel', { runId: run.id }).catch(() => {})) : null,
        can.retry ? button('Retry', 'retry', () => ui.call('run.retry', { runId: run.id }).catch(() => {}), { title: 'A new attempt of this run, on its message' }) : null,
        can.fork ? button('Fork', 'fork-run', () => fork(d, run)) : null,
        can.rollback ? button('Roll back', 'rollback', () => rollback(d, run.ordinal)) : null)),
    open ? runDetail(d, run) : null);
  view.runs.set(run.id, el);
  return el;
}

function checkpointBadge(cp) {
  return h('span', { class: 'checkpoint', dataset: { checkpointId: cp.id, status: cp.status } }, checkpointText(cp),
    canDiff(cp) ? [' ', button('View diff', 'diff', () => showDiff(cp))] : null);
}

function runDetail(d, run) {
  const rd = d.runDetails.get(run.id);
  if (!rd) return h('div', { class: 'run-detail muted' }, 'Loading…');
  const children = nodeChildren(rd.nodes.values());
  const nodeTree = (n) => h('li', { class: 'node', dataset: { nodeId: n.id, kind: n.kind, status: n.status } },
    h('span', { class: 'kind' }, words(n.kind)), ' ', n.title ? h('span', {}, n.title) : null, ' ', badge(n.status),
    nodeInterruptible(n, run) ? [' ', button('Interrupt', 'interrupt-node', () => ui.call('node.interrupt', { nodeId: n.id }).catch(() => {}), { title: 'End this step only; the run goes on' })] : null,
    n.summary ? h('div', { class: 'summary' }, n.summary) : null,
    children.has(n.id) ? h('ul', {}, children.get(n.id).map(nodeTree)) : null);
  const attempts = [...rd.attempts.values()].sort((a, b) => a.number - b.number);
  return h('div', { class: 'run-detail' },
    h('ol', { class: 'attempts' }, attempts.map((a) => {
      const root = rd.nodes.get(a.rootNodeId);
      return h('li', { class: 'attempt', dataset: { attemptId: a.id, status: a.status, selected: a.id === run.selectedAttemptId ? 'true' : null } },
        h('span', {}, `attempt ${a.number} `), h('span', { class: 'muted' }, words(a.reason)), ' ', badge(a.status),
        a.error ? h('span', { class: 'reason' }, ` ${a.error}`) : null,
        a.handoffId ? [' ', handoffButton(d, a.handoffId)] : null,
        root ? h('ul', { class: 'nodes' }, nodeTree(root)) : null);
    })));
}

/** Open or close a run's detail, reading its graph first when asked and not yet read. */
export async function expandRun(d, runId, { load, open }) {
  const { view } = ui;
  if (open) view.expanded.add(runId); else view.expanded.delete(runId);
  if (load && open && !d.runDetails.get(runId)?.loaded) {
    const result = await ui.call('run.get', { runId }).catch(() => null);
    if (result) ui.model.setRunGet(d.id, result);
  }
  ui.model.dirty.runs.add(runId);
  ui.scheduleRender();
}

/** Re-render one run; true if it is new (the list needs placing). */
export function renderRun(d, runId) {
  const run = d.runs.get(runId);
  if (!run) return false;
  const old = ui.view.runs.get(runId);
  if (!old) return run.ordinal >= (ui.view.firstRunOrdinal ?? 0);
  old.replaceWith(runElement(d, run));
  return false;
}

/** Put the drawn runs in order, drawing the new ones. */
export function placeRuns(d) {
  const box = $('runs');
  const { view } = ui;
  for (const run of d.runsInOrder()) {
    if (run.ordinal >= view.firstRunOrdinal || !view.firstRunOrdinal) box.append(view.runs.get(run.id) ?? runElement(d, run));
  }
}

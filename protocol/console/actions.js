// Thread actions that ask first or move the page: fork, roll back.

import { h } from './dom.js';
import { ui } from './ui.js';
import { rollbackPlan } from './derive.js';
import { confirmDialog } from './dialogs.js';

/** Fork the thread (from `run`, else its latest stable point) and open the fork. */
export async function fork(d, run) {
  const params = { threadId: d.id };
  if (run) params.sourcePoint = { type: 'run', runId: run.id };
  const result = await ui.call('thread.fork', params).catch(() => null);
  if (result) ui.openThread(result.threadId);
}

/** Roll back to run `ordinal` (0: the start), after saying what that undoes. */
export async function rollback(d, ordinal) {
  const { undone, checkpoint: cp } = rollbackPlan(d, ordinal);
  const body = [
    h('p', {}, ordinal === 0 ? 'Go back to before the first run.' : `Go back to the state after run #${ordinal}.`),
    undone.length
      ? [h('p', {}, `This undoes ${undone.length} run${undone.length > 1 ? 's' : ''} (kept in the graph, marked rolled back):`),
        h('ul', { class: 'undone' }, undone.map((r) => h('li', { dataset: { runId: r.id } }, `#${r.ordinal} ${r.status}: ${d.messages.get(r.userMessageId)?.text.slice(0, 80) ?? ''}`)))]
      : h('p', {}, 'No later run to undo.'),
    h('p', {}, `Files go back to ${cp ? `checkpoint ${cp.id}` : 'that run\'s checkpoint'}, and the agent forgets the later runs. The workspace as it is now is saved first as a safety checkpoint.`),
  ];
  if (!await confirmDialog(`Roll back to ${ordinal === 0 ? 'the start' : `run #${ordinal}`}?`, body, 'Roll back', 'confirm-rollback')) return;
  await ui.call('rollback.toRun', { threadId: d.id, targetOrdinal: ordinal }).catch(() => {});
}

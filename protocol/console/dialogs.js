// The page's dialogs: a confirmation, and a text dialog for a checkpoint's
// diff and a handoff's text (plus the button that opens a handoff).

import { h, button } from './dom.js';
import { $, ui } from './ui.js';
import { words } from './derive.js';
import { patchElement } from './rich.js';

/** Ask before an action; resolves true when the person confirmed. */
export function confirmDialog(title, body, okLabel, action) {
  return new Promise((resolve) => {
    const dialog = $('confirm-dialog');
    $('confirm-title').textContent = title;
    $('confirm-body').replaceChildren(...body.flat());
    const ok = $('confirm-ok');
    ok.textContent = okLabel;
    ok.dataset.action = action;
    dialog.returnValue = '';
    dialog.onclose = () => resolve(dialog.returnValue === 'ok');
    dialog.showModal();
  });
}

export function textDialog(title, ...body) {
  $('text-title').textContent = title;
  $('text-body').replaceChildren(...body);
  $('text-dialog').showModal();
}

/** A diff's files as a table and its patch, diff lines coloured. */
function diffBody(diff) {
  return [
    h('table', { class: 'files', dataset: { checkpointId: diff.checkpointId } },
      h('thead', {}, h('tr', {}, h('th', {}, 'file'), h('th', {}, 'change'), h('th', {}, '+'), h('th', {}, '−'))),
      h('tbody', {}, diff.files.map((f) => h('tr', {}, h('td', {}, f.oldPath ? `${f.oldPath} → ${f.path}` : f.path), h('td', {}, f.change), h('td', {}, f.binary ? 'bin' : f.insertions), h('td', {}, f.binary ? '' : f.deletions))))),
    patchElement(diff.patch + (diff.truncated ? '\n… (cut)' : ''), { class: 'patch' })];
}

/** A checkpoint's files and patch (checkpoint.diff). */
export async function showDiff(cp) {
  const diff = await ui.call('checkpoint.diff', { checkpointId: cp.id }).catch(() => null);
  if (!diff) return;
  textDialog(`Checkpoint ${cp.id} (after run ${cp.ordinal})${cp.status === 'stale' ? ', stale' : ''}`, ...diffBody(diff));
}

/**
 * What a run cut off before its checkpoint changed (run.diff, issue 28 item 8):
 * the change between the captures around it, said to be approximate.
 */
export async function showRunDiff(run) {
  const diff = await ui.call('run.diff', { runId: run.id }).catch(() => null);
  if (!diff) return;
  const note = diff.approximate === 'between_baselines'
    ? h('p', { class: 'approximate', dataset: { approximate: diff.approximate } },
      `Run #${run.ordinal} was cut off before its own checkpoint: this is the change from ${diff.baseCheckpointId} `
      + `(before it) to ${diff.checkpointId} (the next capture after it), so anything else that changed the folder in between is in it too.`)
    : null;
  textDialog(`Run #${run.ordinal}${note ? ' (approximate)' : ''}`, ...(note ? [note] : []), ...diffBody(diff));
}

/** The button naming a handoff; it opens the handoff's text. */
export function handoffButton(d, handoffId) {
  const known = d.handoffs.get(handoffId);
  const label = known ? `Handoff: ${words(known.strategy)}, ${known.size?.toLocaleString() ?? '?'} chars` : 'Handoff';
  return button(label, 'handoff', () => showHandoff(d, handoffId), { dataset: { handoffId } });
}

async function showHandoff(d, handoffId) {
  const { handoff } = await ui.call('handoff.get', { handoffId }).catch(() => ({}));
  if (!handoff) return;
  d.handoffs.set(handoff.id, handoff);
  textDialog(`Handoff ${handoff.id}`,
    h('p', {}, `${words(handoff.strategy)} · ${handoff.size?.toLocaleString()} of ${handoff.cap?.toLocaleString()} chars`,
      handoff.reason ? ` · ${handoff.reason}` : '', handoff.droppedRunIds?.length ? ` · ${handoff.droppedRunIds.length} runs left out` : ''),
    h('pre', { class: 'handoff-text' }, handoff.text));
}

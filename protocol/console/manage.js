// Looking after a thread as a whole (issue 28 "Delete and rename", "Search
// and export"; issue 27 "Archiving"): rename it, delete it, export it,
// archive and unarchive it. Each asks the daemon and leaves the page to its
// events; a refusal (a run still going, files no checkpoint holds) is the
// daemon's own message, shown by ui.call.

import { h } from './dom.js';
import { $, ui } from './ui.js';
import { childrenOf, exportName, plural } from './derive.js';
import { confirmDialog } from './dialogs.js';

/** Ask for a new title (the rename dialog) and set it (thread.update). */
export function rename(d) {
  const dialog = $('rename-dialog');
  const input = $('rename-form').elements.title;
  input.value = d.thread.title ?? '';
  dialog.returnValue = '';
  dialog.onclose = () => {
    if (dialog.returnValue !== 'rename' || input.value === (d.thread.title ?? '')) return;
    ui.call('thread.update', { threadId: d.id, title: input.value }).catch(() => {});
  };
  dialog.showModal();
  input.select();
}

/** Delete the thread after saying what goes and what stays (thread.delete). */
export async function remove(d) {
  const t = d.thread;
  const name = t.title || t.id;
  const kids = childrenOf(ui.model.threads, t.id);
  const body = [
    h('p', {}, `${plural(d.runs.size, 'run')}, the messages, the run graph and the checkpoints of “${name}” are deleted from agentd for good.`),
    kids.length ? h('p', {}, `${plural(kids.length, 'thread')} made from it (forks, tasks) keep their own history.`) : null,
    t.activeRunId ? h('p', { class: 'warn' }, 'A run of it is going: agentd refuses until it is stopped.') : null,
  ].filter(Boolean);
  if (!await confirmDialog(`Delete “${name}”?`, body, 'Delete', 'confirm-delete')) return;
  await ui.call('thread.delete', { threadId: t.id }).catch(() => {}); // thread.deleted closes the view
}

/** Archive the thread, or list it again (thread.archive / thread.unarchive). */
export function setArchived(d, archived) {
  ui.call(archived ? 'thread.archive' : 'thread.unarchive', { threadId: d.id }).catch(() => {});
}

/** The thread as a file (thread.export, `markdown` or `json`), downloaded from a Blob URL. */
export async function exportThread(d, format) {
  const result = await ui.call('thread.export', { threadId: d.id, format }).catch(() => null);
  if (!result) return;
  const blob = format === 'json'
    ? new Blob([`${JSON.stringify(result.document, null, 2)}\n`], { type: 'application/json' })
    : new Blob([result.markdown], { type: 'text/markdown;charset=utf-8' });
  download(exportName(d.thread, format), blob);
}

/** Save `blob` as `name`: a link to its object URL, clicked (the page's CSP allows no other source). */
export function download(name, blob) {
  const url = URL.createObjectURL(blob);
  const link = h('a', { href: url, download: name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  // The download reads the URL after this task: revoke it once it surely has.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

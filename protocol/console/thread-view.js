// The open thread: its header (status, actions, lineage, transfers), the
// conversation and the run graph, drawn once when it opens and then redrawn
// piece by piece as the model marks records dirty.

import { h, button, badge } from './dom.js';
import { $, ui, threadLink } from './ui.js';
import { words, hasQueued, childrenOf, requestChildren, transferView, usageText } from './derive.js';
import { handoffButton } from './dialogs.js';
import { fork, rollback } from './actions.js';
import { rename, remove, setArchived, exportThread } from './manage.js';
import { composer, renderComposerState } from './composer.js';
import { messageElement, renderMessage, followConversation, stickToEnd } from './messages.js';
import { renderRequests } from './requests.js';
import { renderArtifacts } from './artifacts.js';
import { runElement, expandRun, renderRun, placeRuns } from './runs.js';

/**
 * Read thread `id` (its record, requests, checkpoints, transfers) and draw
 * it, selected in `list`. Resolves with when it started and how long the
 * reads took once it is drawn; null when it was not (an error, or another
 * thread was opened meanwhile).
 */
export async function showThread(id, list) {
  ui.currentThreadId = id;
  history.replaceState(null, '', `#thread=${id}`);
  list.select(id);
  const d = ui.model.detail(id);
  const t0 = performance.now();
  let get;
  try {
    [get] = await Promise.all([
      ui.call('thread.get', { threadId: id }),
      loadRequests(d),
      ui.call('checkpoint.list', { threadId: id }).then((r) => { for (const c of r.checkpoints) d.putCheckpoint(c); }),
      ui.call('thread.transfers', { threadId: id }).then((r) => { for (const t of r.transfers) d.transfers.set(t.id, t); }),
    ]);
  } catch { return null; }
  if (ui.currentThreadId !== id) return null;
  const fetched = performance.now() - t0;
  ui.model.setThreadGet(get);
  buildThreadView(d);
  const runs = d.runsInOrder();
  const recent = new Set(runs.slice(-3).map((r) => r.id));
  if (d.thread.activeRunId) recent.add(d.thread.activeRunId);
  for (const runId of recent) expandRun(d, runId, { load: true, open: runId === runs.at(-1)?.id });
  return { t0, fetched };
}

/** The open thread went (thread.delete, here or elsewhere): the view says so instead. */
export function closeThread(id, list) {
  if (ui.currentThreadId !== id) return;
  ui.currentThreadId = null;
  ui.view.grown?.disconnect();
  ui.view = { root: null };
  ui.model.details.delete(id);
  history.replaceState(null, '', location.pathname);
  list.select(null);
  $('thread-view').replaceChildren(h('p', { class: 'empty muted', dataset: { deletedThreadId: id } }, `Thread ${id} was deleted.`));
}

/** Read the pending requests of `d` and of its delegated children. */
export async function loadRequests(d) {
  const own = (await ui.call('thread.requests', { threadId: d.id })).requests;
  const kids = requestChildren(ui.model.threads, d.id);
  const theirs = await Promise.all(kids.map((t) => ui.call('thread.requests', { threadId: t.id }).then((r) => r.requests, () => [])));
  for (const r of [...own, ...theirs.flat()]) d.requests.set(r.id, r);
  ui.model.dirty.requests = true;
  ui.scheduleRender();
}

function buildThreadView(d) {
  const root = h('div', { class: 'thread', dataset: { threadId: d.id } },
    h('header', { class: 'thread-head', id: 'thread-head' }),
    h('div', { class: 'panes' },
      h('section', { class: 'conversation', 'aria-label': 'Conversation' },
        h('div', { id: 'requests', class: 'requests', 'aria-live': 'polite' }),
        h('div', { id: 'artifacts', class: 'artifacts' }),
        h('ol', { id: 'messages', class: 'messages' }),
        composer(d)),
      h('section', { class: 'graph', 'aria-label': 'Runs' },
        h('h2', {}, 'Runs'),
        h('ol', { id: 'runs', class: 'runs' }))));
  ui.view.grown?.disconnect(); // the last thread's elements go
  $('thread-view').replaceChildren(root);
  const view = ui.view = { root, messages: new Map(), runs: new Map(), expanded: new Set() };
  view.messageList = [...d.messages.values()];
  view.firstMessage = view.messageList.length;
  showEarlierMessages(d);
  view.runList = d.runsInOrder();
  view.firstRun = view.runList.length;
  showEarlierRuns(d);
  renderHeader(d);
  renderRequests(d);
  renderArtifacts(d);
  renderComposerState(d);
  followConversation($('messages'));
}

/** Draw what the model marks dirty in the open thread `d`. */
export function renderThread(d, dirty) {
  const { view } = ui;
  if (dirty.header || dirty.transfers) renderHeader(d);
  if (dirty.requests) renderRequests(d);
  if (dirty.artifacts || dirty.runs.size) renderArtifacts(d);
  if (dirty.messages.size) {
    for (const id of dirty.messages) renderMessage(d, id);
    stickToEnd($('messages')); // one layout per frame, after every message is written
  }
  let order = false;
  for (const id of dirty.runs) {
    const rd = d.runDetails.get(id);
    if (rd?.fresh) { rd.fresh = false; view.expanded.add(id); }
    order = renderRun(d, id) || order;
  }
  if (order) placeRuns(d);
  if (dirty.listOrder) renderComposerState(d); // the forks to merge back change only with the threads
}

// A long thread draws its latest messages and runs; earlier ones come a page at a time.
const VIEW_PAGE = 100;

function showEarlierMessages(d) {
  const { view } = ui;
  const from = Math.max(0, view.firstMessage - VIEW_PAGE);
  const frag = document.createDocumentFragment();
  if (from > 0) frag.append(button(`Show ${Math.min(VIEW_PAGE, from)} earlier messages (${from} more)`, 'earlier-messages', (e) => { e.target.remove(); showEarlierMessages(d); }, { class: 'earlier' }));
  for (const m of view.messageList.slice(from, view.firstMessage)) frag.append(messageElement(d, m));
  view.firstMessage = from;
  view.hiddenMessages = new Set(view.messageList.slice(0, from).map((m) => m.id));
  $('messages').prepend(frag);
}

function showEarlierRuns(d) {
  const { view } = ui;
  const from = Math.max(0, view.firstRun - VIEW_PAGE);
  const frag = document.createDocumentFragment();
  if (from > 0) frag.append(h('li', {}, button(`Show ${Math.min(VIEW_PAGE, from)} earlier runs (${from} more)`, 'earlier-runs', (e) => { e.target.closest('li').remove(); showEarlierRuns(d); }, { class: 'earlier' })));
  for (const run of view.runList.slice(from, view.firstRun)) frag.append(runElement(d, run));
  view.firstRun = from;
  view.firstRunOrdinal = view.runList[from]?.ordinal ?? 0;
  $('runs').prepend(frag);
}

function renderHeader(d) {
  const t = d.thread;
  const head = $('thread-head');
  if (!head) return;
  const active = t.activeRunId;
  const forks = childrenOf(ui.model.threads, t.id);
  const parent = t.parentThreadId;
  const transfersOpen = head.querySelector('.transfers')?.open; // the person opened it: it stays open
  head.replaceChildren(
    h('div', { class: 'title-row' },
      h('h2', {}, t.title || t.id),
      badge(t.status),
      t.queueHeld ? h('span', { class: 'badge status-held', dataset: { queueHeld: 'true' } }, `queue held (${(t.heldRunIds ?? []).length})`) : null,
      t.archivedAt ? h('span', { class: 'badge status-archived', dataset: { archived: 'true' } }, 'archived') : null,
      h('span', { class: 'muted' }, `${t.provider} · ${t.id}`),
      t.usage ? h('span', { class: 'usage muted', dataset: { usage: 'thread' } }, usageText(t.usage, t.cost)) : null),
    h('div', { class: 'actions' },
      button('Stop', 'stop', () => ui.call('thread.stop', { threadId: t.id }).catch(() => {}), { disabled: !active && !hasQueued(d), title: 'Interrupt the active run and hold the queue' }),
      t.queueHeld ? button('Release queue', 'release-queue', () => ui.call('thread.queue.release', { threadId: t.id }).catch(() => {})) : null,
      button('Fork', 'fork', () => fork(d, null), { title: 'A new thread from the latest stable point' }),
      button('Roll back to start', 'rollback-start', () => rollback(d, 0), { disabled: !d.runs.size })),
    h('div', { class: 'actions manage' },
      button('Rename', 'rename', () => rename(d), { title: 'Give the thread another title' }),
      button('Export Markdown', 'export-markdown', () => exportThread(d, 'markdown'), { title: 'Download the conversation as Markdown' }),
      button('Export JSON', 'export-json', () => exportThread(d, 'json'), { title: 'Download every record of the thread as one JSON document' }),
      t.archivedAt
        ? button('Unarchive', 'unarchive', () => setArchived(d, false), { title: 'List the thread again (a worktree archiving removed comes back)' })
        : button('Archive', 'archive', () => setArchived(d, true), { title: 'Hide the thread from the list and release its agent (a worktree of its own goes, after a final checkpoint)' }),
      button('Delete', 'delete', () => remove(d), { class: 'danger', title: 'Delete the thread and its history' })),
    h('div', { class: 'lineage' },
      parent ? h('span', {}, `${words(t.relationshipToParent ?? 'child')} of `, threadLink(parent)) : null,
      forks.length ? h('span', {}, ' Children: ', forks.map((c, i) => [i ? ', ' : '', threadLink(c.id, `${c.title || c.id} (${words(c.relationshipToParent)}${c.sideChat ? ', side chat' : ''})`)])) : null,
      transfersList(d)));
  if (transfersOpen) head.querySelector('.transfers').open = true;
}

function transfersList(d) {
  if (!d.transfers.size) return null;
  return h('details', { class: 'transfers' }, h('summary', {}, `Transfers (${d.transfers.size})`),
    h('ul', {}, [...d.transfers.values()].map((tr) => {
      const t = transferView(tr, d, ui.model.details.get(tr.sourceThreadId));
      return h('li', { dataset: { transferId: tr.id, type: tr.type } },
        t.type, t.otherThreadId ? [` ${t.arrow} `, threadLink(t.otherThreadId)] : null, ` ${t.status}`,
        t.resolution ? ` (${t.resolution})` : '',
        t.providers ? h('span', { class: 'providers' }, ` · ${t.providers}`) : null,
        t.point ? h('span', { class: 'point' }, ` · from ${t.point}`) : null,
        tr.handoffId ? [' ', handoffButton(d, tr.handoffId)] : null,
        tr.error ? h('span', { class: 'reason' }, ` ${tr.error}`) : null);
    })));
}

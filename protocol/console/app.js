// The agentd web console: the protocol's reference client. It speaks only
// the documented JSON-RPC methods and events (protocol/README.md) over the
// daemon's WebSocket. This module connects, logs in, subscribes, hands
// events to the model (model.js) and draws what they changed once per
// animation frame: the thread list (list.js) and the open thread
// (thread-view.js and the views it draws). It fills in ui.js's services.

import { Connection } from './rpc.js';
import { Model, TERMINAL } from './model.js';
import { ThreadList, listOrder } from './list.js';
import { $, ui } from './ui.js';
import { fillProviders } from './composer.js';
import { respond } from './requests.js';
import { showThread, loadRequests, renderThread, closeThread } from './thread-view.js';
import { offerNotifications, notifyOf } from './notify.js';
import { setUpSearch } from './search.js';

const perf = (window.agentdPerf = { longTasks: [], marks: {} });
try {
  new PerformanceObserver((list) => { for (const e of list.getEntries()) perf.longTasks.push(e.duration); })
    .observe({ type: 'longtask', buffered: true });
} catch { /* no long task timing in this browser */ }

function mark(name) {
  performance.mark(name);
  perf.marks[name] = performance.now();
  // also on <html>, so a script waiting on the DOM (scripts/bench_web.py) sees it
  document.documentElement.setAttribute(`data-${name.replace(':', '-')}`, String(Math.round(perf.marks[name])));
}

/** Mark `name` once what was just drawn is on screen: after the next frame's layout and paint. */
function markPainted(name, then = () => {}) {
  requestAnimationFrame(() => setTimeout(() => { mark(name); then(); }, 0));
}

// --- token and connection ---------------------------------------------------

// The token comes in the fragment (the URL `agentd web` prints), or is
// traded for the one-time code `agentd web` opens the page with (so that no
// browser command line holds it); either way it is kept for this tab only.
const fragment = new URLSearchParams(location.hash.slice(1));
if (fragment.get('token')) sessionStorage.setItem('agentd-token', fragment.get('token'));
let token = sessionStorage.getItem('agentd-token');
const loginCode = fragment.get('code');
ui.currentThreadId = fragment.get('thread');
history.replaceState(null, '', ui.currentThreadId ? `#thread=${ui.currentThreadId}` : location.pathname);

const socketUrl = (t) => `ws://${location.host}/?token=${encodeURIComponent(t ?? '')}`;

/** Trade a one-time login code for the token (POST /login: once, within a minute). */
async function redeem(code) {
  const response = await fetch('/login', { method: 'POST', body: code, cache: 'no-store', credentials: 'omit' });
  if (!response.ok) throw new Error((await response.text()).trim() || `login failed (HTTP ${response.status})`);
  return (await response.json()).token;
}

const model = (ui.model = new Model());
const app = (window.agentdConsole = { model, subscriptionId: null, providers: [], connected: false });
let started = false;

const conn = new Connection(socketUrl(token), {
  onOpen: () => connected(),
  onClose: ({ attempt, delay }) => {
    app.connected = false;
    app.subscriptionId = null;
    setConn('reconnecting', `Disconnected from agentd — reconnecting in ${(delay / 1000).toFixed(1)} s (attempt ${attempt})`);
  },
  onNotify: (method, params) => notified(method, params),
});
app.connection = conn;

function setConn(state, text) {
  const el = $('conn');
  el.dataset.state = state;
  el.textContent = text;
}

function showError(error) {
  const el = $('error');
  el.textContent = error?.message ?? String(error);
  el.hidden = false;
  el.dataset.kind = error?.kind ?? 'error';
  clearTimeout(showError.timer);
  showError.timer = setTimeout(() => { el.hidden = true; }, 15000);
}

/** Call `method`; an error is shown in the page, then thrown. */
ui.call = async (method, params = {}) => {
  try {
    return await conn.call(method, params);
  } catch (error) {
    showError(error);
    throw error;
  }
};

/** Subscribe to every event after the last one applied: no gap, no duplicate. */
async function subscribe() {
  app.subscriptionId = null;
  try {
    const result = await conn.call('events.subscribe', { afterSeq: model.lastSeq });
    app.subscriptionId = result.subscriptionId;
  } catch (error) {
    if (error.kind === 'invalid_params') location.reload(); // another data dir answers now: start over
    else throw error;
  }
}

async function connected() {
  if (!started) mark('agentd:ws-open');
  setConn('open', 'Connected');
  try {
    if (!started) {
      model.lastSeq = (await conn.call('daemon.status')).lastSeq;
      // Both after the seq is known: the subscription replays from it, the
      // list is read no earlier, so nothing falls between them.
      const [, first] = await Promise.all([subscribe(), conn.call('thread.list', { limit: FIRST_PAGE })]);
      mark('agentd:threads-received');
      model.setThreads(first.threads);
      started = true;
      scheduleRender();
      olderThreads = first.next;
      app.providers = ui.providers = (await conn.call('providers.list')).providers;
      fillProviders();
      if (ui.currentThreadId) openThread(ui.currentThreadId);
    } else {
      await subscribe();
      if (ui.currentThreadId) loadRequests(model.detail(ui.currentThreadId));
    }
    app.connected = true;
  } catch (error) {
    showError(error);
  }
}

/** The list pages: the newest threads come at once, older ones as the list is scrolled to its end. */
const FIRST_PAGE = 200;
const PAGE = 1000;
let olderThreads = null; // the `before` of the next page, null when all are here
let loadingOlder = false;
let listing = 0; // bumped when the list is read again from its start: a page of the last reading is stale
async function loadOlderThreads() {
  if (!olderThreads || loadingOlder) return;
  loadingOlder = true;
  const mine = listing;
  try {
    const page = await conn.call('thread.list', { limit: PAGE, before: olderThreads, includeArchived: archivedRead });
    model.setThreads(page.threads);
    if (mine === listing) olderThreads = page.next;
    scheduleRender();
  } catch (error) {
    showError(error);
  } finally {
    loadingOlder = false;
  }
}

// Archived threads (issue 27) are listed only with "Show archived" on; the
// first time it is, the list is read again from its start with them.
let showArchived = false;
let archivedRead = false;
async function setShowArchived(on) {
  showArchived = on;
  model.dirty.list = model.dirty.listOrder = true;
  scheduleRender();
  if (!on || archivedRead) return;
  const mine = ++listing;
  try {
    const first = await conn.call('thread.list', { limit: FIRST_PAGE, includeArchived: true });
    archivedRead = true;
    model.setThreads(first.threads);
    if (mine === listing) olderThreads = first.next;
    scheduleRender();
  } catch (error) {
    showError(error);
  }
}
$('show-archived').addEventListener('change', (e) => setShowArchived(e.target.checked));

/** A thread unarchived elsewhere that this page never read (it was archived when the list was): read it. */
function unarchived(ev) {
  if (ev.type !== 'thread.unarchived' || model.threads.has(ev.threadId)) return;
  conn.call('thread.get', { threadId: ev.threadId }).then((r) => { model.setThreads([r.thread]); scheduleRender(); }, () => {});
}

function notified(method, params) {
  if (method === 'event') {
    if (params.subscriptionId !== app.subscriptionId) return;
    const outcome = model.apply(params);
    if (outcome === 'gap') { subscribe().catch(showError); return; }
    if (outcome === 'applied') {
      childRequest(params);
      settleRun(params);
      if (params.type === 'thread.deleted') closeThread(params.threadId, list);
      unarchived(params);
      if (started) notifyOf(params);
    }
    scheduleRender();
  } else if (method === 'events.resync' && params.subscriptionId === app.subscriptionId) {
    subscribe().catch(showError);
  }
}

/**
 * When a run ends, read its graph once more: an end after a restart closes
 * attempts without an event of their own, and the view must show them as stored.
 */
function settleRun(ev) {
  const run = ev.payload?.run;
  if (!run || !TERMINAL.has(run.status) || !ev.type.startsWith('run.')) return;
  const d = model.details.get(ev.threadId);
  if (!d?.runDetails.has(run.id)) return;
  conn.call('run.get', { runId: run.id }).then((result) => { model.setRunGet(d.id, result); scheduleRender(); }, () => {});
}

/** A delegated child's approval or question is shown on its parent too. */
function childRequest(ev) {
  const request = ev.payload?.request;
  const current = ui.currentThreadId;
  if (!request || !current || ev.threadId === current) return;
  if (model.threads.get(ev.threadId)?.parentThreadId !== current) return;
  model.detail(current).requests.set(request.id, request);
  model.dirty.requests = true;
}

// --- rendering, once per frame ----------------------------------------------

let frame = 0;
function scheduleRender() {
  if (!frame) frame = requestAnimationFrame(render);
}
ui.scheduleRender = scheduleRender;

const list = new ThreadList($('thread-list'), $('thread-list-spacer'), { onOpen: (id) => openThread(id), onNearEnd: () => loadOlderThreads() });

function render() {
  frame = 0;
  const dirty = model.dirty;
  model.resetDirty();
  if (dirty.listOrder) {
    list.setRows(listOrder(model.threads, { archived: showArchived }));
    let shown = model.threads.size;
    if (!showArchived) for (const t of model.threads.values()) if (t.archivedAt) shown--;
    $('thread-count').textContent = `${shown.toLocaleString()}${olderThreads ? '+' : ''} thread${shown === 1 && !olderThreads ? '' : 's'}`;
  }
  if (dirty.list) list.render(dirty.listOrder ? null : dirty.threads);
  if (!perf.listPainting && started) { perf.listPainting = true; markPainted('agentd:list-ready'); }
  const d = ui.currentThreadId && model.details.get(ui.currentThreadId);
  if (d && d.thread && ui.view.root) renderThread(d, dirty);
}

async function openThread(id) {
  const opened = await showThread(id, list);
  if (!opened) return;
  perf.threadFetch = opened.fetched;
  markPainted('agentd:thread-ready', () => { perf.threadRender = performance.now() - opened.t0; });
}
ui.openThread = openThread;

// --- new thread, keyboard -----------------------------------------------------

$('new-thread').addEventListener('click', () => {
  $('new-thread-form').reset();
  fillProviders($('new-thread-form').elements.provider);
  $('new-thread-dialog').showModal();
});
$('new-thread-dialog').addEventListener('close', async () => {
  const dialog = $('new-thread-dialog');
  if (dialog.returnValue !== 'create') return;
  const f = $('new-thread-form').elements;
  const params = {};
  if (f.title.value.trim()) params.title = f.title.value.trim();
  if (f.workspace.value.trim()) params.workspace = f.workspace.value.trim();
  if (f.provider.value) params.provider = f.provider.value;
  const result = await ui.call('thread.create', params).catch(() => null);
  if (result) openThread(result.threadId);
});
$('shortcuts-open').addEventListener('click', () => $('shortcuts-dialog').showModal());
setUpSearch();

document.addEventListener('keydown', (e) => {
  const target = e.target;
  if (e.ctrlKey || e.metaKey || e.altKey || document.querySelector('dialog[open]')) return;
  if (target.closest?.('input, textarea, select, [contenteditable]')) return;
  const d = ui.currentThreadId && model.details.get(ui.currentThreadId);
  const firstApproval = d && [...d.requests.values()].find((r) => r.status === 'pending' && r.kind === 'approval');
  switch (e.key) {
    case 'n': $('new-thread').click(); break;
    case '/': $('composer-text')?.focus(); break;
    case 'j': list.move(1); break;
    case 'k': list.move(-1); break;
    case '?': $('shortcuts-dialog').showModal(); break;
    case 'a': if (firstApproval) respond(firstApproval, 'accept'); else return; break;
    case 'd': if (firstApproval) respond(firstApproval, 'decline'); else return; break;
    default: return;
  }
  e.preventDefault();
});

// --- start ------------------------------------------------------------------

async function start() {
  if (loginCode) {
    setConn('connecting', 'Logging in…');
    try {
      token = await redeem(loginCode);
      sessionStorage.setItem('agentd-token', token);
      conn.url = socketUrl(token);
    } catch (error) {
      if (!token) {
        setConn('closed', `Login failed: ${error.message}`);
        return;
      }
    }
  }
  if (!token) {
    setConn('closed', 'No token: run `agentd web`, or open the URL it prints');
  } else {
    setConn('connecting', 'Connecting…');
    conn.open();
  }
}

offerNotifications();
start();

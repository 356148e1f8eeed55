// The agentd web console: the protocol's reference client. It speaks only
// the documented JSON-RPC methods and events (protocol/README.md) over the
// daemon's WebSocket; model.js applies events, this module renders them
// (batched per animation frame) and turns clicks and keys into calls.

import { Connection } from './rpc.js';
import { Model, TERMINAL } from './model.js';
import { ThreadList, listOrder } from './list.js';
import { h, button, badge, ago } from './dom.js';

const $ = (id) => document.getElementById(id);
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
let currentThreadId = fragment.get('thread');
history.replaceState(null, '', currentThreadId ? `#thread=${currentThreadId}` : location.pathname);

const socketUrl = (t) => `ws://${location.host}/?token=${encodeURIComponent(t ?? '')}`;

/** Trade a one-time login code for the token (POST /login: once, within a minute). */
async function redeem(code) {
  const response = await fetch('/login', { method: 'POST', body: code, cache: 'no-store', credentials: 'omit' });
  if (!response.ok) throw new Error((await response.text()).trim() || `login failed (HTTP ${response.status})`);
  return (await response.json()).token;
}

const model = new Model();
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

async function call(method, params = {}) {
  try {
    return await conn.call(method, params);
  } catch (error) {
    showError(error);
    throw error;
  }
}

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
      app.providers = (await conn.call('providers.list')).providers;
      fillProviders();
      if (currentThreadId) openThread(currentThreadId);
    } else {
      await subscribe();
      if (currentThreadId) loadRequests(model.detail(currentThreadId));
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
async function loadOlderThreads() {
  if (!olderThreads || loadingOlder) return;
  loadingOlder = true;
  try {
    const page = await conn.call('thread.list', { limit: PAGE, before: olderThreads });
    model.setThreads(page.threads);
    olderThreads = page.next;
    scheduleRender();
  } catch (error) {
    showError(error);
  } finally {
    loadingOlder = false;
  }
}

function notified(method, params) {
  if (method === 'event') {
    if (params.subscriptionId !== app.subscriptionId) return;
    const outcome = model.apply(params);
    if (outcome === 'gap') { subscribe().catch(showError); return; }
    if (outcome === 'applied') { childRequest(params); settleRun(params); }
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
  if (!request || !currentThreadId || ev.threadId === currentThreadId) return;
  if (model.threads.get(ev.threadId)?.parentThreadId !== currentThreadId) return;
  model.detail(currentThreadId).requests.set(request.id, request);
  model.dirty.requests = true;
}

// --- rendering, once per frame ----------------------------------------------

let frame = 0;
function scheduleRender() {
  if (!frame) frame = requestAnimationFrame(render);
}

const list = new ThreadList($('thread-list'), $('thread-list-spacer'), { onOpen: (id) => openThread(id), onNearEnd: () => loadOlderThreads() });

function render() {
  frame = 0;
  const dirty = model.dirty;
  model.resetDirty();
  if (dirty.listOrder) {
    list.setRows(listOrder(model.threads));
    $('thread-count').textContent = `${model.threads.size.toLocaleString()}${olderThreads ? '+' : ''} threads`;
  }
  if (dirty.list) list.render(dirty.listOrder ? null : dirty.threads);
  if (!perf.listPainting && started) { perf.listPainting = true; markPainted('agentd:list-ready'); }
  const d = currentThreadId && model.details.get(currentThreadId);
  if (!d || !d.thread || !view.root) return;
  if (dirty.header || dirty.transfers) renderHeader(d);
  if (dirty.requests) renderRequests(d);
  if (dirty.artifacts || dirty.runs.size) renderArtifacts(d);
  if (dirty.messages.size) {
    // Read the scroll position before writing (one layout per frame, not one per message).
    const box = $('messages');
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    for (const id of dirty.messages) renderMessage(d, id);
    if (atBottom) box.scrollTop = box.scrollHeight;
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

// --- the thread view ----------------------------------------------------------

const view = { root: null };

async function openThread(id) {
  currentThreadId = id;
  history.replaceState(null, '', `#thread=${id}`);
  list.select(id);
  const d = model.detail(id);
  const t0 = performance.now();
  let get;
  try {
    [get] = await Promise.all([
      call('thread.get', { threadId: id }),
      loadRequests(d),
      call('checkpoint.list', { threadId: id }).then((r) => { for (const c of r.checkpoints) d.putCheckpoint(c); }),
      call('thread.transfers', { threadId: id }).then((r) => { for (const t of r.transfers) d.transfers.set(t.id, t); }),
    ]);
  } catch { return; }
  if (currentThreadId !== id) return;
  perf.threadFetch = performance.now() - t0;
  model.setThreadGet(get);
  buildThreadView(d);
  const runs = d.runsInOrder();
  const recent = new Set(runs.slice(-3).map((r) => r.id));
  if (d.thread.activeRunId) recent.add(d.thread.activeRunId);
  for (const runId of recent) expandRun(d, runId, { load: true, open: runId === runs.at(-1)?.id });
  markPainted('agentd:thread-ready', () => { perf.threadRender = performance.now() - t0; });
}

async function loadRequests(d) {
  const own = (await call('thread.requests', { threadId: d.id })).requests;
  const kids = [...model.threads.values()].filter((t) => t.parentThreadId === d.id && t.relationshipToParent !== 'fork' && t.relationshipToParent !== 'side_chat');
  const theirs = await Promise.all(kids.map((t) => call('thread.requests', { threadId: t.id }).then((r) => r.requests, () => [])));
  for (const r of [...own, ...theirs.flat()]) d.requests.set(r.id, r);
  model.dirty.requests = true;
  scheduleRender();
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
  const section = $('thread-view');
  section.replaceChildren(root);
  view.root = root;
  view.messages = new Map();
  view.runs = new Map();
  view.expanded = new Set();
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
  const box = $('messages');
  box.scrollTop = box.scrollHeight;
}

// A long thread draws its latest messages and runs; earlier ones come a page at a time.
const VIEW_PAGE = 100;

function showEarlierMessages(d) {
  const from = Math.max(0, view.firstMessage - VIEW_PAGE);
  const frag = document.createDocumentFragment();
  if (from > 0) frag.append(button(`Show ${Math.min(VIEW_PAGE, from)} earlier messages (${from} more)`, 'earlier-messages', (e) => { e.target.remove(); showEarlierMessages(d); }, { class: 'earlier' }));
  for (const m of view.messageList.slice(from, view.firstMessage)) frag.append(messageElement(d, m));
  view.firstMessage = from;
  view.hiddenMessages = new Set(view.messageList.slice(0, from).map((m) => m.id));
  $('messages').prepend(frag);
}

function showEarlierRuns(d) {
  const from = Math.max(0, view.firstRun - VIEW_PAGE);
  const frag = document.createDocumentFragment();
  if (from > 0) frag.append(h('li', {}, button(`Show ${Math.min(VIEW_PAGE, from)} earlier runs (${from} more)`, 'earlier-runs', (e) => { e.target.closest('li').remove(); showEarlierRuns(d); }, { class: 'earlier' })));
  for (const run of view.runList.slice(from, view.firstRun)) frag.append(runElement(d, run));
  view.firstRun = from;
  view.firstRunOrdinal = view.runList[from]?.ordinal ?? 0;
  $('runs').prepend(frag);
}

function threadLink(id, label) {
  const t = model.threads.get(id);
  return h('a', { href: `#thread=${id}`, dataset: { threadId: id }, onclick: (e) => { e.preventDefault(); openThread(id); } }, label ?? t?.title ?? id);
}

function renderHeader(d) {
  const t = d.thread;
  const head = $('thread-head');
  if (!head) return;
  const active = t.activeRunId;
  const forks = [...model.threads.values()].filter((c) => c.parentThreadId === t.id);
  const parent = t.parentThreadId;
  head.replaceChildren(
    h('div', { class: 'title-row' },
      h('h2', {}, t.title || t.id),
      badge(t.status),
      t.queueHeld ? h('span', { class: 'badge status-held', dataset: { queueHeld: 'true' } }, `queue held (${(t.heldRunIds ?? []).length})`) : null,
      h('span', { class: 'muted' }, `${t.provider} · ${t.id}`)),
    h('div', { class: 'actions' },
      button('Stop', 'stop', () => call('thread.stop', { threadId: t.id }).catch(() => {}), { disabled: !active && !hasQueued(d), title: 'Interrupt the active run and hold the queue' }),
      t.queueHeld ? button('Release queue', 'release-queue', () => call('thread.queue.release', { threadId: t.id }).catch(() => {})) : null,
      button('Fork', 'fork', () => fork(d, null), { title: 'A new thread from the latest stable point' }),
      button('Roll back to start', 'rollback-start', () => rollback(d, 0), { disabled: !d.runs.size })),
    h('div', { class: 'lineage' },
      parent ? h('span', {}, `${(t.relationshipToParent ?? 'child').replaceAll('_', ' ')} of `, threadLink(parent)) : null,
      forks.length ? h('span', {}, ' Children: ', forks.map((c, i) => [i ? ', ' : '', threadLink(c.id, `${c.title || c.id} (${(c.relationshipToParent ?? '').replaceAll('_', ' ')}${c.sideChat ? ', side chat' : ''})`)])) : null,
      transfersList(d)));
}

function transfersList(d) {
  if (!d.transfers.size) return null;
  return h('details', { class: 'transfers' }, h('summary', {}, `Transfers (${d.transfers.size})`),
    h('ul', {}, [...d.transfers.values()].map((tr) => h('li', { dataset: { transferId: tr.id } },
      `${tr.type.replaceAll('_', ' ')} ${tr.sourceThreadId === d.id ? '→' : '←'} `,
      threadLink(tr.sourceThreadId === d.id ? tr.targetThreadId : tr.sourceThreadId), ` ${tr.status}`,
      tr.resolution ? ` (${tr.resolution}${tr.lowerFidelity ? ', lower fidelity' : ''})` : '',
      tr.handoffId ? [' ', handoffButton(d, tr.handoffId)] : null,
      tr.error ? h('span', { class: 'reason' }, ` ${tr.error}`) : null))));
}

function hasQueued(d) {
  for (const r of d.runs.values()) if (r.status === 'queued') return true;
  return false;
}

// messages

function messageElement(d, m) {
  const text = document.createTextNode(m.text);
  const el = h('li', { class: `msg role-${m.role}`, dataset: { messageId: m.id, runId: m.runId, status: m.status, role: m.role } },
    h('div', { class: 'meta' }, m.role, ' ', h('span', { class: 'mstatus' }, m.status === 'complete' ? '' : m.status.replaceAll('_', ' '))),
    h('div', { class: 'text' }, text),
    m.status === 'not_sent' || m.status === 'cancelled' ? button('Send again', 'resend', () => send(d, m.text)) : null);
  el._body = el.querySelector('.text');
  el._shown = m.text.length;
  view.messages.set(m.id, el);
  return el;
}

function renderMessage(d, id) {
  const m = d.messages.get(id);
  if (!m) return;
  const el = view.messages.get(id);
  if (!el && view.hiddenMessages.has(id)) return; // on an earlier page, drawn when that is shown
  if (!el) $('messages').append(messageElement(d, m));
  else {
    if (m.text.length > el._shown) {
      appendStreaming(el, m.text.slice(el._shown));
      el._shown = m.text.length;
    }
    if (el.dataset.status !== m.status) el.replaceWith(messageElement(d, m));
  }
}

/**
 * Add streamed text to a message without laying out what is already shown:
 * the text goes into blocks of a paragraph each (or about 2,000 characters of
 * one long paragraph, cut before a space), so a frame lays out only the last
 * block. When the message ends it is drawn again as one text.
 */
const BLOCK = 2000;
function appendStreaming(el, piece) {
  for (const part of piece.split(/(?<=\n)/)) {
    if (!el._block || el._blockEnded || (el._blockLength > BLOCK && /^\s/.test(part))) {
      el._block = h('span', { class: 'block' });
      el._body.append(el._block);
      el._blockLength = 0;
    }
    el._block.append(document.createTextNode(part));
    el._blockLength += part.length;
    el._blockEnded = part.endsWith('\n');
  }
}

// requests: approvals and questions

function renderRequests(d) {
  const box = $('requests');
  if (!box) return;
  const pending = [...d.requests.values()].filter((r) => r.status === 'pending');
  box.replaceChildren(...pending.map((r) => requestCard(d, r)));
}

function requestCard(d, r) {
  const elsewhere = r.threadId !== d.id ? h('p', { class: 'muted' }, 'from ', threadLink(r.threadId)) : null;
  if (r.kind === 'approval') {
    const what = r.detail?.command ?? r.detail?.title ?? JSON.stringify(r.detail);
    return h('div', { class: 'request approval', role: 'group', 'aria-label': 'Approval', dataset: { requestId: r.id, runId: r.runId, nodeId: r.nodeId, kind: 'approval' } },
      h('strong', {}, `Approval${r.detail?.kind ? ` (${r.detail.kind})` : ''}: `), h('code', {}, what), elsewhere,
      h('div', { class: 'actions' },
        button('Approve', 'approve', () => respond(r, 'accept'), { 'aria-keyshortcuts': 'a', title: 'Approve (a)' }),
        button('Deny', 'deny', () => respond(r, 'decline'), { 'aria-keyshortcuts': 'd', title: 'Deny (d)' })));
  }
  const questions = r.detail?.questions ?? [];
  const form = h('form', { class: 'request questions', dataset: { requestId: r.id, runId: r.runId, nodeId: r.nodeId, kind: 'user_input' } },
    h('strong', {}, 'Questions'), elsewhere,
    questions.map((q) => h('label', {}, q.question,
      q.options?.length
        ? h('select', { name: q.id, dataset: { questionId: q.id } }, q.options.map((o) => h('option', { value: String(o) }, String(o))))
        : h('input', { name: q.id, required: true, autocomplete: 'off', dataset: { questionId: q.id } }))),
    h('div', { class: 'actions' }, h('button', { type: 'submit', dataset: { action: 'answer' } }, 'Answer')));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const answers = Object.fromEntries(questions.map((q) => [q.id, form.elements[q.id].value]));
    call('user-input.respond', { requestId: r.id, answers }).then(() => markAnswered(r)).catch(() => {});
  });
  return form;
}

function respond(r, decision) {
  call('approval.respond', { requestId: r.id, decision }).then(() => markAnswered(r)).catch(() => {});
}

function markAnswered(r) {
  r.status = 'resolved'; // the approval.resolved event says so too; the card goes at once
  model.dirty.requests = true;
  scheduleRender();
}

// todo lists and proposed plans

function renderArtifacts(d) {
  const box = $('artifacts');
  if (!box) return;
  const all = [...d.artifacts.values()];
  // root todo lists are the progress view; a child's stay under its node
  const rootOf = (a) => !a.nodeId || a.nodeId === d.runs.get(a.runId)?.rootNodeId;
  const todos = all.filter((a) => a.kind === 'todo_list' && rootOf(a));
  const latestTodo = todos.sort((a, b) => a.updatedAt - b.updatedAt).at(-1);
  // plans still to decide on, and the latest one whatever became of it
  const proposed = all.filter((a) => a.kind === 'proposed_plan').sort((a, b) => a.createdAt - b.createdAt);
  const plans = proposed.filter((a, i) => a.status === 'proposed' || i === proposed.length - 1);
  box.replaceChildren(...[
    latestTodo ? h('div', { class: 'todo', dataset: { artifactId: latestTodo.id, runId: latestTodo.runId } },
      h('strong', {}, `Todo (${latestTodo.status})`),
      h('ul', {}, (latestTodo.steps ?? []).map((s) => h('li', { dataset: { status: s.status } }, `${s.status === 'completed' ? '☑' : s.status === 'in_progress' ? '▶' : '☐'} ${s.step}`)))) : null,
    ...plans.map((p) => h('div', { class: 'plan', dataset: { artifactId: p.id, runId: p.runId, status: p.status } },
      h('strong', {}, `Proposed plan (${p.status})`), h('pre', {}, p.text ?? ''),
      p.status === 'proposed' ? h('div', { class: 'actions' },
        button('Implement', 'implement', () => call('plan.implement', { planId: p.id, mode: 'new_run' }).catch(() => {})),
        button('Implement in a new thread', 'implement-thread', () => call('plan.implement', { planId: p.id, mode: 'new_thread' }).then((r) => openThread(r.threadId)).catch(() => {}))) : null)),
  ].filter(Boolean));
}

// runs → attempts → nodes

function runElement(d, run) {
  const cp = d.checkpointOf(run.id);
  const open = view.expanded.has(run.id);
  const active = run.status === 'running' || run.status === 'waiting';
  const stable = run.status === 'completed' || ((run.status === 'failed' || run.status === 'interrupted') && run.startedAt);
  const user = d.messages.get(run.userMessageId);
  const el = h('li', { class: 'run', dataset: { runId: run.id, status: run.status, ordinal: run.ordinal } },
    h('div', { class: 'run-row' },
      h('button', { type: 'button', class: 'toggle', 'aria-expanded': String(open), dataset: { action: 'toggle-run' }, 'aria-label': `Run ${run.ordinal} details`, onclick: () => expandRun(d, run.id, { load: true, open: !view.expanded.has(run.id) }) }, open ? '▾' : '▸'),
      h('span', { class: 'ordinal' }, `#${run.ordinal}`), badge(run.status),
      h('span', { class: 'muted' }, run.provider ?? ''),
      run.reason ? h('span', { class: 'reason' }, run.reason) : null,
      run.supersedesRunId ? h('span', { class: 'reason' }, `supersedes ${runLabel(d, run.supersedesRunId)}`) : null,
      user ? h('span', { class: 'snippet' }, user.text.slice(0, 80)) : null,
      cp ? checkpointBadge(cp) : null,
      h('span', { class: 'actions' },
        active ? button('Interrupt', 'interrupt', () => call('run.interrupt', { runId: run.id }).catch(() => {})) : null,
        run.status === 'queued' ? button('Cancel', 'cancel', () => call('queued-run.cancel', { runId: run.id }).catch(() => {})) : null,
        stable ? button('Fork', 'fork-run', () => fork(d, run)) : null,
        TERMINAL.has(run.status) && run.status !== 'rolled_back' && run.startedAt ? button('Roll back', 'rollback', () => rollback(d, run.ordinal)) : null)),
    open ? runDetail(d, run) : null);
  view.runs.set(run.id, el);
  return el;
}

function runLabel(d, runId) {
  const r = d.runs.get(runId);
  return r ? `#${r.ordinal}` : runId;
}

function checkpointBadge(cp) {
  const s = cp.summary ?? {};
  const text = cp.status === 'captured' ? `${s.filesChanged ?? 0} files +${s.insertions ?? 0} −${s.deletions ?? 0}` : `checkpoint ${cp.status}${cp.reason ? `: ${cp.reason}` : ''}`;
  return h('span', { class: 'checkpoint', dataset: { checkpointId: cp.id, status: cp.status } }, text,
    cp.status === 'captured' ? [' ', button('View diff', 'diff', () => showDiff(cp))] : null);
}

function runDetail(d, run) {
  const rd = d.runDetails.get(run.id);
  if (!rd) return h('div', { class: 'run-detail muted' }, 'Loading…');
  const nodes = [...rd.nodes.values()];
  const children = new Map();
  for (const n of nodes) {
    const key = n.parentNodeId ?? '';
    if (!children.has(key)) children.set(key, []);
    children.get(key).push(n);
  }
  const nodeTree = (n) => h('li', { class: 'node', dataset: { nodeId: n.id, kind: n.kind, status: n.status } },
    h('span', { class: 'kind' }, n.kind.replaceAll('_', ' ')), ' ', n.title ? h('span', {}, n.title) : null, ' ', badge(n.status),
    n.summary ? h('div', { class: 'summary' }, n.summary) : null,
    children.has(n.id) ? h('ul', {}, children.get(n.id).map(nodeTree)) : null);
  const attempts = [...rd.attempts.values()].sort((a, b) => a.number - b.number);
  return h('div', { class: 'run-detail' },
    h('ol', { class: 'attempts' }, attempts.map((a) => {
      const root = rd.nodes.get(a.rootNodeId);
      return h('li', { class: 'attempt', dataset: { attemptId: a.id, status: a.status, selected: a.id === run.selectedAttemptId ? 'true' : null } },
        h('span', {}, `attempt ${a.number} `), h('span', { class: 'muted' }, a.reason.replaceAll('_', ' ')), ' ', badge(a.status),
        a.error ? h('span', { class: 'reason' }, ` ${a.error}`) : null,
        a.handoffId ? [' ', handoffButton(d, a.handoffId)] : null,
        root ? h('ul', { class: 'nodes' }, nodeTree(root)) : null);
    })));
}

function handoffButton(d, handoffId) {
  const known = d.handoffs.get(handoffId);
  const label = known ? `Handoff: ${known.strategy.replaceAll('_', ' ')}, ${known.size?.toLocaleString() ?? '?'} chars` : 'Handoff';
  return button(label, 'handoff', () => showHandoff(d, handoffId), { dataset: { handoffId } });
}

async function expandRun(d, runId, { load, open }) {
  if (open) view.expanded.add(runId); else view.expanded.delete(runId);
  if (load && open && !d.runDetails.get(runId)?.loaded) {
    const result = await call('run.get', { runId }).catch(() => null);
    if (result) model.setRunGet(d.id, result);
  }
  model.dirty.runs.add(runId);
  scheduleRender();
}

/** Re-render one run; true if it is new (the list needs placing). */
function renderRun(d, runId) {
  const run = d.runs.get(runId);
  if (!run) return false;
  const old = view.runs.get(runId);
  if (!old) return run.ordinal >= (view.firstRunOrdinal ?? 0);
  old.replaceWith(runElement(d, run));
  return false;
}

function placeRuns(d) {
  const box = $('runs');
  for (const run of d.runsInOrder()) {
    if (run.ordinal >= view.firstRunOrdinal || !view.firstRunOrdinal) box.append(view.runs.get(run.id) ?? runElement(d, run));
  }
}

// dialogs

function confirmDialog(title, body, okLabel, action) {
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

function textDialog(title, ...body) {
  $('text-title').textContent = title;
  $('text-body').replaceChildren(...body);
  $('text-dialog').showModal();
}

async function showDiff(cp) {
  const diff = await call('checkpoint.diff', { checkpointId: cp.id }).catch(() => null);
  if (!diff) return;
  textDialog(`Checkpoint ${cp.id} (after run ${cp.ordinal})`,
    h('table', { class: 'files', dataset: { checkpointId: cp.id } },
      h('thead', {}, h('tr', {}, h('th', {}, 'file'), h('th', {}, 'change'), h('th', {}, '+'), h('th', {}, '−'))),
      h('tbody', {}, diff.files.map((f) => h('tr', {}, h('td', {}, f.oldPath ? `${f.oldPath} → ${f.path}` : f.path), h('td', {}, f.change), h('td', {}, f.binary ? 'bin' : f.insertions), h('td', {}, f.binary ? '' : f.deletions))))),
    h('pre', { class: 'patch' }, diff.patch + (diff.truncated ? '\n… (cut)' : '')));
}

async function showHandoff(d, handoffId) {
  const { handoff } = await call('handoff.get', { handoffId }).catch(() => ({}));
  if (!handoff) return;
  d.handoffs.set(handoff.id, handoff);
  textDialog(`Handoff ${handoff.id}`,
    h('p', {}, `${handoff.strategy.replaceAll('_', ' ')} · ${handoff.size?.toLocaleString()} of ${handoff.cap?.toLocaleString()} chars`,
      handoff.reason ? ` · ${handoff.reason}` : '', handoff.droppedRunIds?.length ? ` · ${handoff.droppedRunIds.length} runs left out` : ''),
    h('pre', { class: 'handoff-text' }, handoff.text));
}

async function fork(d, run) {
  const params = { threadId: d.id };
  if (run) params.sourcePoint = { type: 'run', runId: run.id };
  const result = await call('thread.fork', params).catch(() => null);
  if (result) openThread(result.threadId);
}

async function rollback(d, ordinal) {
  const undone = d.runsInOrder().filter((r) => r.ordinal > ordinal && r.status !== 'rolled_back');
  const target = d.runsInOrder().find((r) => r.ordinal === ordinal);
  const cp = target ? d.checkpointOf(target.id) : null;
  const body = [
    h('p', {}, ordinal === 0 ? 'Go back to before the first run.' : `Go back to the state after run #${ordinal}.`),
    undone.length
      ? [h('p', {}, `This undoes ${undone.length} run${undone.length > 1 ? 's' : ''} (kept in the graph, marked rolled back):`),
        h('ul', { class: 'undone' }, undone.map((r) => h('li', { dataset: { runId: r.id } }, `#${r.ordinal} ${r.status}: ${d.messages.get(r.userMessageId)?.text.slice(0, 80) ?? ''}`)))]
      : h('p', {}, 'No later run to undo.'),
    h('p', {}, `Files go back to ${cp ? `checkpoint ${cp.id}` : 'that run\'s checkpoint'}, and the agent forgets the later runs. The workspace as it is now is saved first as a safety checkpoint.`),
  ];
  if (!await confirmDialog(`Roll back to ${ordinal === 0 ? 'the start' : `run #${ordinal}`}?`, body, 'Roll back', 'confirm-rollback')) return;
  await call('rollback.toRun', { threadId: d.id, targetOrdinal: ordinal }).catch(() => {});
}

// the composer

function composer(d) {
  const form = h('form', { id: 'composer', class: 'composer', 'aria-label': 'Send a message' },
    h('label', { class: 'sr-only', for: 'composer-text' }, 'Message'),
    h('textarea', { id: 'composer-text', name: 'text', rows: '3', placeholder: 'Message (Ctrl+Enter sends)', required: true }),
    h('div', { class: 'composer-options' },
      h('label', {}, 'How ', h('select', { name: 'mode', id: 'composer-mode' },
        h('option', { value: 'auto' }, 'start or queue'),
        h('option', { value: 'queue_after_active' }, 'queue'),
        h('option', { value: 'steer_active' }, 'steer the active run'),
        h('option', { value: 'restart_active' }, 'restart the active run'))),
      h('label', {}, 'Provider ', h('select', { name: 'provider', class: 'provider-select', id: 'composer-provider' })),
      h('label', {}, h('input', { type: 'checkbox', name: 'cleanContext' }), ' clean context'),
      h('label', {}, 'Merge back ', h('select', { name: 'mergeBack', id: 'composer-merge' }, h('option', { value: '' }, 'nothing'))),
      h('button', { type: 'submit', dataset: { action: 'send' } }, 'Send')));
  form.addEventListener('submit', (e) => { e.preventDefault(); send(d); });
  form.elements.text.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send(d); } });
  fillProviders(form.elements.provider, d.thread?.provider);
  return form;
}

function renderComposerState(d) {
  const merge = $('composer-merge');
  if (!merge) return;
  const forks = [...model.threads.values()].filter((t) => t.parentThreadId === d.id && t.relationshipToParent === 'fork');
  if (merge.options.length !== forks.length + 1) {
    merge.replaceChildren(h('option', { value: '' }, 'nothing'), ...forks.map((t) => h('option', { value: t.id }, t.title || t.id)));
  }
}

async function send(d, again = null) {
  const form = $('composer');
  const text = again ?? form.elements.text.value;
  if (!text.trim()) { form.elements.text.focus(); return; }
  const params = { threadId: d.id, text };
  const mode = form.elements.mode.value;
  const active = d.thread.activeRunId;
  if (mode === 'steer_active' || mode === 'restart_active') params.dispatchMode = { type: mode, targetRunId: active };
  else if (mode === 'queue_after_active') params.dispatchMode = { type: mode };
  const provider = form.elements.provider.value;
  if (provider && provider !== d.thread.provider) params.provider = provider;
  if (form.elements.cleanContext.checked) params.cleanContext = true;
  if (form.elements.mergeBack.value) params.mergeBack = { forkThreadId: form.elements.mergeBack.value };
  try {
    await call('thread.message.send', params);
  } catch { return; }
  if (!again) form.elements.text.value = '';
  form.elements.mode.value = 'auto';
  form.elements.cleanContext.checked = false;
  form.elements.mergeBack.value = '';
}

function fillProviders(select = null, current = null) {
  const selects = select ? [select] : document.querySelectorAll('.provider-select');
  for (const s of selects) {
    const keep = s.value || current || model.details.get(currentThreadId)?.thread?.provider;
    s.replaceChildren(...app.providers.map((p) => h('option', { value: p.name, disabled: !p.usable }, `${p.name} (${p.kind})${p.usable ? '' : ' — unusable'}`)));
    if (keep) s.value = keep;
  }
}

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
  const result = await call('thread.create', params).catch(() => null);
  if (result) openThread(result.threadId);
});
$('shortcuts-open').addEventListener('click', () => $('shortcuts-dialog').showModal());

document.addEventListener('keydown', (e) => {
  const target = e.target;
  if (e.ctrlKey || e.metaKey || e.altKey || document.querySelector('dialog[open]')) return;
  if (target.closest?.('input, textarea, select, [contenteditable]')) return;
  const d = currentThreadId && model.details.get(currentThreadId);
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

start();

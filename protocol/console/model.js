// The console's state and the one place events change it. No DOM here:
// app.js renders what `dirty` names, once per animation frame.
//
// Two rules make the page exact after any reconnect:
//  * stored events are applied in `seq` order, each once: one at or below
//    `lastSeq` is a duplicate and is dropped; one past `lastSeq + 1` is a gap
//    (the subscription is global, so seqs are consecutive) and the caller
//    resubscribes from `lastSeq`;
//  * assistant text is placed by `offset` (Unicode code points): a piece
//    already held is ignored, a piece past the end waits for the text before
//    it, so live deltas, durable appends and snapshots can overlap freely.

export const TERMINAL = new Set(['completed', 'failed', 'interrupted', 'cancelled', 'rolled_back']);

/** The number of code points in `s`. */
export function codePoints(s) {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0xd800 || c > 0xdbff || i + 1 === s.length) n++;
    else { n++; i++; }
  }
  return n;
}

/** `s` without its first `skip` code points. */
export function dropCodePoints(s, skip) {
  let i = 0;
  while (skip > 0 && i < s.length) {
    const c = s.charCodeAt(i);
    i += c >= 0xd800 && c <= 0xdbff && i + 1 < s.length ? 2 : 1;
    skip--;
  }
  return s.slice(i);
}

/**
 * Place `text` at code point `offset` of `msg` ({text, length, waiting}).
 * Returns whether the message's text grew.
 */
export function placeText(msg, offset, text) {
  const n = codePoints(text);
  if (offset + n <= msg.length) return false; // already held
  if (offset > msg.length) { // a gap: wait for what comes before it
    (msg.waiting ??= new Map()).set(offset, text);
    return false;
  }
  msg.text += dropCodePoints(text, msg.length - offset);
  msg.length = offset + n;
  if (msg.waiting?.size) {
    for (const [at, piece] of [...msg.waiting].sort((a, b) => a[0] - b[0])) {
      if (at > msg.length) break;
      msg.waiting.delete(at);
      placeText(msg, at, piece);
    }
  }
  return true;
}

function newMessage(record) {
  const msg = { ...record, text: '', length: 0 };
  placeText(msg, 0, record.text ?? '');
  return msg;
}

/** A thread opened in the page: what thread.get and the other reads returned, kept current by events. */
export class ThreadDetail {
  constructor(id) {
    this.id = id;
    this.thread = null;
    this.runs = new Map();        // runId -> Run
    this.messages = new Map();    // messageId -> message (text placed by offset)
    this.runDetails = new Map();  // runId -> {attempts: Map, nodes: Map} once run.get was read
    this.requests = new Map();    // requestId -> RuntimeRequest
    this.artifacts = new Map();   // artifactId -> PlanArtifact
    this.checkpoints = new Map(); // checkpointId -> Checkpoint
    this.runCheckpoints = new Map(); // runId -> its run checkpoint
    this.transfers = new Map();   // transferId -> ContextTransfer
    this.handoffs = new Map();    // handoffId -> ContextHandoff
  }

  runsInOrder() {
    return [...this.runs.values()].sort((a, b) => a.ordinal - b.ordinal);
  }

  /** Record a checkpoint; a run's own (kind run) is also indexed by its run. */
  putCheckpoint(c) {
    this.checkpoints.set(c.id, c);
    if (c.runId && c.kind === 'run') this.runCheckpoints.set(c.runId, c);
  }

  checkpointOf(runId) {
    return this.runCheckpoints.get(runId) ?? null;
  }
}

export class Model {
  constructor() {
    this.lastSeq = 0;
    this.threads = new Map(); // threadId -> AppThread (+ lastActivity)
    this.details = new Map(); // threadId -> ThreadDetail, for threads opened in the page
    this.resetDirty();
  }

  resetDirty() {
    this.dirty = { list: false, listOrder: false, threads: new Set(), runs: new Set(), messages: new Set(), requests: false, artifacts: false, checkpoints: false, transfers: false, header: false };
  }

  // --- snapshots (answers of reads) ------------------------------------

  setThreads(threads) {
    // A thread whose stored record cannot be decoded comes as {id, corrupt, reason}: shown, not guessed at.
    for (const t of threads) this._putThread(t.corrupt ? { id: t.id, title: `unreadable record: ${t.reason}`, status: 'corrupt', provider: '—', corrupt: true, updatedAt: 0 } : t);
    this.dirty.list = this.dirty.listOrder = true;
  }

  /** Threads are updated in place: the list's rows hold these objects. */
  _putThread(record, at = null) {
    const have = this.threads.get(record.id);
    if (have) Object.assign(have, record);
    else this.threads.set(record.id, { ...record, lastActivity: at ?? record.updatedAt });
    this.dirty.threads.add(record.id);
    return this.threads.get(record.id);
  }

  detail(threadId) {
    let d = this.details.get(threadId);
    if (!d) this.details.set(threadId, d = new ThreadDetail(threadId));
    return d;
  }

  /** The answer of thread.get. */
  setThreadGet(result) {
    const d = this.detail(result.thread.id);
    d.thread = result.thread;
    this._putThread(result.thread);
    for (const run of result.runs) this._putRun(d, run);
    for (const m of result.messages) this._putMessage(d, m);
    this.dirty.header = this.dirty.list = true;
    return d;
  }

  /** The answer of run.get. */
  setRunGet(threadId, result) {
    const d = this.detail(threadId);
    this._putRun(d, result.run);
    const rd = d.runDetails.get(result.run.id) ?? { attempts: new Map(), nodes: new Map() };
    for (const a of result.attempts) rd.attempts.set(a.id, a);
    for (const n of result.nodes) rd.nodes.set(n.id, n);
    rd.loaded = true;
    d.runDetails.set(result.run.id, rd);
    for (const a of result.artifacts) d.artifacts.set(a.id, a);
    this.dirty.runs.add(result.run.id);
    this.dirty.artifacts = true;
  }

  _putRun(d, run) {
    d.runs.set(run.id, run);
    this.dirty.runs.add(run.id);
  }

  _putMessage(d, record) {
    const have = d.messages.get(record.id);
    if (!have) {
      d.messages.set(record.id, newMessage(record));
    } else {
      const { text, ...rest } = record;
      Object.assign(have, rest, { text: have.text, length: have.length });
      placeText(have, 0, text ?? '');
    }
    this.dirty.messages.add(record.id);
  }

  // --- events ------------------------------------------------------------

  /**
   * Apply one event notification's params.
   * @returns {'applied'|'duplicate'|'gap'|'ephemeral'}
   */
  apply(ev) {
    if (ev.ephemeral) {
      if (ev.type === 'message.delta') this._text(ev);
      return 'ephemeral';
    }
    if (ev.seq <= this.lastSeq) return 'duplicate';
    if (this.lastSeq > 0 && ev.seq !== this.lastSeq + 1) return 'gap';
    this.lastSeq = ev.seq;
    this._applyToList(ev);
    if (this.details.has(ev.threadId)) this._applyToDetail(this.details.get(ev.threadId), ev);
    return 'applied';
  }

  _applyToList(ev) {
    const p = ev.payload ?? {};
    if (ev.type === 'thread.created' && p.thread) {
      this._putThread(p.thread, ev.at);
      this.dirty.list = this.dirty.listOrder = true;
      return;
    }
    const t = this.threads.get(ev.threadId);
    if (!t) return;
    if (ev.type === 'thread.deleted') { // thread.delete: it leaves the list (its forks stay, as roots)
      this.threads.delete(t.id);
      this.dirty.list = this.dirty.listOrder = true;
      return;
    }
    t.lastActivity = ev.at;
    // Text and graph events change nothing the list shows but the time, which
    // the row picks up when it is next drawn: a streaming answer redraws no row.
    if (!ev.type.startsWith('run.') && !ev.type.startsWith('thread.') && !(p.thread && p.thread.id === t.id)) return;
    const run = p.run;
    if (run && ev.type.startsWith('run.')) {
      if (ev.type === 'run.started' || ev.type === 'run.running' || ev.type === 'run.retrying') { t.status = 'running'; t.activeRunId = run.id; }
      if (ev.type === 'run.queued' && run.provider) t.provider = run.provider; // a switch moves the thread from this run on
      else if (ev.type === 'run.waiting') { t.status = 'waiting'; t.activeRunId = run.id; }
      else if (TERMINAL.has(run.status) && t.activeRunId === run.id) { t.status = 'idle'; t.activeRunId = null; }
    }
    // Usage and stalls (issue 28): the thread's sum, and which of its runs has gone quiet.
    if (ev.type === 'run.usage') { t.usage = p.threadUsage; t.cost = p.threadCost; }
    if (ev.type === 'run.stalled') t.stalledRunId = ev.runId;
    if (ev.type === 'run.unstalled' || (run && TERMINAL.has(run.status) && t.stalledRunId === run.id)) t.stalledRunId = null;
    // Archiving (issue 27) moves the thread out of the list or back: its order, not only its row.
    if (ev.type === 'thread.archived') { t.archivedAt = ev.at; this.dirty.listOrder = true; }
    if (ev.type === 'thread.unarchived') { t.archivedAt = null; this.dirty.listOrder = true; }
    if (ev.type === 'thread.queue_held') t.queueHeld = true;
    if (ev.type === 'thread.queue_released') { t.queueHeld = false; t.heldRunIds = []; }
    if (p.thread && p.thread.id === t.id) Object.assign(t, p.thread);
    this.dirty.list = true;
    this.dirty.threads.add(t.id);
  }

  _text(ev) {
    const d = this.details.get(ev.threadId);
    const msg = d?.messages.get(ev.payload.messageId);
    if (msg && placeText(msg, ev.payload.offset, ev.payload.text)) this.dirty.messages.add(msg.id);
  }

  _applyToDetail(d, ev) {
    const p = ev.payload ?? {};
    const type = ev.type;
    if (d.thread && (type.startsWith('run.') || type.startsWith('thread.'))) {
      Object.assign(d.thread, this.threads.get(d.id));
      this.dirty.header = true;
    }
    if (type === 'message.created') this._putMessage(d, p.message);
    else if (type === 'message.appended') this._text(ev);
    else if (type === 'message.completed' || type === 'message.not_sent') {
      const msg = d.messages.get(p.messageId);
      if (msg) { msg.status = p.status ?? 'not_sent'; this.dirty.messages.add(msg.id); }
    }
    if (p.run) this._putRun(d, p.run);
    if (type === 'run.started' && p.run?.userMessageId) {
      // the turn took the user's message: it was sent (no message event says so)
      const msg = d.messages.get(p.run.userMessageId);
      if (msg && msg.status === 'queued') { msg.status = 'complete'; this.dirty.messages.add(msg.id); }
    }
    if (type === 'run.queued' && p.run && !d.runDetails.has(p.run.id)) {
      // a run born while the thread is open: its graph is followed from its first event
      d.runDetails.set(p.run.id, { attempts: new Map(), nodes: new Map(), loaded: false, fresh: true });
    }
    if (p.runs) for (const run of p.runs) this._putRun(d, run);
    const known = ev.runId ? d.runs.get(ev.runId) : null;
    if (known && type === 'run.usage') this._putRun(d, { ...known, usage: p.usage, cost: p.cost });
    if (known && type === 'run.stalled') this._putRun(d, { ...known, stalledSince: ev.at - p.silentFor });
    if (known && type === 'run.unstalled') this._putRun(d, { ...known, stalledSince: null });
    const rd = ev.runId ? d.runDetails.get(ev.runId) : null;
    if (rd && (p.attempt || p.node)) { // text events leave the graph as it is
      if (p.attempt) rd.attempts.set(p.attempt.id, p.attempt);
      if (p.node) rd.nodes.set(p.node.id, p.node);
      this.dirty.runs.add(ev.runId);
    }
    if (p.request) { d.requests.set(p.request.id, p.request); this.dirty.requests = true; }
    if (p.artifact) { d.artifacts.set(p.artifact.id, p.artifact); this.dirty.artifacts = true; }
    if (p.checkpoint) { d.putCheckpoint(p.checkpoint); if (p.checkpoint.runId) this.dirty.runs.add(p.checkpoint.runId); }
    if (p.transfer) { d.transfers.set(p.transfer.id, p.transfer); this.dirty.transfers = true; }
    if (p.handoff) d.handoffs.set(p.handoff.id, p.handoff);
    if (type === 'thread.queue_held' || type === 'thread.queue_released' || type === 'thread.rolled_back') this.dirty.header = true;
  }
}

// The console's model under node, no browser (issue 22; SPEC F20: a client
// applies the event log by seq, each event once, and streamed text by
// code-point offset, so the page is exact after any reconnect).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Model, placeText, codePoints, dropCodePoints } from '../../../protocol/console/model.js';

const thread = { id: 'thr_1', title: 't', status: 'idle', provider: 'scripted', createdAt: 1, updatedAt: 1 };
const ev = (seq, type, payload, extra = {}) => ({ seq, type, threadId: 'thr_1', at: 100 + seq, payload, ...extra });

/** A model that has read thr_1 (as if opened) after event 10. */
function opened() {
  const model = new Model();
  model.lastSeq = 10;
  model.setThreads([thread]);
  model.setThreadGet({ thread: { ...thread }, runs: [], messages: [] });
  model.resetDirty();
  return model;
}

test('offsets count code points: an emoji is one, two UTF-16 units', () => {
  assert.equal(codePoints('a😀b'), 3);
  assert.equal(dropCodePoints('a😀b', 2), 'b');
  const m = { text: '', length: 0 };
  assert.equal(placeText(m, 0, 'a😀b'), true);
  assert.deepEqual([m.text, m.length], ['a😀b', 3]);
});

test('text already held is ignored, an overlap adds only what is new', () => {
  const m = { text: '', length: 0 };
  placeText(m, 0, 'a😀b');
  assert.equal(placeText(m, 0, 'a😀'), false);
  assert.equal(placeText(m, 2, 'bcd'), true);
  assert.deepEqual([m.text, m.length], ['a😀bcd', 5]);
});

test('a piece past the end waits for the text before it, then follows it', () => {
  const m = { text: 'a😀bcd', length: 5 };
  assert.equal(placeText(m, 8, 'h'), false);
  assert.equal(m.text, 'a😀bcd');
  placeText(m, 5, 'ef😀');
  assert.deepEqual([m.text, m.length], ['a😀bcdef😀h', 9]);
  assert.equal(m.waiting.size, 0);
});

test('events apply in seq order once: a duplicate is dropped, a gap is reported and not applied', () => {
  const model = new Model();
  model.lastSeq = 10;
  assert.equal(model.apply(ev(11, 'thread.created', { thread })), 'applied');
  assert.equal(model.apply(ev(11, 'thread.created', { thread })), 'duplicate');
  assert.equal(model.apply(ev(9, 'thread.created', { thread })), 'duplicate');
  assert.equal(model.apply(ev(13, 'run.started', { run: { id: 'run_1', status: 'running' } })), 'gap');
  assert.equal(model.lastSeq, 11, 'the caller resubscribes from the last seq applied');
  assert.equal(model.threads.get('thr_1').status, 'idle', 'what came after the gap changed nothing');
  assert.equal(model.apply(ev(12, 'run.started', { run: { id: 'run_1', status: 'running' } })), 'applied');
});

test('a first event is applied whatever its seq when nothing was applied yet', () => {
  const model = new Model();
  assert.equal(model.apply(ev(57, 'thread.created', { thread })), 'applied');
  assert.equal(model.lastSeq, 57);
});

test('live deltas, durable appends and an older snapshot make one text, never shortened', () => {
  const model = opened();
  model.apply(ev(11, 'message.created', { message: { id: 'msg_1', role: 'assistant', text: '', status: 'streaming' } }));
  assert.equal(model.apply({ ...ev(11, 'message.delta', { messageId: 'msg_1', offset: 0, text: 'Hel' }), ephemeral: true }), 'ephemeral');
  model.apply({ ...ev(11, 'message.delta', { messageId: 'msg_1', offset: 3, text: 'lo' }), ephemeral: true });
  model.apply(ev(12, 'message.appended', { messageId: 'msg_1', offset: 0, text: 'Hello' }));
  model.setThreadGet({ thread, runs: [], messages: [{ id: 'msg_1', role: 'assistant', text: 'Hel', status: 'streaming' }] });
  model.apply(ev(13, 'message.appended', { messageId: 'msg_1', offset: 5, text: ', world' }));
  const d = model.details.get('thr_1');
  assert.equal(d.messages.get('msg_1').text, 'Hello, world');
  assert.equal(model.lastSeq, 13, 'an ephemeral delta takes no seq');
  assert.ok(model.dirty.messages.has('msg_1'));
  model.apply(ev(14, 'message.completed', { messageId: 'msg_1', status: 'complete' }));
  assert.equal(d.messages.get('msg_1').status, 'complete');
});

test('a delta for a thread not opened in the page is ignored', () => {
  const model = new Model();
  model.setThreads([thread]);
  assert.equal(model.apply({ ...ev(1, 'message.delta', { messageId: 'msg_x', offset: 0, text: 'hi' }), ephemeral: true }), 'ephemeral');
  assert.equal(model.details.size, 0);
});

test('run events move the thread: running, waiting, idle once its active run ends (F2, F10, F12)', () => {
  const model = opened();
  const t = () => model.threads.get('thr_1');
  model.apply(ev(11, 'run.queued', { run: { id: 'run_1', status: 'queued', provider: 'other' } }, { runId: 'run_1' }));
  assert.equal(t().provider, 'other', 'a switch moves the thread from this run on');
  model.apply(ev(12, 'run.started', { run: { id: 'run_1', status: 'running' } }, { runId: 'run_1' }));
  assert.deepEqual([t().status, t().activeRunId], ['running', 'run_1']);
  model.apply(ev(13, 'run.waiting', { run: { id: 'run_1', status: 'waiting' } }, { runId: 'run_1' }));
  assert.equal(t().status, 'waiting');
  model.apply(ev(14, 'run.interrupted', { run: { id: 'run_1', status: 'interrupted', reason: 'daemon_restart' } }, { runId: 'run_1' }));
  assert.deepEqual([t().status, t().activeRunId], ['idle', null]);
  const d = model.details.get('thr_1');
  assert.equal(d.runs.get('run_1').reason, 'daemon_restart');
  assert.equal(d.thread.status, 'idle', 'the open thread follows its list record');
  assert.equal(t().lastActivity, 114);
});

test('a run started takes its queued user message: the message was sent', () => {
  const model = opened();
  model.apply(ev(11, 'message.created', { message: { id: 'msg_u', role: 'user', text: 'hi', status: 'queued' } }));
  model.apply(ev(12, 'run.queued', { run: { id: 'run_1', status: 'queued', userMessageId: 'msg_u' } }, { runId: 'run_1' }));
  model.apply(ev(13, 'run.started', { run: { id: 'run_1', status: 'running', userMessageId: 'msg_u' } }, { runId: 'run_1' }));
  assert.equal(model.details.get('thr_1').messages.get('msg_u').status, 'complete');
});

test('a run born while the thread is open has its graph followed from its first event', () => {
  const model = opened();
  model.apply(ev(11, 'run.queued', { run: { id: 'run_1', status: 'queued' } }, { runId: 'run_1' }));
  const rd = model.details.get('thr_1').runDetails.get('run_1');
  assert.equal(rd.fresh, true);
  model.apply(ev(12, 'run.started', { run: { id: 'run_1', status: 'running' }, attempt: { id: 'att_1', number: 1, status: 'running' } }, { runId: 'run_1' }));
  model.apply(ev(13, 'tool.started', { node: { id: 'nod_1', kind: 'tool', status: 'running' } }, { runId: 'run_1' }));
  assert.deepEqual([...rd.attempts.keys()], ['att_1']);
  assert.deepEqual([...rd.nodes.keys()], ['nod_1']);
  assert.ok(model.dirty.runs.has('run_1'));
});

test('a stop holds the queue and a release lets it go', () => {
  const model = opened();
  model.apply(ev(11, 'thread.queue_held', {}));
  assert.equal(model.threads.get('thr_1').queueHeld, true);
  assert.equal(model.dirty.header, true);
  model.apply(ev(12, 'thread.queue_released', {}));
  assert.deepEqual([model.threads.get('thr_1').queueHeld, model.threads.get('thr_1').heldRunIds], [false, []]);
});

test('requests, artifacts, checkpoints and transfers land on the open thread', () => {
  const model = opened();
  const d = model.details.get('thr_1');
  model.apply(ev(11, 'approval.requested', { request: { id: 'req_1', kind: 'approval', status: 'pending' } }, { runId: 'run_1' }));
  model.apply(ev(12, 'plan.updated', { artifact: { id: 'art_1', kind: 'todo_list' }, scope: 'root' }));
  model.apply(ev(13, 'checkpoint.captured', { checkpoint: { id: 'ckp_1', runId: 'run_1', kind: 'run', status: 'captured' } }));
  model.apply(ev(14, 'checkpoint.captured', { checkpoint: { id: 'ckp_0', runId: 'run_1', kind: 'baseline', status: 'captured' } }));
  model.apply(ev(15, 'context_transfer.created', { transfer: { id: 'ctx_1', type: 'fork' } }));
  assert.deepEqual([[...d.requests.keys()], [...d.artifacts.keys()], [...d.transfers.keys()]], [['req_1'], ['art_1'], ['ctx_1']]);
  assert.equal(d.checkpointOf('run_1').id, 'ckp_1', "a run's checkpoint is its own, not the baseline before it");
  assert.equal(d.checkpoints.size, 2);
  assert.ok(model.dirty.requests && model.dirty.artifacts && model.dirty.transfers && model.dirty.runs.has('run_1'));
});

test('an unreadable thread record is listed as such, not guessed at', () => {
  const model = new Model();
  model.setThreads([{ id: 'thr_bad', corrupt: true, reason: 'msgpack: truncated' }]);
  const t = model.threads.get('thr_bad');
  assert.deepEqual([t.status, t.corrupt, t.title], ['corrupt', true, 'unreadable record: msgpack: truncated']);
});

test('thread records are updated in place (the list rows hold these objects)', () => {
  const model = new Model();
  model.setThreads([thread]);
  const row = model.threads.get('thr_1');
  model.setThreads([{ ...thread, title: 'renamed' }]);
  assert.equal(model.threads.get('thr_1'), row);
  assert.equal(row.title, 'renamed');
});

test('run.get fills the run graph and its artifacts', () => {
  const model = opened();
  model.setRunGet('thr_1', {
    run: { id: 'run_1', ordinal: 1, status: 'completed' },
    attempts: [{ id: 'att_1', number: 1 }], nodes: [{ id: 'nod_1' }], artifacts: [{ id: 'art_1', kind: 'proposed_plan' }],
  });
  const d = model.details.get('thr_1');
  assert.equal(d.runDetails.get('run_1').loaded, true);
  assert.deepEqual(d.runsInOrder().map((r) => r.id), ['run_1']);
  assert.ok(d.artifacts.has('art_1'));
});

test('run.usage puts the run\'s usage on the run and the thread\'s sum on the thread (issue 28)', () => {
  const model = opened();
  model.apply(ev(11, 'run.started', { run: { id: 'run_1', status: 'running' } }, { runId: 'run_1' }));
  const usage = { inputTokens: 1000, cachedInputTokens: 400, outputTokens: 200, reasoningTokens: 0, models: ['m'] };
  const sum = { ...usage, inputTokens: 1500 };
  model.resetDirty();
  model.apply(ev(12, 'run.usage', { usage, cost: 0.0024, threadUsage: sum, threadCost: null }, { runId: 'run_1' }));
  const d = model.details.get('thr_1');
  assert.deepEqual([d.runs.get('run_1').usage, d.runs.get('run_1').cost], [usage, 0.0024]);
  assert.deepEqual([model.threads.get('thr_1').usage, model.threads.get('thr_1').cost], [sum, null]);
  assert.deepEqual(d.thread.usage, sum, 'the open thread\'s header follows');
  assert.ok(model.dirty.runs.has('run_1') && model.dirty.header && model.dirty.threads.has('thr_1'));
});

test('run.stalled marks the run and its thread until the agent speaks or the run ends (issue 28)', () => {
  const model = opened();
  const d = model.details.get('thr_1');
  model.apply(ev(11, 'run.started', { run: { id: 'run_1', status: 'running' } }, { runId: 'run_1' }));
  model.apply(ev(12, 'run.stalled', { runId: 'run_1', nodeId: 'nod_1', silentFor: 300 }, { runId: 'run_1' }));
  assert.equal(d.runs.get('run_1').stalledSince, 112 - 300);
  assert.equal(model.threads.get('thr_1').stalledRunId, 'run_1');
  model.apply(ev(13, 'run.unstalled', { runId: 'run_1', nodeId: 'nod_1', silentFor: 320 }, { runId: 'run_1' }));
  assert.equal(d.runs.get('run_1').stalledSince, null);
  assert.equal(model.threads.get('thr_1').stalledRunId, null);
  model.apply(ev(14, 'run.stalled', { runId: 'run_1', nodeId: 'nod_1', silentFor: 300 }, { runId: 'run_1' }));
  model.apply(ev(15, 'run.interrupted', { run: { id: 'run_1', status: 'interrupted', stalledSince: 1 } }, { runId: 'run_1' }));
  assert.equal(model.threads.get('thr_1').stalledRunId, null, 'an ended run is no longer stalled');
});

test('thread.archived and thread.unarchived mark the listed thread and reorder the list (issue 27)', () => {
  const model = new Model();
  const thread = { id: 'thr_1', title: 't', createdAt: 1, status: 'idle', archivedAt: null };
  const ev = (seq, type, payload = {}) => ({ seq, type, threadId: 'thr_1', at: 100 + seq, payload });
  model.apply(ev(1, 'thread.created', { thread }));
  model.resetDirty();
  model.apply(ev(2, 'thread.archived', { worktreeRemoved: false, checkpointId: null, branch: null, path: null }));
  assert.equal(model.threads.get('thr_1').archivedAt, 102);
  assert.equal(model.dirty.listOrder, true);
  model.resetDirty();
  model.apply(ev(3, 'thread.unarchived', { worktreeRestored: false, checkpointId: null }));
  assert.equal(model.threads.get('thr_1').archivedAt, null);
  assert.equal(model.dirty.listOrder, true);
});

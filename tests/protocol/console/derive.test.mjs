// What the console's views show, derived with no DOM (issue 22; issue 28
// rough edges 6 and 7): summaries, actions, rollbacks, lineage.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ThreadDetail } from '../../../protocol/console/model.js';
import * as derive from '../../../protocol/console/derive.js';

function detail(runs = [], checkpoints = []) {
  const d = new ThreadDetail('thr_1');
  for (const r of runs) d.runs.set(r.id, r);
  for (const c of checkpoints) d.putCheckpoint(c);
  return d;
}

test('a checkpoint of one file says "1 file", of more "N files" (issue 28 item 7)', () => {
  const cp = (n) => ({ status: 'captured', baseCheckpointId: 'ckp_0', summary: { filesChanged: n, insertions: 2, deletions: 0 } });
  assert.equal(derive.checkpointText(cp(1)), '1 file +2 −0');
  assert.equal(derive.checkpointText(cp(0)), '0 files +2 −0');
  assert.equal(derive.checkpointText(cp(1200)), '1,200 files +2 −0');
  assert.equal(derive.checkpointText({ status: 'captured', baseCheckpointId: 'ckp_0' }), '0 files +0 −0');
});

test('a checkpoint with none before it is the whole workspace, not "0 files" (issue 28 item 7)', () => {
  const baseline = { status: 'captured', kind: 'baseline', summary: { filesChanged: 0, insertions: 0, deletions: 0 } };
  assert.equal(derive.checkpointText(baseline), 'the whole workspace (no checkpoint before it)');
});

test('a stale checkpoint keeps its summary and can be diffed; a missing one says why and cannot (F13, F14)', () => {
  const stale = { status: 'stale', reason: 'rolled_back', baseCheckpointId: 'ckp_0', summary: { filesChanged: 1, insertions: 1, deletions: 3 } };
  assert.equal(derive.checkpointText(stale), 'stale (rolled back): 1 file +1 −3');
  assert.equal(derive.canDiff(stale), true);
  const missing = { status: 'missing', reason: 'daemon_restart' };
  assert.equal(derive.checkpointText(missing), 'checkpoint missing: daemon_restart');
  assert.equal(derive.canDiff(missing), false);
  assert.equal(derive.canDiff({ status: 'error' }), false);
  assert.equal(derive.canDiff({ status: 'captured' }), true);
});

test('a run offers what its status allows (F6, F10, F14)', () => {
  const can = (status, startedAt = 1) => Object.entries(derive.runActions({ status, startedAt })).filter(([, v]) => v).map(([k]) => k);
  assert.deepEqual(can('running'), ['interrupt']);
  assert.deepEqual(can('waiting'), ['interrupt']);
  assert.deepEqual(can('queued', null), ['cancel']);
  assert.deepEqual(can('completed'), ['fork', 'rollback']);
  assert.deepEqual(can('failed'), ['fork', 'rollback']);
  assert.deepEqual(can('failed', null), [], 'a run that never reached a provider is no point to fork from or go back to');
  assert.deepEqual(can('interrupted'), ['fork', 'rollback']);
  assert.deepEqual(can('cancelled', null), []);
  assert.deepEqual(can('rolled_back'), []);
  const latest = (status) => Object.entries(derive.runActions({ status, startedAt: 1 }, { latest: true })).filter(([, v]) => v).map(([k]) => k);
  assert.deepEqual(latest('failed'), ['retry', 'fork', 'rollback'], 'the latest failed run can be retried (run.retry)');
  assert.deepEqual(latest('interrupted'), ['retry', 'fork', 'rollback']);
  assert.deepEqual(latest('completed'), ['fork', 'rollback'], 'a completed run is not retried');
});

test('a rollback names the later runs it undoes, not those already rolled back, and the checkpoint files go back to', () => {
  const runs = [1, 2, 3, 4].map((n) => ({ id: `run_${n}`, ordinal: n, status: n === 4 ? 'rolled_back' : 'completed' }));
  const d = detail(runs, [{ id: 'ckp_1', runId: 'run_1', kind: 'run', status: 'captured' }]);
  const plan = derive.rollbackPlan(d, 1);
  assert.deepEqual(plan.undone.map((r) => r.ordinal), [2, 3]);
  assert.equal(plan.checkpoint.id, 'ckp_1');
  assert.deepEqual(derive.rollbackPlan(d, 0).undone.map((r) => r.ordinal), [1, 2, 3]);
  assert.equal(derive.rollbackPlan(d, 0).checkpoint, null);
});

test('the queue counts for Stop only while a run is queued', () => {
  assert.equal(derive.hasQueued(detail([{ id: 'r', ordinal: 1, status: 'completed' }])), false);
  assert.equal(derive.hasQueued(detail([{ id: 'r', ordinal: 1, status: 'queued' }])), true);
});

test('children, forks and the children whose requests show on their parent (F6, F9, F15)', () => {
  const threads = new Map([
    ['p', { id: 'p' }],
    ['f', { id: 'f', parentThreadId: 'p', relationshipToParent: 'fork' }],
    ['s', { id: 's', parentThreadId: 'p', relationshipToParent: 'side_chat' }],
    ['t', { id: 't', parentThreadId: 'p', relationshipToParent: 'delegated_task' }],
    ['x', { id: 'x', parentThreadId: 'f', relationshipToParent: 'delegated_task' }],
  ]);
  assert.deepEqual(derive.childrenOf(threads, 'p').map((t) => t.id), ['f', 's', 't']);
  assert.deepEqual(derive.forksOf(threads, 'p').map((t) => t.id), ['f']);
  assert.deepEqual(derive.requestChildren(threads, 'p').map((t) => t.id), ['t']);
});

test('the progress view shows the latest root todo list and the plans still to decide on (F16)', () => {
  const d = detail([{ id: 'run_1', ordinal: 1, rootNodeId: 'root_1' }]);
  const put = (a) => d.artifacts.set(a.id, a);
  put({ id: 'todo_old', kind: 'todo_list', runId: 'run_1', updatedAt: 1 });
  put({ id: 'todo_new', kind: 'todo_list', runId: 'run_1', nodeId: 'root_1', updatedAt: 2 });
  put({ id: 'todo_child', kind: 'todo_list', runId: 'run_1', nodeId: 'sub_1', updatedAt: 3 });
  put({ id: 'plan_a', kind: 'proposed_plan', status: 'proposed', createdAt: 1 });
  put({ id: 'plan_b', kind: 'proposed_plan', status: 'implemented', createdAt: 2 });
  put({ id: 'plan_c', kind: 'proposed_plan', status: 'implemented', createdAt: 3 });
  const { todo, plans } = derive.shownArtifacts(d);
  assert.equal(todo.id, 'todo_new', "a subagent's todo list stays under its node");
  assert.deepEqual(plans.map((p) => p.id), ['plan_a', 'plan_c']);
  assert.equal(derive.shownArtifacts(detail()).todo, null);
  assert.deepEqual(['completed', 'in_progress', 'pending'].map(derive.stepMark), ['☑', '▶', '☐']);
});

test('nodes group under their parents, roots under ""', () => {
  const children = derive.nodeChildren([{ id: 'a' }, { id: 'b', parentNodeId: 'a' }, { id: 'c', parentNodeId: 'a' }]);
  assert.deepEqual([...children.keys()], ['', 'a']);
  assert.deepEqual(children.get('a').map((n) => n.id), ['b', 'c']);
});

test('a transfer shows its direction, providers and fork point where the record has them (issue 28 item 6; F5, F6, F8)', () => {
  const source = detail([{ id: 'run_7', ordinal: 2 }]);
  source.id = 'thr_src';
  const fork = {
    id: 'ctx_1', type: 'fork', sourceThreadId: 'thr_src', targetThreadId: 'thr_1', status: 'consumed', resolution: 'portable',
    lowerFidelity: true, sourceProvider: 'scripted', targetProvider: 'basic',
    sourcePoint: { type: 'run', runId: 'run_7', checkpointId: 'ckp_9' },
  };
  const here = detail();
  const seen = derive.transferView(fork, here, source);
  assert.deepEqual(
    [seen.type, seen.arrow, seen.otherThreadId, seen.status, seen.resolution, seen.providers, seen.point],
    ['fork', '←', 'thr_src', 'consumed', 'portable, lower fidelity', 'scripted → basic', 'run #2, checkpoint ckp_9']);
  assert.equal(derive.transferView(fork, here).point, 'run run_7, checkpoint ckp_9', 'without the source thread read, the run is named by id');
  const fromSource = derive.transferView(fork, source, source);
  assert.deepEqual([fromSource.arrow, fromSource.otherThreadId], ['→', 'thr_1']);
  const sw = { id: 'ctx_2', type: 'provider_handoff', sourceThreadId: 'thr_1', targetThreadId: 'thr_1', status: 'pending', targetProvider: 'basic' };
  const seenSwitch = derive.transferView(sw, here);
  assert.deepEqual([seenSwitch.type, seenSwitch.arrow, seenSwitch.otherThreadId, seenSwitch.providers, seenSwitch.point], ['provider handoff', null, null, 'basic', null]);
  assert.equal(derive.pointText({ type: 'checkpoint', checkpointId: 'ckp_3' }), 'checkpoint ckp_3');
  assert.equal(derive.pointText({ type: 'latest_stable' }), null, 'an unresolved point names nothing');
});

test('protocol words read as words', () => {
  assert.equal(derive.words('delegated_task'), 'delegated task');
  assert.equal(derive.words(undefined), '');
});

test('usage reads as tokens in and out, with a cost only where it is known (issue 28)', () => {
  const usage = { inputTokens: 12000, cachedInputTokens: 2000, outputTokens: 900, reasoningTokens: 50, models: ['m'] };
  assert.equal(derive.usageText(usage, 0.02822), '12.0k in (2.0k cached) · 900 out (50 reasoning) · cost 0.0282');
  assert.equal(derive.usageText({ ...usage, cachedInputTokens: 0, reasoningTokens: 0 }, null), '12.0k in · 900 out');
  assert.equal(derive.usageText(null, null), null);
  assert.equal(derive.tokens(950), '950');
  assert.equal(derive.tokens(4_100_000), '4.1M');
});

test('a run is stalled only while it goes and its agent is silent (issue 28)', () => {
  assert.equal(derive.isStalled({ status: 'running', stalledSince: 5 }), true);
  assert.equal(derive.isStalled({ status: 'running', stalledSince: null }), false);
  assert.equal(derive.isStalled({ status: 'completed', stalledSince: 5 }), false, 'a run that ended stalled is not stalled now');
});

test('notifications: a run that ends, fails or stalls, and a request that waits; nothing else (issue 28)', () => {
  const ev = (type, payload) => ({ type, threadId: 'thr_1', runId: 'run_1', payload });
  assert.deepEqual(derive.notificationFor(ev('run.completed', { run: { ordinal: 2, status: 'completed' } }), 'my thread'),
    { title: 'Run #2 finished', body: 'my thread', tag: 'run_1' });
  assert.equal(derive.notificationFor(ev('run.failed', { run: { ordinal: 2, status: 'failed', reason: 'provider_error: x' } }), 't').body,
    't: provider_error: x');
  assert.equal(derive.notificationFor(ev('run.stalled', { silentFor: 300 }), 't').body, 't: no word from the agent for 300 s');
  const approval = derive.notificationFor(ev('approval.requested', { request: { id: 'req_1', detail: { command: 'rm -rf build' } } }), 't');
  assert.deepEqual(approval, { title: 'Approval needed', body: 't: rm -rf build', tag: 'req_1' });
  assert.equal(derive.notificationFor(ev('user_input.requested', { request: { id: 'req_2' } }), null).body, 'thr_1');
  for (const type of ['run.started', 'message.appended', 'run.usage', 'run.unstalled', 'approval.resolved']) {
    assert.equal(derive.notificationFor(ev(type, {}), 't'), null, type);
  }
});

test('a run that started and ended without a checkpoint of its own has an approximate diff (issue 28 item 8)', () => {
  const cut = { status: 'interrupted', reason: 'daemon_restart', startedAt: 5 };
  assert.equal(derive.approximateDiff(cut, null), true);
  assert.equal(derive.approximateDiff(cut, { status: 'missing', reason: 'daemon_restart' }), true);
  assert.equal(derive.approximateDiff(cut, { status: 'captured' }), false, 'its own checkpoint is exact');
  assert.equal(derive.approximateDiff({ status: 'cancelled' }, null), false, 'never started: nothing to show');
  assert.equal(derive.approximateDiff({ status: 'running', startedAt: 5 }, null), false);
});

test('only the latest run is retried, and only while nothing else runs (issue 23 item 5)', () => {
  const runs = [
    { id: 'r1', ordinal: 1, status: 'failed' },
    { id: 'r2', ordinal: 2, status: 'interrupted' },
    { id: 'r3', ordinal: 3, status: 'rolled_back' },
  ];
  assert.equal(derive.isRetryable(runs, runs[1]), true, 'the latest run not rolled back');
  assert.equal(derive.isRetryable(runs, runs[0]), false, 'an earlier one: send its message again instead');
  assert.equal(derive.isRetryable([...runs, { id: 'r4', ordinal: 4, status: 'queued' }], runs[1]), false);
});

test('a running step of a running run can be interrupted alone, not its root (issue 23 item 2)', () => {
  const running = { status: 'running' };
  assert.equal(derive.nodeInterruptible({ kind: 'tool', status: 'running' }, running), true);
  assert.equal(derive.nodeInterruptible({ kind: 'root_turn', status: 'running' }, running), false);
  assert.equal(derive.nodeInterruptible({ kind: 'tool', status: 'completed' }, running), false);
  assert.equal(derive.nodeInterruptible({ kind: 'tool', status: 'running' }, { status: 'completed' }), false);
});

test('an export is named by its title made safe, then its id (issue 28)', () => {
  assert.equal(derive.exportName({ id: 'thr_9', title: 'Café: fix the <b>parser</b>/lexer…' }, 'markdown'), 'Cafe-fix-the-b-parser-b-lexer-thr_9.md');
  assert.equal(derive.exportName({ id: 'thr_9', title: '' }, 'json'), 'thr_9.json');
  assert.equal(derive.exportName({ id: 't', title: '../../etc/passwd' }, 'markdown'), 'etc-passwd-t.md');
  assert.equal(derive.exportName({ id: 't', title: 'x'.repeat(300) }, 'json'), `${'x'.repeat(60)}-t.json`);
});

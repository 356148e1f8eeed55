// The thread list's order (SPEC F6, F9: forks and delegated children under
// their parent) and the connection's backoff, under node.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { listOrder } from '../../../protocol/console/list.js';
import { backoff } from '../../../protocol/console/rpc.js';

const map = (...threads) => new Map(threads.map((t) => [t.id, t]));

test('roots list newest first, each followed by its children oldest first, with their depth', () => {
  const threads = map(
    { id: 'a', createdAt: 1 },
    { id: 'b', createdAt: 3 },
    { id: 'a2', parentThreadId: 'a', createdAt: 5 },
    { id: 'a1', parentThreadId: 'a', createdAt: 4 },
    { id: 'a1x', parentThreadId: 'a1', createdAt: 6 },
  );
  assert.deepEqual(listOrder(threads).map((r) => [r.thread.id, r.depth]), [['b', 0], ['a', 0], ['a1', 1], ['a1x', 2], ['a2', 1]]);
});

test('side chats show only inside their parent; a child whose parent is not loaded is a root', () => {
  const threads = map({ id: 'p', createdAt: 1 }, { id: 's', parentThreadId: 'p', sideChat: true, createdAt: 2 }, { id: 'orphan', parentThreadId: 'gone', createdAt: 0 });
  assert.deepEqual(listOrder(threads).map((r) => r.thread.id), ['p', 'orphan']);
});

test('threads made at the same second keep a stable order by id', () => {
  const threads = map({ id: 'thr_a', createdAt: 1 }, { id: 'thr_b', createdAt: 1 });
  assert.deepEqual(listOrder(threads).map((r) => r.thread.id), ['thr_b', 'thr_a']);
});

test('reconnects back off from 0.25 s, doubling to 8 s, within ±25 %', () => {
  const mid = () => 0.5;
  assert.deepEqual([1, 2, 3, 6, 7, 20].map((n) => backoff(n, mid)), [250, 500, 1000, 8000, 8000, 8000]);
  assert.equal(backoff(1, () => 0), 188);
  assert.equal(backoff(1, () => 0.999999), 312);
});

test('archived threads are left out unless asked for; a child of a hidden one lists as a root (issue 27)', () => {
  const threads = map(
    { id: 'old', createdAt: 1, archivedAt: 9 },
    { id: 'fork', parentThreadId: 'old', createdAt: 2 },
    { id: 'new', createdAt: 3 },
  );
  assert.deepEqual(listOrder(threads).map((r) => [r.thread.id, r.depth]), [['new', 0], ['fork', 0]]);
  assert.deepEqual(listOrder(threads, { archived: true }).map((r) => [r.thread.id, r.depth]), [['new', 0], ['old', 0], ['fork', 1]]);
});

// The search box's pieces without a browser (issue 28): a snippet's **marks**
// split into plain parts for <mark> elements; thread.updated and
// thread.deleted keep the list's model in step.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { snippetParts } from '../../../protocol/console/search.js';
import { Model } from '../../../protocol/console/model.js';

test('a snippet splits at its marks, and markup in it stays text', () => {
  assert.deepEqual(snippetParts('see the **okapi** <b>now</b>'), [
    { text: 'see the ', hit: false }, { text: 'okapi', hit: true }, { text: ' <b>now</b>', hit: false }]);
  assert.deepEqual(snippetParts('**a** and **b**'), [
    { text: 'a', hit: true }, { text: ' and ', hit: false }, { text: 'b', hit: true }]);
  assert.deepEqual(snippetParts(''), []);
});

test('a rename changes the listed title; a delete takes the thread out of the list', () => {
  const model = new Model();
  const thread = { id: 'thr_1', title: 'old', createdAt: 1, status: 'idle' };
  const ev = (seq, type, payload) => ({ seq, type, threadId: 'thr_1', at: seq, payload });
  assert.equal(model.apply(ev(1, 'thread.created', { thread })), 'applied');
  model.apply(ev(2, 'thread.updated', { thread: { ...thread, title: 'new' }, changed: ['title'] }));
  assert.equal(model.threads.get('thr_1').title, 'new');
  model.resetDirty();
  model.apply(ev(3, 'thread.deleted', { threadId: 'thr_1', childThreadIds: [] }));
  assert.equal(model.threads.has('thr_1'), false);
  assert.equal(model.dirty.listOrder, true);
});

// The console's shape (issue 22, Legibility): small modules, imports in one
// direction, and no HTML parsed from strings anywhere in the page's code, so
// agent text can only ever become text nodes.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

const dir = fileURLToPath(new URL('../../../protocol/console/', import.meta.url));
const files = readdirSync(dir).filter((f) => !f.startsWith('.'));
const modules = files.filter((f) => f.endsWith('.js'));
const source = (f) => readFileSync(join(dir, f), 'utf8');

/** The console modules `f` imports (static imports of ./x.js). */
function importsOf(f) {
  return [...source(f).matchAll(/^\s*(?:import|export)\s[^;]*?from\s+'\.\/([\w-]+\.js)'/gms)].map((m) => m[1]);
}

test('no file of the console is over 400 lines', () => {
  const long = files.map((f) => [f, source(f).split('\n').length]).filter(([, n]) => n > 400);
  assert.deepEqual(long, []);
});

test('no code of the page parses HTML from a string', () => {
  const banned = /\.(innerHTML|outerHTML)\b|insertAdjacentHTML|document\.write|DOMParser|createContextualFragment|srcdoc/;
  const found = modules.filter((f) => banned.test(source(f)));
  assert.deepEqual(found, []);
});

test('every import names a console module, and the imports form no cycle', () => {
  const graph = new Map(modules.map((f) => [f, importsOf(f)]));
  for (const [f, deps] of graph) for (const dep of deps) assert.ok(graph.has(dep), `${f} imports ${dep}, which is not in protocol/console/`);
  const state = new Map(); // f -> 'visiting' | 'done'
  const visit = (f, path) => {
    if (state.get(f) === 'done') return;
    assert.notEqual(state.get(f), 'visiting', `import cycle: ${[...path, f].join(' → ')}`);
    state.set(f, 'visiting');
    for (const dep of graph.get(f)) visit(dep, [...path, f]);
    state.set(f, 'done');
  };
  for (const f of modules) visit(f, []);
});

test('every module is loaded from app.js and preloaded by the page', () => {
  const reached = new Set();
  const walk = (f) => { if (!reached.has(f)) { reached.add(f); importsOf(f).forEach(walk); } };
  walk('app.js');
  assert.deepEqual(modules.filter((f) => !reached.has(f)), [], 'modules app.js never loads');
  const page = source('index.html');
  assert.deepEqual([...reached].filter((f) => f !== 'app.js' && !page.includes(`<link rel="modulepreload" href="/${f}">`)), [],
    'modules without a modulepreload link load one import round trip later');
});

test('the model, the derivations and the parsers need no DOM (they run here, under node)', () => {
  for (const f of ['model.js', 'derive.js', 'markdown.js', 'code.js']) {
    assert.doesNotMatch(source(f), /\b(document|window|HTMLElement|requestAnimationFrame)\b/, f);
  }
});

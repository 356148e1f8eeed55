// The search box (thread.search): full text over titles, messages, answers
// and handoffs. Hits are drawn from text nodes (the snippet's **marks**
// become <mark> elements, never HTML); a click opens the thread.

import { h } from './dom.js';
import { $, ui } from './ui.js';

/** A snippet's text split at its `**` marks: [{text, hit}], for <mark> elements. */
export function snippetParts(snippet) {
  return snippet.split('**').map((text, i) => ({ text, hit: i % 2 === 1 })).filter((p) => p.text);
}

function hitRow(hit) {
  const title = ui.model.threads.get(hit.threadId)?.title || hit.threadId;
  const parts = snippetParts(hit.snippet).map((p) => (p.hit ? h('mark', {}, p.text) : p.text));
  return h('li', {},
    h('button', { type: 'button', class: 'search-hit', dataset: { threadId: hit.threadId, kind: hit.kind },
      onclick: () => ui.openThread(hit.threadId) },
      h('span', { class: 'title' }, title), ' ', h('span', { class: 'muted' }, hit.kind),
      h('span', { class: 'snippet' }, ...parts)));
}

let asked = 0;

/** Ask thread.search for the box's query and draw the hits (the newest question wins). */
export async function search(query) {
  const results = $('search-results');
  const mine = ++asked;
  if (!query.trim()) { results.replaceChildren(); results.hidden = true; return; }
  let answer;
  try {
    answer = await ui.call('thread.search', { query, limit: 30 });
  } catch {
    return; // the page shows the error (a bad query says why)
  }
  if (mine !== asked) return;
  results.hidden = false;
  results.replaceChildren(...(answer.hits.length ? answer.hits.map(hitRow)
    : [h('li', { class: 'muted' }, `Nothing matches ${query}`)]));
}

/** Search as the person types (after a pause) and on Enter; Esc clears. */
export function setUpSearch() {
  const box = $('search-box');
  let timer = 0;
  box.addEventListener('input', () => { clearTimeout(timer); timer = setTimeout(() => search(box.value), 250); });
  box.addEventListener('keydown', (e) => {
    if (e.key === 'Enter') { clearTimeout(timer); search(box.value); e.preventDefault(); }
    if (e.key === 'Escape') { box.value = ''; search(''); }
  });
}

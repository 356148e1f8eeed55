// Agent text and patches as DOM nodes. Whatever the text holds, it is only
// ever placed with text nodes and element builders (never innerHTML): the
// Markdown of markdown.js becomes elements, code gets spans of its kinds,
// patches get a span per run of added, deleted, hunk and header lines.

import { h } from './dom.js';
import { parseMarkdown } from './markdown.js';
import { highlight, diffRuns, looksLikePatch } from './code.js';

// Past this size an answer is shown as plain text: parsing it would cost a
// long frame for little.
export const MARKDOWN_MAX = 100_000;

/** A message's text as shown: an assistant's, once it no longer streams, as Markdown. */
export function messageText(m) {
  if (m.role !== 'assistant' || m.status === 'streaming' || m.text.length > MARKDOWN_MAX) return document.createTextNode(m.text);
  return markdownNodes(m.text);
}

/** Markdown `text` as a fragment of elements. */
export function markdownNodes(text) {
  const frag = document.createDocumentFragment();
  frag.append(...parseMarkdown(text).map((b) => block(b)));
  return frag;
}

function block(b, tight = false) {
  switch (b.type) {
    case 'paragraph': return tight ? h('span', { class: 'md-line' }, inline(b.inline)) : h('p', {}, inline(b.inline));
    case 'heading': return h(`h${Math.min(6, b.level + 2)}`, { class: 'md-heading', dataset: { level: b.level } }, inline(b.inline));
    case 'rule': return h('hr', {});
    case 'quote': return h('blockquote', {}, b.children.map((c) => block(c)));
    case 'code': return codeElement(b.text, b.lang);
    case 'list': return h(b.ordered ? 'ol' : 'ul', { start: b.ordered && b.start !== 1 ? String(b.start) : null },
      b.items.map((item) => h('li', { dataset: { checked: item.checked === null ? null : String(item.checked) } },
        item.checked === null ? null : h('span', { class: 'task', 'aria-label': item.checked ? 'done' : 'to do' }, item.checked ? '☑ ' : '☐ '),
        item.children.map((c) => block(c, b.tight)))));
    case 'table': return h('div', { class: 'md-table' }, h('table', {},
      h('thead', {}, h('tr', {}, b.head.map((cell, k) => h('th', { class: b.align[k] ? `align-${b.align[k]}` : null }, inline(cell))))),
      h('tbody', {}, b.rows.map((row) => h('tr', {}, row.map((cell, k) => h('td', { class: b.align[k] ? `align-${b.align[k]}` : null }, inline(cell))))))));
    default: return document.createTextNode('');
  }
}

function inline(runs) {
  return runs.map((r) => {
    switch (r.type) {
      case 'text': return r.text;
      case 'code': return h('code', {}, r.text);
      case 'em': return h('em', {}, inline(r.children));
      case 'strong': return h('strong', {}, inline(r.children));
      case 'del': return h('del', {}, inline(r.children));
      // markdown.js gives only http(s) and mailto links; they open apart from the console
      case 'link': return h('a', { href: r.href, target: '_blank', rel: 'noopener noreferrer' }, inline(r.children));
      default: return '';
    }
  });
}

/** A fenced code block, highlighted for its language (a patch: its lines coloured). */
export function codeElement(code, lang = '') {
  if (lang === 'diff' || lang === 'patch' || (!lang && looksLikePatch(code))) return patchElement(code, { class: 'code patch', dataset: { lang: lang || 'diff' } });
  return h('pre', { class: 'code', dataset: { lang: lang || null } },
    h('code', {}, highlight(code, lang).map((run) => (run.kind ? h('span', { class: `hl-${run.kind}` }, run.text) : run.text))));
}

/** A patch in a <pre>, its added, deleted, hunk and header lines coloured. */
export function patchElement(patch, attrs = {}) {
  return h('pre', attrs, diffRuns(patch).map((run) => h('span', { class: `diff-${run.kind}` }, run.text)));
}

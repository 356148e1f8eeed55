// Markdown as agents write it, parsed into plain data with no DOM: blocks
// (paragraphs, headings, fenced code, lists with task boxes, quotes, tables,
// rules) holding inline runs (code, emphasis, strong, strikethrough, links).
// rich.js draws the result with text nodes only, so nothing an agent writes
// is ever parsed as HTML; HTML in the text stays text. Code blocks' and
// patches' tokenizers are in code.js.

const FENCE = /^( {0,3})(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?/;
const ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;
const TABLE_RULE = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
const BLANK = /^[ \t]*$/;

/** The blocks of Markdown `text`. */
export function parseMarkdown(text) {
  return parseBlocks(text.replace(/\r\n?/g, '\n').split('\n'));
}

/** Whether `line` starts a block that ends a paragraph (an ordered list only from 1, as in CommonMark). */
function interrupts(line) {
  const item = ITEM.exec(line);
  if (item) return !/\d/.test(item[2]) || parseInt(item[2], 10) === 1;
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line);
}

function parseBlocks(lines) {
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (BLANK.test(line)) { i++; continue; }
    if ((m = FENCE.exec(line))) {
      const [, indent, fence, lang] = m;
      const body = [];
      for (i++; i < lines.length; i++) {
        const close = /^ {0,3}(`{3,}|~{3,})[ \t]*$/.exec(lines[i]);
        if (close && close[1][0] === fence[0] && close[1].length >= fence.length) { i++; break; }
        body.push(lines[i].replace(new RegExp(`^ {0,${indent.length}}`), ''));
      }
      blocks.push({ type: 'code', lang: lang.toLowerCase(), text: body.join('\n') });
    } else if ((m = HEADING.exec(line))) {
      blocks.push({ type: 'heading', level: m[1].length, inline: parseInline(m[2] ?? '') });
      i++;
    } else if (RULE.test(line)) {
      blocks.push({ type: 'rule' });
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) body.push(lines[i++].replace(QUOTE, ''));
      blocks.push({ type: 'quote', children: parseBlocks(body) });
    } else if (ITEM.test(line)) {
      i = parseList(lines, i, blocks);
    } else if (line.includes('|') && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      i = parseTable(lines, i, blocks);
    } else {
      const body = [line.trim()];
      for (i++; i < lines.length && !BLANK.test(lines[i]) && !interrupts(lines[i]); i++) body.push(lines[i].trim());
      blocks.push({ type: 'paragraph', inline: parseInline(body.join('\n')) });
    }
  }
  return blocks;
}

/** A list from line `i`, pushed onto `blocks`; returns the line after it. */
function parseList(lines, i, blocks) {
  const first = ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const list = { type: 'list', ordered, start: ordered ? parseInt(first[2], 10) : 1, tight: true, items: [] };
  let item = null;
  let column = 0; // where an item's content starts: deeper lines belong to it
  let blank = false;
  for (; i < lines.length; i++) {
    const line = lines[i];
    if (BLANK.test(line)) { blank = true; if (item) item.lines.push(''); continue; }
    const m = ITEM.exec(line);
    const indent = line.length - line.trimStart().length;
    if (m && (!item || indent < column)) { // the next item, or the end of this list
      if (/\d/.test(m[2]) !== ordered) break;
      if (item && blank) list.tight = false;
      item = { lines: [m[3] ?? ''] };
      list.items.push(item);
      const after = line.slice(m[1].length + m[2].length);
      const spaces = after.length - after.trimStart().length;
      column = m[1].length + m[2].length + (m[3] === undefined || spaces > 4 ? 1 : spaces);
    } else if (indent >= column) {
      if (blank) list.tight = false;
      item.lines.push(line.slice(column));
    } else if (!blank && !interrupts(line)) {
      item.lines.push(line.trim()); // a lazy continuation of the item's paragraph
    } else break;
    blank = false;
  }
  for (const it of list.items) {
    while (it.lines.length && it.lines.at(-1) === '') it.lines.pop();
    const task = /^\[([ xX])\][ \t]+/.exec(it.lines[0]);
    if (task) it.lines[0] = it.lines[0].slice(task[0].length);
    it.checked = task ? task[1] !== ' ' : null;
    it.children = parseBlocks(it.lines);
    delete it.lines;
  }
  blocks.push(list);
  return i;
}

/** The cells of a table row: split at `|` outside code spans and escapes. */
function cells(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const out = [];
  let cell = '';
  let code = false;
  for (let j = 0; j < s.length; j++) {
    const c = s[j];
    if (c === '\\' && s[j + 1] === '|') { cell += '|'; j++; continue; }
    if (c === '`') code = !code;
    if (c === '|' && !code) { out.push(cell.trim()); cell = ''; } else cell += c;
  }
  out.push(cell.trim());
  return out;
}

function parseTable(lines, i, blocks) {
  const head = cells(lines[i]);
  const align = cells(lines[i + 1]).map((c) => (c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : c.startsWith(':') ? 'left' : null));
  const rows = [];
  for (i += 2; i < lines.length && !BLANK.test(lines[i]) && lines[i].includes('|'); i++) rows.push(cells(lines[i]));
  const width = head.length;
  const fit = (row) => Array.from({ length: width }, (_, k) => parseInline(row[k] ?? ''));
  blocks.push({ type: 'table', align: align.slice(0, width), head: fit(head), rows: rows.map(fit) });
  return i;
}

// --- inline ---------------------------------------------------------------

const PUNCT = /[!"#$%&'()*+,\-./:;<=>?@[\\\]^_`{|}~]/;
const WORD = /[\p{L}\p{N}]/u;
const BARE_URL = /^https?:\/\/[^\s<>]+/;
const SPECIAL = /[\\`*_~[!<hH]/g;
// How far ahead an opener looks for its closer (a code span, emphasis, a
// link's brackets): text with many unmatched openers stays linear.
const REACH = 4000;
const URL_TAIL = /[.,:;!?'"\]}*_~]$/;

/** Whether `url` may be a link: http(s) and mail only (never javascript: or data:). */
export function safeHref(url) {
  const u = url.trim();
  return /^(https?:\/\/|mailto:)/i.test(u) && !/[\u0000-\u001f\s]/.test(u) ? u : null;
}

/**
 * The inline runs of `text`: {type: 'text', text}, {type: 'code', text},
 * {type: 'em'|'strong'|'del', children}, {type: 'link', href, children}.
 */
export function parseInline(text) {
  const index = new InlineIndex(text);
  const out = [];
  let plain = '';
  const flush = () => { if (plain) { out.push({ type: 'text', text: plain }); plain = ''; } };
  const push = (node) => { flush(); out.push(node); };
  let i = 0;
  while (i < text.length) {
    // plain text up to the next character that may start something
    SPECIAL.lastIndex = i;
    const next = SPECIAL.exec(text)?.index ?? text.length;
    if (next > i) { plain += text.slice(i, next); i = next; continue; }
    const c = text[i];
    const rest = c === 'h' || c === 'H' ? text.slice(i, i + 8) : text.slice(i, i + REACH);
    if (c === '\\' && PUNCT.test(text[i + 1] ?? '')) { plain += text[i + 1]; i += 2; continue; }
    if (c === '`') {
      const run = /^`+/.exec(rest)[0];
      const close = findRun(text, '`', run.length, i + run.length);
      if (close >= 0) {
        let code = text.slice(i + run.length, close).replace(/\n/g, ' ');
        if (/^ .*[^ ].* $/.test(code)) code = code.slice(1, -1);
        push({ type: 'code', text: code });
        i = close + run.length;
      } else { plain += run; i += run.length; }
      continue;
    }
    if (c === '*' || c === '_' || c === '~') {
      const span = emphasis(index, i);
      if (span) { push(span.node); i = span.end; continue; }
    }
    if (c === '[' || (c === '!' && text[i + 1] === '[')) {
      const link = bracketLink(index, c === '!' ? i + 1 : i);
      if (link) { push(link.node); i = link.end; continue; }
    }
    if (c === '<') {
      const auto = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i.exec(rest);
      if (auto && safeHref(auto[1])) { push({ type: 'link', href: auto[1], children: [{ type: 'text', text: auto[1] }] }); i += auto[0].length; continue; }
    }
    if ((c === 'h' || c === 'H') && /^https?:\/\//i.test(rest) && !WORD.test(text[i - 1] ?? '')) {
      const url = BARE_URL.exec(text.slice(i, i + REACH));
      if (url) {
        // punctuation after a URL is the sentence's, and so is a closing
        // parenthesis the URL did not open
        let u = url[0];
        const unopened = () => u.endsWith(')') && (u.match(/\(/g) ?? []).length < (u.match(/\)/g) ?? []).length;
        while (URL_TAIL.test(u) || unopened()) u = u.slice(0, -1);
        if (u.length <= 'https://'.length) { plain += c; i++; continue; }
        push({ type: 'link', href: u, children: [{ type: 'text', text: u }] });
        i += u.length;
        continue;
      }
    }
    plain += c;
    i++;
  }
  flush();
  return out;
}

/** Where a run of exactly `n` `ch` starts at or after `from`, or -1. */
function findRun(text, ch, n, from) {
  const stop = Math.min(text.length, from + REACH);
  for (let j = from; j < stop; j++) {
    if (text[j] !== ch) continue;
    let k = j;
    while (text[k] === ch) k++;
    if (k - j === n) return j;
    j = k;
  }
  return -1;
}

/**
 * What parseInline looks up in its text, each found in one pass when first
 * needed, so that many openers without closers cost no more than the text:
 * emphasis closers by mark, backticks before a place, matching brackets.
 */
class InlineIndex {
  constructor(text) {
    this.text = text;
    this.closerLists = new Map();
    this.ticks = null;
    this.brackets = null;
  }

  /** Where `mark` (a run of exactly its length) may close emphasis: after text, and `_` not inside a word. */
  closers(mark) {
    let list = this.closerLists.get(mark);
    if (list) return list;
    const { text } = this;
    const c = mark[0];
    list = [];
    for (let j = text.indexOf(c); j >= 0; j = text.indexOf(c, j)) {
      let end = j;
      while (text[end] === c) end++;
      if (end - j === mark.length && j > 0 && !/\s/.test(text[j - 1]) && !(c === '_' && WORD.test(text[end] ?? ''))) list.push(j);
      j = end;
    }
    this.closerLists.set(mark, list);
    return list;
  }

  /** How many backticks come before `j`. */
  ticksBefore(j) {
    if (!this.ticks) {
      const { text } = this;
      this.ticks = new Int32Array(text.length + 1);
      for (let k = 0; k < text.length; k++) this.ticks[k + 1] = this.ticks[k] + (text[k] === '`' ? 1 : 0);
    }
    return this.ticks[j];
  }

  /** The `]` matching the `[` at `i` (escapes skipped), or -1. */
  bracketClose(i) {
    if (!this.brackets) {
      const { text } = this;
      this.brackets = new Map();
      const open = [];
      for (let j = 0; j < text.length; j++) {
        if (text[j] === '\\') j++;
        else if (text[j] === '[') open.push(j);
        else if (text[j] === ']' && open.length) this.brackets.set(open.pop(), j);
      }
    }
    return this.brackets.get(i) ?? -1;
  }
}

/** The first element of sorted `list` at or above `x` (its index). */
function lowerBound(list, x) {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (list[mid] < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/** Emphasis, strong or strikethrough opening at `i`: {node, end}, or null. */
function emphasis(index, i) {
  const { text } = index;
  const c = text[i];
  const kinds = c === '~' ? [['~~', 'del']] : [[c + c, 'strong'], [c, 'em']];
  for (const [mark, type] of kinds) {
    if (!text.startsWith(mark, i) || text[i + mark.length] === c) continue;
    const open = i + mark.length;
    if (/\s/.test(text[open] ?? ' ')) continue; // an opener is followed by text
    if (c === '_' && WORD.test(text[i - 1] ?? '')) continue; // snake_case is not emphasis
    const closers = index.closers(mark);
    for (let k = lowerBound(closers, open + 1); k < closers.length && closers[k] < open + REACH; k++) {
      const j = closers[k];
      if ((index.ticksBefore(j) - index.ticksBefore(open)) % 2) continue; // not across a code span's edge
      return { node: { type, children: parseInline(text.slice(open, j)) }, end: j + mark.length };
    }
  }
  return null;
}

/** `[text](url)` (or the `[alt](src)` of an image, shown as a link) at `i`: {node, end}, or null. */
function bracketLink(index, i) {
  const { text } = index;
  const close = index.bracketClose(i);
  if (close < 0 || text[close + 1] !== '(') return null;
  let depth = 0;
  let end = -1;
  for (let j = close + 1; j < Math.min(text.length, close + REACH); j++) {
    if (text[j] === '(') depth++;
    else if (text[j] === ')' && --depth === 0) { end = j; break; }
  }
  if (end < 0) return null;
  const target = text.slice(close + 2, end).trim().replace(/^<(.*)>$/, '$1');
  const href = safeHref(target.replace(/[ \t]+(["'(]).*$/, ''));
  if (!href) return null; // shown as written
  const label = text.slice(i + 1, close);
  return { node: { type: 'link', href, children: label ? parseInline(label) : [{ type: 'text', text: href }] }, end: end + 1 };
}

const FENCE_CLOSE = /^ {0,3}(`{3,}|~{3,})[ \t]*$/;

/**
 * How much of a streaming text is settled: the end of its last blank line
 * outside a code fence, after which no earlier block can change. `state`
 * ({scanned, fence, settled}, all 0/null at first) carries the scan over
 * calls, so each call reads only the lines that came since.
 */
export function settledEnd(text, state) {
  let at = state.scanned;
  for (let nl = text.indexOf('\n', at); nl >= 0; nl = text.indexOf('\n', at)) {
    const line = text.slice(at, nl);
    if (state.fence) {
      const close = FENCE_CLOSE.exec(line);
      if (close && close[1][0] === state.fence[0] && close[1].length >= state.fence.length) state.fence = null;
    } else {
      const open = FENCE.exec(line);
      if (open) state.fence = open[2];
      else if (BLANK.test(line)) state.settled = nl + 1;
    }
    at = nl + 1;
  }
  state.scanned = at;
  return state.settled;
}

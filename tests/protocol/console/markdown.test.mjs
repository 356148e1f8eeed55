// Markdown as the console parses it, before any DOM (issue 28 item 6: answers
// rendered as Markdown, code highlighted, diffs coloured, and no agent text
// ever parsed as HTML).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseMarkdown, parseInline, safeHref, settledEnd } from '../../../protocol/console/markdown.js';
import { highlight, diffRuns, looksLikePatch } from '../../../protocol/console/code.js';

/** Inline runs as compact text: `**x**` → ['strong', ['x']]. */
const flat = (runs) => runs.map((r) => (r.type === 'text' ? r.text : r.type === 'code' ? ['code', r.text]
  : r.type === 'link' ? ['link', r.href, flat(r.children)] : [r.type, flat(r.children)]));
const types = (blocks) => blocks.map((b) => b.type);

test('emphasis, strong, strikethrough and code spans; snake_case and lone stars stay text', () => {
  assert.deepEqual(flat(parseInline('a **b** *c* _d_ ~~e~~ `f`')), ['a ', ['strong', ['b']], ' ', ['em', ['c']], ' ', ['em', ['d']], ' ', ['del', ['e']], ' ', ['code', 'f']]);
  assert.deepEqual(flat(parseInline('snake_case_name and 2 * 3 * 4')), ['snake_case_name and 2 * 3 * 4']);
  assert.deepEqual(flat(parseInline('*a **b** c*')), [['em', ['a ', ['strong', ['b']], ' c']]]);
  assert.deepEqual(flat(parseInline('`a *b* c` and ``x ` y``')), [['code', 'a *b* c'], ' and ', ['code', 'x ` y']]);
  assert.deepEqual(flat(parseInline('\\*not em\\* and **unclosed')), ['*not em* and **unclosed']);
});

test('links: only http(s) and mailto become links; anything else is shown as written', () => {
  assert.deepEqual(flat(parseInline('[the docs](https://example.org/a_(b)) x')), [['link', 'https://example.org/a_(b)', ['the docs']], ' x']);
  assert.deepEqual(flat(parseInline('[x](javascript:alert(1))')), ['[x](javascript:alert(1))']);
  assert.deepEqual(flat(parseInline('[x](data:text/html,hi) [y](src/main.c)')), ['[x](data:text/html,hi) [y](src/main.c)']);
  assert.deepEqual(flat(parseInline('see https://a.example/b.c, (and https://w.example/x_(y))).')),
    ['see ', ['link', 'https://a.example/b.c', ['https://a.example/b.c']], ', (and ', ['link', 'https://w.example/x_(y)', ['https://w.example/x_(y)']], ')).']);
  assert.deepEqual(flat(parseInline('<mailto:a@b.example> ![logo](https://x.example/l.png)')),
    [['link', 'mailto:a@b.example', ['mailto:a@b.example']], ' ', ['link', 'https://x.example/l.png', ['logo']]]);
  assert.equal(safeHref(' https://x.example '), 'https://x.example');
  assert.equal(safeHref('JaVaScRiPt:alert(1)'), null);
  assert.equal(safeHref('https://x.example/\u0000'), null);
});

test('HTML in the text is text: no inline run is anything but text, code, emphasis or a safe link', () => {
  const runs = parseInline('<img src=x onerror=alert(1)> <script>alert(1)</script> &amp;');
  assert.deepEqual(flat(runs), ['<img src=x onerror=alert(1)> <script>alert(1)</script> &amp;']);
});

test('blocks: headings, paragraphs with their line breaks, rules, quotes', () => {
  const blocks = parseMarkdown('# Title #\n\nfirst line\nsecond line\n\n---\n> quoted\n> more\n\n#hashtag is text');
  assert.deepEqual(types(blocks), ['heading', 'paragraph', 'rule', 'quote', 'paragraph']);
  assert.deepEqual([blocks[0].level, flat(blocks[0].inline)], [1, ['Title']]);
  assert.deepEqual(flat(blocks[1].inline), ['first line\nsecond line']);
  assert.deepEqual(flat(blocks[3].children[0].inline), ['quoted\nmore']);
  assert.deepEqual(flat(blocks[4].inline), ['#hashtag is text']);
});

test('fenced code keeps its text exactly, with its language; an unclosed fence runs to the end', () => {
  const [code, after] = parseMarkdown('```Python\ndef f():\n\n    return "**x**"\n```\nafter');
  assert.deepEqual([code.type, code.lang, code.text], ['code', 'python', 'def f():\n\n    return "**x**"']);
  assert.equal(after.type, 'paragraph');
  assert.deepEqual(parseMarkdown('~~~\nopen\n```\nstill code'), [{ type: 'code', lang: '', text: 'open\n```\nstill code' }]);
});

test('lists: bullets, ordered from their start, nested by indent, task boxes, tight or loose', () => {
  const [bullets, numbers] = parseMarkdown('- [x] done\n- [ ] to do\n- plain\n  - nested\n    deeper text\n1. one\n2. two');
  assert.equal(bullets.ordered, false);
  assert.deepEqual(bullets.items.map((i) => i.checked), [true, false, null]);
  assert.deepEqual(flat(bullets.items[0].children[0].inline), ['done']);
  const nested = bullets.items[2].children[1];
  assert.equal(nested.type, 'list');
  assert.deepEqual(flat(nested.items[0].children[0].inline), ['nested\ndeeper text']);
  assert.deepEqual([numbers.ordered, numbers.start, numbers.items.length, numbers.tight], [true, 1, 2, true]);
  const [loose] = parseMarkdown('3) a\n\n4) b\nlazy line');
  assert.deepEqual([loose.start, loose.tight, flat(loose.items[1].children[0].inline)], [3, false, ['b\nlazy line']]);
  assert.deepEqual(types(parseMarkdown('The year\n2024. was long')), ['paragraph'], 'only a list from 1 interrupts a paragraph');
});

test('tables: header, alignment, cells split outside code spans, rows cut or padded to the header', () => {
  const [table] = parseMarkdown('| a | b | c |\n|:--|:-:|--:|\n| `x|y` | 2 |\n| 1 | 2 | 3 | 4 |');
  assert.equal(table.type, 'table');
  assert.deepEqual(table.align, ['left', 'center', 'right']);
  assert.deepEqual(table.head.map(flat), [['a'], ['b'], ['c']]);
  assert.deepEqual(table.rows.map((r) => r.map(flat)), [[[['code', 'x|y']], ['2'], []], [['1'], ['2'], ['3']]]);
});

test('code is highlighted by kind for known languages and left plain otherwise', () => {
  const kinds = (code, lang) => highlight(code, lang).filter((r) => r.kind).map((r) => [r.kind, r.text]);
  assert.deepEqual(kinds('def f(x):\n    return "a#b" # why 42', 'python'), [['kw', 'def'], ['kw', 'return'], ['str', '"a#b"'], ['com', '# why 42']]);
  assert.deepEqual(kinds('const n = 0x1F; // done\n/* a\nb */', 'ts'), [['kw', 'const'], ['num', '0x1F'], ['com', '// done'], ['com', '/* a\nb */']]);
  assert.deepEqual(kinds('SELECT 1 -- one', 'sql'), [['kw', 'SELECT'], ['num', '1'], ['com', '-- one']]);
  assert.deepEqual(highlight('if x: "y"', 'text'), [{ kind: null, text: 'if x: "y"' }]);
  const code = 'let s = `a ${b}`; x1 = 2';
  assert.equal(highlight(code, 'js').map((r) => r.text).join(''), code, 'the text is kept exactly');
});

test('patches come as runs of whole lines by kind; lines inside a hunk are never headers', () => {
  const patch = 'diff --git a/x b/x\nindex 1..2\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-old\n--- a removed line starting with dashes\n+new\n+more\n same\n\\ No newline at end of file\n';
  assert.deepEqual(diffRuns(patch).map((r) => [r.kind, r.text.split('\n').length - 1]),
    [['meta', 4], ['hunk', 1], ['del', 2], ['add', 2], ['context', 2]]);
  assert.equal(diffRuns(patch).map((r) => r.text).join(''), patch);
  assert.equal(looksLikePatch('@@ -1 +1 @@\n-a\n+b'), true);
  assert.equal(looksLikePatch('- a list\n+ not a patch'), false);
});

test('a streaming text is settled up to its last blank line outside a fence, read once line by line', () => {
  const state = { scanned: 0, fence: null, settled: 0 };
  let text = '';
  const grow = (piece) => { text += piece; return text.slice(0, settledEnd(text, state)); };
  assert.equal(grow('# T'), '');
  assert.equal(grow('itle\n\npara'), '# Title\n\n');
  assert.equal(grow('graph\n\n```py\nx\n\ny\n'), '# Title\n\nparagraph\n\n', 'not inside the open fence');
  assert.equal(grow('~~~\n\n'), '# Title\n\nparagraph\n\n', 'another fence character closes nothing');
  assert.equal(grow('````\nafter\n\nnext'), text.slice(0, text.length - 'next'.length));
  assert.equal(state.scanned, text.length - 'next'.length, 'an unfinished line waits');
});

// Light tokenizers with no DOM for what agents show as code: minimal
// highlighting by kind for common languages, and git patches as runs of
// added, deleted, hunk and header lines. rich.js draws them as spans.

const KEYWORDS = new Set(('if else elif for while do return function def class import from export const let var new try catch ' +
  'except finally raise throw async await yield in of not and or is None True False null true false undefined this self fn ' +
  'pub struct enum impl match case switch break continue with as lambda static void public private protected package func ' +
  'type interface use mod mut where then fi esac done local extends implements super typeof instanceof delete default pass ' +
  'global assert del go defer chan select int float bool string char long double unsigned').split(' '));
const HASH = new Set(['python', 'py', 'sh', 'bash', 'shell', 'zsh', 'console', 'yaml', 'yml', 'toml', 'ruby', 'rb', 'perl', 'r', 'make', 'makefile', 'dockerfile', 'nix', 'ini', 'conf']);
const SLASH = new Set(['js', 'javascript', 'mjs', 'ts', 'typescript', 'jsx', 'tsx', 'c', 'h', 'cpp', 'c++', 'cc', 'hpp', 'java', 'go', 'rust', 'rs', 'swift', 'kotlin', 'kt', 'cs', 'csharp', 'scala', 'php', 'css', 'scss', 'json', 'jsonc', 'zig', 'dart', 'proto']);
const DASH = new Set(['sql', 'lua', 'haskell', 'hs']);

/**
 * Code as runs of {kind, text}, kind one of 'kw', 'str', 'com', 'num' or
 * null (plain): minimal highlighting for the languages agents write in;
 * an unknown language stays plain.
 */
export function highlight(code, lang) {
  const family = HASH.has(lang) ? 'hash' : SLASH.has(lang) ? 'slash' : DASH.has(lang) ? 'dash' : null;
  if (!family) return [{ kind: null, text: code }];
  const comment = { hash: '#[^\\n]*', slash: '//[^\\n]*|/\\*[\\s\\S]*?(?:\\*/|$)', dash: '--[^\\n]*' }[family];
  const strings = `"""[\\s\\S]*?(?:"""|$)|'''[\\s\\S]*?(?:'''|$)|"(?:\\\\.|[^"\\\\\\n])*"?|'(?:\\\\.|[^'\\\\\\n])*'?|\`(?:\\\\.|[^\`\\\\])*\`?`;
  const re = new RegExp(`(${comment})|(${strings})|(\\b(?:0[xX][\\da-fA-F_]+|\\d[\\d_]*(?:\\.\\d+)?(?:[eE][+-]?\\d+)?)\\b)|([A-Za-z_$][\\w$]*)`, 'g');
  const out = [];
  let last = 0;
  const add = (kind, text) => {
    if (!text) return;
    const prev = out.at(-1);
    if (prev && prev.kind === kind) prev.text += text; else out.push({ kind, text });
  };
  for (let m; (m = re.exec(code));) {
    add(null, code.slice(last, m.index));
    const word = m[4];
    const kind = m[1] ? 'com' : m[2] ? 'str' : m[3] ? 'num' : KEYWORDS.has(family === 'dash' ? word.toLowerCase() : word) ? 'kw' : null;
    add(kind, m[0]);
    last = m.index + m[0].length;
  }
  add(null, code.slice(last));
  return out;
}

/**
 * A git patch as runs of whole lines of one kind: 'add', 'del', 'hunk',
 * 'meta' (file headers) or 'context'; each run's text keeps its newlines.
 */
export function diffRuns(patch) {
  const runs = [];
  let inHunk = false;
  for (const line of patch.split(/(?<=\n)/)) {
    let kind;
    if (line.startsWith('diff ')) { inHunk = false; kind = 'meta'; }
    else if (line.startsWith('@@')) { inHunk = true; kind = 'hunk'; }
    else if (!inHunk) kind = 'meta';
    else kind = line[0] === '+' ? 'add' : line[0] === '-' ? 'del' : 'context';
    const prev = runs.at(-1);
    if (prev && prev.kind === kind) prev.text += line; else runs.push({ kind, text: line });
  }
  return runs;
}

/** Whether code in an unlabelled block reads as a patch. */
export function looksLikePatch(code) {
  return /^(diff --git |--- \S|@@ -\d)/m.test(code) && /^@@ -\d+(?:,\d+)? \+\d+/m.test(code);
}

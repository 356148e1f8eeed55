// The conversation: user and assistant messages, streamed text appended as
// it comes without laying out what is already shown.

import { h, button } from './dom.js';
import { $, ui } from './ui.js';
import { words } from './derive.js';
import { send } from './composer.js';
import { messageText, markdownNodes, MARKDOWN_MAX } from './rich.js';
import { settledEnd } from './markdown.js';

/** A message's element (kept in view.messages). */
export function messageElement(d, m) {
  const el = h('li', { class: `msg role-${m.role}`, dataset: { messageId: m.id, runId: m.runId, role: m.role } },
    h('div', { class: 'meta' }, m.role, ' ', h('span', { class: 'mstatus' })),
    h('div', { class: 'text md' }));
  el._status = el.querySelector('.mstatus');
  el._body = el.querySelector('.text');
  el._resend = null;
  setStatus(el, d, m);
  ui.view.messages.set(m.id, el);
  ui.view.grown?.observe(el);
  return el;
}

/**
 * Show `m`'s status on its element, and draw its text whole. The element
 * stays (a new one would be laid out at its placeholder size first, and
 * the pane would lose its place).
 */
function setStatus(el, d, m) {
  el.dataset.status = m.status;
  el._status.textContent = m.status === 'complete' ? '' : words(m.status);
  el._block = null;
  el._raw = [];
  if (m.status === 'streaming') {
    el._body.replaceChildren();
    el._live = m.role === 'assistant' ? { scanned: 0, fence: null, settled: 0, drawn: 0 } : null;
    appendStreaming(el, m.text);
    settle(el, m);
  } else {
    el._body.replaceChildren(messageText(m));
    el._live = null;
  }
  el._shown = m.text.length;
  const resend = m.status === 'not_sent' || m.status === 'cancelled';
  if (resend && !el._resend) el.append(el._resend = button('Send again', 'resend', () => send(d, m.text)));
  else if (!resend && el._resend) { el._resend.remove(); el._resend = null; }
}

/** Draw what changed in message `id`: new text, or a new status. */
export function renderMessage(d, id) {
  const { view } = ui;
  const m = d.messages.get(id);
  if (!m) return;
  const el = view.messages.get(id);
  if (!el && view.hiddenMessages.has(id)) return; // on an earlier page, drawn when that is shown
  if (!el) $('messages').append(messageElement(d, m));
  else if (el.dataset.status !== m.status) setStatus(el, d, m);
  else if (m.text.length > el._shown) {
    appendStreaming(el, m.text.slice(el._shown));
    el._shown = m.text.length;
    settle(el, m);
  }
}

/**
 * Add streamed text to a message without laying out what is already shown:
 * the text goes into blocks of a paragraph each (or about 2,000 characters of
 * one long paragraph, cut before a space), so a frame lays out only the last
 * block.
 */
const BLOCK = 2000;
function appendStreaming(el, piece) {
  for (const part of piece.split(/(?<=\n)/)) {
    if (!part) continue;
    if (!el._block || el._block.ended || (el._block.length > BLOCK && /^\s/.test(part))) {
      el._block = { el: h('span', { class: 'block' }), length: 0, ended: false };
      el._raw.push(el._block);
      el._body.append(el._block.el);
    }
    el._block.el.append(document.createTextNode(part));
    el._block.length += part.length;
    el._block.ended = part.endsWith('\n');
  }
}

/**
 * Draw what is settled of a streaming answer as Markdown: the text up to its
 * last blank line outside a code fence can no longer change its blocks, so
 * it becomes elements once, in place of the plain blocks that held it (each
 * ends at a line's end, as that text does); only the text after it stays
 * plain. When the answer ends it is drawn whole again.
 */
function settle(el, m) {
  const live = el._live;
  if (!live || m.text.length > MARKDOWN_MAX) return;
  const end = settledEnd(m.text, live);
  if (end <= live.drawn) return;
  const chunk = h('div', { class: 'block settled' }, markdownNodes(m.text.slice(live.drawn, end)));
  el._body.insertBefore(chunk, el._raw[0]?.el ?? null);
  for (let left = end - live.drawn; left > 0 && el._raw.length;) {
    const block = el._raw.shift();
    left -= block.length;
    block.el.remove();
  }
  if (!el._raw.length) el._block = null;
  live.drawn = end;
}

// How near its end (in pixels) the pane counts as at its end.
const FOLLOW_SLACK = 8;
const UP_KEYS = new Set(['ArrowUp', 'PageUp', 'Home']);
// Whether a pointer or a finger is down on the pane (its scrollbar, a text
// selection): set by the pane, cleared wherever it is let go.
const pointer = { down: false };
for (const type of ['pointerup', 'pointercancel', 'touchend', 'touchcancel']) window.addEventListener(type, () => { pointer.down = false; }, { passive: true });

/**
 * Keep the conversation pane `box` at its end while what it shows grows
 * (streamed text, a new message, blocks laid out late, the pane itself
 * shrinking as a request card appears), unless the person scrolled up:
 * then it stays where they put it until they scroll back to the end.
 */
export function followConversation(box) {
  const view = ui.view;
  view.follow = true;
  // Only the person stops the following: the page's own writes move the
  // pane too (a message laid out late can pull it up for a frame).
  let lastTop = box.scrollTop;
  box.addEventListener('wheel', (e) => { if (e.deltaY < 0) view.follow = false; }, { passive: true });
  box.addEventListener('keydown', (e) => { if (UP_KEYS.has(e.key)) view.follow = false; });
  for (const type of ['pointerdown', 'touchstart']) box.addEventListener(type, () => { pointer.down = true; }, { passive: true });
  box.addEventListener('scroll', () => {
    if (box.scrollHeight - box.scrollTop - box.clientHeight <= FOLLOW_SLACK) view.follow = true;
    else if (pointer.down && box.scrollTop < lastTop) view.follow = false;
    lastTop = box.scrollTop;
  }, { passive: true });
  // Sizes are known after layout; scroll in the next frame, not inside the
  // observer (scrolling lays out blocks that were skipped, which would
  // change sizes again within the same observation).
  let pending = 0;
  view.grown = new ResizeObserver(() => {
    if (!pending) pending = requestAnimationFrame(() => { pending = 0; stickToEnd(box); });
  });
  view.grown.observe(box);
  for (const el of view.messages.values()) view.grown.observe(el); // those drawn before: their size settles late too
  stickToEnd(box);
}

/** Scroll `box` to its end if the pane follows the conversation. */
export function stickToEnd(box) {
  if (ui.view.follow) box.scrollTop = box.scrollHeight;
}

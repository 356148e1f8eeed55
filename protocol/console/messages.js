// The conversation: user and assistant messages, streamed text appended as
// it comes without laying out what is already shown.

import { h, button } from './dom.js';
import { $, ui } from './ui.js';
import { words } from './derive.js';
import { send } from './composer.js';

/** A message's element (kept in view.messages). */
export function messageElement(d, m) {
  const text = document.createTextNode(m.text);
  const el = h('li', { class: `msg role-${m.role}`, dataset: { messageId: m.id, runId: m.runId, status: m.status, role: m.role } },
    h('div', { class: 'meta' }, m.role, ' ', h('span', { class: 'mstatus' }, m.status === 'complete' ? '' : words(m.status))),
    h('div', { class: 'text' }, text),
    m.status === 'not_sent' || m.status === 'cancelled' ? button('Send again', 'resend', () => send(d, m.text)) : null);
  el._body = el.querySelector('.text');
  el._shown = m.text.length;
  ui.view.messages.set(m.id, el);
  return el;
}

/** Draw what changed in message `id`: new text, or a new status. */
export function renderMessage(d, id) {
  const { view } = ui;
  const m = d.messages.get(id);
  if (!m) return;
  const el = view.messages.get(id);
  if (!el && view.hiddenMessages.has(id)) return; // on an earlier page, drawn when that is shown
  if (!el) $('messages').append(messageElement(d, m));
  else {
    if (m.text.length > el._shown) {
      appendStreaming(el, m.text.slice(el._shown));
      el._shown = m.text.length;
    }
    if (el.dataset.status !== m.status) el.replaceWith(messageElement(d, m));
  }
}

/**
 * Add streamed text to a message without laying out what is already shown:
 * the text goes into blocks of a paragraph each (or about 2,000 characters of
 * one long paragraph, cut before a space), so a frame lays out only the last
 * block. When the message ends it is drawn again as one text.
 */
const BLOCK = 2000;
function appendStreaming(el, piece) {
  for (const part of piece.split(/(?<=\n)/)) {
    if (!el._block || el._blockEnded || (el._blockLength > BLOCK && /^\s/.test(part))) {
      el._block = h('span', { class: 'block' });
      el._body.append(el._block);
      el._blockLength = 0;
    }
    el._block.append(document.createTextNode(part));
    el._blockLength += part.length;
    el._blockEnded = part.endsWith('\n');
  }
}

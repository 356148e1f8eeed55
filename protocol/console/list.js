// The thread list: roots newest first with their forks and delegated children
// under them, virtualized (only the rows in view exist), so 10,000 threads
// cost what 30 do.

import { h, ago } from './dom.js';
import { tokens } from './derive.js';

export const ROW_HEIGHT = 46;

/**
 * Threads in list order, each with its depth: children follow their parent.
 * Archived threads (issue 27) are left out unless `archived`; a child of one
 * left out is listed as a root.
 */
export function listOrder(threads, { archived = false } = {}) {
  const children = new Map();
  const roots = [];
  const hidden = (t) => !archived && Boolean(t.archivedAt);
  for (const t of threads.values()) {
    if (t.sideChat || hidden(t)) continue; // side chats show inside their parent only
    const parent = t.parentThreadId && threads.has(t.parentThreadId) && !hidden(threads.get(t.parentThreadId)) ? t.parentThreadId : null;
    if (parent) {
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(t);
    } else roots.push(t);
  }
  const byNewest = (a, b) => (b.createdAt - a.createdAt) || (a.id < b.id ? 1 : -1);
  const byOldest = (a, b) => (a.createdAt - b.createdAt) || (a.id < b.id ? -1 : 1);
  roots.sort(byNewest);
  const out = [];
  const stack = roots.reverse().map((t) => [t, 0]);
  while (stack.length) {
    const [t, depth] = stack.pop();
    out.push({ thread: t, depth });
    const kids = (children.get(t.id) ?? []).sort(byOldest);
    for (let i = kids.length - 1; i >= 0; i--) stack.push([kids[i], depth + 1]);
  }
  return out;
}

export class ThreadList {
  constructor(container, spacer, { onOpen, onNearEnd }) {
    this.container = container;
    this.spacer = spacer;
    this.onOpen = onOpen;
    this.onNearEnd = onNearEnd;
    this.rows = [];
    this.selectedId = null;
    this.rendered = new Map(); // index -> element
    container.addEventListener('scroll', () => this.render(), { passive: true });
    container.addEventListener('keydown', (e) => this.key(e));
  }

  setRows(rows) {
    this.rows = rows;
    this.index = new Map(rows.map((r, i) => [r.thread.id, i]));
    this.spacer.style.height = `${rows.length * ROW_HEIGHT}px`;
    this.clear();
  }

  clear() {
    for (const el of this.rendered.values()) el.remove();
    this.rendered.clear();
  }

  /** Render the rows in view (and a few around them). */
  render(changedIds = null) {
    if (changedIds) for (const [i, el] of this.rendered) if (changedIds.has(this.rows[i]?.thread.id)) { el.remove(); this.rendered.delete(i); }
    const top = this.container.scrollTop;
    const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - 5);
    const last = Math.min(this.rows.length, Math.ceil((top + this.container.clientHeight) / ROW_HEIGHT) + 5);
    for (const [i, el] of this.rendered) if (i < first || i >= last) { el.remove(); this.rendered.delete(i); }
    if (last > this.rows.length - 50) this.onNearEnd?.();
    for (let i = first; i < last; i++) if (!this.rendered.has(i)) {
      const el = this.row(this.rows[i], i);
      this.rendered.set(i, el);
      this.container.append(el);
    }
  }

  row({ thread: t, depth }, i) {
    const status = t.queueHeld ? `${t.status}, queue held` : t.status;
    const relation = t.relationshipToParent ? t.relationshipToParent.replaceAll('_', ' ') : '';
    const el = h('button', {
      type: 'button', class: 'thread-row', role: 'option', tabindex: '-1',
      'aria-selected': String(t.id === this.selectedId),
      dataset: { threadId: t.id, status: t.status, queueHeld: t.queueHeld ? 'true' : null, parentThreadId: t.parentThreadId, archived: t.archivedAt ? 'true' : null },
      onclick: () => this.onOpen(t.id),
    },
    h('span', { class: 'title' }, depth ? '↳ ' : '', t.title || t.id),
    h('span', { class: 'meta' },
      h('span', { class: `dot status-${t.status}` }), ` ${status} · ${t.provider}`,
      relation ? ` · ${relation}` : '', t.archivedAt ? h('span', { class: 'archived' }, ' · archived') : null, t.stalledRunId ? h('span', { class: 'stalled', dataset: { stalled: 'true' } }, ' · stalled') : null,
      t.usage ? ` · ${tokens(t.usage.inputTokens + t.usage.outputTokens)} tokens` : '', ` · ${ago(t.lastActivity ?? t.updatedAt)}`));
    // CSSOM, not a style attribute: the page's CSP allows no inline style.
    el.style.top = `${i * ROW_HEIGHT}px`;
    el.style.paddingLeft = `${0.6 + depth * 1.1}rem`;
    return el;
  }

  select(id, { focus = false } = {}) {
    this.selectedId = id;
    const i = this.index?.get(id);
    this.clear();
    if (i !== undefined) {
      const top = i * ROW_HEIGHT;
      if (top < this.container.scrollTop || top + ROW_HEIGHT > this.container.scrollTop + this.container.clientHeight) {
        this.container.scrollTop = top - this.container.clientHeight / 2;
      }
    }
    this.render();
    if (focus && i !== undefined) this.rendered.get(i)?.focus();
  }

  move(delta) {
    if (!this.rows.length) return;
    if (delta === Infinity) this.onNearEnd?.();
    const i = this.index.get(this.selectedId);
    const next = Math.max(0, Math.min(this.rows.length - 1, i === undefined ? 0 : i + delta));
    const id = this.rows[next].thread.id;
    this.select(id, { focus: true });
    this.onOpen(id);
  }

  key(e) {
    if (e.key === 'ArrowDown') { e.preventDefault(); this.move(1); }
    else if (e.key === 'ArrowUp') { e.preventDefault(); this.move(-1); }
    else if (e.key === 'Home') { e.preventDefault(); this.move(-Infinity); }
    else if (e.key === 'End') { e.preventDefault(); this.move(Infinity); }
  }
}

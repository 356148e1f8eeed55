// What the console's views share: the model, the open thread, the handles of
// the drawn thread view, and the entry's services (call, openThread,
// scheduleRender), which app.js fills in before anything is drawn. Views
// import this module, never app.js, so imports run one way: app.js → the
// views → ui.js, dom.js, derive.js, model.js.

import { h } from './dom.js';

export const $ = (id) => document.getElementById(id);

export const ui = {
  /** the Model (model.js) */
  model: null,
  /** the thread shown, or null */
  currentThreadId: null,
  /** providers.list's answer */
  providers: [],
  /** the drawn thread view: its root and per-record elements (thread-view.js builds it) */
  view: { root: null },
  /** call(method, params): the RPC, showing its error in the page */
  call: null,
  /** openThread(threadId) */
  openThread: null,
  /** scheduleRender(): draw what the model marks dirty, at the next frame */
  scheduleRender: null,
};

/** A link that opens thread `id` in the page, named by its title. */
export function threadLink(id, label) {
  const t = ui.model.threads.get(id);
  return h('a', { href: `#thread=${id}`, dataset: { threadId: id }, onclick: (e) => { e.preventDefault(); ui.openThread(id); } }, label ?? t?.title ?? id);
}

// Agent text and patches as DOM nodes: text is only ever placed with text
// nodes (never innerHTML), whatever it contains.

import { h } from './dom.js';

/** A patch in a <pre>. */
export function patchElement(patch, attrs = {}) {
  return h('pre', attrs, patch);
}

/** A message's text as shown once it is no longer streaming. */
export function messageText(m) {
  return document.createTextNode(m.text);
}

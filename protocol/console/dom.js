// A tiny element builder: h('button', {type: 'button', dataset: {runId}}, 'Stop').

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'dataset') Object.assign(el.dataset, Object.fromEntries(Object.entries(value).filter(([, v]) => v != null)));
    else if (key === 'class') el.className = value;
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (value === true) el.setAttribute(key, '');
    else el.setAttribute(key, value);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** A labelled action button; `action` is also its data-action hook. */
export function button(label, action, onclick, { dataset = {}, ...attrs } = {}) {
  return h('button', { type: 'button', ...attrs, dataset: { action, ...dataset }, onclick }, label);
}

export function badge(status) {
  return h('span', { class: `badge status-${status}`, dataset: { status } }, status.replaceAll('_', ' '));
}

export function ago(seconds) {
  if (!seconds) return '';
  const d = Date.now() / 1000 - seconds;
  if (d < 60) return 'just now';
  if (d < 3600) return `${Math.floor(d / 60)} min ago`;
  if (d < 86400) return `${Math.floor(d / 3600)} h ago`;
  return new Date(seconds * 1000).toLocaleDateString();
}

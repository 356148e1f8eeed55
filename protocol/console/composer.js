// The composer: a message with how to dispatch it (start or queue, steer,
// restart), the provider, a clean context and a fork to merge back.

import { h } from './dom.js';
import { $, ui } from './ui.js';
import { forksOf } from './derive.js';

/** The composer form of thread `d`. */
export function composer(d) {
  const form = h('form', { id: 'composer', class: 'composer', 'aria-label': 'Send a message' },
    h('label', { class: 'sr-only', for: 'composer-text' }, 'Message'),
    h('textarea', { id: 'composer-text', name: 'text', rows: '3', placeholder: 'Message (Ctrl+Enter sends)', required: true }),
    h('div', { class: 'composer-options' },
      h('label', {}, 'How ', h('select', { name: 'mode', id: 'composer-mode' },
        h('option', { value: 'auto' }, 'start or queue'),
        h('option', { value: 'queue_after_active' }, 'queue'),
        h('option', { value: 'steer_active' }, 'steer the active run'),
        h('option', { value: 'restart_active' }, 'restart the active run'))),
      h('label', {}, 'Provider ', h('select', { name: 'provider', class: 'provider-select', id: 'composer-provider' })),
      h('label', {}, h('input', { type: 'checkbox', name: 'cleanContext' }), ' clean context'),
      h('label', {}, 'Merge back ', h('select', { name: 'mergeBack', id: 'composer-merge' }, h('option', { value: '' }, 'nothing'))),
      h('button', { type: 'submit', dataset: { action: 'send' } }, 'Send')));
  form.addEventListener('submit', (e) => { e.preventDefault(); send(d); });
  form.elements.text.addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send(d); } });
  fillProviders(form.elements.provider, d.thread?.provider);
  return form;
}

/** Offer the thread's current forks to merge back (they change only with the thread list). */
export function renderComposerState(d) {
  const merge = $('composer-merge');
  if (!merge) return;
  const forks = forksOf(ui.model.threads, d.id);
  if (merge.options.length !== forks.length + 1) {
    merge.replaceChildren(h('option', { value: '' }, 'nothing'), ...forks.map((t) => h('option', { value: t.id }, t.title || t.id)));
  }
}

/** Send the composer's message (or `again`, a message's text sent anew) as the form says. */
export async function send(d, again = null) {
  const form = $('composer');
  const text = again ?? form.elements.text.value;
  if (!text.trim()) { form.elements.text.focus(); return; }
  const params = { threadId: d.id, text };
  const mode = form.elements.mode.value;
  const active = d.thread.activeRunId;
  if (mode === 'steer_active' || mode === 'restart_active') params.dispatchMode = { type: mode, targetRunId: active };
  else if (mode === 'queue_after_active') params.dispatchMode = { type: mode };
  const provider = form.elements.provider.value;
  if (provider && provider !== d.thread.provider) params.provider = provider;
  if (form.elements.cleanContext.checked) params.cleanContext = true;
  if (form.elements.mergeBack.value) params.mergeBack = { forkThreadId: form.elements.mergeBack.value };
  try {
    await ui.call('thread.message.send', params);
  } catch { return; }
  if (!again) form.elements.text.value = '';
  form.elements.mode.value = 'auto';
  form.elements.cleanContext.checked = false;
  form.elements.mergeBack.value = '';
}

/** How the picker names a provider instance: an ACP one by the agent its `initialize` named. */
export function providerLabel(p) {
  const agent = p.agent ? `${p.agent.title || p.agent.name}${p.agent.version ? ` ${p.agent.version}` : ''}, ` : '';
  return `${p.name} (${agent}${p.kind})${p.usable ? '' : ' — unusable'}`;
}

/** Fill `select` (else every provider select of the page) with the providers, keeping its choice. */
export function fillProviders(select = null, current = null) {
  const selects = select ? [select] : document.querySelectorAll('.provider-select');
  for (const s of selects) {
    const keep = s.value || current || ui.model.details.get(ui.currentThreadId)?.thread?.provider;
    s.replaceChildren(...ui.providers.map((p) => h('option', { value: p.name, disabled: !p.usable }, providerLabel(p))));
    if (keep) s.value = keep;
  }
}

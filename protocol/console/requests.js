// Approvals and questions waiting on the person: the thread's own and its
// delegated children's, each a card with its answer buttons or form.

import { h, button } from './dom.js';
import { $, ui, threadLink } from './ui.js';
import { pendingRequests } from './derive.js';

export function renderRequests(d) {
  const box = $('requests');
  if (!box) return;
  box.replaceChildren(...pendingRequests(d).map((r) => requestCard(d, r)));
}

function requestCard(d, r) {
  const elsewhere = r.threadId !== d.id ? h('p', { class: 'muted' }, 'from ', threadLink(r.threadId)) : null;
  if (r.kind === 'approval') {
    const what = r.detail?.command ?? r.detail?.title ?? JSON.stringify(r.detail);
    return h('div', { class: 'request approval', role: 'group', 'aria-label': 'Approval', dataset: { requestId: r.id, runId: r.runId, nodeId: r.nodeId, kind: 'approval' } },
      h('strong', {}, `Approval${r.detail?.kind ? ` (${r.detail.kind})` : ''}: `), h('code', {}, what), elsewhere,
      h('div', { class: 'actions' },
        button('Approve', 'approve', () => respond(r, 'accept'), { 'aria-keyshortcuts': 'a', title: 'Approve (a)' }),
        // Only where the provider offers it (Codex's, an ACP agent's "allow always", …).
        r.decisions?.includes('acceptForSession')
          ? button('Allow for session', 'approve-session', () => respond(r, 'acceptForSession'),
            { title: 'Approve this and the same again for the rest of the provider session' })
          : null,
        button('Deny', 'deny', () => respond(r, 'decline'), { 'aria-keyshortcuts': 'd', title: 'Deny (d)' })));
  }
  const questions = r.detail?.questions ?? [];
  const form = h('form', { class: 'request questions', dataset: { requestId: r.id, runId: r.runId, nodeId: r.nodeId, kind: 'user_input' } },
    h('strong', {}, 'Questions'), elsewhere,
    questions.map((q) => h('label', {}, q.question,
      q.options?.length
        ? h('select', { name: q.id, dataset: { questionId: q.id } }, q.options.map((o) => h('option', { value: String(o) }, String(o))))
        : h('input', { name: q.id, required: true, autocomplete: 'off', dataset: { questionId: q.id } }))),
    h('div', { class: 'actions' }, h('button', { type: 'submit', dataset: { action: 'answer' } }, 'Answer')));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const answers = Object.fromEntries(questions.map((q) => [q.id, form.elements[q.id].value]));
    ui.call('user-input.respond', { requestId: r.id, answers }).then(() => markAnswered(r)).catch(() => {});
  });
  return form;
}

/** Answer an approval (`accept`, `acceptForSession` where offered, or `decline`). */
export function respond(r, decision) {
  ui.call('approval.respond', { requestId: r.id, decision }).then(() => markAnswered(r)).catch(() => {});
}

function markAnswered(r) {
  r.status = 'resolved'; // the approval.resolved event says so too; the card goes at once
  ui.model.dirty.requests = true;
  ui.scheduleRender();
}

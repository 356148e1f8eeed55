// The thread's progress view above the conversation: its latest todo list
// and the proposed plans still to decide on, with their Implement buttons.

import { h, button } from './dom.js';
import { $, ui } from './ui.js';
import { shownArtifacts, stepMark } from './derive.js';
import { markdownNodes } from './rich.js';

export function renderArtifacts(d) {
  const box = $('artifacts');
  if (!box) return;
  const { todo, plans } = shownArtifacts(d);
  box.replaceChildren(...[
    todo ? h('div', { class: 'todo', dataset: { artifactId: todo.id, runId: todo.runId } },
      h('strong', {}, `Todo (${todo.status})`),
      h('ul', {}, (todo.steps ?? []).map((s) => h('li', { dataset: { status: s.status } }, `${stepMark(s.status)} ${s.step}`)))) : null,
    ...plans.map((p) => h('div', { class: 'plan', dataset: { artifactId: p.id, runId: p.runId, status: p.status } },
      h('strong', {}, `Proposed plan (${p.status})`), h('div', { class: 'plan-text md' }, markdownNodes(p.text ?? '')),
      p.status === 'proposed' ? h('div', { class: 'actions' },
        button('Implement', 'implement', () => ui.call('plan.implement', { planId: p.id, mode: 'new_run' }).catch(() => {})),
        button('Implement in a new thread', 'implement-thread', () => ui.call('plan.implement', { planId: p.id, mode: 'new_thread' }).then((r) => ui.openThread(r.threadId)).catch(() => {}))) : null)),
  ].filter(Boolean));
}

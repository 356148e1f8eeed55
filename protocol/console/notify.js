// Desktop notifications (issue 28): when a run ends, fails or stalls, or an
// approval or a question waits, while the page is in the background. The
// browser asks the person first; the "Notify me" button asks (a permission
// prompt needs a click), and only a grant makes the page show any.

import { notificationFor } from './derive.js';
import { $, ui } from './ui.js';

const supported = () => typeof Notification !== 'undefined';

/** Show the "Notify me" button while the browser has not been asked yet. */
export function offerNotifications() {
  const el = $('notify');
  if (!el) return;
  const state = supported() ? Notification.permission : 'unsupported';
  el.hidden = state !== 'default';
  el.dataset.permission = state;
  el.onclick = async () => {
    try { await Notification.requestPermission(); } catch { /* an old browser without the promise form */ }
    offerNotifications();
  };
}

/** Notify of `ev` (an applied stored event) if it deserves it and the page is hidden. */
export function notifyOf(ev) {
  if (!supported() || Notification.permission !== 'granted' || document.visibilityState !== 'hidden') return;
  const shown = notificationFor(ev, ui.model.threads.get(ev.threadId)?.title);
  if (!shown) return;
  const note = new Notification(shown.title, { body: shown.body, tag: shown.tag });
  note.onclick = () => { window.focus(); ui.openThread?.(ev.threadId); note.close(); };
}

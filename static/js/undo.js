// Actions that wait a few seconds before they happen, with an Undo button in a toast meanwhile
// (deleting a memory). A pending action is never lost: leaving the page (reload, closing the tab,
// hiding it on a phone) or calling `flushPending()` sends it at once, and what is sent while the
// page goes away is sent with `keepalive` so the browser finishes the request on its own.

import { announce, el } from "./dom.js";

export const UNDO_DELAY_MS = 6000;

const pending = new Set();

/**
 * Do `run({keepalive})` in `delayMs` unless Undo is pressed first; `onUndo()` puts things back on
 * screen. Returns a promise that settles once the action ran (its result) or was undone (null).
 */
export function deferWithUndo({ text, run, onUndo = () => {}, delayMs = UNDO_DELAY_MS }) {
  const box = document.getElementById("toasts");
  const undo = el("button", { type: "button", class: "toast-action", text: "Undo" });
  const item = el("div", { class: "toast toast-undo", role: "status" }, el("span", { text }), undo);
  box.append(item);
  announce(`${text}. Undo is at the bottom of the screen.`);

  let settle;
  let fail;
  const result = new Promise((resolve, reject) => {
    settle = resolve;
    fail = reject;
  });
  const action = {
    done: false,
    async fire(options = {}) {
      if (action.done) return;
      finish();
      try {
        settle(await run(options));
      } catch (error) {
        fail(error);
      }
    },
  };
  const timer = setTimeout(() => action.fire(), delayMs);
  function finish() {
    action.done = true;
    clearTimeout(timer);
    pending.delete(action);
    item.remove();
  }
  undo.addEventListener("click", () => {
    if (action.done) return;
    finish();
    onUndo();
    announce("Undone");
    settle(null);
  });
  pending.add(action);
  return result;
}

/** Send every pending action now (before an export, or when its page is left). */
export function flushPending(options = {}) {
  return Promise.allSettled([...pending].map((action) => action.fire(options)));
}

export const hasPending = () => pending.size > 0;

// The page is going away (or may be, once hidden on a phone): nothing waits any more.
window.addEventListener("pagehide", () => flushPending({ keepalive: true }));
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "hidden") flushPending({ keepalive: true });
});

// Modal dialogs on <dialog>: the browser traps focus, closes on Esc and puts focus back where it
// was, which a hand-made overlay would have to reimplement.

import { api } from "./api.js";
import { el } from "./dom.js";

/** Ask before doing something that cannot be undone; resolves true only on the confirm button. */
export function confirmDialog({ title, text, confirm = "OK" }) {
  const dialog = document.getElementById("confirm-dialog");
  const ok = document.getElementById("confirm-ok");
  const cancel = document.getElementById("confirm-cancel");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  ok.textContent = confirm;
  return new Promise((resolve) => {
    const done = (answer) => {
      ok.removeEventListener("click", onOk);
      cancel.removeEventListener("click", onCancel);
      dialog.removeEventListener("close", onClose);
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    const onOk = () => done(true);
    const onCancel = () => done(false);
    const onClose = () => done(false); // Esc
    ok.addEventListener("click", onOk);
    cancel.addEventListener("click", onCancel);
    dialog.addEventListener("close", onClose);
    dialog.showModal();
    cancel.focus(); // the safe choice has focus, so a stray Enter deletes nothing
  });
}

/**
 * Show the chat's rolling summary: what the assistant keeps in mind of the older messages.
 * `messages` (the chat's saved messages) lets it say how much of the chat the summary covers.
 */
export async function showSummary(chatId, messages) {
  const dialog = document.getElementById("summary-dialog");
  const meta = document.getElementById("summary-meta");
  const body = document.getElementById("summary-text");
  meta.textContent = "";
  body.replaceChildren(el("p", { class: "muted", text: "Loading the summary…" }));
  if (!dialog.open) dialog.showModal();
  document.getElementById("summary-close").focus();
  try {
    const { summary, summary_upto_message_id: upto } = await api.summary(chatId);
    if (!summary) {
      body.replaceChildren(
        el("p", { class: "muted", text: "This chat has no summary yet. Once it grows past a dozen messages, the older ones are summarised here so the assistant keeps them in mind while it sees only the latest messages word for word." }),
      );
      return;
    }
    const index = messages.findIndex((m) => m.message_id === upto);
    meta.textContent = index >= 0
      ? `Covers the first ${index + 1} of ${messages.length} messages; the assistant reads the rest word for word.`
      : "What the assistant keeps in mind of the earlier messages.";
    // Plain text (it is model output): paragraphs split on blank lines.
    body.replaceChildren(...summary.split(/\n\s*\n/).map((part) => el("p", { text: part.trim() })));
  } catch (error) {
    body.replaceChildren(el("p", { class: "error-text", text: `Could not load the summary: ${error.message}` }));
  }
}

export function setupSummaryDialog() {
  const dialog = document.getElementById("summary-dialog");
  document.getElementById("summary-close").addEventListener("click", () => dialog.close());
  // A click on the backdrop (outside the dialog's box) closes it too.
  dialog.addEventListener("click", (event) => {
    if (event.target !== dialog) return;
    const box = dialog.getBoundingClientRect();
    const inside = event.clientX >= box.left && event.clientX <= box.right
      && event.clientY >= box.top && event.clientY <= box.bottom;
    if (!inside) dialog.close();
  });
}

// Modal dialogs on <dialog>: the browser traps focus, closes on Esc and puts focus back where it
// was, which a hand-made overlay would have to reimplement.

import { api } from "./api.js";
import { el } from "./dom.js";

/**
 * Ask before doing something that cannot be undone. Resolves `{confirmed, checked}`: `confirmed`
 * only on the confirm button; `checked` is the state of the optional `checkbox` (its label; the
 * box starts unticked), so a dialog can offer "and also…" without a second question.
 */
export function confirmDialog({ title, text, confirm = "OK", checkbox = null }) {
  const dialog = document.getElementById("confirm-dialog");
  const ok = document.getElementById("confirm-ok");
  const cancel = document.getElementById("confirm-cancel");
  const option = document.getElementById("confirm-option");
  const box = document.getElementById("confirm-check");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-check-label").textContent = checkbox || "";
  option.hidden = !checkbox;
  box.checked = false;
  ok.textContent = confirm;
  return new Promise((resolve) => {
    const done = (confirmed) => {
      ok.removeEventListener("click", onOk);
      cancel.removeEventListener("click", onCancel);
      dialog.removeEventListener("close", onClose);
      if (dialog.open) dialog.close();
      resolve({ confirmed, checked: Boolean(checkbox) && confirmed && box.checked });
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
        el("p", { class: "muted", text: "This chat has no summary yet. Once it has 20 messages, the oldest 10 are summarised here (and 10 more each time 10 more come), so the assistant keeps them in mind while it reads the newer ones word for word." }),
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
  closeOnBackdrop(dialog);
}

/** A click on the backdrop (outside the dialog's box) closes the dialog. */
export function closeOnBackdrop(dialog) {
  dialog.addEventListener("click", (event) => {
    if (event.target !== dialog) return;
    const box = dialog.getBoundingClientRect();
    const inside = event.clientX >= box.left && event.clientX <= box.right
      && event.clientY >= box.top && event.clientY <= box.bottom;
    if (!inside) dialog.close();
  });
}

// Documents attached from the composer: the paperclip button, a file dropped onto the chat or
// pasted into the message box. Each file is uploaded (with the chat's id, in a chat) and shows as
// a chip above the message box with its live status, polled while the server reads it:
// "Converting…", "Embedding 12/40", "Ready · 4 pages", or why it could not be read (in red).
//
// File names and errors are set as text.

import { api, uploadDocument } from "./api.js";
import { describeStatus } from "./documents.js";
import { announce, el, icon } from "./dom.js";

const POLL_MS = 1000;

/** `chatId()`: the chat shown (null on the new-chat draft), which an upload is attached to;
 *  `onChange()`: a document was added or changed state (the Documents page may show it);
 *  `onState({reading, failed, cleared})`: the names of the chips still busy, and of those that
 *  failed (`cleared`: all were dropped for another chat). */
export function createAttachments({ chatId = () => null, onChange = () => {}, onState = () => {} } = {}) {
  const list = document.getElementById("attachments");
  const button = document.getElementById("attach");
  const input = document.getElementById("attach-input");
  const box = document.getElementById("composer-input");
  const chips = new Set();

  button.addEventListener("click", () => input.click());
  input.addEventListener("change", () => {
    const files = [...input.files];
    input.value = ""; // the same file again is a new choice
    add(files);
  });
  box.addEventListener("paste", (event) => {
    const files = [...(event.clipboardData?.files || [])];
    if (!files.length) return;
    // Cells copied from a spreadsheet or a page come as text plus a picture of them: that is
    // text to paste, not a file to upload.
    const hasText = Boolean(event.clipboardData.getData("text/plain"));
    if (hasText && files.every((file) => file.type.startsWith("image/"))) return;
    event.preventDefault();
    add(files);
  });

  /** Upload these files, each with a chip. */
  function add(files) {
    const target = chatId();
    for (const file of files) upload(file, target);
  }

  function sync(cleared = false) {
    list.hidden = chips.size === 0;
    const named = (test) => [...chips].filter(test).map((chip) => chip.filename);
    onState({ reading: named((chip) => chip.busy), failed: named((chip) => chip.failed), cleared });
  }

  function upload(file, target) {
    const chip = new Chip(
      file.name,
      (gone) => {
        chips.delete(gone);
        sync();
        box.focus();
      },
      sync,
    );
    chips.add(chip);
    list.append(chip.root);
    sync();
    uploadDocument(file, target).then(
      ({ document: doc, existing }) => {
        chip.existing = existing;
        chip.update(doc);
        onChange();
        if (doc.status === "processing") chip.poll(onChange);
        else announce(`${doc.filename}: ${describeStatus(doc).text}`);
      },
      (error) => {
        chip.failUpload(error.message || String(error));
        announce(`Could not upload ${file.name}`);
      },
    );
  }

  return {
    add,
    /** Another chat is shown: its composer starts without chips. */
    clear() {
      for (const chip of [...chips]) chip.remove();
      sync(true);
    },
    /** A message is sent: the documents read go with it (returned as `{document_id, filename}`,
     *  for the reply to read them); a message waits while any is being read (composer.js). */
    sent() {
      const going = [];
      for (const chip of [...chips]) {
        if (chip.busy) continue;
        if (chip.root.dataset.status === "ready") going.push({ document_id: chip.documentId, filename: chip.filename });
        chip.remove();
      }
      return going;
    },
  };
}

class Chip {
  constructor(filename, onRemoved, onUpdated) {
    this.filename = filename;
    this.onRemoved = onRemoved;
    this.onUpdated = onUpdated;
    this.existing = false;
    this.busy = true;
    this.failed = false;
    this.timer = 0;
    this.removed = false;
    this.name = el("span", { class: "attachment-name", text: filename, title: filename });
    this.status = el("span", { class: "attachment-status", text: "Uploading…" });
    this.progress = el("progress", { class: "attachment-progress", hidden: true });
    this.close = el(
      "button",
      { type: "button", class: "attachment-remove", "aria-label": `Hide ${filename}`, title: "Hide (the document stays on the Documents page)" },
      icon("close"),
    );
    this.close.addEventListener("click", () => this.remove());
    this.root = el(
      "li",
      { class: "attachment busy", dataset: { status: "uploading" } },
      icon("file"),
      el("span", { class: "attachment-text" }, this.name, this.status, this.progress),
      this.close,
    );
  }

  update(doc) {
    this.documentId = doc.document_id;
    this.filename = doc.filename;
    this.name.textContent = doc.filename;
    this.name.title = doc.filename;
    this.close.setAttribute("aria-label", `Hide ${doc.filename}`);
    const state = describeStatus(doc);
    this.busy = state.kind === "busy";
    this.status.textContent = this.existing ? `${state.text} · already in your documents` : state.text;
    if (state.kind === "failed") this.status.setAttribute("role", "alert");
    else this.status.removeAttribute("role"); // the end is announced, not every step
    this.progress.hidden = !state.total;
    if (state.total) {
      this.progress.max = state.total;
      this.progress.value = state.done;
    }
    this.failed = state.kind === "failed";
    this.root.className = `attachment ${state.kind}`;
    this.root.dataset.status = doc.status;
    this.root.dataset.documentId = doc.document_id;
    this.onUpdated();
  }

  failUpload(message) {
    this.busy = false;
    this.failed = true;
    this.status.textContent = message;
    this.status.setAttribute("role", "alert");
    this.progress.hidden = true;
    this.root.className = "attachment failed";
    this.root.dataset.status = "rejected";
    this.onUpdated();
  }

  /** Ask for the document's status every second until it is read (or fails). */
  poll(onChange) {
    const tick = async () => {
      if (this.removed) return;
      let doc;
      try {
        doc = await api.document(this.documentId);
      } catch (error) {
        if (this.removed) return;
        if (error.status === 404) {
          this.failUpload("This document was deleted.");
          return;
        }
        this.timer = setTimeout(tick, POLL_MS * 3); // the server is busy or away: try again
        return;
      }
      if (this.removed) return;
      const was = this.root.dataset.status;
      this.update(doc);
      if (doc.status === "processing") {
        this.timer = setTimeout(tick, POLL_MS);
        return;
      }
      if (was !== doc.status) {
        onChange();
        announce(`${doc.filename}: ${describeStatus(doc).text}`);
      }
    };
    this.timer = setTimeout(tick, POLL_MS);
  }

  remove() {
    if (this.removed) return;
    this.removed = true;
    clearTimeout(this.timer);
    this.root.remove();
    this.onRemoved(this);
  }
}

// The Documents page (#/documents): the user's files, newest first, each with its size, pages,
// passages and status (with progress while it is read, or why it could not be); rename (inline),
// download the original, re-index, cancel (while it is read) and delete (after asking). The list
// is read again every second while a document is being processed.
//
// File names and errors are set as text.

import { api, uploadDocument } from "./api.js";
import { confirmDialog } from "./dialogs.js";
import { describeStatus, formatSize } from "./documents.js";
import { announce, el, icon, toast } from "./dom.js";

const POLL_MS = 1000;
const MAX_NAME = 255;

export function createDocumentsPage() {
  const list = document.getElementById("document-list");
  const count = document.getElementById("documents-count");
  const uploadButton = document.getElementById("documents-upload");
  const input = document.getElementById("documents-input");
  const state = { docs: [], visible: false, ticket: 0, timer: 0, renaming: null, loaded: false };

  async function load() {
    clearTimeout(state.timer);
    const ticket = ++state.ticket;
    list.setAttribute("aria-busy", "true");
    try {
      const docs = await api.documents();
      if (ticket !== state.ticket) return;
      state.docs = docs;
      state.loaded = true;
      render();
      if (state.visible && docs.some((d) => d.status === "processing")) {
        state.timer = setTimeout(load, POLL_MS);
      }
    } catch (error) {
      if (ticket !== state.ticket) return;
      count.textContent = "";
      list.replaceChildren(el("li", { class: "memory-note error-text", role: "alert", text: `Could not load your documents: ${error.message}` }));
    } finally {
      if (ticket === state.ticket) list.setAttribute("aria-busy", "false");
    }
  }

  function render() {
    const docs = state.docs;
    if (state.renaming && !docs.some((d) => d.document_id === state.renaming.id)) state.renaming = null;
    count.textContent = docs.length ? `${docs.length} ${docs.length === 1 ? "document" : "documents"}` : "";
    if (!docs.length) {
      list.replaceChildren(emptyNote());
      return;
    }
    // A re-render (the poll, say) keeps the keyboard on the same button and the rename's typing.
    const focused = document.activeElement?.closest?.("#document-list [data-action]");
    const keep = focused && { id: focused.closest(".document-item")?.dataset.documentId, action: focused.dataset.action };
    const typing = state.renaming?.input === document.activeElement;
    list.replaceChildren(...docs.map(itemView));
    if (keep) focusAction(keep.id, keep.action);
    if (typing) state.renaming.input.focus();
  }

  function focusAction(documentId, action) {
    const item = list.querySelector(`.document-item[data-document-id="${CSS.escape(documentId || "")}"]`);
    const target = item?.querySelector(`[data-action="${action}"]`) || item?.querySelector("[data-action]");
    target?.focus();
    return Boolean(target);
  }

  function emptyNote() {
    return el(
      "li",
      { class: "memory-empty documents-empty" },
      icon("file"),
      el("h2", { text: "No documents yet" }),
      el("p", { text: "Upload a PDF, Word, PowerPoint or Excel file, a CSV, an HTML page, Markdown or plain text, and I answer from it, citing the page." }),
      el("p", { class: "muted", text: "Attach one in any chat with the paperclip next to “Use web tool”, drop it onto the chat, or use Upload above." }),
    );
  }

  function itemView(doc) {
    const status = describeStatus(doc);
    const item = el("li", { class: `document-item ${status.kind}`, dataset: { documentId: doc.document_id, status: doc.status } });
    const body = el("div", { class: "document-body" });
    if (state.renaming?.id === doc.document_id) body.append(state.renaming.input);
    else body.append(el("p", { class: "document-name", text: doc.filename, title: doc.filename }));
    body.append(el("p", { class: "document-meta", text: metaLine(doc) }));
    // Ready: the meta line above says how many pages and passages.
    const statusText = status.kind === "ready" ? "Ready" : status.text;
    const statusLine = el("p", { class: `document-status status-${status.kind}` }, el("span", { class: "document-status-text", text: statusText }));
    if (status.kind === "failed") statusLine.setAttribute("role", "alert");
    if (status.total) statusLine.append(el("progress", { class: "document-progress", max: String(status.total), value: String(status.done), "aria-label": `${doc.filename}: ${status.text}` }));
    else if (status.kind === "busy") statusLine.prepend(el("span", { class: "spinner", "aria-hidden": "true" }));
    body.append(statusLine);
    item.append(el("span", { class: "document-icon" }, icon("file")), body, actions(doc, status));
    return item;
  }

  function metaLine(doc) {
    const parts = [formatSize(doc.size_bytes)];
    if (doc.pages) parts.push(`${doc.pages.toLocaleString()} ${doc.pages === 1 ? "page" : "pages"}`);
    if (doc.status === "ready") parts.push(`${(doc.chunks || 0).toLocaleString()} ${doc.chunks === 1 ? "passage" : "passages"}`);
    const added = formatDate(doc.created_at);
    if (added) parts.push(`added ${added}`);
    return parts.filter(Boolean).join(" · ");
  }

  function actionButton(action, label, iconName, onClick, text = null) {
    const button = el(
      "button",
      { type: "button", class: text ? "secondary-button small" : "icon-button small", "aria-label": label, title: label, dataset: { action } },
      icon(iconName),
      text ? el("span", { text }) : null,
    );
    button.addEventListener("click", () => onClick(button));
    return button;
  }

  function actions(doc, status) {
    const box = el("div", { class: "document-actions" });
    if (status.kind === "busy") {
      box.append(actionButton("cancel", `Cancel processing ${doc.filename}`, "stop", () => cancel(doc), "Cancel"));
    } else {
      box.append(actionButton("reindex", `Re-index ${doc.filename}`, "retry", () => reindex(doc)));
    }
    box.append(
      actionButton("rename", `Rename ${doc.filename}`, "pencil", () => startRename(doc)),
      el(
        "a",
        { class: "icon-button small", href: api.documentFileUrl(doc.document_id), download: doc.filename, "aria-label": `Download ${doc.filename}`, title: `Download ${doc.filename}`, dataset: { action: "download" } },
        icon("download"),
      ),
      actionButton("delete", `Delete ${doc.filename}`, "trash", (button) => remove(doc, button)),
    );
    return box;
  }

  function replace(updated) {
    state.docs = state.docs.map((d) => (d.document_id === updated.document_id ? updated : d));
  }

  // --- actions ----------------------------------------------------------------------------------

  function startRename(doc) {
    const input = el("input", { type: "text", class: "rename-input document-rename", "aria-label": "New file name", maxlength: String(MAX_NAME), spellcheck: "false" });
    input.value = doc.filename;
    state.renaming = { id: doc.document_id, input };
    render();
    input.focus();
    // The name without its extension is what people change.
    const dot = doc.filename.lastIndexOf(".");
    input.setSelectionRange(0, dot > 0 ? dot : doc.filename.length);
    let finished = false;
    const finish = async (save) => {
      if (finished) return;
      finished = true;
      const name = input.value.replace(/\s+/g, " ").trim();
      if (save && name && name !== doc.filename) {
        try {
          const updated = await api.renameDocument(doc.document_id, name);
          replace(updated);
          announce(`Renamed to ${updated.filename}`);
        } catch (error) {
          toast(`Could not rename the document: ${error.message}`, "error");
        }
      }
      if (state.renaming?.input === input) state.renaming = null;
      render();
      focusAction(doc.document_id, "rename");
    };
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        finish(true);
      } else if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        finish(false);
      }
    });
    input.addEventListener("blur", () => {
      // A re-render moves the input (it keeps focus right after); only a real blur saves.
      setTimeout(() => {
        if (document.activeElement !== input) finish(true);
      }, 0);
    });
  }

  async function remove(doc, button) {
    const { confirmed } = await confirmDialog({
      title: "Delete this document?",
      text: `“${doc.filename}” and its passages will be deleted; I will no longer answer from it. Replies that cited it keep the passages they quoted. This cannot be undone.`,
      confirm: "Delete",
    });
    if (!confirmed) {
      button.focus();
      return;
    }
    const at = state.docs.findIndex((d) => d.document_id === doc.document_id);
    try {
      await api.removeDocument(doc.document_id);
    } catch (error) {
      if (error.status !== 404) {
        toast(`Could not delete the document: ${error.message}`, "error");
        return;
      }
    }
    state.docs = state.docs.filter((d) => d.document_id !== doc.document_id);
    render();
    announce(`Deleted ${doc.filename}`);
    const next = state.docs[Math.min(at, state.docs.length - 1)];
    if (!next || !focusAction(next.document_id, "delete")) uploadButton.focus();
  }

  async function reindex(doc) {
    try {
      replace(await api.reindexDocument(doc.document_id));
      announce(`Reading ${doc.filename} again`);
    } catch (error) {
      toast(`Could not re-index the document: ${error.message}`, "error");
    }
    render();
    focusAction(doc.document_id, "cancel");
    if (state.visible) load();
  }

  async function cancel(doc) {
    try {
      replace(await api.cancelDocument(doc.document_id));
      announce(`Stopped reading ${doc.filename}`);
    } catch (error) {
      // 409: it finished (or failed) meanwhile; the list says how.
      if (error.status !== 409) toast(`Could not cancel: ${error.message}`, "error");
    }
    await load();
    focusAction(doc.document_id, "reindex");
  }

  // --- upload from the page ---------------------------------------------------------------------

  async function upload(files) {
    const uploads = [...files].map(async (file) => {
      try {
        const { document: doc, existing } = await uploadDocument(file);
        if (existing) toast(`“${doc.filename}” is already in your documents.`);
      } catch (error) {
        toast(`Could not upload ${file.name}: ${error.message}`, "error");
      }
    });
    await Promise.all(uploads);
    if (state.visible) await load();
  }

  uploadButton.addEventListener("click", () => input.click());
  input.addEventListener("change", () => {
    const files = [...input.files];
    input.value = "";
    upload(files);
  });

  return {
    show() {
      state.visible = true;
      return load();
    },
    hide() {
      state.visible = false;
      state.renaming = null;
      clearTimeout(state.timer);
    },
    get visible() {
      return state.visible;
    },
    upload,
    /** Something changed elsewhere (an upload from the composer): read the list again if shown. */
    reload() {
      if (state.visible) load();
    },
  };
}

function formatDate(timestamp) {
  if (!timestamp) return "";
  const date = new Date(timestamp);
  if (Number.isNaN(date.getTime())) return "";
  return date.toLocaleDateString(undefined, { day: "numeric", month: "short", year: "numeric" });
}

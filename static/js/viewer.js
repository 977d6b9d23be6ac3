// The document viewer (#/documents/<id>?chunk=<chunk id>&page=N), where a citation of one of the
// user's documents leads: that page's text as the search index keeps it, the cited passage
// marked and scrolled into view, the pages before and after, and the original to download. If
// the document was deleted, the passage the reply kept is shown instead.
//
// Document text is the user's file: set as text (white-space: pre-wrap), never as markup.

import { api } from "./api.js";
import { chunkText, documentHref, passageOf } from "./documents.js";
import { el } from "./dom.js";

const MATCH_CHARS = 80; // of the kept passage, to find it again after a re-index

export function createViewer({ onTitle = () => {} } = {}) {
  const root = document.getElementById("document-viewer");
  const title = document.getElementById("viewer-title");
  const meta = document.getElementById("viewer-meta");
  const download = document.getElementById("viewer-download");
  const note = document.getElementById("viewer-note");
  const pager = document.getElementById("viewer-pager");
  const previous = document.getElementById("viewer-previous");
  const next = document.getElementById("viewer-next");
  const pageLabel = document.getElementById("viewer-page");
  const text = document.getElementById("viewer-text");
  const back = document.getElementById("viewer-back");
  let ticket = 0;
  let cameFromApp = false; // whether Back has a page of ours to go back to

  back.addEventListener("click", () => {
    if (cameFromApp) history.back();
    else location.hash = "#/documents";
  });

  function showNote(message, kind = "info") {
    note.textContent = message;
    note.className = `viewer-note viewer-note-${kind}`;
    note.hidden = !message;
  }

  function reset(heading) {
    title.textContent = heading;
    meta.textContent = "";
    download.hidden = true;
    pager.hidden = true;
    showNote("");
    text.replaceChildren();
    text.setAttribute("aria-busy", "true");
  }

  /** Show `documentId`'s page `page` (the whole document when null), marking `chunk`. */
  async function open({ documentId, chunk, page }, { fromApp = false } = {}) {
    const mine = ++ticket;
    cameFromApp = fromApp;
    const kept = passageOf(chunk);
    reset(kept?.title || "Document");
    onTitle(kept?.title || "Document");
    const [docResult, chunksResult] = await Promise.allSettled([api.document(documentId), api.documentChunks(documentId, page)]);
    if (mine !== ticket) return;
    text.setAttribute("aria-busy", "false");
    const failure = docResult.status === "rejected" ? docResult.reason : chunksResult.status === "rejected" ? chunksResult.reason : null;
    if (failure?.status === 404 || failure?.status === 422) {
      showDeleted(kept);
      return;
    }
    if (failure) {
      showNote(`Could not load the document: ${failure.message}`, "error");
      return;
    }
    const doc = docResult.value;
    const chunks = chunksResult.value;
    title.textContent = doc.filename;
    onTitle(doc.filename);
    download.href = api.documentFileUrl(doc.document_id);
    download.setAttribute("download", doc.filename);
    download.setAttribute("aria-label", `Download the original: ${doc.filename}`);
    download.hidden = false;
    meta.textContent = describeWhere(doc, page);
    showPager(doc, page);

    const views = chunks.map(chunkView);
    let cited = chunk ? views.find((v) => v.dataset.chunkId === chunk) : null;
    if (!cited && chunk && kept?.text) cited = findByText(views, chunks, kept.text);
    if (views.length) text.replaceChildren(...withHeadings(views, chunks));
    else text.replaceChildren(el("p", { class: "muted", text: emptyText(doc, page) }));

    if (doc.status !== "ready") {
      showNote(doc.status === "processing"
        ? "This document is being read again; its text shows here once it is ready."
        : `This document could not be read: ${doc.error || doc.status}`, doc.status === "failed" ? "error" : "info");
    }
    if (cited) {
      mark(cited);
    } else if (chunk) {
      // Re-indexed since (its passages have new ids) or changed: show what the reply quoted.
      if (doc.status === "ready") showNote("The passage cited is not on this page any more (the document was read again since). The reply quoted:", "info");
      if (kept?.text) {
        const view = keptPassage(kept);
        text.prepend(view);
        mark(view, kept.section);
      }
    }
  }

  function describeWhere(doc, page) {
    if (page !== null && doc.pages) return `Page ${page} of ${doc.pages}`;
    if (page !== null) return `Page ${page}`;
    return doc.pages ? `All ${doc.pages} pages` : "The whole document";
  }

  function emptyText(doc, page) {
    if (doc.status !== "ready") return "No text to show yet.";
    return page !== null ? `Page ${page} has no text I could read.` : "This document has no text I could read.";
  }

  function showPager(doc, page) {
    if (page === null || !doc.pages || doc.pages < 2) return;
    const link = (node, target) => {
      const ok = target >= 1 && target <= doc.pages;
      node.hidden = !ok;
      if (ok) node.href = documentHref(doc.document_id, { page: target });
    };
    link(previous, page - 1);
    link(next, page + 1);
    pageLabel.textContent = `Page ${page} of ${doc.pages}`;
    pager.hidden = false;
  }

  function chunkView(chunk) {
    return el(
      "section",
      { class: "viewer-chunk", dataset: { chunkId: String(chunk.chunk_id) } },
      el("p", { class: "viewer-chunk-text", text: chunkText(chunk.content) }),
    );
  }

  /** A section's heading where it starts (chunks of one section follow each other). */
  function withHeadings(views, chunks) {
    const out = [];
    let last = null;
    views.forEach((view, index) => {
      const heading = chunks[index].heading || "";
      if (heading && heading !== last) out.push(el("h3", { class: "viewer-section", text: heading }));
      last = heading;
      out.push(view);
    });
    return out;
  }

  function findByText(views, chunks, passage) {
    const probe = chunkText(passage).replace(/\s+/g, " ").slice(0, MATCH_CHARS).trim();
    if (!probe) return null;
    const at = chunks.findIndex((c) => chunkText(c.content).replace(/\s+/g, " ").includes(probe));
    return at >= 0 ? views[at] : null;
  }

  function mark(view, section = "") {
    view.classList.add("cited");
    view.setAttribute("aria-current", "true");
    view.prepend(el("span", { class: "viewer-cited-label", text: section ? `Cited passage · ${section}` : "Cited passage" }));
    view.tabIndex = -1;
    requestAnimationFrame(() => {
      const reduce = window.matchMedia("(prefers-reduced-motion: reduce)").matches;
      view.scrollIntoView({ block: "center", behavior: reduce ? "instant" : "smooth" });
      view.focus({ preventScroll: true });
    });
  }

  function keptPassage(kept) {
    return el("section", { class: "viewer-chunk kept" }, el("p", { class: "viewer-chunk-text", text: chunkText(kept.text) }));
  }

  function showDeleted(kept) {
    title.textContent = kept?.title || "Deleted document";
    onTitle(kept?.title || "Deleted document");
    showNote(kept?.text
      ? "This document was deleted; the passage is kept with the reply."
      : "This document was deleted. The reply that cited it keeps the passage: open it from the reply's [n].", "warn");
    if (kept?.text) {
      const view = keptPassage(kept);
      text.replaceChildren(view);
      mark(view, kept.section);
    }
  }

  return {
    open,
    hide() {
      ticket += 1; // an answer still on its way is not shown
    },
    focus() {
      root.focus({ preventScroll: true });
    },
  };
}

// What the document views share: the viewer's address (#/documents/<id>?chunk=<id>&page=N), the
// words for a document's status ("Embedding 12/40", "Ready · 4 pages"), sizes, a chunk's text
// without its search header, and the passages of the citations followed (a deleted document's
// viewer shows the passage the reply kept).
//
// File names, passages and errors are the user's files and the server's words: callers set them
// as text, never as markup.

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const VIEWER_ROUTE = /^#\/documents\/([0-9a-f-]{36})(?:\?(.*))?$/i;
const PASSAGES_KEY = "resolveai.cited-passages";
const KEPT_PASSAGES = 50;

export const isUuid = (value) => typeof value === "string" && UUID.test(value);

/** The viewer's address for a document, a passage in it (`chunk`) and its page. */
export function documentHref(documentId, { chunk = null, page = null } = {}) {
  if (!isUuid(documentId)) return null;
  const params = new URLSearchParams();
  if (isUuid(chunk)) params.set("chunk", chunk.toLowerCase());
  if (Number.isInteger(page) && page >= 0) params.set("page", String(page));
  const query = params.toString();
  return `#/documents/${documentId.toLowerCase()}${query ? `?${query}` : ""}`;
}

/** `#/documents/<id>?chunk=…&page=…` → {documentId, chunk, page}; null for any other address. */
export function parseDocumentRoute(hash) {
  const match = VIEWER_ROUTE.exec(hash || "");
  if (!match || !isUuid(match[1])) return null;
  const params = new URLSearchParams(match[2] || "");
  const chunk = params.get("chunk");
  const page = params.get("page");
  return {
    documentId: match[1].toLowerCase(),
    chunk: isUuid(chunk) ? chunk.toLowerCase() : null,
    page: page !== null && /^\d{1,6}$/.test(page) ? Number(page) : null,
  };
}

/** A document citation (a reply's source with kind "document") as the viewer's address. Built
 *  from its ids, never taken from its `url` as given. */
export function sourceHref(source) {
  if (!source || source.kind !== "document") return null;
  const page = Number.isInteger(source.page) ? source.page : null;
  const direct = documentHref(source.document_id, { chunk: source.chunk_id, page });
  if (direct) return direct;
  const parsed = parseDocumentRoute(typeof source.url === "string" ? source.url : "");
  return parsed && documentHref(parsed.documentId, parsed);
}

/** What a link to a cited passage carries (data-*), for the popover and the viewer. */
export function passageData(source) {
  return {
    kind: "document",
    documentId: String(source.document_id || ""),
    chunkId: String(source.chunk_id || ""),
    page: Number.isInteger(source.page) ? String(source.page) : "",
    section: typeof source.section === "string" ? source.section : "",
    text: typeof source.text === "string" ? source.text : "",
  };
}

// --- the passages of citations followed ---------------------------------------------------------

const passages = new Map(); // chunk id → {title, text, section, page}

function storedPassages() {
  try {
    const value = JSON.parse(sessionStorage.getItem(PASSAGES_KEY) || "[]");
    return Array.isArray(value) ? value : [];
  } catch {
    return [];
  }
}

/** Keep the passage a citation link quoted (its data-* from `passageData`), so the viewer can
 *  show it if the document is gone; kept for the tab's life (a reload of the viewer too). */
export function rememberPassage(link) {
  const data = link.dataset;
  if (!isUuid(data.chunkId)) return;
  const passage = { chunkId: data.chunkId.toLowerCase(), title: data.title || "", text: data.text || "", section: data.section || "" };
  passages.set(passage.chunkId, passage);
  try {
    const kept = storedPassages().filter((p) => p && p.chunkId !== passage.chunkId);
    kept.push(passage);
    sessionStorage.setItem(PASSAGES_KEY, JSON.stringify(kept.slice(-KEPT_PASSAGES)));
  } catch {
    // Storage full or off: this page's memory is enough.
  }
}

export function passageOf(chunkId) {
  if (!chunkId) return null;
  return passages.get(chunkId) || storedPassages().find((p) => p && p.chunkId === chunkId) || null;
}

// --- words --------------------------------------------------------------------------------------

const plural = (count, one, many) => `${count.toLocaleString()} ${count === 1 ? one : many}`;

export function formatSize(bytes) {
  if (!Number.isFinite(bytes) || bytes < 0) return "";
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${Math.round(bytes / 1024)} KB`;
  return `${(bytes / (1024 * 1024)).toFixed(1)} MB`;
}

/**
 * A document's state in a few words: {kind, text, done, total}. `kind` is "busy" (uploading or
 * processing; `done`/`total` when there is progress to show), "ready", "failed" or "cancelled".
 */
export function describeStatus(doc) {
  if (!doc) return { kind: "busy", text: "Uploading…" };
  if (doc.status === "ready") {
    const size = doc.pages ? plural(doc.pages, "page", "pages") : plural(doc.chunks || 0, "passage", "passages");
    return { kind: "ready", text: `Ready · ${size}` };
  }
  if (doc.status === "failed") return { kind: "failed", text: doc.error || "This file could not be read." };
  if (doc.status === "cancelled") return { kind: "cancelled", text: "Cancelled: re-index to read it" };
  const done = Number(doc.done) || 0;
  const total = Number(doc.total) || 0;
  switch (doc.stage) {
    case "converting":
      return { kind: "busy", text: "Converting…" };
    case "chunking":
      return { kind: "busy", text: "Splitting into passages…" };
    case "embedding":
      return total > 0
        ? { kind: "busy", text: `Embedding ${done}/${total}`, done, total }
        : { kind: "busy", text: "Embedding…" };
    default:
      return { kind: "busy", text: "Waiting to be read…" };
  }
}

/** A chunk's text as the reader should see it: without the "[Page: … | Section: …]" line the
 *  search index puts first. */
export function chunkText(content) {
  const text = String(content || "");
  const newline = text.indexOf("\n");
  const first = newline < 0 ? text : text.slice(0, newline);
  if (/^\s*\[Page:.*\]\s*$/.test(first)) return newline < 0 ? "" : text.slice(newline + 1).trim();
  return text.trim();
}

/** The first words of a passage, for a preview. */
export function preview(text, chars = 220) {
  const flat = String(text || "").replace(/\s+/g, " ").trim();
  if (flat.length <= chars) return flat;
  const cut = flat.slice(0, chars);
  const space = cut.lastIndexOf(" ");
  return `${(space > chars * 0.6 ? cut.slice(0, space) : cut).trimEnd()}…`;
}

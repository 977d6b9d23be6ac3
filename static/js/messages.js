// One message on screen. User messages are plain text (what they typed, exactly). Assistant
// replies are Markdown with their steps line, Sources list, the memories they used, notes (a
// fallback model answered…), status and actions with the name of the model that wrote them;
// while a reply streams, its Markdown is re-rendered at most once per animation frame.
//
// The Sources list shows the sources the answer cites ([n] in its text); the others it read are
// behind a "2 more read" disclosure.

import { passageData, sourceHref } from "./documents.js";
import { copyButton, el, icon } from "./dom.js";
import { hostOf, isSafeUrl, renderMarkdown } from "./render.js";
import { StepsView } from "./steps.js";
import { UsedMemoriesView } from "./used-memories.js";

/**
 * A message of yours. `versions` (ids, oldest first) and `onPick(id)`: the ‹ 2/3 › switch when it
 * was edited; `onEdit(newText)`: an Edit button whose editor sends the new text (a new version,
 * answered on a branch of its own).
 */
export function userMessage(content, messageId, { versions = [], onPick = null, onEdit = null, documents = [] } = {}) {
  const bubble = el("div", { class: "bubble", text: content });
  const actions = el("div", { class: "msg-actions" }, copyButton("Copy", "Copy message", () => content));
  const root = el(
    "article",
    { class: "msg msg-user", "aria-label": "Your message", dataset: messageId ? { messageId } : undefined },
    ...(documents.length ? [sentFiles(documents)] : []),
    bubble,
    actions,
  );
  if (onEdit) {
    const edit = el("button", { type: "button", class: "action-button edit-button", "aria-label": "Edit message", title: "Edit message" }, icon("pencil"));
    edit.addEventListener("click", () => openEditor(root, bubble, actions, content, onEdit));
    actions.append(edit);
  }
  const switcher = versionSwitch(versions, messageId, onPick);
  if (switcher) {
    actions.append(switcher);
    actions.classList.add("has-versions");
  }
  return root;
}

/** The files sent with a question, each opening in the document viewer. */
function sentFiles(documents) {
  return el(
    "ul",
    { class: "msg-files", "aria-label": "Files sent with this message" },
    ...documents.map((doc) =>
      el("li", {}, el("a", { class: "msg-file", href: `#/documents/${encodeURIComponent(doc.document_id)}`, title: doc.filename }, icon("file"), el("span", { text: doc.filename }))),
    ),
  );
}

/** Edit a question in place: Send answers the new text on a branch of its own, Cancel (or
 *  Escape) puts the message back as it was. */
function openEditor(root, bubble, actions, content, onEdit) {
  const box = el("textarea", { class: "edit-box", "aria-label": "Edit your message", rows: "3" });
  box.value = content;
  const send = el("button", { type: "button", class: "small primary-button" }, "Send");
  const cancel = el("button", { type: "button", class: "small secondary-button" }, "Cancel");
  const editor = el("div", { class: "msg-editor" }, box, el("div", { class: "editor-actions" }, cancel, send));
  const close = () => {
    editor.replaceWith(bubble);
    actions.hidden = false;
  };
  const submit = () => {
    const text = box.value;
    if (!text.trim() || text === content) return close();
    send.disabled = true;
    onEdit(text);
  };
  send.addEventListener("click", submit);
  cancel.addEventListener("click", close);
  box.addEventListener("keydown", (event) => {
    if (event.key === "Escape") close();
    else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      submit();
    }
  });
  bubble.replaceWith(editor);
  actions.hidden = true;
  box.focus();
  box.setSelectionRange(box.value.length, box.value.length);
  root.classList.add("editing");
}

/** ‹ 2/3 ›: which version of a message is shown, and buttons to show the one before or after. */
function versionSwitch(versions, messageId, onPick) {
  if (!onPick || !Array.isArray(versions) || versions.length < 2) return null;
  const at = versions.indexOf(messageId);
  if (at < 0) return null;
  const button = (label, iconName, target) => {
    const node = el("button", { type: "button", class: "version-button", "aria-label": label, title: label, disabled: target === undefined }, icon(iconName));
    node.addEventListener("click", () => onPick(target));
    return node;
  };
  return el(
    "span",
    { class: "version-switch", role: "group", "aria-label": "Versions" },
    button("Previous version", "back", versions[at - 1]),
    el("span", { class: "version-count", text: `${at + 1}/${versions.length}` }),
    button("Next version", "chevron", versions[at + 1]),
  );
}

/**
 * Mark a message as the one a link pointed at (a memory's source): scroll it into view, give it a
 * visible highlight and, when `quote` is given and found in a user message, mark those words.
 * The marked words are split out of the text node, so the message stays plain text.
 */
export function highlightMessage(node, quote, { scroll = true } = {}) {
  for (const old of node.parentElement?.querySelectorAll(".msg.highlighted") || []) unhighlight(old);
  node.classList.add("highlighted");
  const bubble = node.querySelector(".bubble");
  const text = bubble?.firstChild;
  const at = quote && text instanceof Text ? text.data.indexOf(quote) : -1;
  if (at >= 0) {
    const rest = text.splitText(at);
    rest.splitText(quote.length);
    rest.replaceWith(el("mark", { class: "quote-mark", text: quote }));
  }
  node.tabIndex = -1;
  node.focus({ preventScroll: true });
  if (!scroll) return; // the caller scrolls to a part of it
  const reduce = window.matchMedia("(prefers-reduced-motion: reduce)").matches;
  node.scrollIntoView({ block: "center", behavior: reduce ? "instant" : "smooth" });
}

function unhighlight(node) {
  node.classList.remove("highlighted");
  const mark = node.querySelector(".quote-mark");
  if (mark) {
    const bubble = mark.parentElement;
    mark.replaceWith(mark.textContent);
    bubble.normalize();
  }
}

export class AssistantMessage {
  /** `onChange` is called after the content changed size (the view keeps the bottom in view). */
  constructor({ onChange = () => {} } = {}) {
    this.text = "";
    this.sources = [];
    this.citedKey = null; // which sources the Sources list was last drawn for (cited numbers)
    this.modelName = null; // "gpt-4o-mini", "Local model (Qwen2.5-Coder 1.5B)"
    this.onChange = onChange;
    this.frame = 0;
    this.steps = new StepsView();
    this.body = el("div", { class: "markdown" });
    this.sourcesBox = el("section", { class: "sources", "aria-label": "Sources", hidden: true });
    this.memories = new UsedMemoriesView();
    this.notesBox = el("div", { class: "msg-notes", hidden: true });
    this.statusBox = el("div", { class: "msg-status", hidden: true });
    this.actions = el("div", { class: "msg-actions", hidden: true });
    this.onRegenerate = null; // () => …: answer the question again, as another version
    this.onContinue = null; // () => …: go on with a stopped reply from where it ended
    this.exportHref = null; // the saved reply as a Markdown file (Download and Print are offered)
    this.switcher = null; // ‹ 2/3 › when the question has several replies
    this.root = el(
      "article",
      { class: "msg msg-assistant streaming", "aria-label": "Assistant reply" },
      this.steps.root,
      this.body,
      this.sourcesBox,
      this.memories.root,
      this.notesBox,
      this.statusBox,
      this.actions,
    );
  }

  /** A reply as saved on the server. `onRegenerate` offers Regenerate; `onPick(id)` switches
   *  between its `versions`. */
  static fromSaved(message, { totalMs, onRetry, onRegenerate = null, onContinue = null, onPick = null, exportHref = null } = {}) {
    const view = new AssistantMessage();
    view.exportHref = exportHref;
    view.onRegenerate = onRegenerate;
    view.onContinue = onContinue;
    view.switcher = versionSwitch(message.versions, message.message_id, onPick);
    view.steps = StepsView.fromSaved(message.steps, message.tool_calls, totalMs);
    view.root.firstChild.replaceWith(view.steps.root);
    view.root.dataset.messageId = message.message_id;
    view.text = message.content || "";
    view.setSources(message.sources || []);
    view.memories.set(message.memories);
    view.setModel(message.model_name, message.notes);
    view.renderNow();
    if (message.status === "error") view.fail(message.error || "This reply failed.", onRetry);
    else view.complete(message.status);
    return view;
  }

  append(text) {
    this.text += text;
    if (text.trim()) this.steps.text();
    this.scheduleRender();
  }

  setSources(sources) {
    this.sources = Array.isArray(sources) ? sources : [];
    this.citedKey = null;
    this.scheduleRender();
  }

  /** Who wrote the reply (shown with its actions) and the notes that go with it. */
  setModel(modelName, notes) {
    this.modelName = typeof modelName === "string" && modelName ? modelName : null;
    const lines = (Array.isArray(notes) ? notes : []).filter((note) => typeof note === "string" && note);
    this.notesBox.replaceChildren(
      ...lines.map((note) => el("p", { class: "msg-note", role: "note" }, icon("alert"), el("span", { text: note }))),
    );
    this.notesBox.hidden = !lines.length;
  }

  scheduleRender() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.renderNow();
    });
  }

  renderNow() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    this.body.replaceChildren(renderMarkdown(this.text, this.sources));
    this.renderSources();
    this.onChange();
  }

  /** The cited sources, then the others behind "n more read"; redrawn only when what the text
   *  cites changes (it streams), keeping the disclosure open if it was. */
  renderSources() {
    const cited = citedNumbers(this.body);
    const key = [...cited].sort((a, b) => a - b).join(",") + `/${this.sources.length}`;
    if (key === this.citedKey) return;
    this.citedKey = key;
    if (!this.sources.length) {
      this.sourcesBox.replaceChildren();
      this.sourcesBox.hidden = true;
      return;
    }
    const sorted = [...this.sources].sort((a, b) => a.n - b.n);
    const used = sorted.filter((source) => cited.has(Number(source.n)));
    const rest = sorted.filter((source) => !cited.has(Number(source.n)));
    const parts = [el("h3", { class: "sources-title", text: "Sources" })];
    if (used.length) parts.push(sourceList(used));
    if (rest.length) {
      const wasOpen = this.sourcesBox.querySelector(".sources-more")?.open;
      const label = used.length ? `${rest.length} more read` : `${rest.length} ${rest.length === 1 ? "source" : "sources"} read`;
      const more = el("details", { class: "sources-more" }, el("summary", { text: label }), sourceList(rest));
      more.open = Boolean(wasOpen);
      more.addEventListener("toggle", () => this.onChange());
      parts.push(more);
    }
    this.sourcesBox.replaceChildren(...parts);
    this.sourcesBox.hidden = false;
  }

  /** The reply ended: "complete" or "interrupted" (stopped, or the connection dropped). */
  complete(status = "complete", totalMs) {
    if (this.steps.live) this.steps.finish(totalMs);
    this.renderNow();
    this.root.classList.remove("streaming");
    this.root.dataset.status = status;
    if (!this.text.trim() && status === "complete") {
      this.body.replaceChildren(el("p", { class: "muted", text: "(The assistant sent no text.)" }));
    }
    const parts = [];
    if (this.text.trim()) parts.push(copyButton("Copy", "Copy message", () => this.text));
    if (this.text.trim() && this.exportHref) parts.push(...this.fileActions());
    if (status === "interrupted") {
      parts.push(el("span", { class: "badge badge-interrupted", title: "The reply was stopped before it was finished" }, icon("stop"), "Interrupted"));
      if (this.onContinue && this.text.trim()) {
        const more = el("button", { type: "button", class: "small secondary-button continue-button" }, "Continue");
        more.addEventListener("click", () => {
          more.disabled = true;
          this.onContinue();
        });
        parts.push(more);
      }
    } else if (status === "streaming") {
      // Saved while another tab or process is still writing it: reloading shows the rest.
      parts.push(el("span", { class: "badge badge-interrupted", title: "Reload to see the rest" }, "Still being written"));
    }
    this.setActions(parts);
  }

  /** Download (the reply as a Markdown file, its sources listed) and Print (this reply alone). */
  fileActions() {
    const save = el("a", { class: "action-button download-button", href: this.exportHref, download: "", "aria-label": "Download as Markdown", title: "Download as Markdown" }, icon("download"));
    const print = el("button", { type: "button", class: "action-button print-button", "aria-label": "Print", title: "Print this reply" }, icon("print"));
    print.addEventListener("click", () => printAlone(this.root));
    return [save, print];
  }

  /** Copy or the status first, then Regenerate and the version switch when there are. */
  setActions(parts) {
    if (this.onRegenerate) {
      const again = el("button", { type: "button", class: "action-button regenerate-button", "aria-label": "Regenerate", title: "Regenerate" }, icon("retry"));
      again.addEventListener("click", () => {
        again.disabled = true;
        this.onRegenerate();
      });
      parts.push(again);
    }
    if (this.switcher) parts.push(this.switcher);
    if (this.modelName) {
      parts.push(el("span", { class: "msg-model", title: "The model that wrote this reply" }, el("span", { class: "visually-hidden", text: "Written by " }), this.modelName));
    }
    this.actions.replaceChildren(...parts);
    this.actions.hidden = !parts.length;
    this.onChange();
  }

  /** The reply failed: keep what was written, show why, and offer Retry when it makes sense. */
  fail(message, onRetry, totalMs) {
    if (this.steps.live) this.steps.finish(totalMs);
    this.renderNow();
    this.root.classList.remove("streaming");
    this.root.dataset.status = "error";
    const box = el("div", { class: "error-box", role: "alert" }, icon("alert"), el("p", { class: "error-text", text: message }));
    if (onRetry) {
      const retry = el("button", { type: "button", class: "secondary-button retry-button" }, icon("retry"), "Retry");
      retry.addEventListener("click", () => {
        retry.disabled = true;
        onRetry();
      });
      box.append(retry);
    }
    this.statusBox.replaceChildren(box);
    this.statusBox.hidden = false;
    this.setActions(this.text.trim() ? [copyButton("Copy", "Copy message", () => this.text)] : []);
  }

  /** Take Retry away (another reply is on its way in this chat). */
  dropRetry() {
    this.statusBox.querySelector(".retry-button")?.remove();
  }
}

/** Print one message: the print style shows it alone (with its sources) while the dialog is open. */
function printAlone(root) {
  document.body.classList.add("printing-one");
  root.classList.add("print-this");
  const done = () => {
    document.body.classList.remove("printing-one");
    root.classList.remove("print-this");
  };
  window.addEventListener("afterprint", done, { once: true });
  window.print();
}

/** The source numbers the rendered reply cites: its `[n]` links. */
function citedNumbers(body) {
  return new Set([...body.querySelectorAll(".cite[data-cite]")].map((link) => Number(link.dataset.cite)));
}

function sourceList(sources) {
  const list = el("ol", { class: "sources-list" });
  for (const source of sources) list.append(source.kind === "document" ? documentSource(source) : webSource(source));
  return list;
}

function webSource(source) {
  const title = String(source.title || source.url || `Source ${source.n}`);
  const label = isSafeUrl(source.url)
    ? el("a", { href: source.url, target: "_blank", rel: "noopener noreferrer", class: "source-link", text: title })
    : el("span", { class: "source-link", text: title });
  return el("li", { value: String(source.n) }, label, el("span", { class: "source-host", text: hostOf(source.url) }));
}

/** A passage of one of the user's documents in the Sources list: opens the viewer on it. */
function documentSource(source) {
  const title = String(source.title || `Document ${source.n}`);
  const href = sourceHref(source);
  const dataset = { title, ...passageData(source) };
  const label = href
    ? el("a", { href, class: "source-link source-document", dataset, text: title })
    : el("span", { class: "source-link source-document", text: title });
  const where = typeof source.section === "string" && source.section ? source.section : "your document";
  return el("li", { value: String(source.n) }, icon("file"), label, el("span", { class: "source-host", text: where }));
}

/** Total time of a saved reply: from the user's message to the saved reply. */
export function replyDuration(userMessage, reply) {
  if (!userMessage || !reply) return undefined;
  const ms = Date.parse(reply.sent_at) - Date.parse(userMessage.sent_at);
  return Number.isFinite(ms) && ms >= 0 ? ms : undefined;
}

// Start-up and the page-level wiring: routes (#/chat/<id>, #/chat/<id>/<message id> pointing at
// one message, #/memory, #/documents, #/documents/<id>?chunk=<id>&page=N (a cited passage),
// #/settings, #/usage, or the new-chat draft), which view the main area shows, files dropped onto it, the
// sidebar drawer on narrow screens, and global keys (Esc stops a streaming reply, Ctrl+K searches
// the chats, Ctrl+Shift+O starts a new chat).

import { setupAccount } from "./account.js";
import { api, loadSession } from "./api.js";
import { createAttachments } from "./attachments.js";
import { createChat } from "./chat.js";
import { setupDataTransfer } from "./data-transfer.js";
import { setupCitationPopover } from "./citations.js";
import { createComposer } from "./composer.js";
import { setupSummaryDialog } from "./dialogs.js";
import { parseDocumentRoute } from "./documents.js";
import { createDocumentsPage } from "./documents-page.js";
import { toast } from "./dom.js";
import { createMemoryPage } from "./memory.js";
import { createSettingsPage, loadPreferences } from "./settings-page.js";
import { createUsagePage } from "./usage-page.js";
import { createSearch } from "./search.js";
import { createSidebar } from "./sidebar.js";
import { createViewer } from "./viewer.js";

const CHAT_ROUTE = /^#\/chat\/([0-9a-f-]{36})(?:\/([0-9a-f-]{36}))?$/i;
const MEMORY_ROUTE = /^#\/memory\/?$/;
const DOCUMENTS_ROUTE = /^#\/documents\/?$/;
const SETTINGS_ROUTE = /^#\/settings\/?$/;
const USAGE_ROUTE = /^#\/usage\/?$/;
const main = document.getElementById("main");
const memoryLink = document.getElementById("memory-link");
const documentsLink = document.getElementById("documents-link");
const settingsLink = document.getElementById("settings-link");
const usageLink = document.getElementById("usage-link");
const usagePage = createUsagePage();
const conversation = document.getElementById("conversation");
const narrow = window.matchMedia("(max-width: 860px)");

const drawer = {
  sidebar: document.getElementById("sidebar"),
  backdrop: document.getElementById("backdrop"),
  toggle: document.getElementById("open-sidebar"),
  open() {
    this.sidebar.classList.add("open");
    this.backdrop.hidden = false;
    this.toggle.setAttribute("aria-expanded", "true");
    document.getElementById("chat-filter").focus();
  },
  close({ restoreFocus = false } = {}) {
    if (!this.sidebar.classList.contains("open")) return;
    this.sidebar.classList.remove("open");
    this.backdrop.hidden = true;
    this.toggle.setAttribute("aria-expanded", "false");
    if (restoreFocus) this.toggle.focus();
  },
};

let chat;
let memoryPage;
let documentsPage;
const chatShown = () => main.dataset.view === "chat";
const attachments = createAttachments({
  chatId: () => chat.chatId,
  onChange: () => documentsPage.reload(),
  onState: (state) => composer.setAttachments(state),
});
const composer = createComposer({
  onSend: (text, useWeb, mode) => {
    chat.send(text, useWeb, mode, attachments.sent());
  },
  onStop: () => chat.stop(),
});
const sidebar = createSidebar({
  onDeleted: (chatId) => {
    chat.deleted(chatId);
    memoryPage.reload(); // its memories may be gone, or have lost their link
  },
  onRenamed: (renamed) => chat.renamed(renamed),
  onLoaded: () => chat.refreshTitle(),
});
chat = createChat({ sidebar, composer, isShown: chatShown });
// The quote of the memory whose source link was followed, for the message it points at.
const quotes = new Map();
memoryPage = createMemoryPage({
  sidebar,
  onPausedChange: (paused) => chat.setMemoryPaused(paused),
  onOpenSource: (memory) => {
    if (memory.message_id && memory.quote) quotes.set(memory.message_id, memory.quote);
  },
});

documentsPage = createDocumentsPage();
setupDataTransfer({
  onImported: (result) => {
    sidebar.load();
    if (result.chat_ids.length === 1) location.hash = `#/chat/${result.chat_ids[0]}`;
  },
});
const settingsPage = createSettingsPage({
  onMemoryPausedChange: (paused) => chat.setMemoryPaused(paused),
  onUseWebDefault: (on) => composer.setWebDefault(on),
});
// Messages opened from a search result, with the words that matched: marked for a moment only,
// scrolled to those words (chat.js).
const briefly = new Map();
const search = createSearch({
  onOpen: async (hit) => {
    if (hit.message_id && !hit.on_branch) {
      // An earlier version of a message: show its branch first, as picking that version does.
      await api.showVersion(hit.chat_id, hit.message_id).catch(() => {});
    }
    if (hit.message_id) briefly.set(hit.message_id, (hit.snippet || []).filter((p) => p.match).map((p) => p.text));
    const hash = hit.message_id ? `#/chat/${hit.chat_id}/${hit.message_id}` : `#/chat/${hit.chat_id}`;
    if (location.hash === hash) route();
    else location.hash = hash;
  },
});
const viewer = createViewer({ onTitle: (title) => setPageTitle(title) });

function setPageTitle(title) {
  document.getElementById("chat-title").textContent = title;
  document.title = `${title} · ResolveAI`;
}

// Where the conversation was scrolled to when another view took its place: a citation's viewer
// and back again finds the reply where it was.
let conversationScroll = null;

/** The main area shows a chat (or the draft), the Memory, Documents, Settings or Usage page or a document
 *  ("document": the viewer); CSS hides the others (data-view). */
function showView(view) {
  const was = main.dataset.view;
  if (was === "chat" && view !== "chat") conversationScroll = conversation.scrollTop;
  main.dataset.view = view;
  const current = (link, on) => (on ? link.setAttribute("aria-current", "page") : link.removeAttribute("aria-current"));
  current(memoryLink, view === "memory");
  current(documentsLink, view === "documents" || view === "document");
  current(settingsLink, view === "settings");
  current(usageLink, view === "usage");
  if (view !== "chat") sidebar.setActive(null);
  if (was === "memory" && view !== "memory") memoryPage.hide(); // a delete waiting for its Undo is sent now
  if (was === "documents" && view !== "documents") documentsPage.hide();
  if (was === "document" && view !== "document") viewer.hide();
  if (was === "settings" && view !== "settings") settingsPage.hide();
  if (was === "usage" && view !== "usage") usagePage.hide();
  if (view === "memory") {
    setPageTitle("Memory");
    if (was !== "memory") memoryPage.show();
  } else if (view === "documents") {
    setPageTitle("Documents");
    if (was !== "documents") documentsPage.show();
  } else if (view === "settings") {
    setPageTitle("Settings");
    if (was !== "settings") settingsPage.show();
  } else if (view === "usage") {
    setPageTitle("Usage");
    if (was !== "usage") usagePage.show();
  } else if (view === "chat" && was !== "chat" && conversationScroll !== null) {
    conversation.scrollTop = conversationScroll;
  }
}

let routed = 0; // how many addresses this page has shown: the viewer's Back goes back to ours

function route() {
  routed += 1;
  const passage = parseDocumentRoute(location.hash);
  if (MEMORY_ROUTE.test(location.hash)) {
    showView("memory");
  } else if (DOCUMENTS_ROUTE.test(location.hash)) {
    showView("documents");
  } else if (SETTINGS_ROUTE.test(location.hash)) {
    showView("settings");
  } else if (USAGE_ROUTE.test(location.hash)) {
    showView("usage");
  } else if (passage) {
    showView("document");
    viewer.open(passage, { fromApp: routed > 1 });
  } else {
    const match = CHAT_ROUTE.exec(location.hash);
    const target = match ? match[1].toLowerCase() : null;
    if (target !== chat.chatId) attachments.clear(); // another chat: its own composer
    showView("chat");
    if (match) {
      const messageId = match[2]?.toLowerCase();
      // Kept, not taken: a hash change fires both hashchange and popstate, so this runs twice.
      const words = messageId && briefly.get(messageId);
      chat.open(target, { highlight: messageId, quote: messageId && quotes.get(messageId), words });
    } else {
      chat.showDraft();
    }
  }
  if (narrow.matches) drawer.close();
}

// Files dropped onto the chat are attached to it; onto the Documents page, uploaded there.
// Anywhere else a dropped file is refused, rather than opened in place of the app.
const dropOverlay = document.getElementById("drop-overlay");
const dropText = document.getElementById("drop-overlay-text");
const hasFiles = (event) => Array.from(event.dataTransfer?.types || []).includes("Files");
const dropTarget = () => (main.dataset.view === "chat" || main.dataset.view === "documents" ? main.dataset.view : null);
let dragDepth = 0;
function endDrag() {
  dragDepth = 0;
  dropOverlay.hidden = true;
}
main.addEventListener("dragenter", (event) => {
  if (!hasFiles(event) || !dropTarget()) return;
  event.preventDefault();
  dragDepth += 1;
  dropText.textContent = dropTarget() === "chat"
    ? "Drop files to attach them to this chat"
    : "Drop files to add them to your documents";
  dropOverlay.hidden = false;
});
main.addEventListener("dragleave", () => {
  dragDepth = Math.max(0, dragDepth - 1);
  if (!dragDepth) dropOverlay.hidden = true;
});
window.addEventListener("dragover", (event) => {
  if (!hasFiles(event)) return;
  event.preventDefault();
  event.dataTransfer.dropEffect = main.contains(event.target) && dropTarget() ? "copy" : "none";
});
window.addEventListener("drop", (event) => {
  if (!hasFiles(event)) return;
  event.preventDefault();
  endDrag();
  const files = [...event.dataTransfer.files];
  if (!files.length || !main.contains(event.target)) return;
  if (dropTarget() === "chat") attachments.add(files);
  else if (dropTarget() === "documents") documentsPage.upload(files);
});
window.addEventListener("dragend", endDrag);

function newChat() {
  if (location.hash) history.pushState(null, "", location.pathname);
  route();
}

document.getElementById("new-chat").addEventListener("click", newChat);
document.getElementById("new-chat-top").addEventListener("click", newChat);
document.getElementById("brand").addEventListener("click", (event) => {
  event.preventDefault();
  newChat();
});
document.getElementById("search-chats").addEventListener("click", () => search.open());
document.getElementById("show-summary").addEventListener("click", () => chat.openSummary());
document.getElementById("open-sidebar").addEventListener("click", () => drawer.open());
document.getElementById("close-sidebar").addEventListener("click", () => drawer.close({ restoreFocus: true }));
document.getElementById("backdrop").addEventListener("click", () => drawer.close());
// Opening a chat (or the Memory page, already open) from the list on a phone: the drawer gets out
// of the way.
document.getElementById("sidebar").addEventListener("click", (event) => {
  if (event.target instanceof Element && event.target.closest(".chat-link, .nav-link") && narrow.matches) drawer.close();
});
narrow.addEventListener("change", () => drawer.close());

// Ctrl+K (⌘K on a Mac) searches the chats, Ctrl+Shift+O (⌘⇧O) starts a new one, as in ChatGPT.
document.addEventListener("keydown", (event) => {
  if (!(event.ctrlKey || event.metaKey) || event.altKey || event.isComposing) return;
  const key = event.key.toLowerCase();
  if (key === "k" && !event.shiftKey) {
    event.preventDefault();
    if (!document.querySelector("dialog[open]:not(#search-dialog)")) search.open();
  } else if (key === "o" && event.shiftKey && !document.querySelector("dialog[open]")) {
    event.preventDefault();
    newChat();
  }
});
document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape" || event.defaultPrevented || document.querySelector("dialog[open]")) return;
  if (chatShown() && chat.isStreaming()) {
    event.preventDefault();
    chat.stop();
  } else if (drawer.sidebar.classList.contains("open")) {
    drawer.close({ restoreFocus: true });
  }
});

window.addEventListener("hashchange", route);
window.addEventListener("popstate", route);

setupSummaryDialog();
setupCitationPopover();
// Who is signed in (and the CSRF token every change carries); a 401 goes to the sign-in page.
loadSession()
  .then(setupAccount)
  .catch((error) => toast(`Could not check who is signed in: ${error.message}`, "error"));
api.config()
  .then((config) => {
    composer.configure(config);
    chat.setMemoryPaused(config.memory?.paused);
  })
  .catch(() => composer.configure({ web_search: { available: false, reason: "the server did not say" } }));
// The saved theme (theme.js applied the local copy already), "Use web tool" default, time zone.
loadPreferences({ onUseWebDefault: (on) => composer.setWebDefault(on) })
  .catch((error) => toast(`Could not read your settings: ${error.message}`, "error"));
sidebar.load();
route();
document.documentElement.classList.add("ready");

// Start-up and the page-level wiring: routes (#/chat/<id>, #/chat/<id>/<message id> pointing at
// one message, #/memory, or the new-chat draft), which view the main area shows, the sidebar
// drawer on narrow screens, and global keys (Esc stops a streaming reply).

import { setupAccount } from "./account.js";
import { api, loadSession } from "./api.js";
import { createChat } from "./chat.js";
import { setupCitationPopover } from "./citations.js";
import { createComposer } from "./composer.js";
import { setupSummaryDialog } from "./dialogs.js";
import { toast } from "./dom.js";
import { createMemoryPage } from "./memory.js";
import { createSidebar } from "./sidebar.js";

const CHAT_ROUTE = /^#\/chat\/([0-9a-f-]{36})(?:\/([0-9a-f-]{36}))?$/i;
const MEMORY_ROUTE = /^#\/memory\/?$/;
const main = document.getElementById("main");
const memoryLink = document.getElementById("memory-link");
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
const chatShown = () => main.dataset.view !== "memory";
const composer = createComposer({
  onSend: (text, useWeb) => chat.send(text, useWeb),
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

/** The main area shows a chat (or the draft) or the Memory page; CSS hides the other one. */
function showView(view) {
  const was = main.dataset.view;
  main.dataset.view = view;
  if (view === "memory") {
    memoryLink.setAttribute("aria-current", "page");
    sidebar.setActive(null);
    document.getElementById("chat-title").textContent = "Memory";
    document.title = "Memory · ResolveAI";
    if (was !== "memory") memoryPage.show();
  } else {
    memoryLink.removeAttribute("aria-current");
    if (was === "memory") memoryPage.hide(); // a delete waiting for its Undo is sent now
  }
}

function route() {
  if (MEMORY_ROUTE.test(location.hash)) {
    showView("memory");
  } else {
    showView("chat");
    const match = CHAT_ROUTE.exec(location.hash);
    if (match) {
      const messageId = match[2]?.toLowerCase();
      chat.open(match[1].toLowerCase(), { highlight: messageId, quote: messageId && quotes.get(messageId) });
    } else {
      chat.showDraft();
    }
  }
  if (narrow.matches) drawer.close();
}

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
sidebar.load();
route();
document.documentElement.classList.add("ready");

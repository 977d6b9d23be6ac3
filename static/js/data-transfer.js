// Export and import (chat/export_routes.py): a chat as Markdown or JSON from the chat's header,
// everything as one JSON file, and a file imported back (a ResolveAI export, or a ChatGPT
// conversations.json or its .zip). Self-contained: `setupDataTransfer` adds its own controls
// (an Export menu in the header; Export all data and Import chats… in the Settings page's
// "Your data" section).
//
// Downloads are plain links to GET endpoints (the session cookie signs them in; the server sends
// them as attachments), so the browser streams them to disk and no JSON is held in the page.

import { importData } from "./api.js";
import { announce, el, icon, toast } from "./dom.js";

const CHAT_ROUTE = /^#\/chat\/([0-9a-f-]{36})/i;
export const IMPORT_ACCEPT = ".json,.zip,application/json,application/zip";

function download(href) {
  const link = el("a", { href, download: "", hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
}

export function chatExportHref(chatId, format) {
  return `/api/chats/${encodeURIComponent(chatId)}/export?format=${format}`;
}

/** One message (a reply, a research report) as a Markdown file. */
export function messageExportHref(chatId, messageId) {
  return `/api/chats/${encodeURIComponent(chatId)}/messages/${encodeURIComponent(messageId)}/export`;
}

/** Download every chat, memory, preference and document's metadata as one JSON file. */
export function exportEverything() {
  download("/api/export");
}

/** Download one chat: `markdown` (the branch shown) or `json` (every version). */
export function exportChat(chatId, format = "markdown") {
  download(chatExportHref(chatId, format));
}

function describe(result) {
  const chats = result.chats.imported;
  const parts = [`Imported ${chats} chat${chats === 1 ? "" : "s"}`];
  if (result.memories.imported) parts.push(`${result.memories.imported} memories`);
  let text = parts.join(" and ");
  if (result.chats.skipped) text += ` (${result.chats.skipped} already here)`;
  return `${text}.`;
}

/** Import a file; resolves with the server's answer (what was imported and skipped), rejects
 *  with an ApiError carrying the server's reason (not JSON, too large, …). */
export async function importFile(file) {
  const result = await importData(file);
  return { ...result, summary: describe(result) };
}

/** Let the user pick a file and import it, telling how it went; `onImported(result)` after. */
export function pickAndImport(onImported = () => {}) {
  const input = el("input", { type: "file", accept: IMPORT_ACCEPT, hidden: true });
  input.addEventListener("change", async () => {
    const [file] = input.files;
    input.remove();
    if (!file) return;
    toast(`Importing ${file.name}…`);
    try {
      const result = await importFile(file);
      toast(result.summary);
      announce(result.summary);
      onImported(result);
    } catch (error) {
      // The server's reason already names the file ("conversations.json: not valid JSON …").
      toast(`Could not import: ${error.message}`, "error");
    }
  });
  document.body.append(input);
  input.click();
}

/** The header's Export menu: shown while a chat is open, its links follow the open chat. */
function setupChatExportMenu() {
  const topbar = document.querySelector(".topbar");
  const anchor = document.getElementById("show-summary");
  if (!topbar || !anchor) return;
  const button = el("button", {
    type: "button", class: "ghost-button", id: "export-chat", "aria-haspopup": "menu",
    "aria-expanded": "false", "aria-controls": "export-chat-menu", title: "Export this chat",
  }, icon("download"), el("span", { text: "Export" }));
  const markdown = el("a", { class: "menu-item", role: "menuitem", id: "export-chat-markdown", download: "" },
    icon("file"), el("span", { text: "Export as Markdown" }));
  const json = el("a", { class: "menu-item", role: "menuitem", id: "export-chat-json", download: "" },
    icon("download"), el("span", { text: "Export as JSON" }));
  const menu = el("div", { class: "export-menu", id: "export-chat-menu", role: "menu", hidden: true }, markdown, json);
  const wrap = el("div", { class: "export-wrap chat-only", hidden: true }, button, menu);
  anchor.after(wrap);

  const close = () => {
    menu.hidden = true;
    button.setAttribute("aria-expanded", "false");
  };
  const follow = () => {
    const match = CHAT_ROUTE.exec(location.hash);
    wrap.hidden = !match;
    close();
    if (!match) return;
    markdown.href = chatExportHref(match[1], "markdown");
    json.href = chatExportHref(match[1], "json");
  };
  button.addEventListener("click", () => {
    const opening = menu.hidden;
    menu.hidden = !opening;
    button.setAttribute("aria-expanded", String(opening));
    if (opening) markdown.focus();
  });
  menu.addEventListener("click", close);
  menu.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    event.stopPropagation(); // Esc closes the menu, not a streaming reply
    close();
    button.focus();
  });
  document.addEventListener("click", (event) => {
    if (!wrap.contains(event.target)) close();
  });
  window.addEventListener("hashchange", follow);
  follow();
}

/** "Export all data" and "Import chats…" in the Settings page's "Your data" section. */
function setupDataSection(onImported) {
  const section = document.getElementById("settings-data");
  if (!section) return;
  const exportAll = el("button", { type: "button", class: "secondary-button", id: "export-all" },
    icon("download"), el("span", { text: "Export all data" }));
  const importChats = el("button", { type: "button", class: "secondary-button", id: "import-chats" },
    icon("upload"), el("span", { text: "Import chats…" }));
  exportAll.addEventListener("click", exportEverything);
  importChats.addEventListener("click", () => pickAndImport(onImported));
  section.append(
    el("p", { class: "settings-intro", text: "Every chat, memory and preference as one JSON file; "
      + "import one back, or a ChatGPT export (conversations.json or its .zip)." }),
    el("div", { class: "settings-actions" }, exportAll, importChats),
  );
}

/** Add the controls; `onImported(result)` runs after a successful import (reload the list). */
export function setupDataTransfer({ onImported = () => {} } = {}) {
  setupChatExportMenu();
  setupDataSection(onImported);
}

// Search across chats (Ctrl+K, or "Search chats" in the sidebar): a dialog that asks
// GET /api/search as you type and lists the chats found, each with its title and a snippet of the
// best matching message, the matching words marked. The server sends titles and snippets as
// plain-text parts ({text, match}); they become text nodes and <mark> elements here, never HTML.
// Choosing a result (click, or ↑/↓ and Enter) opens the chat scrolled to that message.

import { api } from "./api.js";
import { el } from "./dom.js";

const SEARCH_DELAY_MS = 200;

export function createSearch({ onOpen }) {
  const dialog = document.getElementById("search-dialog");
  const input = document.getElementById("search-input");
  const results = document.getElementById("search-results");
  const status = document.getElementById("search-status");
  let hits = [];
  let active = -1;
  let timer = 0;
  let ticket = 0;

  function open() {
    if (dialog.open) {
      input.select();
      return;
    }
    dialog.showModal();
    input.focus();
    input.select();
    if (input.value.trim()) find(); // the last search, again: its chats may have changed
  }

  async function find() {
    const q = input.value.trim();
    const mine = ++ticket;
    if (!q) {
      show([], "");
      return;
    }
    status.textContent = "Searching…";
    try {
      const found = await api.search(q);
      if (mine !== ticket) return; // a newer search answered first
      show(found, found.length ? `${found.length} chat${found.length === 1 ? "" : "s"} found` : `No chats match “${q}”.`);
    } catch (error) {
      if (mine === ticket) show([], `Could not search: ${error.message}`);
    }
  }

  function show(found, message) {
    hits = found;
    active = found.length ? 0 : -1;
    status.textContent = message;
    results.replaceChildren(...found.map(result));
    mark();
  }

  function result(hit, index) {
    const option = el(
      "li",
      { class: "search-result", role: "option", id: `search-result-${index}`, dataset: { chatId: hit.chat_id } },
      el("span", { class: "search-result-title" }, marked(hit.title_parts, hit.title)),
      hit.snippet ? el("span", { class: "search-result-snippet" }, marked(hit.snippet)) : null,
    );
    option.addEventListener("click", () => choose(index));
    option.addEventListener("mousemove", () => {
      if (active !== index) {
        active = index;
        mark();
      }
    });
    return option;
  }

  function mark() {
    for (const [index, node] of [...results.children].entries()) node.setAttribute("aria-selected", String(index === active));
    if (active >= 0) {
      input.setAttribute("aria-activedescendant", `search-result-${active}`);
      results.children[active].scrollIntoView({ block: "nearest" });
    } else {
      input.removeAttribute("aria-activedescendant");
    }
  }

  function choose(index) {
    const hit = hits[index];
    if (!hit) return;
    dialog.close();
    onOpen(hit);
  }

  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(find, SEARCH_DELAY_MS);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      if (!hits.length) return;
      active = (active + (event.key === "ArrowDown" ? 1 : -1) + hits.length) % hits.length;
      mark();
    } else if (event.key === "Escape") {
      // A search box would only clear itself on the first Esc: Esc closes the dialog at once.
      event.preventDefault();
      dialog.close();
    } else if (event.key === "Enter" && !event.isComposing) {
      event.preventDefault();
      clearTimeout(timer);
      if (active >= 0) choose(active);
      else find();
    }
  });
  // A click on the backdrop (outside the dialog's box) closes it, as Esc does.
  dialog.addEventListener("click", (event) => {
    if (event.target === dialog) dialog.close();
  });

  return { open, isOpen: () => dialog.open };
}

/** Parts as text with the matches in <mark>; `fallback` when there are no parts. */
function marked(parts, fallback = "") {
  if (!parts?.length) return [fallback];
  return parts.map((part) => (part.match ? el("mark", { text: part.text }) : part.text));
}

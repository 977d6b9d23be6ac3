// The chat list: pinned chats first (under "Pinned"), then newest activity first, grouped by day,
// filtered by title on the server, with pin/unpin, rename (inline) and delete (after a
// confirmation, which can also forget the memories the chat gave). A new chat's title, generated
// after its first reply, is picked up by reading the list again (`watchTitle`). Temporary chats carry a badge. Items are plain links (#/chat/<id>), so opening one is
// ordinary navigation: keyboard, middle-click and the Back button all work.

import { api } from "./api.js";
import { confirmDialog } from "./dialogs.js";
import { announce, el, icon, toast } from "./dom.js";

const FILTER_DELAY_MS = 200;
// A new chat's generated title is written after its reply, by whichever server process: the list
// is read again after these waits until the chat's title is no longer its first one.
const TITLE_WAITS_MS = [700, 1500, 3000, 6000];

export function chatHref(chatId) {
  return `#/chat/${chatId}`;
}

export function createSidebar({ onDeleted, onRenamed, onLoaded = () => {} }) {
  const list = document.getElementById("chat-list");
  const filter = document.getElementById("chat-filter");
  let chats = [];
  let activeId = null;
  let query = "";
  let loadCount = 0;
  let filterTimer = 0;

  async function load() {
    const ticket = ++loadCount;
    list.setAttribute("aria-busy", "true");
    try {
      const found = await api.listChats(query);
      if (ticket !== loadCount) return; // a newer filter answered first
      chats = found;
      render();
      onLoaded();
    } catch (error) {
      if (ticket === loadCount) {
        list.replaceChildren(el("p", { class: "list-note", text: `Could not load chats: ${error.message}` }));
      }
    } finally {
      if (ticket === loadCount) list.setAttribute("aria-busy", "false");
    }
  }

  function render() {
    if (!chats.length) {
      const text = query ? `No chats match “${query}”.` : "No chats yet. Say hello below.";
      list.replaceChildren(el("p", { class: "list-note", text }));
      return;
    }
    const groups = new Map();
    const pinned = chats.filter((chat) => chat.pinned);
    if (pinned.length) groups.set("Pinned", pinned);
    for (const chat of chats.filter((c) => !c.pinned)) {
      const label = dayGroup(chat.updated_at);
      if (!groups.has(label)) groups.set(label, []);
      groups.get(label).push(chat);
    }
    const sections = [];
    for (const [label, items] of groups) {
      sections.push(
        el(
          "section",
          { class: "chat-group" },
          el("h2", { class: "chat-group-title", text: label }),
          el("ul", { class: "chat-items", role: "list" }, items.map(item)),
        ),
      );
    }
    list.replaceChildren(...sections);
  }

  function item(chat) {
    const link = el("a", {
      class: "chat-link",
      href: chatHref(chat.chat_id),
      title: chat.temporary ? `${chat.title} (temporary chat)` : chat.title,
      "aria-current": chat.chat_id === activeId ? "page" : undefined,
    }, el("span", { class: "chat-link-title", text: chat.title }));
    if (chat.temporary) {
      link.append(el("span", { class: "badge badge-temporary small", text: "Temporary", "aria-label": "(temporary chat)" }));
    }
    const pin = el("button", { type: "button", class: "icon-button small", "aria-label": `${chat.pinned ? "Unpin" : "Pin"} chat: ${chat.title}`, title: chat.pinned ? "Unpin" : "Pin" }, icon("pin"));
    const rename = el("button", { type: "button", class: "icon-button small", "aria-label": `Rename chat: ${chat.title}`, title: "Rename" }, icon("pencil"));
    const remove = el("button", { type: "button", class: "icon-button small", "aria-label": `Delete chat: ${chat.title}`, title: "Delete" }, icon("trash"));
    const row = el(
      "li",
      { class: chat.pinned ? "chat-item pinned" : "chat-item", dataset: { chatId: chat.chat_id } },
      link,
      el("div", { class: "chat-actions" }, rename, pin, remove),
    );
    pin.addEventListener("click", () => togglePin(chat));
    rename.addEventListener("click", () => startRename(row, chat));
    remove.addEventListener("click", () => confirmDelete(chat, remove));
    return row;
  }

  function startRename(row, chat) {
    const input = el("input", { type: "text", class: "rename-input", "aria-label": "New chat title", maxlength: "200" });
    input.value = chat.title;
    const link = row.querySelector(".chat-link");
    link.hidden = true;
    row.classList.add("renaming");
    row.prepend(input);
    input.focus();
    input.select();
    let finished = false;
    const finish = async (save) => {
      if (finished) return;
      finished = true;
      const title = input.value.trim();
      if (save && title && title !== chat.title) {
        try {
          const updated = await api.rename(chat.chat_id, title);
          chat.title = updated.title;
          onRenamed(updated);
          announce(`Renamed to ${updated.title}`);
        } catch (error) {
          toast(`Could not rename the chat: ${error.message}`, "error");
        }
      }
      render();
      list.querySelector(`[data-chat-id="${CSS.escape(chat.chat_id)}"] .chat-link`)?.focus();
    };
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault();
        finish(true);
      } else if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation(); // Esc here cancels the rename, not a streaming reply
        finish(false);
      }
    });
    input.addEventListener("blur", () => finish(true));
  }

  async function togglePin(chat) {
    try {
      const updated = await api.pin(chat.chat_id, !chat.pinned);
      chat.pinned = updated.pinned;
      announce(updated.pinned ? `Pinned ${updated.title}` : `Unpinned ${updated.title}`);
    } catch (error) {
      toast(`Could not ${chat.pinned ? "unpin" : "pin"} the chat: ${error.message}`, "error");
      return;
    }
    await load(); // the server's order: pinned first, then by activity
    list.querySelector(`[data-chat-id="${CSS.escape(chat.chat_id)}"] .chat-link`)?.focus();
  }

  async function confirmDelete(chat, button) {
    // A temporary chat never wrote memory: there is nothing to offer to forget.
    const { confirmed, checked: forgetMemories } = await confirmDialog({
      title: "Delete this chat?",
      text: chat.temporary
        ? `“${chat.title}” and all its messages will be deleted. It was a temporary chat, so nothing from it is in memory.`
        : `“${chat.title}” and all its messages will be deleted. Memories saved from it stay on the Memory page unless you tick the box.`,
      checkbox: chat.temporary ? null : "Also forget the memories saved from this chat",
      confirm: "Delete",
    });
    if (!confirmed) {
      button.focus();
      return;
    }
    try {
      await api.remove(chat.chat_id, { forgetMemories });
    } catch (error) {
      if (error.status !== 404) {
        toast(`Could not delete the chat: ${error.message}`, "error");
        return;
      }
    }
    chats = chats.filter((c) => c.chat_id !== chat.chat_id);
    render();
    announce(forgetMemories ? `Deleted ${chat.title} and its memories` : `Deleted ${chat.title}`);
    onDeleted(chat.chat_id);
  }

  filter.addEventListener("input", () => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => {
      query = filter.value.trim();
      load();
    }, FILTER_DELAY_MS);
  });
  filter.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && filter.value) {
      event.stopPropagation();
      filter.value = "";
      query = "";
      load();
    }
  });

  return {
    load,
    /** Put a chat at the top (it just got a message); keeps the filter's view honest. */
    upsert(chat) {
      chat = { ...chats.find((c) => c.chat_id === chat.chat_id), ...chat }; // keeps `pinned`
      chats = chats.filter((c) => c.chat_id !== chat.chat_id);
      if (!query || chat.title.toLowerCase().includes(query.toLowerCase())) chats.unshift(chat);
      render();
    },
    setActive(chatId) {
      activeId = chatId;
      for (const link of list.querySelectorAll(".chat-link")) {
        if (link.closest(".chat-item").dataset.chatId === chatId) link.setAttribute("aria-current", "page");
        else link.removeAttribute("aria-current");
      }
    },
    /** Read the list again until the new chat's generated title is in (or a few tries passed). */
    async watchTitle(chatId) {
      for (const wait of TITLE_WAITS_MS) {
        await new Promise((resolve) => setTimeout(resolve, wait));
        await load();
        const chat = chats.find((c) => c.chat_id === chatId);
        if (!chat || chat.title_source !== "auto") return;
      }
    },
    titleOf(chatId) {
      return chats.find((c) => c.chat_id === chatId)?.title;
    },
    chatOf(chatId) {
      return chats.find((c) => c.chat_id === chatId);
    },
  };
}

function dayGroup(timestamp) {
  const then = new Date(timestamp);
  if (Number.isNaN(then.getTime())) return "Earlier";
  const today = new Date();
  today.setHours(0, 0, 0, 0);
  const days = Math.floor((today - new Date(then).setHours(0, 0, 0, 0)) / 86_400_000);
  if (days <= 0) return "Today";
  if (days === 1) return "Yesterday";
  if (days < 7) return "Previous 7 days";
  if (days < 30) return "Previous 30 days";
  return then.toLocaleDateString(undefined, { month: "long", year: "numeric" });
}

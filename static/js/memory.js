// The Memory page (#/memory): what the assistant remembers about the user, each memory with the
// user's own words it came from (the quote) and a link to that message. Search, inline edit,
// delete with Undo (the DELETE waits a few seconds, see undo.js), the history of replaced facts,
// Export, "Forget everything" and the switch that pauses memory.
//
// Memory content and quotes are the user's words as the server keeps them: always set as text.

import { api } from "./api.js";
import { confirmDialog } from "./dialogs.js";
import { announce, el, icon, toast } from "./dom.js";
import { chatHref } from "./sidebar.js";
import { deferWithUndo, flushPending, hasPending } from "./undo.js";

const PAGE_SIZE = 50;
const MAX_PAGE = 500; // the most the server lists at once
const SEARCH_DELAY_MS = 200;
const MAX_CHARS = 500;

export function createMemoryPage({ sidebar, onPausedChange = () => {}, onOpenSource = () => {} }) {
  const list = document.getElementById("memory-list");
  const count = document.getElementById("memory-count");
  const search = document.getElementById("memory-search");
  const history = document.getElementById("memory-history");
  const paused = document.getElementById("memory-paused");
  const pausedNote = document.getElementById("memory-paused-note");
  const more = document.getElementById("memory-more");
  const exportLink = document.getElementById("memory-export");
  const forgetAll = document.getElementById("memory-forget-all");

  const state = {
    items: [], // as loaded, newest first (pending deletes included: they are only hidden)
    total: 0,
    token: null,
    query: "",
    ticket: 0,
    pending: new Set(), // ids whose DELETE waits for its Undo to run out
    editing: null, // id being edited, and its form (kept across re-renders: it holds the typing)
    editor: null,
    visible: false,
    loaded: Promise.resolve(),
  };
  const replacements = new Map(); // memory id → content, for "Replaced by …" outside the loaded page
  let searchTimer = 0;

  /**
   * Read the list: the first page, the next one (`append`), or again as much as is shown
   * (`refresh`, after our own change: the list on screen and the forget token stay in step, so
   * "Forget everything" deletes what the page shows and nothing saved since).
   */
  function load({ append = false, refresh = false } = {}) {
    state.loaded = read({ append, refresh });
    return state.loaded;
  }

  async function read({ append, refresh }) {
    const ticket = ++state.ticket;
    list.setAttribute("aria-busy", "true");
    try {
      const page = await api.memories({
        q: state.query,
        limit: refresh ? Math.min(Math.max(state.items.length, PAGE_SIZE), MAX_PAGE) : PAGE_SIZE,
        offset: append ? state.items.length : 0,
        includeSuperseded: history.checked,
      });
      if (ticket !== state.ticket) return; // a newer search answered first
      state.items = append ? [...state.items, ...dedupe(state.items, page.memories)] : page.memories;
      state.total = page.total;
      state.token = page.forget_token;
      render();
    } catch (error) {
      if (ticket !== state.ticket) return;
      count.textContent = "";
      list.replaceChildren(el("li", { class: "memory-note error-text", role: "alert", text: `Could not load memories: ${error.message}` }));
      more.hidden = true;
    } finally {
      if (ticket === state.ticket) list.setAttribute("aria-busy", "false");
    }
  }

  async function loadSettings() {
    try {
      showPaused((await api.settings()).memory_paused);
    } catch (error) {
      toast(`Could not read the memory setting: ${error.message}`, "error");
    }
  }

  function showPaused(value) {
    paused.checked = Boolean(value);
    pausedNote.hidden = !paused.checked;
  }

  const shownItems = () => state.items.filter((m) => !state.pending.has(m.memory_id));

  function render() {
    const items = shownItems();
    if (state.editing && !items.some((m) => m.memory_id === state.editing)) {
      state.editing = null; // it left the list (another search, or deleted elsewhere)
      state.editor = null;
    }
    const hiddenCount = state.items.length - items.length;
    const total = Math.max(0, state.total - hiddenCount);
    count.textContent = describeCount(total);
    more.hidden = state.items.length >= state.total;
    forgetAll.disabled = !total && !state.query && !history.checked;
    if (!items.length) {
      list.replaceChildren(emptyNote());
      return;
    }
    // A re-render (a refresh after an edit, say) keeps the keyboard on the same button.
    const focused = document.activeElement?.closest?.("#memory-list [data-action]");
    const keep = focused && { id: focused.closest(".memory-item")?.dataset.memoryId, action: focused.dataset.action };
    const typing = state.editor?.contains(document.activeElement) ? document.activeElement : null;
    list.replaceChildren(...items.map(itemView));
    if (keep) focusAction(keep.id, keep.action);
    typing?.focus();
  }

  function focusAction(memoryId, action) {
    const item = list.querySelector(`.memory-item[data-memory-id="${CSS.escape(memoryId)}"]`);
    const target = item?.querySelector(`[data-action="${action}"]`) || item?.querySelector("[data-action]");
    target?.focus();
    return Boolean(target);
  }

  function describeCount(total) {
    const noun = total === 1 ? "memory" : "memories";
    if (state.query) return `${total} ${noun} match “${state.query}”`;
    if (history.checked) return `${total} ${noun}, replaced ones included`;
    return `${total} ${noun}`;
  }

  function emptyNote() {
    if (state.query) return el("li", { class: "memory-note", text: `No memories match “${state.query}”.` });
    return el(
      "li",
      { class: "memory-empty" },
      icon("memory"),
      el("h2", { text: "Nothing remembered yet" }),
      el("p", { text: "Tell me about yourself in any chat; what you state is saved here with your own words as evidence." }),
      el("p", { class: "muted", text: "For example: “I’m vegetarian” or “My daughter is called Mia.” You can edit or delete every memory here." }),
    );
  }

  function itemView(memory) {
    const replaced = Boolean(memory.superseded_by || memory.valid_to);
    const item = el("li", { class: replaced ? "memory-item replaced" : "memory-item", dataset: { memoryId: memory.memory_id } });
    const body = el("div", { class: "memory-body" });
    if (state.editing === memory.memory_id) body.append(state.editor);
    else body.append(replaced ? el("p", { class: "memory-content" }, el("s", { text: memory.content })) : el("p", { class: "memory-content", text: memory.content }));
    if (replaced) body.append(replacedNote(memory));
    body.append(
      el("blockquote", { class: "memory-quote" }, icon("quote"), el("span", { class: "memory-quote-text", text: memory.quote || "" })),
      el("p", { class: "memory-meta" }, sourceLink(memory), el("span", { class: "memory-date", text: savedOn(memory) })),
    );
    item.append(body);
    if (state.editing !== memory.memory_id) item.append(actions(memory, replaced));
    return item;
  }

  function replacedNote(memory) {
    const note = el("p", { class: "memory-replaced" });
    const when = formatDate(memory.valid_to);
    const by = memory.superseded_by;
    const content = by && (state.items.find((m) => m.memory_id === by)?.content ?? replacements.get(by));
    if (content) note.append("Replaced by “", el("span", { class: "memory-replacement", text: content }), `”${when ? ` on ${when}` : ""}`);
    else note.textContent = `Replaced by a newer memory${when ? ` on ${when}` : ""}`;
    if (by && !content) fetchReplacement(by);
    return note;
  }

  async function fetchReplacement(memoryId) {
    if (replacements.has(memoryId)) return;
    replacements.set(memoryId, null); // asked once
    try {
      replacements.set(memoryId, (await api.memory(memoryId)).content);
      if (state.visible) render();
    } catch {
      // Gone meanwhile: "a newer memory" stays.
    }
  }

  function sourceLink(memory) {
    if (!memory.chat_id) return el("span", { class: "memory-source gone", text: "Its chat was deleted" });
    const title = sidebar.titleOf(memory.chat_id);
    const href = memory.message_id ? `${chatHref(memory.chat_id)}/${memory.message_id}` : chatHref(memory.chat_id);
    const link = el(
      "a",
      { class: "memory-source", href, title: "Open the message this memory came from" },
      icon("link"),
      el("span", { text: title ? `Your message in “${title}”` : "Your message" }),
    );
    link.addEventListener("click", () => onOpenSource(memory));
    return link;
  }

  function actions(memory, replaced) {
    const box = el("div", { class: "memory-actions" });
    if (!replaced) {
      const edit = el("button", { type: "button", class: "icon-button small", "aria-label": `Edit memory: ${memory.content}`, title: "Edit", dataset: { action: "edit" } }, icon("pencil"));
      edit.addEventListener("click", () => startEdit(memory));
      box.append(edit);
    }
    const remove = el("button", { type: "button", class: "icon-button small", "aria-label": `Delete memory: ${memory.content}`, title: "Delete", dataset: { action: "delete" } }, icon("trash"));
    remove.addEventListener("click", () => deleteWithUndo(memory));
    box.append(remove);
    return box;
  }

  // --- edit -----------------------------------------------------------------------------------

  function startEdit(memory) {
    state.editing = memory.memory_id;
    state.editor = editor(memory);
    render();
    const input = list.querySelector(".memory-edit textarea");
    input?.focus();
    input?.select();
  }

  function editor(memory) {
    const id = `memory-edit-${memory.memory_id}`;
    const input = el("textarea", { id, class: "memory-edit-input", rows: "2", maxlength: String(MAX_CHARS), "aria-label": "Memory", "aria-describedby": `${id}-hint` });
    input.value = memory.content;
    const error = el("p", { class: "memory-edit-error error-text", role: "alert", hidden: true });
    const save = el("button", { type: "submit", class: "primary-button small", text: "Save" });
    const cancel = el("button", { type: "button", class: "secondary-button small", text: "Cancel" });
    const form = el(
      "form",
      { class: "memory-edit", novalidate: true },
      input,
      el("p", { class: "hint memory-edit-hint", id: `${id}-hint`, text: "Enter saves · Esc cancels" }),
      error,
      el("div", { class: "memory-edit-actions" }, cancel, save),
    );
    const close = () => {
      state.editing = null;
      state.editor = null;
      render();
      focusAction(memory.memory_id, "edit");
    };
    const submit = async () => {
      const content = input.value.replace(/\s+/g, " ").trim();
      if (!content) {
        error.textContent = "A memory cannot be empty: delete it instead.";
        error.hidden = false;
        return;
      }
      if (content === memory.content) {
        close();
        return;
      }
      save.disabled = true;
      try {
        const updated = await api.editMemory(memory.memory_id, content);
        state.items = state.items.map((m) => (m.memory_id === memory.memory_id ? { ...m, ...updated } : m));
        announce("Memory saved");
        close();
        load({ refresh: true });
      } catch (error_) {
        save.disabled = false;
        error.textContent = `Could not save: ${error_.message}`;
        error.hidden = false;
      }
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      submit();
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        submit();
      } else if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        close();
      }
    });
    cancel.addEventListener("click", close);
    return form;
  }

  // --- delete with Undo ------------------------------------------------------------------------

  function deleteWithUndo(memory) {
    const id = memory.memory_id;
    const shown = shownItems();
    const next = shown[shown.findIndex((m) => m.memory_id === id) + 1] || shown.at(-2);
    state.pending.add(id);
    render();
    // Keep the keyboard where it was: on the next memory (or the search box when none is left).
    if (!next || !focusAction(next.memory_id, "delete")) search.focus();
    deferWithUndo({
      text: "Memory deleted",
      run: ({ keepalive = false } = {}) => api.removeMemory(id, { keepalive }),
      onUndo: () => {
        state.pending.delete(id);
        if (state.visible) render();
      },
    }).then(
      (result) => {
        if (result === null) return; // undone
        state.pending.delete(id);
        state.items = state.items.filter((m) => m.memory_id !== id);
        state.total = Math.max(0, state.total - 1);
        if (state.visible) load({ refresh: true });
      },
      (error) => {
        state.pending.delete(id);
        if (error.status === 404) {
          state.items = state.items.filter((m) => m.memory_id !== id);
        } else {
          toast(`Could not delete the memory: ${error.message}`, "error");
        }
        if (state.visible) load({ refresh: true });
      },
    );
  }

  // --- forget everything, export, pause -------------------------------------------------------

  forgetAll.addEventListener("click", async () => {
    const { confirmed } = await confirmDialog({
      title: "Forget everything?",
      text: "Every memory will be deleted, replaced ones too, and I will know nothing about you from earlier chats. Your chats stay. This cannot be undone.",
      confirm: "Forget everything",
    });
    if (!confirmed) {
      forgetAll.focus();
      return;
    }
    if (hasPending()) {
      await flushPending();
      await load({ refresh: true }); // a fresh token for what is left
    }
    await state.loaded; // a refresh after an edit or delete may still be on its way
    try {
      const { deleted } = await api.forgetAll(state.token);
      toast(`Forgot ${deleted} ${deleted === 1 ? "memory" : "memories"}.`);
      announce("All memories forgotten");
    } catch (error) {
      // 409: memories were saved since the list was loaded; show them before asking again.
      toast(error.status === 409 ? "New memories were saved meanwhile: look them over and try again." : `Could not forget: ${error.message}`, "error");
    }
    await load();
  });

  let exporting = false;
  exportLink.href = api.exportUrl;
  exportLink.addEventListener("click", async (event) => {
    if (exporting || !hasPending()) return; // the browser downloads it
    // A memory deleted a moment ago must not be in the file: send the pending deletes first.
    event.preventDefault();
    await flushPending();
    exporting = true;
    exportLink.click();
    exporting = false;
  });

  paused.addEventListener("change", async () => {
    const value = paused.checked;
    pausedNote.hidden = !value;
    try {
      const settings = await api.updateSettings({ memory_paused: value });
      showPaused(settings.memory_paused);
      onPausedChange(settings.memory_paused);
      announce(settings.memory_paused ? "Memory paused" : "Memory is on");
    } catch (error) {
      showPaused(!value);
      toast(`Could not change the memory setting: ${error.message}`, "error");
    }
  });

  search.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      state.query = search.value.trim();
      load();
    }, SEARCH_DELAY_MS);
  });
  search.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && search.value) {
      event.stopPropagation();
      search.value = "";
      state.query = "";
      load();
    }
  });
  history.addEventListener("change", () => load());
  more.addEventListener("click", () => load({ append: true }));

  return {
    show() {
      state.visible = true;
      loadSettings();
      return load();
    },
    /** Leaving the page: what waits for its Undo is sent now. */
    hide() {
      state.visible = false;
      state.editing = null;
      state.editor = null;
      return flushPending();
    },
    get visible() {
      return state.visible;
    },
    reload() {
      if (state.visible) load();
    },
  };
}

function dedupe(have, page) {
  const ids = new Set(have.map((m) => m.memory_id));
  return page.filter((m) => !ids.has(m.memory_id));
}

function formatDate(timestamp) {
  if (!timestamp) return "";
  const date = new Date(timestamp);
  if (Number.isNaN(date.getTime())) return "";
  return date.toLocaleDateString(undefined, { day: "numeric", month: "short", year: "numeric" });
}

function savedOn(memory) {
  const date = formatDate(memory.created_at);
  return date ? `Saved ${date}` : "";
}

// "Used 2 memories" under a reply: a button that unfolds what the assistant recalled about the
// user for it (from the saved message's `memories`, or the `memories` event while it streams),
// with a way to the Memory page where they can be edited or deleted.

import { el, icon } from "./dom.js";

let nextId = 0;

export class UsedMemoriesView {
  constructor() {
    this.listId = `used-memories-${++nextId}`;
    this.root = el("div", { class: "used-memories", hidden: true });
  }

  /** `memories`: [{memory_id, content}]; none hides the line. */
  set(memories) {
    const items = Array.isArray(memories) ? memories.filter((m) => m && typeof m.content === "string") : [];
    if (!items.length) {
      this.root.replaceChildren();
      this.root.hidden = true;
      return;
    }
    const label = `Used ${items.length} ${items.length === 1 ? "memory" : "memories"}`;
    const toggle = el(
      "button",
      { type: "button", class: "used-memories-toggle", "aria-expanded": "false", "aria-controls": this.listId },
      icon("memory"),
      el("span", { text: label }),
    );
    const panel = el(
      "div",
      { class: "used-memories-panel", id: this.listId, hidden: true },
      el("ul", { class: "used-memories-list", "aria-label": "Memories used for this reply" },
        items.map((memory) => el("li", { dataset: { memoryId: memory.memory_id }, text: memory.content }))),
      el("a", { class: "used-memories-manage", href: "#/memory", text: "Manage memories" }),
    );
    toggle.addEventListener("click", () => {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      panel.hidden = !open;
    });
    this.root.replaceChildren(toggle, panel);
    this.root.hidden = false;
  }
}

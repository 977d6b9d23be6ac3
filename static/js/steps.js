// The steps line above a reply: while it is prepared, the current step ("Searching the web for …")
// with a spinner and the seconds since Send (a local model can read a prompt for a while);
// afterwards a compact "3 steps · 4.2 s" button that unfolds the whole list with
// timings, so people can see what the assistant did without it getting in the way.

import { el, formatDuration, icon } from "./dom.js";

let nextId = 0;

export class StepsView {
  constructor() {
    this.steps = [];
    this.live = true;
    this.listId = `steps-${++nextId}`;
    this.root = el("div", { class: "steps" });
    this.startedAt = performance.now();
    this.liveText = undefined;
    this.renderLive();
    // Ticks while live, so a long step still shows that time passes.
    this.ticker = setInterval(() => this.live && this.renderLive(this.liveText), 1000);
  }

  /** A saved reply's steps; tool calls are matched to their steps by tool name, in order. */
  static fromSaved(steps, toolCalls, totalMs) {
    const view = new StepsView();
    view.steps = (steps || []).map((step) => ({ ...step }));
    const pending = [...(toolCalls || [])];
    for (const step of view.steps) {
      if (!step.tool) continue;
      const index = pending.findIndex((call) => call.name === step.tool);
      if (index === -1) continue;
      const [call] = pending.splice(index, 1);
      Object.assign(step, { duration_ms: call.duration_ms, ok: call.ok });
    }
    view.finish(totalMs);
    return view;
  }

  add(step) {
    this.steps.push({ ...step });
    if (this.live) this.renderLive();
  }

  /** Show a line that is not one of the server's steps (e.g. while waiting to send). */
  note(text) {
    if (this.live) this.renderLive(text);
  }

  toolStart(event) {
    // The server sends the tool's step just before its tool_start: pair them by name.
    const step = [...this.steps].reverse().find((s) => s.tool === event.name && !s.callId);
    if (step) step.callId = event.id;
  }

  toolEnd(event) {
    const step = this.steps.find((s) => s.callId === event.id);
    if (step) Object.assign(step, { duration_ms: event.duration_ms, ok: event.ok });
  }

  finish(totalMs) {
    this.live = false;
    clearInterval(this.ticker);
    // Never less than the last step's own time (saved times can be a few ms apart).
    const lastStep = this.steps.at(-1)?.elapsed_ms;
    this.totalMs = Number.isFinite(lastStep) && !(totalMs >= lastStep) ? lastStep : totalMs;
    this.renderSummary();
  }

  renderLive(text) {
    this.liveText = text;
    const current = text || this.steps.at(-1)?.text || "Starting";
    const seconds = Math.floor((performance.now() - this.startedAt) / 1000);
    const shownText = current.endsWith("…") ? current : `${current}…`;
    const line = this.root.querySelector(".step-current");
    if (line && line.textContent === shownText) {
      // Only the clock moved: update it alone, so screen readers do not re-read the step.
      this.root.querySelector(".step-elapsed").textContent = seconds ? `${seconds} s` : "";
      return;
    }
    this.root.className = "steps steps-live";
    this.root.setAttribute("role", "status");
    this.root.replaceChildren(
      el("span", { class: "spinner", "aria-hidden": "true" }),
      el("span", { class: "step-current", text: shownText }),
      el("span", { class: "step-elapsed", "aria-hidden": "true", text: seconds ? `${seconds} s` : "" }),
    );
  }

  renderSummary() {
    this.root.className = "steps steps-done";
    this.root.removeAttribute("role");
    if (!this.steps.length) {
      this.root.replaceChildren();
      this.root.hidden = true;
      return;
    }
    this.root.hidden = false;
    const count = `${this.steps.length} ${this.steps.length === 1 ? "step" : "steps"}`;
    const took = formatDuration(this.totalMs);
    const toggle = el(
      "button",
      { type: "button", class: "steps-toggle", "aria-expanded": "false", "aria-controls": this.listId },
      icon("chevron"),
      el("span", { text: took ? `${count} · ${took}` : count }),
    );
    const list = el("ol", { class: "steps-list", id: this.listId, hidden: true });
    for (const step of this.steps) list.append(stepItem(step));
    toggle.addEventListener("click", () => {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      list.hidden = !open;
    });
    this.root.replaceChildren(toggle, list);
  }
}

function stepItem(step) {
  const item = el(
    "li",
    { class: "step" },
    el("span", { class: "step-time", text: formatDuration(step.elapsed_ms) }),
    el("span", { class: "step-text", text: step.text }),
  );
  if (step.ok === false) item.append(el("span", { class: "step-tool step-failed", text: "failed" }));
  else if (Number.isFinite(step.duration_ms)) {
    item.append(el("span", { class: "step-tool", text: `took ${step.duration_ms < 1000 ? `${step.duration_ms} ms` : formatDuration(step.duration_ms)}` }));
  }
  return item;
}

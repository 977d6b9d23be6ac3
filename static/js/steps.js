// The steps line above a reply: while it is prepared, the current step ("Searching the web for …")
// with a spinner and the seconds since Send (a local model can read a prompt for a while);
// afterwards a compact "3 steps · 4.2 s" button that unfolds the whole list with each step's
// duration, so people can see what the assistant did without it getting in the way.
//
// Only when there is something to see: a tool ran, or the reply took over SHOW_AFTER_MS. A quick
// plain answer has no steps line at all, and the live line ("Thinking…") goes once text streams
// (it comes back for a step after that, e.g. a search the model starts after a preamble).

import { el, formatDuration, icon } from "./dom.js";

let nextId = 0;
export const SHOW_AFTER_MS = 3000;

export class StepsView {
  constructor() {
    this.steps = [];
    this.live = true;
    this.listId = `steps-${++nextId}`;
    this.root = el("div", { class: "steps" });
    this.startedAt = performance.now();
    this.liveText = undefined;
    this.textStreaming = false; // text arrived after the last step: the live line steps aside
    this.toolCalls = 0;
    this.renderLive();
    // Ticks while live, so a long step still shows that time passes.
    this.ticker = setInterval(() => this.live && this.renderLive(this.liveText), 1000);
  }

  /** A saved reply's steps; tool calls are matched to their steps by tool name, in order. */
  static fromSaved(steps, toolCalls, totalMs) {
    const view = new StepsView();
    view.steps = (steps || []).map((step) => ({ ...step }));
    view.toolCalls = (toolCalls || []).length;
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
    this.textStreaming = false;
    if (this.live) this.renderLive();
  }

  /** Text of the reply is streaming: "Thinking…" has nothing more to say. */
  text() {
    if (this.textStreaming || !this.live) return;
    this.textStreaming = true;
    this.renderLive(this.liveText);
  }

  /** A tool ran, or the reply has taken long enough for its steps to be worth a line. */
  worthShowing(totalMs) {
    return this.toolCalls > 0 || this.steps.some((step) => step.tool) || totalMs > SHOW_AFTER_MS;
  }

  /** Show a line that is not one of the server's steps (e.g. while waiting to send). */
  note(text) {
    if (this.live) this.renderLive(text);
  }

  toolStart(event) {
    this.toolCalls += 1;
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
    const elapsedMs = performance.now() - this.startedAt;
    // A line of the page's own (`note`) shows at once: it says why nothing happens yet.
    this.root.hidden = this.textStreaming || !(text || this.worthShowing(elapsedMs));
    const current = text || this.steps.at(-1)?.text || "Starting";
    const seconds = Math.floor(elapsedMs / 1000);
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
    if (!this.steps.length || !this.worthShowing(this.totalMs)) {
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
    this.steps.forEach((step, i) => {
      // Each step's own time: until the next step began (the last: until the reply ended).
      const end = i + 1 < this.steps.length ? this.steps[i + 1].elapsed_ms : this.totalMs;
      const took = Number.isFinite(step.duration_ms) ? step.duration_ms : end - step.elapsed_ms;
      list.append(stepItem(step, took));
    });
    toggle.addEventListener("click", () => {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      list.hidden = !open;
    });
    this.root.replaceChildren(toggle, list);
  }
}

function stepItem(step, took) {
  const at = formatDuration(step.elapsed_ms);
  const item = el(
    "li",
    { class: "step", title: at ? `Started at ${at}` : undefined },
    el("span", { class: "step-time", text: formatDuration(Math.max(0, took)) }),
    el("span", { class: "step-text", text: step.text }),
  );
  if (step.ok === false) item.append(el("span", { class: "step-tool step-failed", text: "failed" }));
  return item;
}

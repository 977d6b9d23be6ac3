// The Settings page (#/settings). Yours to change, each saved at once as a preference on the
// server (PATCH /api/settings): the theme, memory on or off (the same switch as the Memory page's
// pause), whether "Use web tool" starts ticked, custom instructions (saved with their button), and
// which tools the assistant may use. Read-only,
// what this server runs on (GET /api/settings/system): the model of each role (and whether it is
// the local fallback), the database, the embedder, web search and tracing.
//
// At start-up `loadPreferences` applies the saved theme and "Use web tool" default, and tells
// the server the browser's time zone (for the current_datetime tool) when it changed.
//
// Everything from the server is set as text.

import { api } from "./api.js";
import { announce, el, toast } from "./dom.js";

const ROLE_NAMES = { chat: "Chat model", utility: "Utility model", memory: "Memory model" };

/** The browser's IANA time zone, e.g. "Europe/Lisbon" (undefined if it does not say). */
export function browserTimeZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || undefined;
  } catch {
    return undefined;
  }
}

/** Read the preferences once the page is up: theme, "Use web tool" default, time zone. */
export async function loadPreferences({ onUseWebDefault }) {
  const settings = await api.settings();
  window.resolveaiTheme?.apply(settings.theme);
  onUseWebDefault(Boolean(settings.use_web_default));
  const zone = browserTimeZone();
  if (zone && zone !== settings.time_zone) {
    // A zone this server's tz database lacks is refused (422): the tool then says UTC.
    await api.updateSettings({ time_zone: zone }).catch(() => null);
  }
  return settings;
}

export function createSettingsPage({ onMemoryPausedChange, onUseWebDefault }) {
  const themes = document.getElementById("settings-theme");
  const memory = document.getElementById("settings-memory");
  const useWeb = document.getElementById("settings-use-web");
  const instructions = document.getElementById("settings-instructions");
  const instructionsCount = document.getElementById("settings-instructions-count");
  const instructionsSave = document.getElementById("settings-instructions-save");
  const toolList = document.getElementById("settings-tools");
  const toolsNote = document.getElementById("settings-tools-note");
  const system = document.getElementById("settings-system");
  const state = { settings: null, system: null, ticket: 0 };

  async function load() {
    const ticket = ++state.ticket;
    toolList.setAttribute("aria-busy", "true");
    system.setAttribute("aria-busy", "true");
    try {
      const [settings, info] = await Promise.all([api.settings(), api.systemSettings()]);
      if (ticket !== state.ticket) return;
      state.settings = settings;
      state.system = info;
      render();
    } catch (error) {
      if (ticket !== state.ticket) return;
      system.replaceChildren(el("p", { class: "memory-note error-text", role: "alert", text: `Could not load the settings: ${error.message}` }));
    } finally {
      if (ticket === state.ticket) {
        toolList.setAttribute("aria-busy", "false");
        system.setAttribute("aria-busy", "false");
      }
    }
  }

  function render() {
    const { settings, system: info } = state;
    for (const radio of themes.querySelectorAll("input[name=theme]")) radio.checked = radio.value === settings.theme;
    memory.checked = !settings.memory_paused;
    useWeb.checked = Boolean(settings.use_web_default);
    useWeb.disabled = !info.web_search.available;
    instructions.value = settings.custom_instructions || "";
    syncInstructions();
    renderTools(settings, info);
    renderSystem(info);
  }

  function renderTools(settings, info) {
    const off = new Set(settings.disabled_tools);
    toolsNote.hidden = info.chat_model_tools;
    toolsNote.textContent = info.chat_model_tools
      ? ""
      : "The chat model on this server (the local model) is not offered tools. The calculator still works: a sum in your message is worked out before it answers. The other switches apply when a hosted model answers.";
    toolList.replaceChildren(
      ...info.tools.map((tool) => {
        const input = el("input", { type: "checkbox", role: "switch", dataset: { tool: tool.name } });
        input.checked = !off.has(tool.name);
        input.addEventListener("change", () => saveTools());
        // No tools at all is said once, above the list; a reason of one tool's own, under it.
        const why = tool.reason && info.chat_model_tools ? ` Not offered on this server: ${tool.reason}.` : "";
        return el(
          "li",
          { class: "settings-tool", dataset: { tool: tool.name } },
          el("label", { class: "switch accent" }, input, el("span", { class: "switch-track", "aria-hidden": "true" }), el("span", { class: "settings-tool-name", text: tool.name })),
          el("p", { class: "settings-tool-text", text: `${tool.description}${why}` }),
        );
      }),
    );
  }

  function renderSystem(info) {
    const rows = [];
    const row = (term, value, detail, badge) =>
      rows.push(el("dt", { text: term }), el("dd", {}, value, badge ? el("span", { class: "badge badge-interrupted", text: badge }) : null, detail ? el("span", { class: "settings-detail", text: detail }) : null));
    for (const role of info.models) {
      const name = role.runs_locally ? `Local model (${role.label})` : role.label;
      const badge = role.fallback ? "fallback: no provider key set" : null;
      row(ROLE_NAMES[role.role] || role.role, name, role.chain && role.chain !== role.model ? `then: ${role.chain.split(", then ").slice(1).join(", ")}` : null, badge);
      rows.at(-2).dataset.role = role.role;
      rows.at(-1).dataset.role = role.role;
    }
    if (info.left_out.length) row("Not used", info.left_out.join("; "), "these models lack their API keys");
    row("Database", info.database.kind === "embedded" ? "Embedded Postgres" : "External Postgres", info.database.description);
    row("Embedder", info.embedder.model, info.embedder.state);
    row("Web search", info.web_search.available ? "On" : "Off", info.web_search.status);
    row("Tracing", info.tracing.on ? "On" : "Off", info.tracing.status);
    system.replaceChildren(...rows);
  }

  async function save(changes, what) {
    try {
      state.settings = await api.updateSettings(changes);
      announce(what);
      return state.settings;
    } catch (error) {
      toast(`Could not save the setting: ${error.message}`, "error");
      if (state.settings) render(); // back to what is saved
      return null;
    }
  }

  function syncInstructions() {
    const limit = Number(instructions.maxLength);
    instructionsCount.textContent = `${instructions.value.length.toLocaleString("en")} / ${limit.toLocaleString("en")}`;
    instructionsSave.disabled = !state.settings || instructions.value === (state.settings.custom_instructions || "");
  }

  function saveTools() {
    const off = [...toolList.querySelectorAll("input[data-tool]")].filter((input) => !input.checked).map((input) => input.dataset.tool);
    return save({ disabled_tools: off }, "Tools saved");
  }

  themes.addEventListener("change", async (event) => {
    const theme = event.target.value;
    window.resolveaiTheme?.apply(theme); // at once; the server keeps it for other devices
    const saved = await save({ theme }, `Theme: ${theme}`);
    if (saved) window.resolveaiTheme?.apply(saved.theme);
  });
  memory.addEventListener("change", async () => {
    const saved = await save({ memory_paused: !memory.checked }, memory.checked ? "Memory is on" : "Memory paused");
    if (saved) onMemoryPausedChange(saved.memory_paused);
  });
  instructions.addEventListener("input", syncInstructions);
  instructionsSave.addEventListener("click", async () => {
    instructionsSave.disabled = true;
    const text = instructions.value;
    await save({ custom_instructions: text }, text.trim() ? "Custom instructions saved" : "Custom instructions removed");
    syncInstructions();
  });
  useWeb.addEventListener("change", async () => {
    const saved = await save({ use_web_default: useWeb.checked }, "Saved");
    if (saved) onUseWebDefault(saved.use_web_default);
  });

  return {
    show() {
      return load();
    },
    hide() {
      state.ticket += 1; // a load still under way is not shown
    },
  };
}

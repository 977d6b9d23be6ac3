// The theme (system, light or dark), applied before the page is drawn: a classic script loaded
// without `defer` in <head>, so a dark theme never flashes light first. The user's choice is a
// server-side preference (Settings); this keeps a copy in localStorage to read here, at once.
// settings-page.js calls `resolveaiTheme.apply(theme)` when it changes or after reading it.
"use strict";

(() => {
  const KEY = "resolveai-theme";
  const THEMES = ["system", "light", "dark"];

  function apply(theme) {
    const chosen = THEMES.includes(theme) ? theme : "system";
    const root = document.documentElement;
    if (chosen === "system") delete root.dataset.theme;
    else root.dataset.theme = chosen;
    // The code highlighting's two stylesheets follow the same choice.
    for (const link of document.querySelectorAll("link[data-scheme]")) {
      link.media = chosen === "system" ? `(prefers-color-scheme: ${link.dataset.scheme})` : link.dataset.scheme === chosen ? "all" : "not all";
    }
    try {
      localStorage.setItem(KEY, chosen);
    } catch {
      // Storage refused (a private window's quota): the server's preference still applies.
    }
    return chosen;
  }

  let stored = "system";
  try {
    stored = localStorage.getItem(KEY) || "system";
  } catch {
    // As above.
  }
  apply(stored);
  window.resolveaiTheme = { apply, current: () => document.documentElement.dataset.theme || "system" };
})();

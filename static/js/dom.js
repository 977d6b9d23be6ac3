// Small DOM helpers. Everything the UI builds goes through `el`, which only ever sets text
// (never HTML), so server data and model output cannot become markup by accident; the one place
// that turns Markdown into markup is render.js, and it sanitizes first.

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * Create an element: `el("button", {class: "x", type: "button", text: "Hi"}, child, "text")`.
 * `on*` and `style` attributes are refused: the page's CSP forbids them and so does our rule of
 * no inline handlers or styles.
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name === "hidden") node.hidden = Boolean(value);
    else if (name.startsWith("on") || name === "style") throw new Error(`el: ${name} not allowed`);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// Icon paths (24×24, stroked); drawn with createElementNS so no markup string is parsed.
const ICONS = {
  copy: ["M9 9h10v11H9z", "M5 15V4h10"],
  check: ["M5 12.5l4.5 4.5L19 7.5"],
  pencil: ["M4 20h4L19 9l-4-4L4 16z", "M13.5 6.5l4 4"],
  trash: ["M4 7h16", "M9.5 7V4.5h5V7", "M6.5 7l1 13h9l1-13", "M10 11v5.5M14 11v5.5"],
  alert: ["M12 4 2.8 19.5h18.4z", "M12 10v4.5", "M12 17.2v.3"],
  retry: ["M4.5 12a7.5 7.5 0 1 0 2.4-5.5", "M4.5 4.5v4h4"],
  chevron: ["M9 6l6 6-6 6"],
  back: ["M15 6l-6 6 6 6"],
  steps: ["M5 6h2M5 12h2M5 18h2M10 6h9M10 12h9M10 18h9"],
  stop: ["M7 7h10v10H7z"],
  link: ["M10 14a4 4 0 0 0 5.7 0l3-3a4 4 0 0 0-5.7-5.7l-1 1", "M14 10a4 4 0 0 0-5.7 0l-3 3a4 4 0 0 0 5.7 5.7l1-1"],
  // A bookmark with a spark: what the assistant keeps about you.
  memory: ["M7 3.5h10a1 1 0 0 1 1 1V20l-6-3.8L6 20V4.5a1 1 0 0 1 1-1Z", "M12 7.5v4M10 9.5h4"],
  quote: ["M6 17c2.5-1 3.5-3 3.5-6H6V7h4v4", "M14 17c2.5-1 3.5-3 3.5-6H14V7h4v4"],
  download: ["M12 4v11", "M7 10.5l5 5 5-5", "M5 20h14"],
  print: ["M7 9V4h10v5", "M7 17H5a1 1 0 0 1-1-1v-6a1 1 0 0 1 1-1h14a1 1 0 0 1 1 1v6a1 1 0 0 1-1 1h-2", "M7 14h10v6H7z"],
  upload: ["M12 16V5", "M7 9.5l5-5 5 5", "M5 20h14"],
  file: ["M14 3.5H7.5a2 2 0 0 0-2 2v13a2 2 0 0 0 2 2h9a2 2 0 0 0 2-2V8z", "M14 3.5V8h4.5", "M9 13h6M9 16.5h4"],
  paperclip: ["M20 11.5l-8.1 8.1a5 5 0 0 1-7.1-7.1l8.5-8.5a3.3 3.3 0 0 1 4.7 4.7l-8.5 8.5a1.7 1.7 0 0 1-2.4-2.4l7.8-7.8"],
  close: ["M6 6l12 12M18 6 6 18"],
  pin: ["M9 4h6l-1 6 3 3H7l3-3z", "M12 13v7"],
};

/** An SVG element with these attributes and children: `svgEl("rect", {x: 0, width: 4})`. */
export function svgEl(tag, attributes = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  node.append(...children);
  return node;
}

export function icon(name) {
  const paths = (ICONS[name] || []).map((d) => svgEl("path", { d }));
  return svgEl("svg", { viewBox: "0 0 24 24", "aria-hidden": "true", class: `icon icon-${name}` }, ...paths);
}

/** "0.4 s", "12 s", "2 min 5 s": short enough for the steps line. */
export function formatDuration(ms) {
  if (!Number.isFinite(ms) || ms < 0) return "";
  if (ms < 10_000) return `${(ms / 1000).toFixed(1)} s`;
  const seconds = Math.round(ms / 1000);
  if (seconds < 60) return `${seconds} s`;
  return `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
}

/** Say something to screen readers without moving focus. */
export function announce(text) {
  const region = document.getElementById("live-status");
  if (!region) return;
  region.textContent = "";
  // A fresh text node on the next frame, so the same sentence twice is still announced.
  requestAnimationFrame(() => { region.textContent = text; });
}

/** A short message at the bottom of the screen (failures of sidebar actions and the like). */
export function toast(text, kind = "info") {
  const box = document.getElementById("toasts");
  if (!box) return;
  const item = el("div", { class: `toast toast-${kind}`, role: kind === "error" ? "alert" : "status", text });
  box.append(item);
  setTimeout(() => item.remove(), 5000);
}

/** Copy text to the clipboard; falls back to execCommand where the async API is missing
 *  (plain http on a LAN address is not a secure context, so navigator.clipboard is undefined). */
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  const area = el("textarea", { class: "clipboard-helper", readonly: true, "aria-hidden": "true" });
  area.value = text;
  document.body.append(area);
  area.select();
  try {
    if (!document.execCommand("copy")) throw new Error("copy refused");
  } finally {
    area.remove();
  }
}

/**
 * A copy button: `label` is shown next to the icon (CSS may hide it), `name` is the accessible
 * name. After a click the icon turns into a check mark for a moment, so the click visibly worked.
 */
export function copyButton(label, name, getText) {
  const button = el("button", { type: "button", class: "copy-button", "aria-label": name, title: name });
  const show = (iconName, text) => button.replaceChildren(icon(iconName), el("span", { class: "button-label", text }));
  show("copy", label);
  let timer = 0;
  button.addEventListener("click", async () => {
    try {
      await copyText(getText());
    } catch {
      toast("Could not copy to the clipboard.", "error");
      return;
    }
    show("check", "Copied");
    button.classList.add("copied");
    announce("Copied");
    clearTimeout(timer);
    timer = setTimeout(() => {
      show("copy", label);
      button.classList.remove("copied");
    }, 1500);
  });
  return button;
}

// Model output → safe DOM: Markdown (marked) → HTML string → DOMPurify → DocumentFragment, and
// only then our own additions (code block headers, citation links, typeset math), built with DOM
// calls. Model text is untrusted (it can quote web pages), so nothing reaches the page
// unsanitized.

import { Marked } from "/vendor/marked/marked.esm.js";
import hljs from "/vendor/highlight.js/highlight.min.js";
import { passageData, sourceHref } from "./documents.js";
import { copyButton, el } from "./dom.js";

const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);

/** Links the UI lets through: web pages and mail. Anything else (javascript:, data:, relative
 *  paths into our own API) loses its href and stays plain text. */
export function isSafeUrl(url) {
  return typeof url === "string" && /^(https?:\/\/|mailto:)/i.test(url.trim());
}

// Math as models write it: \[…\] and $$…$$ shown on their own line, \(…\) and $…$ in the text.
// A `$` opens math only before a non-space and closes it only after one, not before a digit
// (Pandoc's rule), so "$5 and $10" stays a price. Marked keeps the TeX as a placeholder holding
// the text it is; `typesetMath` turns it into MathML after sanitizing.
const DISPLAY_MATH = /^(?:\$\$([^]+?)\$\$|\\\[([^]+?)\\\])/;
const INLINE_MATH = /^(?:\\\(([^]+?)\\\)|\$(?![\s$])((?:\\.|[^\\$\n])+?)(?<!\s)\$(?!\d))/;
// Display math alone on its line, up to 3 spaces in and any blank lines after it.
const MATH_LINE = new RegExp(`^ {0,3}${DISPLAY_MATH.source.slice(1)}[ \\t]*(?:\\n+|$)`);

const mathPlaceholder = ({ raw, tex, display }) =>
  `<span class="math-tex" data-display="${display ? "block" : "inline"}" data-tex="${escapeHtml(tex.trim())}">${escapeHtml(raw.trim())}</span>`;

const MATH_EXTENSIONS = [
  {
    // On a line of its own (it ends the paragraph before it).
    name: "mathLine",
    level: "block",
    start: (src) => src.match(/^ {0,3}(?:\$\$|\\\[)/m)?.index,
    tokenizer(src) {
      const match = MATH_LINE.exec(src);
      if (match) return { type: "mathLine", raw: match[0], tex: match[1] ?? match[2], display: true };
    },
    renderer: (token) => `<p class="math-line">${mathPlaceholder(token)}</p>\n`,
  },
  {
    name: "mathInline",
    level: "inline",
    start: (src) => src.match(/\$|\\[[(]/)?.index,
    tokenizer(src) {
      const display = DISPLAY_MATH.exec(src);
      const match = display || INLINE_MATH.exec(src);
      if (match) return { type: "mathInline", raw: match[0], tex: match[1] ?? match[2], display: Boolean(display) };
    },
    renderer: mathPlaceholder,
  },
];

const markdown = new Marked({
  gfm: true,
  breaks: false,
  extensions: MATH_EXTENSIONS,
  renderer: {
    // Raw HTML in a reply is shown as the text it is (what a chat user expects to see when a
    // model writes markup), never interpreted. DOMPurify below is the second line of defence.
    html({ text, block }) {
      return block ? `<p class="raw-html">${escapeHtml(text)}</p>\n` : escapeHtml(text);
    },
    code({ text, lang }) {
      const language = (lang || "").trim().split(/\s+/)[0].toLowerCase();
      const known = language && hljs.getLanguage(language);
      // Highlighting happens here, before sanitizing, so its markup is checked like the rest.
      const body = known
        ? hljs.highlight(text, { language, ignoreIllegals: true }).value
        : escapeHtml(text);
      return `<pre><code class="hljs" data-lang="${escapeHtml(language)}">${body}</code></pre>\n`;
    },
    // Images would load from other origins (the CSP blocks that anyway): show a link instead.
    image({ href, text }) {
      return `<a href="${escapeHtml(href || "")}">${escapeHtml(text || href || "image")}</a>`;
    },
  },
});

let purifier = null;

function getPurifier() {
  if (purifier) return purifier;
  const DOMPurify = globalThis.DOMPurify;
  if (!DOMPurify) throw new Error("DOMPurify did not load: refusing to render model output");
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName !== "A") return;
    const href = node.getAttribute("href");
    if (href !== null && !isSafeUrl(href)) node.removeAttribute("href");
    if (node.hasAttribute("href")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  });
  purifier = DOMPurify;
  return purifier;
}

const PURIFY_OPTIONS = {
  RETURN_DOM_FRAGMENT: true,
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "img", "form", "button", "textarea", "select", "iframe", "video", "audio", "svg", "math"],
  // id/name could clobber our own element ids; style is forbidden by the CSP anyway.
  FORBID_ATTR: ["style", "id", "name", "srcset"],
};

/**
 * Render a reply's Markdown into a sanitized fragment. `sources` ([{n, title, url}]) turn `[n]`
 * markers into citation links.
 */
export function renderMarkdown(text, sources = []) {
  const html = markdown.parse(text || "");
  const fragment = getPurifier().sanitize(html, PURIFY_OPTIONS);
  decorateCodeBlocks(fragment);
  wrapTables(fragment);
  typesetMath(fragment);
  if (sources.length) linkCitations(fragment, sources);
  return fragment;
}

// Temml's MathML, sanitized again with DOMPurify's MathML profile. `trust: false`: \href,
// \htmlId and the like are refused (the TeX then stays as the text it is).
const MATH_PURIFY_OPTIONS = { RETURN_DOM_FRAGMENT: true, USE_PROFILES: { mathMl: true }, FORBID_ATTR: ["style", "id"] };
// The one style Temml writes (on display math; app.css sets it instead): the CSP refuses style
// attributes, with a console error each, even in DOMPurify's parse.
const TEMML_DISPLAY_STYLE = ' style="display:block math;"';

/** Typeset each math placeholder with Temml (a classic script: `globalThis.temml`); TeX it cannot
 *  typeset, or a page without it, shows as written. */
function typesetMath(root) {
  const temml = globalThis.temml;
  if (!temml) return;
  for (const node of root.querySelectorAll(".math-tex")) {
    let markup;
    try {
      markup = temml.renderToString(node.dataset.tex, {
        displayMode: node.dataset.display === "block",
        throwOnError: true,
        trust: false,
      });
    } catch {
      continue;
    }
    const math = getPurifier().sanitize(markup.replace(TEMML_DISPLAY_STYLE, ""), MATH_PURIFY_OPTIONS);
    if (!math.querySelector("math")) continue;
    node.replaceChildren(math);
    node.classList.add("typeset");
  }
}

function decorateCodeBlocks(root) {
  for (const pre of root.querySelectorAll("pre")) {
    const code = pre.querySelector("code");
    if (!code) continue;
    const language = code.dataset.lang || "";
    const head = el(
      "div",
      { class: "code-head" },
      el("span", { class: "code-lang", text: language || "code" }),
      copyButton("Copy code", "Copy code", () => code.textContent),
    );
    const block = el("div", { class: "code-block" });
    pre.replaceWith(block);
    block.append(head, pre);
  }
}

function wrapTables(root) {
  // Wide tables scroll sideways inside the message instead of widening the page on a phone.
  for (const table of root.querySelectorAll("table")) {
    const wrap = el("div", { class: "table-wrap" });
    table.replaceWith(wrap);
    wrap.append(table);
  }
}

// The server normalizes every citation style to `[n]`, often right after a word
// ("inhabitants[1]"); code is left alone because code elements are skipped below.
const CITATION = /\[(\d{1,3})\]/g;

/** Turn `[n]` in plain text (not in code or existing links) into a link to source n. */
function linkCitations(root, sources) {
  const byNumber = new Map(sources.map((source) => [Number(source.n), source]));
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const targets = [];
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (node.parentElement?.closest("pre, code, a, .math-tex")) continue;
    CITATION.lastIndex = 0;
    if (CITATION.test(node.data)) targets.push(node);
  }
  for (const node of targets) {
    const parts = [];
    let last = 0;
    for (const match of node.data.matchAll(CITATION)) {
      const source = byNumber.get(Number(match[1]));
      if (!source) continue;
      parts.push(node.data.slice(last, match.index), citationLink(source));
      last = match.index + match[0].length;
    }
    if (!parts.length) continue;
    parts.push(node.data.slice(last));
    node.replaceWith(...parts.filter((part) => part !== ""));
  }
}

export function citationLink(source) {
  const n = String(source.n);
  if (source.kind === "document") return documentCitation(source, n);
  const title = String(source.title || source.url || `Source ${n}`);
  const props = {
    class: "cite",
    // The passage the answer drew on (the page's best chunk), for the popover.
    dataset: { cite: n, title, url: String(source.url || ""), text: typeof source.text === "string" ? source.text : "" },
    "aria-label": `Source ${n}: ${title}`,
    text: n,
  };
  if (!isSafeUrl(source.url)) return el("span", { ...props, tabindex: "0" });
  return el("a", { ...props, href: source.url, target: "_blank", rel: "noopener noreferrer" });
}

/** A passage of one of the user's documents: a link to the viewer (this page, not a new tab),
 *  carrying what the popover shows (file and page, the passage's first words). */
function documentCitation(source, n) {
  const title = String(source.title || `Document ${n}`);
  const href = sourceHref(source);
  const props = {
    class: "cite cite-document",
    dataset: { cite: n, title, url: href || "", ...passageData(source) },
    "aria-label": `Source ${n}: ${title}`,
    text: n,
  };
  return href ? el("a", { ...props, href }) : el("span", { ...props, tabindex: "0" });
}

/** "www.example.com/some/page" → "example.com", for compact source labels. */
export function hostOf(url) {
  try {
    return new URL(url).hostname.replace(/^www\./, "");
  } catch {
    return String(url || "");
  }
}

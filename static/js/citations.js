// The popover of a citation link: hovering or focusing `[n]` shows the source's title and
// address and the cited passage's first words (a web page's best chunk; for one of the user's
// documents, the file and page too). One shared element, positioned next to the link (CSSOM,
// which the CSP allows).
//
// On a touch screen (or a phone-sized window) there is no hover: the first tap on any `[n]` shows
// its popover, with a button to open the page (a new tab) or the passage (the viewer); a second
// tap on it opens it too.
// Following a document citation (from `[n]`, the popover or the Sources list) remembers the
// passage, so the viewer can show it even if the document was deleted since.

import { preview, rememberPassage } from "./documents.js";
import { hostOf } from "./render.js";

const GAP = 6;
const PREVIEW_CHARS = 220;

export function setupCitationPopover() {
  const popover = document.getElementById("cite-popover");
  const title = popover.querySelector(".cite-popover-title");
  const address = popover.querySelector(".cite-popover-url");
  const passage = popover.querySelector(".cite-popover-text");
  const open = popover.querySelector(".cite-popover-open");
  const tapFirst = window.matchMedia("(hover: none), (pointer: coarse), (max-width: 860px)");
  let current = null;
  let pinned = null; // the document citation tapped once: its popover stays, with its button

  function show(link) {
    if (pinned && pinned !== link) unpin();
    current = link;
    const isDocument = link.dataset.kind === "document";
    title.textContent = link.dataset.title || "";
    if (isDocument) {
      address.textContent = link.dataset.section || "";
      address.removeAttribute("title");
      passage.textContent = preview(link.dataset.text, PREVIEW_CHARS);
    } else {
      address.textContent = link.dataset.url || "";
      address.title = hostOf(link.dataset.url);
      passage.textContent = preview(link.dataset.text || "", PREVIEW_CHARS);
    }
    address.hidden = !address.textContent;
    passage.hidden = !passage.textContent;
    popover.classList.toggle("cite-popover-document", isDocument);
    popover.hidden = false;
    link.setAttribute("aria-describedby", "cite-popover");
    place();
  }

  function pin(link) {
    show(link);
    pinned = link;
    open.href = link.getAttribute("href");
    for (const name of Object.keys(open.dataset)) delete open.dataset[name];
    Object.assign(open.dataset, link.dataset);
    const isDocument = link.dataset.kind === "document";
    // A web page opens in a new tab, as its [n] does; a passage opens the viewer here.
    if (isDocument) {
      open.removeAttribute("target");
      open.removeAttribute("rel");
    } else {
      open.target = "_blank";
      open.rel = "noopener noreferrer";
    }
    open.textContent = isDocument ? "Open the passage" : "Open the page";
    open.hidden = false;
    popover.classList.add("pinned");
    place();
  }

  function unpin() {
    pinned = null;
    open.hidden = true;
    popover.classList.remove("pinned");
  }

  function place() {
    if (!current) return;
    const box = current.getBoundingClientRect();
    if (!current.isConnected || box.bottom < 0 || box.top > window.innerHeight) {
      hide();
      return;
    }
    const width = popover.offsetWidth;
    const height = popover.offsetHeight;
    const left = Math.max(8, Math.min(box.left + box.width / 2 - width / 2, window.innerWidth - width - 8));
    const below = box.bottom + GAP + height <= window.innerHeight - 8;
    popover.style.left = `${left}px`;
    popover.style.top = `${below ? box.bottom + GAP : box.top - GAP - height}px`;
  }

  function hide() {
    if (pinned) unpin();
    if (!current) return;
    current.removeAttribute("aria-describedby");
    current = null;
    popover.hidden = true;
  }

  const citeOf = (event) => event.target instanceof Element ? event.target.closest(".cite") : null;
  document.addEventListener("mouseover", (event) => {
    const link = citeOf(event);
    if (link) {
      if (link !== pinned) show(link);
    } else if (current && !popover.contains(event.target) && !pinned) hide();
  });
  document.addEventListener("focusin", (event) => {
    const link = citeOf(event);
    if (link) {
      if (link !== pinned) show(link);
    } else if (!popover.contains(event.target)) hide();
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && current) hide();
  });
  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    const link = target?.closest("a.cite");
    if (link && tapFirst.matches && link !== pinned && event.button === 0 && !event.ctrlKey && !event.metaKey && !event.shiftKey) {
      event.preventDefault(); // the preview first; the button (or a second tap) opens it
      pin(link);
      return;
    }
    const followed = target?.closest('a[data-kind="document"]');
    if (followed) {
      rememberPassage(followed); // the popover goes with the address change (hashchange)
      return;
    }
    if (pinned && !popover.contains(target)) hide();
    else if (pinned && target?.closest(".cite-popover-open")) hide(); // a page opened in a tab
  });
  // The link moves when the conversation scrolls (or streams): the popover follows it.
  let frame = 0;
  const follow = () => {
    if (!current || frame) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      place();
    });
  };
  document.addEventListener("scroll", follow, { capture: true, passive: true });
  window.addEventListener("resize", follow);
  // Leaving the page (the viewer opens): nothing of the popover stays behind.
  window.addEventListener("hashchange", hide);
}

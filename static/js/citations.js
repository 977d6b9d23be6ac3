// The popover of a citation link: hovering or focusing `[n]` shows the source's title and
// address. One shared element, positioned next to the link (CSSOM, which the CSP allows).

import { hostOf } from "./render.js";

const GAP = 6;

export function setupCitationPopover() {
  const popover = document.getElementById("cite-popover");
  const title = popover.querySelector(".cite-popover-title");
  const address = popover.querySelector(".cite-popover-url");
  let current = null;

  function show(link) {
    current = link;
    title.textContent = link.dataset.title || "";
    address.textContent = link.dataset.url || "";
    address.title = hostOf(link.dataset.url);
    popover.hidden = false;
    link.setAttribute("aria-describedby", "cite-popover");
    place();
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
    if (!current) return;
    current.removeAttribute("aria-describedby");
    current = null;
    popover.hidden = true;
  }

  const citeOf = (event) => event.target instanceof Element ? event.target.closest(".cite") : null;
  document.addEventListener("mouseover", (event) => {
    const link = citeOf(event);
    if (link) show(link);
    else if (current && !popover.contains(event.target)) hide();
  });
  document.addEventListener("focusin", (event) => {
    const link = citeOf(event);
    if (link) show(link);
    else hide();
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && current) hide();
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
}

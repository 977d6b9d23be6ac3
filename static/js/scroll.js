// Keeps the newest text in view while a reply streams, but only for someone already at the
// bottom: scrolling up to reread something must not be undone by every new token.

const AT_BOTTOM_PX = 48;

export function createAutoScroll(container, jumpButton) {
  let stuck = true;

  const distance = () => container.scrollHeight - container.scrollTop - container.clientHeight;
  const update = () => {
    stuck = distance() <= AT_BOTTOM_PX;
    jumpButton.hidden = stuck;
  };

  container.addEventListener("scroll", update, { passive: true });
  jumpButton.addEventListener("click", () => {
    toBottom(true);
    document.getElementById("composer-input")?.focus();
  });

  function toBottom(smooth = false) {
    stuck = true;
    jumpButton.hidden = true;
    const reduce = window.matchMedia("(prefers-reduced-motion: reduce)").matches;
    container.scrollTo({ top: container.scrollHeight, behavior: smooth && !reduce ? "smooth" : "instant" });
  }

  return {
    /** After content grew: follow it if the reader was at the bottom. */
    follow() {
      if (stuck) container.scrollTop = container.scrollHeight;
      else jumpButton.hidden = distance() <= AT_BOTTOM_PX;
    },
    toBottom,
  };
}

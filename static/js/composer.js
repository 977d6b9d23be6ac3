// The message box: Enter sends, Shift+Enter adds a line, it grows with its text, the "Use web
// tool" and "Research" boxes sit next to Send, and Send turns into Stop while a reply streams.

const NEAR_LIMIT = 0.9; // show the character count from 90 % of the limit on

export function createComposer({ onSend, onStop }) {
  const form = document.getElementById("composer");
  const input = document.getElementById("composer-input");
  const send = document.getElementById("send");
  const stop = document.getElementById("stop");
  const web = document.getElementById("use-web");
  const webToggle = document.getElementById("web-toggle");
  const webReason = document.getElementById("web-reason");
  const research = document.getElementById("research-mode");
  const researchToggle = document.getElementById("research-toggle");
  const count = document.getElementById("char-count");
  let maxChars = 32000;
  let busy = false;
  let loading = false; // a chat is being opened: what is sent now would land in the wrong place
  let pending = false; // sent while the chat opened: it goes once the chat is shown (`sendPending`)
  // `field-sizing: content` (CSS) grows the box where supported; elsewhere we size it by hand.
  const manualGrow = !(window.CSS && CSS.supports("field-sizing", "content"));

  function grow() {
    if (!manualGrow) return;
    input.style.height = "auto"; // CSSOM, which the CSP allows (unlike style attributes)
    input.style.height = `${Math.min(input.scrollHeight, 240)}px`;
  }

  function refresh() {
    const length = input.value.length;
    const over = length > maxChars;
    count.hidden = length < maxChars * NEAR_LIMIT;
    count.textContent = over
      ? `${length.toLocaleString()} / ${maxChars.toLocaleString()}: too long to send`
      : `${length.toLocaleString()} / ${maxChars.toLocaleString()}`;
    count.classList.toggle("over", over);
    send.disabled = busy || loading || !input.value.trim() || over;
    send.hidden = busy;
    stop.hidden = !busy;
  }

  function submit() {
    const text = input.value;
    if (busy || !text.trim() || text.length > maxChars) return;
    if (loading) {
      pending = true; // kept in the box until then
      return;
    }
    pending = false;
    input.value = "";
    grow();
    refresh();
    onSend(text, web.checked && !web.disabled, research.checked && !research.disabled ? "research" : "chat");
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    submit();
  });
  input.addEventListener("keydown", (event) => {
    // isComposing: Enter that confirms an IME composition (Japanese, Chinese…) must not send.
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing && !event.altKey && !event.ctrlKey && !event.metaKey) {
      event.preventDefault();
      submit();
    }
  });
  input.addEventListener("input", () => {
    grow();
    refresh();
  });
  stop.addEventListener("click", () => onStop());

  return {
    configure(config) {
      maxChars = config.max_message_chars || maxChars;
      const search = config.web_search || {};
      web.disabled = !search.available;
      webToggle.classList.toggle("disabled", !search.available);
      // Research searches the web: it needs what "Use web tool" needs.
      research.disabled = !search.available;
      researchToggle.classList.toggle("disabled", !search.available);
      if (!search.available) {
        web.checked = false;
        research.checked = false;
        const reason = search.message || describeUnavailable(search.reason);
        webReason.textContent = reason;
        webToggle.title = reason;
      } else {
        webReason.textContent = "";
        webToggle.removeAttribute("title");
      }
      refresh();
    },
    /** "Use web tool" ticked or not, as the user's Settings say it starts (if it can be on). */
    setWebDefault(on) {
      if (!web.disabled) web.checked = Boolean(on);
    },
    setBusy(value) {
      const hadFocus = document.activeElement === stop;
      busy = value;
      refresh();
      // Stop disappears under the keyboard focus when the reply ends: keep typing where it was.
      if (hadFocus && !busy) input.focus();
    },
    setLoading(value) {
      loading = value;
      if (value) pending = false; // another chat opens: the message was not meant for it
      form.setAttribute("aria-busy", String(value)); // (tests wait on it before typing)
      refresh();
    },
    /** The opened chat is on screen: send what was sent while it loaded (if it still can go). */
    sendPending() {
      if (pending && !loading) submit();
      pending = false;
    },
    focus() {
      input.focus();
    },
    setPlaceholder(text) {
      input.placeholder = text;
    },
  };
}

/** The server's reason, e.g. "off (TAVILY_API_KEY not set)", as a sentence people can act on. */
function describeUnavailable(reason) {
  if (!reason) return "Web search is not set up on this server.";
  const off = /^off \((.+)\)$/.exec(reason.trim());
  return off ? `Web search is off: ${off[1]}.` : `Web search is unavailable: ${reason}`;
}

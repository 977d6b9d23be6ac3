// The message box: Enter sends, Shift+Enter adds a line, it grows with its text, the "Use web
// tool" and "Research" boxes sit next to Send, and Send turns into Stop while a reply streams.
// A message sent while files attached to it are still being read waits for them, in the box.

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
  const note = document.getElementById("send-note");
  let maxChars = 32000;
  let busy = false;
  let loading = false; // a chat is being opened: what is sent now would land in the wrong place
  let pending = false; // sent while the chat opened or its files were read: it goes after
  let reading = []; // names of the attached files still being uploaded or read
  let unread = ""; // why a message that waited for its files was not sent
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
    const waiting = pending && reading.length > 0;
    note.textContent = waiting ? `Sends when ${reading.join(", ")} ${reading.length > 1 ? "are" : "is"} read` : unread;
    note.hidden = !note.textContent;
    send.hidden = busy;
    stop.hidden = !busy;
  }

  function submit() {
    const text = input.value;
    if (busy || !text.trim() || text.length > maxChars) return;
    unread = "";
    if (loading || reading.length) {
      pending = true; // kept in the box until then
      refresh();
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
    unread = "";
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
    /** The attached files: `reading`, the names of those still being uploaded or read; `failed`,
     *  of those that could not be. A message waiting for them goes when none is left to read,
     *  unless one failed: then it stays in the box, and sending again sends it without. Files
     *  `cleared` for another chat: the message was not meant for it, and stays in the box. */
    setAttachments({ reading: names, failed, cleared = false }) {
      if (cleared) pending = false;
      const waited = pending && reading.length > 0;
      reading = names;
      if (waited && !reading.length) {
        if (failed.length) {
          pending = false;
          unread = `${failed.join(", ")} could not be read: send again to send without ${failed.length > 1 ? "them" : "it"}`;
        } else {
          submit();
        }
      }
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

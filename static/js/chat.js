// The conversation: shows a chat (or a new-chat draft), sends messages and streams replies.
//
// A reply being streamed is a Turn. Turns outlive the view: switching to another chat while a
// reply streams lets it finish in the background, and coming back shows it still streaming.
// The server saves the user's message before it starts the stream and the reply when it ends,
// so a reload shows the same conversation.

import { api, postMessage } from "./api.js";
import { showSummary } from "./dialogs.js";
import { announce, el, toast } from "./dom.js";
import { AssistantMessage, replyDuration, userMessage } from "./messages.js";
import { createAutoScroll } from "./scroll.js";
import { chatHref } from "./sidebar.js";
import { readEvents } from "./sse.js";

const DRAFT = "draft";
const SKELETON_DELAY_MS = 150; // fast loads never flash a skeleton
const BUSY_RETRY_WINDOW_MS = 10_000;
const BUSY_RETRY_DELAY_MS = 250;
const BUSY_RETRIES = 12;

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(new DOMException("Stopped", "AbortError"));
    }, { once: true });
  });
}

class Turn {
  constructor(chatId, content, useWeb, view) {
    this.chatId = chatId;
    this.content = content;
    this.useWeb = useWeb;
    this.view = view;
    this.controller = new AbortController();
    this.phase = "streaming"; // then "saved" (after `done`; the summary may still be written) and "closed"
    this.started = performance.now();
    this.closed = new Promise((resolve) => { this.markClosed = resolve; });
  }

  get key() {
    return this.chatId || DRAFT;
  }
}

export function createChat({ sidebar, composer }) {
  const messagesBox = document.getElementById("messages");
  const titleBox = document.getElementById("chat-title");
  const summaryButton = document.getElementById("show-summary");
  const scroll = createAutoScroll(document.getElementById("conversation"), document.getElementById("jump-latest"));
  const turns = new Map(); // key (chat id or DRAFT) → the Turn streaming there
  const stoppedAt = new Map(); // key → when its last reply was stopped (performance.now())
  const shown = { chatId: null, key: DRAFT, viewId: 0, messages: [] };

  function setTitle(title) {
    titleBox.textContent = title;
    document.title = title && title !== "New chat" ? `${title} · ResolveAI` : "ResolveAI";
  }

  function liveTurn() {
    const turn = turns.get(shown.key);
    return turn && turn.phase === "streaming" ? turn : null;
  }

  function syncComposer() {
    composer.setBusy(Boolean(liveTurn()));
    summaryButton.disabled = !shown.chatId;
  }

  function emptyState() {
    return el(
      "div",
      { class: "empty-state" },
      el("h2", { text: "What can I help with?" }),
      el("p", { text: "Ask anything. I remember what you tell me across chats, and with “Use web tool” I check the web and cite my sources." }),
    );
  }

  function showDraft() {
    shown.viewId += 1;
    composer.setLoading(false);
    Object.assign(shown, { chatId: null, key: DRAFT, messages: [] });
    setTitle("New chat");
    sidebar.setActive(null);
    const turn = turns.get(DRAFT);
    if (turn) messagesBox.replaceChildren(turn.userView, turn.view.root);
    else messagesBox.replaceChildren(emptyState());
    scroll.toBottom();
    syncComposer();
    composer.focus();
  }

  async function open(chatId) {
    if (shown.chatId === chatId) return;
    const viewId = ++shown.viewId;
    Object.assign(shown, { chatId, key: chatId, messages: [] });
    setTitle(sidebar.titleOf(chatId) || "Chat");
    sidebar.setActive(chatId);
    syncComposer();
    composer.setLoading(true);
    const skeleton = setTimeout(() => {
      if (viewId === shown.viewId) messagesBox.replaceChildren(skeletonView());
    }, SKELETON_DELAY_MS);
    let messages;
    try {
      messages = await api.messages(chatId);
    } catch (error) {
      clearTimeout(skeleton);
      if (viewId !== shown.viewId) return;
      composer.setLoading(false);
      if (error.status === 404 || error.status === 422) {
        toast("That chat does not exist any more.", "error");
        history.replaceState(null, "", location.pathname);
        showDraft();
      } else {
        messagesBox.replaceChildren(el("div", { class: "error-box", role: "alert" }, el("p", { class: "error-text", text: `Could not load this chat: ${error.message}` })));
      }
      return;
    }
    clearTimeout(skeleton);
    if (viewId !== shown.viewId) return; // the user moved on meanwhile
    composer.setLoading(false);
    shown.messages = messages;
    renderSaved(messages);
    const turn = turns.get(chatId);
    if (turn && !messages.some((m) => m.message_id === turn.messageId)) {
      messagesBox.append(turn.view.root); // its user message is saved already; the reply is live
    }
    setTitle(sidebar.titleOf(chatId) || titleBox.textContent);
    scroll.toBottom();
    syncComposer();
  }

  function renderSaved(messages) {
    const nodes = [];
    messages.forEach((message, index) => {
      if (message.role === "user") {
        nodes.push(userMessage(message.content));
        return;
      }
      const asked = messages[index - 1]?.role === "user" ? messages[index - 1] : null;
      const isLast = index === messages.length - 1;
      const onRetry = isLast && asked ? () => send(asked.content, false) : null;
      nodes.push(AssistantMessage.fromSaved(message, { totalMs: replyDuration(asked, message), onRetry }).root);
    });
    messagesBox.replaceChildren(...(nodes.length ? nodes : [emptyState()]));
  }

  async function send(content, useWeb) {
    const previous = turns.get(shown.key);
    if (previous && previous.phase === "streaming") return;
    if (!shown.chatId) messagesBox.querySelector(".empty-state")?.remove();
    for (const old of messagesBox.querySelectorAll(".retry-button")) old.remove();
    const view = new AssistantMessage({ onChange: () => scroll.follow() });
    const turn = new Turn(shown.chatId, content, useWeb, view);
    turn.viewId = shown.viewId;
    turn.userView = userMessage(content);
    messagesBox.append(turn.userView, view.root);
    turns.set(turn.key, turn);
    scroll.toBottom();
    syncComposer();
    if (previous) {
      // The last reply is shown but its stream is still open (the server is updating the
      // chat's summary); the server takes one message at a time per chat, so wait for it.
      view.steps.note("Waiting for the previous reply to be saved");
      await previous.closed;
    }
    await run(turn);
  }

  async function run(turn) {
    try {
      const response = await openStream(turn);
      for await (const event of readEvents(response)) handle(turn, event);
      if (turn.phase === "streaming" && !turn.failed) {
        turn.view.fail("The connection closed before the reply was finished.", retryOf(turn), elapsed(turn));
      }
    } catch (error) {
      if (error.name === "AbortError") {
        if (turn.phase === "streaming") {
          turn.view.complete("interrupted", elapsed(turn));
          announce("Reply stopped");
        }
      } else if (!turn.failed) {
        turn.view.fail(error.message || String(error), retryOf(turn), elapsed(turn));
      }
    } finally {
      turn.phase = "closed";
      if (turns.get(turn.key) === turn) turns.delete(turn.key);
      turn.markClosed();
      syncComposer();
      sidebar.load(); // the chat moved to the top of its day
    }
  }

  /** POST the message. Right after a Stop the server may still be saving the stopped reply and
   *  answer 409 (one reply at a time per chat): that clears within moments, so try again. */
  async function openStream(turn) {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await postMessage(turn.chatId, turn.content, turn.useWeb, turn.controller.signal);
      } catch (error) {
        const justStopped = performance.now() - (stoppedAt.get(turn.key) ?? -Infinity) < BUSY_RETRY_WINDOW_MS;
        if (error.status !== 409 || !justStopped || attempt >= BUSY_RETRIES) throw error;
        await sleep(BUSY_RETRY_DELAY_MS, turn.controller.signal);
      }
    }
  }

  function handle(turn, event) {
    switch (event.type) {
      case "chat":
        adoptNewChat(turn, event);
        break;
      case "step":
        turn.view.steps.add(event);
        announce(event.text);
        break;
      case "tool_start":
        turn.view.steps.toolStart(event);
        break;
      case "tool_end":
        turn.view.steps.toolEnd(event);
        break;
      case "token":
        turn.view.append(event.text);
        break;
      case "sources":
        turn.view.setSources(event.sources);
        break;
      case "done":
        turn.phase = "saved";
        turn.messageId = event.message_id;
        turn.view.root.dataset.messageId = event.message_id;
        turn.view.complete("complete", elapsed(turn));
        announce("Reply finished");
        if (turn.key === shown.key) syncComposer();
        break;
      case "error":
        turn.failed = true;
        turn.view.fail(event.message, retryOf(turn), elapsed(turn));
        announce("The reply failed");
        break;
      default:
        break; // heartbeat, summary: nothing to show
    }
  }

  /** The first message of a draft created a chat: the draft becomes that chat. */
  function adoptNewChat(turn, event) {
    turns.delete(DRAFT);
    turn.chatId = event.chat_id;
    turns.set(turn.chatId, turn);
    sidebar.upsert({ chat_id: event.chat_id, title: event.title, updated_at: new Date().toISOString() });
    if (shown.key === DRAFT && shown.viewId === turn.viewId) {
      Object.assign(shown, { chatId: event.chat_id, key: event.chat_id });
      history.replaceState(null, "", chatHref(event.chat_id));
      setTitle(event.title);
      sidebar.setActive(event.chat_id);
      syncComposer();
    }
  }

  function retryOf(turn) {
    return () => {
      if (turn.chatId && shown.chatId !== turn.chatId) return;
      send(turn.content, turn.useWeb);
    };
  }

  const elapsed = (turn) => performance.now() - turn.started;

  return {
    showDraft,
    open,
    send,
    get chatId() {
      return shown.chatId;
    },
    stop() {
      const turn = liveTurn();
      if (!turn) return;
      stoppedAt.set(turn.key, performance.now());
      turn.controller.abort();
    },
    isStreaming: () => Boolean(liveTurn()),
    refreshTitle() {
      const title = shown.chatId && sidebar.titleOf(shown.chatId);
      if (title) setTitle(title);
    },
    renamed(chat) {
      if (chat.chat_id === shown.chatId) setTitle(chat.title);
    },
    deleted(chatId) {
      turns.get(chatId)?.controller.abort();
      if (chatId === shown.chatId) {
        history.pushState(null, "", location.pathname);
        showDraft();
      }
    },
    async openSummary() {
      if (!shown.chatId) return;
      let messages = [];
      try {
        messages = await api.messages(shown.chatId); // fresh: replies may have come since
      } catch {
        // The dialog can do without the count.
      }
      showSummary(shown.chatId, messages);
    },
  };
}

function skeletonView() {
  return el(
    "div",
    { class: "skeleton", "aria-hidden": "true" },
    el("div", { class: "skeleton-line short right" }),
    el("div", { class: "skeleton-line" }),
    el("div", { class: "skeleton-line" }),
    el("div", { class: "skeleton-line medium" }),
  );
}

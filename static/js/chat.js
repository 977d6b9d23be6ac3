// The conversation: shows a chat (or a new-chat draft, which can be made a temporary chat), sends
// messages and streams replies, and can point at one message (a memory's source).
//
// A reply being streamed is a Turn. Turns outlive the view: switching to another chat while a
// reply streams lets it finish in the background, and coming back shows it still streaming.
// The server saves the user's message before it starts the stream and writes the reply to its end
// whoever listens: a dropped connection is followed again from the last event seen, and opening a
// chat whose reply is still being written (a reload, another tab) shows it and follows it. Stop
// asks the server to stop, so it works from any tab.

import { api, continueMessage, editMessage, followReply, postMessage, regenerateMessage } from "./api.js";
import { messageExportHref } from "./data-transfer.js";
import { showSummary } from "./dialogs.js";
import { announce, el, toast } from "./dom.js";
import { AssistantMessage, highlightMessage, replyDuration, userMessage } from "./messages.js";
import { createAutoScroll } from "./scroll.js";
import { chatHref } from "./sidebar.js";
import { readEvents } from "./sse.js";

const DRAFT = "draft";
const SKELETON_DELAY_MS = 150; // fast loads never flash a skeleton
const BUSY_RETRY_WINDOW_MS = 10_000;
const BUSY_RETRY_DELAY_MS = 250;
const BUSY_RETRIES = 12;
const RESUME_RETRIES = 5; // a dropped stream is followed again this often (the reply goes on)
const RESUME_DELAY_MS = 500;
const BRIEF_HIGHLIGHT_MS = 2500; // how long a search result's message stays marked

/** Scroll the first text of `node` holding one of `words` (any case) to the middle of the view
 *  (the whole message when none does). */
function scrollToWords(node, words) {
  const wanted = words.map((word) => word.toLowerCase()).filter(Boolean);
  const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT);
  let target = node;
  for (let text = walker.nextNode(); text && wanted.length; text = walker.nextNode()) {
    const data = text.data.toLowerCase();
    if (wanted.some((word) => data.includes(word))) {
      target = text.parentElement;
      break;
    }
  }
  // Instant: the replies just rendered keep the view at the bottom (scroll.js) until a scroll
  // event says the reader left it, and a smooth scroll's first steps are still near the bottom.
  target.scrollIntoView({ block: "center", behavior: "instant" });
}

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
  constructor(chatId, content, useWeb, view, temporary = false, mode = "chat", documents = []) {
    this.chatId = chatId;
    this.content = content;
    this.documents = documents; // the files sent with it: {document_id, filename}
    this.useWeb = useWeb;
    this.mode = mode; // "chat", or "research": a cited report from several searches
    this.temporary = temporary; // a new chat that neither reads nor writes memory
    this.view = view;
    this.controller = new AbortController();
    this.phase = "streaming"; // then "saved" (after `done`, until the stream ends) and "closed"
    this.lastSeq = 0; // the number of the last event read, to follow the reply again after it
    this.started = performance.now();
    this.closed = new Promise((resolve) => { this.markClosed = resolve; });
  }

  get key() {
    return this.chatId || DRAFT;
  }
}

/** `isShown()`: whether the conversation is on screen (not the Memory page); while it is not, a
 *  reply finishing in the background leaves the title and the address alone. */
export function createChat({ sidebar, composer, isShown = () => true }) {
  const messagesBox = document.getElementById("messages");
  const titleBox = document.getElementById("chat-title");
  const summaryButton = document.getElementById("show-summary");
  const temporaryButton = document.getElementById("temporary-chat");
  const temporaryBadge = document.getElementById("chat-badge");
  const scroll = createAutoScroll(document.getElementById("conversation"), document.getElementById("jump-latest"));
  const turns = new Map(); // key (chat id or DRAFT) → the Turn streaming there
  const stoppedAt = new Map(); // key → when its last reply was stopped (performance.now())
  const shown = { chatId: null, key: DRAFT, viewId: 0, messages: [], loading: false, pointAt: null };
  let temporaryDraft = false; // the draft's "Temporary chat" toggle
  let memoryPaused = false;
  let answering = null; // {label, runs_locally} from /api/health, once known

  function setTitle(title) {
    shown.title = title;
    if (!isShown()) return;
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
    syncTemporary();
  }

  /** The toggle is offered on a draft only; the badge marks a temporary draft or chat. */
  function syncTemporary() {
    const draft = !shown.chatId;
    const temporary = draft ? (turns.get(DRAFT)?.temporary ?? temporaryDraft) : Boolean(sidebar.chatOf(shown.chatId)?.temporary);
    temporaryButton.hidden = !draft;
    temporaryButton.disabled = draft && Boolean(turns.get(DRAFT)); // the first message is on its way
    temporaryButton.setAttribute("aria-pressed", String(draft && temporaryDraft));
    temporaryBadge.hidden = !temporary;
    composer.setPlaceholder(temporary ? "Message ResolveAI (temporary chat)" : "Message ResolveAI");
  }

  function emptyState() {
    if (!shown.chatId && temporaryDraft) {
      return el(
        "div",
        { class: "empty-state empty-temporary" },
        el("h2", { text: "Temporary chat" }),
        el("p", { text: "This chat won’t use what I remember about you, and nothing you say here is saved to memory. It stays in your chat list until you delete it." }),
      );
    }
    const memory = memoryPaused
      ? "Memory is paused, so I won’t use or save what you tell me."
      : "I remember what you tell me across chats.";
    return el(
      "div",
      { class: "empty-state" },
      el("h2", { text: "What can I help with?" }),
      el("p", { text: `Ask anything. ${memory} With “Use web tool” I check the web and cite my sources.` }),
      ...(answering ? [el("p", { class: "empty-model", text: modelNote(answering) })] : []),
    );
  }

  function modelNote({ label, runs_locally: local }) {
    if (!local) return `Answers come from ${label}.`;
    return `Answers come from ${label}, a small model running on this computer’s processor: the first reply in a chat can take 15 seconds or more, later ones a few seconds. Add an API key (see the README) for a faster hosted model.`;
  }

  api.health().then(
    (report) => {
      answering = report.answering || null;
      if (!shown.chatId) redrawEmptyState();
    },
    () => {}, // unhealthy or unreachable: the empty state just says less
  );

  function redrawEmptyState() {
    messagesBox.querySelector(".empty-state")?.replaceWith(emptyState());
  }

  temporaryButton.addEventListener("click", () => {
    if (shown.chatId || turns.get(DRAFT)) return;
    temporaryDraft = !temporaryDraft;
    if (!shown.chatId) redrawEmptyState();
    syncTemporary();
    announce(temporaryDraft ? "Temporary chat on: memory is not used or saved" : "Temporary chat off");
  });

  function showDraft() {
    shown.viewId += 1;
    if (!turns.get(DRAFT)) temporaryDraft = false; // every new chat starts as an ordinary one
    composer.setLoading(false);
    Object.assign(shown, { chatId: null, key: DRAFT, messages: [], loading: false, pointAt: null });
    setTitle("New chat");
    sidebar.setActive(null);
    const turn = turns.get(DRAFT);
    if (turn) messagesBox.replaceChildren(turn.userView, turn.view.root);
    else messagesBox.replaceChildren(emptyState());
    scroll.toBottom();
    syncComposer();
    composer.focus();
  }

  /** Show a chat; `highlight` (a message id) scrolls to that message and marks it, with the words
   *  of `quote` marked inside it when given. `words` (a search result's matches): the highlight
   *  lasts a moment, and a long message is scrolled to the first of them, not to its middle. */
  async function open(chatId, { highlight = null, quote = null, words = null } = {}) {
    if (highlight) shown.pointAt = { messageId: highlight, quote, words };
    else if (shown.chatId !== chatId) shown.pointAt = null;
    // A message sent in this view has no id on screen until the chat is read again.
    const stale = shown.pointAt && !shown.loading && !findMessage(shown.pointAt.messageId);
    if (shown.chatId === chatId && !stale) {
      // Back from the Memory page (or the same link again): the chat is on screen already.
      setTitle(sidebar.titleOf(chatId) || shown.title);
      sidebar.setActive(chatId);
      syncComposer();
      if (!shown.loading) pointAtPending(); // else once the messages are there
      return;
    }
    const viewId = ++shown.viewId;
    const knownTitle = sidebar.titleOf(chatId) || (shown.chatId === chatId ? shown.title : "Chat");
    Object.assign(shown, { chatId, key: chatId, messages: [], loading: true });
    setTitle(knownTitle);
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
      shown.loading = false;
      shown.pointAt = null;
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
    shown.loading = false;
    composer.setLoading(false);
    shown.messages = messages;
    renderSaved(messages);
    const turn = turns.get(chatId);
    if (turn && !messages.some((m) => m.message_id === turn.messageId)) {
      messagesBox.append(turn.view.root); // its user message is saved already; the reply is live
    } else if (!turn && (messages.at(-1)?.role === "user" || messages.at(-1)?.status === "streaming")) {
      attach(chatId); // a reply is being written or continued (before a reload, or in another tab)
    }
    setTitle(sidebar.titleOf(chatId) || shown.title);
    scroll.toBottom();
    syncComposer();
    pointAtPending();
    composer.sendPending();
  }

  const findMessage = (messageId) => messagesBox.querySelector(`.msg[data-message-id="${CSS.escape(messageId)}"]`);

  function pointAtPending() {
    const target = shown.pointAt;
    shown.pointAt = null;
    if (!target) return;
    const node = findMessage(target.messageId);
    if (node) {
      highlightMessage(node, target.quote, { scroll: !target.words });
      if (target.words) {
        // A search result's message: scrolled to the words found (once its Markdown is rendered,
        // in the next frame), marked for a moment.
        requestAnimationFrame(() => requestAnimationFrame(() => scrollToWords(node, target.words)));
        setTimeout(() => node.classList.remove("highlighted"), BRIEF_HIGHLIGHT_MS);
      }
    } else toast("That message is not in this chat any more.", "error");
  }

  function renderSaved(messages) {
    const nodes = [];
    const onPick = (messageId) => pickVersion(messageId);
    messages.forEach((message, index) => {
      if (message.role === "user") {
        const onEdit = (text) => edit(message.message_id, text);
        nodes.push(userMessage(message.content, message.message_id, { versions: message.versions, onPick, onEdit, documents: message.documents }));
        return;
      }
      const asked = messages[index - 1]?.role === "user" ? messages[index - 1] : null;
      const isLast = index === messages.length - 1;
      let saved = null;
      const onRetry = isLast && asked ? () => retry(asked.message_id, null, saved.root) : null;
      const onRegenerate = asked && message.status !== "error" ? () => retry(message.message_id, null, saved.root) : null;
      // A research report is assembled from parts: Regenerate researches again instead.
      const onContinue = isLast && message.mode !== "research" ? () => resume(message.message_id, saved.root) : null;
      const exportHref = messageExportHref(shown.chatId, message.message_id);
      saved = AssistantMessage.fromSaved(message, { totalMs: replyDuration(asked, message), onRetry, onRegenerate, onContinue, onPick, exportHref });
      nodes.push(saved.root);
    });
    messagesBox.replaceChildren(...(nodes.length ? nodes : [emptyState()]));
  }

  /** Show another version of a message: the chat's branch through it. */
  async function pickVersion(messageId) {
    const chatId = shown.chatId;
    if (!chatId || liveTurn()) return;
    try {
      const messages = await api.showVersion(chatId, messageId);
      if (shown.chatId !== chatId) return;
      shown.messages = messages;
      renderSaved(messages);
    } catch (error) {
      toast(error.message || String(error), "error");
    }
  }

  /** After a regenerate or an edit: read the chat again, so the new version shows its ‹ n/n ›. */
  async function reloadShown(chatId) {
    if (shown.chatId !== chatId || liveTurn()) return;
    try {
      const messages = await api.messages(chatId);
      if (shown.chatId !== chatId || liveTurn()) return;
      shown.messages = messages;
      renderSaved(messages);
    } catch {
      // What is on screen is right, only without its version switch.
    }
  }

  /** Everything from `node` on leaves the screen: another branch replaces it. */
  function dropFrom(node) {
    while (node?.nextSibling) node.nextSibling.remove();
    node?.remove();
  }

  async function send(content, useWeb, mode = "chat", documents = []) {
    const previous = turns.get(shown.key);
    if (previous && previous.phase === "streaming") return;
    if (!shown.chatId) messagesBox.querySelector(".empty-state")?.remove();
    for (const old of messagesBox.querySelectorAll(".retry-button")) old.remove();
    const view = new AssistantMessage({ onChange: () => scroll.follow() });
    const turn = new Turn(shown.chatId, content, useWeb, view, !shown.chatId && temporaryDraft, mode, documents);
    turn.viewId = shown.viewId;
    turn.userView = userMessage(content, undefined, { documents });
    messagesBox.append(turn.userView, view.root);
    turns.set(turn.key, turn);
    scroll.toBottom();
    syncComposer();
    if (previous) {
      // The last reply is shown but its stream is still open (the server is releasing the
      // chat, a moment); the server takes one message at a time per chat, so wait for it.
      view.steps.note("Waiting for the previous reply to be saved");
      await previous.closed;
    }
    await run(turn);
  }

  /** Answer a question again (`messageId`: the question, or one of its replies) in place of the
   *  reply shown (the element `replyRoot`, and everything after it): the question is not sent
   *  twice, and the reply replaced stays as a version. `useWeb` null: as first sent. */
  async function retry(messageId, useWeb, replyRoot) {
    const chatId = shown.chatId;
    if (!chatId || liveTurn()) return;
    const view = new AssistantMessage({ onChange: () => scroll.follow() });
    const turn = new Turn(chatId, null, useWeb, view);
    turn.viewId = shown.viewId;
    if (replyRoot?.isConnected) {
      replyRoot.before(view.root);
      dropFrom(view.root.nextSibling);
    } else messagesBox.append(view.root);
    turns.set(chatId, turn);
    scroll.toBottom();
    syncComposer();
    await run(turn, () => regenerateMessage(chatId, messageId, useWeb, turn.controller.signal));
    await reloadShown(chatId);
  }

  /** Go on with the stopped reply `messageId` (the element `replyRoot`): the new stream starts
   *  with its text so far, so the view simply takes its place. */
  async function resume(messageId, replyRoot) {
    const chatId = shown.chatId;
    if (!chatId || liveTurn()) return;
    const view = new AssistantMessage({ onChange: () => scroll.follow() });
    const turn = new Turn(chatId, null, false, view);
    turn.viewId = shown.viewId;
    if (replyRoot?.isConnected) replyRoot.replaceWith(view.root);
    else messagesBox.append(view.root);
    turns.set(chatId, turn);
    syncComposer();
    await run(turn, () => continueMessage(chatId, messageId, turn.controller.signal));
    await reloadShown(chatId);
  }

  /** Send `content` as a new version of the question `messageId`: it and everything after it
   *  give way to the new branch (the old one stays a version away). */
  async function edit(messageId, content) {
    const chatId = shown.chatId;
    const node = findMessage(messageId);
    if (!chatId || liveTurn() || !node) return;
    const view = new AssistantMessage({ onChange: () => scroll.follow() });
    const turn = new Turn(chatId, content, false, view);
    turn.viewId = shown.viewId;
    turn.userView = userMessage(content);
    node.before(turn.userView, view.root);
    dropFrom(node);
    turns.set(chatId, turn);
    scroll.toBottom();
    syncComposer();
    await run(turn, () => editMessage(chatId, messageId, content, false, turn.controller.signal));
    await reloadShown(chatId);
  }

  /** Show the reply being written in a chat this tab did not send it in, and follow it. */
  function attach(chatId) {
    const view = new AssistantMessage({ onChange: () => scroll.follow() });
    const turn = new Turn(chatId, null, false, view);
    turn.attached = true;
    turn.viewId = shown.viewId;
    turns.set(chatId, turn);
    // A reply being continued: its stream starts with its text so far, so it takes the place of
    // what was saved of it (put back if there is nothing to follow any more).
    const continued = messagesBox.lastElementChild?.dataset.status === "streaming" ? messagesBox.lastElementChild : null;
    if (continued) continued.replaceWith(view.root);
    else messagesBox.append(view.root);
    syncComposer();
    run(turn, () => followReply(chatId, 0, turn.controller.signal)).then(() => {
      if (turn.nothingToFollow) {
        if (continued) view.root.replaceWith(continued);
        else view.root.remove();
      }
    });
  }

  async function run(turn, open = () => openStream(turn)) {
    try {
      let response;
      try {
        response = await open();
      } catch (error) {
        if (turn.attached && error.status === 404) {
          turn.nothingToFollow = true; // it ended meanwhile: the saved messages say it all
          return;
        }
        throw error;
      }
      await read(turn, response);
      // The connection dropped, not the reply: the server goes on writing it. Follow it again
      // from the last event read.
      for (let attempt = 1; attempt <= RESUME_RETRIES && turn.phase === "streaming" && !turn.failed && turn.chatId; attempt += 1) {
        await sleep(RESUME_DELAY_MS * attempt, turn.controller.signal);
        try {
          await read(turn, await followReply(turn.chatId, turn.lastSeq, turn.controller.signal));
        } catch (error) {
          if (error.name === "AbortError" || error.status === 404) throw error;
        }
      }
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
      // A new chat's title is generated after its first reply (chat/titles.py): pick it up.
      if (turn.createdChat && turn.completed) sidebar.watchTitle(turn.chatId);
      if (turn.reloadAfter) reloadShown(turn.chatId);
    }
  }

  async function read(turn, response) {
    for await (const event of readEvents(response)) {
      if (event._seq) turn.lastSeq = event._seq;
      handle(turn, event);
    }
  }

  /** POST the message. Right after a Stop the server may still be saving the stopped reply and
   *  answer 409 (one reply at a time per chat): that clears within moments, so try again. */
  async function openStream(turn) {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await postMessage(turn.chatId, turn.content, turn.useWeb, turn.controller.signal, {
          temporary: turn.temporary,
          mode: turn.mode,
          documentIds: turn.documents.map((doc) => doc.document_id),
        });
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
        if (!turn.attached) adoptNewChat(turn, event);
        break;
      case "turn":
        turn.userMessageId = event.user_message_id;
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
      case "memories":
        turn.view.memories.set(event.memories);
        turn.view.onChange();
        break;
      case "done":
        turn.phase = "saved";
        turn.completed = true;
        turn.messageId = event.message_id;
        turn.view.root.dataset.messageId = event.message_id;
        turn.view.exportHref = messageExportHref(turn.chatId, event.message_id);
        turn.view.setModel(event.model_name, event.notes);
        offerNewVersions(turn);
        turn.view.complete("complete", elapsed(turn));
        announce("Reply finished");
        if (turn.key === shown.key) syncComposer();
        break;
      case "interrupted":
        turn.phase = "saved";
        turn.reloadAfter = true; // read back as saved: it can be continued or regenerated
        turn.view.complete("interrupted", elapsed(turn));
        announce("Reply stopped");
        if (turn.key === shown.key) syncComposer();
        break;
      case "error":
        turn.failed = true;
        turn.view.fail(event.message, retryOf(turn), elapsed(turn));
        announce("The reply failed");
        break;
      default:
        break; // heartbeat: nothing to show
    }
  }

  /** A reply just saved can be regenerated, and its question edited, as if read from the server. */
  function offerNewVersions(turn) {
    const { messageId, userMessageId } = turn;
    turn.view.onRegenerate = () => retry(messageId, null, turn.view.root);
    if (turn.userView && userMessageId && typeof turn.content === "string") {
      const fresh = userMessage(turn.content, userMessageId, { onEdit: (text) => edit(userMessageId, text), documents: turn.documents });
      turn.userView.replaceWith(fresh);
      turn.userView = fresh;
    }
  }

  /** The first message of a draft created a chat: the draft becomes that chat. */
  function adoptNewChat(turn, event) {
    turns.delete(DRAFT);
    turn.createdChat = true;
    turn.chatId = event.chat_id;
    turns.set(turn.chatId, turn);
    if (turn.stopWanted) requestStop(turn); // Stop was pressed before the chat existed
    const temporary = typeof event.temporary === "boolean" ? event.temporary : turn.temporary;
    sidebar.upsert({ chat_id: event.chat_id, title: event.title, temporary, updated_at: new Date().toISOString() });
    if (shown.key === DRAFT && shown.viewId === turn.viewId) {
      Object.assign(shown, { chatId: event.chat_id, key: event.chat_id });
      if (isShown()) history.replaceState(null, "", chatHref(event.chat_id));
      setTitle(event.title);
      if (isShown()) sidebar.setActive(event.chat_id);
      syncComposer();
    }
  }

  /** Ask the server to stop the reply (any tab, any server); the stream then ends with
   *  `interrupted`. If the server cannot be reached, stop reading at least. */
  function requestStop(turn) {
    api.stop(turn.chatId).catch((error) => {
      if (error.status !== 409) turn.controller.abort(); // 409: it had ended already
    });
  }

  /** Retry a failed reply: its question is answered again (not sent again), web as before. */
  function retryOf(turn) {
    return () => {
      if (!turn.chatId || shown.chatId !== turn.chatId) return;
      if (turn.userMessageId) retry(turn.userMessageId, turn.attached ? null : turn.useWeb, turn.view.root);
      else if (turn.content) send(turn.content, turn.useWeb, turn.mode); // it failed before the question was saved
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
      if (turn.chatId) requestStop(turn);
      else turn.stopWanted = true;
    },
    isStreaming: () => Boolean(liveTurn()),
    refreshTitle() {
      const title = shown.chatId && sidebar.titleOf(shown.chatId);
      if (title) setTitle(title);
      syncTemporary();
    },
    /** Memory was paused or resumed (the Memory page's switch, or the server's config). */
    setMemoryPaused(paused) {
      memoryPaused = Boolean(paused);
      if (!shown.chatId) redrawEmptyState();
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

// The server's JSON API (chats, messages, memories, settings). Every failure becomes an ApiError
// carrying the server's own sentence ({"error": "..."}), so the UI can show people what actually
// went wrong.

export class ApiError extends Error {
  constructor(message, status = 0) {
    super(message);
    this.name = "ApiError";
    this.status = status;
  }
}

async function errorOf(response) {
  let message = `The server answered ${response.status} ${response.statusText}`.trim();
  try {
    const body = await response.json();
    if (body && typeof body.error === "string") message = body.error;
  } catch {
    // Not JSON (a proxy's error page, say): keep the status line.
  }
  return new ApiError(message, response.status);
}

/** `keepalive`: the request outlives the page (a pending delete sent while the tab closes). */
async function request(method, path, body, { keepalive = false } = {}) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      keepalive,
    });
  } catch {
    throw new ApiError("Cannot reach the server. Check that it is running.");
  }
  if (!response.ok) throw await errorOf(response);
  return response.status === 204 ? null : response.json();
}

const chatPath = (chatId) => `/api/chats/${encodeURIComponent(chatId)}`;
const memoryPath = (memoryId) => `/api/memories/${encodeURIComponent(memoryId)}`;
const query = (params) => new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== undefined)).toString();

export const api = {
  config: () => request("GET", "/api/config"),
  listChats: (q = "") => request("GET", `/api/chats?${new URLSearchParams(q ? { q, limit: "200" } : { limit: "200" })}`),
  messages: (chatId) => request("GET", `${chatPath(chatId)}/messages`),
  summary: (chatId) => request("GET", `${chatPath(chatId)}/summary`),
  rename: (chatId, title) => request("PATCH", chatPath(chatId), { title }),
  /** `forgetMemories`: also delete the memories saved from this chat (else they stay). */
  remove: (chatId, { forgetMemories = false } = {}) =>
    request("DELETE", forgetMemories ? `${chatPath(chatId)}?forget_memories=true` : chatPath(chatId)),
  /** Stop the reply being written in the chat, whichever server writes it (409: none is). */
  stop: (chatId) => request("POST", `${chatPath(chatId)}/stop`),
  /** Show another version of a message: answers the messages of the branch now shown. */
  showVersion: (chatId, messageId) => request("POST", `${chatPath(chatId)}/messages/${encodeURIComponent(messageId)}/show`),

  /** {memories, total, forget_token}, newest first; `q` matches content and quote. */
  memories: ({ q = "", limit = 50, offset = 0, includeSuperseded = false } = {}) =>
    request("GET", `/api/memories?${query({ q, limit: String(limit), offset: String(offset), include_superseded: String(includeSuperseded) })}`),
  memory: (memoryId) => request("GET", memoryPath(memoryId)),
  editMemory: (memoryId, content) => request("PATCH", memoryPath(memoryId), { content }),
  removeMemory: (memoryId, { keepalive = false } = {}) => request("DELETE", memoryPath(memoryId), undefined, { keepalive }),
  /** Delete every memory; `token` is the `forget_token` of a list the user has seen. */
  forgetAll: (token) => request("DELETE", `/api/memories?${query({ confirm: token })}`),
  exportUrl: "/api/memories/export",
  settings: () => request("GET", "/api/settings"),
  /** The server's state; `answering` says which model writes the replies. */
  health: () => request("GET", "/api/health"),
  updateSettings: (changes) => request("PATCH", "/api/settings", changes),
};

/**
 * Send a message and return the streaming Response (text/event-stream). No `chatId` starts a new
 * chat; `temporary` makes that chat one that neither reads nor writes memory. The reply is written
 * to its end whether or not this stream is read (Stop is `api.stop`); aborting `signal` only stops
 * reading.
 */
export async function postMessage(chatId, content, useWeb, signal, { temporary = false } = {}) {
  const path = chatId ? `${chatPath(chatId)}/messages` : "/api/messages";
  const body = { content, use_web: useWeb };
  if (!chatId && temporary) body.temporary = true; // only a new chat can be temporary
  return openEvents(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify(body),
    signal,
  });
}

/** Answer a question again (`messageId`: the question or a reply to it): a new version of its
 *  reply; `useWeb` null: as first sent. The same stream as `postMessage`. */
export function regenerateMessage(chatId, messageId, useWeb, signal) {
  return openEvents(`${chatPath(chatId)}/messages/${encodeURIComponent(messageId)}/regenerate`, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify(useWeb === null ? {} : { use_web: useWeb }),
    signal,
  });
}

/** Go on with a stopped reply: the stream starts with its text so far. */
export function continueMessage(chatId, messageId, signal) {
  return openEvents(`${chatPath(chatId)}/messages/${encodeURIComponent(messageId)}/continue`, {
    method: "POST",
    headers: { Accept: "text/event-stream" },
    signal,
  });
}

/** Send `content` as a new version of one of your messages, answered on a branch of its own. */
export function editMessage(chatId, messageId, content, useWeb, signal) {
  return openEvents(`${chatPath(chatId)}/messages/${encodeURIComponent(messageId)}`, {
    method: "PATCH",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify({ content, use_web: useWeb }),
    signal,
  });
}

/** Follow the reply being written in a chat from after event number `after` (404: none is). */
export function followReply(chatId, after, signal) {
  return openEvents(`${chatPath(chatId)}/stream?after=${after}`, { headers: { Accept: "text/event-stream" }, signal });
}

async function openEvents(path, init) {
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError("Cannot reach the server. Check that it is running.");
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

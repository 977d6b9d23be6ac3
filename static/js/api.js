// The server's JSON API (chats, messages, memories, documents, settings, accounts). Every failure becomes an
// ApiError carrying the server's own sentence ({"error": "..."}), so the UI can show people what
// actually went wrong.
//
// Accounts: with AUTH_MODE=password the session cookie signs requests in, and every change (POST,
// PATCH, PUT, DELETE) must also carry the session's CSRF token as `X-CSRF-Token`; `loadSession()`
// fetches it (GET /api/auth/me) and every change waits for it. A 401 from any call means the
// session is gone: the page goes to the sign-in page and the call never settles, so no view
// flashes an error on its way out.

export const LOGIN_PAGE = "/login.html";

export class ApiError extends Error {
  constructor(message, status = 0) {
    super(message);
    this.name = "ApiError";
    this.status = status;
  }
}

let csrfToken = null;
let sessionPending = null; // GET /api/auth/me while it is under way: changes wait for its token

/** The session's CSRF token (null in auth_mode "none"), from /me, login or a password change. */
export function setCsrfToken(token) {
  csrfToken = typeof token === "string" && token ? token : null;
}

const SAFE_METHODS = new Set(["GET", "HEAD", "OPTIONS"]);

/** `headers` plus X-CSRF-Token for a change. Synchronous once the session is known, so a
 *  `keepalive` request sent while the page goes away still leaves in time. */
function withCsrf(method, headers) {
  if (SAFE_METHODS.has(method) || !csrfToken) return headers;
  return { ...headers, "X-CSRF-Token": csrfToken };
}

/** A change sent before /me answered waits for it (it needs the token); else nothing waits. */
const mustWait = (method) => sessionPending !== null && !SAFE_METHODS.has(method);

let leaving = false;

/** The session is gone (401): go and sign in (then back to this chat: the hash goes along);
 *  what asked waits forever (the page is leaving). */
function toSignIn() {
  if (!leaving) {
    leaving = true;
    location.assign(LOGIN_PAGE + location.hash);
  }
  return new Promise(() => {});
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

/** `keepalive`: the request outlives the page (a pending delete sent while the tab closes).
 *  `signIn: false`: a 401 is an answer to show, not the end of the session. */
async function request(method, path, body, { keepalive = false, signIn = true } = {}) {
  if (mustWait(method)) await sessionPending.catch(() => null);
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: withCsrf(method, body === undefined ? {} : { "Content-Type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
      keepalive,
    });
  } catch {
    throw new ApiError("Cannot reach the server. Check that it is running.");
  }
  if (response.status === 401 && signIn) return toSignIn();
  if (!response.ok) throw await errorOf(response);
  return response.status === 204 ? null : response.json();
}

/**
 * Who is signed in: {auth_mode, user, csrf_token}; keeps the token for every later change. A
 * server without accounts (404) is treated as auth_mode "none". In password mode a 401 goes to
 * the sign-in page.
 */
export function loadSession() {
  const session = request("GET", "/api/auth/me")
    .catch((error) => {
      if (error.status === 404) return { auth_mode: "none", user: null, csrf_token: null };
      throw error;
    })
    .then((me) => {
      setCsrfToken(me.csrf_token);
      return me;
    })
    .finally(() => {
      if (sessionPending === session) sessionPending = null;
    });
  sessionPending = session;
  return session;
}

const chatPath = (chatId) => `/api/chats/${encodeURIComponent(chatId)}`;
const memoryPath = (memoryId) => `/api/memories/${encodeURIComponent(memoryId)}`;
const documentPath = (documentId) => `/api/documents/${encodeURIComponent(documentId)}`;
const query = (params) => new URLSearchParams(Object.entries(params).filter(([, v]) => v !== "" && v !== undefined)).toString();

export const api = {
  config: () => request("GET", "/api/config"),
  listChats: (q = "") => request("GET", `/api/chats?${new URLSearchParams(q ? { q, limit: "200" } : { limit: "200" })}`),
  messages: (chatId) => request("GET", `${chatPath(chatId)}/messages`),
  summary: (chatId) => request("GET", `${chatPath(chatId)}/summary`),
  rename: (chatId, title) => request("PATCH", chatPath(chatId), { title }),
  pin: (chatId, pinned) => request("PATCH", chatPath(chatId), { pinned }),
  search: (q) => request("GET", `/api/search?${new URLSearchParams({ q, limit: "20" })}`),
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
  /** What this server runs on (models per role, database, embedder, web search, tracing, tools). */
  systemSettings: () => request("GET", "/api/settings/system"),
  /** Your model calls and tool use: {from, to, group_by, groups: [...], totals}. */
  usage: ({ from, to, group_by }) => request("GET", `/api/usage?${query({ from, to, group_by })}`),

  // Documents (uploads: `uploadDocument` below).
  documents: () => request("GET", "/api/documents"),
  document: (documentId) => request("GET", documentPath(documentId)),
  /** The document's chunks in order, [{chunk_id, ordinal, page, heading, content}]; one page's
   *  with `page`. */
  documentChunks: (documentId, page = null) =>
    request("GET", `${documentPath(documentId)}/chunks${page === null ? "" : `?${query({ page: String(page) })}`}`),
  renameDocument: (documentId, filename) => request("PATCH", documentPath(documentId), { filename }),
  removeDocument: (documentId) => request("DELETE", documentPath(documentId)),
  reindexDocument: (documentId) => request("POST", `${documentPath(documentId)}/reindex`),
  cancelDocument: (documentId) => request("POST", `${documentPath(documentId)}/cancel`),
  /** The original file, as a download. */
  documentFileUrl: (documentId) => `${documentPath(documentId)}/file`,

  // Accounts (AUTH_MODE=password).
  signOut: () => request("POST", "/api/auth/logout", undefined, { signIn: false }),
  /** Answers the session again, with a new CSRF token (kept here): other sessions are gone. */
  changePassword: async (currentPassword, newPassword) => {
    const me = await request("POST", "/api/auth/password", { current_password: currentPassword, new_password: newPassword });
    setCsrfToken(me.csrf_token);
    return me;
  },
  tokens: () => request("GET", "/api/auth/tokens"),
  /** {token_id, name, created_at, last_used_at, token}: `token` is given this once only. */
  createToken: (name) => request("POST", "/api/auth/tokens", { name }),
  revokeToken: (tokenId) => request("DELETE", `/api/auth/tokens/${encodeURIComponent(tokenId)}`),
  users: () => request("GET", "/api/admin/users"),
  addUser: (username, password, isAdmin) => request("POST", "/api/admin/users", { username, password, is_admin: isAdmin }),
  setUserDisabled: (userId, disabled) => request("PATCH", `/api/admin/users/${encodeURIComponent(userId)}`, { disabled }),
};

/**
 * Upload a file (multipart `file`, and `chat_id` to attach it to a chat): `{document, existing}`,
 * `existing` when the same bytes were already one of the user's documents (200, not 201).
 */
export async function uploadDocument(file, chatId = null) {
  if (mustWait("POST")) await sessionPending.catch(() => null);
  const form = new FormData();
  form.append("file", file, file.name);
  if (chatId) form.append("chat_id", chatId);
  let response;
  try {
    // No Content-Type: the browser writes the multipart boundary itself.
    response = await fetch("/api/documents", { method: "POST", headers: withCsrf("POST", {}), body: form });
  } catch {
    throw new ApiError("Cannot reach the server. Check that it is running.");
  }
  if (response.status === 401) return toSignIn();
  if (!response.ok) throw await errorOf(response);
  return { document: await response.json(), existing: response.status === 200 };
}

/**
 * Import a file (multipart `file`): a ResolveAI export or a ChatGPT conversations.json / .zip.
 * The answer says what was imported and skipped (static/js/data-transfer.js shows it).
 */
export async function importData(file) {
  if (mustWait("POST")) await sessionPending.catch(() => null);
  const form = new FormData();
  form.append("file", file, file.name);
  let response;
  try {
    response = await fetch("/api/import", { method: "POST", headers: withCsrf("POST", {}), body: form });
  } catch {
    throw new ApiError("Cannot reach the server. Check that it is running.");
  }
  if (response.status === 401) return toSignIn();
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

/**
 * Send a message and return the streaming Response (text/event-stream). No `chatId` starts a new
 * chat; `temporary` makes that chat one that neither reads nor writes memory; `documentIds`: the
 * files (uploaded first) sent with it, which the reply reads. The reply is written to its end
 * whether or not this stream is read (Stop is `api.stop`); aborting `signal` only stops reading.
 */
export async function postMessage(chatId, content, useWeb, signal, { temporary = false, mode = "chat", documentIds = [] } = {}) {
  const path = chatId ? `${chatPath(chatId)}/messages` : "/api/messages";
  const body = { content, use_web: useWeb };
  if (mode !== "chat") body.mode = mode;
  if (documentIds.length) body.document_ids = documentIds;
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
  const method = init.method || "GET";
  if (mustWait(method)) await sessionPending.catch(() => null);
  let response;
  try {
    response = await fetch(path, { ...init, headers: withCsrf(method, init.headers || {}) });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError("Cannot reach the server. Check that it is running.");
  }
  if (response.status === 401) return toSignIn();
  if (!response.ok) throw await errorOf(response);
  return response;
}

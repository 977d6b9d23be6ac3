// The server's JSON API. Every failure becomes an ApiError carrying the server's own sentence
// ({"error": "..."}), so the UI can show people what actually went wrong.

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

async function request(method, path, body) {
  let response;
  try {
    response = await fetch(path, {
      method,
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError("Cannot reach the server. Check that it is running.");
  }
  if (!response.ok) throw await errorOf(response);
  return response.status === 204 ? null : response.json();
}

const chatPath = (chatId) => `/api/chats/${encodeURIComponent(chatId)}`;

export const api = {
  config: () => request("GET", "/api/config"),
  listChats: (q = "") => request("GET", `/api/chats?${new URLSearchParams(q ? { q, limit: "200" } : { limit: "200" })}`),
  messages: (chatId) => request("GET", `${chatPath(chatId)}/messages`),
  summary: (chatId) => request("GET", `${chatPath(chatId)}/summary`),
  rename: (chatId, title) => request("PATCH", chatPath(chatId), { title }),
  remove: (chatId) => request("DELETE", chatPath(chatId)),
};

/**
 * Send a message and return the streaming Response (text/event-stream). No `chatId` starts a new
 * chat. Aborting `signal` is how Stop works: the server notices the closed connection and saves
 * the partial reply as interrupted.
 */
export async function postMessage(chatId, content, useWeb, signal) {
  const path = chatId ? `${chatPath(chatId)}/messages` : "/api/messages";
  const body = { content, use_web: useWeb };
  let response;
  try {
    response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
      body: JSON.stringify(body),
      signal,
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError("Cannot reach the server. Check that it is running.");
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

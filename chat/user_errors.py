"""What a person is told when something fails, in one place: a sentence they can act on, and a
ref that finds the log line with the raw reason.

A provider's or tool's own text ("litellm.ServiceUnavailableError: …", "TAVILY_API_KEY not set")
helps whoever runs the server, not someone chatting: it goes to the log, next to a short ref
(`ref 3f2a9c`) that the sentence shown to the user quotes too. Notes are the milder kind: the
reply came, but not quite as asked for (a fallback model answered, web search is off or failed).
"""

from __future__ import annotations

import logging
import secrets
import uuid
from typing import Any

import litellm

from chat.state import TurnContext
from chat.steps import short_id
from core.logs import first_line
from core.model_names import Answered, answered_by

log = logging.getLogger("resolveai.chat")

WEB_SEARCH_OFF = "Web search is off: add a Tavily key in .env (see README)."
REPLY_FAILED = "The assistant could not finish this reply. Please try again."
LOCAL_MODEL_SAYS = "The local model "  # how core/local_model's errors for the user begin
# By the exception's kind, or its HTTP status when a provider only gives that. Checked in order:
# a too-long chat is a bad request too, and a timeout an unreachable server.
_BY_KIND: tuple[tuple[type[BaseException], str], ...] = (
    (litellm.ContextWindowExceededError,
     "This chat is too long for the model. Start a new chat to go on."),
    (litellm.AuthenticationError,
     "The model provider refused its API key: check the key in .env (see README)."),
    (litellm.RateLimitError,
     "The model provider's rate limit was reached. Wait a minute, then try again."),
    (litellm.Timeout, "The model took too long to answer. Please try again."),
    (litellm.ServiceUnavailableError, "The model is unavailable right now. Please try again."),
    (litellm.APIConnectionError, "The model could not be reached. Please try again."),
    (litellm.InternalServerError, "The model is unavailable right now. Please try again."),
)  # fmt: skip
_BY_STATUS = {
    401: "The model provider refused its API key: check the key in .env (see README).",
    403: "The model provider refused its API key: check the key in .env (see README).",
    429: "The model provider's rate limit was reached. Wait a minute, then try again.",
    500: "The model is unavailable right now. Please try again.",
    502: "The model is unavailable right now. Please try again.",
    503: "The model is unavailable right now. Please try again.",
    504: "The model took too long to answer. Please try again.",
}


def new_ref() -> str:
    """A short id quoted both to the user and in the log line."""
    return secrets.token_hex(3)


def plain_reason(error: BaseException) -> str:
    """The sentence for a failed reply, without the ref."""
    if getattr(error, "plain", False):  # already written for the user (ReplyNotSaved)
        return str(error)
    # The local model's own errors are written for the user ("The local model is busy with 3
    # requests already; try again in a minute"): more use than a generic sentence.
    text = first_line(error, 500)
    if LOCAL_MODEL_SAYS in text:
        return text[text.index(LOCAL_MODEL_SAYS) :]
    for kind, sentence in _BY_KIND:
        if isinstance(error, kind):
            return sentence
    status = getattr(error, "status_code", None)
    return _BY_STATUS.get(status, REPLY_FAILED) if isinstance(status, int) else REPLY_FAILED


def reply_failed(error: BaseException, chat_id: uuid.UUID | str) -> str:
    """Log why a reply failed (raw, with a ref) and return what the user is told (with it)."""
    ref = new_ref()
    told = plain_reason(error)
    # A failure no sentence explains is a bug: where it happened goes to the log too.
    log.error("Chat %s: reply failed (ref %s): %s: %s", short_id(chat_id), ref,
              type(error).__name__, first_line(error, 500),
              exc_info=error if told == REPLY_FAILED else None)  # fmt: skip
    return f"{told} (ref {ref})"


def reply_ended(reason: str, detail: str | None, chat_id: uuid.UUID | str) -> str:
    """A reply ended by the server (its deadline, a lost claim): `reason` is plain already;
    `detail`, raw, goes only to the log."""
    ref = new_ref()
    log.warning("Chat %s: reply ended (ref %s): %s%s", short_id(chat_id), ref, reason,
                f" ({detail})" if detail else "")  # fmt: skip
    return f"The reply was ended: {reason}. What it wrote so far is saved. (ref {ref})"


# A message with a link, on a server that does not read links (LINK_READING=off, or an offline
# setup): a step and a note, so nobody thinks the page was read.
LINKS_UNREAD = (
    "The link in your message was not opened: reading links is off on this server "
    "(LINK_READING in .env)."
)


def fallback_note(answered: Answered) -> str:
    """A fallback answered: which one, in words."""
    if answered.local:
        return "The hosted model is unavailable; answered with the local model."
    return f"The first-choice model is unavailable; answered with {answered.name}."


def web_search_failed(error_text: str, chat_id: uuid.UUID | str) -> str:
    """The web search tool failed: the note for the user (a rejected key named as such), the raw
    reason logged with the ref."""
    ref = new_ref()
    log.warning("Chat %s: web search failed (ref %s): %s", short_id(chat_id), ref, error_text)
    if "401" in error_text or "API key" in error_text or "not configured" in error_text:
        what = "Web search failed: the Tavily key was rejected; check TAVILY_API_KEY in .env"
    else:
        what = "Web search failed, so this answer is not from the web"
    return f"{what} (ref {ref})."


def web_search_status(status: str) -> str | None:
    """The server's web search status ("off (TAVILY_API_KEY not set)") as a sentence to act on;
    None when search is on."""
    if not status.startswith("off"):
        return None
    if "TAVILY_API_KEY not set" in status:
        return WEB_SEARCH_OFF
    if "WEB_SEARCH_PROVIDER=off" in status:
        return "Web search is turned off on this server (WEB_SEARCH_PROVIDER=off in .env)."
    return "Web search is off on this server (see README)."


def note_answer(turn: TurnContext, response: Any) -> None:
    """Record which deployment answered one of the turn's chat calls (a Router response); a
    fallback's answer gets its note."""
    answered = answered_by(turn.services.router, response)
    if answered is None:
        return
    turn.answered.append(answered)
    if answered.group != "chat":  # the role's own deployments (a borrowed role's too) are "chat"
        turn.add_note(fallback_note(answered))

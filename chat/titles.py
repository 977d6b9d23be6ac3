"""Chat titles: after a new chat's first reply, the utility model names the chat.

Until then (and whenever this fails) a chat is titled with the start of its first message
(chat/runner.py `title_from`, `title_source` 'auto'). After the first reply is saved, and after
the turn has released its chat, one `utility` call (or a `title` deployment group, if
MODELS_CONFIG names one) asks for a title of at most `MAX_WORDS` words in the chat's language;
`clean_title` makes its answer plain text, and `is_about` drops a title that shares no word with
the question or the reply, or only one of several (the local model, unsure, copies the
instructions' example "Fixing a Flask import error", invents "Weather updates" for "What's the
capital of Australia?" or "Currency exchange rate tracker" for a question about a currency). It is
stored compare-and-set on `title_source = 'auto'`
(core/chat_store.py `set_generated_title`), so a rename made meanwhile, by any process, is never
overwritten. A failing call, an empty answer, or a process that dies meanwhile leave the first
title: a title is no data worth a durable job.

The browser picks the new title up by reading the chat list again (static/js/sidebar.js
`watchTitle`), so it does not matter which server process writes it. What this module holds in
memory is only this process's running tasks, so they are not garbage-collected and tests can wait
for them (`settled`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import unicodedata
import uuid

from chat.steps import short_id
from core import chat_store
from core.logs import first_line
from core.prompts import title_request
from core.services import Services
from core.text_cuts import cut_at_word
from core.tracing import trace_metadata

log = logging.getLogger("resolveai.chat")

MAX_WORDS = 6
MAX_CHARS = 60
MAX_TOKENS = 40  # a title is a few tokens; a rambling model is cut off, not waited for
# Of the question and of the reply: the start says what the chat is about. A title call is
# background work, but on the local model it holds the model until done, so the user's next
# message may wait for it. `python -m bench.title_prompt` (6 long first replies, local model, no
# prompt cached): 2.6 s per title at 600 characters, 5.6-5.9 s at 2,000, titles as good.
PROMPT_CHARS = 600
SHUTDOWN_WAIT_SECONDS = 3.0

_running: set[asyncio.Task[None]] = set()

_THINKING = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
_LABEL = re.compile(r"^(chat\s+)?title\s*[:：-]\s*", re.IGNORECASE)
_MARKUP = re.compile(r"\*+|`+|~~|__|\[|\]\([^)]*\)|\]")  # emphasis, code, links' brackets
_LEAD = re.compile(r"^\s*(#+|>+|[-*+•]|\d+[.)])\s+")  # a heading, quote or list mark
_QUOTES = "\"'“”„‟«»‹›‘’‚`「」『』"
_CONTROL = re.compile(r"[\x00-\x1f\x7f\ue000-\uf8ff]")
_WORDS = re.compile(r"\w+")
# Words any title may use that say nothing about what this chat is about.
_GENERIC = frozenset({
    "a", "an", "the", "and", "or", "of", "on", "in", "to", "for", "with", "about", "from", "your",
    "my", "our", "chat", "chats", "chatting", "talk", "conversation", "discussion", "help", "tips",
    "question", "questions",
})  # fmt: skip
REPLY_CHARS = 200  # of the reply, for `is_about`
# Words match on their first letters: "allergy" is about "allergic", "nursing" about "nurse".
STEM_CHARS = 4
_UNSPACED = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\u3040-\u30ff]")  # CJK, kana, hangul


def is_about(title: str, question: str, reply: str) -> bool:
    """Whether the title shares a word (or its first STEM_CHARS letters, accents aside) with the
    question or the reply's start (a long reply holds some word of almost any title: a story
    about a lighthouse says "important", which starts like "import"), and at least half of its
    words of STEM_CHARS letters or more: one borrowed word does not make an invented title about
    the chat ("Currency exchange rate tracker" for the capital and currency of Indonesia). A title
    in a script written without spaces is taken as it is: its words cannot be told apart this
    way."""
    if _UNSPACED.search(title):
        return True
    said = {_stem(word) for word in _words(f"{question} {reply[:REPLY_CHARS]}")}
    words = [w for w in _words(title) if w not in _GENERIC and not w.isdigit()]
    if not words:
        return True
    long_words = [w for w in words if len(w) >= STEM_CHARS]
    long_said = sum(_stem(w) in said for w in long_words)
    return any(_stem(w) in said for w in words) and 2 * long_said >= len(long_words)


def _words(text: str) -> list[str]:
    """Lower-case words without accents ("alérgica" meets "alergia")."""
    decomposed = unicodedata.normalize("NFKD", text.lower())
    return _WORDS.findall("".join(c for c in decomposed if not unicodedata.combining(c)))


def _stem(word: str) -> str:
    """A word's first STEM_CHARS letters, a plural's "s" aside first ("cups" meets "cup")."""
    return word.removesuffix("s")[:STEM_CHARS]


def clean_title(text: str) -> str:
    """The model's answer as a plain-text title ('' if nothing usable is left): the first line
    with words, without a "Title:" label, Markdown, quotes or an end stop, at most MAX_WORDS words
    and MAX_CHARS characters."""
    text = _THINKING.sub(" ", text or "")
    line = next((ln for ln in text.splitlines() if re.search(r"\w", ln)), "")
    line = _CONTROL.sub(" ", line)
    line = _MARKUP.sub("", _LEAD.sub("", line))
    line = _LABEL.sub("", line.strip())
    line = " ".join(line.split()).strip(_QUOTES + " ")
    line = line.rstrip(".!?:;,。！？ ").strip(_QUOTES + " ")
    words = line.split()[:MAX_WORDS]
    title = " ".join(words)
    if len(title) > MAX_CHARS:
        title = cut_at_word(title, MAX_CHARS, mark="").rstrip(".,;:-– ")
    return title if re.search(r"\w", title) else ""


def start_title(
    services: Services, chat_id: uuid.UUID, question: str, reply: str, trace_id: str | None
) -> None:
    """After a new chat's first reply: title it in the background. Returns at once."""
    task = asyncio.create_task(
        generate_title(services, chat_id, question, reply, trace_id),
        name=f"chat title {short_id(chat_id)}",
    )
    _running.add(task)
    task.add_done_callback(_running.discard)


async def generate_title(
    services: Services,
    chat_id: uuid.UUID,
    question: str,
    reply: str,
    trace_id: str | None = None,
) -> str | None:
    """Ask the model for a title and store it unless the chat was renamed (or deleted) meanwhile;
    the title stored, or None (then the first title stays). Never raises but for cancellation."""
    pool = services.database.pool
    try:
        chat = await chat_store.get_chat(pool, chat_id, user_id=None)
        if chat is None or chat["title_source"] != "auto":
            return None
        role = "title" if services.model_plan.deployments("title") else "utility"
        response = await services.router.acompletion(
            model=role,
            messages=title_request(question[:PROMPT_CHARS], reply[:PROMPT_CHARS]),
            max_tokens=MAX_TOKENS,
            metadata=trace_metadata(trace_id or str(chat_id), str(chat_id), "title"),
        )
        title = clean_title(response.choices[0].message.content or "")
        if not title:
            log.info("Chat %s: no title from the model; the first one stays", short_id(chat_id))
            return None
        if not is_about(title, question, reply):
            log.info("Chat %s: title %r is about nothing said; the first one stays",
                     short_id(chat_id), title)  # fmt: skip
            return None
        stored = await chat_store.set_generated_title(pool, chat_id, title)
    except Exception as error:
        log.warning(
            "Chat %s: title not generated, the first one stays (%s: %s)",
            short_id(chat_id),
            type(error).__name__,
            first_line(error),
        )
        return None
    if stored is None:
        log.info("Chat %s: renamed meanwhile; the generated title is dropped", short_id(chat_id))
        return None
    log.info("Chat %s: titled %r", short_id(chat_id), title)
    return title


async def settled() -> None:
    """Return once no title task started in this event loop is running (tests)."""
    loop = asyncio.get_running_loop()
    while pending := [t for t in _running if not t.done() and t.get_loop() is loop]:
        await asyncio.wait(pending)


async def close(wait_seconds: float = SHUTDOWN_WAIT_SECONDS) -> None:
    """At shutdown: a moment for running title calls, then the rest are cancelled (their chats
    keep their first titles)."""
    loop = asyncio.get_running_loop()
    pending = [t for t in _running if not t.done() and t.get_loop() is loop]
    if not pending:
        return
    _, unfinished = await asyncio.wait(pending, timeout=wait_seconds)
    for task in unfinished:
        task.cancel()
    if unfinished:
        await asyncio.wait(unfinished)

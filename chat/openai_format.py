"""The OpenAI chat-completions wire format of a ResolveAI reply: its chunks, the whole completion,
the sources as text, the usage and the schema models (chat/openai_routes.py uses them).

A reply's events (chat/nodes.py: `token`, `sources`, `memories`, `done`…) become OpenAI's
`chat.completion.chunk`s; ResolveAI's own facts ride along in an extension field, `resolveai`
(`chat_id`, `message_id`, `status`, `sources`, `memories`), on the completion and on the chunk
that carries `finish_reason`. A reply that cites sources ends with them as a Markdown list, so a
client that knows nothing of `resolveai` still shows where the answer came from (a research
report lists them itself).

Two models: `resolveai` answers as the browser's chat does, `resolveai-research` writes a research
report (the browser's Research toggle), so a client's model picker offers both.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import litellm
from pydantic import BaseModel, Field

log = logging.getLogger("resolveai.openai")

MODEL_ID = "resolveai"
RESEARCH_MODEL_ID = "resolveai-research"
MODES = {MODEL_ID: "chat", RESEARCH_MODEL_ID: "research"}  # model id → the turn's mode
CREATED = 1_767_225_600  # 2026-01-01: the model's "created" date (OpenAI lists one)
COUNTING_MODEL = "gpt-4o"  # whose tokenizer (bundled with LiteLLM, offline) counts usage


def model_card(model_id: str = MODEL_ID) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": CREATED, "owned_by": "resolveai"}


def sources_text(sources: list[dict[str, Any]]) -> str:
    """The sources cited, as the end of the reply's text: `[1] [Title](https://…)` lines. A
    document's passage has no address a client could open: its title (file, page) alone."""
    if not sources:
        return ""
    lines = []
    for source in sources:
        title = " ".join(str(source.get("title") or source.get("url") or "").split())
        url = str(source.get("url") or "")
        shown = f"[{title}]({url})" if url.startswith(("http://", "https://")) else title
        lines.append(f"[{source.get('n', len(lines) + 1)}] {shown}")
    return "\n\nSources:\n" + "\n".join(lines)


def usage(prompt: list[dict[str, str]], reply: str) -> dict[str, int]:
    """Tokens, counted (LiteLLM's tokenizer; CPU work, run it in a thread) over the messages the
    client sent and the reply: what the client's own accounting can check. The prompt ResolveAI
    builds around them (instructions, memories, web pages) is not the client's, and not counted."""
    try:
        prompt_tokens = litellm.token_counter(model=COUNTING_MODEL, messages=prompt)
        completion_tokens = litellm.token_counter(model=COUNTING_MODEL, text=reply) if reply else 0
    except Exception as error:  # a count is no reason to fail a reply: about 4 characters a token
        log.warning("Usage not counted (%s); estimated", error)
        prompt_tokens = sum(len(m["content"]) for m in prompt) // 4
        completion_tokens = len(reply) // 4
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


class ReplyState:
    """What the chunks of one reply share, and what its events said so far."""

    def __init__(self, completion_id: str, model: str, chat_id: str, include_usage: bool) -> None:
        self.id = completion_id
        self.model = model
        self.created = int(time.time())
        self.chat_id = chat_id
        self.include_usage = include_usage
        self.text: list[str] = []
        self.sources: list[dict[str, Any]] = []
        self.memories: list[dict[str, Any]] = []
        self.message_id: str | None = None
        self.status = "streaming"
        self.lists_sources = MODES.get(model) == "research"  # a report ends with its own list

    def sources_footer(self) -> str:
        """The sources as the end of the reply's text ("" when it lists them itself)."""
        return "" if self.lists_sources else sources_text(self.sources)

    def note(self, event: dict[str, Any]) -> str | None:
        """Take one event of the reply in; the text it adds to the reply, if any."""
        kind = event.get("type")
        if kind == "token":
            self.text.append(event["text"])
            return event["text"] or None
        if kind == "sources":
            self.sources = list(event["sources"])
        elif kind == "memories":
            self.memories = list(event["memories"])
        elif kind == "done":
            self.message_id = event.get("message_id")
            self.status = "complete"
        elif kind == "interrupted":
            self.status = "interrupted"
        elif kind == "error":
            self.status = "error"
        return None

    def extension(self) -> dict[str, Any]:
        return {
            "chat_id": self.chat_id,
            "message_id": self.message_id,
            "status": self.status,
            "sources": self.sources,
            "memories": self.memories,
        }

    def chunk(
        self, delta: dict[str, Any], finish: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        chunk = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            **extra,
        }
        if self.include_usage and "usage" not in chunk:
            chunk["usage"] = None  # as OpenAI: null on every chunk but the last
        return chunk

    def usage_chunk(self, counted: dict[str, int]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": counted,
        }

    def completion(self, counted: dict[str, int]) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "".join(self.text)},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": counted,
            "resolveai": self.extension(),
        }


# --- schema models (the OpenAPI schema; the answers are built as dicts above) -------------------


class ModelCard(BaseModel):
    id: str
    object: str = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard]


class AssistantMessage(BaseModel):
    role: str
    content: str


class Choice(BaseModel):
    index: int
    message: AssistantMessage
    logprobs: None = None
    finish_reason: str


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Extension(BaseModel):
    chat_id: str = Field(description="The chat: send it in `X-ResolveAI-Chat-Id` to continue it.")
    message_id: str | None = Field(description="The reply's id in the chat.")
    status: str = Field(description="complete, interrupted (stopped) or error")
    sources: list[dict[str, Any]] = Field(description="The sources cited: [{n, title, url}].")
    memories: list[dict[str, Any]] = Field(description="The memories the reply used.")


class ChatCompletion(BaseModel):
    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    resolveai: Extension

"""Reading a ChatGPT data export's `conversations.json` into plain chats, for the import
(core/data_transfer.py writes them).

The file is a list of conversations, each with `title`, `create_time` and `update_time` (seconds
since the epoch, possibly fractional or null), `current_node` and a `mapping` of node id to
`{id, parent, children, message}`; a message has `author.role`, `content` (`content_type` and
`parts`), `create_time`, and optionally `recipient` and `metadata`. The nodes form a tree: every
regenerated answer or edited question is a branch. Only the branch the user last saw is kept:
from `current_node` up the parents to the root (its other branches are left out).

Kept: the user's and the assistant's visible text. Left out: system and tool nodes, messages
addressed to a tool (`recipient` other than `all`: code run, browsing), hidden ones
(`metadata.is_visually_hidden_from_conversation`), content that is not text (images, reasoning
summaries, tool output) and messages left empty. A multi-part message's text parts are joined by
a blank line; consecutive messages of one role (an answer written around a tool call) become one.

Ids are derived from the conversation's and node's own ids (uuid5), so importing the same file
twice names the same chats and messages: the import sees them already there and skips them.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

# Fixed: the ids a file's conversations get must not change between releases (re-import).
CHATGPT_NAMESPACE = uuid.UUID("5d3c2a9e-7a61-4f0e-9d38-6b1f4a3e2c10")
TEXT_TYPES = frozenset({"text", "multimodal_text"})
ROLES = frozenset({"user", "assistant"})
DEFAULT_TITLE = "Imported chat"
MAX_TITLE_CHARS = 300
TICK = timedelta(microseconds=1)


class NotChatGPT(ValueError):
    """The file is not shaped like a ChatGPT conversations.json; the text says where."""


@dataclass
class ChatGPTMessage:
    message_id: uuid.UUID
    role: str
    content: str
    sent_at: datetime


@dataclass
class ChatGPTChat:
    chat_id: uuid.UUID
    title: str
    created_at: datetime
    updated_at: datetime
    messages: list[ChatGPTMessage] = field(default_factory=list)


def looks_like_chatgpt(data: Any) -> bool:
    """Whether decoded JSON is a conversations.json (a list of objects with a `mapping`)."""
    return isinstance(data, list) and all(
        isinstance(item, dict) and isinstance(item.get("mapping"), dict) for item in data
    )


def _time(value: Any) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if not isinstance(content, dict) or content.get("content_type") not in TEXT_TYPES:
        return ""
    parts = content.get("parts")
    if not isinstance(parts, list):
        return ""
    texts = []
    for part in parts:
        # multimodal_text mixes strings with image pointers (dicts): only the text is kept.
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            part = part["text"]
        if isinstance(part, str) and part.strip():
            texts.append(part.strip())
    return "\n\n".join(texts)


def _visible(message: Any) -> tuple[str, str] | None:
    """(role, text) of a message the user saw in the conversation, else None."""
    if not isinstance(message, dict):
        return None
    author = message.get("author")
    role = author.get("role") if isinstance(author, dict) else None
    if role not in ROLES:
        return None
    if message.get("recipient") not in (None, "all"):
        return None
    metadata = message.get("metadata")
    if isinstance(metadata, dict) and metadata.get("is_visually_hidden_from_conversation"):
        return None
    text = _text(message)
    return (role, text) if text else None


def _current_branch(mapping: dict[str, Any], current: Any, where: str) -> list[dict[str, Any]]:
    """The nodes from the root down to `current` (or, without one, to the latest leaf)."""
    if not isinstance(current, str) or current not in mapping:
        leaves = [
            key
            for key, node in mapping.items()
            if isinstance(node, dict) and not node.get("children")
        ]
        if not leaves:
            return []

        def made(key: str) -> float:
            message = mapping[key].get("message")
            stamp = _time(message.get("create_time")) if isinstance(message, dict) else None
            return stamp.timestamp() if stamp else 0.0

        current = max(leaves, key=made)
    branch, seen, key = [], set(), current
    while key is not None:
        if not isinstance(key, str) or key in seen:
            raise NotChatGPT(f"{where}: the node {str(key)[:80]!r} is its own ancestor")
        node = mapping.get(key)
        if not isinstance(node, dict):
            raise NotChatGPT(f"{where}: no node {key[:80]!r} in its mapping")
        seen.add(key)
        branch.append(node)
        key = node.get("parent")
    return branch[::-1]


def _source_id(conversation: dict[str, Any]) -> str:
    for name in ("conversation_id", "id"):
        if isinstance(conversation.get(name), str) and conversation[name]:
            return conversation[name]
    # Older exports have no id: what identifies the conversation is its content.
    shape = [
        conversation.get("title"),
        conversation.get("create_time"),
        sorted(conversation["mapping"]),
    ]
    return hashlib.sha256(json.dumps(shape, default=str).encode()).hexdigest()


def _conversation(conversation: dict[str, Any], index: int, now: datetime) -> ChatGPTChat | None:
    where = f"conversation {index + 1}"
    mapping = conversation["mapping"]
    source = _source_id(conversation)
    started = _time(conversation.get("create_time"))
    title = conversation.get("title")
    title = " ".join(title.split())[:MAX_TITLE_CHARS] if isinstance(title, str) else ""
    chat = ChatGPTChat(
        chat_id=uuid.uuid5(CHATGPT_NAMESPACE, source),
        title=title or DEFAULT_TITLE,
        created_at=started or now,
        updated_at=started or now,
    )
    previous: datetime | None = None
    for node in _current_branch(mapping, conversation.get("current_node"), where):
        visible = _visible(node.get("message"))
        if visible is None:
            continue
        role, text = visible
        sent = _time(node["message"].get("create_time")) or previous or started or now
        # Strictly increasing: the store orders a chat's messages by time where it must.
        if previous is not None and sent <= previous:
            sent = previous + TICK
        if chat.messages and chat.messages[-1].role == role:
            chat.messages[-1].content += "\n\n" + text
            continue
        node_id = node.get("id") if isinstance(node.get("id"), str) else str(len(chat.messages))
        chat.messages.append(
            ChatGPTMessage(uuid.uuid5(CHATGPT_NAMESPACE, f"{source}/{node_id}"), role, text, sent)
        )
        previous = sent
    if not chat.messages:
        return None
    chat.created_at = min(chat.created_at, chat.messages[0].sent_at)
    updated = _time(conversation.get("update_time")) or chat.messages[-1].sent_at
    chat.updated_at = max(updated, chat.messages[-1].sent_at, chat.created_at)
    return chat


def chats_from_chatgpt(data: Any) -> tuple[list[ChatGPTChat], int]:
    """The chats of a decoded conversations.json, and how many conversations held nothing to
    keep (no visible message on their current branch). NotChatGPT if it is not one."""
    if not looks_like_chatgpt(data):
        raise NotChatGPT(
            "not a ChatGPT conversations.json: expected a list of conversations, each with a"
            " `mapping` of its messages"
        )
    now = datetime.now(UTC)
    chats, empty = [], 0
    for index, conversation in enumerate(data):
        chat = _conversation(conversation, index, now)
        if chat is None:
            empty += 1
        else:
            chats.append(chat)
    return chats, empty

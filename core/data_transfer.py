"""Export and import of a user's data: one chat as Markdown or JSON, everything as one JSON file,
and that file (or a ChatGPT conversations.json, core/chatgpt_import.py) imported back.

**The export file** (`FORMAT`, `VERSION`): `chats`, each with every message of its tree (not only
the branch shown: `parent_id`, `reply_to`, `versions` and `chosen_at` keep the versions), the
`memories` with their quotes and evidence (`message_id`, `chat_id`) and history, the documents'
metadata (not their bytes; each message names the files it was sent with, `document_ids`) and
the preferences. Vectors are left out: the import embeds again, with whatever model the server
runs.

**The import** is one transaction, under a per-user lock (two imports of one user's queue): a file
is written whole or not at all. It is idempotent: rows keep the ids the file gives them, unless an
id is taken by another user's row; then (and only then) the row gets an id derived from the user
and the original one (uuid5). So importing a file again finds every chat and memory already there
(under either id) and skips it. A chat is skipped or imported whole: messages are not merged into
a chat that exists. Documents are not imported (their bytes are not in the file): a message
keeps the files it was sent with that are the user's on this server, and no other. A memory's
quote must still be found in its source message, as for any memory; one whose source is not in
the file keeps no evidence link. Imported messages are not read for new memories.

Bad files raise `ImportRejected` with the HTTP status to answer (413 too large, 415 not JSON
text, 422 not a file of a known shape, or an inconsistent one), before anything is written.
"""

from __future__ import annotations

import asyncio
import heapq
import io
import json
import re
import uuid
import zipfile
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Literal

import numpy as np
import psycopg
from fastapi.encoders import jsonable_encoder
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from core import chatgpt_import, document_store, memory_store
from core.chat_store import DEFAULT_TITLE, STATUSES
from core.grounding import find_quote
from core.http_guard import readable_size, unstorable_in_json
from core.preferences import DEFAULTS as PREFERENCE_DEFAULTS
from core.preferences import get_preferences, set_preferences

FORMAT = "resolveai-export"
VERSION = 1
# Ids remapped for a user (see the module docstring) are uuid5 in this namespace. Fixed forever:
# a re-import must derive the same ids.
IMPORT_NAMESPACE = uuid.UUID("0b6f1f55-3f0e-4c52-a2c4-2e4d0f6a9b71")
IMPORT_LOCK = 0x5265736F6C766549  # "ResolveI": with the user id, serialises one user's imports
ImportFormat = Literal["auto", "resolveai", "chatgpt"]
# A NUL or a lone surrogate can only come into decoded JSON through an escape (raw NUL bytes are
# refused, UTF-8 cannot hold a surrogate): without one of these, no string needs checking. A
# match (a surrogate pair of an emoji, an escaped backslash before "u0000") only means checking.
ESCAPED_UNSTORABLE = re.compile(r"\\u(?:0000|d[89a-f][0-9a-f]{2})", re.IGNORECASE)

_MESSAGE_EXPORT_COLUMNS = (
    "m.message_id, m.parent_id, m.reply_to, m.role, m.content, m.status, m.sources, m.steps,"
    " m.tool_calls, m.error, m.memory_ids, m.sent_at, m.chosen_at, m.model, m.notes,"
    " m.document_ids"
)


class ImportRejected(ValueError):
    """The file cannot be imported; `status` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# ---------------------------------------------------------------------------------------------
# The file's shape (what the import accepts; the export writes exactly this, plus derived fields
# such as `versions`, which the import ignores)


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore")


class MessageRecord(_Record):
    message_id: uuid.UUID
    parent_id: uuid.UUID | None = None
    reply_to: uuid.UUID | None = None
    role: Literal["user", "assistant"]
    content: str = ""
    status: Literal[STATUSES] = "complete"  # type: ignore[valid-type]
    sources: list[Any] = []
    steps: list[Any] = []
    tool_calls: list[Any] = []
    error: str | None = None
    memory_ids: list[uuid.UUID] = []
    sent_at: AwareDatetime
    chosen_at: AwareDatetime | None = None
    model: str | None = Field(None, max_length=500)  # the deployment that wrote a reply
    notes: list[str] = []  # shown with the reply ("answered with the local model")
    document_ids: list[uuid.UUID] = []  # the files it was sent with (metadata in `documents`)


class ChatRecord(_Record):
    chat_id: uuid.UUID
    title: str = Field(DEFAULT_TITLE, max_length=1000)
    temporary: bool = False
    # A title that came with the file is never replaced by a generated one.
    title_source: Literal["auto", "generated", "user"] = "generated"
    pinned: bool = False
    summary: str | None = None
    summary_upto_message_id: uuid.UUID | None = None
    created_at: AwareDatetime
    updated_at: AwareDatetime
    head_id: uuid.UUID | None = None
    messages: list[MessageRecord] = []


class MemoryRecord(_Record):
    memory_id: uuid.UUID
    content: str = Field(min_length=1, max_length=memory_store.MAX_MEMORY_CHARS)
    quote: str = Field(min_length=1, max_length=2000)
    message_id: uuid.UUID | None = None
    chat_id: uuid.UUID | None = None
    valid_from: AwareDatetime
    valid_to: AwareDatetime | None = None
    superseded_by: uuid.UUID | None = None
    created_at: AwareDatetime
    updated_at: AwareDatetime

    @field_validator("content")
    @classmethod
    def _one_short_fact(cls, content: str) -> str:
        # As the store keeps it: runs of whitespace made one space; blank is no fact.
        return memory_store.normalize_memory(content)

    @field_validator("quote")
    @classmethod
    def _not_blank(cls, quote: str) -> str:
        if not quote.strip():
            raise ValueError("the quote is blank")
        return quote


class ExportFile(_Record):
    format: Literal["resolveai-export"]
    version: Literal[1]
    chats: list[ChatRecord] = []
    memories: list[MemoryRecord] = []
    preferences: dict[str, Any] = {}
    documents: list[Any] = []  # metadata only: exported, never imported


# ---------------------------------------------------------------------------------------------
# Export


async def _chats_with_messages(
    pool: AsyncConnectionPool, user_id: uuid.UUID, chat_id: uuid.UUID | None = None
) -> list[dict[str, Any]]:
    """The user's chats (or the one `chat_id`), oldest first, each with every message of its
    tree (oldest first, each with its `versions`), read in one snapshot."""
    async with (
        pool.connection() as conn,
        conn.transaction(),
        conn.cursor(row_factory=dict_row) as cur,
    ):
        await cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        # The head as the app reads it: head_id, or the latest message if that one is gone.
        await cur.execute(
            "SELECT chat_id, title, title_source, pinned, temporary, summary,"
            " summary_upto_message_id, created_at, updated_at,"
            " COALESCE((SELECT h.message_id FROM messages AS h"
            "   WHERE h.message_id = c.head_id AND h.chat_id = c.chat_id),"
            "  (SELECT l.message_id FROM messages AS l WHERE l.chat_id = c.chat_id"
            "   ORDER BY l.sent_at DESC, l.message_id DESC LIMIT 1)) AS head_id"
            " FROM chats AS c WHERE user_id = %(user)s"
            " AND (%(chat)s::uuid IS NULL OR chat_id = %(chat)s)"
            " ORDER BY created_at, chat_id",
            {"user": user_id, "chat": chat_id},
        )
        chats = await cur.fetchall()
        await cur.execute(
            f"SELECT m.chat_id, {_MESSAGE_EXPORT_COLUMNS},"
            " (SELECT array_agg(v.message_id ORDER BY v.sent_at, v.message_id)"
            "  FROM messages AS v WHERE v.chat_id = m.chat_id AND v.role = m.role"
            "  AND v.parent_id IS NOT DISTINCT FROM m.parent_id) AS versions"
            " FROM messages AS m JOIN chats AS c USING (chat_id) WHERE c.user_id = %(user)s"
            " AND (%(chat)s::uuid IS NULL OR c.chat_id = %(chat)s)"
            " ORDER BY m.sent_at, m.message_id",
            {"user": user_id, "chat": chat_id},
        )
        messages = await cur.fetchall()
    by_chat: dict[uuid.UUID, list[dict[str, Any]]] = {chat["chat_id"]: [] for chat in chats}
    for message in messages:
        by_chat[message.pop("chat_id")].append(message)
    return [{**chat, "messages": by_chat[chat["chat_id"]]} for chat in chats]


def _file(**parts: Any) -> dict[str, Any]:
    return {"format": FORMAT, "version": VERSION, "exported_at": datetime.now(UTC), **parts}


async def export_everything(pool: AsyncConnectionPool, user_id: uuid.UUID) -> dict[str, Any]:
    """Everything of the user's as one JSON-ready document (see the module docstring)."""
    raw = _file(
        chats=await _chats_with_messages(pool, user_id),
        memories=await memory_store.export_memories(pool, user_id),
        documents=await document_store.list_documents(pool, user_id),
        preferences=await get_preferences(pool, user_id),
    )
    return await asyncio.to_thread(jsonable_encoder, raw)  # CPU-bound on a large export


async def export_chat(
    pool: AsyncConnectionPool, user_id: uuid.UUID, chat_id: uuid.UUID
) -> dict[str, Any] | None:
    """One chat as an export file of its own (importable like the full one); None if the user
    has no such chat."""
    chats = await _chats_with_messages(pool, user_id, chat_id)
    return await asyncio.to_thread(jsonable_encoder, _file(chats=chats)) if chats else None


def _branch(chat: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages of the branch shown: from the head up to the root, oldest first."""
    by_id = {message["message_id"]: message for message in chat["messages"]}
    branch, key = [], chat["head_id"]
    while key in by_id and len(branch) <= len(by_id):
        branch.append(by_id[key])
        key = by_id[key]["parent_id"]
    return branch[::-1]


def _when(value: str | None) -> str:
    if not value:
        return ""
    try:
        return datetime.fromisoformat(value).astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    except ValueError:
        return value


def _source_line(source: Any) -> str:
    if not isinstance(source, dict):
        return f"- {source}"
    title = " ".join(str(source.get("title") or source.get("url") or "source").split())
    title = title.replace("[", "\\[").replace("]", "\\]")
    url = str(source.get("url") or "")
    # Document citations link into the app (#/documents/…): meaningless outside it.
    label = f"[{title}]({url.replace(')', '%29')})" if re.match(r"https?://", url) else title
    n = source.get("n")
    return f"- [{n}] {label}" if type(n) is int else f"- {label}"  # what the text's [n] cite


# A research report ends with its own list of the sources it cites (rag/research.py).
_LISTS_ITS_SOURCES = re.compile(r"^## Sources$", re.M)


def _message_lines(message: dict[str, Any]) -> list[str]:
    """A message's text, its status when it did not end well, and its sources as a list."""
    content = message["content"].rstrip()
    lines = [content or "*(no text)*", ""]
    if message["status"] not in ("complete", "streaming"):
        error = message.get("error")
        lines += [f"*({message['status']}{': ' + error if error else ''})*", ""]
    if message["sources"] and not _LISTS_ITS_SOURCES.search(content):
        lines += ["**Sources**", ""]
        lines += [_source_line(source) for source in message["sources"]]
        lines += [""]
    return lines


def reply_markdown(message: dict[str, Any]) -> str:
    """One message (a reply, a research report) as a Markdown file of its own."""
    return "\n".join(_message_lines(message)).rstrip() + "\n"


def chat_markdown(export: dict[str, Any]) -> str:
    """The branch shown of a chat export (`export_chat`) as Markdown: the title, when it was
    started and last used, then each message under its role and time, a reply's sources as a
    list."""
    chat = export["chats"][0]
    lines = [
        f"# {chat['title']}",
        "",
        f"Started {_when(chat['created_at'])} · last message {_when(chat['updated_at'])}"
        f" · exported from ResolveAI {_when(export['exported_at'])}",
        "",
    ]
    for message in _branch(chat):
        role = "You" if message["role"] == "user" else "Assistant"
        lines += ["---", "", f"### {role} · {_when(message['sent_at'])}", ""]
        lines += _message_lines(message)
    return "\n".join(lines).rstrip() + "\n"


def slug(title: str) -> str:
    """A file name's part from a title: letters, digits and dashes (ASCII), at most 60."""
    text = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
    return text[:60].rstrip("-") or "chat"


# ---------------------------------------------------------------------------------------------
# Reading a file to import


def _read_zip(data: bytes, limit: int) -> bytes:
    """conversations.json out of a ChatGPT export's .zip, read to at most `limit` bytes."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == "conversations.json"]
            if not names:
                raise ImportRejected(
                    422, "This .zip has no conversations.json: is it a ChatGPT data export?"
                )
            info = archive.getinfo(min(names, key=len))
            if info.file_size > limit:
                raise ImportRejected(
                    413,
                    f"conversations.json is larger than {readable_size(limit)} once"
                    " unpacked (IMPORT_MAX_BYTES).",
                )
            with archive.open(info) as member:
                content = member.read(limit + 1)  # the size in the header may lie
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, OSError) as error:
        raise ImportRejected(422, f"This .zip cannot be read ({error}).") from None
    if len(content) > limit:
        raise ImportRejected(413, f"conversations.json is larger than {readable_size(limit)}.")
    return content


def _decode(data: bytes, limit: int) -> Any:
    if data.startswith(b"PK\x03\x04"):
        data = _read_zip(data, limit)
    if not data.strip():
        raise ImportRejected(422, "The file is empty.")
    if b"\x00" in data:
        raise ImportRejected(
            415,
            "The file holds NUL bytes: it is not a JSON text file (a ResolveAI export or a"
            " ChatGPT conversations.json).",
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        if error.reason == "unexpected end of data":  # cut in the middle of a character
            raise ImportRejected(
                422, "The file ends in the middle of a character: was it cut short?"
            ) from None
        raise ImportRejected(415, "The file is not UTF-8 text, so it is not JSON.") from None
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError as error:
        # A file cut short fails at its end, or in the string it stops in the middle of.
        cut = error.pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string")
        hint = " It ends too early: was it cut short?" if cut else ""
        raise ImportRejected(
            422,
            f"The file is not valid JSON ({error.msg} at line {error.lineno}, column"
            f" {error.colno}).{hint}",
        ) from None
    except RecursionError:
        raise ImportRejected(422, "The file's JSON is nested too deeply.") from None
    # Walking a large file costs seconds: only when its text has an escape that could be one.
    where = unstorable_in_json(decoded) if ESCAPED_UNSTORABLE.search(text) else None
    if where is not None:
        raise ImportRejected(
            422,
            f"The file's {where} holds a NUL character or a lone surrogate, which cannot"
            " be stored.",
        )
    return decoded


def _short(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:3]:
        where = ".".join(str(p) for p in item["loc"])
        parts.append(f"{where}: {str(item['msg']).removeprefix('Value error, ')}")
    more = error.error_count() - len(parts)
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _from_chatgpt(chats: list[chatgpt_import.ChatGPTChat]) -> ExportFile:
    records, seen = [], set()
    for chat in chats:
        if chat.chat_id in seen:  # the same conversation twice in one file
            continue
        seen.add(chat.chat_id)
        messages, previous = [], None
        for message in chat.messages:
            messages.append(
                MessageRecord(
                    message_id=message.message_id,
                    role=message.role,
                    content=message.content,
                    sent_at=message.sent_at,
                    parent_id=previous.message_id if previous else None,
                    reply_to=previous.message_id
                    if previous and previous.role == "user" and message.role == "assistant"
                    else None,
                )
            )
            previous = message
        records.append(
            ChatRecord(
                chat_id=chat.chat_id,
                title=chat.title,
                created_at=chat.created_at,
                updated_at=chat.updated_at,
                head_id=messages[-1].message_id,
                messages=messages,
            )
        )
    return ExportFile(format=FORMAT, version=VERSION, chats=records)


def _check_trees(bundle: ExportFile) -> None:
    """Every chat's messages form a tree of its own, and every message id is unique."""
    seen: set[uuid.UUID] = set()
    for n, chat in enumerate(bundle.chats, 1):
        where = f"chats.{n - 1} ({chat.title[:40]!r})"
        by_id = {}
        for message in chat.messages:
            if message.message_id in seen:
                raise ImportRejected(
                    422, f"{where}: the message id {message.message_id} is there twice."
                )
            seen.add(message.message_id)
            by_id[message.message_id] = message
        for message in chat.messages:
            for name in ("parent_id", "reply_to"):
                other = getattr(message, name)
                if other is not None and other not in by_id:
                    raise ImportRejected(
                        422,
                        f"{where}: message {message.message_id}'s {name} {other} is not a"
                        " message of this chat.",
                    )
            if message.reply_to is not None and by_id[message.reply_to].role != "user":
                raise ImportRejected(
                    422,
                    f"{where}: message {message.message_id} replies to"
                    " a message that is not the user's.",
                )
        _ordered(chat.messages, where)  # raises on a cycle
        if chat.head_id is not None and chat.head_id not in by_id:
            raise ImportRejected(
                422, f"{where}: its head_id {chat.head_id} is not one of its messages."
            )


def _ordered(messages: list[MessageRecord], where: str) -> list[MessageRecord]:
    """Parents (and the questions replied to) before the messages after them, as the foreign
    keys insist, else in the file's order; ImportRejected on a loop."""
    index = {m.message_id: i for i, m in enumerate(messages)}
    waiting = {m.message_id: {m.parent_id, m.reply_to} - {None} for m in messages}
    after: dict[uuid.UUID, list[int]] = {}
    for m in messages:
        for before in waiting[m.message_id]:
            after.setdefault(before, []).append(index[m.message_id])  # type: ignore[arg-type]
    ready = [i for i, m in enumerate(messages) if not waiting[m.message_id]]
    heapq.heapify(ready)
    ordered = []
    while ready:
        message = messages[heapq.heappop(ready)]
        ordered.append(message)
        for i in after.get(message.message_id, ()):
            pending = waiting[messages[i].message_id]
            pending.discard(message.message_id)
            if not pending:
                heapq.heappush(ready, i)
    if len(ordered) < len(messages):
        raise ImportRejected(422, f"{where}: its messages' parents form a loop.")
    return ordered


def parse_import(data: bytes, limit: int, format: ImportFormat = "auto") -> tuple[ExportFile, str]:
    """The file as records to import and its format ('resolveai' or 'chatgpt'); ImportRejected
    if it is not one of them. CPU-bound on a large file: run it in a thread."""
    if len(data) > limit:
        raise ImportRejected(
            413,
            f"The file is larger than {readable_size(limit)}, the largest"
            " import accepted (IMPORT_MAX_BYTES).",
        )
    decoded = _decode(data, limit)
    if format == "auto":
        if isinstance(decoded, dict) and decoded.get("format") == FORMAT:
            format = "resolveai"
        elif chatgpt_import.looks_like_chatgpt(decoded):
            format = "chatgpt"
        else:
            raise ImportRejected(
                422,
                "This JSON is not a file ResolveAI imports: expected a ResolveAI export"
                f' ({{"format": "{FORMAT}", …}}) or a ChatGPT conversations.json (a list of'
                " conversations with a `mapping`).",
            )
    if format == "chatgpt":
        try:
            chats, _ = chatgpt_import.chats_from_chatgpt(decoded)
        except chatgpt_import.NotChatGPT as error:
            raise ImportRejected(422, f"This file is {error}.") from None
        bundle = _from_chatgpt(chats)
    else:
        if (
            isinstance(decoded, dict)
            and decoded.get("format") == FORMAT
            and decoded.get("version") not in (None, VERSION)
        ):
            raise ImportRejected(
                422,
                f"This export is version {decoded.get('version')!r}; this"
                f" server reads version {VERSION}.",
            )
        try:
            bundle = ExportFile.model_validate(decoded)
        except ValidationError as error:
            raise ImportRejected(422, f"Not a valid ResolveAI export: {_short(error)}") from None
    _check_trees(bundle)
    return bundle, format


# ---------------------------------------------------------------------------------------------
# Writing an import


def _mapped(user_id: uuid.UUID, original: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(IMPORT_NAMESPACE, f"{user_id}/{original}")


async def _owners(cur: Any, table: str, key: str, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """For the ids given that exist in `table`, whose row it is (messages: their chat's owner)."""
    if table == "messages":
        query = (
            "SELECT m.message_id AS id, c.user_id FROM messages AS m JOIN chats AS c"
            " USING (chat_id) WHERE m.message_id = ANY(%s)"
        )
    else:  # table and key come from this module, never from the file
        query = f"SELECT {key} AS id, user_id FROM {table} WHERE {key} = ANY(%s)"
    await cur.execute(query, (list(ids),))
    return {row["id"]: row["user_id"] for row in await cur.fetchall()}


def _place(
    owners: dict[uuid.UUID, Any], user_id: uuid.UUID, original: uuid.UUID, taken: bool = False
) -> tuple[uuid.UUID, bool]:
    """The id a record of the file gets for this user, and whether it is still to be written: the
    user's own row under the file's id or the derived one is the record already there; else the
    file's id if no one has it (and no part of the record is `taken`), else the derived one."""
    mapped = _mapped(user_id, original)
    if owners.get(original) == user_id:
        return original, False
    if owners.get(mapped) == user_id:
        return mapped, False
    return (original if original not in owners and not taken else mapped), True


async def _place_chats(
    cur: Any, user_id: uuid.UUID, chats: list[ChatRecord]
) -> tuple[dict[uuid.UUID, uuid.UUID], list[ChatRecord]]:
    """Each chat's id for this user (kept, or derived if another user's row has it) and the
    chats still to write (the others are already there)."""
    ids = [c.chat_id for c in chats] + [_mapped(user_id, c.chat_id) for c in chats]
    chat_owners = await _owners(cur, "chats", "chat_id", ids)
    message_ids = [m.message_id for c in chats for m in c.messages]
    taken_messages = await _owners(cur, "messages", "message_id", message_ids)
    placed, new = {}, []
    for chat in chats:
        taken = any(m.message_id in taken_messages for m in chat.messages)
        placed[chat.chat_id], to_write = _place(chat_owners, user_id, chat.chat_id, taken)
        if to_write:
            new.append(chat)
    return placed, new


async def _place_memories(
    cur: Any, user_id: uuid.UUID, memories: list[MemoryRecord]
) -> tuple[dict[uuid.UUID, uuid.UUID], list[MemoryRecord]]:
    ids = [m.memory_id for m in memories] + [_mapped(user_id, m.memory_id) for m in memories]
    owners = await _owners(cur, "memories", "memory_id", ids)
    placed, new = {}, []
    for memory in memories:
        placed[memory.memory_id], to_write = _place(owners, user_id, memory.memory_id)
        if to_write:
            new.append(memory)
    return placed, new


def _grounded(bundle: ExportFile) -> list[MemoryRecord]:
    """The file's memories, each linked to its source only if that is a user message of the
    file (and its chat the message's own), and only those whose quote is in that message."""
    users = {
        m.message_id: (c.chat_id, m) for c in bundle.chats for m in c.messages if m.role == "user"
    }
    kept = []
    for memory in bundle.memories:
        if memory.message_id not in users:
            kept.append(memory.model_copy(update={"message_id": None, "chat_id": None}))
            continue
        chat_id, source = users[memory.message_id]
        if find_quote(memory.quote, source.content) is not None:
            kept.append(memory.model_copy(update={"chat_id": chat_id}))
    return kept


async def import_bundle(
    pool: AsyncConnectionPool,
    embedder: memory_store.Embedder,
    user_id: uuid.UUID,
    bundle: ExportFile,
) -> dict[str, Any]:
    """Write what the file holds that the user has not yet, in one transaction: how many chats,
    messages and memories were imported and skipped, and the new chats' ids."""
    memories = _grounded(bundle)
    ungrounded = len(bundle.memories) - len(memories)
    # Embedding is the slow part: done before the transaction, for the memories not there yet
    # (looked up again inside it; one that arrived meanwhile is just not written).
    async with (
        pool.connection() as conn,
        conn.transaction(),
        conn.cursor(row_factory=dict_row) as cur,
    ):
        _, to_embed = await _place_memories(cur, user_id, memories)
    vectors: dict[uuid.UUID, np.ndarray] = {}
    for start in range(0, len(to_embed), memory_store.REEMBED_BATCH_SIZE):
        batch = to_embed[start : start + memory_store.REEMBED_BATCH_SIZE]
        texts = [memory_store.normalize_memory(m.content) for m in batch]
        for memory, vector in zip(batch, await embedder.embed_documents(texts), strict=True):
            vectors[memory.memory_id] = memory_store.check_embedding(vector)

    try:
        return await _write(pool, embedder, user_id, bundle, memories, vectors, ungrounded)
    except (psycopg.errors.UniqueViolation, psycopg.errors.ForeignKeyViolation) as error:
        # Ids made to collide with rows of the user's own that are not what the file says.
        raise ImportRejected(
            409,
            "The file's ids clash with data already here, so nothing was imported"
            f" ({error.diag.constraint_name or 'a constraint'}).",
        ) from None


async def _write(
    pool: AsyncConnectionPool,
    embedder: memory_store.Embedder,
    user_id: uuid.UUID,
    bundle: ExportFile,
    memories: list[MemoryRecord],
    vectors: dict[uuid.UUID, np.ndarray],
    ungrounded: int,
) -> dict[str, Any]:
    async with (
        pool.connection() as conn,
        conn.transaction(),
        conn.cursor(row_factory=dict_row) as cur,
    ):
        await cur.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (IMPORT_LOCK >> 32, str(user_id))
        )
        chat_ids, new_chats = await _place_chats(cur, user_id, bundle.chats)
        memory_ids, new_memories = await _place_memories(cur, user_id, memories)
        message_ids: dict[uuid.UUID, uuid.UUID] = {}
        for chat in bundle.chats:
            remapped = chat_ids[chat.chat_id] != chat.chat_id
            for message in chat.messages:
                message_ids[message.message_id] = (
                    _mapped(user_id, message.message_id) if remapped else message.message_id
                )
        for memory in new_memories:
            if memory.memory_id not in vectors:
                text = memory_store.normalize_memory(memory.content)
                vectors[memory.memory_id] = memory_store.check_embedding(
                    (await embedder.embed_documents([text]))[0]
                )
        written = await _write_chats(cur, user_id, new_chats, chat_ids, message_ids, memory_ids)
        await _write_memories(
            cur,
            user_id,
            embedder.model_name,
            new_memories,
            vectors,
            chat_ids,
            message_ids,
            memory_ids,
        )
        # Only what differs from the user's own: importing one's own export writes nothing.
        current = await get_preferences(conn, user_id)
        preferences = {
            name: value
            for name, value in bundle.preferences.items()
            if name in PREFERENCE_DEFAULTS
            and value != current[name]
            and (
                PREFERENCE_DEFAULTS[name] is None
                or isinstance(value, type(PREFERENCE_DEFAULTS[name]))
            )
        }
        if preferences:
            await set_preferences(conn, user_id, **preferences)
    return {
        "chats": {"imported": len(new_chats), "skipped": len(bundle.chats) - len(new_chats)},
        "messages": written,
        "memories": {
            "imported": len(new_memories),
            "skipped": len(bundle.memories) - len(new_memories),
        },
        "memories_not_grounded": ungrounded,
        "documents_not_imported": len(bundle.documents),
        "chat_ids": [str(chat_ids[chat.chat_id]) for chat in new_chats],
    }


async def _write_chats(
    cur: Any,
    user_id: uuid.UUID,
    chats: list[ChatRecord],
    chat_ids: dict[uuid.UUID, uuid.UUID],
    message_ids: dict[uuid.UUID, uuid.UUID],
    memory_ids: dict[uuid.UUID, uuid.UUID],
) -> int:
    if not chats:
        return 0

    def mid(value: uuid.UUID | None) -> uuid.UUID | None:
        return message_ids[value] if value is not None else None

    await cur.executemany(
        "INSERT INTO chats (chat_id, user_id, title, title_source, pinned, temporary, summary,"
        " summary_upto_message_id, created_at, updated_at, head_id)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [
            (
                chat_ids[c.chat_id],
                user_id,
                " ".join(c.title.split()) or DEFAULT_TITLE,
                c.title_source,
                c.pinned,
                c.temporary,
                c.summary,
                message_ids.get(c.summary_upto_message_id) if c.summary_upto_message_id else None,
                c.created_at,
                c.updated_at,
                mid(
                    c.head_id
                    or (max(c.messages, key=lambda m: m.sent_at).message_id if c.messages else None)
                ),
            )
            for c in chats
        ],
    )
    # The files messages were sent with, when they are the user's: back on the server they
    # came from (documents are not imported), never another user's.
    named = list({i for c in chats for m in c.messages for i in m.document_ids})
    theirs: set[uuid.UUID] = set()
    if named:
        await cur.execute(
            "SELECT document_id FROM documents WHERE user_id = %s AND document_id = ANY(%s)",
            (user_id, named),
        )
        theirs = {row["document_id"] for row in await cur.fetchall()}
    rows = []
    for chat in chats:
        for m in _ordered(chat.messages, chat.title):
            rows.append(
                (
                    message_ids[m.message_id],
                    chat_ids[chat.chat_id],
                    m.role,
                    m.content,
                    # Nothing is writing an imported reply any more.
                    "interrupted" if m.status == "streaming" else m.status,
                    Jsonb(m.sources),
                    Jsonb(m.steps),
                    Jsonb(m.tool_calls),
                    m.error,
                    # Only memories of this file: another user's ids would show their text.
                    [memory_ids[i] for i in m.memory_ids if i in memory_ids],
                    mid(m.reply_to),
                    mid(m.parent_id),
                    m.sent_at,
                    m.chosen_at,
                    m.model,
                    Jsonb(m.notes),
                    [i for i in m.document_ids if i in theirs],
                )
            )
    await cur.executemany(
        "INSERT INTO messages (message_id, chat_id, role, content, status, sources, steps,"
        " tool_calls, error, memory_ids, reply_to, parent_id, sent_at, chosen_at, model, notes,"
        " document_ids) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
        " %s)",
        rows,
    )
    return len(rows)


async def _write_memories(
    cur: Any,
    user_id: uuid.UUID,
    embed_model: str,
    memories: list[MemoryRecord],
    vectors: dict[uuid.UUID, np.ndarray],
    chat_ids: dict[uuid.UUID, uuid.UUID],
    message_ids: dict[uuid.UUID, uuid.UUID],
    memory_ids: dict[uuid.UUID, uuid.UUID],
) -> None:
    if not memories:
        return
    rows = []
    for m in memories:
        # `_grounded` left a source only where it is a user message of the file.
        rows.append(
            (
                memory_ids[m.memory_id],
                user_id,
                memory_store.normalize_memory(m.content),
                m.quote,
                vectors[m.memory_id],
                embed_model,
                chat_ids[m.chat_id] if m.chat_id else None,
                message_ids[m.message_id] if m.message_id else None,
                m.valid_from,
                m.valid_to,
                m.created_at,
                m.updated_at,
            )
        )
    await cur.executemany(
        "INSERT INTO memories (memory_id, user_id, content, quote, embedding, embed_model,"
        " source_chat_id, source_message_id, valid_from, valid_to, created_at, updated_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        rows,
    )
    # After all are in: superseded_by may name any of them (or one already there).
    links = [
        (memory_ids[m.superseded_by], memory_ids[m.memory_id])
        for m in memories
        if m.superseded_by in memory_ids
    ]
    if links:
        await cur.executemany(
            "UPDATE memories SET superseded_by = %s WHERE memory_id = %s AND user_id = %s",
            [(*link, user_id) for link in links],
        )

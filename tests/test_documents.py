"""Documents through the real HTTP API and the real converter, chunker, embedder and Postgres:
upload, background processing, the answer citing a page, duplicates, rename, download, delete,
cancel, another user's documents, and each bad input a user may upload."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import uuid
import zipfile
from collections.abc import AsyncIterator
from io import BytesIO
from pathlib import Path
from typing import Any

import httpx
import pytest

from chat import document_recall
from chat.tools import available_tool_names
from core import document_store
from core.accounts import LOCAL_USER_ID
from core.chat_store import create_chat
from core.db import load_migrations, migrate
from core.services import Services
from evals.pdf_pages import pdf_with_pages, wrap
from rag import document_search
from tests.chat_client import password_services, read_events, send, serve
from tests.conftest import extractions_done, forget_memories
from tests.scripted_model import ScriptedProvider
from tests.test_accounts import new_user, sign_in
from tests.test_db import open_pool
from tests.test_grounded_memory import ops

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "docs" / "pdf-samples"
READY_WITHIN = 120  # seconds: converting and embedding a small file on a busy 2-core machine


async def upload(
    client: httpx.AsyncClient, name: str, data: bytes, chat_id: str | None = None
) -> httpx.Response:
    form = {"chat_id": chat_id} if chat_id else None
    return await client.post("/api/documents", files={"file": (name, data)}, data=form)


async def processed(client: httpx.AsyncClient, document_id: str) -> dict[str, Any]:
    """The document once it is no longer processing."""
    for _ in range(READY_WITHIN * 5):
        document = (await client.get(f"/api/documents/{document_id}")).json()
        if document["status"] != "processing":
            return document
        await asyncio.sleep(0.2)
    raise AssertionError(f"still processing after {READY_WITHIN} s: {document}")


def unique_pdf(tag: str) -> bytes:
    """Four pages; only page 3 says when the parade starts."""
    pages = [
        wrap(f"The {tag} festival guide, page {n}. " + "The town square hosts stalls. " * 30)
        for n in (1, 2)
    ]
    pages.append(wrap(f"The {tag} lantern parade starts at 9 pm from the harbour and ends at the "
                      "old lighthouse. Children lead it with paper lanterns."))  # fmt: skip
    pages.append(wrap(f"Page 4 of the {tag} guide lists the bakeries. " * 10))
    return pdf_with_pages(pages)


async def test_a_pdf_answers_from_its_page_3_with_a_citation(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services
) -> None:
    tag = uuid.uuid4().hex[:8]
    response = await upload(client, f"{tag}-guide.pdf", unique_pdf(tag))
    assert response.status_code == 201, response.text
    document = response.json()
    assert document["status"] == "processing" and document["filename"] == f"{tag}-guide.pdf"
    document = await processed(client, document["document_id"])
    assert document["status"] == "ready", document
    assert document["pages"] == 4 and document["chunks"] >= 4 and document["kind"] == "pdf"

    # Small models cite in their own styles, and sometimes a source that isn't there.
    model.push({"text": "It starts at 9 pm from the harbour 【1†page 3】 [9]."})
    events = await send(client, f"When does the {tag} lantern parade start?")
    streamed = "".join(e["text"] for e in events if e["type"] == "token")
    assert streamed == "It starts at 9 pm from the harbour [1] ."
    sources = next(e["sources"] for e in events if e["type"] == "sources")
    found = "1 passage" if len(sources) == 1 else f"{len(sources)} passages"
    steps = [e["text"] for e in events if e["type"] == "step"]
    assert f"Found {found} in 1 of your documents" in steps, steps
    assert sources[0]["kind"] == "document" and sources[0]["page"] == 3, sources
    assert sources[0]["title"] == f"{tag}-guide.pdf, page 3"
    assert "9 pm" in sources[0]["text"]
    prompt = model.calls[0]["messages"][-1]["content"]
    assert "<documents>" in prompt and "9 pm from the harbour" in prompt
    # The viewer reads page 3's text and finds the cited passage among it.
    page = (await client.get(f"/api/documents/{document['document_id']}/chunks?page=3")).json()
    assert sources[0]["chunk_id"] in [chunk["chunk_id"] for chunk in page]
    chat_id = next(e["chat_id"] for e in events if e["type"] == "chat")
    saved = (await client.get(f"/api/chats/{chat_id}/messages")).json()[-1]
    assert saved["sources"][0]["page"] == 3 and saved["content"] == streamed

    # The local model's way: the passage's own sentences, with no [n]. Each is cited as it
    # streams with the passage that states it, and saved as streamed.
    model.push({"text": "The parade starts at 9 pm from the harbour. Children lead it."})
    events = await send(client, f"When does the {tag} lantern parade start?")
    streamed = "".join(e["text"] for e in events if e["type"] == "token")
    assert streamed == "The parade starts at 9 pm from the harbour [1]. Children lead it [1]."
    assert next(e["sources"] for e in events if e["type"] == "sources")[0]["page"] == 3
    chat_id = next(e["chat_id"] for e in events if e["type"] == "chat")
    assert (await client.get(f"/api/chats/{chat_id}/messages")).json()[-1]["content"] == streamed

    # A question about something else brings no passage.
    model.push({"text": "Paris."})
    unrelated = await send(client, "What is the capital of France?")
    assert not [e for e in unrelated if e["type"] == "sources"]
    assert "<documents>" not in model.calls[-1]["messages"][-1]["content"]

    # Deleting the document deletes its chunks; the reply keeps the passage it cited.
    assert (await client.delete(f"/api/documents/{document['document_id']}")).status_code == 204
    assert (await client.get(f"/api/documents/{document['document_id']}")).status_code == 404
    async with chat_services.database.pool.connection() as conn:
        left = await conn.execute(
            "SELECT count(*) FROM document_chunks WHERE document_id = %s",
            (document["document_id"],),
        )
        assert (await left.fetchone())[0] == 0
    saved = (await client.get(f"/api/chats/{chat_id}/messages")).json()[-1]
    assert "9 pm" in saved["sources"][0]["text"]


async def test_a_file_sent_with_a_message_is_read_for_it(
    client: httpx.AsyncClient, model: ScriptedProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyless trial: a PDF attached to a new chat, then "Summarize this." The message shares no
    word with the file, so no passage passed the search's floor and the local model wrote
    "[Insert PDF Title]" placeholders. A file sent with a message is read for it: the whole of
    it if it fits, else its start."""
    tag = uuid.uuid4().hex[:8]
    sent = await upload(client, f"{tag}-guide.pdf", unique_pdf(tag))  # the draft's: no chat yet
    document = await processed(client, sent.json()["document_id"])
    assert document["status"] == "ready" and document["chat_id"] is None
    ids = [document["document_id"]]

    model.push({"text": "A festival guide: stalls, a lantern parade at 9 pm, bakeries [1]."})
    events = await send(client, "Summarize this.", document_ids=ids)
    steps = [e["text"] for e in events if e["type"] == "step"]
    assert f"Reading {tag}-guide.pdf (4 pages)" in steps, steps
    prompt = model.calls[-1]["messages"][-1]["content"]
    documents = prompt.split("<documents>", 1)[1]
    for said in ("festival guide, page 1", "lantern parade starts at 9 pm", "lists the bakeries"):
        assert said in documents, said
    sources = next(e["sources"] for e in events if e["type"] == "sources")
    assert [s["page"] for s in sources] == sorted(s["page"] for s in sources)
    assert {s["page"] for s in sources} == {1, 2, 3, 4}
    assert all(s["document_id"] == ids[0] for s in sources)

    # The message keeps what was sent with it; the file is now the chat's.
    chat_id = next(e["chat_id"] for e in events if e["type"] == "chat")
    question = (await client.get(f"/api/chats/{chat_id}/messages")).json()[0]
    assert question["documents"] == [{"document_id": ids[0], "filename": f"{tag}-guide.pdf"}]
    assert (await client.get(f"/api/documents/{ids[0]}")).json()["chat_id"] == chat_id

    # Answered again, the file is read again.
    model.push({"text": "A guide to a festival."})
    url = f"/api/chats/{chat_id}/messages/{question['message_id']}/regenerate"
    async with client.stream("POST", url) as response:
        assert response.status_code == 200
        again = [e async for e in read_events(response)]
    assert f"Reading {tag}-guide.pdf (4 pages)" in [e.get("text") for e in again]
    assert "lists the bakeries" in model.calls[-1]["messages"][-1]["content"]
    # Edited, the question keeps its file.
    model.push({"text": "A guide."})
    url = f"/api/chats/{chat_id}/messages/{question['message_id']}"
    async with client.stream("PATCH", url, json={"content": "Summarize this briefly."}) as edited:
        assert edited.status_code == 200
        again = [e async for e in read_events(edited)]
    assert f"Reading {tag}-guide.pdf (4 pages)" in [e.get("text") for e in again]

    # A file longer than what is read for a message: its start, and a note saying so.
    monkeypatch.setattr(document_recall, "SENT_CHARS", 1200)
    model.push({"text": "It opens with the town square."})
    events = await send(client, "And this?", chat_id, document_ids=ids)
    steps = [e["text"] for e in events if e["type"] == "step"]
    start = re.compile(rf"Reading the start of {tag}-guide\.pdf \((page 1|pages 1-[23]) of 4\)")
    assert any(start.fullmatch(step) for step in steps), steps
    assert f"Only the start of {tag}-guide.pdf was read" in " ".join(
        next(e for e in events if e["type"] == "done")["notes"]
    )
    documents = model.calls[-1]["messages"][-1]["content"].split("<documents>", 1)[1]
    assert "festival guide, page 1" in documents and "lists the bakeries" not in documents

    # A file that could not be read is named in a note; an unknown one is a 404, and nothing
    # is saved.
    failed = await upload(client, f"{tag}-scan.pdf", pdf_with_pages([[], []]))
    failed_id = (await processed(client, failed.json()["document_id"]))["document_id"]
    model.push({"text": "There is nothing to read."})
    events = await send(client, "What does it say?", chat_id, document_ids=[failed_id])
    done = next(e for e in events if e["type"] == "done")
    assert any(note.startswith(f"{tag}-scan.pdf could not be read") for note in done["notes"])
    before = len((await client.get(f"/api/chats/{chat_id}/messages")).json())
    unknown = str(uuid.uuid4())
    for url in ("/api/messages", f"/api/chats/{chat_id}/messages"):
        response = await client.post(url, json={"content": "Hi", "document_ids": [unknown]})
        assert response.status_code == 404 and unknown in response.json()["error"]
    assert len((await client.get(f"/api/chats/{chat_id}/messages")).json()) == before
    for document_id in (ids[0], failed_id):
        await client.delete(f"/api/documents/{document_id}")


async def test_with_a_sent_file_the_users_memories_go_with_the_instructions(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services
) -> None:
    """A keyless trial: a user who had just said "I'm Dana. I live in Lisbon and I'm allergic to
    peanuts." sent a PDF with "Summarize this.", and the local model summed up that line, given
    right before the message, with a [1]. Replayed on the local model, 2 of 12 replies were about
    it that way, 0 of 12 with it in the system message (the stop note has the runs)."""
    await forget_memories(chat_services)
    model.push({"text": "Noted."})
    lives = {"op": "add", "fact": "The user lives in Lisbon.", "sentences": [1]}
    model.push_for("memory", ops(lives))
    await send(client, "I live in Lisbon.")
    await extractions_done(chat_services)
    tag = uuid.uuid4().hex[:8]
    sent = await upload(client, f"{tag}-guide.pdf", unique_pdf(tag))
    document = await processed(client, sent.json()["document_id"])
    model.push({"text": "A festival guide."})
    await send(client, "Summarize this.", document_ids=[document["document_id"]])
    system, question = model.calls[-1]["messages"][0], model.calls[-1]["messages"][-1]
    assert "The user lives in Lisbon." in system["content"]
    assert "Lisbon" not in question["content"] and "lantern parade" in question["content"]
    await client.delete(f"/api/documents/{document['document_id']}")
    await forget_memories(chat_services)


async def test_the_same_file_twice_is_one_document_and_the_original_comes_back(
    client: httpx.AsyncClient,
) -> None:
    data = f"# Notes {uuid.uuid4().hex}\n\nThe spare key is under the blue flowerpot.\n".encode()
    first = await upload(client, "notes.md", data)
    again = await upload(client, "copy of notes.md", data)
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["document_id"] == first.json()["document_id"]
    document_id = first.json()["document_id"]
    document = await processed(client, document_id)
    assert document["status"] == "ready" and document["pages"] is None, document
    listed = [d["document_id"] for d in (await client.get("/api/documents")).json()]
    assert listed.count(document_id) == 1
    original = await client.get(f"/api/documents/{document_id}/file")
    assert original.content == data
    assert original.headers["content-disposition"].startswith("attachment;")
    assert original.headers["content-type"] == "application/octet-stream"
    renamed = await client.patch(f"/api/documents/{document_id}", json={"filename": "keys.md"})
    assert renamed.status_code == 200 and renamed.json()["filename"] == "keys.md"
    assert (await client.post(f"/api/documents/{document_id}/cancel")).status_code == 409
    reindexed = await client.post(f"/api/documents/{document_id}/reindex")
    assert reindexed.json()["status"] == "processing"
    assert (await processed(client, document_id))["status"] == "ready"
    await client.delete(f"/api/documents/{document_id}")


async def test_bad_files_get_a_clear_answer_and_leave_nothing_half_made(
    client: httpx.AsyncClient, chat_services: Services
) -> None:
    unknown = await upload(client, "tool.exe", b"MZ\x90\x00")
    assert unknown.status_code == 415 and "tool.exe" in unknown.json()["error"]
    empty = await upload(client, "empty.txt", b"")
    assert empty.status_code == 422 and "empty" in empty.json()["error"]
    missing = await client.post("/api/documents", data={"chat_id": str(uuid.uuid4())})
    assert missing.status_code == 422

    bomb = BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"\0" * (300 * 1024 * 1024))
    cases = {
        "encrypted.pdf": (
            SAMPLES / "005-libreoffice-writer-password" / "libreoffice-writer-password.pdf"
        ).read_bytes(),
        "damaged.pdf": unique_pdf("damaged")[:400],
        "photo.pdf": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8,
        "bomb.docx": bomb.getvalue(),
        "scanned.pdf": pdf_with_pages([[], []]),
    }
    results = {}
    for name, data in cases.items():
        response = await upload(client, name, data)
        assert response.status_code == 201, (name, response.text)
        results[name] = await processed(client, response.json()["document_id"])
    for name, document in results.items():
        assert document["status"] == "failed" and document["error"], (name, document)
        assert document["chunks"] == 0
        async with chat_services.database.pool.connection() as conn:
            rows = await conn.execute(
                "SELECT count(*) FROM document_chunks WHERE document_id = %s",
                (document["document_id"],),
            )
            assert (await rows.fetchone())[0] == 0, name
    assert "OCR" in results["scanned.pdf"]["error"]
    assert "password" in results["encrypted.pdf"]["error"].lower()
    for document in results.values():
        await client.delete(f"/api/documents/{document['document_id']}")
    # The server is still fine.
    assert (await client.get("/api/health")).json()["ok"] is True


async def test_over_the_size_cap_is_refused_before_it_is_read(chat_services: Services) -> None:
    small = dataclasses.replace(
        chat_services,
        settings=chat_services.settings.model_copy(update={"document_max_bytes": 2048}),
    )
    async with serve(small) as url, httpx.AsyncClient(base_url=url, timeout=30) as client:
        response = await upload(client, "big.txt", b"word " * 2000)
        assert response.status_code == 413 and "DOCUMENT_MAX_BYTES" in response.json()["error"]


async def test_a_cancelled_document_stores_nothing(
    client: httpx.AsyncClient, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    row, _ = await document_store.add_document(
        pool, LOCAL_USER_ID, "later.txt", "text/plain", f"cancel me {uuid.uuid4()}".encode()
    )
    cancelled = await client.post(f"/api/documents/{row['document_id']}/cancel")
    if cancelled.status_code == 409:  # the worker was quicker
        assert (await processed(client, str(row["document_id"])))["status"] == "ready"
    else:
        assert cancelled.json()["status"] == "cancelled"
        stored = await document_store.store_chunks(pool, row["document_id"], [], "m", "text", None)
        assert stored is False
        assert (await client.get(f"/api/documents/{row['document_id']}")).json()["chunks"] == 0
    await client.delete(f"/api/documents/{row['document_id']}")


@pytest.fixture(scope="module")
async def accounts_url(chat_services: Services) -> AsyncIterator[str]:
    services = password_services(
        chat_services, rate_limit_messages_per_minute=0, rate_limit_concurrent_replies=0
    )
    async with serve(services) as url:
        yield url


async def test_another_users_documents_are_not_there(
    accounts_url: str, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    alice = await sign_in(accounts_url, await new_user(pool, "alice"))
    bob = await sign_in(accounts_url, await new_user(pool, "bob"))
    try:
        secret = f"# Diary {uuid.uuid4()}\n\nMy bank PIN hint is the cat's birthday.\n".encode()
        document_id = (await upload(alice, "diary.md", secret)).json()["document_id"]
        assert (await processed(alice, document_id))["status"] == "ready"
        assert document_id not in [
            d["document_id"] for d in (await bob.get("/api/documents")).json()
        ]
        for method, path in (("GET", ""), ("GET", "/file"), ("GET", "/chunks"), ("DELETE", ""),
                             ("POST", "/reindex"), ("POST", "/cancel")):  # fmt: skip
            response = await bob.request(method, f"/api/documents/{document_id}{path}")
            assert response.status_code == 404, (method, path)
        # The same bytes are Bob's own document, not a way to Alice's.
        bobs = await upload(bob, "diary.md", secret)
        assert bobs.status_code == 201 and bobs.json()["document_id"] != document_id
    finally:
        await alice.aclose()
        await bob.aclose()


async def test_a_model_with_tools_searches_the_documents_for_something_else(
    client: httpx.AsyncClient, model: ScriptedProvider, chat_services: Services
) -> None:
    tag = uuid.uuid4().hex[:8]
    notes = (f"# Boat {tag}\n\nThe {tag} sailboat's engine takes 2-stroke oil mixed 50 to 1. "
             "Its sails are stored in the blue locker by the pier.\n").encode()  # fmt: skip
    document_id = (await upload(client, f"{tag}-boat.md", notes)).json()["document_id"]
    assert (await processed(client, document_id))["status"] == "ready"
    try:
        model.push(
            {"tool_calls": [{"name": "search_documents", "arguments": {"query": f"{tag} sails"}}]},
            {"text": "In the blue locker by the pier [1]."},
        )
        events = await send(client, "Where did I say I keep them?")
        offered = [t["function"]["name"] for t in model.calls[0]["tools"] or []]
        assert "search_documents" in offered
        found = [e for e in events if e["type"] == "sources"][-1]["sources"]
        assert found[0]["document_id"] == document_id and "blue locker" in found[0]["text"]
        tool_result = model.calls[1]["messages"][-1]["content"]
        assert '"n": 1' in tool_result and "blue locker" in tool_result
        chat_id = next(e["chat_id"] for e in events if e["type"] == "chat")
        saved = (await client.get(f"/api/chats/{chat_id}/messages")).json()[-1]
        assert saved["sources"][0]["chunk_id"] == found[0]["chunk_id"]
    finally:
        await client.delete(f"/api/documents/{document_id}")
    # Offered only to a user who has documents.
    assert "search_documents" not in available_tool_names(chat_services, documents=False)
    assert "search_documents" in available_tool_names(chat_services, documents=True)


async def test_a_word_in_most_chunks_scores_but_is_not_looked_for(
    memory_pool, embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rag/document_search.py: the words half looks only for words in at most
    COMMON_WORD_CHUNKS chunks (Postgres's statistics), so a word in most of a big library does not
    make every chunk a candidate to rank; the rarer words are looked for, and the common one still
    counts in their score."""
    async with memory_pool.connection() as conn:
        cur = await conn.execute(
            "INSERT INTO users (username) VALUES ('librarian') RETURNING user_id"
        )
        (user,) = await cur.fetchone()
    texts = [f"Zebra note {n}: the herd crossed the river at dawn." for n in range(25)]
    texts += [f"Giraffe note {n}: tall necks reach the acacia leaves." for n in range(5)]
    await add_chunks(memory_pool, embedder, user, texts)
    # What autovacuum does: it analyzes each partition of the chunks, never the partitioned table.
    await analyze_partitions(memory_pool)

    async def words(common: list[str]) -> tuple[str, str | None]:
        async with memory_pool.connection() as conn:
            cur = await conn.execute(
                f"WITH {document_search.QUERY_WORDS_SQL}"
                " SELECT any_word::text, rare_word::text FROM query",
                {"text": "zebra giraffe", "common": common},
            )
            return await cur.fetchone()

    async def common_words() -> list[str]:
        async with memory_pool.connection() as conn:
            return await document_search.common_words(memory_pool, conn)

    # 25 of 30 chunks hold "zebra", 5 "giraffe": under 2000 chunks, every word is sought...
    assert await common_words() == []
    assert await words([]) == ("'giraff' | 'zebra'", "'giraff' | 'zebra'")
    # ... over a limit of 10, "zebra" only scores.
    monkeypatch.setattr(document_search, "COMMON_WORD_CHUNKS", 10)
    common = await common_words()
    assert "zebra" in common and "note" in common and "giraff" not in common
    assert await words(common) == ("'giraff' | 'zebra'", "'giraff'")
    found = await document_search.search_documents(
        memory_pool, embedder, "zebra giraffe", user_id=user, limit=30
    )
    assert {c.content for c in found} >= set(texts[25:])  # the giraffe chunks, found by words too


# A page of a PDF from a keyless trial (pypdf's sample "google-doc-document.pdf", shortened).
ZEN_PAGE = """[Page: zen.pdf, page 1 | Section: Example document]
If the implementation is easy to explain, it may be a good idea.
Namespaces are one honking great idea -- let's do more of those!
There should be one-- and preferably only one --obvious way to do it.
Indonesia Germany Austria France
Capital Jakarta Berlin Vienna Paris"""


async def test_a_passage_sharing_a_word_but_not_the_meaning_is_left_out(
    memory_pool, embedder
) -> None:
    """Seen in a keyless trial: asked for "three ideas for a weekend trip from Lisbon", the reply
    was given this page (it shares "idea"; 0.16 in meaning) and quoted the Zen of Python as trip
    advice, with citations. Unrelated questions got passages of the SQuAD pages 36% of the time
    (WORDS_FLOOR's comment). A question about the page still finds it, and so does the weak match
    when the file was attached in this very chat."""
    async with memory_pool.connection() as conn:
        cur = await conn.execute("INSERT INTO users (username) VALUES ('zen') RETURNING user_id")
        (user,) = await cur.fetchone()
    chat = await create_chat(memory_pool, user_id=user)
    await add_chunks(memory_pool, embedder, user, [ZEN_PAGE])

    async def search(question: str, chat_id: uuid.UUID | None = None) -> int:
        found = await document_search.search_documents(
            memory_pool, embedder, question, user_id=user, chat_id=chat_id, limit=5
        )
        return len(found)

    trip = "Give me three ideas for a weekend trip from Lisbon, one line each."
    assert await search(trip) == 0
    assert await search("What is the capital of Austria?") == 1
    await add_chunks(memory_pool, embedder, user, [ZEN_PAGE], chat_id=chat["chat_id"])
    assert await search(trip, chat["chat_id"]) == 1  # the copy attached here


async def analyze_partitions(pool) -> None:
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT inhrelid::regclass::text FROM pg_inherits"
            " WHERE inhparent = 'document_chunks'::regclass"
        )
        partitions = [row[0] for row in await cur.fetchall()]
        assert len(partitions) == document_search.USER_PARTITIONS
        for partition in partitions:
            await conn.execute(f"ANALYZE {partition}")


async def add_chunks(pool, embedder, user, texts: list[str], chat_id=None) -> uuid.UUID:
    """A new text document of the user's (attached to `chat_id`, if given), ready, with one chunk
    per text; its id."""
    document, _ = await document_store.add_document(
        pool, user, f"{uuid.uuid4().hex}.txt", "text/plain", uuid.uuid4().bytes, chat_id
    )
    vectors = await embedder.embed_documents(texts)
    chunks = [
        document_store.StoredChunk(None, "", text, vector)
        for text, vector in zip(texts, vectors, strict=True)
    ]
    assert await document_store.store_chunks(
        pool, document["document_id"], chunks, embedder.model_name, "text", None
    )
    return document["document_id"]


async def test_a_search_reads_only_the_partition_holding_the_users_chunks(
    memory_pool, embedder
) -> None:
    """The chunks are partitioned by user (migration 0014), each partition with its own HNSW and
    GIN indexes: a user's search walks a graph of their own chunks (and the few users sharing
    the partition), not one where most neighbours are someone else's to skip."""
    users = []
    async with memory_pool.connection() as conn:
        for n in range(2):
            cur = await conn.execute(
                "INSERT INTO users (username) VALUES (%s) RETURNING user_id", (f"reader{n}",)
            )
            users.append((await cur.fetchone())[0])
    await add_chunks(memory_pool, embedder, users[0], ["Herons nest in tall reeds by the lake."])
    await add_chunks(memory_pool, embedder, users[1], ["Herons hunt fish in shallow water."])

    vector = await embedder.embed_query("Where do herons nest?")
    async with memory_pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            "EXPLAIN (FORMAT JSON) " + document_search.SEARCH_SQL,
            document_search.search_parameters(
                user_id=users[0], chat_id=None, vector=vector, text="Where do herons nest?",
                model=embedder.model_name, common=[], limit=5,
            ),
        )  # fmt: skip
        plan = (await cur.fetchone())[0]
    scanned = set(relations_in(plan))
    partitions = {name for name in scanned if name.startswith("document_chunks_p")}
    assert len(partitions) == 1, scanned  # every read of the chunks pruned to one partition
    found = await document_search.search_documents(
        memory_pool, embedder, "Where do herons nest?", user_id=users[0]
    )
    assert [c.content for c in found] == ["Herons nest in tall reeds by the lake."]


def relations_in(plan: Any) -> list[str]:
    """Every table a JSON plan reads (its nodes' "Relation Name"s)."""
    if isinstance(plan, list):
        return [name for item in plan for name in relations_in(item)]
    if not isinstance(plan, dict):
        return []
    names = [plan["Relation Name"]] if "Relation Name" in plan else []
    for value in plan.values():
        if isinstance(value, list | dict):
            names += relations_in(value)
    return names


async def test_chunks_stored_before_partitioning_are_kept_and_found(
    fresh_database: str, embedder
) -> None:
    """Migration 0014 moves the chunks of an existing library into the partitioned table."""
    await migrate(fresh_database, load_migrations()[:13])
    pool = await open_pool(fresh_database)
    try:
        document = await add_chunks(
            pool, embedder, LOCAL_USER_ID, ["Otters hold hands while they sleep."]
        )
        assert await migrate(fresh_database, load_migrations()[:14]) == [
            "0014_document_chunks_by_user"
        ]
        chunks = await document_store.document_chunks(pool, document, LOCAL_USER_ID)
        assert [c["content"] for c in chunks] == ["Otters hold hands while they sleep."]
        found = await document_search.search_documents(
            pool, embedder, "How do otters sleep?", user_id=LOCAL_USER_ID
        )
        assert [c.document_id for c in found] == [document]
    finally:
        await pool.close()


async def test_the_files_sent_with_a_message_are_exported_and_imported_with_it(
    client: httpx.AsyncClient, model: ScriptedProvider
) -> None:
    """The export names the files each message was sent with (their metadata is in the file's
    `documents`); an import links again those that are the user's, and drops any other id."""
    tag = uuid.uuid4().hex[:8]
    text = f"# {tag}\n\nThe key is under the mat.\n"
    sent = await upload(client, f"{tag}-notes.md", text.encode())
    document = await processed(client, sent.json()["document_id"])
    model.push({"text": "Under the mat."})
    events = await send(client, "Where is the key?", document_ids=[document["document_id"]])
    chat_id = next(e["chat_id"] for e in events if e["type"] == "chat")
    exported = (await client.get(f"/api/chats/{chat_id}/export?format=json")).json()
    question = exported["chats"][0]["messages"][0]
    assert question["document_ids"] == [document["document_id"]]
    assert exported["chats"][0]["messages"][1]["document_ids"] == []

    assert (await client.delete(f"/api/chats/{chat_id}")).status_code == 204
    stranger = str(uuid.uuid4())  # no document of this user's (another user's, or none)
    question["document_ids"].append(stranger)
    files = {"file": ("chat.json", json.dumps(exported).encode(), "application/json")}
    response = await client.post("/api/import", files=files)
    assert response.status_code == 200, response.text
    shown = (await client.get(f"/api/chats/{chat_id}/messages")).json()[0]
    assert shown["documents"] == [
        {"document_id": document["document_id"], "filename": f"{tag}-notes.md"}
    ]
    again = (await client.get(f"/api/chats/{chat_id}/export?format=json")).json()
    assert again["chats"][0]["messages"][0]["document_ids"] == [document["document_id"]]
    await client.delete(f"/api/chats/{chat_id}")
    await client.delete(f"/api/documents/{document['document_id']}")

"""Documents in a real browser: a file attached from the composer (button, drop, paste) shows as a
chip with its live status, then on the Documents page (rename, download, re-index, delete); a
reply citing a passage of a document shows it in the `[n]` popover and opens the viewer on it
(on a phone, the popover first), and after the document is deleted the viewer shows the passage
the reply kept; a file that cannot be read shows why, on its chip and on the Documents page; a
long document shows its progress and can be cancelled; signed in, an upload carries the CSRF
token.

Same harness as test_ui.py: Debian's Chromium, the real server, database, embedder, converter
and document worker, the scripted model. The page may log the failed requests these tests
provoke on purpose (a 404 after a delete, a 415); anything else in the console fails the test.
"""

from __future__ import annotations

import asyncio
import base64
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from core.services import Services
from evals.pdf_pages import pdf_with_pages, wrap
from rag.document_search import FoundChunk
from tests.scripted_model import ScriptedProvider
from tests.test_ui import (  # noqa: F401 (browser, ui, ui_url: fixtures)
    PHONE,
    UI,
    browser,
    check_clean,
    new_ui,
    ui,
    ui_url,
)
from tests.test_ui_accounts import accounts_url, new_user, sign_in  # noqa: F401 (a fixture)
from tests.ui_fixtures import seed_chat

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "docs" / "pdf-samples"
ENCRYPTED_PDF = SAMPLES / "005-libreoffice-writer-password" / "libreoffice-writer-password.pdf"
READY_MS = 120_000  # converting and embedding a small file on a busy 2-core machine


@pytest.fixture(autouse=True)
async def no_documents_left(ui_url: str) -> AsyncIterator[None]:  # noqa: F811
    """Every test here leaves no document behind, passed or failed: a ready document would make
    every later message in the session search it (test_ui.py's steps and prompts)."""
    yield
    await delete_all_documents(ui_url)


def check_clean_but(page_ui: UI, *statuses: int) -> None:
    """check_clean, once the console lines of the failed requests a test expects are dropped."""
    if statuses:
        expected = re.compile(rf"status of ({'|'.join(map(str, statuses))})\b")
        page_ui.errors[:] = [
            e for e in page_ui.errors if not (e.startswith("console:") and expected.search(e))
        ]
    check_clean(page_ui)


async def api_client(url: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, timeout=30)


async def processed(client: httpx.AsyncClient, document_id: str) -> dict[str, Any]:
    """The document once the server no longer processes it."""
    for _ in range(READY_MS // 200):
        document = (await client.get(f"/api/documents/{document_id}")).json()
        if document["status"] != "processing":
            return document
        await asyncio.sleep(0.2)
    raise AssertionError(f"still processing after {READY_MS / 1000} s: {document}")


async def delete_all_documents(url: str) -> None:
    async with await api_client(url) as client:
        for document in (await client.get("/api/documents")).json():
            await client.delete(f"/api/documents/{document['document_id']}")


async def open_documents_page(page: Page) -> None:
    await page.get_by_role("link", name="Documents", exact=True).click()
    await expect(page).to_have_url(re.compile(r"#/documents$"))
    await expect(page.locator("#chat-title")).to_have_text("Documents")
    await expect(page.locator("#document-list")).to_have_attribute("aria-busy", "false")


def document_item(page: Page, filename: str):
    return page.locator(
        ".document-item", has=page.locator(".document-name", has_text=re.compile(f"^{filename}$"))
    )


# Every status a document of the list shows, however briefly (a re-index of a small file).
WATCH_STATUSES = """() => {
  window.seenStatuses = new Set();
  const list = document.getElementById("document-list");
  new MutationObserver(() => {
    for (const item of list.querySelectorAll(".document-item")) {
      window.seenStatuses.add(item.dataset.status);
    }
  }).observe(list, { subtree: true, childList: true, attributes: true });
}"""


def chip(page: Page, filename: str):
    return page.locator(".attachment", has=page.get_by_text(filename, exact=True))


FILE_FROM_JS = """([name, type, b64]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const transfer = new DataTransfer();
  transfer.items.add(new File([bytes], name, { type }));
  return transfer;
}"""


async def files_handle(page: Page, name: str, media_type: str, data: bytes) -> Any:
    """A DataTransfer in the page holding one file, for a drop or a paste."""
    return await page.evaluate_handle(
        FILE_FROM_JS, [name, media_type, base64.b64encode(data).decode()]
    )


# --- (a) attach from the composer, then the Documents page ------------------------------------


async def test_a_file_attached_in_the_composer_is_read_then_renamed_and_deleted(
    ui: UI,  # noqa: F811
    model: ScriptedProvider,
    chat_services: Services,
) -> None:
    page = ui.page
    await delete_all_documents(ui.url)
    tag = uuid.uuid4().hex[:8]
    name = f"{tag}-notes.md"
    data = (
        f"# Notes {tag}\n\n## Keys\n\nThe spare key of the {tag} flat is under the blue"
        " flowerpot by the door.\n\n## Bins\n\nThe recycling goes out on Tuesday evenings.\n"
    ).encode()
    chat_id = await seed_chat(
        chat_services.database.pool, f"{tag} house notes", [("Hello", {"content": "Hi!"})]
    )

    # The Documents page before anything is there says how to add one.
    await ui.open()
    await open_documents_page(page)
    await expect(page.locator(".documents-empty")).to_contain_text("No documents yet")
    await expect(page.locator("#documents-count")).to_be_empty()

    # The paperclip next to "Use web tool" opens the file picker; the file is uploaded with the
    # chat's id and its chip follows it until it is ready.
    await ui.open(f"#/chat/{chat_id}")
    attach = page.get_by_role("button", name="Attach a document")
    web_toggle = page.locator("#web-toggle")
    next_to_web = "(b, web) => b.nextElementSibling.nextElementSibling === web"
    assert await attach.evaluate(next_to_web, await web_toggle.element_handle())
    async with page.expect_file_chooser() as chosen:
        await attach.click()
    chooser = await chosen.value
    assert chooser.is_multiple()
    await chooser.set_files({"name": name, "mimeType": "text/markdown", "buffer": data})
    attached = chip(page, name)
    await expect(attached).to_be_visible()
    status = attached.locator(".attachment-status")
    await expect(status).to_have_text(re.compile(r"^Ready · \d+ passages?$"), timeout=READY_MS)
    await expect(attached).to_have_attribute("data-status", "ready")
    document_id = await attached.get_attribute("data-document-id")
    async with await api_client(ui.url) as client:
        document = (await client.get(f"/api/documents/{document_id}")).json()
    assert document["filename"] == name and document["status"] == "ready"
    assert document["chat_id"] == str(chat_id), "the upload was not attached to the chat"
    await expect(status).to_have_text(f"Ready · {passages(document['chunks'])}")
    await ui.shot("desktop-light-attached-document")

    # The same bytes dropped onto the chat: the server already has them, and the chip says so.
    await attached.get_by_role("button", name=f"Hide {name}").click()
    await expect(page.locator(".attachment")).to_have_count(0)
    await expect(page.locator("#attachments")).to_be_hidden()
    transfer = await files_handle(page, f"copy of {name}", "text/markdown", data)
    conversation = page.locator("#conversation")
    await conversation.dispatch_event("dragenter", {"dataTransfer": transfer})
    await expect(page.locator("#drop-overlay")).to_be_visible()
    await expect(page.locator("#drop-overlay")).to_contain_text("attach them to this chat")
    await conversation.dispatch_event("drop", {"dataTransfer": transfer})
    await expect(page.locator("#drop-overlay")).to_be_hidden()
    again = chip(page, name)  # the document keeps its name
    await expect(again.locator(".attachment-status")).to_have_text(
        re.compile(r"^Ready · \d+ passages? · already in your documents$")
    )
    # Sending a message takes the chips that are done with it (they went with it). The reply
    # cites the note as the server found it (a Markdown file has no pages): its [1] opens the
    # viewer on the whole document, the passage marked.
    model.push({"text": "Under the blue flowerpot [1]."})
    await ui.send(f"Where is the spare key of the {tag} flat?")
    reply = ui.assistant()
    await expect(reply).to_have_attribute("data-status", "complete", timeout=20_000)
    await expect(page.locator(".attachment")).to_have_count(0)
    # The file went with the message: shown on it, and read whole for the reply.
    sent = page.locator(".msg-user").last.locator(".msg-files a.msg-file")
    await expect(sent).to_have_text(name)
    assert await sent.get_attribute("href") == f"#/documents/{document_id}"
    assert "recycling goes out on Tuesday" in model.calls[-1]["messages"][-1]["content"]
    await ui.shot("desktop-light-sent-document")
    async with await api_client(ui.url) as client:
        saved = (await client.get(f"/api/chats/{chat_id}/messages")).json()
    assert f"Reading {name}" in [step["text"] for step in saved[-1]["steps"]]
    assert saved[-2]["documents"] == [{"document_id": document_id, "filename": name}]
    await expect(reply.locator(".sources-list a.source-document")).to_have_text(name)
    await reply.locator(".markdown a.cite").click()
    viewer = re.compile(rf"#/documents/{document_id}\?chunk=[0-9a-f-]{{36}}$")
    await expect(page).to_have_url(viewer)
    await expect(page.locator("#viewer-meta")).to_have_text("The whole document")
    await expect(page.locator(".viewer-chunk.cited")).to_contain_text("blue flowerpot")
    await page.go_back()
    await expect(reply).to_be_visible()

    # The Documents page lists it, with its size, passages and status.
    await open_documents_page(page)
    await expect(page.locator("#documents-count")).to_have_text("1 document")
    item = document_item(page, name)
    await expect(item).to_have_count(1)
    await expect(item.locator(".document-meta")).to_contain_text(f"{len(data)} B")
    await expect(item.locator(".document-meta")).to_contain_text(passages(document["chunks"]))
    await expect(item.locator(".document-status")).to_have_text("Ready")
    await expect(item.get_by_role("button", name=re.compile("^Cancel"))).to_have_count(0)
    await ui.shot("desktop-light-documents")

    # Download gives back the original bytes, under its name.
    async with page.expect_download() as downloading:
        await item.get_by_role("link", name=f"Download {name}").click()
    download = await downloading.value
    assert download.suggested_filename == name
    assert await asyncio.to_thread(Path(await download.path()).read_bytes) == data

    # Re-index reads it again: the list shows it processing (however briefly), then ready.
    await page.evaluate(WATCH_STATUSES)
    async with await api_client(ui.url) as client:
        before = (await client.get(f"/api/documents/{document_id}")).json()["updated_at"]
        await item.get_by_role("button", name=f"Re-index {name}").click()
        for _ in range(READY_MS // 200):
            again = (await client.get(f"/api/documents/{document_id}")).json()
            if again["updated_at"] != before and again["status"] == "ready":
                break
            await asyncio.sleep(0.2)
    await expect(item.locator(".document-status")).to_have_text("Ready")
    await expect(item.locator(".document-meta")).to_contain_text(passages(again["chunks"]))
    assert "processing" in await page.evaluate("[...window.seenStatuses]")

    # Rename inline: Enter saves, on the server too.
    await item.get_by_role("button", name=f"Rename {name}").click()
    box = page.get_by_role("textbox", name="New file name")
    await expect(box).to_be_focused()
    await expect(box).to_have_value(name)
    await box.fill(f"{tag} keys.md")
    await box.press("Enter")
    renamed = document_item(page, f"{tag} keys.md")
    await expect(renamed).to_have_count(1)
    await expect(document_item(page, name)).to_have_count(0)
    async with await api_client(ui.url) as client:
        assert (await client.get(f"/api/documents/{document_id}")).json()["filename"] == (
            f"{tag} keys.md"
        )

    # Delete asks first; Cancel keeps it, Delete removes it for good.
    await renamed.get_by_role("button", name=f"Delete {tag} keys.md").click()
    dialog = page.locator("#confirm-dialog")
    await expect(dialog).to_be_visible()
    await expect(dialog).to_contain_text(f"“{tag} keys.md” and its passages will be deleted")
    await dialog.get_by_role("button", name="Cancel").click()
    await expect(renamed).to_have_count(1)
    await renamed.get_by_role("button", name=f"Delete {tag} keys.md").click()
    await dialog.get_by_role("button", name="Delete").click()
    await expect(renamed).to_have_count(0)
    await expect(page.locator(".documents-empty")).to_be_visible()
    async with await api_client(ui.url) as client:
        assert (await client.get(f"/api/documents/{document_id}")).status_code == 404


# --- (b) a reply citing a document's passage -------------------------------------------------


async def cited_document(url: str, tag: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A real PDF whose page 2 tells when the parade starts, uploaded and read; returns the
    document and the source a reply citing page 2 has (chat/document_recall.py's shape)."""
    pages = [
        wrap(f"The {tag} festival guide, page 1. The town square hosts stalls. " * 6),
        wrap(
            f"The {tag} lantern parade starts at 9 pm from the harbour and ends at the old"
            " lighthouse. Children lead it with paper lanterns."
        ),
        wrap(f"Page 3 of the {tag} guide lists the bakeries. " * 6),
    ]
    async with await api_client(url) as client:
        response = await client.post(
            "/api/documents", files={"file": (f"{tag}-guide.pdf", pdf_with_pages(pages))}
        )
        assert response.status_code == 201, response.text
        document = await processed(client, response.json()["document_id"])
        assert document["status"] == "ready", document
        chunks = await client.get(f"/api/documents/{document['document_id']}/chunks?page=2")
        chunk = next(c for c in chunks.json() if "9 pm" in c["content"])
    found = FoundChunk(
        chunk_id=uuid.UUID(chunk["chunk_id"]),
        document_id=uuid.UUID(document["document_id"]),
        filename=document["filename"],
        page=chunk["page"],
        heading=chunk["heading"],
        content=chunk["content"],
        similarity=0.8,
        score=0.8,
    )
    return document, found.source(1)


async def test_a_document_citation_previews_and_opens_the_passage_in_the_viewer(
    browser: Browser,  # noqa: F811
    ui_url: str,  # noqa: F811
    chat_services: Services,
) -> None:
    tag = uuid.uuid4().hex[:8]
    document, source = await cited_document(ui_url, tag)
    assert source["page"] == 2 and source["url"].startswith("#/documents/")
    chat_id = await seed_chat(
        chat_services.database.pool,
        f"{tag} parade",
        [
            (
                f"When does the {tag} lantern parade start?",
                {"content": "It starts at 9 pm from the harbour [1].", "sources": [source]},
            )
        ],
    )
    viewer_url = re.compile(re.escape(source["url"]) + "$")

    desktop, context = await new_ui(browser, ui_url)
    try:
        await desktop.open(f"#/chat/{chat_id}")
        page = desktop.page
        reply = desktop.assistant()
        cite = reply.locator(".markdown a.cite")
        await expect(cite).to_have_count(1)
        await expect(cite).to_have_attribute("href", source["url"])
        assert await cite.get_attribute("target") is None, "a document opens here, not in a tab"

        # Hover: the file and page, and the start of the passage.
        popover = page.locator("#cite-popover")
        await cite.hover()
        await expect(popover).to_be_visible()
        await expect(popover.locator(".cite-popover-title")).to_have_text(
            f"{tag}-guide.pdf, page 2"
        )
        await expect(popover.locator(".cite-popover-text")).to_contain_text(
            f"The {tag} lantern parade starts at 9 pm"
        )
        await expect(popover).not_to_contain_text("[Page:")
        await desktop.shot("desktop-light-document-citation")

        # The Sources list names it, linked to the same place.
        source_link = reply.locator(".sources-list a.source-link")
        await expect(source_link).to_have_text(f"{tag}-guide.pdf, page 2")
        await expect(source_link).to_have_attribute("href", source["url"])

        # A click opens the viewer: page 2's text, the cited passage marked and in view.
        await cite.click()
        await expect(page).to_have_url(viewer_url)
        await expect(popover).to_be_hidden()
        await expect(page.locator("#chat-title")).to_have_text(f"{tag}-guide.pdf")
        await expect(page.locator("#viewer-meta")).to_have_text("Page 2 of 3")
        cited = page.locator(".viewer-chunk.cited")
        await expect(cited).to_have_count(1)
        await expect(cited).to_have_attribute("data-chunk-id", source["chunk_id"])
        await expect(cited).to_contain_text(f"The {tag} lantern parade starts at 9 pm")
        await expect(cited).to_contain_text("Cited passage")
        await expect(cited).to_be_in_viewport()
        await expect(page.locator("#viewer-text")).not_to_contain_text("[Page:")
        await expect(page.locator("#viewer-text")).not_to_contain_text("bakeries")  # page 3
        download = page.get_by_role("link", name=re.compile("^Download the original"))
        await expect(download).to_have_attribute(
            "href", f"/api/documents/{document['document_id']}/file"
        )
        await expect(page.locator("#conversation")).to_be_hidden()
        await desktop.shot("desktop-light-document-viewer")

        # The next page is a link away; Back returns to the chat, the reply where it was.
        await page.get_by_role("link", name="Next page").click()
        await expect(page.locator("#viewer-meta")).to_have_text("Page 3 of 3")
        await expect(page.locator("#viewer-text")).to_contain_text("bakeries")
        await expect(page.locator(".viewer-chunk.cited")).to_have_count(0)
        await page.go_back()
        await expect(page.locator(".viewer-chunk.cited")).to_have_count(1)
        await page.get_by_role("button", name="Back").click()
        await expect(page).to_have_url(re.compile(f"#/chat/{chat_id}$"))
        await expect(reply).to_be_visible()
        await expect(page.locator("#chat-title")).to_have_text(f"{tag} parade")

        # The Sources list's link opens it too.
        await source_link.click()
        await expect(page).to_have_url(viewer_url)
        await expect(page.locator(".viewer-chunk.cited")).to_contain_text("9 pm")
        await page.go_back()
        await expect(reply).to_be_visible()
    finally:
        await context.close()
    check_clean(desktop)

    # On a phone the first tap shows the preview (no hover there); its button opens the viewer.
    phone, context = await new_ui(browser, ui_url, PHONE)
    try:
        await phone.open(f"#/chat/{chat_id}")
        page = phone.page
        cite = phone.assistant().locator(".markdown a.cite")
        await cite.tap()
        popover = page.locator("#cite-popover")
        await expect(popover).to_be_visible()
        await expect(popover).to_contain_text(f"The {tag} lantern parade starts at 9 pm")
        await expect(page).to_have_url(re.compile(f"#/chat/{chat_id}$"))
        await phone.shot("phone-light-document-citation")
        await popover.get_by_role("link", name="Open the passage").tap()
        await expect(page).to_have_url(viewer_url)
        await expect(page.locator(".viewer-chunk.cited")).to_be_in_viewport()
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], "the viewer scrolls sideways on a phone"
        await phone.shot("phone-light-document-viewer")
        # A second tap on the same [n] opens it as well.
        await page.go_back()
        await cite.tap()
        await expect(popover).to_be_visible()
        await cite.tap()
        await expect(page).to_have_url(viewer_url)
    finally:
        await context.close()
    check_clean(phone)

    # Once the document is deleted, the viewer shows the passage the reply kept.
    async with await api_client(ui_url) as client:
        deleted = await client.delete(f"/api/documents/{document['document_id']}")
        assert deleted.status_code == 204
    after, context = await new_ui(browser, ui_url)
    try:
        await after.open(f"#/chat/{chat_id}")
        page = after.page
        await after.assistant().locator(".markdown a.cite").click()
        await expect(page).to_have_url(viewer_url)
        await expect(page.locator("#viewer-note")).to_have_text(
            "This document was deleted; the passage is kept with the reply."
        )
        kept = page.locator(".viewer-chunk.cited")
        await expect(kept).to_contain_text(f"The {tag} lantern parade starts at 9 pm")
        await expect(page.locator("#viewer-download")).to_be_hidden()
        await expect(page.locator("#chat-title")).to_have_text(f"{tag}-guide.pdf, page 2")
    finally:
        await context.close()
    check_clean_but(after, 404)


# --- (c) a file that cannot be read ------------------------------------------------------------


async def test_a_file_that_cannot_be_read_shows_why_on_its_chip_and_the_documents_page(
    browser: Browser,  # noqa: F811
    ui_url: str,  # noqa: F811
) -> None:
    page_ui, context = await new_ui(browser, ui_url)
    try:
        await check_unreadable_files(page_ui)
    finally:
        await context.close()
    check_clean_but(page_ui, 415)  # the .exe's refusal


async def check_unreadable_files(page_ui: UI) -> None:
    page = page_ui.page
    tag = uuid.uuid4().hex[:8]
    await page_ui.open()
    box = page.locator("#composer-input")

    # A scanned PDF (pages without text), pasted into the message box.
    scanned = f"{tag}-scanned.pdf"
    transfer = await files_handle(page, scanned, "application/pdf", pdf_with_pages([[]]))
    await box.evaluate(
        "(box, files) => box.dispatchEvent(new ClipboardEvent('paste',"
        " { clipboardData: files, bubbles: true, cancelable: true }))",
        transfer,
    )
    await expect(box).to_have_value("")  # a file, not text
    scanned_chip = chip(page, scanned)
    await expect(scanned_chip).to_have_class(re.compile(r"\bfailed\b"), timeout=READY_MS)
    scanned_status = scanned_chip.locator(".attachment-status")
    await expect(scanned_status).to_contain_text("OCR")
    await expect(scanned_status).to_have_attribute("role", "alert")
    # --danger is a light-dark() pair, so its colour is read resolved, from an element using it.
    red = await page.evaluate(
        "(() => { const probe = document.createElement('span');"
        " probe.style.color = 'var(--danger)'; document.body.append(probe);"
        " const color = getComputedStyle(probe).color; probe.remove(); return color; })()"
    )
    text = await page.evaluate("getComputedStyle(document.body).color")
    assert red != text
    assert await scanned_status.evaluate("el => getComputedStyle(el).color") == red

    # An encrypted PDF through the paperclip; a type ResolveAI does not read is refused at once.
    encrypted = f"{tag}-locked.pdf"
    await page.locator("#attach-input").set_input_files(
        [
            {
                "name": encrypted,
                "mimeType": "application/pdf",
                "buffer": ENCRYPTED_PDF.read_bytes(),
            },
            {
                "name": f"{tag}-tool.exe",
                "mimeType": "application/octet-stream",
                "buffer": b"MZ\x90",
            },
        ]
    )
    refused = chip(page, f"{tag}-tool.exe")
    await expect(refused).to_have_class(re.compile(r"\bfailed\b"))
    await expect(refused.locator(".attachment-status")).to_contain_text("cannot read")
    encrypted_chip = chip(page, encrypted)
    await expect(encrypted_chip).to_have_class(re.compile(r"\bfailed\b"), timeout=READY_MS)
    await expect(encrypted_chip.locator(".attachment-status")).to_contain_text(
        re.compile("password", re.IGNORECASE)
    )
    await page_ui.shot("desktop-light-unreadable-documents")

    # The Documents page shows both with their error (the refused file was never stored), and
    # offers to re-index rather than cancel.
    async with await api_client(page_ui.url) as client:
        documents = {d["filename"]: d for d in (await client.get("/api/documents")).json()}
    assert f"{tag}-tool.exe" not in documents
    await open_documents_page(page)
    for name in (scanned, encrypted):
        item = document_item(page, name)
        await expect(item).to_have_count(1)
        await expect(item).to_have_class(re.compile(r"\bfailed\b"))
        status = item.locator(".document-status")
        await expect(status).to_have_text(documents[name]["error"])
        await expect(status).to_have_attribute("role", "alert")
        await expect(item.get_by_role("button", name=f"Re-index {name}")).to_be_visible()
        await expect(item.get_by_role("button", name=re.compile("^Cancel"))).to_have_count(0)
    await expect(document_item(page, scanned).locator(".document-status")).to_contain_text("OCR")
    await page_ui.shot("desktop-light-documents-failed")
    async with await api_client(page_ui.url) as client:
        for name in (scanned, encrypted):
            await client.delete(f"/api/documents/{documents[name]['document_id']}")


# --- progress and cancel ----------------------------------------------------------------------


def long_pdf(tag: str, pages: int = 100) -> bytes:
    """Enough pages that reading them takes a while (hundreds of passages to embed)."""
    return pdf_with_pages(
        [
            wrap(f"Chapter {n} of the {tag} almanac. " + f"Tide table {n}, harbour notes. " * 150)
            for n in range(1, pages + 1)
        ]
    )


async def test_a_document_being_read_shows_its_progress_and_can_be_cancelled(
    ui: UI,  # noqa: F811
) -> None:
    page = ui.page
    tag = uuid.uuid4().hex[:8]
    name = f"{tag}-almanac.pdf"
    await ui.open()
    await open_documents_page(page)
    await page.locator("#documents-input").set_input_files(
        {"name": name, "mimeType": "application/pdf", "buffer": long_pdf(tag)}
    )
    item = document_item(page, name)
    status = item.locator(".document-status")
    # The list follows it on its own (every second): embedding, with a progress bar.
    await expect(status).to_have_text(re.compile(r"^Embedding \d+/\d+$"), timeout=READY_MS)
    progress = item.locator("progress")
    await expect(progress).to_be_visible()
    done, total = map(int, re.findall(r"\d+", await status.inner_text()))
    assert await progress.get_attribute("max") == str(total) and total > 8
    assert await progress.get_attribute("value") == str(done)
    await expect(item.get_by_role("button", name=f"Re-index {name}")).to_have_count(0)
    await ui.shot("desktop-light-documents-progress")

    await item.get_by_role("button", name=f"Cancel processing {name}").click()
    await expect(status).to_have_text("Cancelled: re-index to read it")
    await expect(item.locator("progress")).to_have_count(0)
    await expect(item.get_by_role("button", name=f"Re-index {name}")).to_be_focused()
    async with await api_client(ui.url) as client:
        documents = (await client.get("/api/documents")).json()
    assert next(d for d in documents if d["filename"] == name)["status"] == "cancelled"


async def test_a_message_sent_while_its_file_is_read_waits_for_it(
    ui: UI,  # noqa: F811
    model: ScriptedProvider,
) -> None:
    """A keyless trial: a PDF attached, "Summarize this." sent at once. The file was still being
    embedded, so the message went without it ("I don't have any information about what you want
    me to summarize") and the file went with the next one. A message now waits for its files."""
    page = ui.page
    tag = uuid.uuid4().hex[:8]
    name = f"{tag}-almanac.pdf"
    await ui.open()
    await page.locator("#attach-input").set_input_files(
        {"name": name, "mimeType": "application/pdf", "buffer": long_pdf(tag, pages=20)}
    )
    attached = chip(page, name)
    await expect(attached).to_be_visible()
    calls = len(model.calls)
    model.push({"text": "Tide tables and harbour notes."})
    await ui.send("Summarize this.")
    note = page.locator("#send-note")
    await expect(note).to_have_text(f"Sends when {name} is read")
    await expect(page.locator("#composer-input")).to_have_value("Summarize this.")
    await expect(page.locator(".msg-user")).to_have_count(0)
    await ui.shot("desktop-light-message-waits-for-file")

    reply = ui.assistant()
    await expect(reply).to_have_attribute("data-status", "complete", timeout=READY_MS)
    await expect(note).to_be_hidden()
    await expect(page.locator("#composer-input")).to_have_value("")
    await expect(page.locator(".attachment")).to_have_count(0)
    await expect(page.locator(".msg-user").last.locator(".msg-files a.msg-file")).to_have_text(name)
    assert len(model.calls) == calls + 1
    assert "Tide table 1, harbour notes." in model.calls[-1]["messages"][-1]["content"]
    check_clean(ui)


async def test_a_waiting_message_whose_file_cannot_be_read_is_not_sent(
    ui: UI,  # noqa: F811
) -> None:
    page = ui.page
    name = f"{uuid.uuid4().hex[:8]}-locked.pdf"
    await ui.open()
    uploaded = asyncio.Event()

    async def after_the_message(route: Any) -> None:  # the upload ends after the message is sent
        await uploaded.wait()
        await route.continue_()

    await page.route("**/api/documents", after_the_message)
    await page.locator("#attach-input").set_input_files(
        {"name": name, "mimeType": "application/pdf", "buffer": ENCRYPTED_PDF.read_bytes()}
    )
    await ui.send("What does it say?")
    note = page.locator("#send-note")
    await expect(note).to_have_text(f"Sends when {name} is read")
    uploaded.set()
    await expect(chip(page, name)).to_have_class(re.compile(r"\bfailed\b"), timeout=READY_MS)
    await expect(note).to_have_text(f"{name} could not be read: send again to send without it")
    await expect(page.locator("#composer-input")).to_have_value("What does it say?")
    await expect(page.locator(".msg-user")).to_have_count(0)
    await page.unroute("**/api/documents")
    check_clean(ui)


# --- signed in (AUTH_MODE=password) -----------------------------------------------------------

DORA_NOTES = (
    b"Watering plan\n\nThe fern on the landing needs water every Monday and Thursday; the cactus"
    b" by the window only once a month, and never in winter. The orchid in the bathroom likes"
    b" a soak in the sink on Sundays, then it drains on the rack until the evening. The basil"
    b" on the kitchen sill is thirsty in summer: look at it every morning.\n"
)


async def test_a_signed_in_upload_carries_the_csrf_token(
    browser: Browser,  # noqa: F811
    accounts_url: str,  # noqa: F811
    chat_services: Services,
) -> None:
    """The upload is a change like any other: with accounts it must carry the session's
    X-CSRF-Token (else 403), and the document is the signed-in user's."""
    username = await new_user(chat_services, "dora")
    page_ui, context = await new_ui(browser, accounts_url)
    page = page_ui.page
    name = f"{uuid.uuid4().hex[:8]}-dora.txt"
    try:
        await sign_in(page, accounts_url, username)
        async with page.expect_request(
            lambda r: r.url.endswith("/api/documents") and r.method == "POST"
        ) as sent:
            await page.locator("#attach-input").set_input_files(
                {"name": name, "mimeType": "text/plain", "buffer": DORA_NOTES}
            )
        assert (await sent.value).headers.get("x-csrf-token"), "the upload sent no CSRF token"
        attached = chip(page, name)
        await expect(attached.locator(".attachment-status")).to_have_text(
            re.compile(r"^Ready · "), timeout=READY_MS
        )
        await open_documents_page(page)
        await expect(document_item(page, name)).to_have_count(1)
    finally:
        await context.close()
        async with chat_services.database.pool.connection() as conn:
            await conn.execute("DELETE FROM documents WHERE filename = %s", (name,))
    check_clean_but(page_ui, 401)  # the app page asks who is signed in before sign-in


def passages(count: int) -> str:
    return f"{count} passage" if count == 1 else f"{count} passages"

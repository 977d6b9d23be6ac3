"""Export and import in a real browser (static/js/data-transfer.js), signed in (AUTH_MODE=password:
the import must carry the CSRF token): "Import chats…" takes a ChatGPT conversations.json and its
chats appear in the list and open; the chat's Export menu downloads it as Markdown and JSON, and
"Export all data" downloads everything; a second import adds nothing and a file that is not an
export says why. Same harness as test_ui.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from playwright.async_api import Browser, expect

from core.services import Services
from tests.test_ui import browser, new_ui  # noqa: F401 (browser: a fixture)
from tests.test_ui_accounts import (  # noqa: F401 (accounts_url: a fixture)
    accounts_url,
    check_clean_but,
    new_user,
    sign_in,
)

FIXTURE = Path(__file__).parent / "fixtures" / "chatgpt_conversations.json"


async def test_import_a_chatgpt_export_then_export_a_chat_and_everything(
    browser: Browser,  # noqa: F811
    accounts_url: str,  # noqa: F811
    chat_services: Services,
    tmp_path: Path,
) -> None:
    username = await new_user(chat_services, "xfer")
    ui, context = await new_ui(browser, accounts_url)
    page = ui.page
    await sign_in(page, accounts_url, username)

    # Export everything and import live on the Settings page, under "Your data".
    await page.locator("#settings-link").click()
    data = page.locator("#settings-data")
    async with page.expect_file_chooser() as chooser:
        await data.get_by_role("button", name="Import chats…").click()
    await (await chooser.value).set_files(FIXTURE)
    await expect(page.locator(".toast").last).to_have_text("Imported 3 chats.")
    chats = page.locator("#chat-list")
    for title in ("Haiku about Mondays", "Sourdough hydration", "Trip to Kyōto ✈️"):
        await expect(chats.get_by_text(title, exact=True)).to_be_visible()

    # No chat open: nothing to export from the header.
    await expect(page.locator("#export-chat")).to_be_hidden()
    await chats.get_by_text("Trip to Kyōto ✈️", exact=True).click()
    await expect(page.locator(".msg-assistant").last).to_contain_text("shōjin ryōri")
    await expect(page.locator(".msg-user")).to_have_count(2)

    await page.locator("#export-chat").click()
    async with page.expect_download() as download_info:
        await page.get_by_role("menuitem", name="Export as Markdown").click()
    download = await download_info.value
    assert re.fullmatch(r"trip-to-ky-to-[0-9a-f]{8}\.md", download.suggested_filename)
    markdown = tmp_path / "chat.md"
    await download.save_as(markdown)
    text = markdown.read_text()
    assert text.startswith("# Trip to Kyōto ✈️\n") and "精進料理" in text
    await expect(page.get_by_role("menuitem", name="Export as JSON")).to_be_hidden()

    await page.locator("#export-chat").click()
    async with page.expect_download() as download_info:
        await page.get_by_role("menuitem", name="Export as JSON").click()
    saved = tmp_path / "chat.json"
    await (await download_info.value).save_as(saved)
    exported = json.loads(saved.read_text())
    assert [c["title"] for c in exported["chats"]] == ["Trip to Kyōto ✈️"]

    await page.locator("#settings-link").click()
    async with page.expect_download() as download_info:
        await data.get_by_role("button", name="Export all data").click()
    download = await download_info.value
    assert re.fullmatch(r"resolveai-export-\d{4}-\d\d-\d\d\.json", download.suggested_filename)
    everything = tmp_path / "all.json"
    await download.save_as(everything)
    exported_all = json.loads(everything.read_text())
    assert exported_all["format"] == "resolveai-export" and len(exported_all["chats"]) == 3

    # The same file again: nothing new, and the page says so.
    async with page.expect_file_chooser() as chooser:
        await data.get_by_role("button", name="Import chats…").click()
    await (await chooser.value).set_files(FIXTURE)
    await expect(page.locator(".toast").last).to_have_text("Imported 0 chats (3 already here).")

    # A file that is not an export: the server's reason, and nothing changes.
    notes = tmp_path / "notes.txt"
    notes.write_text("Just some notes, not JSON.")
    async with page.expect_file_chooser() as chooser:
        await data.get_by_role("button", name="Import chats…").click()
    await (await chooser.value).set_files(notes)
    await expect(page.locator(".toast-error").last).to_have_text(
        re.compile(r"^Could not import: notes\.txt: The file is not valid JSON")
    )
    await expect(chats.locator(".chat-link")).to_have_count(3)
    check_clean_but(ui, 401, 422)  # 401: the sign-in page's check; 422: the bad file
    await context.close()

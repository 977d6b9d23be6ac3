"""Search across chats, generated titles, pinned chats and the keyboard shortcuts, in a real
browser (the fixtures of tests/test_ui.py: Debian's Chromium, the real server, the scripted
model).
"""

from __future__ import annotations

import random
import re
import string

from playwright.async_api import expect

from core import chat_store
from core.accounts import LOCAL_USER_ID
from core.services import Services
from tests.test_ui import (  # noqa: F401 (browser, ui, ui_url: fixtures)
    UI,
    browser,
    chat_id_of,
    saved_messages,
    ui,
    ui_url,
)
from tests.ui_fixtures import seed_chat


def word() -> str:
    """A made-up word no other chat holds."""
    return "".join(random.choices(string.ascii_lowercase, k=12))


async def test_search_finds_a_word_only_a_reply_has_and_opens_it(
    ui: UI,  # noqa: F811
    model,
) -> None:
    secret = word()
    filler = "\n\n".join(f"Paragraph {i}. " + "More words to read. " * 30 for i in range(12))
    model.push({"text": f"The hidden word is {secret} <b>bold?</b>.\n\n{filler}"})
    await ui.open()
    page = ui.page
    await ui.send("Tell me a long story please")
    await expect(ui.assistant()).to_have_attribute("data-status", "complete")
    chat_id = chat_id_of(page)
    reply_id = (await saved_messages(ui.url, chat_id))[1]["message_id"]
    # Later messages push the reply far up the chat.
    model.push(*({"text": "Another reply. " * 40} for _ in range(3)))
    for n in range(3):
        await ui.send(f"Go on {n}")
        await expect(page.locator(".msg-assistant")).to_have_count(n + 2)
        await expect(ui.assistant()).to_have_attribute("data-status", "complete")
    await page.keyboard.press("Control+Shift+O")  # a new chat: the search starts elsewhere
    await expect(page.locator("#chat-title")).to_have_text("New chat")

    await page.keyboard.press("Control+K")
    dialog = page.locator("#search-dialog")
    await expect(dialog).to_be_visible()
    box = page.get_by_role("combobox", name="Search chats")
    await expect(box).to_be_focused()
    await box.fill(secret.upper())
    result = dialog.locator(".search-result")
    await expect(result).to_have_count(1)
    await expect(result.locator(".search-result-title")).to_have_text("Tell me a long story please")
    await expect(result.locator(".search-result-snippet mark")).to_have_text(secret)
    # The reply's markup is text in the snippet, never markup.
    await expect(result.locator(".search-result-snippet b")).to_have_count(0)
    await ui.shot("desktop-light-search")

    await box.press("Enter")
    await expect(dialog).to_be_hidden()
    await expect(page).to_have_url(re.compile(rf"#/chat/{chat_id}/{reply_id}$"))
    message = page.locator(f'.msg-assistant[data-message-id="{reply_id}"]')
    await expect(message).to_have_class(re.compile(r"\bhighlighted\b"))
    await expect(message.get_by_text(f"The hidden word is {secret}")).to_be_in_viewport()
    # Briefly: the mark goes away by itself.
    await expect(message).not_to_have_class(re.compile(r"\bhighlighted\b"), timeout=6000)

    # A word nobody wrote finds nothing, and says so; Esc closes the dialog.
    await page.keyboard.press("Control+K")
    await box.fill(word())
    await expect(dialog.locator("#search-status")).to_contain_text("No chats match")
    await expect(result).to_have_count(0)
    await page.keyboard.press("Escape")
    await expect(dialog).to_be_hidden()
    # The sidebar button opens it too.
    await page.get_by_role("button", name="Search chats").click()
    await expect(dialog).to_be_visible()
    await page.keyboard.press("Escape")


async def test_a_title_appears_after_the_first_reply(ui: UI, model) -> None:  # noqa: F811
    model.push({"text": "Start with a sourdough starter fed twice a day.", "delay": 0.05})
    model.push_for("title", {"text": '"Baking **Sourdough** Bread."', "delay": 0.3})
    await ui.open()
    page = ui.page
    question = "How do I bake bread with a sourdough starter at home?"
    await ui.send(question)
    link = page.locator(".chat-item", has=page.locator('.chat-link[aria-current="page"]'))
    await expect(link.locator(".chat-link-title")).to_have_text(question)
    await expect(ui.assistant()).to_have_attribute("data-status", "complete")
    # The generated title replaces the first one in the sidebar and the top bar.
    await expect(link.locator(".chat-link-title")).to_have_text("Baking Sourdough Bread")
    await expect(page.locator("#chat-title")).to_have_text("Baking Sourdough Bread")
    assert len(model.own_calls["title"]) == 1
    # Still editable: a rename sticks.
    await link.hover()
    await page.get_by_role("button", name="Rename chat: Baking Sourdough Bread").click()
    title_box = page.get_by_role("textbox", name="New chat title")
    await title_box.fill("My bread notes")
    await title_box.press("Enter")
    await expect(page.locator("#chat-title")).to_have_text("My bread notes")


async def test_pin_moves_a_chat_to_the_top(
    ui: UI,  # noqa: F811
    chat_services: Services,
) -> None:
    pool = chat_services.database.pool
    tag = word()
    older = await seed_chat(pool, f"{tag} older chat", [("hello", {"content": "Hi!"})])
    newer = await seed_chat(pool, f"{tag} newer chat", [("hello", {"content": "Hi!"})])
    page = ui.page
    try:
        await ui.open()
        links = page.locator(".chat-link")
        await expect(links.nth(0)).to_have_text(f"{tag} newer chat")
        await expect(page.locator(".chat-group-title", has_text="Pinned")).to_have_count(0)

        item = page.locator(".chat-item", has_text=f"{tag} older chat")
        await item.hover()
        await page.get_by_role("button", name=f"Pin chat: {tag} older chat").click()
        await expect(links.nth(0)).to_have_text(f"{tag} older chat")
        pinned = page.locator(".chat-group").first
        await expect(pinned.locator(".chat-group-title")).to_have_text("Pinned")
        await expect(pinned.locator(".chat-link")).to_have_text([f"{tag} older chat"])
        assert (await chat_store.get_chat(pool, older, user_id=None))["pinned"] is True

        # A reload keeps it there; Unpin puts it back in its place.
        await page.reload()
        await expect(links.nth(0)).to_have_text(f"{tag} older chat")
        await item.hover()
        await page.get_by_role("button", name=f"Unpin chat: {tag} older chat").click()
        await expect(links.nth(0)).to_have_text(f"{tag} newer chat")
        await expect(page.locator(".chat-group-title", has_text="Pinned")).to_have_count(0)
    finally:  # the other browser tests expect no pinned chat at the top
        for chat_id in (older, newer):
            await chat_store.delete_chat(pool, chat_id, LOCAL_USER_ID)


async def test_shortcuts_new_chat_and_esc_stops(ui: UI, model) -> None:  # noqa: F811
    model.push({"text": "Hello."})
    await ui.open()
    page = ui.page
    await ui.send("First message")
    await expect(ui.assistant()).to_have_attribute("data-status", "complete")
    assert "#/chat/" in page.url

    # Ctrl+Shift+O from anywhere (here the message box): a new chat, its box focused.
    await page.locator("#composer-input").focus()
    await page.keyboard.press("Control+Shift+O")
    await expect(page.locator("#chat-title")).to_have_text("New chat")
    await expect(page.locator(".empty-state")).to_be_visible()
    assert "#/chat/" not in page.url
    await expect(page.locator("#composer-input")).to_be_focused()

    # Esc stops a reply being written.
    words = " ".join(f"word{i}" for i in range(300))
    model.push({"text": words, "delay": 0.04})
    await ui.send("Write a long text")
    reply = ui.assistant()
    await expect(reply.locator(".markdown")).to_contain_text("word5")
    await page.keyboard.press("Escape")
    await expect(reply).to_have_attribute("data-status", "interrupted")

    # Ctrl+K opens the search over the open chat; Esc closes it and stops nothing else.
    await page.keyboard.press("Control+K")
    await expect(page.locator("#search-dialog")).to_be_visible()
    await page.keyboard.press("Escape")
    await expect(page.locator("#search-dialog")).to_be_hidden()

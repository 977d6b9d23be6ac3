"""The browser UI in a real browser: Debian's Chromium driven by Playwright against the real server
(real database and embedder, scripted model), all in the test's event loop.

Every test gets a fresh browser context; when it ends, the page must have raised no JavaScript
error or CSP violation, opened no dialog (an XSS payload that ran would) and asked nothing of any
other origin (the UI works offline). Screenshots go to test-output/screenshots/ for people to
look at.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from chat import summary as chat_summary
from core import chat_store
from core.accounts import LOCAL_USER_ID
from core.config import PROJECT_ROOT
from core.prompts import WEB_NOTE
from core.services import Services
from server import CONTENT_SECURITY_POLICY
from tests.chat_client import serve
from tests.conftest import forget_memories
from tests.scripted_model import ScriptedProvider
from tests.ui_fixtures import (
    SHOWCASE_ANSWER,
    SHOWCASE_SOURCES,
    count_memories,
    memory_row,
    seed_chat,
    seed_memory,
    seed_showcase,
    seed_showcase_memories,
    user_message_ids,
)

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package (.ci/run installs it)
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = PROJECT_ROOT / "test-output" / "screenshots"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}

expect.set_options(timeout=10_000)


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
async def ui_url(chat_services: Services) -> AsyncIterator[str]:
    async with serve(chat_services) as url:
        yield url


TRAM_PAGES = {
    "tram-28": (
        "Tram 28 (Lisbon)",
        "https://example.org/lisbon/tram-28",
        "Tram 28 is Lisbon's most famous tram line. The route runs from Martim Moniz to Campo de"
        " Ourique, climbing through the narrow streets of Graça, Alfama, Baixa and Estrela.",
    ),
    "remodelado": (
        "Remodelado trams",
        "https://example.org/lisbon/remodelado",
        "The yellow Remodelado trams that serve tram 28 date from the 1930s and were rebuilt in"
        " the 1990s; their small size suits the tight curves of Alfama.",
    ),
}


@pytest.fixture(scope="session")
async def web_ui_url(
    chat_services: Services, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """The app with web search on, over the `pages` provider (a folder of Markdown pages)."""
    search_providers = pytest.importorskip("rag.search_providers")
    folder = tmp_path_factory.mktemp("ui-pages")
    for name, (title, url, body) in TRAM_PAGES.items():
        (folder / f"{name}.md").write_text(f"---\ntitle: {title}\nurl: {url}\n---\n\n{body}\n")
    services = dataclasses.replace(
        chat_services,
        search_provider=search_providers.PagesProvider(folder),
        features={**chat_services.features, "web_search": f"pages in {folder}"},
    )
    async with serve(services) as url:
        yield url


@pytest.fixture(scope="session")
async def showcase_chat(chat_services: Services) -> uuid.UUID:
    """The realistic chats the screenshots show, seeded once."""
    return await seed_showcase(chat_services.database.pool)


@pytest.fixture
async def showcase_memories(chat_services: Services) -> AsyncIterator[uuid.UUID]:
    """The memories the Memory page screenshots show, and only those, for one test: a user with
    a few memories gets them all with every message, so any left would be in the next test's
    prompts. Yields the chat they came from."""
    await forget_memories(chat_services)
    chat_id = await seed_showcase_memories(chat_services.database.pool, chat_services.embedder)
    yield chat_id
    await chat_store.delete_chat(
        chat_services.database.pool, chat_id, LOCAL_USER_ID, forget_memories=True
    )
    await forget_memories(chat_services)


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    assert await asyncio.to_thread(CHROMIUM.exists), f"{CHROMIUM} is missing: apt install chromium"
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
        )
        yield launched
        await launched.close()


@dataclass
class UI:
    """One browser page on the app, and everything it did that a test must not allow."""

    page: Page
    url: str
    dialogs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    foreign_requests: list[str] = field(default_factory=list)

    async def open(self, hash_: str = "") -> None:
        await self.page.goto(self.url + "/" + hash_)
        await expect(self.page.locator("html.ready")).to_have_count(1)
        # A message sent while a chat opens waits for its messages: wait for them, so that
        # `send` sends at once.
        await expect(self.page.locator('#composer[aria-busy="true"]')).to_have_count(0)

    async def send(self, text: str) -> None:
        box = self.page.locator("#composer-input")
        await box.fill(text)
        await box.press("Enter")

    def assistant(self, index: int = -1):
        replies = self.page.locator(".msg-assistant")
        return replies.last if index == -1 else replies.nth(index)

    async def clipboard(self) -> str:
        return await self.page.evaluate("navigator.clipboard.readText()")

    async def shot(self, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await self.page.screenshot(path=SCREENSHOTS / f"{name}.png")


async def new_ui(
    browser: Browser, url: str, viewport: dict[str, int] = DESKTOP, scheme: str = "light"
) -> tuple[UI, Any]:
    context = await browser.new_context(
        viewport=viewport,
        color_scheme=scheme,
        permissions=["clipboard-read", "clipboard-write"],
        is_mobile=viewport is PHONE,
        has_touch=viewport is PHONE,
    )
    page = await context.new_page()
    ui = UI(page, url)

    async def dismiss(dialog: Any) -> None:
        ui.dialogs.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", dismiss)
    page.on("pageerror", lambda error: ui.errors.append(f"page error: {error}"))
    page.on(
        "console",
        lambda message: (
            ui.errors.append(f"console: {message.text}") if message.type == "error" else None
        ),
    )
    page.on(
        "request",
        lambda request: (
            None
            if request.url.startswith((url, "data:"))
            else ui.foreign_requests.append(request.url)
        ),
    )
    return ui, context


def check_clean(ui: UI) -> None:
    assert ui.dialogs == [], f"a dialog opened (script ran): {ui.dialogs}"
    assert ui.errors == [], f"errors in the page: {ui.errors}"
    assert ui.foreign_requests == [], f"requests to other origins: {ui.foreign_requests}"


@pytest.fixture
async def ui(browser: Browser, ui_url: str, model: ScriptedProvider) -> AsyncIterator[UI]:
    page_ui, context = await new_ui(browser, ui_url)
    yield page_ui
    await context.close()
    check_clean(page_ui)


async def saved_messages(url: str, chat_id: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.get(f"/api/chats/{chat_id}/messages")
        assert response.status_code == 200
        return response.json()


def chat_id_of(page: Page) -> str:
    match = re.search(r"#/chat/([0-9a-f-]{36})$", page.url)
    assert match, f"no chat in the address: {page.url}"
    return match.group(1)


def without_timings(text: str) -> str:
    """The steps line's total is measured in the browser while live and from the saved times
    after a reload: the same to the eye, not always to the tenth of a second."""
    return re.sub(r"\d+(\.\d)? s\b", "N s", text)


# --- sending and streaming -----------------------------------------------------------------------

STREAMED_PIECES = [
    "## Packing list\n\n",
    "Here is what I would take:\n\n",
    "- a light jacket\n",
    "- walking shoes\n\n",
    "| Day | Plan |\n| --- | --- |\n",
    "| Sat | Alfama and the castle |\n",
    "| Sun | Belém |\n\n",
    "To check the weather from a script:\n\n",
    "```python\nimport json\n\ndef forecast(city):\n    return json.dumps({'city': city})\n```\n\n",
    "Have a **great** trip!",
]
STREAMED_CODE = "import json\n\ndef forecast(city):\n    return json.dumps({'city': city})"


async def test_a_new_chat_streams_markdown_and_a_reload_keeps_it(ui: UI, model) -> None:
    model.push({"chunks": STREAMED_PIECES, "delay": 0.12})
    await ui.open()
    page = ui.page
    await expect(page.locator(".empty-state")).to_be_visible()
    await expect(page.locator("#show-summary")).to_be_disabled()
    question = f"What should I pack for Lisbon? {uuid.uuid4().hex[:6]}"
    await ui.send(question)

    reply = ui.assistant()
    await expect(page.locator(".msg-user .bubble")).to_have_text(question)
    await expect(page.locator("#composer-input")).to_have_value("")
    # Mid-stream: the first pieces are on screen, the last is not yet, Stop is offered.
    await expect(reply.locator(".markdown")).to_contain_text("Here is what I would take")
    assert "great" not in await reply.locator(".markdown").inner_text()
    await expect(page.locator("#stop")).to_be_visible()
    await expect(page.locator("#send")).to_be_hidden()
    # No tool, text streaming: no steps line (test_ui_citations.py has the rule).
    await expect(reply.locator(".steps-live")).to_be_hidden()
    # The draft became a chat: in the address bar and at the top of the sidebar.
    await expect(page.locator(".chat-link").first).to_have_text(question)
    await expect(page.locator(".chat-link").first).to_have_attribute("aria-current", "page")
    await expect(page.locator("#chat-title")).to_have_text(question)
    chat_id = chat_id_of(page)

    await expect(reply).to_have_attribute("data-status", "complete", timeout=15_000)
    await expect(page.locator("#send")).to_be_visible()
    await expect(page.locator("#stop")).to_be_hidden()
    markdown = reply.locator(".markdown")
    await expect(markdown.locator("h2")).to_have_text("Packing list")
    await expect(markdown.locator("li")).to_have_text(["a light jacket", "walking shoes"])
    await expect(markdown.locator("table td")).to_have_text(
        ["Sat", "Alfama and the castle", "Sun", "Belém"]
    )
    await expect(markdown.locator("strong")).to_have_text("great")
    assert await markdown.locator("pre code .hljs-keyword").count() >= 2  # highlighted
    await expect(reply.locator(".code-lang")).to_have_text("python")
    # No tool ran: a steps line only if the reply took over 3 s (a busy machine), and then it says
    # so (test_ui_citations.py has the rule).
    steps_line = reply.locator(".steps")
    if await steps_line.is_visible():
        took = re.search(r"· ([\d.]+) s$", await steps_line.inner_text())
        assert took and float(took.group(1)) > 3, await steps_line.inner_text()
    before = await page.locator("#messages").inner_text()

    # Copy buttons: the code block's copies the code, the message's copies its Markdown.
    await reply.locator(".code-block .copy-button").click()
    assert await ui.clipboard() == STREAMED_CODE
    await expect(reply.locator(".code-block .copy-button")).to_contain_text("Copied")
    await reply.locator(".msg-actions .copy-button").click()
    assert await ui.clipboard() == "".join(STREAMED_PIECES)

    saved = await saved_messages(ui.url, chat_id)
    assert [(m["role"], m["content"], m["status"]) for m in saved] == [
        ("user", question, "complete"),
        ("assistant", "".join(STREAMED_PIECES), "complete"),
    ]
    await ui.shot("desktop-light-streamed")

    await page.reload()
    await expect(ui.assistant()).to_have_attribute("data-status", "complete")
    assert without_timings(await page.locator("#messages").inner_text()) == without_timings(before)
    await expect(page.locator("#chat-title")).to_have_text(question)
    await expect(page.locator(f'.chat-link[href="#/chat/{chat_id}"]')).to_have_attribute(
        "aria-current", "page"
    )


async def test_enter_sends_and_shift_enter_adds_a_line(ui: UI, model) -> None:
    model.push({"text": "Got both lines."})
    await ui.open()
    page = ui.page
    box = page.locator("#composer-input")
    await box.press("Enter")  # nothing to send: nothing happens
    await box.press_sequentially("first line")
    await box.press("Shift+Enter")
    await box.press_sequentially("second line")
    await expect(box).to_have_value("first line\nsecond line")
    await expect(page.locator(".msg-user")).to_have_count(0)
    await box.press("Enter")
    await expect(page.locator(".msg-user .bubble")).to_have_text("first line\nsecond line")
    await expect(ui.assistant()).to_have_attribute("data-status", "complete")
    await expect(ui.assistant().locator(".markdown")).to_have_text("Got both lines.")
    assert model.calls[0]["messages"][-1]["content"] == "first line\nsecond line"

    # The "Use web tool" box says why it cannot be ticked when no search provider is set up.
    async with httpx.AsyncClient(base_url=ui.url) as client:
        web = (await client.get("/api/config")).json()["web_search"]
    checkbox = page.locator("#use-web")
    if web["available"]:
        await expect(checkbox).to_be_enabled()
    else:
        await expect(checkbox).to_be_disabled()
        # In words to act on: "Web search is off: add a Tavily key in .env (see README)."
        await expect(page.locator("#web-reason")).to_have_text(web["message"])


async def test_enter_while_a_chat_opens_sends_once_it_has_loaded(
    ui: UI, model, chat_services: Services
) -> None:
    """A message typed while the chat's messages are on their way (slow network) is sent to
    that chat when they arrive, after them, rather than dropped."""
    chat_id = await seed_chat(chat_services.database.pool, "Slow", [("hello", {"content": "hi"})])
    model.push({"text": "Sent after loading."})
    arrived = asyncio.Event()

    async def slow(route: Any) -> None:
        await arrived.wait()
        await route.continue_()

    page = ui.page
    await page.route(f"**/api/chats/{chat_id}/messages", slow)
    await page.goto(f"{ui.url}/#/chat/{chat_id}")
    await expect(page.locator('#composer[aria-busy="true"]')).to_have_count(1)
    box = page.locator("#composer-input")
    await box.fill("Typed while it loaded")
    await box.press("Enter")
    await expect(box).to_have_value("Typed while it loaded")  # kept until it can go
    arrived.set()
    await expect(ui.assistant()).to_have_attribute("data-status", "complete")
    await expect(ui.assistant().locator(".markdown")).to_have_text("Sent after loading.")
    await expect(page.locator(".msg-user .bubble")).to_have_text(["hello", "Typed while it loaded"])
    await expect(box).to_have_value("")
    assert model.calls[-1]["messages"][-1]["content"] == "Typed while it loaded"


async def test_steps_show_live_then_as_a_list_with_timings(ui: UI, model) -> None:
    fact = f"The user grows tomatoes {uuid.uuid4().hex[:6]}"
    model.push(
        tool_call("save_memory", content=fact, quote="I grow tomatoes"),
        tool_call("retrieve_memory", query="What does the user grow?"),
        {"text": "Noted: tomatoes. " + "They like sun. " * 4, "delay": 0.4},
    )
    await ui.open()
    await ui.send("I grow tomatoes on my balcony.")
    reply = ui.assistant()
    live = reply.locator(".steps-live .step-current")
    await expect(live).to_have_text("Thinking about what the tools found…")
    await expect(reply.locator(".markdown")).to_contain_text("Noted")
    await ui.shot("desktop-light-live-step")

    await expect(reply).to_have_attribute("data-status", "complete", timeout=15_000)
    toggle = reply.locator(".steps-toggle")
    await expect(toggle).to_have_text(re.compile(r"^5 steps · \d+(\.\d)? s$"))
    await expect(toggle).to_have_attribute("aria-expanded", "false")
    steps = reply.locator(".steps-list")
    await expect(steps).to_be_hidden()
    await toggle.focus()
    await ui.page.keyboard.press("Enter")  # keyboard works as well as a click
    await expect(toggle).to_have_attribute("aria-expanded", "true")
    await expect(steps.locator(".step-text")).to_have_text(
        [
            "Thinking",
            f"Saving to memory: {fact}",
            "Thinking about what the tools found",
            "Looking up what I know about you",
            "Thinking about what the tools found",
        ]
    )
    # Each step's duration (a tool's own time for its step), not its offset from Send.
    await expect(steps.locator(".step-time")).to_have_text([re.compile(r"^\d+\.\d s$")] * 5)

    await ui.page.reload()  # saved steps and tool timings come back the same
    reply = ui.assistant()
    await expect(reply.locator(".steps-toggle")).to_have_text(re.compile(r"^5 steps · "))
    await reply.locator(".steps-toggle").click()
    await expect(reply.locator(".step-time")).to_have_count(5)


async def test_a_reload_mid_reply_shows_it_and_follows_it_to_the_end(ui: UI, model) -> None:
    words = " ".join(f"word{i}" for i in range(80))
    model.push({"text": words, "delay": 0.04})
    await ui.open()
    page = ui.page
    await ui.send("Write a long text")
    await expect(ui.assistant().locator(".markdown")).to_contain_text("word5")
    await page.reload()  # the reply goes on at the server; the reloaded page follows it
    reply = ui.assistant()
    await expect(reply.locator(".markdown")).to_contain_text("word79", timeout=20_000)
    await expect(reply).to_have_attribute("data-status", "complete")
    saved = await saved_messages(ui.url, chat_id_of(page))
    assert [(m["role"], m["status"]) for m in saved] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ]
    assert (await reply.locator(".markdown").inner_text()).strip() == saved[1]["content"] == words


async def test_stop_keeps_the_partial_reply_marked_interrupted(ui: UI, model) -> None:
    words = " ".join(f"word{i}" for i in range(300))
    model.push({"text": words, "delay": 0.04})
    await ui.open()
    page = ui.page
    await ui.send("Write a very long text")
    reply = ui.assistant()
    await expect(reply.locator(".markdown")).to_contain_text("word5")
    await page.locator("#stop").click()
    await expect(reply).to_have_attribute("data-status", "interrupted")
    await expect(reply.locator(".badge-interrupted")).to_have_text("Interrupted")
    await expect(page.locator("#send")).to_be_visible()
    shown = await reply.locator(".markdown").inner_text()
    assert shown.startswith("word0 word1 word2") and "word299" not in shown

    chat_id = chat_id_of(page)
    for _ in range(100):
        saved = await saved_messages(ui.url, chat_id)
        if len(saved) == 2:
            break
        await asyncio.sleep(0.05)
    assert saved[1]["status"] == "interrupted"
    assert saved[1]["content"].startswith("word0 word1 word2")
    assert "word299" not in saved[1]["content"]

    # Esc stops too, and a message sent right after a stop goes through.
    model.push({"text": words, "delay": 0.04})
    await ui.send("Once more please")
    second = ui.assistant()
    await expect(second.locator(".markdown")).to_contain_text("word5")
    await page.keyboard.press("Escape")
    await expect(second).to_have_attribute("data-status", "interrupted")

    await page.reload()
    await expect(page.locator(".msg-assistant")).to_have_count(2)
    await expect(page.locator(".msg-assistant .badge-interrupted")).to_have_count(2)
    saved = await saved_messages(ui.url, chat_id)
    first_text = await ui.assistant(0).locator(".markdown").inner_text()
    assert first_text.strip() == saved[1]["content"].strip()


async def test_a_failed_reply_shows_the_error_and_retry_works(ui: UI, model) -> None:
    model.push({"error": "service unavailable"})
    await ui.open()
    page = ui.page
    await ui.send("Are you there?")
    reply = ui.assistant()
    error = reply.locator(".error-box")
    await expect(error).to_contain_text("The model is unavailable right now")
    await expect(reply).to_have_attribute("data-status", "error")
    await ui.shot("desktop-light-error")

    model.push({"text": "Yes, I am here now."})
    await error.get_by_role("button", name="Retry").click()
    # The question is answered again, not sent again: the new reply takes the failed one's place.
    await expect(ui.assistant()).to_have_attribute("data-status", "complete")
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    await expect(page.locator(".msg-user")).to_have_count(1)
    await expect(ui.assistant().locator(".markdown")).to_have_text("Yes, I am here now.")
    await expect(page.locator(".retry-button")).to_have_count(0)
    asked = [[m["content"] for m in c["messages"] if m["role"] == "user"] for c in model.calls]
    assert [questions[-1] for questions in asked] == ["Are you there?"] * 2
    assert all(len(questions) == 1 for questions in asked), asked  # never twice in the prompt

    await page.reload()  # as saved: one question, one reply
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    await expect(ui.assistant().locator(".markdown")).to_have_text("Yes, I am here now.")
    await expect(page.locator(".error-box")).to_have_count(0)
    saved = await saved_messages(ui.url, chat_id_of(page))
    assert [(m["role"], m["status"]) for m in saved] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ]

    # A reply that failed and was saved so, retried after a reload, the same way.
    model.push({"error": "service unavailable"})
    await ui.send("And now?")
    await expect(ui.assistant(1).locator(".error-box")).to_contain_text("unavailable")
    await page.reload()
    model.push({"text": "Still here."})
    await ui.assistant(1).get_by_role("button", name="Retry").click()
    await expect(ui.assistant(1).locator(".markdown")).to_have_text("Still here.")
    await expect(page.locator(".msg-user")).to_have_count(2)
    await expect(page.locator(".msg-assistant")).to_have_count(2)


async def test_a_stopped_reply_continues_from_where_it_ended(ui: UI, model) -> None:
    words = " ".join(f"word{i}" for i in range(300))
    model.push({"text": words, "delay": 0.04})
    await ui.open()
    page = ui.page
    await ui.send("Write a very long text")
    await expect(ui.assistant().locator(".markdown")).to_contain_text("word5")
    await page.locator("#stop").click()
    await expect(ui.assistant()).to_have_attribute("data-status", "interrupted")

    model.push({"text": " and that is the end."})
    await ui.assistant().get_by_role("button", name="Continue").click()
    await expect(ui.assistant()).to_have_attribute("data-status", "complete")
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    text = (await ui.assistant().locator(".markdown").inner_text()).strip()
    assert text.startswith("word0 word1 word2") and text.endswith("and that is the end.")
    saved = await saved_messages(ui.url, chat_id_of(page))
    assert [(m["role"], m["status"]) for m in saved] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ]
    assert saved[1]["content"].strip() == text


async def test_regenerate_and_edit_keep_every_version_one_click_away(ui: UI, model) -> None:
    await ui.open()
    page = ui.page
    model.push({"text": "Blue."})
    await ui.send("Name a colour.")
    await expect(ui.assistant()).to_have_attribute("data-status", "complete")

    # Regenerate: a new reply in place of the shown one, the first kept as version 1 of 2.
    model.push({"text": "Green."})
    await ui.assistant().get_by_role("button", name="Regenerate").click()
    await expect(ui.assistant().locator(".markdown")).to_have_text("Green.")
    versions = ui.assistant().get_by_role("group", name="Versions")
    await expect(versions).to_contain_text("2/2")
    await expect(page.locator(".msg-assistant")).to_have_count(1)
    await expect(page.locator(".msg-user")).to_have_count(1)
    await versions.get_by_role("button", name="Previous version").click()
    await expect(ui.assistant().locator(".markdown")).to_have_text("Blue.")
    await expect(ui.assistant().get_by_role("group", name="Versions")).to_contain_text("1/2")
    await ui.shot("desktop-light-versions")
    await page.reload()  # the version picked is the one the chat shows from now on
    await expect(ui.assistant().locator(".markdown")).to_have_text("Blue.")

    # Edit the question: it and its reply give way to a new branch; the old one is one click away.
    model.push({"text": "Red."})
    question = page.locator(".msg-user").first
    await question.hover()
    await question.get_by_role("button", name="Edit message").click()
    await page.get_by_role("textbox", name="Edit your message").fill("Name a warm colour.")
    await page.locator(".msg-editor").get_by_role("button", name="Send").click()
    await expect(ui.assistant().locator(".markdown")).to_have_text("Red.")
    await expect(page.locator(".msg-user .bubble")).to_have_text(["Name a warm colour."])
    await expect(page.locator(".msg-user").get_by_role("group", name="Versions")).to_contain_text(
        "2/2"
    )
    await page.locator(".msg-user").get_by_role("button", name="Previous version").click()
    await expect(page.locator(".msg-user .bubble")).to_have_text(["Name a colour."])
    await expect(ui.assistant().locator(".markdown")).to_have_text("Blue.")
    asked = [[m["content"] for m in c["messages"][1:]] for c in model.calls if c["model"] == "chat"]
    assert asked == [["Name a colour."], ["Name a colour."], ["Name a warm colour."]]


async def test_a_message_sent_while_the_summary_is_written_does_not_wait(
    ui: UI, model, chat_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 18 saved messages: the next exchange makes 20, so after its stream has ended the server
    # folds the oldest 10 into the summary. Held before it stores, the fold is still running when
    # the next message is sent: that one is answered all the same, with no wait and no 409.
    pool = chat_services.database.pool
    turns = [(f"question {i}", {"content": f"answer {i}"}) for i in range(9)]
    chat_id = await seed_chat(pool, "Summary on its way", turns)
    reached, release = asyncio.Event(), asyncio.Event()
    store = chat_store.set_summary

    async def held_store(*args: Any, **kwargs: Any) -> bool:
        reached.set()
        await release.wait()
        return await store(*args, **kwargs)

    monkeypatch.setattr(chat_store, "set_summary", held_store)
    model.push({"text": "First reply."}, {"text": "A summary of questions 0 to 4."})
    try:
        await ui.open(f"#/chat/{chat_id}")
        await ui.send("One more question")
        await expect(ui.assistant().locator(".markdown")).to_have_text("First reply.")
        await expect(ui.assistant()).to_have_attribute("data-status", "complete")
        await asyncio.wait_for(reached.wait(), 30)
        model.push({"text": "Second reply."})
        await ui.send("And another")
        second = ui.assistant()
        await expect(second).to_have_attribute("data-status", "complete")
        await expect(second.locator(".markdown")).to_have_text("Second reply.")
        await expect(ui.page.locator(".error-box")).to_have_count(0)
        assert (await chat_store.get_chat(pool, chat_id, user_id=None))[
            "summary"
        ] is None  # still folding
    finally:
        release.set()
    await chat_summary.settled()
    assert (await chat_store.get_chat(pool, chat_id, user_id=None))[
        "summary"
    ] == "A summary of questions 0 to 4."


# --- the sidebar ---------------------------------------------------------------------------------


async def test_rename_delete_and_filter_chats(ui: UI, chat_services: Services) -> None:
    pool = chat_services.database.pool
    tag = uuid.uuid4().hex[:8]
    ids = {}
    for title in (f"{tag} garden plans", f"{tag} bicycle repair", f"{tag} garden tools"):
        ids[title] = await seed_chat(pool, title, [("hello", {"content": "Hi!"})])
    page = ui.page
    await ui.open()
    links = page.locator(".chat-link")
    # Newest first.
    await expect(links.nth(0)).to_have_text(f"{tag} garden tools")
    await expect(links.nth(1)).to_have_text(f"{tag} bicycle repair")

    await page.locator("#chat-filter").fill(f"{tag} GARDEN")
    await expect(links).to_have_text([f"{tag} garden tools", f"{tag} garden plans"])
    await page.locator("#chat-filter").press("Escape")  # clears the filter
    await expect(links.nth(1)).to_have_text(f"{tag} bicycle repair")

    # Rename with the keyboard: Tab from the chat's link reaches its Rename button.
    await links.filter(has_text=f"{tag} garden plans").focus()
    await page.keyboard.press("Tab")
    focused = page.locator(":focus")
    await expect(focused).to_have_attribute("aria-label", f"Rename chat: {tag} garden plans")
    await expect(focused).to_be_visible()
    await expect(focused).to_have_css("outline-style", "solid")  # focus is visible
    await page.keyboard.press("Enter")
    title_box = page.get_by_role("textbox", name="New chat title")
    await expect(title_box).to_be_focused()
    await title_box.fill(f"{tag} vegetable beds")
    await title_box.press("Enter")
    await expect(links.filter(has_text=f"{tag} vegetable beds")).to_have_count(1)
    await expect(links.filter(has_text=f"{tag} garden plans")).to_have_count(0)
    chat = await chat_store.get_chat(pool, ids[f"{tag} garden plans"], user_id=None)
    assert chat["title"] == f"{tag} vegetable beds"

    # Delete asks first; Cancel keeps the chat.
    open_chat = links.filter(has_text=f"{tag} bicycle repair")
    await open_chat.click()
    await expect(page.locator("#chat-title")).to_have_text(f"{tag} bicycle repair")
    delete = page.get_by_role("button", name=f"Delete chat: {tag} bicycle repair")
    await open_chat.hover()
    await delete.click()
    dialog = page.locator("#confirm-dialog")
    await expect(dialog).to_be_visible()
    await expect(dialog).to_contain_text(f"“{tag} bicycle repair” and all its messages")
    await dialog.get_by_role("button", name="Cancel").click()
    await expect(dialog).to_be_hidden()
    assert await chat_store.get_chat(pool, ids[f"{tag} bicycle repair"], user_id=None) is not None

    await open_chat.hover()
    await delete.click()
    await dialog.get_by_role("button", name="Delete").click()
    await expect(links.filter(has_text=f"{tag} bicycle repair")).to_have_count(0)
    assert await chat_store.get_chat(pool, ids[f"{tag} bicycle repair"], user_id=None) is None
    # It was the open chat: the view went back to a new-chat draft.
    await expect(page.locator("#chat-title")).to_have_text("New chat")
    await expect(page.locator(".empty-state")).to_be_visible()
    assert "#/chat/" not in page.url


async def test_show_summary(ui: UI, chat_services: Services) -> None:
    pool = chat_services.database.pool
    turns = [(f"question {i}", {"content": f"answer {i}"}) for i in range(7)]
    chat_id = await seed_chat(pool, "A long chat with a summary", turns)
    messages = await chat_store.list_messages(pool, chat_id)
    summary = "The user asked seven numbered questions.\n\nEach got a numbered answer."
    assert await chat_store.set_summary(pool, chat_id, summary, messages[3]["message_id"])
    bare_id = await seed_chat(pool, "A short chat", [("hi", {"content": "hello"})])

    await ui.open(f"#/chat/{chat_id}")
    page = ui.page
    await expect(page.locator(".msg-user")).to_have_count(7)
    await page.get_by_role("button", name="Show summary").click()
    dialog = page.locator("#summary-dialog")
    await expect(dialog).to_be_visible()
    await expect(dialog.locator("#summary-text p")).to_have_text(
        ["The user asked seven numbered questions.", "Each got a numbered answer."]
    )
    await expect(dialog.locator("#summary-meta")).to_have_text(
        "Covers the first 4 of 14 messages; the assistant reads the rest word for word."
    )
    await ui.shot("desktop-light-summary")
    await page.keyboard.press("Escape")
    await expect(dialog).to_be_hidden()

    await ui.open(f"#/chat/{bare_id}")
    await page.get_by_role("button", name="Show summary").click()
    await expect(dialog).to_contain_text("This chat has no summary yet")
    await dialog.get_by_role("button", name="Close the summary").click()
    await expect(dialog).to_be_hidden()


# --- safety --------------------------------------------------------------------------------------

XSS_REPLY = """Here you go: <img src=x onerror="alert('img')">
and [click me](javascript:alert('link'))
and <a href="javascript:alert('a')" onclick="alert('click')">raw link</a>.

<script>alert('script')</script>

<iframe src="javascript:alert('frame')"></iframe>

[JaVaScRiPt link](JAVASCRIPT:alert('case')) ![picture](javascript:alert('image'))
[a safe link](https://example.com/page)
"""
INERT_CHECK = """() => {
  const box = document.getElementById("messages");
  return {
    handlers: [...box.querySelectorAll("*")].flatMap((el) =>
        [...el.attributes].map((a) => a.name).filter((name) => name.startsWith("on"))),
    badLinks: [...box.querySelectorAll("[href], [src]")]
        .map((el) => el.getAttribute("href") || el.getAttribute("src"))
        .filter((url) => /^\\s*(javascript|data|vbscript):/i.test(url)),
    dangerous: box.querySelectorAll("script, iframe, img, object, embed, style").length,
  };
}"""


async def test_an_xss_payload_in_a_reply_is_rendered_inert(ui: UI, model) -> None:
    model.push({"text": XSS_REPLY})
    page = ui.page
    response = await page.goto(ui.url + "/")
    assert response is not None
    headers = response.headers
    assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    for part in ("script-src 'self'", "object-src 'none'", "frame-ancestors 'none'"):
        assert part in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"

    await ui.send("<b onmouseover=\"alert('user')\">Show me some HTML</b>")
    reply = ui.assistant()
    await expect(reply).to_have_attribute("data-status", "complete")
    await expect(page.locator(".msg-user .bubble")).to_have_text(
        "<b onmouseover=\"alert('user')\">Show me some HTML</b>"
    )

    for attempt in ("live", "after reload"):
        markdown = reply.locator(".markdown")
        # Raw HTML is shown as the text it is, never interpreted.
        await expect(markdown).to_contain_text("<script>alert('script')</script>")
        await expect(markdown).to_contain_text("<img src=x onerror=\"alert('img')\">")
        assert not await markdown.get_by_text("click me").evaluate("a => a.hasAttribute('href')")
        safe = markdown.get_by_role("link", name="a safe link")
        await expect(safe).to_have_attribute("href", "https://example.com/page")
        await expect(safe).to_have_attribute("target", "_blank")
        await expect(safe).to_have_attribute("rel", "noopener noreferrer")
        await markdown.get_by_text("click me").click()  # a click does nothing either
        state = await page.evaluate(INERT_CHECK)
        assert state == {"handlers": [], "badLinks": [], "dangerous": 0}, attempt
        await page.reload()
        reply = ui.assistant()
        await expect(reply).to_have_attribute("data-status", "complete")
    assert ui.dialogs == []


# The local model writes its arithmetic in LaTeX ("What's 15% of 240?" came back as
# "\\[ \\frac{15}{100} \\times 240 = 36 \\]"), shown raw until math was typeset.
MATH_REPLY = r"""15% of 240:
\[ \frac{15}{100} \times 240 = 36 \]

Inline, \(x^2 + 1\) and $\sqrt{2}$; on its own:

$$\sum_{k=1}^{n} k = \frac{n(n+1)}{2}$$

Prices stay prices: $5 and $10, and \$3.

Hostile: \(\href{javascript:alert('href')}{click}\) and $\htmlId{messages}{x}$ and
\( x </math><img src=x onerror="alert('img')"> \)."""


async def test_math_is_typeset_and_hostile_tex_stays_inert(ui: UI, model) -> None:
    model.push({"text": MATH_REPLY})
    page = ui.page
    await ui.open()
    await ui.send("What's 15% of 240?")
    reply = ui.assistant()
    await expect(reply).to_have_attribute("data-status", "complete")
    for attempt in ("live", "after reload"):
        markdown = reply.locator(".markdown")
        # Two shown on their own lines, two in the text, and the markup posing as TeX as the
        # characters it is.
        await expect(markdown.locator("math")).to_have_count(5)
        await expect(markdown.locator('math[display="block"]')).to_have_count(2)
        assert await markdown.locator("math mfrac").count() == 2
        await expect(markdown.locator("math msqrt")).to_have_count(1)
        text = await markdown.inner_text()
        assert "\\frac" not in text and "\\[" not in text
        assert "$5 and $10, and $3." in text
        # TeX the typesetter will not make safe is left as the text it is.
        assert "\\href{javascript:alert('href')}{click}" in text
        assert await markdown.locator("a").count() == 0
        assert await page.locator("#messages").count() == 1
        state = await page.evaluate(INERT_CHECK)
        assert state == {"handlers": [], "badLinks": [], "dangerous": 0}, attempt
        await page.reload()
        reply = ui.assistant()
        await expect(reply).to_have_attribute("data-status", "complete")
    await ui.shot("desktop-light-math")
    assert ui.dialogs == []


# --- citations -----------------------------------------------------------------------------------


async def test_citations_link_to_their_sources_with_a_popover(
    ui: UI, chat_services: Services
) -> None:
    # The reply is saved with its sources as a web answer is; until the web search tool is in
    # every checkout this is how the browser test gets one (the rendering is the same).
    hostile = {"n": 5, "title": "<img src=x onerror=alert(1)>", "url": "javascript:alert(1)"}
    content = SHOWCASE_ANSWER + "\n\nA hostile source [5]. An unknown one [9]. Code: `x[1]`."
    chat_id = await seed_chat(
        chat_services.database.pool,
        "Python 3.13 with sources",
        [
            (
                "What changed in Python 3.13?",
                {"content": content, "sources": [*SHOWCASE_SOURCES, hostile]},
            )
        ],
    )
    await ui.open(f"#/chat/{chat_id}")
    page = ui.page
    reply = ui.assistant()
    cites = reply.locator(".markdown a.cite")
    await expect(cites).to_have_count(5)  # [1] [2] [3] [1] [4], in the table too
    first = cites.first
    await expect(first).to_have_text("1")
    await expect(first).to_have_attribute("href", SHOWCASE_SOURCES[0]["url"])
    await expect(first).to_have_attribute("target", "_blank")
    await expect(first).to_have_attribute("rel", "noopener noreferrer")
    for link in await cites.all():
        n = int(await link.inner_text())
        await expect(link).to_have_attribute("href", SHOWCASE_SOURCES[n - 1]["url"])

    popover = page.locator("#cite-popover")
    await expect(popover).to_be_hidden()
    await first.hover()
    await expect(popover).to_be_visible()
    await expect(popover).to_contain_text(SHOWCASE_SOURCES[0]["title"])
    await expect(popover).to_contain_text(SHOWCASE_SOURCES[0]["url"])
    await expect(first).to_have_attribute("aria-describedby", "cite-popover")
    await ui.shot("desktop-light-citation-popover")
    await page.mouse.move(5, 5)
    await expect(popover).to_be_hidden()
    second = cites.filter(has_text="2")
    await second.focus()  # keyboard focus shows it too
    await expect(popover).to_contain_text(SHOWCASE_SOURCES[1]["title"])
    await page.keyboard.press("Escape")
    await expect(popover).to_be_hidden()

    # The hostile source is neither a link nor markup; unknown numbers and code stay text.
    hostile_cite = reply.locator(".markdown .cite", has_text="5")
    await expect(hostile_cite).to_have_count(1)
    assert await hostile_cite.evaluate("el => el.tagName") == "SPAN"
    await expect(reply.locator(".markdown")).to_contain_text("An unknown one [9]")
    await expect(reply.locator(".markdown code", has_text="x[1]")).to_have_count(1)

    items = reply.locator(".sources-list li")
    await expect(items).to_have_count(5)
    await expect(reply.locator(".sources-title")).to_have_text("Sources")
    for index, source in enumerate(SHOWCASE_SOURCES):
        item = items.nth(index)
        await expect(item).to_have_attribute("value", str(source["n"]))
        link = item.locator("a.source-link")
        await expect(link).to_have_text(source["title"])
        await expect(link).to_have_attribute("href", source["url"])
        await expect(link).to_have_attribute("rel", "noopener noreferrer")
    await expect(items.nth(4).locator("a")).to_have_count(0)
    await expect(items.nth(4)).to_contain_text("<img src=x onerror=alert(1)>")
    state = await page.evaluate(INERT_CHECK)
    assert state == {"handlers": [], "badLinks": [], "dangerous": 0}


async def test_research_mode_shows_its_plan_and_a_report_with_working_citations(
    browser: Browser, web_ui_url: str, model: ScriptedProvider
) -> None:
    ui, context = await new_ui(browser, web_ui_url)
    try:
        await ui.open()
        page = ui.page
        research = page.get_by_role("checkbox", name="Research")
        await expect(research).to_be_enabled()
        await research.check()
        model.push(
            {"text": json.dumps({"sub_questions": ["Where does tram 28 run?", "Who drives it?"]})},
            {"text": json.dumps({"answered": [1]})},
            {"text": json.dumps({"answered": []})},
        )  # no check after the last round: its part says what the sources lack

        def part(model_name: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
            if "Who drives it?\n</question>" in messages[-1]["content"]:
                return {"text": "I couldn't find who drives tram 28."}
            return {"text": "It runs from Martim Moniz to Campo de Ourique [1].", "delay": 0.3}

        model.responder = part
        await ui.send("Where does tram 28 run, and who drives it?")
        reply = ui.assistant()
        await expect(reply).to_have_attribute("data-status", "complete", timeout=30_000)
        assert [c["model"] for c in model.calls][:2] == ["utility", "utility"]
        markdown = reply.locator(".markdown")
        await expect(markdown.locator("h1")).to_have_text(
            "Where does tram 28 run, and who drives it?"
        )
        await expect(markdown.locator("h2")).to_have_text(
            ["Where does tram 28 run?", "Not found", "Sources"]
        )
        await expect(markdown.locator("li")).to_have_text(["Who drives it?"])
        saved = (await saved_messages(ui.url, chat_id_of(page)))[1]
        first = next(s for s in saved["sources"] if s["n"] == 1)
        await expect(markdown.locator("a.cite").first).to_have_attribute("href", first["url"])
        await reply.locator(".steps-toggle").click()
        await expect(reply.locator(".step-text")).to_contain_text(
            ["Research plan: 2 sub-questions", "1. Where does tram 28 run?", "2. Who drives it?"]
        )

        # Download: the report as the Markdown file the server makes of it.
        async with page.expect_download() as caught:
            await reply.get_by_role("link", name="Download as Markdown").click()
        download = await caught.value
        assert download.suggested_filename.startswith("where-does-tram-28-run-and-who-drives-it-")
        exported = await asyncio.to_thread(Path(await download.path()).read_text)
        assert exported == saved["content"] + "\n"

        # Print: the print style shows this reply alone, without the app around it.
        await page.evaluate("() => { window.print = () => { window.printed = true; }; }")
        await reply.get_by_role("button", name="Print").click()
        assert await page.evaluate("() => window.printed") is True
        await page.emulate_media(media="print")
        question = page.locator(".msg-user")
        await expect(question).to_be_hidden()
        await expect(page.locator("#sidebar")).to_be_hidden()
        await expect(page.locator("#composer")).to_be_hidden()
        await expect(markdown.locator("h1")).to_be_visible()
        await expect(reply.locator(".msg-actions")).to_be_hidden()
        await page.evaluate("() => window.dispatchEvent(new Event('afterprint'))")
        await expect(question).to_be_visible()  # printing the page prints the whole chat
        await page.emulate_media(media="screen")
    finally:
        await context.close()


async def test_a_web_answer_streams_with_working_citations(
    browser: Browser, web_ui_url: str, model: ScriptedProvider, showcase_chat: uuid.UUID
) -> None:
    ui, context = await new_ui(browser, web_ui_url)
    try:
        await ui.open()
        page = ui.page
        web = page.get_by_role("checkbox", name="Use web tool")
        await expect(web).to_be_enabled()
        await expect(page.locator("#web-reason")).to_be_empty()
        await web.check()
        model.push(
            tool_call("web_search", query="Lisbon tram 28 route", context=""),
            {"text": json.dumps({"reason": "The route is stated.", "enough": "yes"})},
            {
                "chunks": [
                    "Tram 28 runs from Martim Moniz ",
                    "to Campo de Ourique【1†L2】 ",
                    "in small 1930s trams [2].",
                ],
                "delay": 0.3,
            },
        )
        await ui.send("Where does tram 28 go?")
        reply = ui.assistant()
        await expect(reply.locator(".steps-live .step-current")).to_contain_text(
            "Writing the answer"
        )
        await expect(reply).to_have_attribute("data-status", "complete", timeout=20_000)
        assert model.calls[0]["messages"][-1]["content"].endswith(f"<note>{WEB_NOTE}</note>")

        saved = (await saved_messages(ui.url, chat_id_of(page)))[1]
        assert saved["content"] == (
            "Tram 28 runs from Martim Moniz to Campo de Ourique[1] in small 1930s trams [2]."
        )
        sources = saved["sources"]
        assert {s["url"] for s in sources} <= {url for _, url, _ in TRAM_PAGES.values()}
        for attempt in ("live", "after reload"):
            cites = reply.locator(".markdown a.cite")
            await expect(cites).to_have_text(["1", "2"])
            for n, link in enumerate(await cites.all(), start=1):
                await expect(link).to_have_attribute("href", sources[n - 1]["url"])
                await expect(link).to_have_attribute("rel", "noopener noreferrer")
            await cites.first.hover()
            popover = page.locator("#cite-popover")
            await expect(popover).to_contain_text(sources[0]["title"])
            await expect(popover).to_contain_text(sources[0]["url"])
            items = reply.locator(".sources-list a.source-link")
            await expect(items).to_have_text([s["title"] for s in sources])
            await reply.locator(".steps-toggle").click()
            await expect(reply.locator(".step-text")).to_contain_text(
                ["Searching the web for “Lisbon tram 28 route”"]
            )
            if attempt == "live":
                await ui.shot("desktop-light-web-answer")
                await page.reload()
                reply = ui.assistant()

        # The README's picture (docs/screenshot.png is a copy of it): the showcase chat with a
        # source's popover open, on a server whose web search is on.
        await ui.open(f"#/chat/{showcase_chat}")
        await page.locator(".markdown a.cite").nth(1).hover()
        await expect(page.locator("#cite-popover")).to_be_visible()
        await ui.shot("desktop-light-readme")
    finally:
        await context.close()
    check_clean(ui)


# --- memory --------------------------------------------------------------------------------------


async def wait_until(check: Any, within: float = 5.0) -> float:
    """Poll the async `check()` until it is true; returns the seconds it took."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while not await check():
        assert loop.time() - started < within, f"not true within {within} s"
        await asyncio.sleep(0.05)
    return loop.time() - started


def memory_item(page: Page, content: str):
    return page.locator(".memory-item", has=page.locator(".memory-content", has_text=content))


async def open_memory_page(ui: UI, search: str = "") -> None:
    await ui.open()
    page = ui.page
    await page.get_by_role("link", name="Memory", exact=True).click()
    await expect(page).to_have_url(re.compile(r"#/memory$"))
    await expect(page.locator("#chat-title")).to_have_text("Memory")
    await expect(page.locator("#memory-list")).to_have_attribute("aria-busy", "false")
    if search:
        await page.get_by_role("searchbox", name="Search memories").fill(search)
        await expect(page.locator("#memory-count")).to_contain_text(f"match “{search}”")


async def test_the_memory_page_lists_searches_edits_and_shows_history(
    ui: UI, chat_services: Services
) -> None:
    pool, embedder = chat_services.database.pool, chat_services.embedder
    tag = uuid.uuid4().hex[:8]
    chat_id = await seed_chat(
        pool,
        f"Moving house {tag}",
        [
            (f"I live in Lisbon, near the river ({tag}).", {"content": "Lovely city."}),
            (f"We moved to Porto last week! My cat Miso came too ({tag}).", {"content": "Nice!"}),
        ],
    )
    first, second = await user_message_ids(pool, chat_id)
    now = datetime.now().astimezone()
    porto = await seed_memory(
        pool, embedder, f"The user lives in Porto {tag}", "We moved to Porto last week!",
        chat_id=chat_id, message_id=second, created_at=now - timedelta(days=1),
    )  # fmt: skip
    lisbon = await seed_memory(
        pool, embedder, f"The user lives in Lisbon {tag}", "I live in Lisbon",
        chat_id=chat_id, message_id=first, created_at=now - timedelta(days=9), valid_to=now,
        superseded_by=porto,
    )  # fmt: skip
    cat = await seed_memory(
        pool, embedder, f"The user has a cat called Miso {tag}", "My cat Miso came too",
        chat_id=chat_id, message_id=second, created_at=now,
    )  # fmt: skip
    hostile = f"<img src=x onerror=alert(1)> {tag}"
    await seed_memory(pool, embedder, hostile, "<script>alert(2)</script>")

    await open_memory_page(ui, tag)
    page = ui.page
    items = page.locator(".memory-item")
    # Current memories only, newest first; each with its quote and a link to its message.
    await expect(items.locator(".memory-content")).to_have_text(
        [hostile, f"The user has a cat called Miso {tag}", f"The user lives in Porto {tag}"]
    )
    await expect(page.locator("#memory-count")).to_have_text(f"3 memories match “{tag}”")
    porto_item = memory_item(page, f"lives in Porto {tag}")
    await expect(porto_item.locator(".memory-quote")).to_have_text("We moved to Porto last week!")
    source = porto_item.get_by_role("link", name=re.compile("Your message"))
    await expect(source).to_have_attribute("href", f"#/chat/{chat_id}/{second}")
    await expect(source).to_contain_text(f"Moving house {tag}")  # the chat's title
    # Memory text and quotes are the user's words: shown as text, never markup.
    hostile_item = memory_item(page, hostile)
    await expect(hostile_item.locator(".memory-quote")).to_have_text("<script>alert(2)</script>")
    await expect(hostile_item).to_contain_text("Its chat was deleted")  # no source chat
    assert await page.locator("#memory-list img, #memory-list script").count() == 0

    # The search matches quotes too, case-insensitively.
    await page.get_by_role("searchbox", name="Search memories").fill("MY CAT MIso came")
    await expect(items.locator(".memory-content")).to_have_text(
        [f"The user has a cat called Miso {tag}"]
    )
    await page.get_by_role("searchbox", name="Search memories").fill(tag)
    await expect(items).to_have_count(3)

    # History: the replaced fact, struck through, says what replaced it.
    await page.get_by_role("checkbox", name="Show replaced facts").check()
    await expect(items).to_have_count(4)
    old = memory_item(page, f"lives in Lisbon {tag}")
    await expect(old).to_have_class(re.compile(r"\breplaced\b"))
    await expect(old.locator(".memory-content s")).to_have_text(f"The user lives in Lisbon {tag}")
    await expect(old.locator(".memory-replaced")).to_contain_text(
        f"Replaced by “The user lives in Porto {tag}”"
    )
    await expect(old.get_by_role("button", name=re.compile("^Edit"))).to_have_count(0)
    await ui.shot("desktop-light-memory-history")
    await page.get_by_role("checkbox", name="Show replaced facts").uncheck()
    await expect(items).to_have_count(3)
    assert (await memory_row(pool, lisbon))["superseded_by"] == porto

    # Inline edit: Esc cancels, Enter saves (re-embedded on the server).
    await page.get_by_role(
        "button", name=f"Edit memory: The user has a cat called Miso {tag}"
    ).click()
    editor = page.get_by_role("textbox", name="Memory", exact=True)
    await expect(editor).to_be_focused()
    await expect(editor).to_have_value(f"The user has a cat called Miso {tag}")
    await editor.fill("something else")
    await editor.press("Escape")
    await expect(editor).to_have_count(0)
    assert (await memory_row(pool, cat))["content"] == f"The user has a cat called Miso {tag}"
    edit = page.get_by_role("button", name=f"Edit memory: The user has a cat called Miso {tag}")
    await edit.click()
    await editor.fill(f"The user has two cats, Miso and Tofu {tag}")
    await editor.press("Enter")
    await expect(editor).to_have_count(0)
    await expect(memory_item(page, f"two cats, Miso and Tofu {tag}")).to_have_count(1)
    await wait_until(lambda: _content_is(pool, cat, f"The user has two cats, Miso and Tofu {tag}"))
    await expect(
        page.get_by_role("button", name=f"Edit memory: The user has two cats, Miso and Tofu {tag}")
    ).to_be_focused()
    await page.reload()  # saved on the server, not only on screen
    await page.get_by_role("searchbox", name="Search memories").fill("Tofu")
    await expect(items.locator(".memory-content")).to_have_text(
        [f"The user has two cats, Miso and Tofu {tag}"]
    )


async def _content_is(pool: Any, memory_id: uuid.UUID, content: str) -> bool:
    row = await memory_row(pool, memory_id)
    return row is not None and row["content"] == content


async def _gone(pool: Any, memory_id: uuid.UUID) -> bool:
    return await memory_row(pool, memory_id) is None


async def test_deleting_a_memory_waits_for_undo_and_is_sent_when_leaving(
    ui: UI, chat_services: Services
) -> None:
    pool, embedder = chat_services.database.pool, chat_services.embedder
    tag = uuid.uuid4().hex[:8]
    ids = {}
    for name in ("tea", "chess", "piano", "rowing"):
        ids[name] = await seed_memory(
            pool, embedder, f"The user likes {name} {tag}", f"I like {name}"
        )
    chat_id = await seed_chat(pool, f"Elsewhere {tag}", [("hi", {"content": "hello"})])
    await open_memory_page(ui, tag)
    page = ui.page
    items = page.locator(".memory-item")
    await expect(items).to_have_count(4)
    toast = page.locator(".toast-undo")

    # Delete, then Undo: the memory comes back and no DELETE is ever sent.
    await page.get_by_role("button", name=f"Delete memory: The user likes tea {tag}").click()
    await expect(memory_item(page, f"likes tea {tag}")).to_have_count(0)
    await expect(page.locator("#memory-count")).to_have_text(f"3 memories match “{tag}”")
    await expect(toast).to_contain_text("Memory deleted")
    await ui.shot("desktop-light-memory-undo")
    await toast.get_by_role("button", name="Undo").click()
    await expect(toast).to_have_count(0)
    await expect(memory_item(page, f"likes tea {tag}")).to_have_count(1)
    await asyncio.sleep(6.5)  # longer than the Undo window
    assert await memory_row(pool, ids["tea"]) is not None

    # Delete and wait: the DELETE goes once the Undo window is over (~6 s), not before.
    await page.get_by_role("button", name=f"Delete memory: The user likes tea {tag}").click()
    await asyncio.sleep(2)
    assert await memory_row(pool, ids["tea"]) is not None, "deleted before the Undo ran out"
    await wait_until(lambda: _gone(pool, ids["tea"]), within=8)
    await expect(toast).to_have_count(0)

    # Leaving the page for a chat sends the pending delete at once.
    await page.get_by_role("button", name=f"Delete memory: The user likes chess {tag}").click()
    await expect(toast).to_have_count(1)
    await page.locator(".chat-link", has_text=f"Elsewhere {tag}").click()
    await expect(page.locator("#chat-title")).to_have_text(f"Elsewhere {tag}")
    assert await wait_until(lambda: _gone(pool, ids["chess"]), within=3) < 3
    await expect(toast).to_have_count(0)
    assert str(chat_id) in page.url

    # So does leaving the app itself (a reload here; closing the tab is the same pagehide).
    await page.get_by_role("link", name="Memory", exact=True).click()
    await page.get_by_role("searchbox", name="Search memories").fill(tag)
    await expect(items).to_have_count(2)
    await page.get_by_role("button", name=f"Delete memory: The user likes piano {tag}").click()
    await page.reload()
    assert await wait_until(lambda: _gone(pool, ids["piano"]), within=3) < 3
    assert await memory_row(pool, ids["rowing"]) is not None


async def test_export_pause_and_forget_everything(ui: UI, chat_services: Services) -> None:
    pool, embedder = chat_services.database.pool, chat_services.embedder
    tag = uuid.uuid4().hex[:8]
    current = await seed_memory(pool, embedder, f"The user plays the cello {tag}", "I play cello")
    await seed_memory(
        pool, embedder, f"The user plays the violin {tag}", "I play violin",
        valid_to=datetime.now().astimezone(), superseded_by=current,
    )  # fmt: skip
    doomed = await seed_memory(pool, embedder, f"The user hates olives {tag}", "I hate olives")
    await open_memory_page(ui)
    page = ui.page

    # Export downloads every memory as JSON, replaced ones too; a delete still waiting for its
    # Undo is sent first, so the file does not hold it.
    await page.get_by_role("button", name=f"Delete memory: The user hates olives {tag}").click()
    async with page.expect_download() as download_info:
        await page.get_by_role("link", name="Export").click()
    download = await download_info.value
    assert download.suggested_filename == "resolveai-memories.json"
    exported = json.loads(await asyncio.to_thread(Path(await download.path()).read_text))
    contents = {m["content"] for m in exported["memories"]}
    assert {f"The user plays the cello {tag}", f"The user plays the violin {tag}"} <= contents
    assert f"The user hates olives {tag}" not in contents
    assert await memory_row(pool, doomed) is None

    # Pause memory: saved on the server (every chat reads it), and said on the page.
    switch = page.get_by_role("switch", name="Pause memory")
    async with httpx.AsyncClient(base_url=ui.url) as client:
        try:
            await expect(switch).not_to_be_checked()
            await switch.check()
            await expect(page.locator("#memory-paused-note")).to_be_visible()
            await wait_until(lambda: _settings_say(client, paused=True))
            await page.reload()
            await expect(switch).to_be_checked()
            await ui.shot("desktop-light-memory-paused")
            await page.get_by_role("button", name="New chat").click()
            await expect(page.locator(".empty-state")).to_contain_text("Memory is paused")
            await page.get_by_role("link", name="Memory", exact=True).click()
            await switch.uncheck()
            await expect(page.locator("#memory-paused-note")).to_be_hidden()
            await wait_until(lambda: _settings_say(client, paused=False))
        finally:
            await client.patch("/api/settings", json={"memory_paused": False})

    # Forget everything asks first; Cancel keeps every memory.
    before = await count_memories(pool)
    assert before >= 2
    forget = page.get_by_role("button", name="Forget everything")
    await forget.click()
    dialog = page.locator("#confirm-dialog")
    await expect(dialog).to_be_visible()
    await expect(dialog).to_contain_text("Every memory will be deleted")
    await expect(dialog.locator("#confirm-option")).to_be_hidden()  # no checkbox here
    await dialog.get_by_role("button", name="Cancel").click()
    await expect(dialog).to_be_hidden()
    await expect(forget).to_be_focused()
    assert await count_memories(pool) == before

    await forget.click()
    await dialog.get_by_role("button", name="Forget everything").click()
    await expect(page.locator(".toast")).to_contain_text(f"Forgot {before} memories")
    assert await count_memories(pool) == 0
    empty = page.locator(".memory-empty")
    await expect(empty).to_contain_text("Nothing remembered yet")
    await expect(empty).to_contain_text(
        "Tell me about yourself in any chat; what you state is saved here with your own words"
        " as evidence."
    )
    await expect(page.locator("#memory-count")).to_have_text("0 memories")
    await ui.shot("desktop-light-memory-empty")


async def _settings_say(client: httpx.AsyncClient, paused: bool) -> bool:
    response = await client.get("/api/settings")
    return response.status_code == 200 and response.json()["memory_paused"] is paused


async def test_a_memory_links_to_its_message_which_is_highlighted(
    ui: UI, chat_services: Services
) -> None:
    pool, embedder = chat_services.database.pool, chat_services.embedder
    tag = uuid.uuid4().hex[:8]
    turns = [
        (f"question {i}\n" + "filler line\n" * 3, {"content": f"answer {i}\n\n" + "More. " * 80})
        for i in range(8)
    ]
    turns[1] = (f"By the way, I work as a nurse at the night shift ({tag}).", {"content": "Noted."})
    chat_id = await seed_chat(pool, f"A long chat {tag}", turns)
    source = (await user_message_ids(pool, chat_id))[1]
    quote = "I work as a nurse"
    await seed_memory(
        pool, embedder, f"The user works as a nurse {tag}", quote,
        chat_id=chat_id, message_id=source,
    )  # fmt: skip
    await open_memory_page(ui, tag)
    page = ui.page
    await page.get_by_role("link", name=re.compile("Your message")).click()

    await expect(page).to_have_url(re.compile(rf"#/chat/{chat_id}/{source}$"))
    await expect(page.locator("#chat-title")).to_have_text(f"A long chat {tag}")
    message = page.locator(f'.msg-user[data-message-id="{source}"]')
    await expect(message).to_have_class(re.compile(r"\bhighlighted\b"))
    await expect(message).to_be_in_viewport()  # scrolled to: it is far above the bottom
    await expect(message.locator("mark.quote-mark")).to_have_text(quote)
    await expect(message.locator(".bubble")).to_have_text(
        f"By the way, I work as a nurse at the night shift ({tag})."
    )
    await expect(page.locator(".msg.highlighted")).to_have_count(1)
    outline = await message.locator(".bubble").evaluate("b => getComputedStyle(b).outlineStyle")
    assert outline == "solid"
    await ui.shot("desktop-light-memory-source")

    # The address alone does it too (a reload, or a link from elsewhere).
    await page.reload()
    await expect(page.locator(f'.msg-user[data-message-id="{source}"]')).to_have_class(
        re.compile(r"\bhighlighted\b")
    )
    await expect(page.locator(f'.msg-user[data-message-id="{source}"]')).to_be_in_viewport()


async def test_a_reply_shows_the_memories_it_used(ui: UI, model, chat_services: Services) -> None:
    pool, embedder = chat_services.database.pool, chat_services.embedder
    tag = uuid.uuid4().hex[:8]
    # Saved: from the message's `memories`.
    bees = await seed_memory(
        pool, embedder, f"The user keeps bees in the garden {tag}", "I keep bees"
    )
    hives = await seed_memory(pool, embedder, f"The user has three hives {tag}", "three hives")
    chat_id = await seed_chat(
        pool,
        f"Honey {tag}",
        [
            ("When do I harvest honey?", {"content": "Late summer.", "memory_ids": [bees, hives]}),
            ("Thanks", {"content": "You're welcome."}),
        ],
    )
    await ui.open(f"#/chat/{chat_id}")
    page = ui.page
    used = ui.assistant(0).locator(".used-memories")
    toggle = used.get_by_role("button", name="Used 2 memories")
    await expect(toggle).to_have_attribute("aria-expanded", "false")
    await expect(used.locator(".used-memories-list")).to_be_hidden()
    await expect(ui.assistant(1).locator(".used-memories")).to_be_hidden()  # used none
    await toggle.click()
    await expect(toggle).to_have_attribute("aria-expanded", "true")
    await expect(used.locator(".used-memories-list li")).to_have_text(
        [f"The user keeps bees in the garden {tag}", f"The user has three hives {tag}"],
    )
    await ui.shot("desktop-light-used-memories")
    await used.get_by_role("link", name="Manage memories").click()
    await expect(page).to_have_url(re.compile(r"#/memory$"))

    # Streaming: from the `memories` event, before the reply is saved.
    model.push({"chunks": ["Your bees ", "need water ", "in summer."], "delay": 0.5})
    await ui.open()
    await ui.send(f"How should I look after the bees in my garden? {tag}")
    reply = ui.assistant()
    live = reply.get_by_role("button", name=re.compile(r"^Used \d+ memor(y|ies)$"))
    await expect(live).to_be_visible()
    assert await reply.get_attribute("data-status") is None  # still streaming
    await live.click()
    await expect(reply.locator(".used-memories-list")).to_contain_text(
        f"The user keeps bees in the garden {tag}"
    )
    await expect(reply).to_have_attribute("data-status", "complete")
    saved = (await saved_messages(ui.url, chat_id_of(page)))[1]
    names = [m["content"] for m in saved["memories"]]
    assert f"The user keeps bees in the garden {tag}" in names
    label = f"Used {len(names)} {'memory' if len(names) == 1 else 'memories'}"
    await expect(reply.locator(".used-memories-toggle")).to_have_text(label)
    await expect(reply.locator(".used-memories-list li")).to_have_text(names)
    await page.reload()
    await expect(ui.assistant().locator(".used-memories-toggle")).to_have_text(label)


async def test_a_temporary_chat_is_sent_as_such_and_marked(
    ui: UI, model, chat_services: Services
) -> None:
    pool = chat_services.database.pool
    page = ui.page
    bodies: list[dict[str, Any]] = []
    page.on(
        "request",
        lambda request: (
            bodies.append(json.loads(request.post_data or "{}"))
            if request.method == "POST" and request.url.endswith("/api/messages")
            else None
        ),
    )
    model.push({"text": "This stays between us."}, {"text": "An ordinary reply."})
    await ui.open()
    toggle = page.get_by_role("button", name="Temporary chat")
    await expect(toggle).to_have_attribute("aria-pressed", "false")
    await expect(page.locator("#chat-badge")).to_be_hidden()
    await toggle.click()
    await expect(toggle).to_have_attribute("aria-pressed", "true")
    await expect(page.locator(".empty-state h2")).to_have_text("Temporary chat")
    await expect(page.locator("#chat-badge")).to_be_visible()
    await ui.shot("desktop-light-temporary-draft")
    question = f"Just between us {uuid.uuid4().hex[:6]}"
    await ui.send(question)
    await expect(ui.assistant()).to_have_attribute("data-status", "complete")
    chat_id = chat_id_of(page)
    assert bodies[-1] == {"content": question, "use_web": False, "temporary": True}
    assert (await chat_store.get_chat(pool, uuid.UUID(chat_id), user_id=None))["temporary"] is True
    # Marked in the header and in the sidebar; the toggle is for new chats only.
    await expect(page.locator("#chat-badge")).to_have_text("Temporary")
    await expect(page.locator("#chat-badge")).to_be_visible()
    await expect(toggle).to_be_hidden()
    link = page.locator(f'.chat-link[href="#/chat/{chat_id}"]')
    await expect(link.locator(".badge-temporary")).to_have_text("Temporary")
    await page.reload()  # the server says so too (GET /api/chats)
    await expect(page.locator("#chat-badge")).to_be_visible()
    await expect(link.locator(".badge-temporary")).to_be_visible()

    # Its delete dialog has nothing to forget.
    await link.hover()
    await page.get_by_role("button", name=f"Delete chat: {question}").click()
    dialog = page.locator("#confirm-dialog")
    await expect(dialog).to_contain_text("It was a temporary chat")
    await expect(dialog.locator("#confirm-option")).to_be_hidden()
    await dialog.get_by_role("button", name="Cancel").click()

    # A new chat starts as an ordinary one again.
    await page.get_by_role("button", name="New chat").click()
    await expect(toggle).to_have_attribute("aria-pressed", "false")
    await expect(page.locator("#chat-badge")).to_be_hidden()
    await ui.send("An ordinary question")
    await expect(ui.assistant()).to_have_attribute("data-status", "complete")
    assert "temporary" not in bodies[-1]
    other = chat_id_of(page)
    assert (await chat_store.get_chat(pool, uuid.UUID(other), user_id=None))["temporary"] is False
    await expect(page.locator("#chat-badge")).to_be_hidden()
    await expect(page.locator(f'.chat-link[href="#/chat/{other}"] .badge')).to_have_count(0)


async def test_deleting_a_chat_can_also_forget_its_memories(
    ui: UI, chat_services: Services
) -> None:
    pool, embedder = chat_services.database.pool, chat_services.embedder
    tag = uuid.uuid4().hex[:8]
    memories = {}
    for name in ("keep", "forget"):
        chat_id = await seed_chat(pool, f"{tag} {name}", [(f"I like {name}", {"content": "OK"})])
        (message_id,) = await user_message_ids(pool, chat_id)
        memories[name] = await seed_memory(
            pool, embedder, f"The user likes {name} {tag}", f"I like {name}",
            chat_id=chat_id, message_id=message_id,
        )  # fmt: skip
    page = ui.page
    await ui.open()
    dialog = page.locator("#confirm-dialog")
    option = dialog.get_by_role("checkbox", name="Also forget the memories saved from this chat")

    # Unticked (the default): the chat goes, its memory stays without its source.
    await page.locator(".chat-link", has_text=f"{tag} keep").hover()
    await page.get_by_role("button", name=f"Delete chat: {tag} keep").click()
    await expect(dialog).to_contain_text("Memories saved from it stay on the Memory page")
    await expect(dialog).not_to_contain_text("remembers about you stays")
    await expect(option).not_to_be_checked()
    await ui.shot("desktop-light-delete-chat")
    await dialog.get_by_role("button", name="Delete").click()
    await expect(page.locator(".chat-link", has_text=f"{tag} keep")).to_have_count(0)
    kept = await memory_row(pool, memories["keep"])
    assert kept is not None and kept["source_chat_id"] is None

    # Ticked: the memory goes with the chat.
    await page.locator(".chat-link", has_text=f"{tag} forget").hover()
    await page.get_by_role("button", name=f"Delete chat: {tag} forget").click()
    await option.check()
    await dialog.get_by_role("button", name="Delete").click()
    await expect(page.locator(".chat-link", has_text=f"{tag} forget")).to_have_count(0)
    assert await memory_row(pool, memories["forget"]) is None

    # The box starts unticked every time.
    await page.locator(".chat-link").first.hover()
    await page.locator(".chat-item").first.get_by_role("button", name=re.compile("^Delete")).click()
    await expect(option).not_to_be_checked()
    await dialog.get_by_role("button", name="Cancel").click()

    await page.get_by_role("link", name="Memory", exact=True).click()
    await page.get_by_role("searchbox", name="Search memories").fill(tag)
    await expect(page.locator(".memory-item .memory-content")).to_have_text(
        [f"The user likes keep {tag}"]
    )
    await expect(page.locator(".memory-item")).to_contain_text("Its chat was deleted")


# --- layouts, themes, screenshots ----------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_desktop_and_phone_layouts(
    browser: Browser,
    ui_url: str,
    showcase_chat: uuid.UUID,
    showcase_memories: uuid.UUID,
    scheme: str,
) -> None:
    chat_id = showcase_chat
    desktop, context = await new_ui(browser, ui_url, DESKTOP, scheme)
    try:
        await desktop.open(f"#/chat/{chat_id}")
        page = desktop.page
        await expect(page.locator(".sources-list li")).to_have_count(4)
        await expect(page.locator("#sidebar")).to_be_visible()
        await expect(page.locator("#open-sidebar")).to_be_hidden()
        background = await page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == ("rgb(255, 255, 255)" if scheme == "light" else "rgb(27, 28, 31)")
        await page.locator(".steps-toggle").click()
        await desktop.shot(f"desktop-{scheme}")
        await page.locator(".steps-toggle").click()
        await page.locator("#new-chat").click()
        await expect(page.locator(".empty-state")).to_be_visible()
        await desktop.shot(f"desktop-{scheme}-new-chat")
        await page.get_by_role("link", name="Memory", exact=True).click()
        await expect(page.locator(".memory-item")).to_have_count(3)
        await page.get_by_role("checkbox", name="Show replaced facts").check()
        await expect(page.locator(".memory-item")).to_have_count(4)
        await desktop.shot(f"desktop-{scheme}-memory")
    finally:
        await context.close()
    check_clean(desktop)

    phone, context = await new_ui(browser, ui_url, PHONE, scheme)
    try:
        await phone.open(f"#/chat/{chat_id}")
        page = phone.page
        await expect(page.locator(".sources-list li")).to_have_count(4)
        await expect(page.locator("#sidebar")).to_be_hidden()  # collapsed into a drawer
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], "the page scrolls sideways on a phone"
        await phone.shot(f"phone-{scheme}")
        await page.get_by_role("button", name="Open the chat list").click()
        await expect(page.locator("#sidebar")).to_be_visible()
        await expect(page.locator("#chat-filter")).to_be_focused()
        # The drawer has finished sliding in.
        await expect(page.locator("#sidebar")).to_have_css("transform", "none")
        await phone.shot(f"phone-{scheme}-sidebar")
        await page.locator(".chat-link", has_text="Explain Postgres MVCC simply").first.click()
        await expect(page.locator("#sidebar")).to_be_hidden()
        await expect(page.locator("#chat-title")).to_have_text("Explain Postgres MVCC simply")
        # The Memory page from the drawer, and a temporary draft.
        await page.get_by_role("button", name="Open the chat list").click()
        await page.get_by_role("link", name="Memory", exact=True).click()
        await expect(page.locator("#sidebar")).to_be_hidden()
        await expect(page.locator(".memory-item")).to_have_count(3)
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], "the Memory page scrolls sideways on a phone"
        await phone.shot(f"phone-{scheme}-memory")
        await page.get_by_role("button", name="New chat").click()
        await page.get_by_role("button", name="Temporary chat").click()
        await expect(page.locator("#chat-badge")).to_be_visible()
        await phone.shot(f"phone-{scheme}-temporary-draft")
    finally:
        await context.close()
    check_clean(phone)

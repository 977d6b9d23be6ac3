"""Citations, the model's name, the steps line and accessibility in a real browser.

On a touch screen the first tap on `[n]` previews the source with the cited passage and a second
tap opens it; the Sources list shows what the answer cites, the rest behind "n more read"; a
reply names the model that wrote it (and a fallback's note); the steps line shows only when a
tool ran or the reply took over 3 s, steps aside once text streams and lists durations; text
contrast (computed from getComputedStyle in the page) and button targets meet WCAG's minimums.

Same harness as test_ui.py: Debian's Chromium, the real server, database and embedder, the
scripted model; a page that logs an error, opens a dialog or calls another origin fails.
"""

# The fixtures imported from test_ui.py are parameters of the tests here: not redefinitions.
# ruff: noqa: F811

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Any

import pytest
from playwright.async_api import Browser, expect

from core.services import Services
from tests.test_ui import (  # noqa: F401 (browser, ui, ui_url: fixtures)
    DESKTOP,
    PHONE,
    UI,
    browser,
    chat_id_of,
    check_clean,
    new_ui,
    saved_messages,
    tool_call,
    ui,
    ui_url,
)
from tests.ui_fixtures import seed_chat

PAGES = [
    {
        "n": 1,
        "title": "Tram 28 (Lisbon)",
        "url": "https://example.org/lisbon/tram-28",
        "text": "Tram 28 runs from Martim Moniz to Campo de Ourique, through Graça and Alfama.",
    },
    {
        "n": 2,
        "title": "Lisbon by night",
        "url": "https://example.org/lisbon/night",
        "text": "Bairro Alto fills up after ten.",
    },
    {
        "n": 3,
        "title": "Remodelado trams",
        "url": "https://example.org/lisbon/remodelado",
        "text": "The yellow Remodelado trams date from the 1930s and were rebuilt in the 1990s.",
    },
]
ANSWER = "Tram 28 runs from Martim Moniz to Campo de Ourique [1], in 1930s trams [3]."
STEPS = [
    {"text": "Thinking", "elapsed_ms": 10},
    {"text": "Searching the web for “tram 28”", "elapsed_ms": 1000, "tool": "web_search"},
    {"text": "Reading 3 pages", "elapsed_ms": 2500},
    {"text": "Writing the answer from 3 sources", "elapsed_ms": 4000},
]
TOOL_CALLS = [
    {"id": "c1", "name": "web_search", "args": {}, "result": "", "ok": True, "duration_ms": 1400}
]
FALLBACK_NOTE = "The hosted model is unavailable; answered with the local model."

# WCAG's contrast ratio of an element's text (or placeholder) on its effective background: the
# first ancestor with an opaque-enough background, the text colour blended over it.
CONTRAST = """([selector, pseudo]) => {
  const node = document.querySelector(selector);
  if (!node) return null;
  const parse = (value) => {
    const nums = (value.match(/[\\d.]+/g) || []).map(Number);
    if (value.startsWith("color(")) nums.splice(0, 3, ...nums.slice(0, 3).map((v) => v * 255));
    return { r: nums[0], g: nums[1], b: nums[2], a: nums.length > 3 ? nums[3] : 1 };
  };
  let background = null;
  for (let at = node; at; at = at.parentElement) {
    const colour = parse(getComputedStyle(at).backgroundColor);
    if (colour.a > 0.5) { background = colour; break; }
  }
  background = background || { r: 255, g: 255, b: 255, a: 1 };
  const text = parse(getComputedStyle(node, pseudo || null).color);
  const mix = (k) => text[k] * text.a + background[k] * (1 - text.a);
  const luminance = (c) => {
    const [r, g, b] = [c.r, c.g, c.b].map((v) => {
      const s = v / 255;
      return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const a = luminance({ r: mix("r"), g: mix("g"), b: mix("b") });
  const b = luminance(background);
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


async def seed_web_answer(services: Services, **fields: Any) -> uuid.UUID:
    return await seed_chat(
        services.database.pool,
        f"Tram 28 {uuid.uuid4().hex[:6]}",
        [("Where does tram 28 go?", {"content": ANSWER, "sources": PAGES, **fields})],
    )


async def fake_pages(context: Any) -> None:
    """The cited pages, served in the browser: nothing leaves the machine."""

    async def page(route: Any) -> None:
        await route.fulfill(status=200, content_type="text/html", body="<title>page</title>")

    await context.route("https://example.org/**", page)


# --- citations on a touch screen -----------------------------------------------------------------


async def test_a_tap_previews_the_cited_passage_and_a_second_tap_opens_the_page(
    browser: Browser, ui_url: str, chat_services: Services
) -> None:
    chat_id = await seed_web_answer(chat_services)
    phone, context = await new_ui(browser, ui_url, PHONE)
    await fake_pages(context)
    try:
        await phone.open(f"#/chat/{chat_id}")
        page = phone.page
        cite = phone.assistant().locator(".markdown a.cite").first
        await expect(cite).to_have_text("1")
        popover = page.locator("#cite-popover")
        await cite.tap()
        await expect(popover).to_be_visible()
        await expect(popover.locator(".cite-popover-title")).to_have_text(PAGES[0]["title"])
        await expect(popover.locator(".cite-popover-text")).to_have_text(PAGES[0]["text"])
        opener = popover.get_by_role("link", name="Open the page")
        await expect(opener).to_have_attribute("href", PAGES[0]["url"])
        await expect(opener).to_have_attribute("target", "_blank")
        assert len(context.pages) == 1  # the first tap opened nothing
        await phone.shot("phone-light-web-citation-preview")

        async with context.expect_page() as opened:
            await cite.tap()  # the second tap follows the link
        tab = await opened.value
        await tab.wait_for_load_state()
        assert tab.url == PAGES[0]["url"]
        await tab.close()
        await expect(popover).to_be_hidden()
        await expect(page).to_have_url(re.compile(f"#/chat/{chat_id}$"))

        # Another [n] after a preview: its own preview first, again.
        await cite.tap()
        await expect(popover.locator(".cite-popover-title")).to_have_text(PAGES[0]["title"])
        await page.locator(".msg-user .bubble").tap()  # a tap elsewhere closes the preview
        await expect(popover).to_be_hidden()
        other = phone.assistant().locator(".markdown a.cite").nth(1)
        await other.tap()
        await expect(popover.locator(".cite-popover-title")).to_have_text(PAGES[2]["title"])
        await expect(popover.locator(".cite-popover-text")).to_contain_text("1930s")
        assert len(context.pages) == 1
    finally:
        await context.close()
    check_clean(phone)


async def test_hovering_a_web_citation_shows_its_passage(ui: UI, chat_services: Services) -> None:
    chat_id = await seed_web_answer(chat_services)
    await ui.open(f"#/chat/{chat_id}")
    await ui.assistant().locator(".markdown a.cite").first.hover()
    popover = ui.page.locator("#cite-popover")
    await expect(popover).to_be_visible()
    await expect(popover.locator(".cite-popover-text")).to_have_text(PAGES[0]["text"])
    await expect(popover.locator(".cite-popover-open")).to_be_hidden()  # a click opens the page


# --- the Sources list ----------------------------------------------------------------------------


async def test_sources_lists_the_cited_ones_and_folds_the_others(
    ui: UI, chat_services: Services
) -> None:
    chat_id = await seed_web_answer(chat_services)
    await ui.open(f"#/chat/{chat_id}")
    sources = ui.assistant().locator(".sources")
    cited = sources.locator(":scope > .sources-list > li")
    await expect(cited).to_have_count(2)
    await expect(cited.locator("a.source-link")).to_have_text(
        [PAGES[0]["title"], PAGES[2]["title"]]
    )
    await expect(cited.nth(1)).to_have_attribute("value", "3")
    more = sources.locator(".sources-more")
    await expect(more.locator("summary")).to_have_text("1 more read")
    uncited = more.locator("a.source-link")
    await expect(uncited).to_have_text([PAGES[1]["title"]])
    await expect(uncited).to_be_hidden()
    await more.locator("summary").click()
    await expect(uncited).to_be_visible()
    await expect(uncited).to_have_attribute("href", PAGES[1]["url"])
    await ui.shot("desktop-light-sources-more")


async def test_an_answer_citing_nothing_folds_every_source(ui: UI, chat_services: Services) -> None:
    chat_id = await seed_web_answer(chat_services, content="No citation here.")
    await ui.open(f"#/chat/{chat_id}")
    sources = ui.assistant().locator(".sources")
    await expect(sources.locator(":scope > .sources-list")).to_have_count(0)
    await expect(sources.locator(".sources-more summary")).to_have_text("3 sources read")


# --- the model's name and notes ------------------------------------------------------------------


async def test_a_reply_names_its_model_live_and_after_a_reload(ui: UI, model) -> None:
    model.push({"text": "Hello there."})
    await ui.open()
    await ui.send("Hi")
    reply = ui.assistant()
    await expect(reply).to_have_attribute("data-status", "complete")
    name = reply.locator(".msg-actions .msg-model")
    await expect(name).to_have_text("Written by chat")  # scripted/chat: its last part
    await expect(reply.locator(".msg-notes")).to_be_hidden()
    await ui.page.reload()
    await expect(ui.assistant().locator(".msg-model")).to_have_text("Written by chat")


async def test_a_fallback_reply_shows_the_local_models_name_and_the_note(
    ui: UI, chat_services: Services
) -> None:
    chat_id = await seed_chat(
        chat_services.database.pool,
        "Fallback",
        [
            (
                "Are you there?",
                {
                    "content": "Yes.",
                    "model": "local/qwen2.5-coder-1.5b-instruct",
                    "notes": [FALLBACK_NOTE],
                },
            )
        ],
    )
    await ui.open(f"#/chat/{chat_id}")
    reply = ui.assistant()
    await expect(reply.locator(".msg-model")).to_have_text(
        "Written by Local model (Qwen2.5-Coder 1.5B)"
    )
    await expect(reply.locator(".msg-note")).to_have_text([FALLBACK_NOTE])
    await ui.shot("desktop-light-fallback-note")


async def test_a_failed_reply_says_what_to_do_with_a_ref(ui: UI, model) -> None:
    model.push({"error": "litellm.ServiceUnavailableError: groq is down"})
    await ui.open()
    await ui.send("Are you there?")
    error = ui.assistant().locator(".error-box")
    await expect(error).to_contain_text("The model is unavailable right now")
    await expect(error).to_contain_text(re.compile(r"\(ref [0-9a-f]{6}\)"))
    await expect(error).not_to_contain_text("groq is down")


# --- the steps line ------------------------------------------------------------------------------


async def test_a_plain_reply_has_a_steps_line_only_when_it_took_over_3_s(ui: UI, model) -> None:
    model.push({"chunks": ["Quick ", "answer."], "delay": 0.2})
    await ui.open()
    await ui.send("Quick question")
    reply = ui.assistant()
    await expect(reply).to_have_attribute("data-status", "complete")
    await ui.page.reload()
    reply = ui.assistant()
    await expect(reply.locator(".markdown")).to_have_text("Quick answer.")
    # As saved, the reply's time is fixed (its question's and its own sent_at): usually well
    # under 3 s, so no line; on a machine busy enough to take longer, the line with that time.
    question, answer = await saved_messages(ui.url, chat_id_of(ui.page))
    took = datetime.fromisoformat(answer["sent_at"]) - datetime.fromisoformat(question["sent_at"])
    if took.total_seconds() > 3.05:
        await expect(reply.locator(".steps-toggle")).to_have_text(re.compile(r"^1 step · "))
    elif took.total_seconds() < 2.95:
        await expect(reply.locator(".steps")).to_be_hidden()


async def test_a_slow_reply_shows_thinking_until_its_text_streams(ui: UI, model) -> None:
    # The first piece after 5 s, the second 5 s later: "Thinking…" shows once 3 s have passed
    # and goes with the first piece; the reply took over 3 s, so its steps line stays.
    model.push({"chunks": ["Slow ", "answer."], "delay": 5})
    await ui.open()
    await ui.send("Take your time")
    reply = ui.assistant()
    live = reply.locator(".steps-live")
    await expect(live).to_be_hidden()
    await expect(live.locator(".step-current")).to_have_text("Thinking…", timeout=4_500)
    await expect(live).to_be_visible()
    await expect(reply.locator(".markdown")).to_have_text("Slow", timeout=8_000)
    await expect(live).to_be_hidden()
    await expect(reply).to_have_attribute("data-status", "complete", timeout=10_000)
    await expect(reply.locator(".steps-toggle")).to_have_text(
        re.compile(r"^1 step · \d+(\.\d)? s$")
    )


async def test_a_reply_with_a_tool_shows_its_steps_with_durations(ui: UI, model) -> None:
    model.push(tool_call("retrieve_memory", query="What does the user like?"), {"text": "Tea."})
    await ui.open()
    await ui.send("What do I like?")
    reply = ui.assistant()
    await expect(reply).to_have_attribute("data-status", "complete")
    await expect(reply.locator(".steps-toggle")).to_have_text(re.compile(r"^3 steps · "))


async def test_saved_steps_list_each_steps_duration(ui: UI, chat_services: Services) -> None:
    chat_id = await seed_web_answer(chat_services, steps=STEPS, tool_calls=TOOL_CALLS)
    await ui.open(f"#/chat/{chat_id}")
    reply = ui.assistant()
    toggle = reply.locator(".steps-toggle")
    await expect(toggle).to_have_text("4 steps · 4.0 s")
    await toggle.click()
    # Until the next step began (the tool's step: the tool's own time), not the offsets.
    await expect(reply.locator(".step-time")).to_have_text(["1.0 s", "1.4 s", "1.5 s", "0.0 s"])
    await expect(reply.locator(".step").nth(1)).to_have_attribute("title", "Started at 1.0 s")


# --- accessibility -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scheme", "chosen"),
    [("light", None), ("dark", None), ("light", "dark")],  # system light, dark chosen in Settings
)
async def test_text_contrast_and_button_targets(
    browser: Browser, ui_url: str, chat_services: Services, scheme: str, chosen: str | None
) -> None:
    chat_id = await seed_web_answer(chat_services, model="openai/gpt-4o-mini")
    page_ui, context = await new_ui(browser, ui_url, DESKTOP, scheme)
    try:
        await page_ui.open(f"#/chat/{chat_id}")
        page = page_ui.page
        if chosen:  # as static/js/theme.js applies a theme chosen in Settings
            await page.evaluate(
                "(theme) => { document.documentElement.dataset.theme = theme }", chosen
            )
        scheme = chosen or scheme
        await expect(page.locator(".markdown .cite").first).to_be_visible()
        checks = [
            ("#composer-input", "::placeholder"),
            ("#chat-filter", "::placeholder"),
            (".msg-assistant .markdown .cite", None),
            (".msg-assistant .msg-model", None),
            (".sources-more summary", None),
            (".source-host", None),
        ]
        for selector, pseudo in checks:
            ratio = await page.evaluate(CONTRAST, [selector, pseudo])
            assert ratio is not None, selector
            assert ratio >= 4.5, f"{scheme}: {selector} {pseudo or ''} at {ratio:.2f}:1"

        for selector in (".msg-user .copy-button", ".msg-assistant .msg-actions .copy-button"):
            box = await page.locator(selector).first.bounding_box()
            assert box is not None, selector
            assert box["width"] >= 32 and box["height"] >= 32, (selector, box)
    finally:
        await context.close()
    check_clean(page_ui)

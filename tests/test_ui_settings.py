"""The Settings page in a real browser, on a server with no provider key set (the default
models.yaml, so the local model serves every role; it is never started here): the page says so
for each role, and that the local model gets no tools; a tool switched off stays off after a
reload (and on the server); the theme applies at once, survives a reload (set before the page is
drawn) and goes back to the system's; the browser's time zone reaches the server; "Use web tool"
starts ticked when asked; the "Your data" section is there for the export/import.

Same harness as test_ui.py (Debian's Chromium, the real server and database, the scripted model).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import AsyncIterator

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from core.accounts import LOCAL_USER_ID
from core.config import load_settings
from core.llm_router import plan_models
from core.preferences import DEFAULTS, set_preferences
from core.services import Services
from tests.chat_client import serve
from tests.test_ui import (  # noqa: F401 (browser, web_ui_url: fixtures)
    UI,
    browser,
    check_clean,
    new_ui,
    web_ui_url,
)

KEYS = ("groq_api_key", "gemini_api_key", "openrouter_api_key", "tavily_api_key")
DARK_BG = "rgb(27, 28, 31)"  # --bg of the dark theme (static/css/app.css)
LIGHT_BG = "rgb(255, 255, 255)"


@pytest.fixture(scope="module")
async def no_keys_url(chat_services: Services) -> AsyncIterator[str]:
    """The app as it runs with no provider key: the models planned from the default models.yaml
    (the local model for every role). The local model is not warmed up: nothing here asks it."""
    settings = load_settings(_env_file=None, **dict.fromkeys(KEYS))
    plan = plan_models(settings)
    assert plan.runs_locally("chat") and plan.left_out  # what "no key set" means
    services = dataclasses.replace(
        chat_services,
        model_plan=plan,
        settings=chat_services.settings.model_copy(update={"local_model_warm_up": False}),
    )
    async with serve(services) as url:
        yield url


@pytest.fixture(autouse=True)
async def default_settings(chat_services: Services) -> AsyncIterator[None]:
    pool = chat_services.database.pool
    await set_preferences(pool, LOCAL_USER_ID, **DEFAULTS)
    yield
    await set_preferences(pool, LOCAL_USER_ID, **DEFAULTS)


async def settings_of(url: str) -> dict:
    async with httpx.AsyncClient(base_url=url) as client:
        return (await client.get("/api/settings")).json()


@contextlib.asynccontextmanager
async def settings_page(browser: Browser, url: str) -> AsyncIterator[tuple[UI, Page]]:  # noqa: F811
    """A new browser page on the Settings page; checked clean (no console error) when done."""
    page_ui, context = await new_ui(browser, url)
    try:
        yield page_ui, await open_settings(page_ui)
    finally:
        await context.close()
    check_clean(page_ui)


async def open_settings(page_ui: UI) -> Page:
    page = page_ui.page
    await page_ui.open()
    await page.get_by_role("link", name="Settings", exact=True).click()
    await expect(page).to_have_url(re.compile(r"#/settings$"))
    await expect(page.locator("#chat-title")).to_have_text("Settings")
    await expect(page.locator("#settings-system")).to_have_attribute("aria-busy", "false")
    return page


def tool_switch(page: Page, name: str):
    return page.locator(f'#settings-tools input[data-tool="{name}"]')


async def background(page: Page) -> str:
    return await page.evaluate("getComputedStyle(document.body).backgroundColor")


async def test_the_settings_page_shows_the_local_fallback_when_no_key_is_set(
    browser: Browser,  # noqa: F811
    no_keys_url: str,
) -> None:
    async with settings_page(browser, no_keys_url) as (_, page):
        for role in ("chat", "utility", "memory"):
            row = page.locator(f'#settings-system dd[data-role="{role}"]')
            await expect(row).to_contain_text("Local model")
            await expect(row).to_contain_text("fallback: no provider key set")
        chat_row = page.locator('#settings-system dt[data-role="chat"]')
        await expect(chat_row).to_have_text("Chat model")
        system = page.locator("#settings-system")
        await expect(system).to_contain_text("GROQ_API_KEY")  # which key each hosted model lacks
        await expect(system).to_contain_text("Embedded Postgres")
        await expect(system).to_contain_text(re.compile(r"Web search\s*Off"))
        await expect(system).to_contain_text(re.compile(r"Tracing\s*Off"))
        # The local model is offered no tools: the page says which switches do something now.
        note = page.locator("#settings-tools-note")
        await expect(note).to_be_visible()
        await expect(note).to_contain_text("is not offered tools. The calculator still works")
        await expect(tool_switch(page, "calculator")).to_be_checked()
        calculator = page.locator('.settings-tool[data-tool="calculator"]')
        await expect(calculator).to_contain_text("Computes arithmetic exactly")
        # Export and import.
        data = page.locator("section#settings-data")
        await expect(data.get_by_role("heading", name="Your data")).to_be_visible()
        await expect(data.get_by_role("button", name="Export all data")).to_be_visible()
        await expect(data.get_by_role("button", name="Import chats…")).to_be_visible()


async def test_a_tool_switched_off_stays_off_after_a_reload(
    browser: Browser,  # noqa: F811
    no_keys_url: str,
) -> None:
    async with settings_page(browser, no_keys_url) as (_, page):
        await expect(tool_switch(page, "calculator")).to_be_checked()
        await page.locator('.settings-tool[data-tool="calculator"] .switch').click()
        await expect(tool_switch(page, "calculator")).not_to_be_checked()
        await expect(page.locator("#live-status")).to_have_text("Tools saved")
        assert (await settings_of(no_keys_url))["disabled_tools"] == ["calculator"]

        await page.reload()
        await expect(page.locator("#settings-system")).to_have_attribute("aria-busy", "false")
        await expect(tool_switch(page, "calculator")).not_to_be_checked()
        await expect(tool_switch(page, "current_datetime")).to_be_checked()

        await page.locator('.settings-tool[data-tool="calculator"] .switch').click()
        await expect(tool_switch(page, "calculator")).to_be_checked()
        await expect(page.locator("#live-status")).to_have_text("Tools saved")
        assert (await settings_of(no_keys_url))["disabled_tools"] == []


async def test_custom_instructions_are_saved_and_kept(
    browser: Browser,  # noqa: F811
    no_keys_url: str,
) -> None:
    async with settings_page(browser, no_keys_url) as (page_ui, page):
        box = page.get_by_role("textbox", name="Custom instructions")
        save = page.locator("#settings-instructions-save")
        await expect(box).to_have_value("")
        await expect(save).to_be_disabled()  # nothing changed yet
        await expect(box).to_have_attribute("maxlength", "1500")
        said = "Answer in British English.\nKeep answers short."
        await box.fill(said)
        await expect(page.locator("#settings-instructions-count")).to_have_text("46 / 1,500")
        await page_ui.shot("desktop-light-settings-instructions")
        await save.click()
        await expect(page.locator("#live-status")).to_have_text("Custom instructions saved")
        await expect(save).to_be_disabled()
        assert (await settings_of(no_keys_url))["custom_instructions"] == said

        await page.reload()
        await expect(page.locator("#settings-system")).to_have_attribute("aria-busy", "false")
        await expect(box).to_have_value(said)
        await box.fill("")
        await save.click()
        await expect(page.locator("#live-status")).to_have_text("Custom instructions removed")
        assert (await settings_of(no_keys_url))["custom_instructions"] == ""


async def test_the_theme_applies_at_once_and_before_the_page_is_drawn(
    browser: Browser,  # noqa: F811
    no_keys_url: str,
) -> None:
    page_ui, context = await new_ui(browser, no_keys_url, scheme="light")
    try:
        page = await open_settings(page_ui)
        await expect(page.get_by_role("radio", name="System")).to_be_checked()
        assert await background(page) == LIGHT_BG

        await page.get_by_role("radio", name="Dark").check()
        await expect(page.locator("html")).to_have_attribute("data-theme", "dark")
        assert await background(page) == DARK_BG
        await expect(page.locator("#live-status")).to_have_text("Theme: dark")
        assert (await settings_of(no_keys_url))["theme"] == "dark"

        # Reloaded: dark from the first paint (theme.js runs before the body exists), before
        # any module has asked the server.
        await page.add_init_script(
            "document.addEventListener('readystatechange', () => {"
            " if (document.readyState === 'interactive') window.firstTheme ="
            " document.documentElement.dataset.theme; }, { once: true });"
        )
        await page.reload()
        assert await page.evaluate("window.firstTheme") == "dark"
        await expect(page.locator("#settings-system")).to_have_attribute("aria-busy", "false")
        await expect(page.get_by_role("radio", name="Dark")).to_be_checked()
        assert await background(page) == DARK_BG
        dark_code = page.locator('link[data-scheme="dark"]')
        await expect(dark_code).to_have_attribute("media", "all")

        await page.get_by_role("radio", name="System").check()
        await expect(page.locator("html")).not_to_have_attribute("data-theme", re.compile("."))
        assert await background(page) == LIGHT_BG  # the browser's scheme is light
        await expect(page.locator("#live-status")).to_have_text("Theme: system")
        assert (await settings_of(no_keys_url))["theme"] == "system"
    finally:
        await context.close()
    check_clean(page_ui)


async def test_a_theme_saved_elsewhere_reaches_a_new_browser(
    browser: Browser,  # noqa: F811
    no_keys_url: str,
    chat_services: Services,
) -> None:
    await set_preferences(chat_services.database.pool, LOCAL_USER_ID, theme="light")
    page_ui, context = await new_ui(browser, no_keys_url, scheme="dark")
    try:
        await page_ui.open()
        await expect(page_ui.page.locator("html")).to_have_attribute("data-theme", "light")
        assert await background(page_ui.page) == LIGHT_BG
    finally:
        await context.close()
    check_clean(page_ui)


async def test_the_time_zone_and_the_web_default_reach_their_places(
    browser: Browser,  # noqa: F811
    no_keys_url: str,
    chat_services: Services,
) -> None:
    await set_preferences(chat_services.database.pool, LOCAL_USER_ID, use_web_default=True)
    context = await browser.new_context(timezone_id="Europe/Lisbon")
    try:
        page = await context.new_page()
        await page.goto(no_keys_url + "/")
        await expect(page.locator("html.ready")).to_have_count(1)
        for _ in range(50):
            if (await settings_of(no_keys_url))["time_zone"] == "Europe/Lisbon":
                break
            await page.wait_for_timeout(100)
        assert (await settings_of(no_keys_url))["time_zone"] == "Europe/Lisbon"
        # No web search on this server: the box stays off and disabled, whatever the default.
        await expect(page.locator("#use-web")).to_be_disabled()
        await expect(page.locator("#use-web")).not_to_be_checked()
        await page.goto(no_keys_url + "/#/settings")
        await expect(page.locator("#settings-system")).to_have_attribute("aria-busy", "false")
        await expect(page.locator("#settings-use-web")).to_be_disabled()
        await expect(page.locator("#settings-memory")).to_be_checked()
    finally:
        await context.close()


async def test_use_web_starts_ticked_and_the_memory_switch_is_the_pause(
    browser: Browser,  # noqa: F811
    web_ui_url: str,  # noqa: F811
    chat_services: Services,
) -> None:
    await set_preferences(chat_services.database.pool, LOCAL_USER_ID, use_web_default=True)
    page_ui, context = await new_ui(browser, web_ui_url)
    try:
        page = page_ui.page
        await page_ui.open()
        await expect(page.locator("#use-web")).to_be_enabled()
        await expect(page.locator("#use-web")).to_be_checked()

        page = await open_settings(page_ui)
        await expect(page.locator("#settings-use-web")).to_be_checked()
        await page.locator("label", has=page.locator("#settings-use-web")).click()
        await expect(page.locator("#live-status")).to_have_text("Saved")
        assert (await settings_of(web_ui_url))["use_web_default"] is False

        await expect(page.locator("#settings-memory")).to_be_checked()
        await page.locator("label", has=page.locator("#settings-memory")).click()
        await expect(page.locator("#live-status")).to_have_text("Memory paused")
        assert (await settings_of(web_ui_url))["memory_paused"] is True
        await page.get_by_role("link", name="Memory", exact=True).click()
        await expect(page.locator("#memory-paused")).to_be_checked()
        await expect(page.locator("#memory-paused-note")).to_be_visible()
    finally:
        await context.close()
    check_clean(page_ui)

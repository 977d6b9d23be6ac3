"""Accounts in a real browser (AUTH_MODE=password): the sign-in page, one user's chats hidden from
another, sign-out ending the session, and API tokens made in the UI. Same harness as test_ui.py:
Debian's Chromium, the real server, database and embedder, the scripted model.

The page may log the 401s and 404s these tests provoke on purpose (Chromium reports a failed
request on the console); anything else in the console still fails the test."""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from core import accounts
from core.services import Services
from tests.chat_client import password_services, send, serve
from tests.test_ui import UI, browser, check_clean, new_ui  # noqa: F401 (browser: a fixture)

PASSWORD = "correct horse battery"
SESSION_COOKIE = "resolveai_session"


@pytest.fixture(scope="module")
async def accounts_url(chat_services: Services) -> AsyncIterator[str]:
    """The app in password mode (no per-user rate limits: not what these tests are about)."""
    services = password_services(
        chat_services, rate_limit_messages_per_minute=0, rate_limit_concurrent_replies=0
    )
    async with serve(services) as url:
        yield url


async def new_user(services: Services, prefix: str, *, admin: bool = False) -> str:
    username = f"{prefix}-{uuid.uuid4().hex[:8]}"  # unique: the database outlives one test
    await accounts.add_user(services.database.pool, username, PASSWORD, is_admin=admin)
    return username


def check_clean_but(ui: UI, *statuses: int) -> None:
    """check_clean, once the console lines of the failed requests a test expects are dropped."""
    expected = re.compile(rf"status of ({'|'.join(map(str, statuses))})\b")
    ui.errors[:] = [e for e in ui.errors if not (e.startswith("console:") and expected.search(e))]
    check_clean(ui)


async def sign_in(page: Page, url: str, username: str, password: str = PASSWORD) -> None:
    """From the sign-in page to the app, with Enter in the password box."""
    await page.goto(url + "/")
    await expect(page).to_have_url(f"{url}/login.html")
    await page.get_by_label("Username").fill(username)
    await page.get_by_label("Password").fill(password)
    await page.get_by_label("Password").press("Enter")
    await expect(page.locator("#account-name")).to_have_text(username)


async def open_menu_item(page: Page, name: str) -> None:
    await page.locator("#account-button").click()
    await page.get_by_role("menuitem", name=name).click()


async def test_the_app_asks_to_sign_in_and_says_why_a_sign_in_fails(
    browser: Browser,  # noqa: F811
    accounts_url: str,
    chat_services: Services,
) -> None:
    username = await new_user(chat_services, "alice")
    ui, context = await new_ui(browser, accounts_url)
    page = ui.page
    await page.goto(accounts_url + "/")
    await expect(page).to_have_url(f"{accounts_url}/login.html")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert await page.locator("#chat-list, #messages, #composer").count() == 0

    await page.get_by_label("Username").fill(username)
    await page.get_by_label("Password").fill("not the password")
    await page.get_by_label("Password").press("Enter")
    await expect(page.get_by_role("alert")).to_have_text("Wrong username or password.")
    await expect(page).to_have_url(f"{accounts_url}/login.html")

    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page).to_have_url(f"{accounts_url}/")
    await expect(page.locator("#account-button")).to_be_visible()
    await expect(page.locator("#account-name")).to_have_text(username)
    await context.close()
    check_clean_but(ui, 401)


async def test_a_user_sees_neither_the_chats_nor_the_messages_of_another(
    browser: Browser,  # noqa: F811
    accounts_url: str,
    chat_services: Services,
    model,
) -> None:
    alice, bob = await new_user(chat_services, "alice"), await new_user(chat_services, "bob")
    async with httpx.AsyncClient(base_url=accounts_url, timeout=60) as client:
        signed_in = await client.post(
            "/api/auth/login", json={"username": alice, "password": PASSWORD}
        )
        assert signed_in.status_code == 200, signed_in.text
        client.headers["X-CSRF-Token"] = signed_in.json()["csrf_token"]
        model.push({"text": "Your secret is safe with me."})
        events = await send(client, "Alice's private question about her salary")
    chat_id = next(e["chat_id"] for e in events if e["type"] == "chat")

    ui, context = await new_ui(browser, accounts_url)
    page = ui.page
    await sign_in(page, accounts_url, bob)
    await expect(page.locator("#chat-list")).to_have_attribute("aria-busy", "false")
    await expect(page.locator(f'[data-chat-id="{chat_id}"]')).to_have_count(0)
    await expect(page.locator("#chat-list")).not_to_contain_text("salary")

    await page.goto(f"{accounts_url}/#/chat/{chat_id}")
    await expect(page.locator("#toasts")).to_contain_text("That chat does not exist any more.")
    await expect(page.locator("#messages")).not_to_contain_text("salary")
    await expect(page.locator("#messages")).not_to_contain_text("secret is safe")
    await context.close()
    check_clean_but(ui, 401, 404)


async def test_sign_out_ends_the_session(
    browser: Browser,  # noqa: F811
    accounts_url: str,
    chat_services: Services,
) -> None:
    username = await new_user(chat_services, "carol")
    ui, context = await new_ui(browser, accounts_url)
    page = ui.page
    await sign_in(page, accounts_url, username)
    cookie = next(c["value"] for c in await context.cookies() if c["name"] == SESSION_COOKIE)
    old_session = httpx.AsyncClient(base_url=accounts_url, cookies={SESSION_COOKIE: cookie})
    async with old_session:
        assert (await old_session.get("/api/chats")).status_code == 200

        await open_menu_item(page, "Sign out")
        await expect(page).to_have_url(f"{accounts_url}/login.html")
        await expect(page.get_by_label("Username")).to_be_visible()
        assert (await old_session.get("/api/chats")).status_code == 401
    await page.goto(accounts_url + "/")
    await expect(page).to_have_url(f"{accounts_url}/login.html")
    await context.close()
    check_clean_but(ui, 401)


async def test_an_api_token_is_shown_once_and_works_as_a_bearer_token(
    browser: Browser,  # noqa: F811
    accounts_url: str,
    chat_services: Services,
) -> None:
    username = await new_user(chat_services, "dave")
    ui, context = await new_ui(browser, accounts_url)
    page = ui.page
    await sign_in(page, accounts_url, username)
    await open_menu_item(page, "API tokens")
    dialog = page.locator("#tokens-dialog")
    await expect(dialog.locator("#token-list")).to_contain_text("No tokens yet.")
    await dialog.get_by_label("New token's name").fill("backup <b>script</b>")
    await dialog.get_by_role("button", name="Create token").click()
    await expect(dialog.locator("#token-value")).to_have_text(re.compile(r"^rai_\S+$"))
    token = await dialog.locator("#token-value").inner_text()
    await expect(dialog.locator("#token-list")).to_contain_text("backup <b>script</b>")
    await dialog.get_by_role("button", name="Copy the new token").click()
    assert await ui.clipboard() == token

    async with httpx.AsyncClient(base_url=accounts_url) as client:
        chats = await client.get("/api/chats", headers={"Authorization": f"Bearer {token}"})
        assert chats.status_code == 200, chats.text
        assert isinstance(chats.json(), list)
        wrong = await client.get("/api/chats", headers={"Authorization": f"Bearer {token}x"})
        assert wrong.status_code == 401

    await dialog.get_by_role("button", name="Close API tokens").click()
    await open_menu_item(page, "API tokens")
    await expect(dialog.locator("#token-list")).to_contain_text("backup <b>script</b>")
    await expect(dialog.locator("#token-new")).to_be_hidden()
    assert token not in ((await dialog.text_content()) or "")
    await context.close()
    check_clean_but(ui, 401)

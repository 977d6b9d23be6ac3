"""The Usage page in a real browser, after scripted messages sent from the page: the totals are
the server's figures, the charts are drawn (tokens per day, calls per model, tool use) and the
period can be changed.

Same harness as test_ui.py (Debian's Chromium, the real server and database, the scripted model).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from playwright.async_api import expect

from core.accounts import LOCAL_USER_ID
from core.services import Services
from core.statements import fetch_one
from tests.test_ui import UI, browser, tool_call, ui, ui_url  # noqa: F401 (fixtures)


async def settled_calls(services: Services) -> int:
    """The user's recorded model calls once no more arrive (titles and memory extraction run
    after the reply, and LiteLLM records each call from a background task)."""
    count, same = -1, 0
    while same < 3:
        row = await fetch_one(
            services.database.pool,
            "SELECT count(*) AS n FROM model_calls WHERE user_id = %s",
            (LOCAL_USER_ID,),
        )
        assert row is not None
        same = same + 1 if row["n"] == count else 0
        count = row["n"]
        await asyncio.sleep(0.3)
    return count


async def usage(url: str, **params: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url) as client:
        response = await client.get("/api/usage", params=params)
        assert response.status_code == 200
        return response.json()


async def test_the_usage_page_shows_the_servers_figures(
    ui: UI,  # noqa: F811 (the fixture imported above)
    model,
    chat_services: Services,
    ui_url: str,  # noqa: F811
) -> None:
    model.push(tool_call("calculator", expression="2 + 3"), {"text": "It is 5."})
    await ui.open()
    await ui.send("What is 2 + 3?")
    await expect(ui.assistant()).to_contain_text("It is 5.")
    model.push({"text": "You are welcome."})
    await ui.send("Thanks!")
    await expect(ui.assistant()).to_contain_text("You are welcome.")
    await settled_calls(chat_services)

    page = ui.page
    await page.click("#usage-link")
    await expect(page).to_have_url(f"{ui_url}/#/usage")
    await expect(page.locator("#usage-charts")).to_have_attribute("aria-busy", "false")
    totals = (await usage(ui_url))["totals"]
    assert totals["calls"] >= 3
    await expect(page.locator('[data-figure="calls"]')).to_have_text(f"{totals['calls']:,}")
    tokens = f"{totals['prompt_tokens']:,} / {totals['completion_tokens']:,}"
    await expect(page.locator('[data-figure="tokens"]')).to_have_text(tokens)
    await expect(page.locator('[data-figure="cost"]')).to_have_text("$0.0000")

    figures = page.locator(".usage-figure")
    await expect(figures.locator("figcaption")).to_have_text(
        ["Tokens per day", "Cost per day", "Latency per day", "Calls per model", "Tool use"]
    )
    tokens_chart = figures.nth(0).locator("svg")
    assert await tokens_chart.locator("rect.usage-bar").count() >= 2  # today's in and out
    per_model = await figures.nth(3).locator("svg").get_attribute("aria-label")
    assert per_model is not None and "scripted/chat" in per_model
    tools = await figures.nth(4).locator("svg").get_attribute("aria-label")
    assert tools is not None and "calculator" in tools

    # Another period asks the server again and draws its days.
    await page.select_option("#usage-range", "7")
    await expect(page.locator("#usage-charts")).to_have_attribute("aria-busy", "false")
    first_label = figures.nth(0).locator("text.usage-label").first
    await expect(first_label).to_have_text(await first_day(page, 7))
    await ui.shot("usage-page")


async def first_day(page: Any, days: int) -> str:
    """The first day of the page's period, as the page computes it (the browser's clock)."""
    return await page.evaluate(
        f"new Date(Date.now() - {days - 1} * 86400000).toISOString().slice(0, 10)"
    )

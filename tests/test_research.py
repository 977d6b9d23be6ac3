"""Research mode end to end through the real server: the `pages` provider over SQuAD's real pages,
the real chunker, ranker and embedder, and the scripted model as planner, checker (utility role)
and report writer (chat role). The scripted queue is consumed in call order: plan, check (one per
round), report.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chat.nodes import research_budget
from core.config import Settings
from core.llm_router import ModelPlan
from core.services import Services
from rag.research import parse_answered, parse_plan
from tests.chat_client import messages_of, read_events, send, serve
from tests.test_web_search import pages_dir, web_services  # noqa: F401 (pages_dir: a fixture)

WARSAW = "How many people live in Warsaw?"
STEAM = "Who patented the first steam engine?"
ZORBLAX = "How long does the Zorblax festival last?"


@pytest.fixture(scope="module")
async def chat_services(settings, pages_dir: Path) -> AsyncIterator[Services]:  # noqa: F811
    """This module's app services: conftest's, plus the `pages` search provider."""
    async with web_services(settings, pages_dir) as services:
        yield services


def plan(*questions: str) -> dict[str, Any]:
    return {"text": json.dumps({"sub_questions": list(questions)})}


def answered(*numbers: int) -> dict[str, Any]:
    return {"text": json.dumps({"answered": list(numbers)})}


def steps(events: list[dict[str, Any]]) -> list[str]:
    return [e["text"] for e in events if e["type"] == "step"]


def tokens(events: list[dict[str, Any]]) -> str:
    return "".join(e["text"] for e in events if e["type"] == "token")


async def research(client: httpx.AsyncClient, content: str) -> list[dict[str, Any]]:
    async with client.stream(
        "POST", "/api/messages", json={"content": content, "mode": "research"}
    ) as response:
        assert response.status_code == 200, await response.aread()
        return [e async for e in read_events(response) if e["type"] != "heartbeat"]


def writer(parts: dict[str, str]) -> Any:
    """Answers each part's call (chat role) by its sub-question: they run concurrently."""

    def answer(model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        prompt = messages[-1]["content"]
        question = prompt.rsplit("<question>\n", 1)[1].split("\n</question>")[0]
        return {"text": parts[question]}

    return answer


async def test_a_two_part_question_gets_a_cited_report(client, model) -> None:
    model.push(plan(WARSAW, ZORBLAX), answered(1, 2))
    model.responder = writer(
        {
            WARSAW: "About 1.7 million people live in Warsaw [1]. It is the capital.",
            ZORBLAX: "The Zorblax festival lasts three days [2].",
        }
    )
    asked = f"Answer all: {WARSAW} {ZORBLAX}"
    events = await research(client, asked)
    said = steps(events)
    assert said[:3] == ["Research plan: 2 sub-questions", f"1. {WARSAW}", f"2. {ZORBLAX}"]
    assert "Searching the web for 2 sub-questions" in said
    assert "2 of 2 sub-questions answered" in said
    assert {f"Writing part 1 of 2: {WARSAW}", f"Writing part 2 of 2: {ZORBLAX}"} <= set(said)
    assert [c["model"] for c in model.calls] == ["utility", "utility", "chat", "chat"]
    # The check read both sub-questions and the pages found for them, as delimited sources.
    check = model.calls[1]["messages"][-1]["content"]
    assert f"1. {WARSAW}\n2. {ZORBLAX}" in check and '<source n="1"' in check
    # Each part was written for its own sub-question, with the whole question as context.
    parts = [c["messages"][-1]["content"] for c in model.calls[2:]]
    assert {p.rsplit("<question>\n", 1)[1] for p in parts} == {
        f"{WARSAW}\n</question>",
        f"{ZORBLAX}\n</question>",
    }
    assert all(f"<context>\n{asked}\n</context>" in p for p in parts)
    sources = next(e for e in events if e["type"] == "sources")["sources"]
    urls = [s["url"] for s in sources]
    assert urls[:2] == ["https://en.wikipedia.org/wiki/Warsaw", "https://example.org/zorblax"]
    kinds = [e["type"] for e in events]
    assert kinds.index("sources") < kinds.index("token")
    report = tokens(events)
    assert report == (
        f"# {asked}\n\n"
        "**Short answer:** About 1.7 million people live in Warsaw [1]. The Zorblax festival"
        " lasts three days [2].\n\n"
        f"## {WARSAW}\n\nAbout 1.7 million people live in Warsaw [1]. It is the capital.\n\n"
        f"## {ZORBLAX}\n\nThe Zorblax festival lasts three days [2].\n\n"
        "## Sources\n\n"
        f"[1] [Warsaw]({urls[0]})\n"
        f"[2] [Zorblax festival]({urls[1]})"
    )
    saved = (await messages_of(client, events[0]["chat_id"]))[1]
    assert saved["content"] == report  # what streamed is what is saved
    assert saved["sources"] == sources


async def test_an_unanswered_sub_question_is_searched_again_then_reported_not_found(
    client, model
) -> None:
    unknown = "What is the name of the mayor of Quentaro in 1951?"
    rounds = 3  # RESEARCH_ROUNDS' default
    model.push(plan(WARSAW, unknown), answered(1), *[answered()] * (rounds - 1))
    model.responder = writer({WARSAW: "About 1.7 million people live in Warsaw [1]."})
    events = await research(client, f"{WARSAW} And {unknown}")
    said = steps(events)
    assert "Searching the web for 1 sub-question (round 2)" in said
    assert "Searching the web for 1 sub-question (round 3)" in said
    assert said.count("1 of 2 sub-questions answered") == rounds
    assert [c["model"] for c in model.calls] == ["utility"] * (1 + rounds) + ["chat"]
    # A later check is about the open sub-question alone.
    later = model.calls[2]["messages"][-1]["content"]
    assert later.startswith(f"<sub_questions>\n1. {unknown}\n</sub_questions>")
    text = tokens(events)
    assert f"## Not found\n\nNo source found answers:\n\n- {unknown}" in text
    assert text.index(f"## {WARSAW}") < text.index("## Not found") < text.index("## Sources")


async def test_an_unusable_plan_researches_the_question_itself(client, model) -> None:
    model.push(
        {"text": "Sure! Here is my plan: search things."},
        {"text": "not json"},  # an unusable check: counted answered, the part says what's there
        {"text": "I couldn't find information about that."},
    )
    events = await research(client, WARSAW)
    assert steps(events)[:2] == ["Research plan: 1 sub-question", f"1. {WARSAW}"]
    assert "1 of 1 sub-questions answered" in steps(events)
    # A part that found nothing gives no short answer, and no source is listed as cited.
    report = tokens(events)
    assert "**Short answer:** The sources found do not answer this question." in report
    assert "## Sources" not in report
    assert events[-1]["type"] == "done"


async def test_research_needs_web_search_and_a_known_mode(
    client, model, chat_services: Services
) -> None:
    bad = await client.post("/api/messages", json={"content": "Hi", "mode": "deep"})
    assert bad.status_code == 422
    assert bad.json()["error"]
    off = dataclasses.replace(chat_services, search_provider=None)
    async with serve(off) as url, httpx.AsyncClient(base_url=url, timeout=60) as other:
        refused = await other.post("/api/messages", json={"content": "Hi", "mode": "research"})
    assert refused.status_code == 400
    assert "Web search" in refused.json()["error"]


async def test_a_retry_researches_again(client, model) -> None:
    model.push(plan(WARSAW), answered(1), {"text": "First report [1]."})
    events = await research(client, WARSAW)
    chat_id = events[0]["chat_id"]
    question = (await messages_of(client, chat_id))[0]["message_id"]
    model.push(plan(WARSAW), answered(1), {"text": "Second report [1]."})
    async with client.stream(
        "POST", f"/api/chats/{chat_id}/messages/{question}/regenerate"
    ) as response:
        assert response.status_code == 200
        again = [e async for e in read_events(response) if e["type"] != "heartbeat"]
    assert steps(again)[0] == "Research plan: 1 sub-question"
    assert f"## {WARSAW}\n\nSecond report [1]." in tokens(again)


async def test_a_chat_message_is_not_research(client, model) -> None:
    model.push({"text": "Hello!"})
    events = await send(client, "Hello")
    assert not any(s.startswith("Research plan") for s in steps(events))
    assert [c["model"] for c in model.calls] == ["chat"]


def test_the_local_model_researches_less(settings: Settings) -> None:
    def plan_on(model: str) -> ModelPlan:
        return ModelPlan([{"model_name": "chat", "litellm_params": {"model": model}}], [])

    hosted = research_budget(settings, plan_on("groq/openai/gpt-oss-120b"))
    assert (hosted.rounds, hosted.sub_questions) == (
        settings.research_rounds,
        settings.research_sub_questions,
    )
    local = research_budget(settings, plan_on("local/qwen"))
    assert (local.rounds, local.sub_questions) == (1, 3)
    assert local.chunks_per_question < hosted.chunks_per_question


def test_plans_and_checks_are_read_strictly() -> None:
    assert parse_plan('{"sub_questions": ["A?", " a? ", "", 3, "B?"]}', 5) == ["A?", "B?"]
    assert parse_plan('Plan: {"sub_questions": ["A?", "B?", "C?"]}', 2) == ["A?", "B?"]
    assert parse_plan("no json", 5) == [] and parse_plan('{"questions": ["A?"]}', 5) == []
    assert parse_answered('{"answered": [1, 3, 7, "2", true]}', 3) == {1, 3}
    assert parse_answered('{"answered": []}', 3) == set()
    assert parse_answered("yes", 3) is None and parse_answered('{"answered": 1}', 3) is None

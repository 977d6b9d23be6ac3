"""Research mode end to end through the real server: the `pages` provider over SQuAD's real pages,
the real chunker, ranker and embedder, and the scripted model as planner, checker (utility role)
and report writer (chat role). The scripted queue is consumed in call order: plan, check (one per
round), report.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chat.nodes import research_budget
from core import memory_store
from core.config import Settings
from core.llm_router import ModelPlan
from core.services import Services
from rag.research import Research, _report, parse_answered, parse_plan, user_wording
from rag.search_providers import SearchResult
from tests.chat_client import messages_of, read_events, send, serve
from tests.test_documents import processed, upload
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
    # Someone watches the report: on the local model, no background work goes before its calls.
    assert all(c["watched"] for c in model.calls)
    # The check read both sub-questions and the pages found for them, as delimited sources.
    check = model.calls[1]["messages"][-1]["content"]
    assert f"1. {WARSAW}\n2. {ZORBLAX}" in check and '<source n="1"' in check
    # Each part was written for its own sub-question, with the user's own sentence asking it as
    # context, not the whole question (a small model answers every part it is shown).
    parts = {
        p.rsplit("<question>\n", 1)[1].split("\n</question>")[0]: p
        for p in (c["messages"][-1]["content"] for c in model.calls[2:])
    }
    assert set(parts) == {WARSAW, ZORBLAX}
    assert f"<context>\nAnswer all: {WARSAW}\n</context>" in parts[WARSAW]
    assert f"<context>\n{ZORBLAX}\n</context>" in parts[ZORBLAX]
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

    # The report as a Markdown file of its own (it lists its sources itself).
    chat_id = events[0]["chat_id"]
    exported = await client.get(f"/api/chats/{chat_id}/messages/{saved['message_id']}/export")
    assert exported.status_code == 200, exported.text
    assert exported.headers["content-type"].startswith("text/markdown")
    assert exported.headers["content-disposition"].startswith(
        'attachment; filename="answer-all-how-many-people-live-in-warsaw-how-long-does-the-'
    )
    assert exported.text == report + "\n"
    for path in (
        f"/api/chats/{chat_id}/messages/{uuid.uuid4()}/export",
        f"/api/chats/{uuid.uuid4()}/messages/{saved['message_id']}/export",
    ):
        missing = await client.get(path)
        assert missing.status_code == 404 and missing.json()["error"], missing.text


async def test_an_unanswered_sub_question_is_searched_again_then_reported_not_found(
    client, model
) -> None:
    unknown = "What is the name of the mayor of Quentaro in 1951?"
    rounds = 3  # RESEARCH_ROUNDS' default
    # A check after each round but the last: after it, the part says what its sources lack.
    model.push(plan(WARSAW, unknown), answered(1), *[answered()] * (rounds - 2))
    model.responder = writer(
        {
            WARSAW: "About 1.7 million people live in Warsaw [1].",
            unknown: "I couldn't find the name of the mayor of Quentaro in 1951.",
        }
    )
    events = await research(client, f"{WARSAW} And {unknown}")
    said = steps(events)
    assert "Searching the web for 1 sub-question (round 2)" in said
    assert "Searching the web for 1 sub-question (round 3)" in said
    assert said.count("1 of 2 sub-questions answered") == rounds  # the last after writing
    assert [c["model"] for c in model.calls] == ["utility"] * rounds + ["chat"] * 2
    # A later check is about the open sub-question alone.
    later = model.calls[2]["messages"][-1]["content"]
    assert later.startswith(f"<sub_questions>\n1. {unknown}\n</sub_questions>")
    text = tokens(events)
    assert f"## Not found\n\nNo source found answers:\n\n- {unknown}" in text
    assert text.index(f"## {WARSAW}") < text.index("## Not found") < text.index("## Sources")


async def test_stop_while_the_report_is_written_saves_the_report_so_far(client, model) -> None:
    slow = " ".join(f"day{i}" for i in range(60))
    model.push(plan(WARSAW, ZORBLAX), answered(1, 2))

    def answer(model_name: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        if ZORBLAX in messages[-1]["content"].rsplit("<question>", 1)[1]:
            return {"text": f"The Zorblax festival lasts [2] {slow}", "delay": 0.1}
        return {"text": "About 1.7 million people live in Warsaw [1]."}

    model.responder = answer
    asked = f"Answer all: {WARSAW} {ZORBLAX}"
    async with client.stream(
        "POST", "/api/messages", json={"content": asked, "mode": "research"}
    ) as response:
        events: list[dict[str, Any]] = []
        async for event in read_events(response):
            events.append(event)
            if event["type"] == "chat":
                chat_id = event["chat_id"]
            elif event["type"] == "step" and event["text"].startswith("Writing part 2"):
                await asyncio.sleep(1.5)  # part 1 written, part 2 a few words in
                assert (await client.post(f"/api/chats/{chat_id}/stop")).status_code == 200
    assert events[-1]["type"] == "interrupted"
    report = tokens(events)
    assert report.startswith(f"# {asked}\n\n_Stopped before the research was finished")
    assert f"## {WARSAW}\n\nAbout 1.7 million people live in Warsaw [1]." in report
    assert f"## {ZORBLAX}\n\nThe Zorblax festival lasts [2] day0" in report
    assert "day59" not in report  # cut where it was stopped
    assert "## Sources\n\n[1] [Warsaw](" in report and "[2] [Zorblax festival](" in report
    saved = (await messages_of(client, chat_id))[1]
    assert saved["status"] == "interrupted"
    assert saved["content"] == report  # what streamed is what is saved
    sources = next(e for e in events if e["type"] == "sources")["sources"]
    assert saved["sources"] == sources  # its [n] still lead somewhere
    # Its text is assembled from parts: Regenerate researches again, Continue is refused.
    assert saved["mode"] == "research"
    refused = await client.post(f"/api/chats/{chat_id}/messages/{saved['message_id']}/continue")
    assert refused.status_code == 409 and "Regenerate" in refused.json()["error"]


async def test_each_part_written_is_kept_in_the_turns_events_for_a_crash(client, model) -> None:
    """A report streams only at its end, so a server dying mid-research would leave no text to
    recover: each time the report gains a part (and once the plan is made), the report so far goes
    to the turn's event log as a `draft` event (clients ignore it; chat/turn_recovery.py saves the
    last one when no text streamed)."""
    model.push(plan(WARSAW, ZORBLAX), answered(1, 2))

    def answer(model_name: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        if ZORBLAX in messages[-1]["content"].rsplit("<question>", 1)[1]:
            return {"text": "The Zorblax festival lasts three days [2].", "delay": 0.3}
        return {"text": "About 1.7 million people live in Warsaw [1]."}

    model.responder = answer
    events = await research(client, f"Answer all: {WARSAW} {ZORBLAX}")
    assert events[-1]["type"] == "done"
    drafts = [e["text"] for e in events if e["type"] == "draft"]
    assert len(drafts) == 3  # the plan, then each part
    assert f"## Not finished\n\nNot researched to the end:\n\n- {WARSAW}\n- {ZORBLAX}" in drafts[0]
    warsaw = f"## {WARSAW}\n\nAbout 1.7 million people live in Warsaw [1]."
    assert warsaw in drafts[1] and f"- {ZORBLAX}" in drafts[1]  # part 2 not written yet
    assert warsaw in drafts[2] and "The Zorblax festival lasts three days [2]." in drafts[2]
    first_token = next(n for n, e in enumerate(events) if e["type"] == "token")
    assert max(n for n, e in enumerate(events) if e["type"] == "draft") < first_token
    # Not part of the reply: what streamed as tokens is what is saved.
    saved = (await messages_of(client, events[0]["chat_id"]))[1]
    assert saved["content"] == tokens(events) and "Stopped before" not in saved["content"]


async def test_stop_while_searching_saves_the_plan_as_not_researched(client, model) -> None:
    model.push(plan(WARSAW, STEAM), {"text": json.dumps({"answered": [1]}), "delay": 0.5})
    async with client.stream(
        "POST", "/api/messages", json={"content": f"{WARSAW} {STEAM}", "mode": "research"}
    ) as response:
        events = []
        async for event in read_events(response):
            events.append(event)
            if event["type"] == "chat":
                chat_id = event["chat_id"]
            elif event["type"] == "step" and event["text"].startswith("Reading "):
                assert (await client.post(f"/api/chats/{chat_id}/stop")).status_code == 200
    report = tokens(events)
    assert f"## Not finished\n\nNot researched to the end:\n\n- {WARSAW}\n- {STEAM}" in report
    assert "## Sources" not in report  # nothing cited yet
    assert (await messages_of(client, chat_id))[1]["content"] == report


async def test_a_part_that_fails_ends_the_report_with_an_error_keeping_what_was_written(
    client, model
) -> None:
    model.push(plan(WARSAW, ZORBLAX), answered(1, 2))

    def answer(model_name: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        if ZORBLAX in messages[-1]["content"].rsplit("<question>", 1)[1]:
            return {"text": "The Zorblax festival", "delay": 0.5, "error": "the provider is down"}
        return {"text": "About 1.7 million people live in Warsaw [1]."}

    model.responder = answer
    events = await research(client, f"{WARSAW} {ZORBLAX}")
    assert events[-1]["type"] == "error"
    report = tokens(events)
    assert f"## {WARSAW}\n\nAbout 1.7 million people live in Warsaw [1]." in report
    assert f"## {ZORBLAX}\n\nThe Zorblax festival" in report  # cut where it failed
    saved = (await messages_of(client, events[0]["chat_id"]))[1]
    assert (saved["status"], saved["content"]) == ("error", report)


async def test_research_reads_the_users_documents_and_what_they_told_before(
    client, model, chat_services: Services
) -> None:
    tag = uuid.uuid4().hex[:8]
    town = f"{tag}ville"
    model.push({"text": "Noted."})
    told = await send(client, f"I live in {town} and take the ferry to work.")
    said = (await messages_of(client, told[0]["chat_id"]))[0]
    fact = f"Lives in {town} and takes the ferry to work"
    memory = await memory_store.save_grounded_memory(
        chat_services.database.pool, chat_services.embedder, fact,
        f"I live in {town} and take the ferry to work", uuid.UUID(said["message_id"]),
    )  # fmt: skip
    guide = (
        f"# The {town} ferry\n\nThe {town} ferry leaves pier 4 at 7:15 every morning and"
        " crosses the bay in 40 minutes.\n"
    )
    uploaded = await upload(client, f"{tag}-ferry.md", guide.encode())
    assert uploaded.status_code == 201, uploaded.text
    document_id = uploaded.json()["document_id"]
    try:
        assert (await processed(client, document_id))["status"] == "ready"
        ferry = f"When does the {town} ferry leave?"
        model.push(plan(ferry, WARSAW), answered(1, 2))
        model.responder = writer({ferry: "At 7:15 from pier 4 [1].", WARSAW: "1.7 million [2]."})
        events = await research(client, f"When does the ferry where I live leave? And {WARSAW}")
    finally:  # the user's memories and documents are every test's
        await client.delete(f"/api/memories/{memory.memory['memory_id']}")
        await client.delete(f"/api/documents/{document_id}")
    utility = [c["messages"][-1]["content"] for c in model.calls if c["model"] == "utility"]
    assert f"<memories>\n- {fact}" in utility[0]  # the plan knows where "where I live" is
    assert "Found 1 passage in your documents" in steps(events)
    sources = next(e for e in events if e["type"] == "sources")["sources"]
    mine = next(s for s in sources if s.get("kind") == "document")
    assert mine["title"] == f"{tag}-ferry.md" and "7:15" in mine["text"]
    assert mine["url"].startswith(f"#/documents/{document_id}?chunk=")
    # The check and the ferry's part read the passage, as one of the numbered sources.
    assert f'<source n="{mine["n"]}" title="{tag}-ferry.md">' in utility[1]
    parts = [c["messages"][-1]["content"] for c in model.calls if c["model"] == "chat"]
    assert "leaves pier 4 at 7:15" in next(p for p in parts if ferry in p)
    # The user's own passage comes first: cited [1], listed as a document of theirs.
    assert mine["n"] == 1 and f"[1] {tag}-ferry.md (your document)" in tokens(events)


async def test_a_part_written_without_citations_says_which_sources_it_read(client, model) -> None:
    model.push(plan(WARSAW), answered(1), {"text": "About 1.7 million people live there."})
    report = tokens(await research(client, WARSAW))
    read = re.search(
        r"About 1\.7 million people live there\.\n\n_Read for this part: (.+)_", report
    )
    assert read and re.fullmatch(r"\[\d+\]( \[\d+\])*", read.group(1)), report
    # Those sources count as cited: the report lists them.
    assert all(f"\n{n} [" in report.split("## Sources")[1] for n in read.group(1).split())


async def test_a_part_that_repeats_its_source_is_cited_inline(client, model) -> None:
    # The local model copies a source's sentence and leaves out its number: the sentence is cited
    # with the source that states it, and the part needs no "Read for this part" line.
    model.push(
        plan(ZORBLAX),
        answered(1),
        {"text": "The Zorblax festival lasts three days and ends with a lantern parade."},
    )
    report = tokens(await research(client, ZORBLAX))
    part = re.search(r"The Zorblax festival lasts three days and ends with a lantern parade "
                     r"\[(\d+)\]\.\n", report)  # fmt: skip
    assert part, report
    assert "_Read for this part" not in report
    assert f"\n[{part.group(1)}] [Zorblax festival](https://example.org/zorblax)" in report


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
    saved = await messages_of(client, events[0]["chat_id"])
    assert [m["mode"] for m in saved] == ["chat", "chat"]


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


async def test_each_search_reads_research_pages_pages(settings: Settings) -> None:
    asked: list[tuple[str, int]] = []

    class Provider:
        async def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
            asked.append((query, max_results))
            return []

    budget = research_budget(
        settings.model_copy(update={"research_pages": 2}),
        ModelPlan([{"model_name": "chat", "litellm_params": {"model": "local/qwen"}}], []),
    )
    assert budget.pages == 2
    run = Research(Provider(), None, None, WARSAW, "", budget, print, print, print, dict)
    assert await run._one_search(WARSAW) == []
    assert asked == [(WARSAW, 2)]


def test_a_part_is_written_with_the_users_words_for_it_alone() -> None:
    asked = "Answer all: How many people live in Warsaw? Who improved the steam engine?"
    assert user_wording(asked, "What is the population of Warsaw?", 2) == (
        "Answer all: How many people live in Warsaw?"
    )
    assert user_wording(asked, "Who improved the steam engine?", 2) == (
        "Who improved the steam engine?"
    )
    # One sentence asking both: none of it, or each part would be answered in every part.
    one = "How many people live in Warsaw and who improved the steam engine?"
    assert user_wording(one, "What is the population of Warsaw?", 2) == ""
    # A sentence sharing no word with the sub-question is not its wording.
    assert user_wording(asked, "When did the Zorblax festival begin?", 2) == ""
    # One sub-question: the question is the whole message.
    assert user_wording(one, "How many people live in Warsaw?", 1) == one


def test_a_short_answer_ends_each_parts_first_sentence() -> None:
    # The local model answers "Who was the Norse leader?" with a bare "Rollo [1]": the short
    # answer must not run it into the next part's sentence.
    sections = [("Who was the Norse leader?", "Rollo [1]"), ("Who?", "Davies did it [2]. Also…")]
    report = _report("Answer all", sections, [], [])
    assert "**Short answer:** Rollo [1]. Davies did it [2]." in report
    # A period inside a sentence ("c. 1,300,000", "e.g. the") does not end it: one did, and the
    # short answer read "According to the sources, in 1939, c."
    sections = [("How many?", "In 1939, c. 1,300,000 people lived there [1]. Later, fewer.")]
    sections.append(("Which?", "Those used, e.g. the ones [2] here. Next."))
    report = _report("Answer all", sections, [], [])
    short = "In 1939, c. 1,300,000 people lived there [1]. Those used, e.g. the ones [2] here."
    assert f"**Short answer:** {short}" in report


def test_a_short_answer_is_the_sentence_of_each_part_that_answers_it() -> None:
    # The local model opened the condenser part with a sentence about thermodynamics, and named
    # Watt in the next one: the short answer took the first, which answers nothing.
    sections = [
        (
            "Who developed the separate condenser for the steam engine?",
            "The steam engine contributed much to thermodynamic theory [2]. Measurements made by "
            "Watt on a model steam engine led to the development of the separate condenser [2].",
        ),
        ("What is the largest city of Poland?", "Warsaw is the largest city of Poland [1]."),
    ]
    report = _report("Answer all", sections, [], [])
    short = (
        "Measurements made by Watt on a model steam engine led to the development of the "
        "separate condenser [2]. Warsaw is the largest city of Poland [1]."
    )
    assert f"**Short answer:** {short}\n" in report


def test_plans_and_checks_are_read_strictly() -> None:
    assert parse_plan('{"sub_questions": ["A?", " a? ", "", 3, "B?"]}', 5) == ["A?", "B?"]
    assert parse_plan('Plan: {"sub_questions": ["A?", "B?", "C?"]}', 2) == ["A?", "B?"]
    assert parse_plan("no json", 5) == [] and parse_plan('{"questions": ["A?"]}', 5) == []
    assert parse_answered('{"answered": [1, 3, 7, "2", true]}', 3) == {1, 3}
    assert parse_answered('{"answered": []}', 3) == set()
    assert parse_answered("yes", 3) is None and parse_answered('{"answered": 1}', 3) is None

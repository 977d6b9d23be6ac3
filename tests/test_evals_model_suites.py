"""The model suites `evidence-check` and `web-answers` end to end on the scripted model: the real
chunker, ranker, embedder, router, chat graph and `pages` search provider, over a tiny data file in
the SQuAD pages format (two invented pages, one answerable and one unanswerable question), so the
expected scores follow from what the scripted model is made to say.

The scripted queue is consumed in call order: for evidence-check one `utility` verdict per question
(answerable first); for web-answers the chat model's search, the verdict, the answer, and so on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from litellm import Router

from core.config import Settings
from core.llm_router import ModelPlan, plan_models
from core.scripted_llm import ScriptedProvider
from core.services import Services
from evals import evidence_check, web_answers
from evals.datasets import load_squad
from rag.search_providers import PagesProvider
from rag.web_rag import CHUNKS_FOR_LOCAL_MODEL, CHUNKS_KEPT, chunks_kept_for
from tests.conftest import SCRIPTED_MODELS

FESTIVAL = (
    "# Zorblax festival\n\nThe Zorblax festival is held every March in Quentaro, a small harbour"
    " town known for its lanterns and its brass bands. The festival started in 1951 and lasts"
    " three days.\n\n## Music\n\nBrass bands play on the harbour square every evening of the"
    " festival, and a lantern parade on the beach ends it."
)
HARBOUR = (
    "# Quentaro harbour\n\nQuentaro harbour is a fishing port on the north coast. Its lighthouse"
    " was built from grey granite and is painted white.\n\nThe harbour shelters about forty"
    " fishing boats in winter, when storms close the coastal road. Fishermen land sardines and"
    " mackerel on the old stone quay, and the fish market opens at dawn beside the customs house,"
    " where visitors can watch the catch being sold before the cafes open."
)
ANSWERABLE = "In what year did the Zorblax festival start?"
UNANSWERABLE = "Who founded the Quentaro lighthouse?"


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "pages.json"
    path.write_text(
        json.dumps(
            {
                "pages": [
                    {"title": "Zorblax festival", "markdown": FESTIVAL},
                    {"title": "Quentaro harbour", "markdown": HARBOUR},
                ],
                "questions": [
                    {
                        "id": "q1",
                        "page": "Zorblax festival",
                        "question": ANSWERABLE,
                        "answerable": True,
                        "answers": ["1951", "in 1951"],
                        "answer_spans": [[FESTIVAL.index("1951"), 4]],
                    },
                    {
                        "id": "q2",
                        "page": "Quentaro harbour",
                        "question": UNANSWERABLE,
                        "answerable": False,
                        "answers": [],
                        "answer_spans": [],
                    },
                ],
            }
        )
    )
    return path


def options(data: Path) -> argparse.Namespace:
    return argparse.Namespace(data=data, limit=2, no_save=True)


def verdict(enough: bool) -> dict[str, Any]:
    return {"text": json.dumps({"reason": "checked", "enough": "yes" if enough else "no"})}


def search(query: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "web_search", "arguments": {"query": query, "context": ""}}]}


def judged(correct: str) -> dict[str, Any]:
    return {"text": json.dumps({"reason": "graded", "correct": correct})}


# --- evidence-check --------------------------------------------------------------------------


async def test_evidence_check_right_verdicts(
    chat_services: Services, model: ScriptedProvider, data_file: Path
) -> None:
    model.push(verdict(True), verdict(False))
    report = await evidence_check.evaluate(chat_services, options(data_file))
    results = report.results
    assert [c["model"] for c in model.calls] == ["utility", "utility"]
    first = model.calls[0]["messages"][1]["content"]
    assert ANSWERABLE in first and '<source n="1" title="Zorblax festival">' in first
    assert "1951" in first  # the answer's chunk was shown
    assert results["chunks_shown"] == CHUNKS_KEPT  # the scripted chat model is not local
    for labelling in ("the question is answerable", "an answer span is in the chunks shown"):
        scores = results["scores"][labelling]
        assert (scores["n"], scores["accuracy"], scores["precision"], scores["recall"]) == (
            2, 1.0, 1.0, 1.0,
        )  # fmt: skip
    assert results["unchecked"] == 0
    assert [c["answer_shown"] for c in results["checks"]] == [True, False]
    assert report.models["utility"] == "scripted/utility, then scripted/chat"
    assert "0 verdicts unchecked" in report.markdown()


async def test_evidence_check_wrong_and_unchecked_verdicts(
    chat_services: Services, model: ScriptedProvider, data_file: Path
) -> None:
    # "no" on the answerable question; no usable verdict (the app's "yes") on the other.
    model.push(verdict(False), {"text": "Looks fine to me."})
    results = (await evidence_check.evaluate(chat_services, options(data_file))).results
    scores = results["scores"]["the question is answerable"]
    assert (scores["accuracy"], scores["precision"], scores["recall"]) == (0.0, 0.0, 0.0)
    only_checked = results["scores"]["the question is answerable (checked verdicts only)"]
    assert (only_checked["n"], only_checked["accuracy"]) == (1, 0.0)
    assert results["unchecked"] == 1
    assert results["verdicts"]["unanswerable"] == {"n": 1, "yes": 1, "no": 0, "unchecked": 1}
    assert results["verdicts"]["answerable"] == {"n": 1, "yes": 0, "no": 1, "unchecked": 0}


def test_the_local_model_reads_fewer_chunks() -> None:
    def plan(model: str) -> ModelPlan:
        return ModelPlan([{"model_name": "chat", "litellm_params": {"model": model}}], [])

    assert chunks_kept_for(plan("local/qwen")) == CHUNKS_FOR_LOCAL_MODEL
    assert chunks_kept_for(plan("groq/openai/gpt-oss-120b")) == CHUNKS_KEPT


# --- web-answers -----------------------------------------------------------------------------


def with_pages(services: Services, data: Path, folder: Path) -> Services:
    web_answers.write_pages(load_squad(data), folder)
    return dataclasses.replace(services, search_provider=PagesProvider(folder))


async def test_web_answers_automatic_checks(
    chat_services: Services, model: ScriptedProvider, data_file: Path, tmp_path: Path
) -> None:
    services = with_pages(chat_services, data_file, tmp_path / "pages")
    model.push(
        # answerable: one search, enough, an answer citing the right source and a wrong one
        search("Zorblax festival start year lighthouse"),
        verdict(True),
        {"text": "The Zorblax festival started in 1951 [1][2]."},
        # unanswerable: three searches, then "I couldn't find"
        search("Quentaro lighthouse founder"),
        verdict(False),
        search("who built the Quentaro lighthouse"),
        verdict(False),
        search("Quentaro lighthouse history"),
        {"text": "I couldn't find information about who founded the Quentaro lighthouse."},
    )
    report = await web_answers.evaluate(services, options(data_file))
    assert model.remaining == 0
    results = report.results
    first, second = results["answers"]
    assert first["sources"] == ["1. Zorblax festival", "2. Quentaro harbour"]
    assert first["cited"] == [1, 2]
    assert first["cited_with_answer_text"] == first["cited_with_answer_span"] == [1]
    assert (first["searches"], second["searches"]) == (1, 3)
    assert second["queries"][-1] == "Quentaro lighthouse history"
    answerable = results["by_group"]["answerable"]
    assert answerable["correct"] == answerable["contains_gold"] == 1.0
    assert answerable["citation_precision_text"] == answerable["citation_precision_span"] == 0.5
    assert answerable["dont_know"] == 0.0
    unanswerable = results["by_group"]["unanswerable"]
    assert unanswerable["correct"] == unanswerable["dont_know"] == 1.0
    assert unanswerable["cited"] == 0.0
    every = results["by_group"]["all"]
    assert every["searches"] == 2.0 and every["errors"] == 0
    assert every["searches_histogram"] == {"0": 0, "1": 1, "2": 0, "3": 1}
    assert results["correctness"].startswith("automatic")
    assert report.models["judge"] == "none (automatic checks)"
    assert "| answerable | 1 | 1.000 | 1.000 |" in report.markdown()


async def test_web_answers_with_a_judge(
    chat_services: Services,
    model: ScriptedProvider,
    data_file: Path,
    tmp_path: Path,
    settings: Settings,
) -> None:
    # MODELS_CONFIG with a `judge` deployment on the same scripted provider.
    config = yaml.safe_load(SCRIPTED_MODELS.read_text())
    config["model_list"].append(
        {"model_name": "judge", "litellm_params": {"model": "scripted/judge"}}
    )
    models = tmp_path / "models.yaml"
    models.write_text(yaml.safe_dump(config))
    plan = plan_models(settings.model_copy(update={"models_config": models}))
    router = Router(model_list=plan.model_list, fallbacks=plan.fallbacks, **plan.router_settings)
    services = dataclasses.replace(
        with_pages(chat_services, data_file, tmp_path / "pages"), model_plan=plan, router=router
    )
    model.push(
        search("Zorblax festival start"),
        verdict(True),
        {"text": "It started in 1951 [1]."},
        judged("no"),  # the judge disagrees with the automatic check: the judge counts
        search("Quentaro lighthouse founder"),
        verdict(True),
        {"text": "Captain Orly founded it [1]."},
        {"text": "not JSON"},  # an unusable judge reply counts as not correct
    )
    report = await web_answers.evaluate(services, options(data_file))
    assert [c["model"] for c in model.calls].count("judge") == 2
    judge_prompt = model.calls[3]["messages"][1]["content"]
    assert "1951 / in 1951" in judge_prompt and "[1]" not in judge_prompt
    results = report.results
    answerable = results["by_group"]["answerable"]
    assert (answerable["correct"], answerable["contains_gold"]) == (0.0, 1.0)
    assert answerable["citation_precision_span"] == 1.0
    unanswerable = results["by_group"]["unanswerable"]
    assert (unanswerable["correct"], unanswerable["dont_know"]) == (0.0, 0.0)
    assert results["by_group"]["all"]["judge_unusable"] == 1
    assert results["correctness"] == "LLM judge (scripted/judge)"
    assert report.models["judge"] == "scripted/judge"

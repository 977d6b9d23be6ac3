"""The eval harness end to end (`python -m evals <suite>`), with the two suites that need no
language model run on a sample, so a change that breaks retrieval quality fails here.

Floors come from full runs (evals/RESULTS.md) and from these samples' own figures, with a margin for
model and library drift; a broken store, embedder, chunker or ranker falls far below them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from core.db import Database
from core.llm_router import build_router, plan_models, provider_handler
from core.scripted_llm import ScriptedProvider
from core.services import Services
from evals import memory_qa, report
from evals.__main__ import main
from evals.datasets import LOCOMO_FILE, SQUAD_FILE, load_locomo, sample
from evals.memory_qa import answerable_in
from evals.memory_retrieval import evaluate as evaluate_memory_retrieval
from evals.metrics import mean_by, recall_at, reciprocal_rank, token_f1, verdict_scores

# memory-retrieval, `--limit 60`: retrieve_memory (hybrid) recall@10 0.593, MRR 0.353; its vector
# half alone 0.409 / 0.202; BM25 0.614 / 0.426 (all 498 questions: see evals/RESULTS.md).
MEMORY_LIMIT = 60
MEMORY_RECALL_AT_10_FLOOR = 0.52
MEMORY_MRR_FLOOR = 0.29
BM25_RECALL_AT_10_FLOOR = 0.5
# evidence-ranking, `--limit 40`, default method (hybrid): see RESULTS.md for the full file.
RANKING_LIMIT = 40
RANKING_RECALL_AT_20_FLOOR = 0.95
RANKING_RECALL_AT_5_FLOOR = 0.9


@pytest.fixture
def results_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs write their records here, not into the repository's evals/results."""
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setattr(report, "RESULTS_MD", tmp_path / "RESULTS.md")
    return tmp_path


async def run_cli(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["evals", *args])
    return await main()


async def test_evidence_ranking_suite_prints_its_table_and_records_the_run(
    results_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run_cli(monkeypatch, "evidence-ranking", "--limit", str(RANKING_LIMIT)) == 0

    printed = capsys.readouterr().out
    assert "| method | recall@5 | recall@20 | MRR |" in printed
    record = json.loads((results_dir / "results" / "evidence-ranking.json").read_text())
    assert record["command"] == f"python -m evals evidence-ranking --limit {RANKING_LIMIT}"
    assert record["data"].endswith("squad/pages.json") and len(record["data_sha256"]) == 64
    assert record["commit"] and record["models"]["embedder"].startswith("all-MiniLM-L6-v2")
    budget = record["results"]["budgets"][0]
    assert record["results"]["questions"] == RANKING_LIMIT
    assert budget["answer_spans_kept"] == 1.0
    default = next(row for row in budget["methods"] if "(default)" in row["method"])
    assert default["recall_at_20"] >= RANKING_RECALL_AT_20_FLOOR
    assert default["recall_at_5"] >= RANKING_RECALL_AT_5_FLOOR
    assert 0 < budget["chunk_statistics"]["share_at_budget"] < 0.5
    summary = (results_dir / "RESULTS.md").read_text()
    assert "## evidence-ranking" in summary and record["markdown"] in summary
    assert "## memory-qa\n\nNot run yet" in summary


async def test_memory_retrieval_suite_finds_evidence_above_the_floor(
    memory_pool, embedder, results_dir: Path
) -> None:
    results = await evaluate_memory_retrieval(
        memory_pool, embedder, load_locomo(LOCOMO_FILE), limit=MEMORY_LIMIT
    )

    assert results["questions"] == MEMORY_LIMIT
    assert results["memories_stored"] > 1000  # every turn of the three conversations
    dense = results["by_method"]["retrieve_memory"]["all"]
    keyword = results["by_method"]["BM25 baseline"]["all"]
    vectors = results["by_method"]["vectors only"]["all"]
    assert dense["n"] == keyword["n"] == vectors["n"] == MEMORY_LIMIT
    assert dense["recall@10"] > vectors["recall@10"] + 0.1  # what the word half adds
    assert dense["recall@10"] >= MEMORY_RECALL_AT_10_FLOOR
    assert dense["MRR"] >= MEMORY_MRR_FLOOR
    assert keyword["recall@10"] >= BM25_RECALL_AT_10_FLOOR
    assert dense["empty"] < 0.1  # the relevance floor rarely drops every memory
    assert (
        sum(
            row["n"]
            for name, row in results["by_method"]["retrieve_memory"].items()
            if name != "all"
        )
        == MEMORY_LIMIT
    )


async def test_cli_refuses_a_missing_data_file(
    results_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = results_dir / "nope.json"
    assert await run_cli(monkeypatch, "memory-retrieval", "--data", str(missing)) == 1
    assert "No evaluation data" in capsys.readouterr().err
    assert not (results_dir / "results").exists()


def test_sample_spreads_evenly_and_is_deterministic() -> None:
    items = list(range(100))
    assert sample(items, 5) == [0, 25, 50, 74, 99]
    assert sample(items, 5) == sample(items, 5)
    assert sample(items, None) == items and sample(items, 500) == items


def test_metrics() -> None:
    assert recall_at(["a", "x", "b"], {"a", "b"}, 2) == 0.5
    assert recall_at(["a", "x", "b"], {"a", "b"}, 3) == 1.0
    assert reciprocal_rank(["x", "y", "a"], {"a"}) == pytest.approx(1 / 3)
    assert reciprocal_rank(["x"], {"a"}) == 0.0
    assert token_f1("The Prius.", "prius") == 1.0
    assert token_f1("a red car", "red bicycle") == pytest.approx(0.5)
    assert token_f1("", "prius") == 0.0
    scores = verdict_scores([(True, True), (True, False), (False, False), (False, True)])
    assert scores == {"n": 4, "accuracy": 0.5, "precision": 0.5, "recall": 0.5}
    means = mean_by([("x", {"s": 1.0}), ("y", {"s": 0.0}), ("y", {"s": 1.0})])
    assert means["y"] == {"n": 2, "s": 0.5} and means["all"]["s"] == pytest.approx(2 / 3)


def test_data_files_are_read_in_place() -> None:
    # The third-party sets are licensed for use, not for copying into this repository.
    assert LOCOMO_FILE.is_file() and SQUAD_FILE.is_file()
    repo = Path(__file__).resolve().parent.parent
    assert repo not in LOCOMO_FILE.resolve().parents


# --- memory-qa on the scripted model -----------------------------------------------------------

JUDGED_MODELS = """\
model_list:
  - {model_name: chat, litellm_params: {model: scripted/chat}}
  - {model_name: utility, litellm_params: {model: scripted/utility}}
  - {model_name: judge, litellm_params: {model: scripted/judge}}
router_settings: {num_retries: 0}
"""


@pytest.fixture
async def qa_services(settings, fresh_database: str, embedder, tmp_path: Path):
    """The app's services on a database of their own (the suite empties it between
    conversations), every model role scripted, with a `judge` deployment."""
    models = tmp_path / "models.yaml"
    models.write_text(JUDGED_MODELS)
    qa_settings = settings.model_copy(
        update={"database_url": fresh_database, "models_config": models}
    )
    database = await Database.open(qa_settings)
    plan = plan_models(qa_settings)
    services = Services(qa_settings, database, embedder, build_router(qa_settings, plan), plan)
    yield services
    await database.close()


def last_text(messages: list[dict]) -> str:
    return str(messages[-1].get("content") or "")


async def test_memory_qa_replays_sessions_and_grades_the_answers(qa_services) -> None:
    conversation = load_locomo(LOCOMO_FILE)[0]
    questions = sample(answerable_in(conversation, 1), 2)
    assert len(questions) == 2 and all(q.answer for q in questions)
    right, wrong = questions
    provider = provider_handler("scripted")
    assert isinstance(provider, ScriptedProvider)
    provider.reset()
    judged: list[str] = []

    def respond(model: str, messages: list[dict]) -> dict:
        """A model that saves two facts per session, looks memories up for questions, knows the
        answer to the first question only, and a judge that checks the gold answer is there."""
        if model == "judge":
            prompt = last_text(messages)
            judged.append(prompt)
            gold = prompt.split("<gold_answer>\n")[1].split("\n")[0]
            answer = prompt.split("<answer>\n")[1]
            return {"text": json.dumps({"correct": "yes" if gold in answer else "no"})}
        if messages[-1]["role"] == "tool":
            asked = next(m for m in reversed(messages) if m["role"] == "user")["content"]
            if asked.startswith("I'm "):
                return {"text": "Noted."}
            return {"text": right.answer if right.question in asked else "Sorry, no idea."}
        if last_text(messages).startswith("I'm "):
            facts = ["The user is Caroline.", "Caroline talked with Melanie."]
            return {
                "tool_calls": [
                    {"name": "save_memory", "arguments": {"content": fact}} for fact in facts
                ]
            }
        return {"tool_calls": [{"name": "retrieve_memory", "arguments": {"query": "Caroline"}}]}

    provider.responder = respond
    results = await memory_qa.evaluate(qa_services, [conversation], limit=2, sessions=1)

    assert results["sessions_replayed"] == 1
    assert results["sessions"][0]["memories_saved"] == 2
    assert results["sessions"][0]["status"] == "complete"
    assert results["judge"] == "scripted/judge" and len(judged) == 2
    overall = results["by_category"]["all"]
    assert overall["n"] == 2
    assert overall["F1"] == pytest.approx(0.5)  # one exact answer, one with no common word
    assert overall["contains"] == overall["judge"] == pytest.approx(0.5)
    assert overall["looked up memory"] == 1.0
    by_id = {a["id"]: a for a in results["answers"]}
    assert by_id[right.id]["reply"] == right.answer and by_id[right.id]["F1"] == 1.0
    assert by_id[wrong.id]["F1"] == 0.0
    assert "| **all** | 2 | 0.500 | 0.500 | 0.500 | 100% |" in "\n".join(
        t.markdown() for t in memory_qa.tables(results)
    )

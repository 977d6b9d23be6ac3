"""Grading free-text answers: the LLM judge, used when MODELS_CONFIG has a usable `judge`
deployment (see core/models.yaml), and the automatic checks used with or without it."""

from __future__ import annotations

import json
import re
from typing import Any

from core.llm_router import ModelPlan
from core.prompts import answer_judge_request
from evals.metrics import normalize_answer

JUDGE = "judge"  # the deployment group the judge is called through
_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)

# An answer saying it does not know. Used for questions that have no answer (LoCoMo's adversarial
# category, SQuAD's unanswerable ones); the app's web answer says "I couldn't find information
# about ..." by instruction.
_DONT_KNOW = re.compile(
    r"couldn.?t find|could not find|can.?t find|cannot find|no information|not mentioned"
    r"|don.?t (?:know|have)|do not (?:know|have)|not (?:sure|available|specified|stated)"
    r"|no (?:record|mention|memory|memories)|unable to|isn.?t mentioned|not in (?:my|the)",
    re.IGNORECASE,
)


def says_dont_know(answer: str) -> bool:
    return bool(_DONT_KNOW.search(answer))


def contains_answer(answer: str, golds: list[str]) -> bool:
    """Whether a gold answer occurs in the answer, both normalized as SQuAD does."""
    text = f" {normalize_answer(answer)} "
    return any(f" {normalize_answer(gold)} " in text for gold in golds if normalize_answer(gold))


def judge_model(plan: ModelPlan) -> str | None:
    """The judge's model description, or None when no `judge` deployment is usable."""
    if any(d["model_name"] == JUDGE for d in plan.model_list):
        return plan.describe(JUDGE)
    return None


async def judge_answer(router: Any, question: str, gold: str | None, answer: str) -> bool | None:
    """The judge's verdict, or None when its reply is not the JSON asked for."""
    response = await router.acompletion(
        model=JUDGE,
        messages=answer_judge_request(question, gold, answer),
        temperature=0,
        max_tokens=200,
    )
    match = _JSON_OBJECT.search(response.choices[0].message.content or "")
    if not match:
        return None
    try:
        data: Any = json.loads(match.group(0))
    except ValueError:
        return None
    verdict = str(data.get("correct", "")).strip().lower() if isinstance(data, dict) else ""
    return {"yes": True, "no": False}.get(verdict)

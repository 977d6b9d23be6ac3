"""The third-party evaluation sets, read in place from ../shared/evaldata (never copied here).

LoCoMo (CC BY-NC 4.0): long conversations between two people over many sessions, with questions
whose `evidence` names the turns that answer them. SQuAD 2.0 pages (CC BY-SA 4.0): five Wikipedia
articles as Markdown, with answerable questions (answer spans at their place in the page) and
unanswerable ones. See ../shared/evaldata/README.md for sources and schemas. EVALDATA_DIR overrides
the folder; every suite also takes `--data` for another file of the same format.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import numpy as np

from rag.search_providers import SearchResult

ROOT = Path(__file__).resolve().parent.parent
EVALDATA = Path(os.environ.get("EVALDATA_DIR", ROOT.parent / "shared" / "evaldata"))
LOCOMO_FILE = EVALDATA / "locomo" / "conversations.json"
SQUAD_FILE = EVALDATA / "squad" / "pages.json"

LOCOMO_CATEGORIES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

T = TypeVar("T")


def sample(items: Sequence[T], limit: int | None) -> list[T]:
    """`limit` items spread evenly over the list (so every page or session is represented), or
    all of them. Deterministic: the same limit always picks the same items."""
    if not limit or limit >= len(items):
        return list(items)
    picks = np.linspace(0, len(items) - 1, limit).round().astype(int)
    return [items[i] for i in sorted(set(picks.tolist()))]


# --- LoCoMo ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    id: str  # "D3:7" = session 3, turn 7
    speaker: str
    text: str


@dataclass(frozen=True)
class Session:
    number: int
    date_time: str  # as written in the data, e.g. "1:56 pm on 8 May, 2023"
    turns: list[Turn]

    @property
    def date(self) -> str:
        """The day only ("8 May, 2023")."""
        return self.date_time.split(" on ", 1)[-1]

    @property
    def started(self) -> datetime | None:
        """When the session took place (UTC: the data names no time zone), None if unreadable."""
        try:
            return datetime.strptime(self.date_time, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)
        except ValueError:
            return None


@dataclass(frozen=True)
class LocomoQuestion:
    id: str
    category: int
    question: str
    answer: str | None  # None for adversarial questions (no answer in the conversation)
    adversarial_answer: str | None
    evidence: list[str]  # turn ids

    @property
    def category_name(self) -> str:
        return LOCOMO_CATEGORIES.get(self.category, str(self.category))


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: list[Session]
    questions: list[LocomoQuestion]


def load_locomo(path: Path = LOCOMO_FILE) -> list[Conversation]:
    data = json.loads(path.read_text("utf-8"))
    conversations = []
    for raw in data["conversations"]:
        sessions = [
            Session(
                int(s["session"]),
                s["date_time"],
                [Turn(t["id"], t["speaker"], t["text"]) for t in s["turns"]],
            )
            for s in raw["sessions"]
        ]
        questions = [
            LocomoQuestion(
                q["id"],
                int(q["category"]),
                q["question"],
                None if q.get("answer") is None else str(q["answer"]),
                q.get("adversarial_answer"),
                list(q.get("evidence") or []),
            )
            for q in raw["questions"]
        ]
        conversations.append(
            Conversation(raw["sample_id"], raw["speaker_a"], raw["speaker_b"], sessions, questions)
        )
    return conversations


# --- SQuAD pages -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SquadQuestion:
    id: str
    page: str
    question: str
    answerable: bool
    answers: list[str]
    spans: list[tuple[int, int]]  # (start, end) of each answer in the page's Markdown


@dataclass(frozen=True)
class Squad:
    pages: dict[str, str]  # title → Markdown
    questions: list[SquadQuestion]

    @property
    def answerable(self) -> list[SquadQuestion]:
        return [q for q in self.questions if q.answerable]

    @property
    def unanswerable(self) -> list[SquadQuestion]:
        return [q for q in self.questions if not q.answerable]

    def results(self) -> list[SearchResult]:
        """The pages as a search would return them (Wikipedia URLs)."""
        return [SearchResult(page_url(title), title, text) for title, text in self.pages.items()]


def page_url(title: str) -> str:
    return f"https://en.wikipedia.org/wiki/{title.replace(' ', '_')}"


def load_squad(path: Path = SQUAD_FILE) -> Squad:
    data = json.loads(path.read_text("utf-8"))
    pages = {p["title"]: p["markdown"] for p in data["pages"]}
    questions = [
        SquadQuestion(
            q["id"],
            q["page"],
            q["question"],
            bool(q["answerable"]),
            list(q.get("answers") or []),
            [(start, start + length) for start, length in q.get("answer_spans") or []],
        )
        for q in data["questions"]
    ]
    return Squad(pages, questions)

"""When a streamed reply counts as going round in circles (core/repetition.py): a paragraph again,
or a long sentence a third time, however the text is cut into pieces; never real prose."""

from __future__ import annotations

import json

import pytest

from core.repetition import RepetitionGuard
from evals.datasets import SQUAD_FILE

CIRCLE = (
    "As you pedal harder still, the chain connected to the pedals moves even faster. This causes "
    "the gear on the front wheel to rotate even faster than the gear on the rear wheel. The ratio "
    "between the gears determines how much force is transmitted.\n\n"
)


def streamed(text: str, piece: int = 7) -> int | None:
    """Where (the end of which piece, in characters) the guard first calls `text` a loop."""
    guard = RepetitionGuard()
    for start in range(0, len(text), piece):
        if guard.feed(text[start : start + piece]):
            return min(start + piece, len(text))
    return None


def test_a_paragraph_written_again_is_a_loop_once_it_ends() -> None:
    intro = "Gears change the ratio between the pedals and the back wheel.\n\n"
    text = intro + CIRCLE * 5
    assert streamed(text, 1) == len(intro + CIRCLE * 2)  # at its closing blank line
    assert streamed(intro + CIRCLE) is None


def test_a_long_sentence_a_third_time_is_a_loop_without_any_paragraph() -> None:
    sentence = "The ratio between the gears determines how much force reaches the wheel. "
    assert streamed("Well. " + sentence * 2 + "Done.") is None
    assert streamed("Well. " + sentence * 3 + "Done.") is not None
    # Short lines are said again in real replies (table rows, list items, code): not a loop.
    assert streamed("| yes | no |\n" * 20 + "- Add salt.\n" * 10 + "    return None\n" * 10) is None


def test_case_and_spacing_do_not_hide_a_loop() -> None:
    assert streamed(CIRCLE + CIRCLE.upper().replace(" ", "  ") + "more") is not None


@pytest.mark.skipif(not SQUAD_FILE.exists(), reason="needs ../shared/evaldata")
def test_real_prose_is_never_a_loop() -> None:
    """Every SQuAD 2.0 page (Wikipedia articles, read in place), streamed: none loops."""
    pages = json.loads(SQUAD_FILE.read_text())["pages"]
    assert len(pages) >= 5 and sum(len(page["markdown"]) for page in pages) > 100_000
    looping = [page["title"] for page in pages if streamed(page["markdown"], 13) is not None]
    assert looping == []

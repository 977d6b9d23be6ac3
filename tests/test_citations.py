"""Citation normalization, whole and streamed piece by piece."""

import pytest

from rag.citations import CitationNormalizer, normalize_citations, numbered

CASES = [
    ("Paris is the capital [1].", "Paris is the capital [1]."),
    ("It opened in 1889【2†L1-L3】.", "It opened in 1889[2]."),
    ("Both agree [1, 3].", "Both agree [1][3]."),
    ("See [2†source] and 【1】.", "See [2] and [1]."),
    ("Made up [7] citation.", "Made up  citation."),
    ("Mixed [1, 9] list.", "Mixed [1] list."),
    ("A [link](https://example.com) stays.", "A [link](https://example.com) stays."),
    ("Arrays like a[0] stay? [x] too.", "Arrays like a[0] stay? [x] too."),
    ("[2] opens the answer.", "[2] opens the answer."),
]


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_normalize(raw: str, expected: str) -> None:
    assert normalize_citations(raw, numbered(3)) == expected


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_streamed_piece_by_piece_gives_the_same_text(raw: str, expected: str) -> None:
    for size in (1, 2, 5):
        stream = CitationNormalizer(numbered(3))
        shown = "".join(stream.feed(raw[i : i + size]) for i in range(0, len(raw), size))
        assert shown + stream.finish() == expected


def test_stream_does_not_hold_plain_text() -> None:
    stream = CitationNormalizer(numbered(2))
    assert stream.feed("Hello ") == "Hello "
    assert stream.feed("world [") == "world "
    assert stream.feed("1") == ""
    assert stream.feed("] done") == "[1] done"


def test_a_research_part_cites_only_the_sources_it_read() -> None:
    # A research part is written from a few of the report's sources: a number it was not shown is
    # no citation of what it read (the local model cited the steam-engine page for Warsaw).
    raw = "About 1.7 million people [1][2] live in Warsaw [3, 1]."
    expected = "About 1.7 million people [1] live in Warsaw [1]."
    assert normalize_citations(raw, {1}) == expected
    stream = CitationNormalizer({1})
    assert "".join(stream.feed(c) for c in raw) + stream.finish() == expected

"""Citation normalization, whole and streamed piece by piece."""

import pytest

from rag.citations import CitationNormalizer, SupportCitations, normalize_citations

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
    assert normalize_citations(raw, range(1, 4)) == expected


@pytest.mark.parametrize(("raw", "expected"), CASES)
def test_streamed_piece_by_piece_gives_the_same_text(raw: str, expected: str) -> None:
    for size in (1, 2, 5):
        stream = CitationNormalizer(range(1, 4))
        shown = "".join(stream.feed(raw[i : i + size]) for i in range(0, len(raw), size))
        assert shown + stream.finish() == expected


def test_stream_does_not_hold_plain_text() -> None:
    stream = CitationNormalizer(range(1, 3))
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


# Source texts as a research part or a web answer reads them (numbered as in its prompt).
WARSAW = (
    "Warsaw is the capital and largest city of Poland. It stands on the Vistula River in "
    "east-central Poland. Its population is estimated at 1.740 million residents within a "
    "greater metropolitan area of 2.666 million residents. In 1939, c. 1,300,000 people lived in "
    "Warsaw."
)
WATT = (
    "James Watt developed an improved version of Newcomen's engine, with a separate condenser. "
    "Watt's engine used 75% less coal than Newcomen's."
)
SUPPORTED = [
    # Copied from a source, uncited: its number goes right after the fact, as the prompt asks.
    ("Warsaw is the largest city of Poland.", "Warsaw is the largest city of Poland [1]."),
    (
        "About 1.740 million people live in Warsaw. James Watt developed the separate condenser.",
        "About 1.740 million people live in Warsaw [1]. James Watt developed the separate "
        "condenser [2].",
    ),
    # A period after an abbreviation ends no sentence: nothing is cited after "c" or "e.g".
    (
        "In 1939, c. 1,300,000 people lived in Warsaw, e.g. in its centre.",
        "In 1939, c. 1,300,000 people lived in Warsaw, e.g. in its centre [1].",
    ),
    # A list item, and a last sentence with no final mark.
    (
        "- Watt's engine used 75% less coal\n- Warsaw stands on the Vistula",
        "- Watt's engine used 75% less coal [2]\n- Warsaw stands on the Vistula [1]",
    ),
    # A number its source writes "1,300,000", written "1, 300, 000" by the local model when it
    # copies the sentence: joined again (and then cited, as its numbers are the source's).
    (
        "In 1939, c. 1, 300, 000 people lived in Warsaw.",
        "In 1939, c. 1,300,000 people lived in Warsaw [1].",
    ),
    # A line (or list item) opened with its citations, as the local model wrote research parts:
    # they go after the fact, like every other citation.
    ("[1] Warsaw is the capital of Poland.", "Warsaw is the capital of Poland [1]."),
    (
        "## Warsaw\n[1][2] In 1939, c. 1,300,000 people lived in Warsaw. It is big.\n"
        "- [2] Watt's engine used 75% less coal\n* [1]Warsaw stands on the Vistula [1].",
        "## Warsaw\nIn 1939, c. 1,300,000 people lived in Warsaw [1][2]. It is big.\n"
        "- Watt's engine used 75% less coal [2]\n* Warsaw stands on the Vistula [1].",
    ),
    # A numbered list's items too; and an item's number is no number its fact states.
    (
        "1. [1] Warsaw is the capital of Poland.\n2) [2] Watt's engine used 75% less coal.",
        "1. Warsaw is the capital of Poland [1].\n2) Watt's engine used 75% less coal [2].",
    ),
    (
        "3. Warsaw stands on the Vistula\n12. Watt's engine used 75% less coal.",
        "3. Warsaw stands on the Vistula [1]\n12. Watt's engine used 75% less coal [2].",
    ),
]
LEFT_AS_WRITTEN = [
    # Cited by the model, its number after the mark included.
    "Warsaw is the capital of Poland [1].",
    "Warsaw is the capital of Poland. [1] It is big.",
    # Stated by no source: a number it does not state, too few words shared, a not-found
    # sentence, a heading, a bare greeting, code.
    "Warsaw has 2.5 million residents.",
    # A comma and a space between numbers no source writes together: a list, not one number.
    "In 1939, 300 people lived in Warsaw, 1, 740 in 2014.",
    "Warsaw is lovely in spring and full of parks.",
    "I couldn't find who developed the Warsaw condenser.",
    "## Warsaw, the largest city of Poland\nHi!",
    "```\nprint('Warsaw is the largest city of Poland')\n```",
]


@pytest.mark.parametrize(
    ("raw", "expected"), SUPPORTED + [(text, text) for text in LEFT_AS_WRITTEN]
)
def test_a_sentence_left_uncited_is_cited_with_the_source_that_states_it(
    raw: str, expected: str
) -> None:
    # The local model copies its sources' sentences but rarely writes the [n]: a sentence whose
    # meaningful words (and every number) are in one source gets that source's number.
    for size in (1, 2, 5, len(raw)):
        stream = SupportCitations({1: WARSAW, 2: WATT})
        shown = "".join(stream.feed(raw[i : i + size]) for i in range(0, len(raw), size))
        assert shown + stream.finish() == expected, size


def test_support_citations_normalize_the_models_own_too() -> None:
    stream = SupportCitations({1: WARSAW})
    raw = "Warsaw is the capital of Poland【1†L1】 and [7] more."
    assert "".join(stream.feed(c) for c in raw) + stream.finish() == (
        "Warsaw is the capital of Poland[1] and  more."
    )

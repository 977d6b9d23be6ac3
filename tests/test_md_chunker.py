"""The Markdown chunker: budget (real tokenizer), headers, cleaning, merge/drop rules, and that the
SQuAD pages' answers survive cleaning and chunking."""

from __future__ import annotations

import re
from collections.abc import Callable
from itertools import pairwise

import pytest

from evals.datasets import SQUAD_FILE, load_squad
from evals.evidence_ranking import find_evidence
from rag.embedder import Embedder
from rag.md_chunker import (
    DEFAULT_BUDGET,
    MIN_PIECE_TOKENS,
    NO_SECTION,
    Chunk,
    _Counter,
    _merge_small,
    _Piece,
    budget_for,
    chunk_header,
    chunk_page,
    chunk_pages,
    clean_markdown,
)
from rag.search_providers import SearchResult

SQUAD = SQUAD_FILE
HEADER = re.compile(r"^\[Page: [^\n|\]]+ \| Section: [^\n\]]+\]\n")
# Measured (`python -m evals evidence-ranking`): 100% of the answer spans are held by some chunk.
MIN_ANSWER_SPANS_KEPT = 0.99


@pytest.fixture(scope="module")
def count_tokens(embedder: Embedder) -> Callable[[str], int]:
    return embedder.count_tokens


def page(content: str, title: str = "Test page") -> SearchResult:
    return SearchResult("https://example.org/test", title, content)


def assert_valid(chunks: list[Chunk], embedder: Embedder, budget: int) -> None:
    assert chunks
    for chunk in chunks:
        tokens = embedder.count_tokens(chunk.text)
        assert tokens <= budget, (tokens, chunk.text[:200])
        assert tokens == chunk.token_count
        assert HEADER.match(chunk.text), chunk.text[:200]
        assert chunk.body.strip()


# --- budget ----------------------------------------------------------------------------------


def test_default_budget_fits_the_model(embedder: Embedder) -> None:
    assert embedder.max_seq_length == 256
    assert budget_for(embedder) == DEFAULT_BUDGET <= embedder.max_seq_length


def test_squad_chunks_fit_the_model_whole(embedder: Embedder) -> None:
    squad = load_squad(SQUAD)
    budget = budget_for(embedder)
    chunks = chunk_pages(squad.results(), embedder.count_tokens, budget)
    assert_valid(chunks, embedder, budget)
    # What the model itself reads (its tokenize truncates at max_seq_length): nothing cut off.
    features = embedder.model.tokenize([c.text for c in chunks])
    read = features["attention_mask"].sum(dim=1).tolist()
    assert read == [c.token_count for c in chunks]
    titles = list(squad.pages)
    for chunk in chunks:
        assert chunk.text.startswith(f"[Page: {titles[chunk.source_index]} | Section: ")
        assert chunk.url.startswith("https://en.wikipedia.org/wiki/")
    # Sections are packed: most chunks use a good part of the budget.
    assert sum(c.token_count >= budget // 2 for c in chunks) / len(chunks) > 0.8


def test_squad_answer_spans_survive(embedder: Embedder) -> None:
    squad = load_squad(SQUAD)
    chunks = chunk_pages(squad.results(), embedder.count_tokens, budget_for(embedder))
    evidence = find_evidence(squad, squad.answerable, chunks)
    kept = sum(bool(evidence.by_span[q.id]) for q in squad.answerable) / len(squad.answerable)
    assert kept >= MIN_ANSWER_SPANS_KEPT


SENTENCE = (
    "steam engines converted heat into work while the governor kept the speed steady and "
    "engineers measured 1712 pressure values across cylinders pistons valves and boilers"
)
WORDS = SENTENCE.split(" ")


def words(n: int) -> str:
    return " ".join(WORDS[i % len(WORDS)] for i in range(n))


NASTY = {
    "3000-word paragraph, no headings": words(3000) + ".",
    "one 30000-character line without spaces": "x9" * 15000,
    "long lines of words without punctuation": "\n".join(words(700) for _ in range(3)),
    "table": "# Prices\n\n| model | price | notes |\n|---|---:|---|\n"
    + "\n".join(f"| model {i} | {i * 3}.99 | {words(12)} |" for i in range(300)),
    "code block": "# Code\n\n```python\n"
    + "\n".join(f"    value_{i} = compute({i}, 'steam engine pressure')" for i in range(400))
    + "\n```\n",
    "CJK text": "蒸汽机是将蒸汽的能量转换为机械功的往复式动力机械。" * 300,
    "emoji and symbols": "🚂 steam ⚙️ gear 🔥 fire → ∑ 12 ∫ " * 500,
    "many tiny sections": "\n\n".join(f"## Part {i}\n\n{words(8)}." for i in range(200)),
    "deep headings": "# A\n## B\n### C\n#### D\n##### E\n" + words(800),
}


@pytest.mark.parametrize("budget", [64, 128, 256])
@pytest.mark.parametrize("name", list(NASTY))
def test_budget_never_exceeded_on_nasty_input(embedder: Embedder, name: str, budget: int) -> None:
    chunks = chunk_page(page(NASTY[name]), 0, embedder.count_tokens, budget)
    assert_valid(chunks, embedder, budget)


def test_huge_title_and_heading_still_fit(embedder: Embedder) -> None:
    content = f"# {'Heading ' * 300}\n\n{words(400)}"
    chunks = chunk_page(page(content, title="Title " * 500), 0, embedder.count_tokens, 64)
    assert_valid(chunks, embedder, 64)


def test_long_paragraph_is_split_with_overlap_and_nothing_lost(embedder: Embedder) -> None:
    text = " ".join(f"Sentence number {i} tells about engine {i}." for i in range(400))
    chunks = chunk_page(page(text), 0, embedder.count_tokens, 128)
    assert len(chunks) > 5
    bodies = "\n".join(c.body for c in chunks)
    for i in range(400):
        assert f"Sentence number {i} tells about engine {i}." in bodies
    overlapping = sum(a.body.split(". ")[-1].strip(". ") in b.body for a, b in pairwise(chunks))
    assert overlapping >= len(chunks) // 2  # consecutive pieces share a sentence


def test_budget_below_minimum_is_refused(embedder: Embedder) -> None:
    with pytest.raises(ValueError, match="too small"):
        chunk_page(page(words(100)), 0, embedder.count_tokens, 20)


# --- headers ---------------------------------------------------------------------------------


def test_headers_name_page_and_heading_path(embedder: Embedder) -> None:
    content = (
        f"Intro text before any heading, {words(60)}\n\n"
        f"# Engines\n\n{words(60)}\n\n## Steam\n\n### Watt\n\n#### Governor\n\n{words(60)}"
    )
    chunks = chunk_page(page(content, "Machines"), 3, embedder.count_tokens, 256)
    paths = [c.heading_path for c in chunks]
    assert paths == [NO_SECTION, "Engines", "Engines > Steam > Watt > Governor"]
    assert chunks[2].text.startswith(
        "[Page: Machines | Section: Engines > Steam > Watt > Governor]\n"
    )
    assert all(c.source_index == 3 and c.title == "Machines" for c in chunks)
    assert chunk_header("A | B [x]", "C") == "[Page: A / B (x) | Section: C]"


def test_setext_headings_are_headings(embedder: Embedder) -> None:
    content = f"Engines\n=======\n\n{words(60)}\n\nSteam\n-----\n\n{words(60)}"
    chunks = chunk_page(page(content), 0, embedder.count_tokens, 256)
    assert [c.heading_path for c in chunks] == ["Engines", "Engines > Steam"]


def test_chunk_pages_numbers_pages_in_order(embedder: Embedder) -> None:
    results = [page(words(80), "One"), page(words(80), "Two")]
    chunks = chunk_pages(results, embedder.count_tokens, 256)
    assert [(c.source_index, c.title) for c in chunks] == [(0, "One"), (1, "Two")]


# --- merge and drop --------------------------------------------------------------------------


def filler(embedder: Embedder, title: str, section: str, budget: int) -> str:
    """Text that fills a chunk of `section` to within a few tokens of the budget."""
    header = chunk_header(title, section)
    n = 1
    while embedder.count_tokens(f"{header}\n{words(n + 1)}") <= budget - 2:
        n += 1
    return words(n)


def test_small_piece_merges_into_a_neighbour_with_room(embedder: Embedder) -> None:
    content = (
        f"## Big\n\n{words(120)}\n\n## Tiny\n\nShort note about valves.\n\n## Next\n\n{words(120)}"
    )
    chunks = chunk_page(page(content), 0, embedder.count_tokens, 256)
    assert len(chunks) == 2
    assert "[Section: Tiny]\nShort note about valves." in chunks[0].body
    assert chunks[0].heading_path == "Big"


def test_small_piece_without_room_is_dropped_unless_it_has_a_digit(embedder: Embedder) -> None:
    budget = 96
    full_a = filler(embedder, "Test page", "A", budget)
    full_c = filler(embedder, "Test page", "C", budget)
    for tiny, kept in (("Short note about valves.", False), ("Valves cost 12 dollars.", True)):
        content = f"## A\n\n{full_a}\n\n## B\n\n{tiny}\n\n## C\n\n{full_c}"
        chunks = chunk_page(page(content), 0, embedder.count_tokens, budget)
        assert_valid(chunks, embedder, budget)
        assert any(tiny in c.body for c in chunks) is kept
        if kept:
            assert [c.heading_path for c in chunks] == ["A", "B", "C"]


def test_small_piece_prefers_its_own_section(embedder: Embedder) -> None:
    counter = _Counter(embedder.count_tokens)
    pieces = [
        _Piece([("A", words(60))]),
        _Piece([("A", "A short tail.")]),
        _Piece([("B", words(60))]),
    ]
    merged = _merge_small(pieces, lambda p: True, counter)
    assert [[path for path, _ in p.parts] for p in merged] == [["A", "A"], ["B"]]
    # And into the next piece when the previous one is another section's.
    pieces = [_Piece([("A", words(60))]), _Piece([("B", "Tiny.")]), _Piece([("B", words(60))])]
    merged = _merge_small(pieces, lambda p: True, counter)
    assert [[path for path, _ in p.parts] for p in merged] == [["A"], ["B", "B"]]
    assert counter.text_tokens("A short tail.") < MIN_PIECE_TOKENS


def test_tiny_page_without_digits_yields_nothing(embedder: Embedder) -> None:
    assert chunk_page(page("Just a few words."), 0, embedder.count_tokens, 256) == []
    kept = chunk_page(page("Opening hours: 9 to 17."), 0, embedder.count_tokens, 256)
    assert [c.body for c in kept] == ["Opening hours: 9 to 17."]


# --- cleaning --------------------------------------------------------------------------------


def test_images_links_urls_and_html_are_cleaned() -> None:
    cleaned = clean_markdown(
        "Watt's engine ![diagram](https://x.org/a.png) was [patented](https://x.org/p) in"
        " [1769](https://en.wikipedia.org/wiki/1769_(year)) <img src='b.png'> and"
        " [improved][ref] later.\n\n"
        "[ref]: https://x.org/ref\n\n"
        "See https://example.com/page?x=1 or www.example.org for <b>more</b> &amp; <em>less</em>."
        "<!-- a comment --><script>alert('x')</script>\n\n"
        "[![badge](https://x.org/badge.svg)](https://x.org)\n\n"
        "Black, <Uyless Black, X.25 and Related Protocols, 1991> is cited.[citation needed][12]"
    )
    assert cleaned == (
        "Watt's engine was patented in 1769 and improved later.\n\n"
        "See or for more & less.\n\n"
        "Black, <Uyless Black, X.25 and Related Protocols, 1991> is cited."
    )


def test_navigation_and_boilerplate_are_dropped() -> None:
    cleaned = clean_markdown(
        "* [Home](/)\n* [News](/news)\n* [About us](/about)\n"
        "[Login](/login) | [Register](/register)\n"
        "Home › Science › Engines\n"
        "Skip to content\n"
        "We use cookies to improve your experience. By continuing you agree to our cookie policy.\n"
        "Accept all\n"
        "Subscribe to our newsletter for weekly updates in your inbox!\n"
        "Sign in\n"
        "Share on Facebook\n"
        "Tweet\n"
        "Advertisement\n"
        "© 2024 Example Media. All rights reserved.\n"
        "---\n"
        "• • •\n\n"
        "The governor keeps the engine speed steady.\n\n"
        "Click Sign in at the top right, then choose your account and enter your password.\n\n"
        "Many readers subscribe to the journal, which has published research since 1869."
    )
    assert cleaned.split("\n\n") == [
        "The governor keeps the engine speed steady.",
        "Click Sign in at the top right, then choose your account and enter your password.",
        "Many readers subscribe to the journal, which has published research since 1869.",
    ]


def test_tables_and_code_are_kept() -> None:
    table = "| Engine | Year |\n|---|---:|\n| [Newcomen](/n) | 1712 |\n| Watt | 1769 |"
    code = "```python\nurl = 'https://example.org'  # Sign in\n\n    return <b>x</b>\n```"
    cleaned = clean_markdown(f"{table}\n\n{code}")
    assert cleaned == (
        "| Engine | Year |\n|---|---:|\n| Newcomen | 1712 |\n| Watt | 1769 |\n\n" + code
    )


def test_boilerplate_never_reaches_a_chunk(embedder: Embedder) -> None:
    content = (
        "# Steam engine\n\n* [Home](/)\n* [Shop](/shop)\n\nSign in\n\n"
        f"{words(120)}\n\nSubscribe to our newsletter to get updates by email.\n\n"
        "We use cookies to give you the best experience. Accept or manage preferences."
    )
    chunks = chunk_page(page(content), 0, embedder.count_tokens, 256)
    text = "\n".join(c.text for c in chunks).lower()
    for gone in ("home", "shop", "sign in", "newsletter", "cookies", "]("):
        assert gone not in text

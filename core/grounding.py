"""Whether a quote is really in the user's message, and the message as numbered sentences.

A memory is stored only with a quote found in the user's own message (core/memory_store.py). Models
copy text imperfectly in harmless ways (curly quotes for straight ones, an en dash for a hyphen,
other case, line breaks), so `find_quote` compares after normalising those, and returns the span
of the message itself: what is stored is always the user's exact words.

Small models paraphrase when asked to quote, so extraction never asks them to: it shows the message
as numbered sentences (`numbered_sentences`) and the model cites numbers; `sentence_span` turns
them back into the exact text, which is then found by construction.
"""

from __future__ import annotations

import re
import unicodedata

# Typographic variants a model may write for the user's plain characters, and the reverse.
_SAME_CHARACTER = str.maketrans(
    {
        **dict.fromkeys("‘’‚‛′`´", "'"),
        **dict.fromkeys("“”„‟″«»", '"'),
        **dict.fromkeys("‐‑‒–—―−", "-"),
    }
)
# Quote marks and punctuation a model tends to add around a quote.
_EDGE_CHARACTERS = " \t\r\n'\".,;:!?…-"
# Shorter quotes ("I", "ok") are in almost any message, so they prove nothing.
MIN_QUOTE_CHARS = 4

# A sentence ends at . ! ? or … (with closing quotes/brackets) followed by a space, or at a line
# break; a list item or paragraph is a sentence of its own.
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[.!?…][\"')\]])\s+|\n+")


def _normalized(text: str) -> tuple[str, list[int]]:
    """`text` normalised for comparison, and for each of its characters the index in `text`."""
    out: list[str] = []
    where: list[int] = []
    for index, char in enumerate(text):
        if char.isspace():
            if out and out[-1] != " ":
                out.append(" ")
                where.append(index)
            continue
        for piece in unicodedata.normalize("NFKC", char).casefold().translate(_SAME_CHARACTER):
            out.append(piece)
            where.append(index)
    return "".join(out), where


def find_quote(quote: str, message: str) -> str | None:
    """The span of `message` that `quote` copies (see the module docstring), or None. Tried as
    given first, then without the quote marks and punctuation a model may have put around it."""
    haystack, where = _normalized(message)
    exact, _ = _normalized(quote.strip())
    for wanted in (exact.strip(), exact.strip(_EDGE_CHARACTERS)):
        if len(wanted.strip(_EDGE_CHARACTERS)) < MIN_QUOTE_CHARS:
            return None
        start = haystack.find(wanted)
        if start >= 0:
            end = where[start + len(wanted) - 1] + 1
            return message[where[start] : end]
    return None


def split_sentences(message: str) -> list[str]:
    """The message's sentences in order, each exactly as written (stripped of outer spaces)."""
    pieces = _SENTENCE_END.split(message)
    return [piece.strip() for piece in pieces if piece and piece.strip()]


def numbered_sentences(message: str) -> str:
    """E.g. '[1] Hi! [2] I'm Dana.' one per line: what the extraction model reads and cites."""
    return "\n".join(f"[{n}] {s}" for n, s in enumerate(split_sentences(message), 1))


def sentence_span(message: str, numbers: list[int]) -> str | None:
    """The exact text of the message from the first to the last sentence cited, or None when a
    number is not one of its sentences."""
    sentences = split_sentences(message)
    if not numbers or any(not 1 <= n <= len(sentences) for n in numbers):
        return None
    first, last = sentences[min(numbers) - 1], sentences[max(numbers) - 1]
    start = _locate(message, sentences, min(numbers) - 1)
    end = _locate(message, sentences, max(numbers) - 1) + len(last)
    return message[start:end] if message[start:].startswith(first) else None


def _locate(message: str, sentences: list[str], index: int) -> int:
    """Where sentence `index` starts in `message` (sentences may repeat, so search in order)."""
    position = 0
    for i, sentence in enumerate(sentences):
        position = message.index(sentence, position)
        if i == index:
            return position
        position += len(sentence)
    raise IndexError(index)


# Words that say nothing about which fact a sentence states.
_STOP_WORDS_TEXT = """a an and are as at be been but by do does for from had has have he her his i
i'm im in is it its me my of on or our she so that the their them they this to was we were with
you your user user's users not no yes am"""
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def content_words(text: str) -> set[str]:
    """The words of `text` that carry meaning, lower case, cut to their first 5 letters (a crude
    stem: "allergic"/"allergy", "lives"/"living" meet)."""
    normalized, _ = _normalized(text)
    return {w[:5] for w in _WORD.findall(normalized) if w not in _STOP_WORDS}


def shares_a_word(fact: str, quote: str) -> bool:
    """Whether the fact and its quote have a meaningful word in common."""
    return bool(content_words(fact) & content_words(quote))


def best_supporting_sentence(message: str, fact: str) -> str | None:
    """The sentence of `message` that shares the most meaningful words with `fact`, if it shares
    at least half of them: for a model that stated a fact but cited the wrong sentence number
    (small models often cite the one before). None otherwise."""
    wanted = content_words(fact)
    if not wanted:
        return None
    scored = [(len(wanted & content_words(s)), s) for s in split_sentences(message)]
    shared, sentence = max(scored, default=(0, ""), key=lambda pair: pair[0])
    return sentence if shared * 2 >= len(wanted) else None

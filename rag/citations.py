"""Citations in web answers: every style models use becomes `[n]`, and numbers with no source go.

Models write `[3]`, `[1, 2]`, `[3†source]` or their own `【3†L1-L3】`. `CitationNormalizer` does
this while the answer streams, holding back only a possible citation until its closing bracket, so
what the user watched stream is exactly what is saved.

Small models copy their sources' sentences but seldom write the `[n]` (the local model's web
answers cited 1 source in 8 replies in the research eval). `SupportCitations` cites such a sentence
itself, with the one source that states it: most of its meaningful words and every number it
states are in that source's text. It holds back only a sentence's final marks until it sees what
follows them, and citations opening a line or a list item ("[1] In 1939, …", "1. [1] In 1939, …")
until the end of their sentence, where they go. `SourceNumbers` undoes the local model's
"1, 300, 000" for a number its sources write "1,300,000".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from core.grounding import content_words, stated_numbers

# A whole citation: an opening bracket, numbers (with separators and † suffixes), a closing one.
# Not after a letter or `_`: `a[0]` is an index in code, not a citation.
_CITATION_RE = re.compile(
    r"(?:(?<![A-Za-z_])\[|【)\s*(\d+(?:\s*†[^\]】]*)?(?:\s*[,;]\s*\d+(?:†[^\]】,;]*)?)*)\s*(?:\]|】)"
)
# What an unfinished citation can look like while more text is coming.
_PARTIAL_RE = re.compile(r"(?:\[|【)[\d\s,;†\w\-:.]*\Z")
_MAX_HELD = 48  # longer than any citation: give up holding and show it as text


def normalize_citations(text: str, sources: Collection[int]) -> str:
    """`【3†L1-L3】` → `[3]`, `[1, 2]` → `[1][2]`; citations of numbers not in `sources` are
    removed (the numbers of the sources the answer or research part was shown)."""

    def replace(match: re.Match[str]) -> str:
        numbers = [int(n) for n in re.findall(r"(?:^|[,;])\s*(\d+)", match.group(1))]
        return "".join(f"[{n}]" for n in numbers if n in sources)

    return _CITATION_RE.sub(replace, text)


class CitationNormalizer:
    """Normalizes citations in a stream of text pieces; `feed` returns what can be shown now."""

    def __init__(self, sources: Collection[int]) -> None:
        self.sources = sources
        self._held = ""
        self._before = ""  # the last character shown: `_CITATION_RE` looks one character back

    def feed(self, piece: str) -> str:
        text = self._before + self._held + piece
        self._held = ""
        start = max(text.rfind("["), text.rfind("【"))
        if (
            start >= len(self._before)
            and len(text) - start <= _MAX_HELD
            and _PARTIAL_RE.match(text, start)
        ):
            text, self._held = text[:start], text[start:]
        return self._show(text)

    def _show(self, text: str) -> str:
        shown = normalize_citations(text, self.sources)[len(self._before) :]
        self._before = text[-1:] if text else self._before
        return shown

    def finish(self) -> str:
        text, self._held = self._before + self._held, ""
        return self._show(text)


# Where a sentence ends: its final marks (with closing quotes or brackets) and the space after
# them, when what follows does not go on with a digit or a lower-case letter (the period of "c.
# 1,300,000" or "e.g. the" ends nothing), or a line break (a list item or a line of its own is a
# sentence too).
_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]»”’]*(?:\s+(?=[^\s\da-z]|\Z)|[ \t]*(?=\n))|[ \t]*\n\s*")
# A possible sentence end at the end of the text so far: what follows decides.
_PENDING_END = re.compile(r"(?:[.!?…]+[\"')\]»”’]*)?\s*\Z")
_FINAL_MARKS = re.compile(r"[.!?…]+[\"')\]»”’]*\s*\Z")
# A citation as normalized: `[n]` (its number, the group).
CITATION = re.compile(r"\[(\d+)\]")
# Citations opening a line or a list item ("[1] In 1939, …", "1. [1] In 1939, …", as the local
# model wrote research parts): the item's marker (group 1), the citations (group 2), the space
# after them.
_ITEM_NUMBER = r"\d{1,3}[.)]"  # a numbered item's number and its mark
_ITEM_MARKER = re.compile(rf"(?:[-*+]|{_ITEM_NUMBER})?[ \t]*")
# A numbered item's marker so far, at a line's start (the "." after its number ends nothing).
_ITEM_SO_FAR = re.compile(rf"[ \t]*(?:\d{{1,3}}|{_ITEM_NUMBER}[ \t]*)")
# A numbered item's marker, which is no number its fact states.
_NUMBERED_ITEM = re.compile(rf"\A\s*{_ITEM_NUMBER}[ \t]+")
_LEADING_CITATIONS = re.compile(rf"({_ITEM_MARKER.pattern})((?:\[\d+\])*)[ \t]*")
# A sentence cited from a source shares at least this much of its meaningful words with it (and
# at least two words: "Hi!" or "Yes." are in any page).
MIN_SHARED_WORDS = 0.5
MIN_WORDS = 2


def says_not_found(text: str) -> bool:
    """Whether the text opens with the answer rule's "I couldn't find…"."""
    return text.lstrip(" -*#>").lower().startswith(("i couldn't find", "i could not find"))


# A number with thousands commas ("1,300,000"), and one written with a space after each comma.
_JOINED_NUMBER = re.compile(r"(?<![\d,])\d{1,3}(?:,\d{3})+(?![\d,])")
_SPACED_NUMBER = re.compile(r"(?<![\d,])\d{1,3}(?:, \d{3})+(?!\d)")
# What may still become one at the end of the text so far: held until what follows shows.
_NUMBER_SO_FAR = re.compile(r"\d[\d, ]{0,24}\Z")


class SourceNumbers:
    """Joins a number written "1, 300, 000" again when its sources write "1,300,000": copying a
    sentence, the local model puts a space after each thousands comma (its own tokens, whatever
    the sampling). One no source writes joined is a list ("1939, 300 people") and stays."""

    def __init__(self, texts: Collection[str]) -> None:
        self._numbers = {n for text in texts for n in _JOINED_NUMBER.findall(text)}
        self._held = ""

    def feed(self, piece: str) -> str:
        text, self._held = self._held + piece, ""
        if self._numbers and (tail := _NUMBER_SO_FAR.search(text)):
            text, self._held = text[: tail.start()], text[tail.start() :]
        return self._joined(text)

    def finish(self) -> str:
        text, self._held = self._held, ""
        return self._joined(text)

    def _joined(self, text: str) -> str:
        def join(match: re.Match[str]) -> str:
            joined = match.group().replace(", ", ",")
            return joined if joined in self._numbers else match.group()

        return _SPACED_NUMBER.sub(join, text) if self._numbers else text


class SupportCitations:
    """A `CitationNormalizer` over the numbered sources `texts`, which also cites each sentence
    left uncited with the source that states it (see the module docstring)."""

    def __init__(self, texts: Mapping[int, str]) -> None:
        self.normalizer = CitationNormalizer(set(texts))
        self.numbers = SourceNumbers(texts.values())
        self._words = {n: content_words(text) for n, text in texts.items()}
        self._numbers = {n: stated_numbers(text) for n, text in texts.items()}
        self._sentence = ""  # the current sentence, as shown so far
        self._held = ""  # its final marks and the space after them, until what follows shows
        self._in_code = False
        self._line_start = True  # the current sentence opens a line
        self._leading = ""  # the citations it opened with, held for its end (`_LEADING_CITATIONS`)
        self._gap = ""  # the space after its list marker, until its text shows

    def feed(self, piece: str) -> str:
        return self._cite(self.numbers.feed(self.normalizer.feed(piece)), final=False)

    def finish(self) -> str:
        numbers = self.numbers.feed(self.normalizer.finish()) + self.numbers.finish()
        return self._cite(numbers, final=True)

    def _cite(self, text: str, final: bool) -> str:
        text, self._held = self._held + text, ""
        shown: list[str] = []
        start = 0
        for end in _SENTENCE_END.finditer(text):
            if end.end() == len(text) and not final:
                break  # a citation may follow the mark ("…Poland. [1]"): wait for it
            item = self._sentence + text[start : end.start()]
            if self._line_start and _ITEM_SO_FAR.fullmatch(item) and "\n" not in end.group():
                continue  # "1. " opens a numbered item
            body = self._opening(text[start : end.start()])
            cited_after = CITATION.match(text, end.end()) is not None
            citation = self._citation(self._sentence + body, cited_after)
            shown.append(body + citation + end.group())
            self._sentence, start = "", end.end()
            self._line_start = "\n" in end.group()
        rest = self._opening(text[start:])
        if final:
            marks = _FINAL_MARKS.search(rest)
            cut = marks.start() if marks else len(rest)
            shown.append(rest[:cut] + self._citation(self._sentence + rest[:cut]) + rest[cut:])
            self._sentence, self._line_start = "", True
        else:
            pending = _PENDING_END.search(rest)
            cut = pending.start() if pending else len(rest)
            if self._line_start and _ITEM_SO_FAR.fullmatch(self._sentence + rest):
                # A numbered item's marker: held until what follows shows whether citations open
                # the item; once `_opening` took them, shown whole (its "." ends nothing).
                cut = len(rest) if self._leading else 0
            shown.append(rest[:cut])
            self._sentence += rest[:cut]
            self._held = rest[cut:]
        return "".join(shown)

    def _opening(self, text: str) -> str:
        """`text` (of the current sentence) without the citations opening it, if it opens a line:
        those are held in `_leading` for the sentence's end."""
        if not self._line_start or self._in_code or not _ITEM_MARKER.fullmatch(self._sentence):
            return text
        match = _LEADING_CITATIONS.match(text)
        if match is None or not (match.group(2) or self._leading):
            return text
        marker = ""  # spaces around held citations go, but a list item's space goes on
        if not self._leading:
            marker = match.group(1).rstrip(" \t")
            self._gap = match.group(1)[len(marker) :]
        self._leading += match.group(2)
        rest = text[match.end() :]
        if rest.strip():
            rest, self._gap = self._gap + rest, ""
        return marker + rest

    def _citation(self, sentence: str, cited_after: bool = False) -> str:
        """What goes at the end of `sentence`: the citations it opened with, else (if it cites
        nothing, and no citation follows its end) " [n]" for the source that states it, else
        ""."""
        fences = sentence.count("```")
        in_code, self._in_code = self._in_code, self._in_code != (fences % 2 == 1)
        leading, self._leading, self._gap = self._leading, "", ""
        if leading:
            if not sentence.strip():
                return leading
            own = set(CITATION.findall(sentence))
            return "" if set(CITATION.findall(leading)) <= own else f" {leading}"
        if cited_after:
            return ""
        line = sentence.lstrip()
        if (
            in_code
            or fences
            or line.startswith(("#", "|"))
            or CITATION.search(sentence)
            or says_not_found(line)
        ):
            return ""
        fact = _NUMBERED_ITEM.sub("", sentence, count=1)
        words = content_words(fact)
        if len(words) < MIN_WORDS:
            return ""
        numbers = stated_numbers(fact)
        # The source sharing the most words (the first of equals), among those stating its numbers.
        shared, source = max(
            ((len(words & self._words[n]), -n) for n in self._words if numbers <= self._numbers[n]),
            default=(0, 0),
        )
        return f" [{-source}]" if shared >= MIN_SHARED_WORDS * len(words) else ""

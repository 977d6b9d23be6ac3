"""Citations in web answers: every style models use becomes `[n]`, and numbers with no source go.

Models write `[3]`, `[1, 2]`, `[3†source]` or their own `【3†L1-L3】`. `CitationNormalizer` does
this while the answer streams, holding back only a possible citation until its closing bracket, so
what the user watched stream is exactly what is saved.
"""

from __future__ import annotations

import re
from collections.abc import Collection

# A whole citation: an opening bracket, numbers (with separators and † suffixes), a closing one.
# Not after a letter or `_`: `a[0]` is an index in code, not a citation.
_CITATION_RE = re.compile(
    r"(?:(?<![A-Za-z_])\[|【)\s*(\d+(?:\s*†[^\]】]*)?(?:\s*[,;]\s*\d+(?:†[^\]】,;]*)?)*)\s*(?:\]|】)"
)
# What an unfinished citation can look like while more text is coming.
_PARTIAL_RE = re.compile(r"(?:\[|【)[\d\s,;†\w\-:.]*\Z")
_MAX_HELD = 48  # longer than any citation: give up holding and show it as text


def numbered(count: int) -> range:
    """The numbers of `count` sources, [1] to [count]."""
    return range(1, count + 1)


def normalize_citations(text: str, sources: Collection[int]) -> str:
    """`【3†L1-L3】` → `[3]`, `[1, 2]` → `[1][2]`; citations of numbers not in `sources` are
    removed (all the answer's sources, `numbered(n)`, or those a research part was shown)."""

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

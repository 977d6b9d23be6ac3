"""A model's reply going round in circles, noticed as it streams, and its call ended there.

Small models at a low temperature fall into loops. In a keyless trial the 1.5B local model, asked
how a bicycle gear works, wrote one paragraph over and over: 15,000 characters in 4 minutes, and
the reply was continued twice after the length limit. llama.cpp's repeat penalty looks back 64
tokens, so a loop a paragraph long escapes it. A loop is a paragraph of at least
`MIN_PARAGRAPH_CHARS` written a second time, or a sentence (or line) of at least
`MIN_SENTENCE_CHARS` written a `SENTENCE_REPEATS`th time, compared after folding case and
spaces. A real reply does neither: what it says again, it says in other words. `Unlooped` wraps a
LiteLLM stream and ends it (closing the provider's stream, so a local model stops generating) at
the first loop; what streamed up to there is the reply, as saved.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

log = logging.getLogger("resolveai.models")

MIN_PARAGRAPH_CHARS = 200
MIN_SENTENCE_CHARS = 60
SENTENCE_REPEATS = 3
# Shown with the reply (or as a step, for a web answer) when it was ended for looping.
REPEATING_NOTE = "The model began repeating itself, so its reply was ended there."

_PARAGRAPH_END = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n")


class _Repeats:
    """Counts the complete pieces of a growing text (those followed by a break), folded."""

    def __init__(self, breaks: re.Pattern[str], min_chars: int) -> None:
        self.breaks, self.min_chars = breaks, min_chars
        self.pending = ""
        self.seen: Counter[str] = Counter()

    def feed(self, text: str) -> int:
        """The most times a piece completed by `text` has now been written (0: none completed)."""
        # A break is spaces after a mark, so one `text` completes starts at the pending piece's
        # last character at the earliest: only from there is the text searched again, so a long
        # paragraph streamed in small pieces is not searched from its start for every piece.
        keep = max(len(self.pending.rstrip()) - 1, 0)
        head, tail = self.pending[:keep], self.pending[keep:]
        *complete, self.pending = self.breaks.split(tail + text)
        if not complete:
            self.pending = head + self.pending
            return 0
        complete[0] = head + complete[0]
        most = 0
        for piece in complete:
            folded = " ".join(piece.split()).casefold()
            if len(folded) >= self.min_chars:
                self.seen[folded] += 1
                most = max(most, self.seen[folded])
        return most


class RepetitionGuard:
    """Fed a reply's text as it streams; `looping` once it repeats itself (see the module)."""

    def __init__(self) -> None:
        self._paragraphs = _Repeats(_PARAGRAPH_END, MIN_PARAGRAPH_CHARS)
        self._sentences = _Repeats(_SENTENCE_END, MIN_SENTENCE_CHARS)
        self.looping = False

    def feed(self, text: str) -> bool:
        if not self.looping and text:
            paragraph_repeats = self._paragraphs.feed(text)
            sentence_repeats = self._sentences.feed(text)
            self.looping = paragraph_repeats >= 2 or sentence_repeats >= SENTENCE_REPEATS
        return self.looping


class Unlooped:
    """A LiteLLM stream's chunks until its text loops; then the stream is closed and `looped`
    is set. Iterated once, like the stream."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.guard = RepetitionGuard()
        self.looped = False

    async def __aiter__(self) -> AsyncIterator[Any]:
        async for chunk in self.stream:
            yield chunk
            text = chunk.choices[0].delta.content if chunk.choices else None
            if text and self.guard.feed(text):
                self.looped = True
                log.info("The model is repeating itself: its reply ends here")
                close = getattr(self.stream, "aclose", None)
                if close is not None:
                    await close()
                return

"""Cutting a text to a length at a word boundary, the one way every title, excerpt and prompt
opening is shortened."""

from __future__ import annotations

import re

_LAST_WORD_END = re.compile(r"(.*\S)\s", re.DOTALL)


def cut_at_word(text: str, limit: int, mark: str = "…") -> str:
    """`text` if it has at most `limit` characters; otherwise its words that fit in `limit` with
    `mark` after them (the start of the first word when it alone is too long)."""
    if len(text) <= limit:
        return text
    room = max(limit - len(mark), 0)
    # room + 1: a word ending exactly at the room is whole when a space follows it.
    match = _LAST_WORD_END.match(text[: room + 1])
    return (match.group(1) if match else text[:room]) + mark

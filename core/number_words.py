"""Numbers written as words, for code that reads the numbers in what a user said.

Memory compares a fact's numbers with its quote's ("three cats" / "3 cats", core/grounding.py)
and dates "two weeks ago" (core/relative_dates.py); both read the same words.
"""

from __future__ import annotations

# The word for each number below twenty, at its index.
UNITS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
    "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
]  # fmt: skip
TENS = {
    word: 10 * n
    for n, word in enumerate(
        ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"], 2
    )
}

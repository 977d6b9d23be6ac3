"""The small text helpers every caller shares: cutting a text at a word boundary, and reading the
JSON object out of a model's reply."""

from __future__ import annotations

import pytest

from chat.memory_changes import _both_true
from chat.memory_extraction import BadOutput, parse_operations
from core.model_json import json_object_in
from core.text_cuts import cut_at_word


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short", 10, "short"),  # fits: unchanged, no mark
        ("exactly ten", 11, "exactly ten"),
        ("one two three", 8, "one two…"),  # "two" and the mark fit, and a space follows it
        ("one two three", 7, "one…"),  # "two" would be cut: dropped
        ("one\n\ntwo three", 7, "one…"),  # any whitespace is a boundary
        ("abcdefghij klm", 6, "abcde…"),  # a first word over the limit is cut inside
    ],
)
def test_a_text_is_cut_after_its_last_whole_word(text: str, limit: int, expected: str) -> None:
    assert cut_at_word(text, limit) == expected
    assert len(cut_at_word(text, limit)) <= limit  # the mark included


def test_the_mark_after_a_cut_is_the_callers() -> None:
    assert cut_at_word("one two three", 10, mark=" …") == "one two …"
    assert cut_at_word("one two three", 9, mark="") == "one two"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('Sure! Here it is:\n```json\n{"a": {"b": [1, 2]}}\n```', {"a": {"b": [1, 2]}}),
        ("no braces at all", None),
        ('{"a": 1', None),  # cut off: not JSON
        ("[1, 2]", None),  # JSON, but not an object
        ("", None),
        (None, None),
    ],
)
def test_the_json_object_in_a_models_reply(reply: str | None, expected: object) -> None:
    assert json_object_in(reply) == expected


def test_every_reader_of_a_models_json_takes_it_from_the_same_place() -> None:
    wrapped = 'Answer:\n```json\n{"operations": [{"op": "none"}], "both_true": false}\n```'
    assert parse_operations(wrapped) == [{"op": "none"}]
    assert _both_true(wrapped) is False
    assert _both_true('{"both_true": "no"}') is None  # not a clear false: nothing is closed
    with pytest.raises(BadOutput):
        parse_operations('{"operations": "add"}')
    with pytest.raises(BadOutput):
        parse_operations("I found no facts.")

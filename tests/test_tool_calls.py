"""Tests for reading tool calls out of a small model's text (core/tool_calls.py)."""

from __future__ import annotations

import json

import pytest

from chat.tool_markup import (
    CLOSE_TAGS,
    OPEN_TAGS,
    PROMPT_TAGS,
    ToolCallStreamFilter,
    _partial_tag_size,
    parse_tool_calls,
)

TOOLS = {"get_weather", "web_search"}
PARIS = ("get_weather", {"city": "Paris"})


@pytest.mark.parametrize(
    "text",
    [
        # Qwen's own format, as its chat template asks for it.
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        # Closing tag missing (generation stopped right after the JSON).
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}',
        # Closing tag and one or two final braces missing.
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}',
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"',
        # Last string not even closed.
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris',
        # One brace too many.
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}}</tool_call>',
        # Arguments given as a JSON string.
        '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}</tool_call>',
        # A fenced block inside the tag.
        '<tool_call>\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```\n'
        "</tool_call>",
        # A ```json fence instead of tags, with "parameters" instead of "arguments".
        '```json\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n```',
        # A bare fence.
        '```\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
        # A bare object, and a bare object missing its last brace.
        '{"name": "get_weather", "arguments": {"city": "Paris"}}',
        '{"name": "get_weather", "arguments": {"city": "Paris"}',
        # OpenAI's shape, and a Python-style dict.
        '{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}',
        "<tool_call>{'name': 'get_weather', 'arguments': {'city': 'Paris'}}</tool_call>",
        # Doubled braces, copied from Qwen2.5-Coder's template text `{{"name": …}}`.
        '<tool_call>\n{{"name": "get_weather", "arguments": {"city": "Paris"}}}\n</tool_call>',
        '{{"name": "get_weather", "arguments": {"city": "Paris"}}}',
        '{{"name": "get_weather", "arguments": {"city": "Paris"}}',
    ],
)
def test_one_call_in_many_formats(text: str) -> None:
    rest, calls = parse_tool_calls(text, TOOLS)
    assert calls == [PARIS]
    assert rest == ""


def test_several_calls_and_surrounding_text() -> None:
    text = (
        "I'll look both up.\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "web_search", "arguments": {"query": "Paris events"}}\n</tool_call>'
    )
    rest, calls = parse_tool_calls(text, TOOLS)
    assert calls == [PARIS, ("web_search", {"query": "Paris events"})]
    assert rest == "I'll look both up."


def test_two_calls_in_one_tag_and_a_list() -> None:
    one_tag = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        '{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    )
    assert parse_tool_calls(one_tag, TOOLS)[1] == [PARIS, ("get_weather", {"city": "Rome"})]
    as_list = json.dumps([{"name": "get_weather", "arguments": {"city": "Paris"}}])
    assert parse_tool_calls(as_list, TOOLS) == ("", [PARIS])


def test_tag_without_closing_before_the_next_tag() -> None:
    text = (
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    )
    assert parse_tool_calls(text, TOOLS)[1] == [PARIS, ("get_weather", {"city": "Rome"})]


def test_a_tag_naming_an_unknown_tool_is_no_call_and_no_text() -> None:
    # Tags are markup whatever they hold: never a call to a tool not offered, never shown.
    text = 'Sure. <tool_call>{"name": "delete_everything", "arguments": {}}</tool_call>'
    assert parse_tool_calls(text, TOOLS) == ("Sure.", [])
    # Bare JSON is a call only when it names an offered tool; otherwise it is the answer.
    bare = '{"name": "delete_everything", "arguments": {}}'
    assert parse_tool_calls(bare, TOOLS) == (bare, [])
    # With nothing offered, even a well-formed call is no call, and its markup goes.
    qwen = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    assert parse_tool_calls(qwen, set()) == ("", [])
    assert parse_tool_calls(bare, set()) == (bare, [])
    # A closing tag left over is markup too.
    assert parse_tool_calls("Done.</tools>", set()) == ("Done.", [])


def test_json_answers_are_not_calls() -> None:
    for text in [
        '{"name": "Alice", "age": 31}',  # has "name" but no "arguments"
        '```json\n{"name": "get_weather", "version": 2}\n```',
        '{"data": {"name": "get_weather", "arguments": {"city": "Paris"}}}',  # nested: data
        'Here is the config:\n```json\n{"debug": true}\n```',
        "Use {braces} for sets and {'a': 1} for dicts.",
    ]:
        assert parse_tool_calls(text, TOOLS) == (text, [])


def test_json_inside_a_code_sample_is_not_a_call() -> None:
    text = (
        "Call it like this:\n```python\n"
        'client.call({"name": "get_weather", "arguments": {"city": "Paris"}})\n```'
    )
    assert parse_tool_calls(text, TOOLS) == (text, [])


def test_an_unreadable_call_is_no_call_and_no_text() -> None:
    text = "Checking. <tool_call>get_weather(city='Paris')</tool_call>"
    assert parse_tool_calls(text, TOOLS) == ("Checking.", [])


# --- streaming -----------------------------------------------------------------------------


def run_filter(pieces: list[str], tools: set[str] = TOOLS) -> tuple[list[str], str, list]:
    filter_ = ToolCallStreamFilter(tools)
    shown = [filter_.feed(piece) for piece in pieces]
    rest, calls = filter_.finish()
    return shown, rest, calls


def test_plain_text_streams_piece_by_piece() -> None:
    shown, rest, calls = run_filter(["Hello", " there", ", how", " are you?"])
    assert shown == ["Hello", " there", ", how", " are you?"]
    assert (rest, calls) == ("", [])


def test_tag_split_across_pieces_is_held_back() -> None:
    pieces = ["Let me check.", "\n<tool", "_c", 'all>\n{"name": ', '"get_weather", ']
    pieces += ['"arguments": {"city": "Paris"}}', "\n</tool_call>"]
    shown, rest, calls = run_filter(pieces)
    assert "".join(shown) == "Let me check.\n"
    assert shown[0] == "Let me check."  # streamed at once, before any sign of a call
    assert calls == [PARIS]
    assert rest == ""


def test_partial_tag_that_is_not_a_tag_is_released() -> None:
    shown, rest, calls = run_filter(["if a <", "b then", " x <tool", "s are fine"])
    assert "".join(shown) + rest == "if a <b then x <tools are fine"
    assert shown[0] == "if a "  # "<" may start "<tool_call>": held until the next piece
    assert calls == []


def test_text_after_a_call_comes_at_the_end() -> None:
    pieces = ['<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>']
    shown, rest, calls = run_filter([*pieces, "\nDone."])
    assert shown == ["", ""]
    assert (rest, calls) == ("Done.", [PARIS])


def test_reply_starting_with_json_call_is_held() -> None:
    pieces = ["{", '"name', '": "get_weather", "arguments": {"city": "Paris"}', "}"]
    shown, rest, calls = run_filter(pieces)
    assert shown == ["", "", "", ""]
    assert (rest, calls) == ("", [PARIS])


def test_reply_starting_with_doubled_braces_is_held() -> None:
    pieces = ["{{", '"name": "get_weather", "arguments": {"city": "Paris"}}', "}"]
    shown, rest, calls = run_filter(pieces)
    assert shown == ["", "", ""]
    assert (rest, calls) == ("", [PARIS])


def test_reply_starting_with_json_fence_is_held() -> None:
    pieces = ["``", "`json\n", '{"name": "get_weather",', ' "arguments": {"city": "Paris"}}\n```']
    shown, rest, calls = run_filter(pieces)
    assert "".join(shown) == ""
    assert (rest, calls) == ("", [PARIS])


def test_reply_starting_with_python_fence_streams() -> None:
    pieces = ["```", "python\n", "print(", "'hi')\n", "```"]
    shown, rest, calls = run_filter(pieces)
    assert shown[1:] == ["```python\n", "print(", "'hi')\n", "```"]
    assert (rest, calls) == ("", [])


def test_json_answer_with_other_keys_streams_once_its_first_key_is_known() -> None:
    pieces = ["{", '"city', '": "Paris",', ' "temp": 21}']
    shown, rest, calls = run_filter(pieces)
    assert shown == ["", "", '{"city": "Paris",', ' "temp": 21}']
    assert (rest, calls) == ("", [])


def test_json_answer_that_looks_like_a_call_comes_back_whole_at_the_end() -> None:
    pieces = ['{"name": "Alice",', ' "age": 31}']
    shown, rest, calls = run_filter(pieces)
    assert shown == ["", ""]
    assert (rest, calls) == ('{"name": "Alice", "age": 31}', [])


def test_unknown_tool_in_stream_is_never_shown() -> None:
    text = '<tool_call>{"name": "rm", "arguments": {}}</tool_call>'
    shown, rest, calls = run_filter(["Sure. ", text[:15], text[15:]])
    assert ("".join(shown) + rest).strip() == "Sure."
    assert calls == []


def test_without_tools_text_and_json_stream_and_only_tags_are_held() -> None:
    answer = '{"name": "Alice", "age": 31}'
    shown, rest, calls = run_filter([answer[:5], answer[5:]], tools=set())
    assert shown == [answer[:5], answer[5:]]  # a JSON answer streams at once
    assert (rest, calls) == ("", [])
    text = '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>'
    shown, rest, calls = run_filter(["Hi. ", text[:5], text[5:], "</tools> Bye."], tools=set())
    assert " ".join(("".join(shown) + rest).split()) == "Hi. Bye."
    assert calls == []


def test_leading_whitespace_before_a_call_is_not_shown() -> None:
    pieces = ["\n", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}']
    shown, rest, calls = run_filter(pieces)
    assert shown == ["", ""]
    assert (rest, calls) == ("", [PARIS])


def test_call_wrapped_in_tools_tag_like_the_template() -> None:
    text = '<tools>\n{"name": "retrieve_memory", "arguments": {"query": "name"}}\n</tools>'
    rest, calls = parse_tool_calls(text, {"retrieve_memory"})
    assert calls == [("retrieve_memory", {"query": "name"})]
    assert rest == ""


def test_empty_tools_tag_is_no_call_and_no_text() -> None:
    assert parse_tool_calls("<tools></tools>", {"save_memory"}) == ("", [])
    assert parse_tool_calls("Paris.<tools>\n</tools>", {"save_memory"}) == ("Paris.", [])


def test_stream_filter_holds_a_tools_tag_split_across_pieces() -> None:
    stream = ToolCallStreamFilter({"save_memory"})
    shown = "".join(
        stream.feed(piece)
        for piece in [
            "Sure. ",
            "<too",
            'ls>{"name": "save_memory", ',
            '"arguments": {"content": "x"}}',
        ]
    )
    assert shown == "Sure. "
    assert stream.finish() == ("", [("save_memory", {"content": "x"})])


def test_echoed_prompt_tags_go_and_what_they_wrap_stays() -> None:
    # Seen from the 1.5B model: its poem inside the <memories> tag of the prompt.
    shown, rest, calls = run_filter(
        ["<mem", "ories>\nI remember", " the sea.\n</memo", "ries> Done. x < y, <b>bold</b>"],
        tools=set(),
    )
    assert "".join(shown) + rest == "I remember the sea.\n Done. x < y, <b>bold</b>"
    assert calls == []
    assert parse_tool_calls('<source n="1">\nParis.\n</source>', set()) == ("Paris.", [])


def test_a_piece_ending_in_part_of_a_tag_holds_exactly_that_part() -> None:
    """The held end of a streamed piece is the longest end that starts a tag: checked against
    the definition (every tag, every proper prefix) on ends cut at every point of every tag."""
    tags = OPEN_TAGS + CLOSE_TAGS + PROMPT_TAGS

    def by_definition(text: str) -> int:
        ends = (n for tag in tags for n in range(1, len(tag)) if text.endswith(tag[:n]))
        return max(ends, default=0)

    cases = ["", "plain text", "a < b", "x<", "<<", "<</", "</tool_c", "see <tool_call>"]
    cases += [f"ok {tag[:n]}" for tag in tags for n in range(len(tag) + 1)]
    cases += [f"{tag[:n]}<{tag[:m]}" for tag in tags[:3] for n in range(4) for m in range(6)]
    for text in cases:
        assert _partial_tag_size(text) == by_definition(text), text
    stream = ToolCallStreamFilter(set())
    assert stream.feed("Hello </too") == "Hello "
    assert stream.feed("ls> world") == " world"  # a stray closing tag is markup

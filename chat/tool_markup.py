"""Tool calls that small models write as text, turned into structured calls.

Hosted models return tool calls as structured data; a small local model writes them into its reply.
Qwen's chat template asks for `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, and the
model mostly complies, but sometimes answers with a ```json fenced block or a bare JSON object
instead, drops the closing tag or the last brace, or writes `arguments` as a JSON string. This
module accepts all of those, but only for the tools that were offered: anything else stays text,
so a JSON answer the user asked for is never swallowed.

`<tool_call>` and `<tools>` tags are markup whatever they hold: they are cut from the reply even
when no tool was offered (a model without tools sometimes writes one anyway) or the call in them
cannot be read, so the user never sees them. Fenced and bare JSON count as calls only when tools
were offered and they name one.

`parse_tool_calls` works on a whole reply. `ToolCallStreamFilter` is for streaming: it passes text
through as it arrives and holds back only from the point where a tool call may begin, so the user
never sees the raw call markup, and parses what it held when the reply ends. The chat flow runs
every model's text through it (`chat.nodes.call_model`).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from core.prompt_blocks import ECHOED_BLOCK_NAMES

ToolCall = tuple[str, dict[str, Any]]

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
# Qwen2.5-Coder (1.5B) often wraps its call in `<tools>`, copying the tag its chat template puts
# around the tool list, and writes an empty `<tools></tools>` when it means no call at all.
OPEN_TAGS = (OPEN_TAG, "<tools>")
CLOSE_TAGS = (CLOSE_TAG, "</tools>")
# A closing tag left over (its opening tag ended a body early, or never came) is markup too.
_CLOSE_TAG_RE = re.compile(r"</(tool_call|tools)>")
# The tags our prompts wrap data in (core/prompt_blocks.py): a small model sometimes echoes one
# around its answer ("<memories>\nI remember the sea…"). The tag goes, what it wraps stays.
PROMPT_TAG_NAMES = ECHOED_BLOCK_NAMES
PROMPT_TAGS = tuple(f"<{name}>" for name in PROMPT_TAG_NAMES) + tuple(
    f"</{name}>" for name in PROMPT_TAG_NAMES
)
_PROMPT_TAG_RE = re.compile(rf"</?(?:{'|'.join(PROMPT_TAG_NAMES)})(?:\s[^<>]*)?>\n?")

# A tag's body ends at its closing tag, at the next opening tag, or at the end of the reply.
_TAG_RE = re.compile(
    r"<(?P<tag>tool_call|tools)>(?P<body>.*?)(?:</(?P=tag)>|(?=<tool_call>|<tools>)|\Z)",
    re.DOTALL,
)
_EMPTY_TAG_RE = re.compile(r"<(tool_call|tools)>\s*</\1>")
# Any fenced block (closed or running to the end of the reply), with its info string.
_FENCE_RE = re.compile(r"```(?P<lang>[^\n`]*)\n(?P<body>.*?)(?:```|\Z)", re.DOTALL)
# Fence languages whose body may be a tool call; ``` with no language counts too.
_CALL_FENCE_LANGS = {"", "json", "json5", "jsonc", "tool_call", "tool_code"}
# First keys of a JSON object that may be a tool call; seeing another key first means it is not.
_CALL_KEYS = {
    "name",
    "arguments",
    "parameters",
    "function",
    "type",
    "tool",
    "tool_name",
    "tool_calls",
    "id",
}
# `{{` too: Qwen2.5-Coder's template shows the call format as `{{"name": …}}`, and the model
# sometimes copies the doubled braces.
_FIRST_KEY_RE = re.compile(r'\[?\s*\{\s*\{?\s*"(?P<key>[^"\\]*)"')
# The same with either quote, to skip braces in prose before trying to repair them as JSON.
_ANY_FIRST_KEY_RE = re.compile(r"""\[?\s*\{\s*(["'])(?P<key>[^"'\\]*)\1""")


def parse_tool_calls(text: str, tool_names: set[str]) -> tuple[str, list[ToolCall]]:
    """Split a whole reply into (remaining text, calls to offered tools).

    Calls are taken from `<tool_call>` tags, from ```json (or bare ```) fenced blocks and from bare
    JSON objects (or lists of them) with "name" and "arguments"/"parameters". Tags are cut out
    whatever they hold; a fenced block or bare JSON that names a tool not offered, or cannot be
    read, stays in the text. Without any markup the text is returned unchanged; otherwise the
    markup is cut out and the rest trimmed.
    """
    if not text or ("<" not in text and not tool_names):
        return text, []
    text = _EMPTY_TAG_RE.sub("", text)
    calls: list[tuple[int, ToolCall]] = []
    cut: list[tuple[int, int]] = []

    tags = list(_TAG_RE.finditer(text))
    for match in tags:
        found = _calls_in(match.group("body"), tool_names, strict=False) if tool_names else []
        calls += [(match.start(), call) for call in found]
        cut.append(match.span())  # markup, never an answer

    tag_spans = [m.span() for m in tags]
    fences = [
        m for m in _FENCE_RE.finditer(text) if tool_names and not _overlaps(m.span(), tag_spans)
    ]
    for match in fences:
        if match.group("lang").strip().lower() not in _CALL_FENCE_LANGS:
            continue
        found = _calls_in(match.group("body"), tool_names, strict=True)
        if found:
            calls += [(match.start(), call) for call in found]
            cut.append(match.span())

    # Bare JSON: outside every tag (a rejected tag stays text as a whole) and every fenced block
    # (JSON in a code sample is not a call).
    protected = tag_spans + [m.span() for m in fences]
    for start, end, found in _bare_json_calls(text, tool_names, protected) if tool_names else ():
        calls += [(start, call) for call in found]
        cut.append((start, end))

    if not cut:
        stripped = _PROMPT_TAG_RE.sub("", _CLOSE_TAG_RE.sub("", text))
        return (stripped.strip(), []) if stripped != text else (text, [])
    calls.sort(key=lambda item: item[0])
    remaining, position = [], 0
    for start, end in sorted(cut):
        remaining.append(text[position:start])
        position = end
    remaining.append(text[position:])
    rest = _PROMPT_TAG_RE.sub("", _CLOSE_TAG_RE.sub("", "".join(remaining)))
    rest = re.sub(r"\n{3,}", "\n\n", rest).strip()
    return rest, [call for _, call in calls]


class ToolCallStreamFilter:
    """Streams a reply's text while holding back anything that may be a tool call.

    `feed(piece)` returns the text that can be shown now. Text is held from a `<tool_call>` tag
    (or a piece ending in what may be the start of one, like `<tool_c`), and a reply that *begins*
    with `{`, `[{` or a ```json fence is held as a whole (other fences, e.g. ```python, stream).
    A held JSON start is let go as soon as its first key shows it is not a call. `finish()` parses
    what was held into (text to show, calls). With no tools offered only tags are held.
    """

    def __init__(self, tool_names: set[str]) -> None:
        self.tool_names = set(tool_names)
        self._pending = ""  # undecided text (start of reply, or a possible partial tag)
        self._held = ""  # text committed to parsing at the end
        self._at_start = True
        self._shown_visible = False  # whether anything but whitespace was returned yet

    def feed(self, piece: str) -> str:
        if self._held:
            self._held += piece
            return ""
        text = self._pending + piece
        self._pending = ""
        if self._at_start and self.tool_names:
            verdict = _start_verdict(text)
            if verdict == "undecided":
                self._pending = text
                return ""
            if verdict == "call":
                self._held = text
                return ""
            self._at_start = False
        return self._scan(text)

    def finish(self) -> tuple[str, list[ToolCall]]:
        """The held text that turned out not to be calls, and the calls found in it."""
        text = self._held + self._pending
        self._held = self._pending = ""
        return parse_tool_calls(text, self.tool_names)

    def _scan(self, text: str) -> str:
        text = _EMPTY_TAG_RE.sub("", text)
        index = min((i for i in (text.find(tag) for tag in OPEN_TAGS) if i >= 0), default=-1)
        if index >= 0:
            shown, self._held = text[:index], text[index:]
            if not self._shown_visible and not shown.strip():
                # A reply that is only a call should not show a stray newline before it.
                shown, self._held = "", text
        else:
            shown = text
            # Hold a piece's end that could grow into a tag with the next piece.
            size = _partial_tag_size(text)
            if size:
                shown, self._pending = text[:-size], text[-size:]
        shown = _PROMPT_TAG_RE.sub("", _CLOSE_TAG_RE.sub("", shown))
        self._shown_visible = self._shown_visible or bool(shown.strip())
        return shown


_ALL_TAGS = OPEN_TAGS + CLOSE_TAGS + PROMPT_TAGS
_LONGEST_TAG = max(map(len, _ALL_TAGS))


def _partial_tag_size(text: str) -> int:
    """The length of the longest end of `text` that is the start of a tag (not a whole one).
    Every tag begins with "<": only the ends starting at a "<" are compared, once per piece of
    every streamed reply."""
    start = max(0, len(text) - _LONGEST_TAG + 1)
    while (start := text.find("<", start)) >= 0:
        tail = text[start:]
        if any(len(tail) < len(tag) and tag.startswith(tail) for tag in _ALL_TAGS):
            return len(tail)
        start += 1
    return 0


def _start_verdict(text: str) -> str:
    """At the start of a reply: "call" (hold it), "text" (stream it) or "undecided" (need more)."""
    stripped = text.lstrip()
    if not stripped:
        return "undecided"
    if stripped.startswith("`"):
        if len(stripped) < 3:
            return "undecided" if "```".startswith(stripped) else "text"
        if not stripped.startswith("```"):
            return "text"
        line_end = stripped.find("\n")
        if line_end < 0:
            return "undecided"
        lang = stripped[3:line_end].strip().lower()
        if lang not in _CALL_FENCE_LANGS:
            return "text"
        return _json_start_verdict(stripped[line_end + 1 :].lstrip())
    if stripped[0] in "{[":
        return _json_start_verdict(stripped)
    return "text"


def _json_start_verdict(text: str) -> str:
    if not text:
        return "undecided"
    if text[0] not in "{[":
        return "text"
    if text[0] == "[":
        rest = text[1:].lstrip()
        if not rest:
            return "undecided"
        if rest[0] != "{":
            return "text"
    match = _FIRST_KEY_RE.match(text)
    if match:
        return "call" if match.group("key") in _CALL_KEYS else "text"
    # Not yet a complete first key: `{`, `{ "na`, … may still become a call.
    body = text.lstrip("[").lstrip().removeprefix("{").lstrip().removeprefix("{").lstrip()
    if not body or body.startswith('"'):
        return "undecided"
    return "text"


def _overlaps(span: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
    return any(span[0] < end and start < span[1] for start, end in spans)


def _calls_in(body: str, tool_names: set[str], strict: bool) -> list[ToolCall]:
    """All calls in a tag's or fence's body, or [] unless every object in it is a valid call."""
    body = body.strip()
    if body.startswith("```"):  # a fence inside a tag
        body = body.partition("\n")[2].strip().removesuffix("```").strip()
    calls = []
    for value in _decode_values(body):
        for item in _items(value):
            call = _as_call(item, tool_names, strict)
            if call is None:
                return []
            calls.append(call)
    if not calls and body.startswith("{{"):
        # `{{"name": …}}`: read the inner object; the extra closing brace is tolerated.
        return _calls_in(body[1:], tool_names, strict)
    return calls


def _items(value: Any) -> list[Any]:
    """The call candidates in a decoded value: a list's items, a {"tool_calls": [...]} wrapper's."""
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list) and len(value) == 1:
        value = value["tool_calls"]
    return value if isinstance(value, list) else [value]


def _bare_json_calls(
    text: str, tool_names: set[str], protected: list[tuple[int, int]]
) -> list[tuple[int, int, list[ToolCall]]]:
    """(start, end, calls) for each JSON object/list in the text made only of offered calls."""
    decoder = json.JSONDecoder()
    found: list[tuple[int, int, list[ToolCall]]] = []
    index = 0
    while True:
        index = _next_json_start(text, index)
        if index < 0:
            return found
        inside = next((end for start, end in protected if start <= index < end), None)
        if inside is not None:
            index = inside
            continue
        first_key = _ANY_FIRST_KEY_RE.match(text, index)
        if first_key is None:  # `{` in prose or code, not an object with a string key
            index += 1
            continue
        try:
            value, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            value = None
            if first_key.group("key") in _CALL_KEYS:
                # A call that runs to the end of the reply may have lost its last braces.
                value = _repair(text[index:])
            if value is None:
                index += 1
                continue
            end = len(text)
        items = _items(value)
        calls = [_as_call(item, tool_names, strict=True) for item in items]
        if items and all(call is not None for call in calls):
            start = index
            if text[:index].rstrip().endswith("{"):
                # `{{"name": …}}`: the doubled braces around the call go with it.
                start = text.rindex("{", 0, index)
                after = len(text) - len(text[end:].lstrip())
                if text.startswith("}", after):
                    end = after + 1
            found.append((start, end, [call for call in calls if call is not None]))
        # Skip the whole value either way: objects nested in non-call JSON are data, not calls.
        index = end


def _next_json_start(text: str, index: int) -> int:
    while True:
        brace = text.find("{", index)
        bracket = text.find("[", index)
        if bracket >= 0 and (brace < 0 or bracket < brace):
            if text[bracket + 1 :].lstrip().startswith("{"):
                return bracket
            index = bracket + 1
            continue
        return brace


def _decode_values(body: str) -> list[Any]:
    """The JSON values in a body: one, several in a row, or one repaired; [] if unreadable."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    index = 0
    while True:
        while index < len(body) and body[index] in " \t\r\n,":
            index += 1
        if index >= len(body):
            return values
        if values and not body[index:].strip(" \t\r\n}])"):
            return values  # a stray extra closing brace after a complete call
        try:
            value, index = decoder.raw_decode(body, index)
        except json.JSONDecodeError:
            value = _repair(body[index:])
            if value is None:
                return []
            values.append(value)
            return values
        values.append(value)


def _repair(text: str) -> Any | None:
    """Read JSON that lost its end (closing quote, braces, brackets), or a Python-style dict."""
    text = text.strip()
    for suffix in (CLOSE_TAG, "```"):
        text = text.removesuffix(suffix).rstrip()
    closers = []
    in_string = escaped = False
    for char in text:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            closers.append("}" if char == "{" else "]")
        elif char in "}]" and (not closers or closers.pop() != char):
            break  # mismatched: not JSON that merely lost its end
    candidate = text + ('"' if in_string else "") + "".join(reversed(closers))
    try:
        return json.loads(candidate)
    except json.JSONDecodeError:
        pass
    try:
        # Small models sometimes write a Python dict ('single quotes', True/None).
        value = ast.literal_eval(candidate)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    return value if isinstance(value, dict | list) else None


def _as_call(value: Any, tool_names: set[str], strict: bool) -> ToolCall | None:
    """A (name, arguments) pair if `value` is a call to an offered tool.

    `strict` (bare JSON, fences) also requires an "arguments"/"parameters" key, so plain data that
    merely has a "name" is not mistaken for a call; inside `<tool_call>` tags it may be left out.
    """
    if not isinstance(value, dict):
        return None
    if isinstance(value.get("function"), dict):  # OpenAI style: {"type": "function", "function": …}
        value = value["function"]
    name = value.get("name")
    if name is None:
        name = value.get("tool_name", value.get("function", value.get("tool")))
    if not isinstance(name, str) or name.strip() not in tool_names:
        return None
    if "arguments" in value:
        arguments = value["arguments"]
    elif "parameters" in value:
        arguments = value["parameters"]
    elif strict:
        return None
    else:
        arguments = {}
    if isinstance(arguments, str):
        arguments = _decode_arguments(arguments)
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    return name.strip(), arguments


def _decode_arguments(text: str) -> Any:
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return _repair(text)

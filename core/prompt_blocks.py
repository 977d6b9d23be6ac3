"""The one place that decides how untrusted text sits inside our prompts' `<tag>` blocks.

Our prompts wrap data in tagged blocks (`<sources>`, `<source n="1" title="…">`, `<question>`,
`<memories>`, `<conversation_summary>`, …) and tell the models that what is inside is data. That
only holds if the data cannot end its block or open one of ours: a web page saying
`</source></sources><question>…` would otherwise write the prompt's structure itself. Untrusted
text is anything we did not write: web pages (body, title, section headings, URL), memories, the
chat's summary, model text put in a block or a tool result (the messages a summary folds, the
evidence check's reason, a search's context), the user's words where they sit inside a block, tool
results and errors. Every prompt builder puts it in through `block()` or `untrusted()` below, and
`block()` refuses a tag name that is not in `BLOCK_NAMES`, so a new kind of block cannot be added
without this module neutralising its tags too. The chat's own messages (what the user typed, the
assistant's earlier replies) go to the chat model as messages of their own, outside any block,
as they were written, but for the chat template's control tokens, which the local model's client
neutralises in every message (`neutralise_control_tokens()` below).

What `untrusted()` does, in order:

1. It reads the text as a model may: HTML entities decoded, repeatedly (`&amp;lt;` → `&lt;` →
   `<`, numeric ones too), compatibility forms folded (fullwidth `＜／ｓｏｕｒｃｅ＞` → `</source>`)
   and invisible characters ignored (a zero-width space inside `source`).
2. In that reading it finds anything that looks like an opening or closing tag of one of our
   blocks or of the chat template's (`tool_call`, `tools`, `tool_response`), whatever the case,
   spacing, attributes or slashes (`< /Source >`, `<SOURCE id=1>`, `</sources\\n>`, `<\\/source>`),
   and the chat template's control tokens (`<|im_end|>`, `<|im_start|>`).
3. Each one found is replaced, in the original text, by its decoded form with `<` and `>` turned
   into the look-alikes `‹` and `›`: `&lt;/source&gt;` becomes `‹/source›`. Everything else is
   left exactly as written, inside code fences too.

Why this and not the alternatives:

- Not every `<` and `>`: pages and memories are full of code (`vector<int>`, `a < b`, HTML
  samples) and the chat model is a coder; turning all of them into look-alikes would degrade
  answers about code for no gain, as only our own tag names can end or open one of our blocks.
- Not decoding every entity for good: an HTML tutorial's `&lt;p&gt;` in a code block, or a user
  asking what `&amp;` means, would change meaning. Entities are decoded to *find* tags; only what
  is found is rewritten.
- Not a per-request random boundary (`<source-7f3a…>`): the instructions name the blocks and
  open every prompt, so a boundary that changed per request would void the local model's prompt
  cache (seconds per turn); a 1.5B model follows fixed, familiar tags better than random ones;
  chat/tool_markup.py cuts echoed tags from the model's output by their fixed names; and a random
  boundary would not stop the template's control tokens, which llama.cpp reads as real ones in
  any message text.

The control tokens are there because llama-cpp-python tokenises the whole formatted prompt with
special tokens parsed: `<|im_end|>\\n<|im_start|>system` in a web page would end the user's message
and start a system message of the page's choosing, whatever our tags say.
"""

from __future__ import annotations

import html
import re
import unicodedata
from functools import cache

# Every tag our prompts wrap text in (core/prompts.py). `block()` builds only these.
BLOCK_NAMES = (
    # the chat prompt
    "instructions", "user_instructions", "conversation_summary", "memories", "note", "documents",
    # web search: the evidence check and the web answer
    "sources", "source", "question", "context",
    # research mode: the coverage check
    "sub_questions",
    # memory extraction
    "known_facts", "assistant_said_before", "user_message", "saved_fact", "new_fact",
    # the rolling summary
    "previous_summary", "new_messages", "user", "assistant",
    # the evals' judge
    "gold_answer", "answer",
)  # fmt: skip
# The tags of the chat prompts that a small chat model echoes around its answer; chat/tool_markup.py
# cuts them from what it writes. Not every block name: a reply may legitimately hold `<user>` or
# `<answer>` elements (XML the user asked for), and the chat model never sees those blocks.
ECHOED_BLOCK_NAMES = (
    "memories", "note", "instructions", "conversation_summary", "documents", "sources", "source",
    "question", "context", "known_facts", "user_message", "assistant_said_before",
)  # fmt: skip
# Tags of the chat template itself (Qwen's, the local model's): a tool call, the tool list, a tool
# result. Never built by us, but text must not fake them either.
TEMPLATE_TAG_NAMES = ("tool_call", "tools", "tool_response")

OPEN_LOOKALIKE, CLOSE_LOOKALIKE = "‹", "›"
# Deeper than this, an entity is left encoded: a model does not decode ten levels either, and each
# pass costs a scan of the text.
MAX_DECODE_PASSES = 10
# Attributes of a faked tag are swallowed into its neutralised form up to its `>`, this far.
MAX_TAG_CHARS = 200

# Characters a reader skips but a tokeniser keeps (zero-width space and joiners, soft hyphen, bidi
# marks, word joiner, byte order mark): allowed anywhere inside a tag, so a zero-width space
# inside `</source>` does not hide it.
_INVISIBLE = "\u00ad\u034f\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
_GAP = rf"[\s{_INVISIBLE}]*"
_SKIP = f"[{_INVISIBLE}]*"


def _name_pattern(name: str) -> str:
    return _SKIP.join(re.escape(char) for char in name)


_NAMES = sorted({*BLOCK_NAMES, *TEMPLATE_TAG_NAMES}, key=len, reverse=True)
# The chat template's control tokens: `<|im_start|>`, `<|eot_id|>`, `<｜begin▁of▁sentence｜>`. The
# fullwidth bar is DeepSeek's own; in `untrusted()`'s folded reading it is a `|` already.
_CONTROL_TOKEN_PATTERN = (
    rf"<{_SKIP}[|｜]{_SKIP}(?:[^<>|｜\s{_INVISIBLE}]{_SKIP}){{1,64}}[|｜]{_SKIP}>"
)
_TAG = re.compile(
    # `<`, then slashes (or JSON-escaped `\/`) and spaces in any mix (one slash per group, so
    # the regex never backtracks exponentially), a name of ours as a whole word, then its
    # attributes up to the `>` if there is one nearby (a tag cut off still counts).
    rf"<{_GAP}(?:[/\\]{_GAP})*(?:{'|'.join(map(_name_pattern, _NAMES))})(?!{_SKIP}[\w-])"
    rf"(?:[^<>]{{0,{MAX_TAG_CHARS}}}>)?"
    rf"|{_CONTROL_TOKEN_PATTERN}",
    re.IGNORECASE,
)
_CONTROL_TOKEN = re.compile(_CONTROL_TOKEN_PATTERN)
# html.unescape's own pattern, so a pass here decodes exactly what html.unescape decodes.
_ENTITY = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")


@cache
def _fold_table() -> dict[int, str]:
    """Characters whose compatibility form (NFKC) is one ASCII character: fullwidth and small
    forms, mathematical letters, circled ones. One for one, so positions stay put."""
    table: dict[int, str] = {}
    for block in (range(0x80, 0x10000), range(0x1D400, 0x1D800), range(0x1F100, 0x1F200)):
        for code in block:
            char = chr(code)
            folded = unicodedata.normalize("NFKC", char)
            if folded != char and len(folded) == 1 and folded.isascii():
                table[code] = folded
    return table


def _reading(text: str) -> tuple[str, list[int], list[int]]:
    """The text as a model may read it (entities decoded, compatibility forms folded), and for
    each of its characters the span of the original text it comes from (`starts`, `ends`)."""
    view = text.translate(_fold_table())
    starts, ends = list(range(len(text))), list(range(1, len(text) + 1))
    for _ in range(MAX_DECODE_PASSES):
        if "&" not in view:
            break
        pieces: list[str] = []
        new_starts: list[int] = []
        new_ends: list[int] = []
        position = 0
        for match in _ENTITY.finditer(view):
            decoded = html.unescape(match.group())
            if decoded == match.group():
                continue
            pieces.append(view[position : match.start()])
            new_starts += starts[position : match.start()]
            new_ends += ends[position : match.start()]
            # Every character an entity decodes to stands for the whole entity.
            pieces.append(decoded)
            new_starts += [starts[match.start()]] * len(decoded)
            new_ends += [ends[match.end() - 1]] * len(decoded)
            position = match.end()
        if not pieces:
            break
        pieces.append(view[position:])
        new_starts += starts[position:]
        new_ends += ends[position:]
        # Decoded characters may be fullwidth forms themselves (`&#xFF1C;`).
        view, starts, ends = "".join(pieces).translate(_fold_table()), new_starts, new_ends
    return view, starts, ends


def _defanged(tag: str) -> str:
    return tag.replace("<", OPEN_LOOKALIKE).replace(">", CLOSE_LOOKALIKE)


def untrusted(text: str) -> str:
    """`text` made safe to put inside one of our blocks: whatever reads as a tag of ours (or a
    control token of the chat template) is rewritten with look-alike brackets; the rest is left
    as written (see the module docstring)."""
    # Again until nothing changes: a rewritten tag no longer blocks what surrounds it, so
    # `<|x<question>y|>` becomes a control token once its inner tag is gone. Each pass turns at
    # least one `<` into a look-alike and adds none, so this ends.
    while (rewritten := _rewrite(text)) != text:
        text = rewritten
    return text


def _rewrite(text: str) -> str:
    if "&" not in text and "<" not in text.translate(_fold_table()):
        return text  # nothing reads as `<`: most text, checked cheaply
    view, starts, ends = _reading(text)
    out: list[str] = []
    position = 0
    for match in _TAG.finditer(view):
        start, end = starts[match.start()], ends[match.end() - 1]
        if start < position:  # shares an entity with the tag before: already rewritten
            continue
        out.append(text[position:start])
        out.append(_defanged(match.group()))
        position = end
    if not out:
        return text
    out.append(text[position:])
    return "".join(out)


def neutralise_control_tokens(text: str) -> str:
    """`text` with the chat template's control tokens (`<|im_end|>`, `<|im_start|>`, …) given
    look-alike brackets (`‹|im_end|›`), as `untrusted()` gives them; everything else as written.

    For the messages the local model is sent (core/local_model/provider.py), which are not in
    a block: llama-cpp-python tokenises the whole formatted prompt with special tokens parsed,
    so the exact string `<|im_end|>` in any message would be the real token, ending the message
    there. A tokenizer matches only the exact string, so the text is not read the way
    `untrusted()` reads it: an escaped `&lt;|im_end|&gt;`, or a tag of ours, is the message's own
    words and stays. Text without a `<` comes back as it is, at the cost of one scan."""
    if "<" not in text:  # every template's control tokens open with an ASCII `<`
        return text
    # One pass is enough: a token's content has no bar, so none can span a rewritten one.
    return _CONTROL_TOKEN.sub(lambda match: _defanged(match.group()), text)


def attribute(text: str) -> str:
    """Untrusted text as the value of one of our tag's attributes (a page's title): one line, no
    double quote to end the value, no bracket at all."""
    value = " ".join(untrusted(text).split())
    return value.replace('"', "'").replace("<", "(").replace(">", ")")


def block(name: str, body: str, *, trusted: bool = False, **attributes: object) -> str:
    """`<name attr="…">\\nbody\\n</name>`. The body is untrusted unless `trusted` (text we wrote,
    or blocks already built here); attribute values always are."""
    if name not in BLOCK_NAMES:
        raise ValueError(f"<{name}> is not a block name of core/prompt_blocks.py")
    attrs = "".join(f' {key}="{attribute(str(value))}"' for key, value in attributes.items())
    return f"<{name}{attrs}>\n{body if trusted else untrusted(body)}\n</{name}>"

"""What the user asks, in a chat message, to have forgotten ("Please forget that I live in
Porto.", "Can you delete the memory about my job?").

A user of ChatGPT says "forget that …" in the chat and expects it done. Before this, the local
model's extraction read "Please forget that I live in Porto." as the fact again and refreshed the
memory with it as its quote. The requests are found by rules, not by a model: a request at the
start of a sentence ("forget", "stop remembering", "don't remember", or "delete / remove / erase"
with "memory"), after at most a "please", "can you", "I want you to"…, so "I always forget my
keys" and "Don't forget to call Mum" ask nothing. English only, like core/grounding.py.
"""

from __future__ import annotations

import re

from core.grounding import content_words, split_sentences

_OPENING = (
    r"(?:(?:please|ok|okay|hey|also|and|now|actually|oh|so)\b[,\s]*)*"
    r"(?:(?:can|could|would|will) you (?:please )?|i (?:want|need|would like|['’]d like) you to "
    r"|you (?:can|should|may|must) (?:now )?|please )?"
)
_VERB = (
    r"(?:forget|stop remembering|do not remember|don['’]t remember"
    r"|(?:delete|remove|erase|clear)\s+(?:the |your |that |this )?memor(?:y|ies))"
)
_WHAT_OPENING = (
    r"(?:(?:about|that|of|on|the fact that|what i (?:said|told you) about|everything about"
    r"|all about)\s+)*"
)
_REQUEST = re.compile(rf"^\W*{_OPENING}{_VERB}\b[\s,:]*{_WHAT_OPENING}(?P<what>.*)$", re.I)
# Where what to forget ends: "Forget my old job, I'm a baker now." asks to forget the job only.
_END = re.compile(r"\s*(?:[,;:!?.]|\s[-–—]\s|\bplease\b).*$", re.I | re.S)


def forget_requests(message: str) -> list[str]:
    """What each sentence of the message asks to have forgotten, as the user put it ("I live in
    Porto", "my job"); nothing for a request that names nothing ("Forget it.")."""
    found = []
    for sentence in split_sentences(message):
        what = _what(sentence)
        if what:
            found.append(what)
    return found


def asks_to_forget(sentence: str) -> bool:
    """Whether the sentence is a request to forget something (it tells no fact to remember)."""
    return _REQUEST.match(sentence.strip()) is not None


def _what(sentence: str) -> str | None:
    match = _REQUEST.match(sentence.strip())
    if match is None:
        return None
    what = _END.sub("", match.group("what")).strip()
    return what if content_words(what) else None

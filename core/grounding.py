"""Whether a quote is really in the user's message, and the message as numbered sentences.

A memory is stored only with a quote found in the user's own message (core/memory_store.py). Models
copy text imperfectly in harmless ways (curly quotes for straight ones, an en dash for a hyphen,
other case, line breaks), so `find_quote` compares after normalising those, and returns the span
of the message itself: what is stored is always the user's exact words.

Small models paraphrase when asked to quote, so extraction never asks them to: it shows the message
as numbered sentences (`numbered_sentences`) and the model cites numbers; `sentence_span` turns
them back into the exact text, which is then found by construction. A real sentence cited for a
fact it does not state is caught too: the fact must share a meaningful word with it
(`shares_a_word`) and state no number it does not (`states_its_numbers`); a question tells only
what it holds, and a question or a sentence put to the other side ("you…", "please…") only what
the user says of themselves in it (`told_by`). A message in which no fact could be told that way
is not read for memories at all (`may_tell_about_user`).
"""

from __future__ import annotations

import re
import unicodedata

from core.number_words import TENS, UNITS

# Typographic variants a model may write for the user's plain characters, and the reverse.
_SAME_CHARACTER = str.maketrans(
    {
        **dict.fromkeys("‘’‚‛′`´", "'"),
        **dict.fromkeys("“”„‟″«»", '"'),
        **dict.fromkeys("‐‑‒–—―−", "-"),
    }
)
# Quote marks and punctuation a model tends to add around a quote.
_EDGE_CHARACTERS = " \t\r\n'\".,;:!?…-"
# What may close a sentence after its final mark.
_CLOSING_CHARACTERS = "\"')]»”’"
# Shorter quotes ("I", "ok") are in almost any message, so they prove nothing.
MIN_QUOTE_CHARS = 4

# A sentence ends at . ! ? or … (with closing quotes/brackets) followed by a space, or at a line
# break; a list item or paragraph is a sentence of its own.
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+|(?<=[.!?…][\"')\]])\s+|\n+")


def _normalized(text: str) -> tuple[str, list[int]]:
    """`text` normalised for comparison, and for each of its characters the index in `text`."""
    out: list[str] = []
    where: list[int] = []
    for index, char in enumerate(text):
        if char.isspace():
            if out and out[-1] != " ":
                out.append(" ")
                where.append(index)
            continue
        for piece in unicodedata.normalize("NFKC", char).casefold().translate(_SAME_CHARACTER):
            out.append(piece)
            where.append(index)
    return "".join(out), where


def find_quote(quote: str, message: str) -> str | None:
    """The span of `message` that `quote` copies (see the module docstring), or None. Tried as
    given first, then without the quote marks and punctuation a model may have put around it."""
    haystack, where = _normalized(message)
    exact, _ = _normalized(quote.strip())
    for wanted in (exact.strip(), exact.strip(_EDGE_CHARACTERS)):
        if len(wanted.strip(_EDGE_CHARACTERS)) < MIN_QUOTE_CHARS:
            return None
        start = haystack.find(wanted)
        if start >= 0:
            end = where[start + len(wanted) - 1] + 1
            return message[where[start] : end]
    return None


def split_sentences(message: str) -> list[str]:
    """The message's sentences in order, each exactly as written (stripped of outer spaces)."""
    pieces = _SENTENCE_END.split(message)
    return [piece.strip() for piece in pieces if piece and piece.strip()]


def numbered_sentences(message: str) -> str:
    """E.g. '[1] Hi! [2] I'm Dana.' one per line: what the extraction model reads and cites."""
    return "\n".join(f"[{n}] {s}" for n, s in enumerate(split_sentences(message), 1))


def sentence_span(message: str, numbers: list[int]) -> str | None:
    """The exact text of the message from the first to the last sentence cited, or None when a
    number is not one of its sentences."""
    sentences = split_sentences(message)
    if not numbers or any(not 1 <= n <= len(sentences) for n in numbers):
        return None
    starts = _starts(message, sentences)
    first, last = min(numbers) - 1, max(numbers) - 1
    return message[starts[first] : starts[last] + len(sentences[last])]


def sentences_of(span: str, message: str) -> list[str]:
    """The message's sentences that `span` (the message's own text) is part of, or none."""
    start = message.find(span)
    if not span or start < 0:
        return []
    sentences = split_sentences(message)
    return [
        sentence
        for sentence, where in zip(sentences, _starts(message, sentences), strict=True)
        if where < start + len(span) and start < where + len(sentence)
    ]


def _starts(message: str, sentences: list[str]) -> list[int]:
    """Where each sentence starts in `message`, found in one pass in order (sentences may
    repeat)."""
    starts, position = [], 0
    for sentence in sentences:
        position = message.index(sentence, position)
        starts.append(position)
        position += len(sentence)
    return starts


# Words that say nothing about which fact a sentence states ("named": a fact's "a dog named Rex"
# is the user's "my dog Rex").
_STOP_WORDS_TEXT = """a an and are as at be been but by do does for from had has have he her his i
i'm im in is it its me my of on or our she so that the their them they this to was we were with
you your user user's users not no yes am named"""
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def content_words(text: str) -> set[str]:
    """The words of `text` that carry meaning, lower case, cut to their first 5 letters (a crude
    stem: "allergic"/"allergy", "lives"/"living" meet)."""
    normalized, _ = _normalized(text)
    return _meaningful(_WORD.findall(normalized))


def _meaningful(words: list[str]) -> set[str]:
    """`content_words` of words already normalised and split."""
    stems = (w.removesuffix("'s") for w in words)  # "wife's" is "wife"
    return {w[:5] for w in stems if w not in _STOP_WORDS}


def shares_a_word(fact: str, quote: str) -> bool:
    """Whether the fact and its quote have a meaningful word in common."""
    return bool(content_words(fact) & content_words(quote))


# How the user wants replies, as extraction writes it ("The user wants short replies."). Asked of
# the other side ("Please keep your answers short."), it is still the user's own wish. Recall
# gives such memories with every message (core/memory_search.py, which runs it in Postgres).
REPLY_WORDS = ("reply", "replies", "answer", "answers", "response", "responses")
_REPLY_WORD = "|".join(REPLY_WORDS)
REPLY_WISH = rf"^the user (?:wants|prefers|would like|likes)\b.*\b(?:{_REPLY_WORD})\b"
_REPLY_WISH = re.compile(REPLY_WISH, re.IGNORECASE)


def is_reply_wish(fact: str) -> bool:
    return bool(_REPLY_WISH.search(fact))


# What makes a request about replies a lasting wish: it names replies ("Keep your answers short.")
# or asks for good ("Keep it short from now on."). "Can you make it shorter?" is about one reply,
# and the local model saved it as "The user wants short replies.".
_LASTING_WISH = re.compile(
    rf"\b(?:{_REPLY_WORD}|always|never|keep|from now on|in (?:the )?future"
    r"|going forward|every time|each time)\b"
)


# A name a fact gives ("The user's name is Marta.", "… sister's name is Julia."): told only by a
# quote holding the name itself, and no name starts like a noun phrase. The local model saved
# "The user's name is a pediatric nurse." from "I'm a pediatric nurse in Porto.".
_NAME_GIVEN = re.compile(r"\bname is (?P<name>[^.,;:!?]+)", re.IGNORECASE)
_NOT_A_NAME = re.compile(
    r"(?:a|an|the|my|your|his|her|their|our|not|called|named|unknown)\b", re.IGNORECASE
)


def _gives_a_name_told(fact: str, quote: str) -> bool:
    """False for a fact giving a name that is none, or that the quote does not hold."""
    match = _NAME_GIVEN.search(fact)
    if match is None:
        return True
    name = match.group("name").strip()
    return not _NOT_A_NAME.match(name) and content_words(name) <= content_words(quote)


def told_by(fact: str, quote: str) -> bool:
    """Whether the quote tells the fact rather than asks about it. A quote of questions only tells
    what it holds, so every meaningful word of the fact must be in it: "Any recipes, since I'm
    vegan?" tells "The user is vegan."; "What's my favourite colour?" does not tell "The user's
    favourite colour is blue." (small models answer the question: "How many children do I have?"
    became "The user has two children."). A quote with a statement in it needs a meaningful word
    in common with the fact. Either way, a sentence put to the other side ("you", "please") or
    asked tells only what the user says of themselves in it (`_said_of_themselves`). A wish about
    replies is told by asking for it, question or not ("Could you keep your answers short?"), in
    a sentence that can ask for one (`_may_ask_for_replies`). A name is told by the name
    (`_gives_a_name_told`). A word the quote only denies ("I'm not vegetarian any more.") tells
    no fact that affirms it ("The user is vegetarian."; `_denied`)."""
    if not _gives_a_name_told(fact, quote):
        return False
    sentences = split_sentences(quote) or [quote]
    if is_reply_wish(fact):
        return shares_a_word(fact, quote) and any(map(_may_ask_for_replies, sentences))
    told = set().union(*(_said_of_themselves(s) for s in sentences))
    if not _denies(fact):
        told -= set().union(*map(_denied, sentences))
    if all(map(_asks, sentences)):
        return content_words(fact) <= told
    return bool(content_words(fact) & told)


# A word the user denies does not tell a fact that affirms it: the local model updated "The user
# is vegetarian." with "I'm not vegetarian any more, I eat fish now." as its quote, and kept "The
# user works as a teacher." from "I quit teaching, I'm a chef now.". Denied: the few words after a
# negation in its clause ("not vegetarian any", "quit teaching"). English only, like the rest.
_NEGATIONS = frozenset({"not", "no", "never", "cannot", "quit", "stopped", "neither", "nor"})
_DENIED_WORDS = 3
_AVERSE = (
    "avoid", "skip", "dislik", "hate", "allerg", "intoler", "unable", "without", "refus",
    "afraid", "scared", "free", "lack", "former", "gave", "give", "used", "non", "sober",
)  # fmt: skip
_CLAUSE_BREAK = re.compile(r"[,;:()\u2013\u2014]| - ")


def _negates(word: str) -> bool:
    return word in _NEGATIONS or word.endswith("n't")


def _denies(fact: str) -> bool:
    """Whether the fact itself says something is not so ("The user doesn't eat meat."), or keeps
    away from it ("The user avoids meat." from "I don't eat meat.")."""
    words = _WORD.findall(_normalized(fact)[0])
    return any(_negates(word) or word.startswith(_AVERSE) for word in words)


def _denied(sentence: str) -> set[str]:
    """The `content_words` of `sentence` that it only ever denies: within _DENIED_WORDS words
    after a negation, in its clause."""
    denied: set[str] = set()
    affirmed: set[str] = set()
    for clause in _CLAUSE_BREAK.split(_normalized(sentence)[0]):
        left = 0
        for word in _WORD.findall(clause):
            if _negates(word):
                left = _DENIED_WORDS
                continue
            (denied if left else affirmed).update(_meaningful([word]))
            left = max(left - 1, 0)
    return denied - affirmed


_ADDRESSED = frozenset(
    {"you", "your", "yours", "you're", "you've", "you'd", "you'll", "please", "pls", "plz"}
)
_FIRST_PERSON_PLURAL = frozenset({"we", "we're", "we've", "we'd", "we'll", "our", "ours", "us"})
_FIRST_PERSON = _FIRST_PERSON_PLURAL | {
    "i", "i'm", "im", "i've", "i'd", "i'll", "me", "my", "mine", "myself"
}  # fmt: skip
_SPEAKING = _FIRST_PERSON - {"me", "us"}


# A thank-you and what it thanks for, up to its first punctuation mark ("thanks for your help,").
_THANKS = re.compile(r"\A\W*(?:thank you|thanks)\b[^,.!?;:]*[,.!?;:]?")
# A greeting or thank-you put to someone by a one-word name ("Hey Melanie!", "Thanks so much,
# Sam,"): the name is theirs. The local model saved "The user's name is Melanie." from the first.
_GREETED = re.compile(
    r"\A\W*(?:hi|hey|hello|hiya|dear|cheers|thanks|thank you|good (?:morning|afternoon|evening))\b"
    r"(?:\s+(?:so much|a lot|again))?[\s,]*(?P<name>[^\W\d_][\w'-]*)\s*(?:[,.!?;:]|\Z)"
)


def _said_of_themselves(sentence: str) -> set[str]:
    """The `content_words` of the part of a sentence that can tell about the user. Put to the
    other side ("Can you suggest a quick dinner I could make before work?", "You're doing an
    awesome job looking after your family!"), the words before the user speaks of themselves are
    a request or are about the other side, so it is the sentence from its first "I", "my", "we"…
    on; nothing when it has none. Any other sentence, whole. A thank-you opening it ("Thanks for
    your help, the move to Porto went well.") puts nothing to the other side; a greeting or
    thank-you with a name ("Hey Melanie!") tells nothing (the name is the other side's). A
    question is asked of the other side too: "What is a good name for a small grey cat?" tells
    nothing of the user ("The user has a small grey cat." is a guess), "How do I train my new
    puppy?" tells from its "I" on."""
    normalized, _ = _normalized(sentence)
    greeted = _GREETED.match(normalized)
    if greeted and greeted["name"] not in _FIRST_PERSON:
        normalized = normalized[greeted.end() :]
    words = _WORD.findall(_THANKS.sub("", normalized, count=1))
    if not _ADDRESSED.intersection(words) and not _asks(sentence):
        return _meaningful(words)
    # "me" and "us" are whom it is asked for ("Give me lunch ideas I can take to work."): what
    # the user tells of themselves starts at their "I", "my", "we"…
    first = next((n for n, word in enumerate(words) if word in _SPEAKING), len(words))
    return _meaningful(words[first:])


# A sentence opening with a request asks as a question does, question mark or not: "Give me three
# lunch ideas I can take to work." was saved as "The user can take fruit to work.".
_REQUEST_OPENING = re.compile(
    r"\A\W*(?:(?:please|ok|okay|so|now|and|also|then|just)\b[,\s]*)*"
    r"(?:give|tell|show|help|suggest|recommend|list|plan|write|explain|find|make|create"
    r"|describe|summari[sz]e|translate|draft|compare|teach|remind)\b"
)


def _asks(sentence: str) -> bool:
    """Whether `sentence` asks the other side something: a question, or a request."""
    return sentence.rstrip(_CLOSING_CHARACTERS).endswith("?") or bool(
        _REQUEST_OPENING.match(_normalized(sentence)[0])
    )


def _may_ask_for_replies(sentence: str) -> bool:
    """Whether `sentence` can be a lasting wish about replies (`_LASTING_WISH`), put to the other
    side or not ("Could you always reply in French?", "I prefer short answers.")."""
    return bool(_LASTING_WISH.search(_normalized(sentence)[0]))


def may_tell_about_user(message: str) -> bool:
    """Whether any fact could be grounded in `message` (`told_by` accepts none when this is
    False): a sentence that tells something of the user, or that can be a lasting wish about
    replies. Extraction skips a message that cannot: its model call would store nothing."""
    return any(_said_of_themselves(s) or _may_ask_for_replies(s) for s in split_sentences(message))


def statements_of_themselves(message: str) -> list[str]:
    """The message's sentences, exactly as written, in which the user states something of
    themselves: not questions, with a first-person word ("Hi, I'm Marta.", "My son is six.").
    What a message may tell about its user before extraction has read it (chat/memory_recall.py)."""
    return [
        sentence
        for sentence in split_sentences(message)
        if not _asks(sentence)
        and _FIRST_PERSON.intersection(_WORD.findall(_normalized(sentence)[0]))
    ]


def told_of_us(sentence: str) -> bool:
    """Whether the user states something in `sentence` of a "we" they belong to ("We're both
    vegetarian.", "Our flat is in Porto."): not a question, with "we", "our" or "us"."""
    return not _asks(sentence) and bool(
        _FIRST_PERSON_PLURAL.intersection(_WORD.findall(_normalized(sentence)[0]))
    )


def best_supporting_sentence(message: str, fact: str) -> str | None:
    """The sentence of `message` that shares the most meaningful words with `fact`, if it shares
    at least half of them: for a model that stated a fact but cited the wrong sentence number
    (small models often cite the one before). None otherwise."""
    wanted = content_words(fact)
    if not wanted:
        return None
    scored = [(len(wanted & content_words(s)), s) for s in split_sentences(message)]
    shared, sentence = max(scored, default=(0, ""), key=lambda pair: pair[0])
    return sentence if shared * 2 >= len(wanted) else None


_MONTH = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\b\.?"
)
_DATE = re.compile(
    rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}|\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?\b"
    r"|\b\d{4}-\d{2}-\d{2}\b",
    re.IGNORECASE,
)
_YEAR = re.compile(r"(19|20)\d\d")
_NUMBER_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+")


def stated_numbers(text: str) -> set[str]:
    """The numbers `text` states, as digits: "3", "three" and "thirty-one" alike."""
    tokens = _NUMBER_TOKEN.findall(text.casefold())
    found: set[str] = set()
    for i, token in enumerate(tokens):
        if token[0].isdigit():
            found.add(token.replace(",", ""))
        elif token in TENS:
            after = tokens[i + 1] if i + 1 < len(tokens) else ""
            unit = UNITS.index(after) if after in UNITS[1:10] else 0
            found.add(str(TENS[token] + unit))
        elif token in UNITS and not (i and tokens[i - 1] in TENS):
            found.add(str(UNITS.index(token)))
    return found


def states_its_numbers(fact: str, quote: str) -> bool:
    """Whether every number of the fact is one its quote states. Small models fill in numbers
    ("How many children do I have?" became "The user has two children."). Not checked: one
    (the user's "a sister" is "one sister"), and years, which extraction works out from the
    chat's date ("last year" is "in 2025"). A day of a month in the fact must be one the quote
    gives, unless the quote tells a time from which it is worked out ("yesterday" is "on 7 May
    2023"): from "My son Dev just turned 10." the local model wrote "… turns 10 on 25 July."."""
    stated = stated_numbers(_DATE.sub(" ", fact))
    wanted = {n for n in stated if n != "1" and not _YEAR.fullmatch(n)}
    if not wanted <= stated_numbers(quote):
        return False
    return _days_in(fact) <= _days_in(quote) or bool(_TIME_FROM_TODAY.search(quote))


# What a date can be worked out from: a time relative to the chat's own date.
_TIME_FROM_TODAY = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|last|next|this|coming|weekend|monday|tuesday"
    r"|wednesday|thursday|friday|saturday|sunday|in (?:a|an|\w+) (?:days?|weeks?|months?))\b",
    re.IGNORECASE,
)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")


def _days_in(text: str) -> set[tuple[int, str]]:
    """The days of a month `text` names, as (day, month): "14 January", "Jan 14th", "2023-01-14"
    alike."""
    days = set()
    for found in _DATE.finditer(text):
        written = found.group(0).lower()
        if iso := re.fullmatch(r"\d{4}-(\d{2})-(\d{2})", written):
            month, day = int(iso[1]), int(iso[2])
            if 1 <= month <= 12:
                days.add((day, _MONTHS[month - 1]))
            continue
        day_number = re.search(r"\d{1,2}", written)
        month_name = re.search(r"[a-z]{3}", re.sub(r"\d+(?:st|nd|rd|th)?|\bof\b", " ", written))
        if day_number and month_name:
            days.add((int(day_number[0]), month_name[0]))
    return days

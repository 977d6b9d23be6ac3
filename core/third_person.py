"""A fact the user stated in the first person, told in the third ("I live in Lisbon." → "The user
lives in Lisbon.").

The memory model is asked for facts about "the user", but the local 1.5B model sometimes copies
the user's sentence instead ("I'm allergic to peanuts."), and such a fact used to be refused as
not about the user: in a keyless trial, three of the four facts of "Hi! I'm Dana. I live in Lisbon
and I'm allergic to peanuts. I work as a nurse." were lost that way. A sentence whose subject is
"I" or "my …" is about the user by definition, so it is rewritten rather than refused. Only the
opening subject and verb change (by rules: a past form stays, "live" becomes "lives", "study"
"studies"); later "my", "me" and "I" become "their", "them" and "they". A wish about replies
copied as the user asked it ("Please always answer in British English.") is the user's too: "The
user wants you to always answer in British English.".

A model that knows the user's name may use it as the subject: from "Bonjour ! Je m'appelle Luc, je
suis infirmier à Lyon et j'ai deux chats." the local model wrote "The user's name is Luc." and then
"Luc works as an infirmier in Lyon.", which was refused. A fact opening with the name the user gave
(`users_name`) is about the user too (`named_as_user`), and so is one opening with the name of
someone the user calls "my daughter Mira" (`named_relative`: "Mira turns 7 on January 14.").
"""

from __future__ import annotations

import re

from core.grounding import is_reply_wish

# Openings whose third-person form does not depend on the verb that follows; "" keeps the words
# after "I" as they are ("I can swim" → "The user can swim").
_KEPT_AFTER_I = (
    r"i (?:did not|didn['’]t|can['’]t|cannot|can|could|will|would|should|must|may|might"
    r"|won['’]t|used to|had|did)"
)
_FIXED_OPENINGS = [
    (re.compile(r"i['’]m|i am", re.I), "The user is"),
    (re.compile(r"i['’]ve|i have", re.I), "The user has"),
    (re.compile(r"i['’]d", re.I), "The user would"),
    (re.compile(r"i['’]ll", re.I), "The user will"),
    (re.compile(r"i was", re.I), "The user was"),
    (re.compile(r"i don['’]t|i do not", re.I), "The user does not"),
    (re.compile(_KEPT_AFTER_I, re.I), ""),
    (re.compile(r"my", re.I), "The user's"),
]
# "My wife and I …", which the local model also writes as "The user's wife and I …".
_WITH_SOMEONE = re.compile(r"(?:my|the user['’]s) ((?:[a-z]+ )?[a-z]+) and i\b", re.I)
_ADVERBS = "also|always|never|often|usually|still|really|just|recently|currently|now|sometimes"
_SUBJECT = re.compile(rf"\s*i\s+(?:({_ADVERBS})\s+)?([a-z]+)\b", re.I)
# Past forms that do not end in -ed, as a user tells what happened ("I moved", "I went").
_IRREGULAR_PAST_TEXT = """ate became began bought broke brought built came caught chose did drank
drove fell felt flew forgot found gave got grew had heard held hurt kept knew learnt left lent lost
made meant met paid put quit ran read said sat saw sent sold spent spoke stood stole swam taught
thought told took understood went woke won wore wrote"""
_IRREGULAR_PAST = frozenset(_IRREGULAR_PAST_TEXT.split())
_IRREGULAR_PRESENT = {"have": "has", "do": "does", "go": "goes", "be": "is"}
# Later mentions of the user, once the subject is "The user".
_LATER = [
    (re.compile(r"\bmyself\b", re.I), "themselves"),
    (re.compile(r"\bmine\b", re.I), "theirs"),
    (re.compile(r"\bmy\b", re.I), "their"),
    (re.compile(r"\bme\b", re.I), "them"),
    (re.compile(r"\bI['’]m\b"), "they are"),
    (re.compile(r"\bI['’]ve\b"), "they have"),
    (re.compile(r"\bI\b"), "they"),
]


def _third_person_verb(verb: str) -> str:
    """The verb after "I", as it reads after "The user": a past form as it is, else its -s form."""
    lower = verb.lower()
    if lower.endswith("ed") or lower in _IRREGULAR_PAST:
        return lower
    if lower in _IRREGULAR_PRESENT:
        return _IRREGULAR_PRESENT[lower]
    if re.search(r"(s|sh|ch|x|z|o)$", lower):
        return lower + "es"
    if re.search(r"[^aeiou]y$", lower):
        return lower[:-1] + "ies"
    return lower + "s"


def _rest(text: str) -> str:
    for pattern, replacement in _LATER:
        text = pattern.sub(replacement, text)
    return text


def third_person(fact: str) -> str:
    """`fact` about "the user" when it speaks as "I" or "my …", or asks for replies to be a
    certain way from now on (`_wished`); any other fact as it is."""
    text = fact.strip()
    wished = _wished(text)
    if wished is not None:
        return wished
    match = _WITH_SOMEONE.match(text)
    if match:  # a plural subject: the verb after it stays as it is
        return f"The user and their {match.group(1)}" + _rest(text[match.end() :])
    for pattern, replacement in _FIXED_OPENINGS:
        match = pattern.match(text)
        if match and (match.end() == len(text) or not text[match.end()].isalnum()):
            opening = replacement or "The user" + match.group(0)[1:]
            return opening + _rest(text[match.end() :])
    match = _SUBJECT.match(text)
    if match is None:
        return fact
    adverb, verb = match.group(1), _third_person_verb(match.group(2))
    opening = "The user " + (f"{adverb.lower()} " if adverb else "") + verb
    return opening + _rest(text[match.end() :])


# A wish copied as the user put it to the assistant: "Please always answer in British English."
# (a keyless trial lost it as not about the user), "Keep your answers short.".
_ASKED = re.compile(r"(?:(?:please|kindly)[\s,]+)?(?P<dont>(?:don['’]t|do not)\s+)?", re.I)
_LASTING_OPENING = re.compile(r"(?:always|never|keep)\b", re.I)


def _wished(text: str) -> str | None:
    """ "The user wants you to …" for a request about replies put to the assistant that asks for
    good (opening with "please", "always", "never" or "keep"), else None."""
    asked = _ASKED.match(text)  # every part is optional: None only to the type checker
    opening, dont = (asked.end(), asked["dont"]) if asked else (0, None)
    rest = text[opening:]
    if not rest or (opening == 0 and not _LASTING_OPENING.match(rest)):
        return None
    wish = f"The user wants you {'not ' if dont else ''}to {rest[0].lower()}{_rest(rest[1:])}"
    return wish if is_reply_wish(wish) else None


# "The user's name is Luc Martin.": a name of words that start with a letter.
_USERS_NAME = re.compile(
    r"the user['’]s (?:first |full )?name is (?P<name>[^\W\d_][\w'’-]*(?: [^\W\d_][\w'’-]*)*)\.?",
    re.I,
)


def users_name(fact: str) -> str | None:
    """The name a fact gives the user ("The user's name is Luc Martin." → "Luc Martin"); None
    for any other fact."""
    match = _USERS_NAME.fullmatch(fact.strip())
    return match.group("name") if match else None


def named_as_user(fact: str, names: list[str]) -> str:
    """`fact` told of "the user" where it names the user by one of their `names` or its first
    word as the subject of a sentence or clause ("Luc Martin's cats are called Tom." → "The
    user's cats are called Tom."; "Mira turns 7, and Priya is planning her party." → "…, and the
    user is planning her party."); not elsewhere ("The user's son is named Luc.")."""
    text = fact.strip()
    forms = {form for name in names for form in (name, name.split()[0])}
    for form in sorted(forms, key=len, reverse=True):  # "Luc Martin" before "Luc"
        text = re.sub(
            rf"(?:\A|(?<=\band )|(?<=, )){re.escape(form)}(?P<s>['’]s)?\b(?!['’-])",
            lambda named: "the user" + (named["s"] or ""),
            text,
        )
    if text == fact.strip():
        return fact
    return text[0].upper() + text[1:]


# Someone the user names with what they are to them: "my daughter Mira", "our dog Biscuit".
# Not "my name is Priya" nor "my friend named Jo": the words between are what the person is.
_RELATION = r"\b(?:[Mm]y|[Oo]ur)\s+(?P<relation>(?:[a-z]+\s+){0,2}[a-z]+),?\s+"
_NOT_A_RELATION = frozenset(
    {"is", "was", "named", "called", "and", "or", "the", "a", "an", "who", "that", "with", "of"}
)


def named_relative(fact: str, message: str) -> str:
    """`fact` about the user's relative, friend or pet when it opens with the name of one the
    user's `message` calls "my daughter Mira" ("Mira turns 7 on January 14." → "The user's
    daughter Mira turns 7 on January 14."): the local model wrote it so and it was refused as not
    about the user. Any other fact as it is."""
    text = fact.strip()
    opening = re.match(r"[^\W\d_][\w-]*", text)
    if opening is None or not opening[0][0].isupper():
        return fact
    told = re.search(rf"{_RELATION}{re.escape(opening[0])}\b", message)
    if told is None or _NOT_A_RELATION & set(told["relation"].split()):
        return fact
    return f"The user's {' '.join(told['relation'].split())} {text}"

"""The evidence check: does what the search found answer every part of the question?

The `utility` model reads the question, its context and the numbered sources and returns a reason
and a yes/no verdict as JSON. Strict by instruction: anything only implied or missing is "no". A
malformed verdict or a failed call is logged and counts as "yes" for this round, so the user still
gets an answer rather than an error.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from core.model_json import json_object_in
from core.prompts import evidence_check_request

log = logging.getLogger("resolveai.web")


@dataclass(frozen=True)
class Verdict:
    enough: bool
    reason: str
    checked: bool  # False when the check itself failed (and the verdict is the "yes" default)
    seconds: float


def parse_verdict(text: str) -> tuple[bool, str] | None:
    """(enough, reason) from the judge's reply, or None when it is not the JSON asked for."""
    data = json_object_in(text)
    if data is None:
        return None
    enough = data.get("enough")
    if isinstance(enough, str):
        enough = {"yes": True, "no": False}.get(enough.strip().lower())
    if not isinstance(enough, bool):
        return None
    return enough, str(data.get("reason") or "").strip()


async def check_evidence(
    router: Any, question: str, context: str, sources: str, metadata: dict[str, Any]
) -> Verdict:
    started = time.monotonic()
    try:
        response = await router.acompletion(
            model="utility",
            messages=evidence_check_request(question, context, sources),
            temperature=0,
            max_tokens=200,
            metadata=metadata,
        )
        parsed = parse_verdict(response.choices[0].message.content or "")
    except Exception as error:
        log.warning(
            "Web: evidence check failed (%s: %s); answering anyway", type(error).__name__, error
        )
        return Verdict(True, "the evidence check failed", False, time.monotonic() - started)
    if parsed is None:
        log.warning("Web: evidence check gave no usable verdict; answering anyway")
        return Verdict(
            True, "the evidence check gave no usable verdict", False, time.monotonic() - started
        )
    return Verdict(parsed[0], parsed[1], True, time.monotonic() - started)

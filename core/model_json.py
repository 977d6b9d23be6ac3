"""Reading the JSON object a model was asked for out of its reply.

Constrained models give the JSON alone; others wrap it in words or a code fence, so the outermost
`{...}` is taken. Every caller that asks a model for a JSON object reads its answer here.
"""

from __future__ import annotations

import json
import re
from typing import Any

_JSON_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


def json_object_in(text: str | None) -> dict[str, Any] | None:
    """The JSON object in a model's reply, or None when there is none (no braces, invalid JSON,
    or JSON that is not an object)."""
    match = _JSON_OBJECT.search(text or "")
    if not match:
        return None
    try:
        data = json.loads(match.group(0))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None

"""Which deployment answered a model call, and its name as a person reads it.

The Router tries a role's deployments and then its fallbacks; the response it returns names the
deployment that answered by its id (`_hidden_params["model_id"]`, set by LiteLLM on every
response, streamed ones too). `answered_by` turns that into the deployment's LiteLLM model
("local/qwen2.5-coder-1.5b-instruct", "groq/openai/gpt-oss-120b") and its group ("chat", or the
fallback's), and `friendly_name` into what is shown under a reply ("Local model (Qwen2.5-Coder
1.5B)", "gpt-oss-120b").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

LOCAL_PREFIX = "local/"
# Parts of a model's file name that say how it was trained or packed, not which model it is.
PACKING_WORDS = {"instruct", "chat", "it", "gguf", "q4", "q4_k_m", "q5_k_m", "q8_0", "f16"}
SIZE = re.compile(r"^\d+(\.\d+)?[bm]$", re.IGNORECASE)


@dataclass(frozen=True)
class Answered:
    """The deployment that answered: its LiteLLM model and the group it belongs to."""

    model: str
    group: str

    @property
    def name(self) -> str:
        return friendly_name(self.model)

    @property
    def local(self) -> bool:
        return self.model.startswith(LOCAL_PREFIX)


def answered_by(router: Any, response: Any) -> Answered | None:
    """The deployment behind a Router response (streamed or not); None if it does not say."""
    hidden = getattr(response, "_hidden_params", None) or {}
    model_id = hidden.get("model_id")
    if model_id:
        deployment = router.get_deployment(model_id=model_id)
        if deployment is not None:
            return Answered(deployment.litellm_params.model, deployment.model_name)
    return None


def friendly_name(model: str | None) -> str | None:
    """ "local/qwen2.5-coder-1.5b-instruct" → "Local model (Qwen2.5-Coder 1.5B)"; a hosted model
    is named by its last part ("groq/openai/gpt-oss-120b" → "gpt-oss-120b"), as its provider
    names it."""
    if not model:
        return None
    last = model.rsplit("/", 1)[-1]
    if not model.startswith(LOCAL_PREFIX):
        return last
    words = [w for w in last.split("-") if w and w.lower() not in PACKING_WORDS]
    sizes = [w.upper() for w in words if SIZE.match(w)]
    family = "-".join(_capitalised(w) for w in words if not SIZE.match(w))
    described = " ".join(part for part in (family, *sizes) if part)
    return f"Local model ({described})" if described else "Local model"


def _capitalised(word: str) -> str:
    return word[:1].upper() + word[1:]

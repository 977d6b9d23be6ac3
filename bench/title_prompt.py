"""How much of a chat a title call should read: seconds per title on the configured `utility`
model (the local model without keys) with the question and reply cut at two lengths, same run.

    python -m bench.title_prompt [--results evals/results/chat-replies.json] [--chars 600,2000]
                                 [--min-reply 1200]

The chats are the replies of the last `python -m evals chat-replies` run that are at least
`--min-reply` characters long (stories, essays, plans: the long first replies a title call reads).
They are split into two halves, and each length titles each half once, in an order where no
prompt is read twice, so the model's prompt cache never serves one: the first length on half A,
the second on half B, then the other way round. For each: seconds per title, and how many titles
chat/titles.py `is_about` keeps. chat/titles.py cuts at `PROMPT_CHARS`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from chat.titles import MAX_TOKENS, clean_title, is_about
from core.config import load_settings
from core.llm_router import build_router, plan_models
from core.prompts import title_request

DEFAULT_RESULTS = Path("evals/results/chat-replies.json")


async def title_half(
    router: Any, chats: list[dict[str, Any]], chars: int, label: str
) -> tuple[float, int, list[str]]:
    """Seconds per title, titles kept, the titles. Each question opens with `label`, so no two
    prompts of the run share more than the instructions."""
    started = time.perf_counter()
    titles = []
    for chat in chats:
        question = f"({label}) {chat['message']}"
        response = await router.acompletion(
            model="utility",
            messages=title_request(question[:chars], chat["reply"][:chars]),
            max_tokens=MAX_TOKENS,
        )
        titles.append(clean_title(response.choices[0].message.content or ""))
    seconds = (time.perf_counter() - started) / len(chats)
    kept = sum(is_about(t, c["message"], c["reply"]) for t, c in zip(titles, chats, strict=True))
    return seconds, kept, titles


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--chars", default="600,2000", help="two lengths, comma-separated")
    parser.add_argument("--min-reply", type=int, default=1200)
    args = parser.parse_args()
    first, second = (int(n) for n in args.chars.split(","))
    replies = json.loads(args.results.read_text())["results"]["replies"]
    chats = [r for r in replies if len(r["reply"]) >= args.min_reply]
    if len(chats) < 2:
        raise SystemExit(f"Fewer than 2 replies of {args.min_reply}+ characters in {args.results}")
    halves = {"A": chats[0::2], "B": chats[1::2]}
    settings = load_settings()
    plan = plan_models(settings)
    router = build_router(settings, plan)
    # The instructions read once before timing, as the server's warm-up would have.
    await router.acompletion(model="utility", messages=title_request("Hi", "Hello"), max_tokens=5)
    print(f"{len(chats)} chats; model: {plan.describe('utility')}")
    print("| characters | half | seconds per title | kept by is_about | titles |")
    print("| ---: | --- | ---: | ---: | --- |")
    for chars, half in ((first, "A"), (second, "B"), (second, "A"), (first, "B")):
        seconds, kept, titles = await title_half(router, halves[half], chars, f"{half}{chars}")
        shown = "; ".join(titles)
        print(f"| {chars} | {half} | {seconds:.2f} | {kept}/{len(titles)} | {shown} |")


if __name__ == "__main__":
    asyncio.run(main())

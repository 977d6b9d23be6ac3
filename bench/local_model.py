"""The local model (llama.cpp, core/local_llm.py): load time, time to first token and tokens/s for a
first turn and a follow-up turn in the same chat, at the app's real prompt size.

    python -m bench.local_model [--runs 2] [--max-tokens 64]

The prompt is the app's own: the system message from `core.prompts.chat_instructions`, the user
message through `core.prompts.user_turn`, and the function schemas of every chat tool
(`chat.tools.tool_schemas()`: save_memory, retrieve_memory, web_search), rendered by the GGUF's chat
template as the provider does. A round, repeated --runs times (medians shown):

1. first turn through `LocalLlamaProvider` with empty caches (the whole prompt is read);
2. a utility call in between (the app's summary prompt, `core.prompts.summary_request`): it replaces
   the live KV cache, as the summary/title calls do in a real chat;
3. the follow-up turn (first turn + its reply + a new question): the provider restores the first
   turn's prefix from its RAM prompt cache and reads only the new suffix.

Baselines, measured in the same run on the same loaded model: llama-cpp-python's own
`create_completion` on the very prompts of steps 1 and 3 with no cache at all (KV cache reset, no
RAM cache), i.e. what the follow-up would cost without prefix reuse, and what the provider adds on
top of raw llama.cpp. Greedy decoding (temperature 0) so runs generate the same text. Weights come
from the app's data folder (assembled there on first use) or LOCAL_MODEL_PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chat.tools import tool_schemas
from core.config import Settings, get_settings
from core.inprocess_provider import TextDelta
from core.local_llm import PROMPT_CACHE_BYTES, LocalLlamaProvider, _template_messages
from core.model_weights import ensure_local_model
from core.prompts import chat_instructions, summary_request, user_turn

FIRST_QUESTION = "How do I read an environment variable in Python, with a default value?"
FOLLOW_UP = "Thanks. And how do I turn it into an int or a boolean flag safely?"


@dataclass
class Turn:
    """One measured generation."""

    prompt_tokens: int
    reused_tokens: int
    first_token_s: float
    completion_tokens: int
    tokens_per_s: float


async def provider_turn(
    provider: LocalLlamaProvider, messages: list[dict[str, Any]], params: dict[str, Any]
) -> tuple[Turn, str]:
    """A generation through the provider (as LiteLLM calls it); its stats and text."""
    text = []
    async for event in provider.generate("bench", messages, params):
        if isinstance(event, TextDelta):
            text.append(event.text)
    stats = provider.last_stats
    assert stats is not None
    turn = Turn(
        stats.prompt_tokens,
        stats.reused_tokens,
        stats.first_token_s,
        stats.completion_tokens,
        stats.tokens_per_s,
    )
    return turn, "".join(text)


def raw_turn(
    provider: LocalLlamaProvider, messages: list[dict[str, Any]], params: dict[str, Any]
) -> Turn:
    """llama-cpp-python's create_completion on the same prompt, KV cache reset and no RAM cache."""
    loaded = provider._loaded
    assert loaded is not None
    llm = loaded.llm
    prompt = loaded.formatter(messages=_template_messages(messages), tools=params.get("tools"))
    tokens = llm.tokenize(
        prompt.prompt.encode("utf-8"), add_bos=llm._model.add_bos_token(), special=True
    )
    # The model lock: the provider's worker may still be saving the last prompt's state.
    with provider._model_lock:
        cache, llm.cache = llm.cache, None
        llm.reset()
        started = time.monotonic()
        first_at: float | None = None
        pieces = 0
        try:
            for chunk in llm.create_completion(
                tokens,
                stream=True,
                max_tokens=params["max_tokens"],
                temperature=0.0,
                stop=loaded.stop,
            ):
                if chunk["choices"][0]["text"]:  # type: ignore[index]
                    pieces += 1
                    if first_at is None:
                        first_at = time.monotonic()
        finally:
            llm.cache = cache
        ended = time.monotonic()
    first = (first_at or ended) - started
    rate = (pieces - 1) / (ended - first_at) if first_at and pieces > 1 else 0.0
    return Turn(len(tokens), 0, first, pieces, rate)


def clear_caches(provider: LocalLlamaProvider) -> None:
    """Forget every cached prompt: the next turn starts cold."""
    import llama_cpp

    loaded = provider._loaded
    assert loaded is not None
    with provider._model_lock:
        loaded.llm.reset()
        loaded.llm.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=PROMPT_CACHE_BYTES))


async def run(settings: Settings, runs: int, max_tokens: int) -> None:
    started = time.monotonic()
    path = ensure_local_model(settings)
    weights_s = time.monotonic() - started
    provider = LocalLlamaProvider(settings)
    started = time.monotonic()
    await provider.preload()
    load_s = time.monotonic() - started

    system = chat_instructions(datetime.now(UTC), None)
    tools = tool_schemas()
    first = [
        {"role": "system", "content": system},
        {"role": "user", "content": user_turn(FIRST_QUESTION, use_web=False)},
    ]
    params = {"tools": tools, "max_tokens": max_tokens, "temperature": 0.0}
    rows: dict[str, list[Turn]] = {}
    for _ in range(runs):
        clear_caches(provider)
        rows.setdefault("raw llama.cpp, first-turn prompt, no cache (baseline)", []).append(
            await asyncio.to_thread(raw_turn, provider, first, params)
        )
        clear_caches(provider)
        turn, reply = await provider_turn(provider, first, params)
        rows.setdefault("first turn (provider, empty caches)", []).append(turn)
        follow = [
            *first,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": user_turn(FOLLOW_UP, use_web=False)},
        ]
        utility = summary_request(None, [("user", FIRST_QUESTION), ("assistant", reply)], 120)
        turn, _ = await provider_turn(provider, utility, {"max_tokens": 32, "temperature": 0.0})
        rows.setdefault("utility call in between (summary prompt)", []).append(turn)
        turn, _ = await provider_turn(provider, follow, params)
        rows.setdefault("follow-up turn (provider, prefix from RAM cache)", []).append(turn)
        rows.setdefault("raw llama.cpp, follow-up prompt, no cache (baseline)", []).append(
            await asyncio.to_thread(raw_turn, provider, follow, params)
        )
    provider.close()

    print(
        f"Local model {provider.describe()}, weights {path.name}: ready in {weights_s:.1f} s,"
        f" loaded in {load_s:.1f} s, context {settings.local_model_context} tokens. Prompt: the"
        f" app's instructions ({len(system)} characters) and {len(tools)} tool schemas. Median of"
        f" {runs} rounds, greedy, at most {max_tokens} tokens per reply.\n"
    )
    cold = statistics.median(t.first_token_s for t in rows["first turn (provider, empty caches)"])
    print("| generation | prompt tokens | reused | first token | vs cold first turn | tokens/s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, turns in rows.items():
        first_token = statistics.median(t.first_token_s for t in turns)
        print(
            f"| {name} | {statistics.median(t.prompt_tokens for t in turns):.0f}"
            f" | {statistics.median(t.reused_tokens for t in turns):.0f}"
            f" | {first_token:.2f} s | {first_token / cold:.2f}×"
            f" | {statistics.median(t.tokens_per_s for t in turns):.1f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    asyncio.run(run(get_settings(), args.runs, args.max_tokens))


if __name__ == "__main__":
    main()

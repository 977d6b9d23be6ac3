"""The local model, previous design against the new one in one run: start time, time to first
token, prompt and decode speed, prompt-cache reuse and memory, on the app's real prompt.

    python -m bench.local_model [--runs 2] [--max-tokens 48] [--threads 1,2] [--previous-threads N]

Designs (both on the same GGUF, greedy decoding, at most --max-tokens tokens a reply):

- **previous**: llama.cpp inside the web server process, `bench/inprocess_llama.py` (what
  `core/local_llm.py` was), with all cores (its default; `--previous-threads` to compare the
  designs at one thread count) and a `LlamaRAMCache` of earlier prompts;
- **new**: the model in its own process (`core.local_model.serve`: llama-cpp-python's server),
  started and reached as the app does, through `core.local_model.provider.LocalModelProvider`
  (its queue, its prompt budget with the server's tokenizer, HTTP streaming), once per
  `--threads` value (LOCAL_MODEL_THREADS; default: the app's, all cores but one).

The bench process stands for the web server: it calls `provider.generate(...)` as LiteLLM would.
The new design's process uses a scratch data folder, so it never shares an app's running model.

A session, for each design and thread count in turn (previous, new@1, new@2, previous, ... for
--runs rounds: machine load hits every design alike; medians shown):

1. start: load the model (previous) or start its process until it answers (new);
2. first turn of a new chat, cold: the app's real prompt with `tools: false` (core/models.yaml),
   i.e. the system message `core.prompts.chat_instructions(memory="recall")` and the user turn
   `core.prompts.user_turn`, no tool schemas;
3. a utility call in between: the memory extraction that follows every reply
   (`core.prompts.memory_extraction_request`, held to the JSON grammar of
   `chat.memory_extraction.RESPONSE_FORMAT`); its prompt replaces the model's live KV cache;
4. the follow-up turn (first turn + its reply + a new question): the RAM prompt cache restores the
   first turn's prefix, so only the new suffix is read;
5. the first turn of another new chat in the same hour: the instructions are in the prompt cache
   already, as `chat/warm_up.py` arranges after the server starts, so only the new question is
   read (step 2 is the case of a message sent before the warm-up is done, or after a restart);
6. the same first turn with the tool schemas the app offered before `tools: false` (instructions
   with `memory="tools"`, `chat.tools.tool_schemas()`), in a chat dated a day later so that only
   the prompt's first line is cached.

Figures: time to first token (TTFT) from the call to the first text piece the model wrote, as the
caller sees it (the new design's includes its queue, its token counting and HTTP); prefill
tokens/s = prompt tokens ÷ TTFT; decode tokens/s after the first piece. Cache reuse of the
follow-up: exact for the previous design (its own counters). llama-cpp-python's server exposes
none (only its verbose log says "cache hit" and how many prompt tokens it evaluated), so for the
new design it is inferred: tokens read ≈ the CPU time the model's process spent until the first
token ÷ the CPU time per token of the session's cold first turn. CPU time, not wall time, because
on a shared machine the wall time of a busy period swings far more. The same estimate for the
previous design is printed next to its exact count, as a check. Prompt tokens are counted with the
GGUF's chat template and tokenizer. Memory: RSS added to this process (the web server's) from
before the start to the most after any generation, and the most RSS of the model's process
(psutil). The previous design's load time leaves out importing llama_cpp, done once before
(printed): the old server paid it on first use too.

Targets (issue #12, quiet machine, 2 cores): first reply of a new chat TTFT ≤ 15 s, follow-up ≤ 3 s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil

from bench.inprocess_llama import LocalLlamaProvider, _template_messages
from chat.memory_extraction import RESPONSE_FORMAT
from chat.tools import tool_schemas
from core.config import PROJECT_ROOT, Settings, get_settings
from core.custom_provider import CustomProvider, ProviderEvent, TextDelta
from core.grounding import numbered_sentences
from core.local_model.cpu_backend import load_cpu_backend
from core.local_model.process import default_threads
from core.local_model.provider import LocalModelProvider
from core.local_model.weights import ensure_local_model
from core.model_progress import progress_listener
from core.prompts import chat_instructions, memory_extraction_request, user_turn

FIRST_QUESTION = "How do I read an environment variable in Python, with a default value?"
FOLLOW_UP = "Thanks. And how do I turn it into an int or a boolean flag safely?"
OTHER_CHAT = "What is the difference between a list and a tuple in Python?"
PREVIOUS = "previous"
# Generous: on a loaded 2-core machine a cold 1,000-token prompt on one thread takes minutes, and
# a timeout would lose the whole session.
CALL_DEADLINE_SECONDS = 1800.0
MIB = 2**20


@dataclass
class Generation:
    """One measured call."""

    prompt_tokens: int
    reused_tokens: int | None  # exact, when the design tells (the previous one does)
    first_token_s: float
    pieces: int  # text pieces the model wrote (about one a token)
    decode_tokens_per_s: float
    reply: str
    # CPU time the model's process spent from the call to the first piece (all its threads)
    first_token_cpu_s: float
    before_request_s: float | None = None  # new design: queue + prompt budget, until it is sent


@dataclass
class Session:
    """One design, start to close, in one round."""

    design: str
    threads: int
    start_s: float
    turns: dict[str, Generation] = field(default_factory=dict)
    web_rss_added: int = 0  # bytes
    model_rss: int | None = None  # bytes; None: the model lives in the web process


class PromptCounter:
    """Prompt tokens of a chat request as both designs render it: the GGUF's chat template and
    tokenizer (a vocabulary-only llama.cpp load, ~50 MB, before anything is measured)."""

    def __init__(self, model: Path) -> None:
        import llama_cpp
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        load_cpu_backend()
        self.llm = llama_cpp.Llama(model_path=str(model), vocab_only=True, verbose=False)
        eos = self.llm._model.token_get_text(self.llm.token_eos())
        self.formatter = Jinja2ChatFormatter(
            template=self.llm.metadata["tokenizer.chat_template"], eos_token=eos, bos_token=""
        )

    def count(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        prompt = self.formatter(messages=_template_messages(messages), tools=tools).prompt
        return len(self.llm.tokenize(prompt.encode(), add_bos=False, special=True))


class PieceClock:
    """When the model wrote its first and last text piece, how many, and the CPU time the model's
    process had used by the first."""

    def __init__(self, model: psutil.Process) -> None:
        self.model = model
        self.cpu_at_start = _cpu(model)
        self.cpu_at_first = 0.0
        self.first: float | None = None
        self.last: float | None = None
        self.pieces = 0

    def piece(self) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = now
            self.cpu_at_first = _cpu(self.model)
        self.last = now
        self.pieces += 1


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


class TimedInProcess(LocalLlamaProvider):
    """The previous design, timed where its worker thread hands over each piece: its stream
    filter may hold text back (a possible tool call), which would hide when the model wrote it."""

    clock: PieceClock | None = None
    attempts = 0

    def _work(self, messages: Any, params: Any, tools: Any, stop: Any, emit: Any) -> None:
        self.attempts += 1  # more than one: it asked again without tools (an empty reply)
        clock = self.clock

        def timed(kind: str, value: Any = None) -> None:
            if kind == "text" and clock is not None:
                clock.piece()
            emit(kind, value)

        super()._work(messages, params, tools, stop, timed)


async def timed_call(
    provider: CustomProvider,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
    model: psutil.Process,
) -> tuple[PieceClock, str, float, float | None]:
    """Run one generation (the model runs in `model`); its piece clock, text, start time and
    when the request was sent."""
    clock = PieceClock(model)
    sent: list[float] = []

    def progress(text: str) -> None:
        if text.startswith("Reading") and not sent:
            sent.append(time.monotonic())

    if isinstance(provider, TimedInProcess):
        provider.clock = clock
    token = progress_listener.set(progress)
    text = []
    started = time.monotonic()
    try:
        events: AsyncIterator[ProviderEvent] = provider.generate("bench", messages, params)
        async for event in events:
            if isinstance(event, TextDelta):
                text.append(event.text)
                if not isinstance(provider, TimedInProcess):
                    clock.piece()
    finally:
        progress_listener.reset(token)
    return clock, "".join(text), started, sent[0] if sent else None


async def measure(
    provider: CustomProvider,
    model: psutil.Process,
    counter: PromptCounter,
    messages: list[dict[str, Any]],
    params: dict[str, Any],
) -> Generation:
    clock, reply, started, sent = await timed_call(provider, messages, params, model)
    if clock.first is None or clock.last is None:
        raise RuntimeError(f"{type(provider).__name__}: no text in the reply")
    decode = (clock.pieces - 1) / (clock.last - clock.first) if clock.last > clock.first else 0.0
    tools = params.get("tools") if "response_format" not in params else None
    reused = None
    prompt = counter.count(messages, tools)
    if isinstance(provider, TimedInProcess) and provider.last_stats is not None:
        prompt, reused = provider.last_stats.prompt_tokens, provider.last_stats.reused_tokens
    return Generation(
        prompt_tokens=prompt,
        reused_tokens=reused,
        first_token_s=clock.first - started,
        pieces=clock.pieces,
        decode_tokens_per_s=decode,
        reply=reply,
        first_token_cpu_s=clock.cpu_at_first - clock.cpu_at_start,
        before_request_s=sent - started if sent else None,
    )


def chat_prompt(
    now: datetime, question: str, memory: str = "recall", earlier: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """What `chat.nodes.build_prompt` sends for a chat with no summary and no recalled memory."""
    return [
        {"role": "system", "content": chat_instructions(now, None, memory=memory)},
        *earlier,
        {"role": "user", "content": user_turn(question, use_web=False)},
    ]


async def session(
    design: str, threads: int, settings: Settings, counter: PromptCounter, max_tokens: int
) -> Session:
    """Start a design, run the five generations, measure memory, close it."""
    gc.collect()
    me = psutil.Process()
    rss_before = me.memory_info().rss
    provider: CustomProvider
    if design == PREVIOUS:
        # threads 0: its own default (all cores)
        provider = TimedInProcess(
            settings.model_copy(update={"local_model_threads": threads or None})
        )
        threads = provider.threads
    else:
        provider = LocalModelProvider(settings.model_copy(update={"local_model_threads": threads}))
    try:
        started = time.monotonic()
        if isinstance(provider, TimedInProcess):
            await provider.preload()
            model = me
        else:
            assert isinstance(provider, LocalModelProvider) and provider.process is not None
            model = psutil.Process((await provider.process.endpoint()).pid)
        result = Session(design, threads, time.monotonic() - started)
        rss: list[int] = []
        model_rss: list[int] = []

        async def generation(name: str, messages: list[dict[str, Any]], **extra: Any) -> None:
            params = {"max_tokens": max_tokens, "temperature": 0.0, **extra}
            result.turns[name] = await measure(provider, model, counter, messages, params)
            rss.append(me.memory_info().rss)
            if model is not me:
                model_rss.append(model.memory_info().rss)

        now = datetime.now(UTC)
        first = chat_prompt(now, FIRST_QUESTION)
        await generation("first", first)
        extraction = memory_extraction_request(numbered_sentences(FIRST_QUESTION), None, [], now)
        await generation("utility", extraction, response_format=RESPONSE_FORMAT)
        reply = {"role": "assistant", "content": result.turns["first"].reply}
        await generation("follow-up", chat_prompt(now, FOLLOW_UP, earlier=[first[1], reply]))
        await generation("warm", chat_prompt(now, OTHER_CHAT))
        tomorrow = now + timedelta(days=1)
        tools = tool_schemas()
        await generation("tools", chat_prompt(tomorrow, FIRST_QUESTION, "tools"), tools=tools)
        if isinstance(provider, TimedInProcess) and provider.attempts > len(result.turns):
            print("  note: the previous design asked again without tools (an empty reply)")
    finally:
        if isinstance(provider, LocalModelProvider) and provider._client is not None:
            await provider._client.close()
        provider.close()
    result.web_rss_added = max(rss) - rss_before
    result.model_rss = max(model_rss) if model_rss else None
    return result


# --- the table -----------------------------------------------------------------------------------


def inferred_reuse(one: Session, key: str = "first_token_cpu_s") -> float:
    """Follow-up prompt tokens that were not read: what the model's process spent until its first
    token (CPU time; or `first_token_s`, wall time), at the cold first turn's cost per token."""
    first, follow = one.turns["first"], one.turns["follow-up"]
    per_token = getattr(first, key) / first.prompt_tokens
    return max(follow.prompt_tokens - getattr(follow, key) / per_token, 0.0)


@dataclass
class Row:
    label: str
    value: Callable[[Session], float | None]
    unit: str
    digits: int = 1
    inferred_for_new: bool = False  # the new design's figure is an estimate (shown with ≈)


def rows() -> list[Row]:
    def turn(name: str, key: str) -> Callable[[Session], float]:
        return lambda s: getattr(s.turns[name], key)

    def prefill(name: str) -> Callable[[Session], float]:
        return lambda s: s.turns[name].prompt_tokens / s.turns[name].first_token_s

    def reused(s: Session) -> float:
        exact = s.turns["follow-up"].reused_tokens
        return exact if exact is not None else inferred_reuse(s)

    return [
        Row("load (previous) / start until it answers (new)", lambda s: s.start_s, "s"),
        Row("first turn, new chat, no tools: TTFT", turn("first", "first_token_s"), "s", digits=2),
        Row("  prefill (prompt ÷ TTFT)", prefill("first"), "tokens/s"),
        Row("  decode", turn("first", "decode_tokens_per_s"), "tokens/s"),
        Row(
            "utility call in between (memory extraction, JSON grammar): TTFT",
            turn("utility", "first_token_s"),
            "s",
            digits=2,
        ),
        Row("follow-up turn: TTFT", turn("follow-up", "first_token_s"), "s", digits=2),
        Row("  prompt tokens reused from the cache", reused, "tokens", 0, True),
        Row("  decode", turn("follow-up", "decode_tokens_per_s"), "tokens/s"),
        Row(
            "first turn of another new chat, instructions cached (as after the warm-up): TTFT",
            turn("warm", "first_token_s"),
            "s",
            digits=2,
        ),
        Row(
            "first turn with the tool schemas (tools: true): TTFT",
            turn("tools", "first_token_s"),
            "s",
            digits=2,
        ),
        Row("  prefill (prompt ÷ TTFT)", prefill("tools"), "tokens/s"),
        Row("web process: RSS added", lambda s: s.web_rss_added / MIB, "MiB", digits=0),
        Row(
            "model process: RSS",
            lambda s: None if s.model_rss is None else s.model_rss / MIB,
            "MiB",
            digits=0,
        ),
        Row("RSS in all", lambda s: (s.web_rss_added + (s.model_rss or 0)) / MIB, "MiB", digits=0),
    ]


def median_of(sessions: list[Session], value: Callable[[Session], float | None]) -> float | None:
    values = [v for v in map(value, sessions) if v is not None]
    return statistics.median(values) if values else None


def render(sessions: list[Session], threads: list[int], header: str) -> str:
    previous = [s for s in sessions if s.design == PREVIOUS]
    news = {t: [s for s in sessions if s.design != PREVIOUS and s.threads == t] for t in threads}
    old_threads = previous[0].threads
    columns = [f"previous: in-process, {old_threads} threads"]
    for t in threads:
        columns += [f"new: own process, {t} thread{'s' if t > 1 else ''}", "new ÷ previous"]
    lines = [header, "", "| | " + " | ".join(columns) + " |",
             "|---|" + "---:|" * len(columns)]  # fmt: skip
    for row in rows():
        base = median_of(previous, row.value)
        cells = [_cell(base, row)]
        for t in threads:
            value = median_of(news[t], row.value)
            cells.append(("≈" if row.inferred_for_new else "") + _cell(value, row))
            cells.append(f"{value / base:.2f}×" if value is not None and base else "")
        lines.append(f"| {row.label} ({row.unit}) | " + " | ".join(cells) + " |")
    turns = previous[0].turns
    lines.append("")
    lines.append(
        f"Prompt tokens: first turn {turns['first'].prompt_tokens}, memory extraction"
        f" {turns['utility'].prompt_tokens}, follow-up {turns['follow-up'].prompt_tokens}, another"
        f" chat's first turn {turns['warm'].prompt_tokens} ({turns['warm'].reused_tokens} cached"
        f" in the previous design), first turn with tool schemas {turns['tools'].prompt_tokens}."
    )
    by_cpu = median_of(previous, inferred_reuse)
    by_wall = median_of(previous, lambda s: inferred_reuse(s, "first_token_s"))
    exact = median_of(previous, lambda s: s.turns["follow-up"].reused_tokens)
    lines.append(
        "Follow-up cache reuse of the new design (≈): inferred from the model process's CPU time"
        f" to the first token; checked on the previous design: ≈{by_cpu:.0f} so inferred"
        f" (≈{by_wall:.0f} from the TTFT) against {exact:.0f} counted."
    )
    for t in threads:
        before = median_of(news[t], lambda s: s.turns["first"].before_request_s)
        if before is not None:
            lines.append(
                f"New design, {t} thread(s): {before:.2f} s of the first turn's TTFT pass before"
                " the request is sent (queue, prompt budget counted with the server's tokenizer)."
            )
    app = default_threads()
    for t in threads:
        first = median_of(news[t], lambda s: s.turns["first"].first_token_s)
        warm = median_of(news[t], lambda s: s.turns["warm"].first_token_s)
        follow = median_of(news[t], lambda s: s.turns["follow-up"].first_token_s)
        verdict = [
            f"first reply of a new chat {first:.1f} s cold, {warm:.1f} s after the warm-up"
            f" (target ≤ 15 s: {'met' if first <= 15 else 'missed'} cold)",
            f"follow-up {follow:.1f} s (target ≤ 3 s: {'met' if follow <= 3 else 'missed'})",
        ]
        default = " (the app's default)" if t == app else ""
        lines.append(f"Targets, new design, {t} thread(s){default}: " + ", ".join(verdict) + ".")
    return "\n".join(lines)


def _cell(value: float | None, row: Row) -> str:
    if value is None:
        return "—"
    return f"{value:,.{row.digits}f}"


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (
        " + working tree" if git("status", "--porcelain", "--untracked-files=no") else ""
    )


def _load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


async def run(
    settings: Settings, runs: int, max_tokens: int, threads: list[int], previous_threads: int
) -> None:
    model = ensure_local_model(settings)
    started = time.monotonic()
    import llama_cpp  # noqa: F401  (timed once: the previous design's load time leaves it out)

    import_s = time.monotonic() - started
    counter = PromptCounter(model)
    load_at_start = _load()
    sessions: list[Session] = []
    with tempfile.TemporaryDirectory(prefix="bench-local-model-") as scratch:
        base = settings.model_copy(
            update={
                "app_data_dir": Path(scratch),
                "local_model_path": model,
                "local_model_url": None,
                "model_call_deadline": CALL_DEADLINE_SECONDS,
            }
        )
        for round_ in range(1, runs + 1):
            for design, count in [(PREVIOUS, previous_threads)] + [("new", t) for t in threads]:
                began = time.monotonic()
                one = await session(design, count, base, counter, max_tokens)
                sessions.append(one)
                first = one.turns["first"].first_token_s
                print(
                    f"round {round_}/{runs}: {design}, {one.threads} thread(s): start"
                    f" {one.start_s:.1f} s, first token {first:.1f} s, follow-up"
                    f" {one.turns['follow-up'].first_token_s:.1f} s"
                    f" ({time.monotonic() - began:.0f} s in all; load {_load()})",
                    flush=True,
                )
    header = (
        f"Local model {model.name}, context {settings.local_model_context} tokens; commit"
        f" {_commit()}; {len(os.sched_getaffinity(0))} cores; load average (1/5/15 min)"
        f" {load_at_start} at the start, {_load()} at the end. Median of {runs} rounds, greedy,"
        f" at most {max_tokens} tokens a reply; `import llama_cpp` took {import_s:.2f} s"
        " (left out of the previous design's load)."
    )
    print()
    print(render(sessions, threads, header))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2, help="rounds (every design once a round)")
    parser.add_argument("--max-tokens", type=int, default=48, help="at most this many a reply")
    parser.add_argument(
        "--threads",
        default=str(default_threads()),
        help="LOCAL_MODEL_THREADS values for the new design, comma-separated"
        " (default: the app's, all cores but one)",
    )
    parser.add_argument(
        "--previous-threads",
        type=int,
        default=0,
        help="threads of the previous design (default 0: its own default, all cores)",
    )
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",") if t.strip()]
    settings = get_settings()
    asyncio.run(run(settings, args.runs, args.max_tokens, threads, args.previous_threads))


if __name__ == "__main__":
    main()

"""The previous design of the local model, kept only as `bench/local_model.py`'s baseline.

Until issue #12 ResolveAI ran llama.cpp inside the web server process, as `core/local_llm.py`
(this file, moved here with only its imports and the module names below updated); the app now
runs the model in a process of its own (`core/local_model/`), reached through
`core.local_model.provider.LocalModelProvider`. Nothing outside `bench/` may import this: it
exists so that the benchmark measures the old design against the new one in the same run. What
follows is its original description.

It is the model of last resort (no API key, provider down) and must never stall the server, so:

- nothing is loaded until the first call; the weights are assembled/verified by
  `core.local_model.weights`;
- loading and generating run in a worker thread; tokens cross to the event loop through an
  `asyncio.Queue` fed with `loop.call_soon_threadsafe`;
- one generation at a time per process (the model and its KV cache are one compute resource);
- when the consumer stops iterating (client gone, task cancelled), a stop flag checked between
  prompt batches and after every sampled token ends the work within about one token.

The prompt is the GGUF's own chat template, given the tools, so Qwen writes `<tool_call>` tags
that `chat.tool_markup` turns into structured calls. A call with a JSON `response_format` (OpenAI's
`json_schema` or `json_object`) is sampled under a llama.cpp grammar made from the schema, so the
reply is JSON of that shape by construction, unless `max_tokens` cuts it short; no tools are
offered then. llama.cpp checks the whole 152k-token vocabulary against the grammar for every
sampled token, single-threaded: about 25 ms per token on top of ~100-140 ms of decoding on two
cores, 40-50 ms inside a JSON string.

Prompt reuse across turns: llama-cpp-python keeps the KV cache of the last prompt and only
evaluates the new suffix; a `LlamaRAMCache` keeps the states of earlier prompts too, so a chat turn
that follows a utility call (a different prompt that replaced the KV cache) still restores its
conversation's prefix instead of re-reading it all.

`python -m bench.local_model` measures load time, time to first token, tokens/s and memory of a
first and a follow-up turn at the app's real prompt size, against the same figures of the new
design.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chat.tool_markup import ToolCallStreamFilter
from core.config import Settings
from core.custom_provider import (
    CustomProvider,
    ProviderEvent,
    ProviderFailure,
    TextDelta,
    ToolCallRequest,
    UsageReport,
)
from core.errors import StartupError
from core.local_model.cpu_backend import NoCpuBackend, load_cpu_backend
from core.local_model.weights import ensure_local_model

if TYPE_CHECKING:
    from llama_cpp import Llama, LlamaGrammar
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

log = logging.getLogger("resolveai.models")

DEFAULT_MODEL_LABEL = "qwen2.5-coder-1.5b"
DEFAULT_TEMPERATURE = 0.2
# Saved prompt states (KV cache of ~28 KB per token for this model): room for several
# conversations' prefixes at a few thousand tokens each.
PROMPT_CACHE_BYTES = 768 * 1024 * 1024
# A prompt must leave at least this much room in the context for the reply.
MIN_REPLY_TOKENS = 16
# Evaluating the prompt in slices of this many tokens lets a stop request end it between slices.
PROMPT_SLICE = 128
# Grammars kept, one per schema. Converting a schema is quick (0.02-0.2 ms for the app's schemas)
# but pure Python under the GIL, on every call otherwise; the app uses a handful of fixed schemas
# (memory extraction, evidence check), so a small cache holds them all.
GRAMMAR_CACHE_SIZE = 32
# The `response_format` key meaning "any JSON object" (json_object without a schema).
ANY_JSON_OBJECT = ""


@dataclass
class GenerationStats:
    """Figures of the last generation (for logs and `python -m bench.local_model`)."""

    prompt_tokens: int
    reused_tokens: int  # prompt tokens restored from the KV/prompt cache instead of evaluated
    first_token_s: float  # from the start of prompt processing to the first text piece
    completion_tokens: int
    tokens_per_s: float  # generation speed after the first token


@dataclass
class _Loaded:
    llm: Llama
    formatter: Jinja2ChatFormatter
    stop: list[str]


class LocalLlamaProvider(CustomProvider):
    """Serves `local/<anything>` from one llama.cpp model in this process."""

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self.threads = settings.local_model_threads or len(os.sched_getaffinity(0))
        self._loaded: _Loaded | None = None
        self._load_error: str | None = None
        self._load_lock = threading.Lock()
        # One generation at a time: the model's KV cache is shared state.
        self._model_lock = threading.Lock()
        self._running: set[threading.Event] = set()  # stop flags of the generations under way
        self._grammars: OrderedDict[str, LlamaGrammar] = OrderedDict()  # schema text → grammar
        self._grammars_lock = threading.Lock()
        self.last_stats: GenerationStats | None = None

    @property
    def model_label(self) -> str:
        path = self.settings.local_model_path
        return path.stem if path is not None else DEFAULT_MODEL_LABEL

    def describe(self) -> str:
        return f"local {self.model_label} (llama.cpp, {self.threads} threads)"

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def close(self) -> None:
        """Free the model (waits for a running generation to notice its stop flag, briefly)."""
        with self._load_lock:
            loaded, self._loaded = self._loaded, None
        if loaded is None:
            return
        for stop in list(self._running):
            stop.set()
        if self._model_lock.acquire(timeout=10):
            try:
                loaded.llm.close()
            finally:
                self._model_lock.release()

    def grammar_for(self, response_format: Any) -> LlamaGrammar | None:
        """The grammar a reply must follow for `response_format` (None: free text), cached."""
        schema = _response_schema(response_format)
        if schema is None:
            return None
        with self._grammars_lock:
            grammar = self._grammars.get(schema)
            if grammar is not None:
                self._grammars.move_to_end(schema)
                return grammar
            grammar = _build_grammar(schema)
            self._grammars[schema] = grammar
            if len(self._grammars) > GRAMMAR_CACHE_SIZE:
                self._grammars.popitem(last=False)
            return grammar

    async def preload(self) -> None:
        """Load the model now (in a worker thread), e.g. in the background after start-up."""
        await asyncio.to_thread(self._ensure_loaded)

    async def generate(
        self,
        model: str,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        whole: bool = False,
    ) -> AsyncIterator[ProviderEvent]:
        # A reply held to a JSON grammar cannot hold a tool call, so no tools are offered.
        # (Read here too so that an unusable response_format fails before any work starts.)
        json_reply = _response_schema(params.get("response_format")) is not None
        tools = [] if json_reply else _offered_tools(params)
        answered = False
        async for event in self._generate_once(messages, params, tools):
            if isinstance(event, ToolCallRequest) or (
                isinstance(event, TextDelta) and event.text.strip()
            ):
                answered = True
            if isinstance(event, UsageReport) and tools and not answered:
                # With tools in its prompt this small model sometimes writes only an empty
                # `<tools></tools>`; asked again without them, it answers.
                log.info("Local model: empty reply with tools offered; asking again without tools")
                async for retry in self._generate_once(messages, params, []):
                    yield retry
                return
            yield event

    async def _generate_once(
        self, messages: list[dict[str, Any]], params: dict[str, Any], tools: list[dict[str, Any]]
    ) -> AsyncIterator[ProviderEvent]:
        tool_names = {
            tool["function"]["name"]
            for tool in tools
            if isinstance(tool, dict) and isinstance(tool.get("function"), dict)
        }
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stop = threading.Event()

        def emit(kind: str, value: Any = None) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (kind, value))
            except RuntimeError:  # the event loop is gone: nobody is listening any more
                stop.set()

        worker = threading.Thread(
            target=self._work,
            args=(messages, params, tools, stop, emit),
            name="local-llm",
            daemon=True,
        )
        self._running.add(stop)
        worker.start()
        filter_ = ToolCallStreamFilter(tool_names)
        try:
            while True:
                kind, value = await queue.get()
                if kind == "text":
                    shown = filter_.feed(value)
                    if shown:
                        yield TextDelta(shown)
                elif kind == "error":
                    raise value
                else:  # "done"
                    break
            rest, calls = filter_.finish()
            if rest:
                yield TextDelta(rest)
            for name, arguments in calls:
                yield ToolCallRequest(name=name, arguments=arguments)
            yield UsageReport(prompt_tokens=value[0], completion_tokens=value[1])
        finally:
            # Reached on normal end, error, `aclose()` and cancellation alike.
            stop.set()
            self._running.discard(stop)

    # --- worker thread ---------------------------------------------------------------------

    def _work(
        self,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        tools: list[dict[str, Any]],
        stop: threading.Event,
        emit: Callable[..., None],
    ) -> None:
        try:
            # Before taking the model lock: it needs no model (llama.cpp binds the grammar text to
            # the vocabulary when sampling starts), and a 400 for a bad format needs no wait.
            grammar = self.grammar_for(params.get("response_format"))
            loaded = self._ensure_loaded()
            with self._model_lock:
                if self._loaded is not loaded:
                    raise ProviderFailure("Local model: the model was closed")
                finished = not stop.is_set() and self._generate(
                    loaded, messages, params, tools, grammar, stop, emit
                )
            if not finished:
                # Usually nobody listens any more; if someone does (`close()`), they must not
                # take a cut-off reply for a whole one.
                emit("error", ProviderFailure("Local model: generation stopped"))
        except ProviderFailure as error:
            emit("error", error)
        except Exception as error:
            log.exception("Local model: generation failed")
            emit("error", ProviderFailure(f"Local model failed: {error}"))

    def _ensure_loaded(self) -> _Loaded:
        with self._load_lock:
            if self._loaded is not None:
                return self._loaded
            if self._load_error is not None:
                # Bad weights or a broken build do not fix themselves; fail fast until restart.
                raise ProviderFailure(self._load_error)
            try:
                self._loaded = self._load()
            except ProviderFailure as error:
                self._load_error = error.message
                raise
            return self._loaded

    def _load(self) -> _Loaded:
        try:
            path = ensure_local_model(self.settings)
        except StartupError as error:
            raise ProviderFailure(str(error)) from None
        try:
            import llama_cpp
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            load_cpu_backend()
        except (ImportError, NoCpuBackend) as error:
            raise ProviderFailure(f"Local model: llama-cpp-python is not usable: {error}") from None

        log.info(
            "Local model: loading %s (%d threads, context %d tokens)",
            _shown(path),
            self.threads,
            self.settings.local_model_context,
        )
        started = time.monotonic()
        try:
            llm = llama_cpp.Llama(
                model_path=str(path),
                n_ctx=self.settings.local_model_context,
                n_threads=self.threads,
                n_threads_batch=self.threads,
                verbose=False,
            )
        except Exception as error:
            raise ProviderFailure(
                f"Local model: llama.cpp could not load {path}: {error}"
            ) from None
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ProviderFailure(f"Local model: {path.name} has no chat template in its metadata")
        eos_id, bos_id = llm.token_eos(), llm.token_bos()
        eos = llm._model.token_get_text(eos_id) if eos_id != -1 else ""
        bos = llm._model.token_get_text(bos_id) if bos_id != -1 else ""
        formatter = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)
        # With logits_all=False llama-cpp-python never fills `scores` (sampling reads the logits
        # in llama.cpp), yet allocates n_batch × n_vocab floats (311 MB here) and copies them into
        # every saved prompt state. One row keeps every code path working without that cost.
        if not getattr(llm, "_logits_all", True):
            import numpy as np

            llm.scores = np.zeros((1, llm.n_vocab()), dtype=np.single)
        llm.set_cache(llama_cpp.LlamaRAMCache(capacity_bytes=PROMPT_CACHE_BYTES))
        # Free the model before interpreter teardown: llama-cpp-python's own finaliser fails
        # noisily once module globals are gone. A weak reference keeps the provider collectable.
        atexit.register(_close_at_exit, weakref.ref(self))
        log.info("Local model: loaded in %.1f s", time.monotonic() - started)
        return _Loaded(llm=llm, formatter=formatter, stop=[eos] if eos else [])

    def _generate(
        self,
        loaded: _Loaded,
        messages: list[dict[str, Any]],
        params: dict[str, Any],
        tools: list[dict[str, Any]],
        grammar: LlamaGrammar | None,
        stop: threading.Event,
        emit: Callable[..., None],
    ) -> bool:
        """Stream one reply through `emit`: "text" pieces, then "done" with the token counts.

        Returns False if a stop request ended it first (then "done" was not emitted).
        """
        import llama_cpp

        llm = loaded.llm
        try:
            prompt = loaded.formatter(messages=_template_messages(messages), tools=tools or None)
        except Exception as error:
            raise ProviderFailure(
                f"Local model: could not render the chat template: {error}", status_code=400
            ) from None
        tokens = llm.tokenize(
            prompt.prompt.encode("utf-8"), add_bos=llm._model.add_bos_token(), special=True
        )
        n_ctx = llm.n_ctx()
        if len(tokens) + MIN_REPLY_TOKENS > n_ctx:
            raise ProviderFailure(
                f"Local model: the conversation is {len(tokens)} tokens, more than its context "
                f"window of {n_ctx} tokens allows (LOCAL_MODEL_CONTEXT)",
                status_code=400,
            )

        started = time.monotonic()
        reused = self._prefill(llm, tokens, stop)
        if stop.is_set():
            return False

        sampled = 0

        def sampled_token(_ids: Any, _logits: Any) -> bool:
            # Called by llama-cpp-python after each sampled token (and once after the loop).
            nonlocal sampled
            sampled += 1
            return stop.is_set()

        stops = list(loaded.stop)
        if tools:
            # A small model sometimes goes on to invent the tool's answer; the call is complete.
            stops.append("<tool_response>")
        extra = params.get("stop")
        stops += [extra] if isinstance(extra, str) else list(extra or [])
        max_tokens = params.get("max_tokens") or params.get("max_completion_tokens")
        options: dict[str, Any] = {}
        if params.get("top_p") is not None:
            options["top_p"] = float(params["top_p"])
        if params.get("seed") is not None:
            options["seed"] = int(params["seed"])
        stream = llm.create_completion(
            tokens,
            stream=True,
            max_tokens=int(max_tokens or self.settings.local_model_max_tokens),
            temperature=float(
                DEFAULT_TEMPERATURE
                if params.get("temperature") is None
                else params.get("temperature")
            ),
            stop=stops,
            stopping_criteria=llama_cpp.StoppingCriteriaList([sampled_token]),
            grammar=grammar,
            **options,
        )
        first_token_at: float | None = None
        reported = False
        try:
            for chunk in stream:  # type: ignore[union-attr]
                if stop.is_set():
                    break  # closing the stream below also skips saving this prompt's state
                choice = chunk["choices"][0]
                if choice["text"]:
                    if first_token_at is None:
                        first_token_at = time.monotonic()
                    emit("text", choice["text"])
                if choice["finish_reason"] is not None:
                    # Report the end now; the loop goes on only while llama-cpp-python saves the
                    # prompt state into the cache (under the model lock, off the consumer's path).
                    completion = max(sampled - 1, 0)  # minus the check after the loop
                    self.last_stats = _stats(
                        len(tokens), reused, completion, started, first_token_at
                    )
                    emit("done", (len(tokens), completion))
                    reported = True
        finally:
            stream.close()  # type: ignore[union-attr]
        return reported

    @staticmethod
    def _prefill(llm: Llama, tokens: list[int], stop: threading.Event) -> int:
        """Bring the KV cache to hold `tokens`, reusing the longest cached prefix; return its size.

        This is what llama-cpp-python's `create_completion` does on its own (RAM cache lookup,
        then prefix match with the live KV cache), done first and in slices so a stop request is
        honoured during a long prompt too. The completion then finds the whole prompt evaluated.
        """
        from llama_cpp import Llama

        reused = Llama.longest_token_prefix(llm._input_ids.tolist(), tokens)
        if llm.cache is not None:
            try:
                state = llm.cache[tokens]
            except KeyError:
                state = None
            if state is not None:
                cached = Llama.longest_token_prefix(
                    state.input_ids[: state.n_tokens].tolist(), tokens
                )
                if cached > reused:
                    llm.load_state(state)
                    reused = cached
        if reused >= len(tokens):
            # The whole prompt is cached; `generate` re-decodes its last token for fresh logits.
            return reused
        llm.n_tokens = reused  # `eval` drops the KV cache from here on
        for start in range(reused, len(tokens), PROMPT_SLICE):
            if stop.is_set():
                break
            llm.eval(tokens[start : start + PROMPT_SLICE])
        return reused


def _close_at_exit(provider: weakref.ref[LocalLlamaProvider]) -> None:
    instance = provider()
    if instance is not None:
        instance.close()


def _stats(
    prompt: int, reused: int, completion: int, started: float, first_token_at: float | None
) -> GenerationStats:
    now = time.monotonic()
    first = (first_token_at or now) - started
    rate = (completion - 1) / (now - first_token_at) if first_token_at and completion > 1 else 0.0
    stats = GenerationStats(prompt, reused, first, completion, rate)
    log.debug(
        "Local model: %d prompt tokens (%d reused), first token after %.2f s, "
        "%d tokens at %.1f tokens/s",
        prompt,
        reused,
        first,
        completion,
        rate,
    )
    return stats


def _response_schema(response_format: Any) -> str | None:
    """What `response_format` asks the reply to be: None for free text, else the JSON schema as
    JSON text (the grammar cache's key), or `ANY_JSON_OBJECT` for any JSON object.

    Accepts OpenAI's `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}` and
    `{"type": "json_object"}`, plus llama-cpp-python's `{"type": "json_object", "schema": ...}`.
    LiteLLM has already turned a pydantic class into the json_schema form.
    """
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise ProviderFailure(
            f"Local model: response_format must be an object, not {response_format!r}",
            status_code=400,
        )
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
    elif kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
    else:
        raise ProviderFailure(
            f"Local model: unsupported response_format type {kind!r} "
            "(use json_schema, json_object or text)",
            status_code=400,
        )
    if schema is None:
        return ANY_JSON_OBJECT
    # Not sorted: the grammar writes properties in the schema's order, so order is part of the key.
    return json.dumps(schema, ensure_ascii=False)


def _build_grammar(schema: str) -> LlamaGrammar:
    from llama_cpp import LlamaGrammar
    from llama_cpp.llama_grammar import JSON_GBNF

    if schema == ANY_JSON_OBJECT:
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    try:
        return LlamaGrammar.from_json_schema(schema, verbose=False)
    except Exception as error:
        # A schema feature the converter lacks: any JSON object still parses, and the caller
        # validates the shape anyway (llama-cpp-python's own response_format handling does this).
        log.warning(
            "Local model: cannot turn the response schema into a grammar (%s); "
            "asking for any JSON object instead",
            error,
        )
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False)


def _offered_tools(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The tools to put in the prompt: none for tool_choice "none", only the named one when a
    function is forced (a small model follows a one-tool prompt far more reliably)."""
    tools = list(params.get("tools") or [])
    choice = params.get("tool_choice")
    if choice == "none":
        return []
    if isinstance(choice, dict):
        forced = (choice.get("function") or {}).get("name")
        return [t for t in tools if (t.get("function") or {}).get("name") == forced] or tools
    return tools


def _template_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """OpenAI-style messages as the GGUF chat template expects them.

    Content becomes a plain string (None → "", parts → their text), and assistant tool calls get
    their `arguments` as a dict: Qwen's template applies `tojson` to them, which would otherwise
    write a JSON string inside the JSON.
    """
    result = []
    for message in messages:
        if not isinstance(message, dict):
            message = message.model_dump() if hasattr(message, "model_dump") else dict(message)
        role = {"developer": "system", "function": "tool"}.get(message["role"], message["role"])
        item: dict[str, Any] = {"role": role, "content": _text_of(message.get("content"))}
        if message.get("name"):
            item["name"] = message["name"]
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            item["tool_calls"] = [_template_tool_call(call) for call in calls]
        result.append(item)
    return result


def _template_tool_call(call: Any) -> dict[str, Any]:
    if not isinstance(call, dict):
        call = call.model_dump() if hasattr(call, "model_dump") else dict(call)
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        # Unreadable arguments stay text: the model then sees what it wrote.
        with contextlib.suppress(json.JSONDecodeError):
            function["arguments"] = json.loads(arguments) if arguments.strip() else {}
    return {"id": call.get("id"), "type": "function", "function": function}


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return str(content)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)

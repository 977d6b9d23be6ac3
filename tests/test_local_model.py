"""Tests for the local model: assembling its weights (core/model_weights.py) and running it through
LiteLLM as the `local` provider (core/local_llm.py).

The real-model test assembles the 1.1 GB GGUF once per test session into a temporary data dir
(a few seconds) and keeps the whole conversation short, so it runs in the normal test run.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: litellm's bundled map

import litellm

from core import model_weights
from core.config import PROJECT_ROOT, Settings, load_settings
from core.errors import StartupError
from core.inprocess_provider import ProviderFailure, TextDelta
from core.llm_router import ModelPlan, build_router, provider_handler, register_provider
from core.local_llm import LocalLlamaProvider
from core.model_weights import (
    MODEL_FILENAME,
    MODEL_SHA256,
    MODEL_SIZE,
    ModelWeightsError,
    ensure_local_model,
)
from core.scripted_llm import ScriptedProvider

MODEL = "local/qwen2.5-coder-1.5b-instruct"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city's name"}},
            "required": ["city"],
        },
    },
}
# What the evidence check asks for, in OpenAI's response_format shape.
ENOUGH_SCHEMA = {
    "type": "object",
    "properties": {"enough": {"enum": ["yes", "no"]}},
    "required": ["enough"],
}
ENOUGH_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "evidence_check", "schema": ENOUGH_SCHEMA, "strict": True},
}


def make_settings(data_dir: Path, **overrides: object) -> Settings:
    # `local_model_path=None` explicitly: a LOCAL_MODEL_PATH in the environment must not leak in.
    return load_settings(
        app_data_dir=data_dir, local_model_path=None, local_model_threads=None, **overrides
    )


# --- weights: fake parts --------------------------------------------------------------------


@pytest.fixture
def fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Three small parts standing in for the 22 packages, with matching size and hash."""
    parts = []
    for n, content in enumerate([b"GGUF" + b"a" * 1000, b"b" * 2000, b"c" * 10]):
        part = tmp_path / "parts" / f"part{n:02d}.bin"
        part.parent.mkdir(exist_ok=True)
        part.write_bytes(content)
        parts.append(part)
    whole = b"".join(p.read_bytes() for p in parts)
    monkeypatch.setattr(model_weights, "model_parts", lambda: list(parts))
    monkeypatch.setattr(model_weights, "MODEL_SIZE", len(whole))
    monkeypatch.setattr(model_weights, "MODEL_SHA256", hashlib.sha256(whole).hexdigest())
    return parts


def test_fake_parts_assemble_verify_and_are_not_rehashed(
    tmp_path: Path, fake_parts: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings(tmp_path / "data")
    path = ensure_local_model(settings)
    assert path == tmp_path / "data" / "models" / MODEL_FILENAME
    assert path.read_bytes() == b"".join(p.read_bytes() for p in fake_parts)
    marker = path.with_name(path.name + ".sha256")
    assert marker.read_text().strip() == model_weights.MODEL_SHA256
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, marker.name]

    # Later calls trust the marker: neither the parts nor the file are read again.
    def no_parts() -> list[Path]:
        raise AssertionError("parts read again")

    monkeypatch.setattr(model_weights, "model_parts", no_parts)
    monkeypatch.setattr(model_weights, "_sha256_of", no_parts)
    assert ensure_local_model(settings) == path


def test_hash_mismatch_refuses_to_load(
    tmp_path: Path, fake_parts: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model_weights, "MODEL_SHA256", "0" * 64)
    settings = make_settings(tmp_path / "data")
    with pytest.raises(ModelWeightsError) as error:
        ensure_local_model(settings)
    message = str(error.value)
    assert "refusing to load" in message
    assert "expected" in message and "0" * 64 in message
    actual = hashlib.sha256(b"".join(p.read_bytes() for p in fake_parts)).hexdigest()
    assert "got" in message and actual in message
    # Nothing is left behind: no model file, no temporary file, no marker.
    assert list((tmp_path / "data" / "models").iterdir()) == []


def test_wrong_size_or_unverified_file_is_assembled_again(
    tmp_path: Path, fake_parts: list[Path]
) -> None:
    settings = make_settings(tmp_path / "data")
    path = ensure_local_model(settings)
    good = path.read_bytes()

    path.write_bytes(good[:-1])  # truncated, marker still there
    assert ensure_local_model(settings).read_bytes() == good

    # Right size, but corrupted after verification (newer than its marker): hashed and replaced.
    path.write_bytes(b"X" + good[1:])
    assert ensure_local_model(settings).read_bytes() == good


def test_local_model_path_must_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    settings = load_settings(app_data_dir=tmp_path, local_model_path=missing)
    with pytest.raises(StartupError, match="LOCAL_MODEL_PATH"):
        ensure_local_model(settings)
    own = tmp_path / "own.gguf"
    own.write_bytes(b"GGUF")
    settings = load_settings(app_data_dir=tmp_path, local_model_path=own)
    assert ensure_local_model(settings) == own


# --- response_format: the grammar, and LiteLLM handing it on --------------------------------


def test_grammar_is_built_once_per_schema(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import llama_cpp

    built: list[str] = []
    convert = llama_cpp.LlamaGrammar.from_json_schema

    def counting(json_schema: str, verbose: bool = True) -> llama_cpp.LlamaGrammar:
        built.append(json_schema)
        return convert(json_schema, verbose=verbose)

    monkeypatch.setattr(llama_cpp.LlamaGrammar, "from_json_schema", counting)
    provider = LocalLlamaProvider(make_settings(tmp_path))  # no model is loaded for this
    first = provider.grammar_for(ENOUGH_FORMAT)
    assert first is not None and built == [json.dumps(ENOUGH_SCHEMA)]
    # An equal schema in another dict (each call brings its own) reuses the grammar.
    assert provider.grammar_for(copy.deepcopy(ENOUGH_FORMAT)) is first
    other = {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}}
    assert provider.grammar_for(other) is not first
    assert provider.grammar_for(other) is provider.grammar_for(other)
    assert len(built) == 2
    # Any JSON object (json_object) needs no schema; free text needs no grammar.
    any_object = provider.grammar_for({"type": "json_object"})
    assert any_object is not None and provider.grammar_for({"type": "json_object"}) is any_object
    assert provider.grammar_for({"type": "text"}) is None and provider.grammar_for(None) is None
    assert len(built) == 2


def test_unusable_response_format_is_refused_and_odd_schemas_ask_for_json(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider = LocalLlamaProvider(make_settings(tmp_path))
    for response_format in ({"type": "xml"}, "json"):
        with pytest.raises(ProviderFailure) as error:
            provider.grammar_for(response_format)
        assert error.value.status_code == 400
    # A schema the converter cannot read still gets a JSON reply (the caller validates it).
    odd = {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "banana"}}}
    assert provider.grammar_for(odd) is not None
    assert "asking for any JSON object instead" in caplog.text


async def test_litellm_hands_response_format_to_an_in_process_provider() -> None:
    """LiteLLM lists response_format as supported for custom providers (their params are mapped
    like an OpenAI-compatible API's), so the Router hands it on unchanged, streamed or not, and
    on a fallback hop too. If an upgrade dropped it, the local model would silently answer free
    text."""
    saved_providers = list(litellm.custom_provider_map)
    settings = load_settings(
        _env_file=None, models_config=PROJECT_ROOT / "tests" / "models.scripted.yaml"
    )
    router = build_router(settings)
    provider = provider_handler("scripted")
    assert isinstance(provider, ScriptedProvider)
    try:
        provider.push({"text": '{"enough": "yes"}'}, {"chunks": ['{"enough"', ': "no"}']})
        reply = await router.acompletion(
            model="utility",
            messages=[{"role": "user", "content": "?"}],
            response_format=ENOUGH_FORMAT,
        )
        assert json.loads(reply.choices[0].message.content) == {"enough": "yes"}
        stream = await router.acompletion(
            model="flaky",  # scripted/down, then the fallback: scripted/chat
            messages=[{"role": "user", "content": "?"}],
            response_format={"type": "json_object"},
            stream=True,
        )
        assert "".join([c.choices[0].delta.content or "" async for c in stream]) == (
            '{"enough": "no"}'
        )
        assert [c["response_format"] for c in provider.calls] == [
            ENOUGH_FORMAT,
            {"type": "json_object"},  # the call to scripted/down
            {"type": "json_object"},
        ]
    finally:
        litellm.custom_provider_map = saved_providers


# --- the real model -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def real_model_settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """Settings whose data dir holds the real model, assembled from the 22 packages once."""
    settings = make_settings(tmp_path_factory.mktemp("local-model-data"))
    started = time.monotonic()
    path = ensure_local_model(settings)
    print(f"\nassembled and verified the local model in {time.monotonic() - started:.1f} s")
    yield settings
    # pytest keeps the last few session temp dirs: do not leave 1.1 GB behind in each.
    shutil.rmtree(path.parent, ignore_errors=True)


def test_real_assembled_file_verifies(real_model_settings: Settings) -> None:
    path = model_weights.default_model_path(real_model_settings)
    assert path.stat().st_size == MODEL_SIZE
    digest = hashlib.sha256()
    with path.open("rb") as model:
        while chunk := model.read(8 * 1024 * 1024):
            digest.update(chunk)
    assert digest.hexdigest() == MODEL_SHA256
    started = time.monotonic()
    assert ensure_local_model(real_model_settings) == path
    assert time.monotonic() - started < 0.5  # verified once; the marker spares re-hashing


@pytest.mark.slow
async def test_real_model_through_litellm(real_model_settings: Settings) -> None:
    provider = LocalLlamaProvider(real_model_settings)
    saved_providers = list(litellm.custom_provider_map)
    register_provider("local", provider)
    try:
        # 1. A tool call comes back as structured tool_calls in the stream, not as text.
        stream = await litellm.acompletion(
            model=MODEL,
            messages=[{"role": "user", "content": "What's the weather in Paris? Use the tool."}],
            tools=[WEATHER_TOOL],
            temperature=0,
            max_tokens=64,
            stream=True,
        )
        calls, text, finish = [], [], None
        async for chunk in stream:
            delta = chunk.choices[0].delta
            calls += delta.tool_calls or []
            text.append(delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        assert len(calls) == 1, (calls, text)
        assert calls[0].function.name == "get_weather"
        assert "paris" in json.loads(calls[0].function.arguments)["city"].lower()
        assert "<tool_call>" not in "".join(text)
        assert finish == "tool_calls"

        # 2. Plain text streams in several pieces.
        stream = await litellm.acompletion(
            model=MODEL,
            messages=[{"role": "user", "content": "Say hello in one short sentence"}],
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces, usage = [], None
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
            usage = getattr(chunk, "usage", None) or usage
        assert len(pieces) > 1, pieces
        # Real token counts: the chat template alone is a few dozen tokens.
        assert usage is not None and usage.prompt_tokens > 20
        assert len(pieces) <= usage.completion_tokens <= 24

        # 3. A consumer that leaves stops the generation within about a token.
        events = provider.generate(
            "x",
            [{"role": "user", "content": "Count from 1 to 300, separated by commas."}],
            {"max_tokens": 400},
        )
        received = 0
        async for event in events:
            received += isinstance(event, TextDelta)
            if received == 3:
                break
        await events.aclose()
        left = time.monotonic()
        freed = await asyncio.to_thread(provider._model_lock.acquire, timeout=10)
        assert freed
        provider._model_lock.release()
        assert time.monotonic() - left < 1.0

        # 4. A conversation longer than the context is refused with a clear message.
        with pytest.raises(Exception, match="context window"):
            stream = await litellm.acompletion(
                model=MODEL,
                messages=[{"role": "user", "content": "word " * 9000}],
                stream=True,
            )
            async for _ in stream:
                pass
    finally:
        litellm.custom_provider_map = saved_providers
        provider.close()


@pytest.mark.slow
async def test_real_model_json_reply_through_the_router(real_model_settings: Settings) -> None:
    """A json_schema response_format holds the reply to the schema, from the Router down."""
    plan = ModelPlan(
        model_list=[{"model_name": "utility", "litellm_params": {"model": MODEL}}], fallbacks=[]
    )
    saved_providers = list(litellm.custom_provider_map)
    router = build_router(real_model_settings, plan)
    provider = provider_handler("local")
    assert isinstance(provider, LocalLlamaProvider)
    try:
        reply = await router.acompletion(
            model="utility",
            messages=[
                {"role": "system", "content": "Say whether the source answers the question."},
                {
                    "role": "user",
                    "content": "Question: what is the capital of France?\n"
                    "Source: Paris is the capital and largest city of France.",
                },
            ],
            # Offered, yet not put in the prompt: a reply held to the schema cannot call a tool.
            tools=[WEATHER_TOOL],
            response_format=ENOUGH_FORMAT,
            temperature=0,
            max_tokens=60,
        )
        message = reply.choices[0].message
        assert not message.tool_calls
        answer = json.loads(message.content)
        assert set(answer) == {"enough"} and answer["enough"] in ("yes", "no"), answer
        # The grammar closed the object and then allowed only the end of the reply.
        assert reply.usage.completion_tokens < 20, reply.usage
        assert provider.last_stats is not None and provider.last_stats.completion_tokens < 20
    finally:
        litellm.custom_provider_map = saved_providers
        provider.close()

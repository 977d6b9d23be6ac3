"""The model router: which deployments and fallbacks exist for which keys, and real calls through
LiteLLM's Router to the scripted provider (streaming, tool calls, fallbacks)."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import pytest
from litellm.litellm_core_utils.litellm_logging import Logging

from core.config import PROJECT_ROOT, load_settings
from core.errors import StartupError
from core.llm_router import build_router, plan_models, provider_handler
from tests.scripted_model import ScriptedProvider

SCRIPTED_MODELS = PROJECT_ROOT / "tests" / "models.scripted.yaml"
LOCAL = "local/qwen2.5-coder-1.5b-instruct"


def test_no_keys_means_every_role_runs_locally() -> None:
    plan = plan_models(load_settings(_env_file=None))
    assert plan.deployments("chat") == [LOCAL]
    assert plan.deployments("utility") == [LOCAL]
    assert len(plan.left_out) == 4  # groq, openrouter, gemini (utility) and the evals' judge
    assert plan.deployments("judge") == []
    assert plan.runs_locally("chat") and plan.runs_locally("utility")
    assert all("groq" not in d["litellm_params"]["model"] for d in plan.model_list)


def test_all_keys_give_hosted_models_with_fallbacks() -> None:
    settings = load_settings(
        _env_file=None, groq_api_key="g", openrouter_api_key="o", gemini_api_key="m"
    )
    plan = plan_models(settings)
    assert plan.deployments("chat") == ["groq/openai/gpt-oss-120b"]
    assert plan.fallbacks_of("chat") == ["chat-openrouter", "local"]
    assert plan.deployments("utility") == ["gemini/gemini-2.5-flash-lite"]
    assert plan.fallbacks_of("utility") == ["chat", "chat-openrouter", "local"]
    keys = {d["model_name"]: d["litellm_params"].get("api_key") for d in plan.model_list}
    assert keys["chat"] == "g" and keys["utility"] == "m" and keys["judge"] == "m"
    assert plan.fallbacks_of("judge") == []  # a judge never falls back to a weaker model
    assert plan.left_out == []
    assert not plan.runs_locally("chat")


def test_models_of_ours_are_declared_free_and_hosted_ones_keep_their_prices(
    tmp_path: Path,
) -> None:
    """Without prices, LiteLLM searched its cost map for the local model's after every call (a few
    ms of CPU each, bench/RESULTS.md): ours are free, so they say so."""
    settings = load_settings(_env_file=None, groq_api_key="g")
    info = {
        d["litellm_params"]["model"]: d.get("model_info") for d in plan_models(settings).model_list
    }
    assert info[LOCAL] == {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0}
    assert info["groq/openai/gpt-oss-120b"] is None  # LiteLLM's cost map prices it
    config = tmp_path / "models.yaml"
    config.write_text(
        "model_list:\n  - model_name: chat\n    litellm_params: {model: scripted/chat}\n"
        "    model_info: {output_cost_per_token: 0.001}\n"
        "  - model_name: utility\n    litellm_params: {model: scripted/utility}\n"
    )
    plan = plan_models(load_settings(_env_file=None, models_config=config))
    assert plan.model_list[0]["model_info"] == {
        "input_cost_per_token": 0.0, "output_cost_per_token": 0.001,
    }  # fmt: skip


def test_missing_chat_key_borrows_the_next_fallback() -> None:
    plan = plan_models(load_settings(_env_file=None, openrouter_api_key="o"))
    assert plan.deployments("chat") == ["openrouter/openai/gpt-oss-120b"]
    assert plan.fallbacks_of("chat") == ["local"]
    assert plan.describe("utility") == f"openrouter/openai/gpt-oss-120b, then {LOCAL}"


def test_role_without_any_model_stops_startup(tmp_path: Path) -> None:
    config = tmp_path / "models.yaml"
    config.write_text(
        "model_list:\n  - model_name: chat\n    litellm_params:\n"
        "      model: groq/x\n      api_key: os.environ/GROQ_API_KEY\n"
    )
    with pytest.raises(StartupError, match="'chat' role"):
        plan_models(load_settings(_env_file=None, models_config=config))


@pytest.fixture
def scripted() -> tuple[object, ScriptedProvider]:
    router = build_router(load_settings(_env_file=None, models_config=SCRIPTED_MODELS))
    provider = provider_handler("scripted")
    assert isinstance(provider, ScriptedProvider)
    return router, provider


async def test_streams_text_through_the_router(scripted) -> None:
    router, provider = scripted
    provider.push({"chunks": ["Hel", "lo ", "there"]})
    stream = await router.acompletion(
        model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    pieces = [chunk.choices[0].delta.content async for chunk in stream]
    assert [p for p in pieces if p] == ["Hel", "lo ", "there"]
    assert provider.calls[-1]["messages"][-1]["content"] == "hi"


async def test_a_stream_the_collector_frees_sets_no_context_variable(
    scripted, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On Python 3.11 a context variable set from inside the garbage collector can free the very
    # context being written (CPython gh-148891): in the per-turn bench about 1 message in 3,000
    # lost LangGraph's config mid-reply ("Called get_config outside of a runnable context"), and
    # a run crashed. LiteLLM's stream wrapper set two from its finalizer, and its streams are
    # often freed by the collector (in reference cycles).
    # The collector runs finalizers in the thread that started it; LiteLLM's logging threads may
    # run meanwhile (a finalizer can release the GIL), so only a call in that thread counts.
    router, provider = scripted
    restored: list[bool] = []
    collecting_thread: list[int | None] = [None]

    def note_collector(phase: str, info: dict[str, int]) -> None:
        collecting_thread[0] = threading.get_ident() if phase == "start" else None

    def in_collector() -> bool:
        return collecting_thread[0] == threading.get_ident()

    original = Logging._restore_correlation_context
    monkeypatch.setattr(
        Logging,
        "_restore_correlation_context",
        lambda self: restored.append(in_collector()) or original(self),
    )
    gc.callbacks.append(note_collector)
    try:
        for _ in range(3):
            provider.push({"chunks": ["Hel", "lo"]})
            stream = await router.acompletion(
                model="chat", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            assert [c async for c in stream]
            stream.cycle = stream  # only the collector can free it now
            del stream
        gc.collect()
    finally:
        gc.callbacks.remove(note_collector)
    assert restored, "a stream's end restores LiteLLM's correlation ids (outside the collector)"
    assert True not in restored


async def test_tool_calls_arrive_structured(scripted) -> None:
    router, provider = scripted
    provider.push({"tool_calls": [{"name": "save_memory", "arguments": {"content": "Likes tea"}}]})
    response = await router.acompletion(
        model="chat", messages=[{"role": "user", "content": "I like tea"}]
    )
    call = response.choices[0].message.tool_calls[0]
    assert call.function.name == "save_memory"
    assert call.function.arguments == '{"content": "Likes tea"}'
    assert response.choices[0].finish_reason == "tool_calls"


async def test_failing_provider_falls_back(scripted) -> None:
    router, provider = scripted
    provider.push({"text": "answer from the fallback"})
    response = await router.acompletion(
        model="flaky", messages=[{"role": "user", "content": "hello"}]
    )
    assert response.choices[0].message.content == "answer from the fallback"
    assert [c["model"] for c in provider.calls[-2:]] == ["down", "chat"]


async def test_scripted_error_turn_surfaces_as_an_exception(scripted) -> None:
    router, provider = scripted
    provider.push({"error": "rate limited"})
    with pytest.raises(Exception, match="rate limited"):
        await router.acompletion(model="chat", messages=[{"role": "user", "content": "x"}])
    assert provider.remaining == 0

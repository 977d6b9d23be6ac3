"""Which model wrote a reply, and what a user is told when something fails.

The real router, graph, database and server over the scripted model: a reply carries the model
that answered (a fallback's when one did, with a note), in its `done` event and as saved; a
provider's failure reaches the user as a plain sentence with a ref, and the log line with that ref
holds the raw reason; asking for the web on a server without search says how to turn it on.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

import litellm
import pytest
from litellm import Router

from chat.runner import start_turn, stream_turn
from chat.user_errors import (
    WEB_SEARCH_OFF,
    fallback_note,
    plain_reason,
    reply_failed,
    web_search_status,
)
from core import chat_store
from core.accounts import LOCAL_USER_ID
from core.llm_router import build_router, plan_models, provider_handler, register_provider
from core.model_names import Answered, friendly_name
from core.services import Services
from tests.chat_client import messages_of, send
from tests.scripted_model import ScriptedProvider

REF = re.compile(r"\(ref ([0-9a-f]{6})\)")


def config_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(body)
    return path


async def run_turn(services: Services, text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One message through stream_turn on `services`: its events and the reply as saved."""
    turn = await start_turn(services, None, text, use_web=False, user_id=LOCAL_USER_ID)
    events = [event async for event in stream_turn(turn)]
    saved = await chat_store.list_messages(services.database.pool, turn.context.chat_id)
    return events, saved[-1]


# --- names ---------------------------------------------------------------------------------------


def test_friendly_names() -> None:
    assert friendly_name("local/qwen2.5-coder-1.5b-instruct") == "Local model (Qwen2.5-Coder 1.5B)"
    assert friendly_name("groq/openai/gpt-oss-120b") == "gpt-oss-120b"
    assert friendly_name("openai/gpt-4o-mini") == "gpt-4o-mini"
    assert friendly_name("gemini/gemini-2.5-flash-lite") == "gemini-2.5-flash-lite"
    assert friendly_name(None) is None
    local = Answered("local/qwen2.5-coder-1.5b-instruct", "local")
    assert fallback_note(local) == "The hosted model is unavailable; answered with the local model."
    hosted = Answered("openrouter/openai/gpt-oss-120b", "chat-openrouter")
    assert fallback_note(hosted) == (
        "The first-choice model is unavailable; answered with gpt-oss-120b."
    )


def test_error_sentences_by_kind() -> None:
    unavailable = litellm.ServiceUnavailableError("down", llm_provider="groq", model="x")
    assert plain_reason(unavailable) == "The model is unavailable right now. Please try again."
    refused = litellm.AuthenticationError("bad key", llm_provider="groq", model="x")
    assert "API key" in plain_reason(refused) and "bad key" not in plain_reason(refused)
    assert plain_reason(ValueError("boom")) == (
        "The assistant could not finish this reply. Please try again."
    )
    assert web_search_status("off (TAVILY_API_KEY not set)") == WEB_SEARCH_OFF
    assert "Tavily key in .env" in WEB_SEARCH_OFF
    assert web_search_status("tavily") is None


def test_a_failure_nobody_explained_logs_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    # A known kind (the provider is down) is explained by its sentence; anything else is a bug,
    # and whoever runs the server needs where it happened, found by the ref the user quotes.
    caplog.set_level(logging.ERROR, logger="resolveai.chat")
    for error in (
        RuntimeError("Called get_config outside of a runnable context"),
        litellm.ServiceUnavailableError("down", llm_provider="groq", model="x"),
    ):
        try:
            raise error
        except Exception as raised:
            told = reply_failed(raised, "chat-1")
        ref = told.rsplit("(ref ", 1)[1].rstrip(")")
        (record,) = [r for r in caplog.records if ref in r.getMessage()]
        if isinstance(error, RuntimeError):
            assert record.exc_info and record.exc_info[1] is error
        else:
            assert not record.exc_info


# --- the model under the reply -------------------------------------------------------------------


async def test_a_reply_names_its_model_in_done_and_as_saved(client, model) -> None:
    model.push({"text": "Hello."})
    events = await send(client, "Hi")
    done = events[-1]
    assert done["type"] == "done"
    assert (done["model"], done["model_name"], done["notes"]) == ("scripted/chat", "chat", [])
    saved = (await messages_of(client, events[0]["chat_id"]))[-1]
    assert (saved["model"], saved["model_name"], saved["notes"]) == ("scripted/chat", "chat", [])
    assert (await messages_of(client, events[0]["chat_id"]))[0]["model"] is None  # the question


async def test_a_fallback_answer_carries_its_note_and_the_fallbacks_name(
    chat_services, model, settings, tmp_path
) -> None:
    config = config_file(
        tmp_path,
        "model_list:\n"
        "  - {model_name: chat, litellm_params: {model: scripted/down}}\n"
        "  - {model_name: backup, litellm_params: {model: scripted/backup-7b}}\n"
        "  - {model_name: utility, litellm_params: {model: scripted/utility}}\n"
        "router_settings:\n  num_retries: 0\n  fallbacks: [{chat: [backup]}]\n",
    )
    router = build_router(settings.model_copy(update={"models_config": config}))
    services = dataclasses.replace(chat_services, router=router)
    model.push({"text": "answer from the backup"})
    events, saved = await run_turn(services, "hello?")
    done = events[-1]
    assert done["type"] == "done"
    assert [c["model"] for c in model.calls] == ["down", "backup-7b"]
    note = "The first-choice model is unavailable; answered with backup-7b."
    assert (done["model"], done["model_name"], done["notes"]) == (
        "scripted/backup-7b", "backup-7b", [note]
    )  # fmt: skip
    assert (saved["model"], saved["notes"]) == ("scripted/backup-7b", [note])


async def test_the_local_model_answering_as_fallback_is_named_so(
    chat_services, model, settings, tmp_path
) -> None:
    """The bundled model's deployment (`local/…`), here played by the scripted provider
    registered under that name: its answer says the hosted model was unavailable."""
    config = config_file(
        tmp_path,
        "model_list:\n"
        "  - {model_name: chat, litellm_params: {model: scripted/down}}\n"
        "  - {model_name: local, litellm_params: {model: local/qwen2.5-coder-1.5b-instruct}}\n"
        "  - {model_name: utility, litellm_params: {model: scripted/utility}}\n"
        "router_settings:\n  fallbacks: [{chat: [local]}]\n",
    )
    plan = plan_models(settings.model_copy(update={"models_config": config}))
    before = list(litellm.custom_provider_map)
    local = ScriptedProvider()
    register_provider("local", local)
    try:
        router = Router(model_list=plan.model_list, fallbacks=plan.fallbacks, num_retries=0)
        services = dataclasses.replace(chat_services, router=router)
        local.push({"text": "a local answer"})
        events, saved = await run_turn(services, "are you there?")
    finally:
        litellm.custom_provider_map = before
    assert provider_handler("local") is not local
    done = events[-1]
    assert done["type"] == "done", events
    assert done["model_name"] == "Local model (Qwen2.5-Coder 1.5B)"
    assert done["notes"] == ["The hosted model is unavailable; answered with the local model."]
    assert saved["model"] == "local/qwen2.5-coder-1.5b-instruct"


# --- errors a user can act on --------------------------------------------------------------------


async def test_a_provider_error_is_a_sentence_with_a_ref_and_the_log_has_the_raw_text(
    client, model, caplog: pytest.LogCaptureFixture
) -> None:
    model.push({"error": "upstream exploded: code XJ-42"})
    with caplog.at_level(logging.ERROR, logger="resolveai.chat"):
        events = await send(client, "Are you there?")
    error = events[-1]
    assert error["type"] == "error"
    assert "XJ-42" not in error["message"] and "litellm" not in error["message"].lower()
    assert error["message"].startswith("The model is unavailable right now. Please try again.")
    ref = REF.search(error["message"])
    assert ref, error["message"]
    logged = [r.getMessage() for r in caplog.records if f"ref {ref.group(1)}" in r.getMessage()]
    assert len(logged) == 1 and "upstream exploded: code XJ-42" in logged[0], logged
    saved = (await messages_of(client, events[0]["chat_id"]))[-1]
    assert (saved["status"], saved["error"]) == ("error", error["message"])


async def test_asking_for_the_web_without_search_says_how_to_turn_it_on(client) -> None:
    config = (await client.get("/api/config")).json()["web_search"]
    assert config["available"] is False  # the tests' server has no TAVILY_API_KEY
    assert config["message"] == WEB_SEARCH_OFF
    refused = await client.post("/api/messages", json={"content": "News?", "use_web": True})
    assert refused.status_code == 400
    assert refused.json()["error"] == WEB_SEARCH_OFF


class RejectedKeyProvider:
    """A search provider whose key is refused, as Tavily answers a wrong one."""

    async def search(self, query: str, count: int) -> list[Any]:
        raise RuntimeError(
            "Tavily search failed: the API key was rejected (HTTP 401; check TAVILY_API_KEY)"
        )


async def test_a_failed_web_search_is_a_note_with_a_ref_and_the_raw_reason_logged(
    chat_services, model, caplog: pytest.LogCaptureFixture
) -> None:
    services = dataclasses.replace(chat_services, search_provider=RejectedKeyProvider())
    model.push(
        {"tool_calls": [{"name": "web_search", "arguments": {"query": "news", "context": ""}}]},
        {"text": "I could not search; from what I know: nothing new."},
    )
    with caplog.at_level(logging.WARNING, logger="resolveai.chat"):
        events, saved = await run_turn(services, "Any news today?")
    assert events[-1]["type"] == "done"
    [note] = events[-1]["notes"]
    assert note.startswith("Web search failed: the Tavily key was rejected; check TAVILY_API_KEY")
    ref = REF.search(note)
    assert ref, note
    logged = [r.getMessage() for r in caplog.records if f"ref {ref.group(1)}" in r.getMessage()]
    assert len(logged) == 1 and "HTTP 401" in logged[0], logged
    assert saved["notes"] == [note]

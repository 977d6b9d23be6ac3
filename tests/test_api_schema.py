"""The API against its own OpenAPI schema, from outside: the real server process (every model role
scripted, web search on an offline folder of pages) probed by schemathesis with all its checks,
and the schema read as a client would read it (streams, error statuses, limits).

`SCHEMATHESIS_EXAMPLES` (cases per operation and phase, default 50: about 1,500 cases, a minute
on two cores) and `SCHEMATHESIS_SEED` (default 1; fixed so a CI run is reproducible) change the
run; the same run by hand, against a server you started:

    python -m schemathesis.cli run http://127.0.0.1:8000/openapi.json --checks all \\
        --max-examples 50 --seed 1 --workers 2 --generation-database none
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.api_schema import NON_BLANK_TEXT, STREAM_EVENTS
from core.config import PROJECT_ROOT
from tests.test_server import SCRIPTED_SERVER, RunningServer

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "50"))
SEED = int(os.environ.get("SCHEMATHESIS_SEED", "1"))
CONFIG = PROJECT_ROOT / "tests" / "schemathesis.toml"  # per-operation exceptions, each explained
MIN_CASES = 1000  # the run is only worth its minute if it tries this many
STREAMING = {("post", "/api/messages"), ("post", "/api/chats/{chat_id}/messages"),
             ("post", "/api/chats/{chat_id}/messages/{message_id}/retry"),
             ("post", "/api/chats/{chat_id}/messages/{message_id}/regenerate"),
             ("post", "/api/chats/{chat_id}/messages/{message_id}/continue"),
             ("patch", "/api/chats/{chat_id}/messages/{message_id}"),
             ("get", "/api/chats/{chat_id}/stream")}  # fmt: skip

PAGE = """---
title: {title}
url: https://example.org/{slug}
---
# {title}

{text}
"""


@contextmanager
def running_api_server(root: Path, **extra: str) -> Iterator[RunningServer]:
    """`python server.py` (tests/scripted_server.py: short scripted replies), web search on."""
    pages = root / "pages"
    pages.mkdir()
    for slug, title, text in (
        ("lisbon", "Lisbon", "Lisbon is the capital of Portugal. Trams climb its hills."),
        ("tea", "Tea", "Tea is brewed from the leaves of Camellia sinensis."),
    ):
        (pages / f"{slug}.md").write_text(PAGE.format(title=title, slug=slug, text=text))
    server = RunningServer(
        root / "data",
        root / "server.log",
        SCRIPTED_SERVER,
        MODELS_CONFIG=str(PROJECT_ROOT / "tests" / "models.scripted.yaml"),
        SCRIPTED_WORDS="3",
        SCRIPTED_DELAY="0",
        WEB_SEARCH_PROVIDER="pages",
        WEB_PAGES_DIR=str(pages),
        PYTHONFAULTHANDLER="1",  # a crash of the server shows its threads' stacks in its log
        **extra,
    )
    try:
        server.wait_healthy()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    with running_api_server(tmp_path_factory.mktemp("api-schema")) as server:
        yield server


@pytest.fixture(scope="module")
def schema(api_server: RunningServer) -> dict[str, Any]:
    response = httpx.get(f"{api_server.url}/openapi.json", timeout=10)
    assert response.status_code == 200
    return response.json()


def run_schemathesis(
    server: RunningServer, tmp_path: Path, examples: int, *options: str
) -> dict[str, Any]:
    """Schemathesis against the server, every check on (and these CLI `options`); fails the
    test on any failure or error, or a server error only the server's log shows. Returns the
    report's case counts."""
    report = tmp_path / "schemathesis.json"
    started = time.monotonic()
    # One worker: with two, hypothesis describes its filters with ast.parse in both threads at
    # once, and CPython 3.11's AST constructor can then fail with "SystemError: AST constructor
    # recursion depth mismatch" (python/cpython#106905): an error of the fuzzer's own process,
    # reported as a runtime error of the run (CI, 64caaf0), not anything the server did.
    result = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "--config-file", str(CONFIG), "run",
         f"{server.url}/openapi.json",
         "--checks", "all", "--max-examples", str(examples), "--seed", str(SEED),
         "--workers", "1", "--generation-database", "none", "--request-timeout", "60",
         "--no-color", "--report", "json", "--report-json-path", str(report), *options],
        cwd=tmp_path, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    seconds = time.monotonic() - started
    # What schemathesis saw, then the end of the server's own log (a crash, a traceback).
    output = result.stdout + result.stderr + "\n--- server log ---\n" + server.output()[-8000:]
    summary = json.loads(report.read_text())
    cases = summary["test_cases"]
    print(f"schemathesis: {cases['generated']} cases, {cases['with_failures']} with failures, "
          f"{len(summary['errors'])} errors, {seconds:.0f} s (seed {SEED})")  # fmt: skip
    assert summary["failures"] == [], output[-28_000:]
    assert summary["errors"] == [], output[-28_000:]
    assert result.returncode == 0, output[-28_000:]
    # A server error the checks did not see (a stream cut short by an exception) is in the log.
    log = server.output()
    assert re.search(r"Request \w+ failed", log) is None and "Traceback" not in log, log[-5000:]
    return cases


def test_schemathesis_finds_no_server_error_and_no_schema_violation(
    api_server: RunningServer, tmp_path: Path
) -> None:
    cases = run_schemathesis(api_server, tmp_path, EXAMPLES)
    assert cases["generated"] >= MIN_CASES


def test_schemathesis_signed_in_finds_no_server_error(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The same with accounts on, signed in by an API token: every query scoped to a user, the
    sign-in, password and admin routes with their real work to do."""
    root = tmp_path_factory.mktemp("api-schema-accounts")
    accounts = {
        "AUTH_MODE": "password",
        "ADMIN_USERNAME": "admin",
        "ADMIN_PASSWORD": "schemathesis admin password",
        "RATE_LIMIT_MESSAGES_PER_MINUTE": "0",
        "RATE_LIMIT_CONCURRENT_REPLIES": "0",
    }
    with running_api_server(root, **accounts) as server:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            signed = client.post(
                "/api/auth/login",
                json={"username": "admin", "password": accounts["ADMIN_PASSWORD"]},
            )
            assert signed.status_code == 200, signed.text
            csrf = {"X-CSRF-Token": signed.json()["csrf_token"]}
            created = client.post("/api/auth/tokens", json={"name": "fuzz"}, headers=csrf)
            assert created.status_code == 201, created.text
        token = created.json()["token"]
        # Revoking tokens would revoke its own (found in the listing): every later case a 401.
        cases = run_schemathesis(
            server, tmp_path, EXAMPLES // 2, "-H", f"Authorization: Bearer {token}",
            "--exclude-path", "/api/auth/tokens/{token_id}",
        )  # fmt: skip
        assert cases["generated"] >= MIN_CASES // 2
        # Signed in all along: a token it deleted would have made every later case a 401.
        still = httpx.get(f"{server.url}/api/chats", headers={"Authorization": f"Bearer {token}"})
        assert still.status_code == 200


def test_streams_are_described_as_event_streams(schema: dict[str, Any]) -> None:
    for method, path in STREAMING:
        answer = schema["paths"][path][method]["responses"]["200"]
        assert list(answer["content"]) == ["text/event-stream"], (method, path)
        events = answer["content"]["text/event-stream"]["itemSchema"]["properties"]["event"]
        assert events["enum"] == list(STREAM_EVENTS)
        for event in ("token", "done", "interrupted", "error", "heartbeat"):
            assert f"`{event}`" in answer["description"]


def test_every_error_status_is_documented_in_the_one_shape(schema: dict[str, Any]) -> None:
    def statuses(method: str, path: str) -> set[str]:
        return set(schema["paths"][path][method]["responses"])

    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            expected = {"400", "413", "422", "500", "503"} | (
                {"403"} if method in ("post", "put", "patch", "delete") else set()
            )
            assert expected <= statuses(method, path), (method, path)
            # The OpenAI-compatible API answers OpenAI's error shape (core/openai_errors.py).
            shape = "OpenAIErrorBody" if path.startswith("/v1/") else "ApiError"
            for status, answer in operation["responses"].items():
                if status[0] in "45":
                    assert answer["content"] == {
                        "application/json": {"schema": {"$ref": f"#/components/schemas/{shape}"}}
                    }, (method, path, status)
    assert {"404", "409"} <= statuses("post", "/api/messages")  # an unknown chat_id, a busy chat
    assert "409" in statuses("delete", "/api/memories")  # a stale forget token
    assert "404" in statuses("get", "/api/chats/{chat_id}/messages")
    assert {"401", "404", "429"} <= statuses("post", "/v1/chat/completions")
    openai_error = schema["components"]["schemas"]["OpenAIErrorDetail"]
    assert openai_error["required"] == ["message", "type", "param", "code"]
    error = schema["components"]["schemas"]["ApiError"]
    assert error["required"] == ["error", "request_id"]
    assert "HTTPValidationError" not in schema["components"]["schemas"]


def _request_strings(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every string schema a request can carry, with where it is."""
    components = schema["components"]["schemas"]

    def walk(where: str, item: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        if isinstance(item, dict):
            if "$ref" in item:
                yield from walk(where, components[item["$ref"].rsplit("/", 1)[1]])
            if item.get("type") == "string":
                yield where, item
            for key, value in item.items():
                if key != "not":
                    yield from walk(f"{where}.{key}", value)
        elif isinstance(item, list):
            for value in item:
                yield from walk(where, value)

    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                yield from walk(f"{method} {path} {parameter['name']}", parameter["schema"])
            for media in operation.get("requestBody", {}).get("content", {}).values():
                yield from walk(f"{method} {path} body", media["schema"])


def test_every_request_string_excludes_nul_and_states_the_limits(schema: dict[str, Any]) -> None:
    found = list(_request_strings(schema))
    assert len(found) >= 8
    for where, string in found:
        if "format" in string or "enum" in string or "const" in string:
            continue
        assert "pattern" in string, where
        assert re.search(string["pattern"], "ok\x00ok") is None, where
        assert re.search(string["pattern"], "ok") is not None, where
    content = schema["components"]["schemas"]["NewMessageIn"]["properties"]["content"]
    assert content["maxLength"] == 32_000
    assert re.search(content["pattern"], " \n\t ") is None  # a blank message is refused
    assert "additionalProperties" in schema["components"]["schemas"]["NewMessageIn"]
    assert "1,048,576 bytes" in schema["info"]["description"]


def test_the_real_server_refuses_a_forged_host_and_origin(api_server: RunningServer) -> None:
    url = api_server.url
    assert httpx.get(f"{url}/api/chats", timeout=10).status_code == 200
    forged = httpx.get(f"{url}/api/chats", headers={"host": "rebind.evil.example"}, timeout=10)
    assert forged.status_code == 400 and "rebind.evil.example" in forged.json()["error"]
    paused = httpx.get(f"{url}/api/settings", timeout=10).json()["memory_paused"]
    cross = httpx.patch(f"{url}/api/settings", json={"memory_paused": not paused}, timeout=10,
                        headers={"origin": "http://rebind.evil.example"})  # fmt: skip
    assert cross.status_code == 403 and cross.json()["request_id"]
    assert httpx.get(f"{url}/api/settings", timeout=10).json()["memory_paused"] is paused
    assert httpx.get(f"{url}/docs", timeout=10).status_code == 404  # API_DOCS is off


def test_the_blank_pattern_is_the_routes_blank_check() -> None:
    # The schema's "not blank" is what the routes refuse as blank (str.strip), character for
    # character: a client generating valid input is never told its text is empty.
    for code in range(0x3100):
        char = chr(code)
        documented_blank = re.search(NON_BLANK_TEXT, f" {char} ") is None
        assert documented_blank == (char == "\x00" or not char.strip()), hex(code)

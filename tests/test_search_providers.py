"""Search providers: the offline pages provider on a folder written here, Tavily against a fake
Tavily API on 127.0.0.1, URL rules, and the WEB_SEARCH_PROVIDER / WEB_PAGES_DIR settings."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from core.config import SettingsError, load_settings
from rag.search_providers import (
    PagesProvider,
    SearchError,
    SearchResult,
    TavilyProvider,
    clean_results,
    normalize_url,
    provider_from_settings,
)
from tests.chat_client import free_port

# --- the pages provider ----------------------------------------------------------------------


def write(folder: Path, name: str, text: str) -> None:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, "utf-8")


def page(title: str, url: str, body: str) -> str:
    return f"---\ntitle: {title}\nurl: {url}\n---\n\n{body}\n"


@pytest.fixture
def pages(tmp_path: Path) -> Path:
    write(
        tmp_path,
        "watt.md",
        page(
            "James Watt: the engineer",
            "https://example.org/watt",
            "# James Watt\n\nWatt improved the Newcomen steam engine with a separate condenser.",
        ),
    )
    write(
        tmp_path,
        "garden/tomatoes.md",
        page(
            "Growing tomatoes",
            "https://example.org/tomatoes",
            "Tomatoes need sun, water and a stake. Pinch out the side shoots.",
        ),
    )
    write(
        tmp_path,
        "warsaw.md",
        page(
            '"Warsaw"',
            "https://Example.org/warsaw/",
            "Warsaw is the capital of Poland, on the Vistula river.",
        ),
    )
    write(
        tmp_path,
        "warsaw-copy.md",
        page(
            "Warsaw (mirror)",
            "https://example.org/warsaw#history",
            "Warsaw is the capital of Poland. The Vistula river crosses Warsaw.",
        ),
    )
    write(tmp_path, "local.md", page("Local", "file:///etc/passwd", "Warsaw Warsaw capital"))
    write(tmp_path, "nourl.md", "# No front matter\n\nWarsaw Warsaw capital Poland.")
    write(tmp_path, "notes.txt", "Warsaw capital, not a Markdown page")
    return tmp_path


async def test_pages_provider_finds_the_right_page(pages: Path) -> None:
    provider = PagesProvider(pages)
    results = await provider.search("who improved the steam engine condenser")
    assert [r.url for r in results] == ["https://example.org/watt"]
    result = results[0]
    assert result.title == "James Watt: the engineer"  # a colon in a front matter value is fine
    assert result.content.startswith("# James Watt\n\nWatt improved")  # front matter stripped
    tomatoes = await provider.search("tomato side shoots", max_results=1)
    assert [r.url for r in tomatoes] == ["https://example.org/tomatoes"]  # found in a subfolder


async def test_pages_provider_dedupes_and_keeps_only_web_urls(
    pages: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider = PagesProvider(pages)
    with caplog.at_level(logging.WARNING, "resolveai.search"):
        results = await provider.search("Warsaw capital of Poland", max_results=5)
    # Two files are one page (trailing slash, fragment, host case): only the better match stays.
    assert len(results) == 1
    assert normalize_url(results[0].url) == "https://example.org/warsaw"
    skipped = [r.getMessage() for r in caplog.records]
    assert len(skipped) == 2
    assert any("local.md" in m and "url" in m for m in skipped)
    assert any("nourl.md" in m for m in skipped)


async def test_pages_provider_no_match_is_empty(pages: Path) -> None:
    provider = PagesProvider(pages)
    assert await provider.search("quantum chromodynamics") == []
    assert await provider.search("") == []
    assert await provider.search("what is the") == []  # stop words only


async def test_pages_index_is_built_once(pages: Path) -> None:
    provider = PagesProvider(pages)
    assert await provider.search("tomatoes")
    write(pages, "later.md", page("Zebras", "https://example.org/zebras", "Zebras have stripes."))
    assert await provider.search("zebras stripes") == []  # read-only folder: indexed once
    assert await PagesProvider(pages).search("zebras stripes")  # a new instance sees it


async def test_empty_folder(tmp_path: Path) -> None:
    assert await PagesProvider(tmp_path).search("anything") == []


def test_urls_are_normalized_and_filtered() -> None:
    assert normalize_url("HTTPS://Example.ORG:443/a/b/#top") == "https://example.org/a/b"
    assert normalize_url("http://example.org:8080/?q=1") == "http://example.org:8080?q=1"
    assert normalize_url("https://example.org/a?q=1") != normalize_url("https://example.org/a?q=2")
    results = [
        SearchResult(url, "t", "c")
        for url in (
            "https://a.org/x",
            "https://a.org/x/",
            "https://A.org/x#frag",
            "javascript:alert(1)",
            "ftp://a.org/file",
            "mailto:me@a.org",
            "/relative/path",
            "http://",
            "http://b.org",
            "https://c.org",
        )
    ]
    kept = clean_results(results, max_results=5)
    assert [r.url for r in kept] == ["https://a.org/x", "http://b.org", "https://c.org"]
    assert len(clean_results(results, max_results=2)) == 2


# --- Tavily, against a fake API on loopback --------------------------------------------------


@dataclass
class FakeTavily:
    """What the fake API answers next, and what it was asked."""

    status: int = 200
    body: Any = field(default_factory=lambda: {"results": []})
    delay: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)


@pytest.fixture
def fake_tavily() -> Iterator[tuple[FakeTavily, str]]:
    state = FakeTavily()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            state.requests.append(json.loads(self.rfile.read(length)))
            state.headers.append(dict(self.headers))
            if state.delay:
                time.sleep(state.delay)
            payload = state.body if isinstance(state.body, bytes) else json.dumps(state.body)
            data = payload if isinstance(payload, bytes) else payload.encode()
            try:
                self.send_response(state.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (the timeout test)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_tavily_results_are_mapped(fake_tavily: tuple[FakeTavily, str]) -> None:
    state, url = fake_tavily
    state.body = {
        "query": "steam",
        "results": [
            {
                "url": "https://a.org/steam",
                "title": "Steam",
                "content": "snippet",
                "raw_content": "# Steam\n\nFull page.",
            },
            {"url": "https://a.org/steam/", "title": "Dup", "raw_content": "again"},
            {
                "url": "https://b.org/",
                "title": "B",
                "content": "only a snippet",
                "raw_content": None,
            },
            {"url": "javascript:alert(1)", "title": "Bad", "raw_content": "x"},
            {"url": "https://c.org", "title": "Empty", "content": "", "raw_content": ""},
            {"url": "https://d.org", "raw_content": "No title"},
        ],
    }
    provider = TavilyProvider("tvly-test-key", base_url=url)
    results = await provider.search("steam engine", max_results=5)
    assert results == [
        SearchResult("https://a.org/steam", "Steam", "# Steam\n\nFull page."),
        SearchResult("https://b.org/", "B", "only a snippet"),
        SearchResult("https://d.org", "https://d.org", "No title"),
    ]
    request = state.requests[0]
    assert request["query"] == "steam engine"
    assert request["max_results"] == 5
    assert request["include_raw_content"] == "markdown"
    assert state.headers[0]["Authorization"] == "Bearer tvly-test-key"
    await provider.aclose()


async def test_tavily_empty_results_are_not_an_error(fake_tavily: tuple[FakeTavily, str]) -> None:
    state, url = fake_tavily
    state.body = {"query": "x", "results": []}
    assert await TavilyProvider("k", base_url=url).search("nothing to find") == []


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (401, {"detail": {"error": "Unauthorized: missing or invalid API key."}}, "API key"),
        (429, {"detail": {"error": "Usage limit exceeded"}}, "usage limit"),
        (400, {"detail": {"error": "Query is too long.\nMax 400 characters."}}, "bad request"),
        (432, {"detail": {"error": "Plan limit"}}, "forbidden"),
        (500, {"detail": "boom"}, "HTTP 500"),
        (503, b"<html>Service Unavailable</html>", "HTTP 503"),
        (200, b"not json at all", "unreadable"),
    ],
)
async def test_tavily_http_errors_are_readable(
    fake_tavily: tuple[FakeTavily, str], status: int, body: Any, expected: str
) -> None:
    state, url = fake_tavily
    state.status, state.body = status, body
    with pytest.raises(SearchError) as caught:
        await TavilyProvider("k", base_url=url).search("steam")
    message = str(caught.value)
    assert message.startswith("Tavily search failed: ")
    assert expected.lower() in message.lower()
    assert "\n" not in message and len(message) <= 300


async def test_tavily_timeout_is_readable(fake_tavily: tuple[FakeTavily, str]) -> None:
    state, url = fake_tavily
    state.delay = 2.0
    started = time.perf_counter()
    with pytest.raises(SearchError, match=r"no answer within 0\.3 seconds"):
        await TavilyProvider("k", base_url=url, timeout=0.3).search("slow")
    assert time.perf_counter() - started < 1.5


async def test_tavily_unreachable_is_readable() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(SearchError, match="Tavily search failed: Connect"):
        await TavilyProvider("k", base_url=url).search("steam")


# --- settings --------------------------------------------------------------------------------


def settings_with(**values: object):
    return load_settings(_env_file=None, **values)


def test_auto_is_tavily_with_a_key_and_off_without() -> None:
    provider, status = provider_from_settings(settings_with())
    assert provider is None and status == "off (TAVILY_API_KEY not set)"
    provider, status = provider_from_settings(settings_with(tavily_api_key="tvly-x"))
    assert isinstance(provider, TavilyProvider) and status == "tavily"


def test_pages_provider_from_settings(pages: Path) -> None:
    settings = settings_with(web_search_provider="pages", web_pages_dir=pages)
    provider, status = provider_from_settings(settings)
    assert isinstance(provider, PagesProvider)
    assert status == f"pages in {pages.resolve()} (6 pages)"
    # pages wins over a Tavily key when asked for by name
    provider, _ = provider_from_settings(
        settings_with(web_search_provider="PAGES", web_pages_dir=pages, tavily_api_key="k")
    )
    assert isinstance(provider, PagesProvider)


def test_off_is_off(pages: Path) -> None:
    provider, status = provider_from_settings(
        settings_with(web_search_provider="off", tavily_api_key="k")
    )
    assert provider is None and "off" in status


def test_pages_needs_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SettingsError, match="WEB_PAGES_DIR") as caught:
        settings_with(web_search_provider="pages")
    assert "\n" not in str(caught.value)
    with pytest.raises(SettingsError, match=r"WEB_PAGES_DIR = .*not a folder"):
        settings_with(web_search_provider="pages", web_pages_dir=tmp_path / "missing")
    monkeypatch.setenv("WEB_SEARCH_PROVIDER", "pages")
    monkeypatch.setenv("WEB_PAGES_DIR", "")
    with pytest.raises(SettingsError, match="WEB_PAGES_DIR: must be set"):
        load_settings(_env_file=None)


def test_tavily_needs_a_key_and_unknown_names_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(SettingsError, match="TAVILY_API_KEY"):
        settings_with(web_search_provider="tavily")
    monkeypatch.setenv("WEB_SEARCH_PROVIDER", "bing")
    with pytest.raises(SettingsError, match="WEB_SEARCH_PROVIDER = 'bing'"):
        load_settings(_env_file=None)
    monkeypatch.setenv("WEB_SEARCH_PROVIDER", "")
    assert load_settings(_env_file=None).web_search_provider == "auto"

"""Where web pages come from: one small provider interface, a live one and an offline one.

A provider takes a query and returns up to `max_results` pages as `SearchResult`s whose `content` is
the whole page as Markdown (rag/md_chunker.py cuts it up). Providers:

- `TavilyProvider`: the Tavily search API (tavily-python), full page text as Markdown;
- `PagesProvider`: BM25 over a local folder of Markdown pages, for offline use, demos and tests.

Both de-duplicate results by URL and keep only http(s) URLs (a page is cited by its URL, and only
web links are safe to show as one). Failures the user should hear about (timeouts, HTTP errors,
a rejected key) raise `SearchError` with a one-line message; no results is not a failure: `[]`.

`provider_from_settings` picks the provider from WEB_SEARCH_PROVIDER / TAVILY_API_KEY /
WEB_PAGES_DIR and says in plain words what it picked (or why search is off).

The BM25 helpers (`bm25_tokens`, `BM25Scorer`) live here because both the pages provider and the
chunk ranker (rag/ranker.py) use them, and this module is the one both import.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit, urlunsplit

import numpy as np

if TYPE_CHECKING:
    from core.config import Settings

log = logging.getLogger("resolveai.search")

MAX_RESULTS_LIMIT = 20  # Tavily's own maximum; more pages would not fit a round's budget anyway
TAVILY_TIMEOUT_SECONDS = 20.0
MAX_ERROR_DETAIL_CHARS = 200


@dataclass
class SearchResult:
    """One page found: its address, title and whole text as Markdown."""

    url: str
    title: str
    content: str


class SearchProvider(Protocol):
    name: str

    async def search(self, query: str, max_results: int = 5) -> list[SearchResult]: ...


class SearchError(Exception):
    """The search itself failed (timeout, HTTP error, bad key). The message is one readable line,
    fit to hand back to the model or show to the user."""

    def __init__(self, message: str) -> None:
        super().__init__(_one_line(message, 300))


def _one_line(text: str, limit: int = MAX_ERROR_DETAIL_CHARS) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- URLs ------------------------------------------------------------------------------------


def is_web_url(url: str) -> bool:
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def normalize_url(url: str) -> str:
    """The key two addresses of one page share: lower-case scheme and host, no fragment, no
    trailing slash, no default port."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port
    if port and not ((scheme == "http" and port == 80) or (scheme == "https" and port == 443)):
        host = f"{host}:{port}"
    path = parts.path.rstrip("/")
    return urlunsplit((scheme, host, path, parts.query, ""))


def clean_results(results: Iterable[SearchResult], max_results: int) -> list[SearchResult]:
    """http(s) results only, the first of each URL, at most `max_results`."""
    seen: set[str] = set()
    kept: list[SearchResult] = []
    for result in results:
        if not is_web_url(result.url):
            log.info("search result skipped, not an http(s) URL: %.100s", result.url)
            continue
        key = normalize_url(result.url)
        if key in seen:
            continue
        seen.add(key)
        kept.append(result)
        if len(kept) >= max_results:
            break
    return kept


# --- BM25 ------------------------------------------------------------------------------------

# Lucene's English stop words plus question words: questions are full of "what"/"how many", which
# pages rarely use, so without these BM25 would reward the odd page that does.
_STOPWORD_TEXT = """
    a an and are as at be but by for if in into is it no not of on or such that the their then
    there these they this to was will with what which who whom whose when where why how did do
    does doing done were been being has have had many much i you he she we its his her our your
    can could would should may might
"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())
_TOKEN = re.compile(r"[^\W_]+")


def _stem(word: str) -> str:
    # A light plural stemmer (cats → cat, cities → city); enough for keyword overlap.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def bm25_tokens(text: str) -> list[str]:
    """Lower-cased word tokens without stop words, lightly stemmed."""
    return [_stem(w) for w in _TOKEN.findall(text.lower()) if w not in STOPWORDS]


class BM25Scorer:
    """BM25 (bm25s, Lucene variant) over a fixed list of texts."""

    def __init__(self, texts: Sequence[str]) -> None:
        import bm25s  # imported here: only search rounds need it

        # bm25s sets its own logger to DEBUG on import and narrates every index it builds.
        logging.getLogger("bm25s").setLevel(logging.WARNING)

        self.size = len(texts)
        self._index = bm25s.BM25()
        if texts:
            self._index.index([bm25_tokens(t) for t in texts], show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        """One score per text (0 where no query word occurs)."""
        tokens = bm25_tokens(query)
        if not tokens or not self.size:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._index.get_scores(tokens), dtype=np.float32)


# --- Tavily ----------------------------------------------------------------------------------


class TavilyProvider:
    """The Tavily search API: up to `max_results` pages with their full text as Markdown."""

    name = "tavily"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str | None = None,
        timeout: float = TAVILY_TIMEOUT_SECONDS,
    ) -> None:
        from tavily import AsyncTavilyClient

        self.timeout = timeout
        self._client = AsyncTavilyClient(api_key=api_key, api_base_url=base_url)

    async def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        import httpx
        from tavily import errors

        limit = max(1, min(max_results, MAX_RESULTS_LIMIT))
        try:
            response = await self._client.search(
                query,
                max_results=limit,
                include_raw_content="markdown",
                timeout=self.timeout,
            )
        except errors.TimeoutError:
            raise SearchError(
                f"Tavily search failed: no answer within {self.timeout:g} seconds"
            ) from None
        except errors.InvalidAPIKeyError:
            raise SearchError(
                "Tavily search failed: the API key was rejected (HTTP 401; check TAVILY_API_KEY)"
            ) from None
        except errors.UsageLimitExceededError as error:
            raise SearchError(
                f"Tavily search failed: usage limit reached (HTTP 429) {_one_line(error)}"
            ) from None
        except (errors.ForbiddenError, errors.BadRequestError) as error:
            kind = "forbidden" if isinstance(error, errors.ForbiddenError) else "bad request"
            raise SearchError(f"Tavily search failed: {kind}: {_one_line(error)}") from None
        except httpx.HTTPStatusError as error:
            raise SearchError(
                f"Tavily search failed: HTTP {error.response.status_code} "
                f"{error.response.reason_phrase}"
            ) from None
        except httpx.TimeoutException:
            raise SearchError(
                f"Tavily search failed: no answer within {self.timeout:g} seconds"
            ) from None
        except httpx.HTTPError as error:
            raise SearchError(
                f"Tavily search failed: {type(error).__name__}: {_one_line(error)}"
            ) from None
        except ValueError as error:  # a 200 whose body is not JSON
            raise SearchError(f"Tavily search failed: unreadable answer ({error})") from None
        if not isinstance(response, dict):
            raise SearchError("Tavily search failed: unexpected answer")
        results = []
        for item in response.get("results") or []:
            if not isinstance(item, dict):
                continue
            text = item.get("raw_content") or item.get("content") or ""
            if not str(text).strip():
                continue
            url = str(item.get("url") or "")
            results.append(SearchResult(url, str(item.get("title") or url), str(text)))
        return clean_results(results, limit)

    async def aclose(self) -> None:
        await self._client.close()


# --- local pages -----------------------------------------------------------------------------

_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)", re.DOTALL)
_H1 = re.compile(r"^#\s+(.+)$", re.MULTILINE)


@dataclass
class _Page:
    result: SearchResult
    path: Path


def parse_page(path: Path) -> SearchResult | None:
    """A Markdown page with a front matter block (title, url), or None (logged) without a web URL.

    Front matter is read as simple `key: value` lines rather than YAML, so an unquoted title with
    a colon ("Python: the basics") still reads as written.
    """
    text = path.read_text("utf-8", errors="replace")
    meta: dict[str, str] = {}
    match = _FRONT_MATTER.match(text)
    if match:
        for line in match.group(1).splitlines():
            key, sep, value = line.partition(":")
            if sep:
                meta[key.strip().lower()] = value.strip().strip("\"'")
        text = text[match.end() :]
    url = meta.get("url", "")
    if not is_web_url(url):
        log.warning("web page %s skipped: no http(s) url in its front matter", path)
        return None
    heading = _H1.search(text)
    title = meta.get("title") or (heading.group(1).strip() if heading else path.stem)
    return SearchResult(url=url, title=title, content=text.strip())


class PagesProvider:
    """BM25 over title and text of the `*.md` pages in a folder (searched recursively).

    The folder is treated as read-only: the index is built once per provider instance, at the first
    search, in a worker thread. Pages added later are seen after a restart.
    """

    name = "pages"

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._pages: list[_Page] | None = None
        self._scorer: BM25Scorer | None = None
        self._lock = asyncio.Lock()

    def page_files(self) -> list[Path]:
        return sorted(p for p in self.folder.rglob("*.md") if p.is_file())

    def _build(self) -> None:
        pages = []
        for path in self.page_files():
            try:
                result = parse_page(path)
            except OSError as error:
                log.warning("web page %s skipped: %s", path, error)
                continue
            if result is not None:
                pages.append(_Page(result, path))
        # The title twice: a page whose title names the query's subject is the likelier answer.
        self._scorer = BM25Scorer(
            [f"{p.result.title}\n{p.result.title}\n{p.result.content}" for p in pages]
        )
        self._pages = pages
        log.info("web pages indexed: %d pages in %s", len(pages), self.folder)

    async def _ensure_index(self) -> None:
        if self._pages is None:
            async with self._lock:
                if self._pages is None:
                    await asyncio.to_thread(self._build)

    async def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        await self._ensure_index()
        assert self._pages is not None and self._scorer is not None
        scores = self._scorer.scores(query)
        order = [int(i) for i in np.argsort(-scores, kind="stable") if scores[i] > 0]
        limit = max(1, min(max_results, MAX_RESULTS_LIMIT))
        return clean_results((self._pages[i].result for i in order), limit)


# --- choosing a provider ---------------------------------------------------------------------


def provider_from_settings(settings: Settings) -> tuple[SearchProvider | None, str]:
    """The configured provider (None: web search off) and a plain-language status line.

    Settings validation (core/config.py) already rejected impossible combinations, such as
    WEB_SEARCH_PROVIDER=pages without WEB_PAGES_DIR.
    """
    choice = settings.web_search_provider
    key = settings.secret("TAVILY_API_KEY")
    if choice == "off":
        return None, "off (WEB_SEARCH_PROVIDER=off)"
    if choice == "pages":
        folder = settings.web_pages_dir
        if folder is None:  # validation prevents this; kept for settings built without it
            return None, "off (WEB_PAGES_DIR not set)"
        provider = PagesProvider(folder)
        count = len(provider.page_files())
        return provider, f"pages in {folder.resolve()} ({count} pages)"
    if key:
        return TavilyProvider(key), "tavily"
    if choice == "tavily":
        return None, "off (WEB_SEARCH_PROVIDER=tavily but TAVILY_API_KEY not set)"
    return None, "off (TAVILY_API_KEY not set)"

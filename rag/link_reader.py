"""Reading the pages a user links to: fetched safely, turned into Markdown for the web pipeline.

- Which links: the http(s) URLs written in the user's message (`links_in`), at most MAX_LINKS.
- Safety (SSRF): ssrfguard's AsyncClient resolves a host once, refuses the name when any answer is
  loopback, private, link-local, cloud metadata or otherwise not public (IPv6 and IPv4-mapped forms
  decoded; decimal, octal and short IPv4 spellings refused in the URL itself), and connects to the
  address it validated, so a DNS answer that changes between the check and the connect (rebinding)
  cannot move it. Every redirect hop is a new request through the same check. Proxies from the
  environment are not used: a proxy resolves the name itself, out of the check's reach.
  LINK_ALLOWED_NETWORKS and LINK_ALLOWED_PORTS widen what is reachable (an intranet wiki).
- Limits: MAX_BYTES read, TIMEOUT_SECONDS for the whole fetch (robots.txt included), and only
  HTML, Markdown, plain text and PDF.
- Manners: a User-Agent naming ResolveAI; the origin's robots.txt is read first and obeyed for it
  (RFC 9309: no file allows everything, a file that cannot be fetched (5xx) disallows everything).
- Conversion: HTML → the page's main text as Markdown with trafilatura, which drops navigation,
  link targets and footers (bench/link_html.py on 8 real pages: it kept 48-94% of the characters
  of the whole page, in about 0.6-0.7 of the time), with the documents' BeautifulSoup converter as
  the fallback when it finds no main text; PDF, Markdown and text → the documents' converter in
  its limited process.

A link that cannot be read raises `LinkError` with one sentence fit for the model and the user.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import ipaddress
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit
from urllib.robotparser import RobotFileParser

import httpx
from ssrfguard import Policy, SSRFGuardError
from ssrfguard.httpx import AsyncClient

from rag.conversion_process import convert_in_subprocess
from rag.document_convert import DocumentRejected, html_to_markdown
from rag.search_providers import SearchResult

log = logging.getLogger("resolveai.links")

MAX_LINKS = 3  # per message: each is read in full, and the local model reads ~6 chunks in all
MAX_BYTES = 5_000_000
TIMEOUT_SECONDS = 20.0
MAX_REDIRECTS = 5
MAX_URL_CHARS = 2000
USER_AGENT_TOKEN = "ResolveAI"
USER_AGENT = f"Mozilla/5.0 (compatible; {USER_AGENT_TOKEN}/1.0; reads links its user shares)"
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
# A URL ends at whitespace, a quote or an angle bracket; trailing punctuation belongs to the
# sentence ("see https://example.com/a.").
_URL = re.compile(r"https?://[^\s<>\"'`]+", re.IGNORECASE)
_TRAILING = ".,;:!?)]}*_"
_KINDS = {
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/plain": "text",
    "application/pdf": "pdf",
}


class LinkError(Exception):
    """A link could not be read; the message is one sentence for the model and the user."""


@dataclass(frozen=True)
class LinkPolicy:
    """What links may reach: networks and ports allowed beyond the public internet's 80/443."""

    allowed_networks: Sequence[ipaddress.IPv4Network | ipaddress.IPv6Network] = ()
    allowed_ports: Sequence[int] = (80, 443)

    def guard(self) -> Policy:
        return Policy(
            allowed_networks=frozenset(self.allowed_networks),
            allowed_ports=frozenset(self.allowed_ports),
            max_redirects=MAX_REDIRECTS,
            max_url_length=MAX_URL_CHARS,
        )


@dataclass
class ReadPages:
    """Pages already read, as a search provider: the web round ranks, cites and answers from them
    as it does from search results."""

    pages: list[SearchResult]
    name: str = "links"

    async def search(self, query: str, max_results: int = 5) -> list[SearchResult]:
        return self.pages


def links_in(text: str, limit: int = MAX_LINKS) -> list[str]:
    """The distinct http(s) links written in a message, in order, at most `limit`."""
    found: list[str] = []
    for match in _URL.finditer(text):
        url = match.group(0)
        # A closing bracket is the sentence's unless the URL opened one: /wiki/Foo_(bar)
        while url[-1] in _TRAILING and not (url[-1] == ")" and url.count("(") >= url.count(")")):
            url = url[:-1]
        if url not in found and urlsplit(url).hostname:
            found.append(url)
    return found[:limit]


def without_links(text: str) -> str:
    """The message with each link written as "the linked page": a small model answering from the
    pages' sources connects "the linked page" to them, and not an address it cannot see in them
    (measured: the local model said it "couldn't find" a fact that the page's one chunk stated)."""
    return _URL.sub("the linked page", text)


async def read_link(url: str, policy: LinkPolicy) -> SearchResult:
    """The page at `url` as Markdown (its address after redirects, its title, its text)."""
    guard = policy.guard()
    try:
        guard.check_url(url)  # no I/O: a URL refused as written is refused before any lookup
        async with asyncio.timeout(TIMEOUT_SECONDS):
            async with AsyncClient(
                policy=guard,
                trust_env=False,
                follow_redirects=True,
                max_redirects=MAX_REDIRECTS,
                headers={"User-Agent": USER_AGENT},
                timeout=TIMEOUT_SECONDS,
            ) as client:
                await _check_robots(client, url)
                final_url, kind, data = await _download(client, url)
    except SSRFGuardError as error:
        raise LinkError(f"I did not read {url}: {_refusal(error, url, policy)}.") from error
    except TimeoutError as error:
        late = f"it took longer than {TIMEOUT_SECONDS:.0f} s"
        raise LinkError(f"I could not read {url}: {late}.") from error
    except httpx.InvalidURL as error:
        raise LinkError(f"I could not read {url}: it is not a valid web address.") from error
    except httpx.TooManyRedirects as error:
        raise LinkError(f"I could not read {url}: it redirects too many times.") from error
    except httpx.HTTPError as error:
        raise LinkError(f"I could not read {url}: {_network_failure(error)}.") from error
    try:
        title, markdown = await _to_markdown(kind, data)
    except DocumentRejected as error:
        raise LinkError(f"I could not read {url}: {error}") from error
    if not markdown.strip():
        raise LinkError(f"I could not read {url}: the page has no text in it.")
    log.info("Link read: %s (%s, %d bytes → %d chars)", final_url, kind, len(data), len(markdown))
    return SearchResult(url=final_url, title=title or _title_from_url(final_url), content=markdown)


async def _check_robots(client: AsyncClient, url: str) -> None:
    parts = urlsplit(url)
    robots_url = f"{parts.scheme}://{parts.netloc}/robots.txt"
    try:
        response = await client.get(robots_url)
    except httpx.HTTPError:
        return  # no answer at all: the page's own fetch will say what is wrong
    if response.status_code >= 500:
        raise LinkError(f"I did not read {url}: its site's robots.txt could not be fetched.")
    if response.status_code != 200:
        return  # RFC 9309: a missing robots.txt allows everything
    rules = RobotFileParser()
    rules.parse(response.text[:500_000].splitlines())
    if not rules.can_fetch(USER_AGENT_TOKEN, url):
        raise LinkError(f"I did not read {url}: its site's robots.txt asks bots not to.")


async def _download(client: AsyncClient, url: str) -> tuple[str, str, bytes]:
    async with client.stream("GET", url) as response:
        if response.status_code >= 400:
            reason = "it was not found" if response.status_code in (404, 410) else None
            raise LinkError(
                f"I could not read {url}: {reason or f'the site answered {response.status_code}'}."
            )
        media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        kind = _KINDS.get(media_type)
        if kind is None:
            raise LinkError(
                f"I could not read {url}: it is {media_type or 'of an unknown type'}, and I read"
                " web pages, Markdown, text and PDF."
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > MAX_BYTES:
                raise LinkError(
                    f"I could not read {url}: it is larger than {MAX_BYTES // 1_000_000} MB."
                )
            chunks.append(chunk)
        charset = response.charset_encoding or "utf-8"
        data = b"".join(chunks)
        if kind != "pdf":
            data = data.decode(charset, errors="replace").encode("utf-8")
        return str(response.url), kind, data


async def _to_markdown(kind: str, data: bytes) -> tuple[str, str]:
    if kind == "html":
        return await asyncio.to_thread(_html_page, data.decode("utf-8"))
    extension = {"markdown": "md", "text": "txt"}.get(kind, kind)
    converted = await convert_in_subprocess(data, f"page.{extension}")
    markdown = "\n\n".join(page.markdown for page in converted.pages)
    heading = re.search(r"^#\s+(.+)$", markdown, re.MULTILINE)
    return (heading.group(1).strip() if heading else ""), markdown


def _html_page(page: str) -> tuple[str, str]:
    """In a thread: the title and the main text as Markdown."""
    import trafilatura

    match = _TITLE.search(page[:200_000])
    title = " ".join(html.unescape(match.group(1)).split()) if match else ""
    main = trafilatura.extract(
        page, output_format="markdown", include_tables=True, include_links=False
    )
    return title[:300], main if main and main.strip() else html_to_markdown(page)


def _title_from_url(url: str) -> str:
    parts = urlsplit(url)
    path = parts.path.rstrip("/").rsplit("/", 1)[-1]
    return f"{parts.hostname}{' · ' + path if path else ''}"


def _refusal(error: SSRFGuardError, url: str, policy: LinkPolicy) -> str:
    """Why the guard refused, in the user's words (the guard's own message is for developers).

    The guard checks the port before the address: a link to http://127.0.0.1:8080/ is refused
    for its address, the reason that matters, not for its port."""
    text = str(error)
    if "allowed_ports" in text:
        any_port = dataclasses.replace(policy.guard(), allowed_ports=frozenset(range(1, 65536)))
        try:
            any_port.check_url(url)
        except SSRFGuardError as deeper:
            text = str(deeper)
    if "allowed_ports" in text:
        *others, last = [str(port) for port in sorted(policy.allowed_ports)]
        ports = f"{', '.join(others)} or {last}" if others else last
        return f"links may only use the web's ports ({ports})"
    if "scheme" in text:
        return "only http and https links are read"
    if "redirect" in text:
        return "it redirects too many times"
    return (
        "it leads to a private or local network address, which ResolveAI does not fetch"
        " (only public web pages are read)"
    )


def _network_failure(error: httpx.HTTPError) -> str:
    if isinstance(error, httpx.TimeoutException):
        return "the site did not answer in time"
    if isinstance(error, httpx.ConnectError):
        return "the site could not be reached"
    return "the connection failed"

"""Reading the links a user gives: the SSRF guard, the limits, and the turn that answers from them.

Pages are served by real HTTP servers on loopback addresses that record every request, so "refused
with no request made" is checked at the server. The app allows 127.0.0.1 and its test port only
through its own settings (LINK_ALLOWED_NETWORKS / LINK_ALLOWED_PORTS): the hook a deployment uses
for an intranet. The turn runs through the real server with the scripted model.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from core.config import PROJECT_ROOT, Settings
from core.prompts import LINKS_UNREAD_NOTE
from core.services import Services
from rag import link_reader
from rag.link_reader import LinkError, LinkPolicy, links_in, read_link
from tests.chat_client import messages_of, read_events, send, serve

PDF = (
    Path(os.environ.get("PDF_SAMPLES_DIR", PROJECT_ROOT.parent / "shared" / "docs" / "pdf-samples"))
    / "004-pdflatex-4-pages"
    / "pdflatex-4-pages.pdf"
)

OTTERS = (
    "<!doctype html><html><head><title>Sea otters &amp; kelp</title></head><body>"
    "<nav><a href='/'>Home</a> <a href='/about'>About us</a> <a href='/shop'>Shop</a></nav>"
    "<article><h1>Sea otters</h1><p>Sea otters hold hands while they sleep so that they do not"
    " drift apart; a group of resting otters is called a raft. They live along the coasts of"
    " the North Pacific and eat sea urchins, crabs and clams.</p><p>An adult sea otter has about"
    " one million hairs per square inch, the densest fur of any animal.</p></article>"
    "<footer>Copyright 2026 Example Wildlife. All rights reserved.</footer></body></html>"
)


class Site:
    """A real HTTP server on one loopback address that records the paths it was asked for."""

    def __init__(self, host: str, routes: dict[str, tuple[int, dict[str, str], bytes]]) -> None:
        self.requests: list[str] = []
        self.routes = routes
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name for it
                site.requests.append(self.path)
                status, headers, body = site.routes.get(
                    self.path, (404, {"Content-Type": "text/plain"}, b"not found")
                )
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def html(body: str) -> tuple[int, dict[str, str], bytes]:
    return 200, {"Content-Type": "text/html; charset=utf-8"}, body.encode()


@pytest.fixture
def internal() -> Iterator[Site]:
    """A server standing for an internal service: nothing may ever reach it."""
    site = Site("127.0.0.2", {"/": html("secret admin page"), "/secret": html("secret")})
    yield site
    site.close()


@pytest.fixture
def site(internal: Site) -> Iterator[Site]:
    """The allowed test site on 127.0.0.1, with a redirect into the internal server."""
    site = Site(
        "127.0.0.1",
        {
            "/otters.html": html(OTTERS),
            "/notes.md": (200, {"Content-Type": "text/markdown"}, b"# Notes\n\nKelp grows fast."),
            "/picture.png": (200, {"Content-Type": "image/png"}, b"\x89PNG\r\n\x1a\n" + b"0" * 64),
            "/to-internal": (302, {"Location": f"http://127.0.0.2:{internal.port}/secret"}, b""),
            "/to-otters": (301, {"Location": "/otters.html"}, b""),
            "/big.txt": (200, {"Content-Type": "text/plain"}, b"a" * 4096),
            "/doc.pdf": (200, {"Content-Type": "application/pdf"}, PDF.read_bytes())
            if PDF.exists()
            else (404, {}, b""),
        },
    )
    yield site
    site.close()


def allowing(site: Site) -> LinkPolicy:
    return LinkPolicy([ipaddress.ip_network("127.0.0.1/32")], [80, 443, site.port])


# --- which links -------------------------------------------------------------------------------


def test_links_are_found_in_a_message_without_the_sentence_around_them() -> None:
    text = (
        "Compare https://example.com/a. with (see http://en.wikipedia.org/wiki/Foo_(bar)) and"
        " <https://example.com/b>, again https://example.com/a! Not ftp://example.com/c or"
        " www.example.com."
    )
    assert links_in(text) == [
        "https://example.com/a",
        "http://en.wikipedia.org/wiki/Foo_(bar)",
        "https://example.com/b",
    ]
    assert links_in(
        "https://a.example/1 https://a.example/2 https://a.example/3 https://a.example/4"
    ) == [
        "https://a.example/1",
        "https://a.example/2",
        "https://a.example/3",
    ]
    assert links_in("No link here, just http:// and text.") == []


# --- the SSRF guard ------------------------------------------------------------------------------

INTERNAL_SPELLINGS = [
    "http://127.0.0.1:{port}/",
    "http://localhost:{port}/",  # a DNS name that resolves to 127.0.0.1
    "http://2130706433:{port}/",  # 127.0.0.1 as one decimal number
    "http://0177.0.0.1:{port}/",  # octal
    "http://0x7f.0.0.1:{port}/",  # hexadecimal
    "http://127.1:{port}/",  # short form
    "http://[::1]:{port}/",
    "http://[::ffff:127.0.0.1]:{port}/",  # IPv4-mapped IPv6
    "http://[0:0:0:0:0:ffff:7f00:1]:{port}/",
    "http://0.0.0.0:{port}/",
]


@pytest.mark.parametrize("spelling", INTERNAL_SPELLINGS)
async def test_a_link_to_loopback_is_refused_in_any_spelling_with_no_request_made(
    spelling: str,
) -> None:
    target = Site("127.0.0.1", {"/": html("internal")})
    try:
        url = spelling.format(port=target.port)
        policy = LinkPolicy(allowed_ports=[80, 443, target.port])  # the port is not the reason
        with pytest.raises(LinkError) as refused:
            await read_link(url, policy)
        assert "private or local network address" in str(refused.value)
        assert str(refused.value).startswith(f"I did not read {url}")
        assert target.requests == []
    finally:
        target.close()


async def test_a_loopback_link_on_another_port_is_refused_for_its_address() -> None:
    """The address is the reason that matters, though the port is not allowed either."""
    with pytest.raises(LinkError) as refused:
        await read_link("http://127.0.0.1:8080/admin", LinkPolicy())
    assert str(refused.value) == (
        "I did not read http://127.0.0.1:8080/admin: it leads to a private or local network"
        " address, which ResolveAI does not fetch (only public web pages are read)."
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://10.1.2.3/",
        "http://172.16.0.1/",
        "http://192.168.1.1/admin",
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata
        "http://100.64.0.1/",  # carrier-grade NAT
        "http://[fe80::1]/",
        "http://[fd00::1]/",
        "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 form of the metadata address
        "http://[::ffff:10.0.0.1]/",
    ],
)
async def test_links_to_private_networks_are_refused(url: str) -> None:
    with pytest.raises(LinkError, match="private or local network address"):
        await read_link(url, LinkPolicy())


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.com/file", "only http and https links are read"),
        ("file:///etc/passwd", "only http and https links are read"),
        ("http://example.com:6379/", "links may only use the web's ports (80 or 443)"),
    ],
)
async def test_other_schemes_and_ports_are_refused(url: str, reason: str) -> None:
    with pytest.raises(LinkError) as refused:
        await read_link(url, LinkPolicy())
    assert str(refused.value) == f"I did not read {url}: {reason}."


async def test_a_redirect_to_an_internal_address_is_refused_before_it_is_followed(
    site: Site, internal: Site
) -> None:
    # Its port allowed too: the address is what refuses it.
    policy = LinkPolicy([ipaddress.ip_network("127.0.0.1/32")], [site.port, internal.port])
    with pytest.raises(LinkError, match="private or local network address"):
        await read_link(f"http://127.0.0.1:{site.port}/to-internal", policy)
    assert site.requests[-1] == "/to-internal"
    assert internal.requests == []


# --- reading an allowed page ---------------------------------------------------------------------


async def test_an_allowed_page_is_read_as_its_main_text(site: Site) -> None:
    page = await read_link(f"http://127.0.0.1:{site.port}/to-otters", allowing(site))
    assert page.url == f"http://127.0.0.1:{site.port}/otters.html"  # where the redirect led
    assert page.title == "Sea otters & kelp"
    assert "Sea otters hold hands while they sleep" in page.content
    assert "one million hairs" in page.content
    assert "Shop" not in page.content and "All rights reserved" not in page.content
    assert site.requests == ["/robots.txt", "/to-otters", "/otters.html"]


async def test_markdown_and_pdf_links_are_read(site: Site) -> None:
    notes = await read_link(f"http://127.0.0.1:{site.port}/notes.md", allowing(site))
    assert (notes.title, notes.content.strip()) == ("Notes", "# Notes\n\nKelp grows fast.")
    if not PDF.exists():
        pytest.fail(f"pypdf's sample PDFs are not in {PDF.parent.parent}")
    pdf = await read_link(f"http://127.0.0.1:{site.port}/doc.pdf", allowing(site))
    assert len(pdf.content) > 1000


async def test_robots_txt_is_obeyed(site: Site) -> None:
    site.routes["/robots.txt"] = (
        200,
        {"Content-Type": "text/plain"},
        b"User-agent: *\nDisallow: /",
    )
    with pytest.raises(LinkError, match=r"robots\.txt asks bots not to"):
        await read_link(f"http://127.0.0.1:{site.port}/otters.html", allowing(site))
    assert site.requests == ["/robots.txt"]
    site.routes["/robots.txt"] = (
        200,
        {"Content-Type": "text/plain"},
        b"User-agent: ResolveAI\nDisallow: /private/\n",
    )
    page = await read_link(f"http://127.0.0.1:{site.port}/otters.html", allowing(site))
    assert "raft" in page.content


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/picture.png", "it is image/png, and I read web pages, Markdown, text and PDF"),
        ("/missing.html", "it was not found"),
    ],
)
async def test_unreadable_links_say_why(site: Site, path: str, reason: str) -> None:
    url = f"http://127.0.0.1:{site.port}{path}"
    with pytest.raises(LinkError) as refused:
        await read_link(url, allowing(site))
    assert str(refused.value) == f"I could not read {url}: {reason}."


async def test_a_page_over_the_size_cap_is_refused(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(link_reader, "MAX_BYTES", 1000)
    with pytest.raises(LinkError, match="larger than"):
        await read_link(f"http://127.0.0.1:{site.port}/big.txt", allowing(site))


# --- settings ------------------------------------------------------------------------------------


def test_links_are_read_unless_the_web_is_configured_away() -> None:
    def reads(**changes: Any) -> bool:
        return Settings(_env_file=None, **changes).reads_links

    assert reads()  # the keyless default: no search provider, links still read
    assert not reads(web_search_provider="off")
    assert not reads(web_search_provider="pages", web_pages_dir=PROJECT_ROOT)
    assert reads(web_search_provider="off", link_reading="on")
    assert not reads(link_reading="off")
    with pytest.raises(ValueError, match="link_allowed_ports"):
        Settings(_env_file=None, link_allowed_ports="80,70000")
    networks = Settings(_env_file=None, link_allowed_networks="10.1.0.0/16, fd00::/8")
    assert [str(n) for n in networks.link_allowed_networks] == ["10.1.0.0/16", "fd00::/8"]


# --- the turn ------------------------------------------------------------------------------------


@pytest.fixture
async def link_services(
    chat_services: Services, site: Site, internal: Site
) -> AsyncIterator[Services]:
    """The app's services reading links, with the test site's address allowed, and the ports of
    both servers (the internal one's address is what refuses it)."""
    changed = chat_services.settings.model_copy(
        update={
            "link_reading": "on",
            "link_allowed_networks": [ipaddress.ip_network("127.0.0.1/32")],
            "link_allowed_ports": [80, 443, site.port, internal.port],
        }
    )
    yield dataclasses.replace(chat_services, settings=changed)


@pytest.fixture
async def link_client(link_services: Services) -> AsyncIterator[Any]:
    import httpx

    async with serve(link_services) as url, httpx.AsyncClient(base_url=url, timeout=120) as http:
        yield http


def steps(events: list[dict[str, Any]]) -> list[str]:
    return [e["text"] for e in events if e["type"] == "step"]


async def test_a_linked_page_is_read_and_cited(link_client, model, site: Site) -> None:
    url = f"http://127.0.0.1:{site.port}/otters.html"
    model.push({"text": "Sea otters hold hands so they do not drift apart [1]."})
    events = await send(link_client, f"Why do the otters in {url} hold hands?")
    assert f"Reading {url}" in steps(events)
    assert "Writing the answer from 1 source" in steps(events)
    assert not [s for s in steps(events) if re.search(r"\b1 (pages|chunks|sources)\b", s)]
    sources = next(e for e in events if e["type"] == "sources")["sources"]
    assert [(s["n"], s["url"], s["title"]) for s in sources] == [(1, url, "Sea otters & kelp")]
    assert "hold hands" in sources[0]["text"]
    # No model chose to fetch: the turn read the link, then one call wrote the answer from it.
    assert [c["model"] for c in model.calls] == ["chat"]
    prompt = model.calls[0]["messages"][-1]["content"]
    assert '<source n="1" title="Sea otters & kelp">' in prompt
    assert "raft" in prompt
    saved = (await messages_of(link_client, events[0]["chat_id"]))[1]
    assert saved["content"] == "Sea otters hold hands so they do not drift apart [1]."
    assert saved["sources"] == sources
    assert saved["tool_calls"][0]["name"] == "fetch_url"


async def test_a_stopped_answer_from_a_link_continues_without_reading_it_again(
    link_client, model, site: Site
) -> None:
    url = f"http://127.0.0.1:{site.port}/otters.html"
    model.push(
        {"text": "Sea otters hold hands [1] " + "so they stay together " * 40, "delay": 0.05}
    )
    async with link_client.stream(
        "POST", "/api/messages", json={"content": f"Why do the otters in {url} hold hands?"}
    ) as response:
        streamed = []
        async for event in read_events(response):
            if event["type"] == "chat":
                chat_id = event["chat_id"]
            elif event["type"] == "token":
                streamed.append(event["text"])
                if len(streamed) == 6:
                    assert (await link_client.post(f"/api/chats/{chat_id}/stop")).status_code == 200
    stopped = (await messages_of(link_client, chat_id))[1]
    assert stopped["status"] == "interrupted" and stopped["sources"][0]["url"] == url
    model.reset()
    model.push({"text": " and sleep."})
    async with link_client.stream(
        "POST", f"/api/chats/{chat_id}/messages/{stopped['message_id']}/continue"
    ) as response:
        assert response.status_code == 200
        events = [e async for e in read_events(response)]
    assert f"Reading {url}" not in steps(events)
    assert [c["model"] for c in model.calls] == ["chat"]  # no page read, one call goes on
    saved = (await messages_of(link_client, chat_id))[1]
    assert saved["content"] == stopped["content"].rstrip() + " and sleep."
    assert saved["sources"] == stopped["sources"]  # its [1] still the page it read


async def test_a_link_to_an_internal_address_is_refused_with_a_reason_the_user_sees(
    link_client, model, internal: Site
) -> None:
    url = f"http://127.0.0.2:{internal.port}/"
    model.push({"text": "I could not open that link: it points to a private address."})
    events = await send(link_client, f"What does {url} say?")
    refusal = (
        f"I did not read {url}: it leads to a private or local network address, which"
        " ResolveAI does not fetch (only public web pages are read)."
    )
    assert refusal in steps(events)
    assert internal.requests == []
    done = events[-1]
    assert done["type"] == "done" and refusal in done["notes"]
    # The model read the refusal, and what to do about it, and answered from it.
    tool_message = model.calls[0]["messages"][-1]
    assert tool_message["role"] == "tool"
    told = json.loads(tool_message["content"])
    assert "private or local network" in told["error"]
    assert told["next"].startswith("Say in one sentence that the link could not be read")


async def test_links_are_not_read_when_the_server_does_not_read_them(
    client, model, site: Site
) -> None:
    """conftest's server: LINK_READING=off. The link is text; nothing is fetched, and both the
    user and the model are told so (the local model otherwise answered "I couldn't find
    information about this part", or would guess what the page says)."""
    model.push({"text": "I can't open links here."})
    events = await send(client, f"Summarise http://127.0.0.1:{site.port}/otters.html")
    assert not any(s.startswith("Reading http") for s in steps(events))
    assert site.requests == []
    assert [c["model"] for c in model.calls] == ["chat"]
    unread = (
        "The link in your message was not opened: reading links is off on this server"
        " (LINK_READING in .env)."
    )
    assert unread in steps(events) and unread in events[-1]["notes"]
    assert LINKS_UNREAD_NOTE in model.calls[0]["messages"][-1]["content"]
    # A message without a link says nothing of links.
    model.push({"text": "Otters hold hands."})
    events = await send(client, "Why do otters hold hands?")
    assert unread not in steps(events) and events[-1]["notes"] == []
    assert LINKS_UNREAD_NOTE not in model.calls[-1]["messages"][-1]["content"]


async def test_a_hosted_model_can_call_fetch_url(
    link_services: Services, link_client, model, site: Site
) -> None:
    url = f"http://127.0.0.1:{site.port}/notes.md"
    model.push(
        {"tool_calls": [{"name": "fetch_url", "arguments": {"urls": [url]}}]},
        {"text": "Kelp grows fast [1]."},
    )
    events = await send(link_client, "What do my notes page say about kelp?")
    assert "fetch_url" in [t["function"]["name"] for t in model.calls[0]["tools"]]
    assert next(e for e in events if e["type"] == "sources")["sources"][0]["url"] == url
    assert "".join(e["text"] for e in events if e["type"] == "token") == "Kelp grows fast [1]."

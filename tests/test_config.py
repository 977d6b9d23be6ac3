"""Settings: defaults, blank values, errors that name the setting, and .env.example coverage."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.config import PROJECT_ROOT, Settings, SettingsError, load_settings


def test_defaults_need_no_configuration() -> None:
    settings = load_settings(_env_file=None)
    assert settings.app_host == "127.0.0.1"
    assert settings.app_port == 8000
    assert settings.app_data_dir == Path("./data")
    assert settings.database_url is None
    assert settings.embed_model_name == "all-MiniLM-L6-v2"
    assert settings.models_config == PROJECT_ROOT / "core" / "models.yaml"
    assert not settings.langfuse_enabled


def test_invalid_value_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APP_PORT", "eighty")
    with pytest.raises(SettingsError) as caught:
        load_settings(_env_file=None)
    message = str(caught.value)
    assert "APP_PORT" in message and "eighty" in message
    assert "\n" not in message


def test_database_url_must_be_postgres(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://root@localhost/db")
    with pytest.raises(SettingsError, match="DATABASE_URL"):
        load_settings(_env_file=None)


def test_blank_lines_in_env_file_mean_default(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("GROQ_API_KEY=\nMODELS_CONFIG=\nLOCAL_MODEL_THREADS=\nDATABASE_URL=\n")
    settings = Settings(_env_file=env_file)
    assert settings.groq_api_key is None
    assert settings.local_model_threads is None
    assert settings.database_url is None
    assert settings.models_config == PROJECT_ROOT / "core" / "models.yaml"


def test_keys_from_env_file_are_readable_by_env_name(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("GROQ_API_KEY=gsk-123\nLANGFUSE_PUBLIC_KEY=pk\nLANGFUSE_SECRET_KEY=sk\n")
    settings = Settings(_env_file=env_file)
    assert settings.secret("GROQ_API_KEY") == "gsk-123"
    assert settings.secret("GEMINI_API_KEY") is None
    assert settings.langfuse_enabled
    assert "gsk-123" not in repr(settings)


def test_env_example_lists_every_setting_with_its_default() -> None:
    example = (PROJECT_ROOT / ".env.example").read_text()
    listed = dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", example, flags=re.MULTILINE))
    fields = {name.upper() for name in Settings.model_fields}
    assert set(listed) == fields
    defaults = Settings(_env_file=PROJECT_ROOT / ".env.example")
    assert defaults == load_settings(_env_file=None)


@pytest.mark.parametrize(
    "url",
    [
        "mysql://root:hunter2secret@localhost/db",
        "redis://:hunter2secret@cache:6379/0",
        "sqlite:///db?password=hunter2secret",
        "mongodb+srv://app:hunter2secret@cluster0.example.net/app",
    ],
)
def test_a_refused_database_url_never_shows_its_password(url: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(_env_file=None, database_url=url)
    message = str(caught.value)
    assert "DATABASE_URL" in message and "hunter2secret" not in message
    assert url.split("://")[0] in message  # still says what was given, masked


def test_settings_secrets_are_masked_in_every_log_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import logging

    from core.logs import configure_logging

    monkeypatch.setenv("MY_PROXY_TOKEN", "tok-env-0123456789")
    settings = load_settings(
        _env_file=None,
        groq_api_key="gsk_live_0123456789abcdef",
        database_url="postgresql://app:pg-pass-0123@db.example.com/app",
    )
    assert settings.groq_api_key is not None
    root = logging.getLogger()
    kept = (root.handlers[:], root.level)
    configure_logging()
    try:
        log = logging.getLogger("resolveai.test")
        log.warning("provider said: Invalid API key gsk_live_0123456789abcdef for this request")
        log.warning(
            "GET https://generativelanguage.googleapis.com/v1/models?key=AIzaSyD-xyz123&alt=sse"
        )
        log.warning("proxy %s answered 407", "tok-env-0123456789")
        log.warning("libpq: password=pg-pass-0123 host=db.example.com")
        try:
            raise RuntimeError("connect to amqp://guest:rabbit-pass-99@mq:5672/ failed")
        except RuntimeError:
            log.exception("worker crashed")
    finally:
        root.handlers[:], level = kept
        root.setLevel(level)
    printed = capsys.readouterr().err
    for secret in ("gsk_live_0123456789abcdef", "AIzaSyD-xyz123", "tok-env-0123456789",
                   "pg-pass-0123", "rabbit-pass-99"):  # fmt: skip
        assert secret not in printed, printed
    assert printed.count("***") >= 6  # masked, not dropped
    assert "Traceback" in printed and "worker crashed" in printed

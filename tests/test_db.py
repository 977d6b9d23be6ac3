"""Tests of core/db.py and core/memory_store.py against a real embedded Postgres (no mocks)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from core import chat_store, memory_store
from core.config import PROJECT_ROOT, Settings, load_settings
from core.db import (
    Database,
    DatabaseUnavailable,
    check_database_url,
    load_migrations,
    mask_conninfo,
    migrate,
)
from core.embedded_postgres import automatic_shared_buffers_mb
from core.statements import fetch_one
from tests.conftest import STANDALONE_URL


def unit_vector(*nonzero: tuple[int, float]) -> np.ndarray:
    """A normalized 384-number vector with the given (index, value) entries."""
    vector = np.zeros(384, dtype=np.float32)
    for index, value in nonzero:
        vector[index] = value
    return vector / np.linalg.norm(vector)


async def open_pool(conninfo: str) -> AsyncConnectionPool:
    """A small pool on another database, configured like the app's (pgvector registered)."""
    from core.db import _configure_connection

    pool = AsyncConnectionPool(
        conninfo, min_size=1, max_size=4, open=False, configure=_configure_connection
    )
    await pool.open(wait=True, timeout=10)
    return pool


# ---------------------------------------------------------------------------------------------
# Migrations


async def test_migrations_create_tables_and_record_each_version(pool: AsyncConnectionPool) -> None:
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
        tables = {row[0] for row in await cursor.fetchall()}
        cursor = await conn.execute("SELECT version, name FROM schema_migrations ORDER BY version")
        recorded = await cursor.fetchall()
        cursor = await conn.execute("SELECT extname FROM pg_extension WHERE extname = 'vector'")
        extension = await cursor.fetchone()

    assert {"chats", "messages", "memories", "schema_migrations"} <= tables
    expected = [(m.version, m.name) for m in load_migrations()]
    assert recorded == expected
    assert recorded[0] == (1, "0001_init")
    assert extension == ("vector",)


async def test_migrate_twice_applies_nothing_the_second_time(database: Database) -> None:
    assert await migrate(database.conninfo) == []
    async with database.pool.connection() as conn:
        cursor = await conn.execute("SELECT count(*) FROM schema_migrations")
        assert await cursor.fetchone() == (len(load_migrations()),)


async def test_concurrent_migrations_on_a_fresh_database_apply_each_once(
    fresh_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="resolveai.db")
    results = await asyncio.gather(*(migrate(fresh_database) for _ in range(4)))

    names = [m.name for m in load_migrations()]
    applied = [name for result in results for name in result]
    assert sorted(applied) == sorted(names)  # each migration applied by exactly one caller
    assert sum(1 for result in results if result) == 1  # ... and all by the same one
    async with await psycopg.AsyncConnection.connect(fresh_database) as conn:
        cursor = await conn.execute("SELECT version, name FROM schema_migrations ORDER BY version")
        assert await cursor.fetchall() == [(m.version, m.name) for m in load_migrations()]
    logged = [r.getMessage() for r in caplog.records if r.name == "resolveai.db"]
    assert logged == [f"Database: applied migration {name}" for name in names]


# ---------------------------------------------------------------------------------------------
# pgvector and memories


async def test_pgvector_orders_by_cosine_distance(memory_pool: AsyncConnectionPool) -> None:
    # A database of its own: an app started later on a shared one would re-embed these rows of
    # another model with the real embedder (memory_store.reembed_stale_memories), and "near" would
    # then be recalled in other tests' chats.
    pool = memory_pool
    model = f"test-order-{uuid.uuid4().hex}"
    near = await memory_store.add_memory(pool, "near", unit_vector((0, 1.0), (1, 0.1)), model)
    far = await memory_store.add_memory(pool, "far", unit_vector((1, 1.0)), model)
    middle = await memory_store.add_memory(pool, "middle", unit_vector((0, 1.0), (1, 1.0)), model)

    query = unit_vector((0, 1.0))
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT memory_id, embedding <=> %s AS distance FROM memories"
            " WHERE embed_model = %s ORDER BY embedding <=> %s",
            (query, model, query),
        )
        rows = await cursor.fetchall()
        cursor = await conn.execute(
            "SELECT embedding FROM memories WHERE memory_id = %s", (near["memory_id"],)
        )
        stored = await cursor.fetchone()

    assert [row[0] for row in rows] == [near["memory_id"], middle["memory_id"], far["memory_id"]]
    assert rows[0][1] == pytest.approx(1 - float(unit_vector((0, 1.0), (1, 0.1))[0]), abs=1e-5)
    assert rows[2][1] == pytest.approx(1.0, abs=1e-6)  # orthogonal
    # The adapter registered on pooled connections turns `vector` back into numbers.
    assert stored is not None
    np.testing.assert_allclose(stored[0].to_numpy(), unit_vector((0, 1.0), (1, 0.1)), rtol=1e-6)


async def test_memory_longer_than_500_characters_is_rejected(pool: AsyncConnectionPool) -> None:
    model = f"test-length-{uuid.uuid4().hex}"
    vector = unit_vector((2, 1.0))
    # The database refuses it even when the Python check is bypassed ...
    async with pool.connection() as conn:
        with pytest.raises(psycopg.errors.CheckViolation):
            await conn.execute(
                "INSERT INTO memories (content, quote, embedding, embed_model)"
                " VALUES (%s, 'x', %s, %s)",
                ("x" * 501, vector, model),
            )
        await conn.rollback()
        # ... and a memory without its quote, whatever inserts it.
        with pytest.raises(psycopg.errors.NotNullViolation):
            await conn.execute(
                "INSERT INTO memories (content, embedding, embed_model) VALUES ('x', %s, %s)",
                (vector, model),
            )
        await conn.rollback()
    # ... and add_memory says so plainly; 500 characters (even multi-byte ones) are fine.
    with pytest.raises(ValueError, match="1 to 500"):
        await memory_store.add_memory(pool, "x" * 501, vector, model)
    with pytest.raises(ValueError, match="1 to 500"):
        await memory_store.add_memory(pool, "", vector, model)
    row = await memory_store.add_memory(pool, "é" * 500, vector, model)
    assert row["content"] == "é" * 500
    assert row["embed_model"] == model


class FakeEmbedder:
    """Stands in for the real embedder: a fixed vector per model, and a record of what it saw."""

    def __init__(self, model_name: str, index: int, delay: float = 0.0) -> None:
        self.model_name = model_name
        self.vector = unit_vector((index, 1.0))
        self.delay = delay
        self.seen: list[str] = []

    async def embed_documents(self, texts: list[str]) -> list[np.ndarray]:
        await asyncio.sleep(self.delay)  # lets a concurrent run try to overlap with this one
        self.seen.extend(texts)
        return [self.vector.copy() for _ in texts]


async def test_reembed_stale_memories_reembeds_only_stale_rows(fresh_database: str) -> None:
    await migrate(fresh_database)
    pool = await open_pool(fresh_database)
    try:
        old_vector, current_vector = unit_vector((3, 1.0)), unit_vector((4, 1.0))
        # 70 stale rows: more than one batch of 64.
        stale = [f"stale memory {i}" for i in range(70)]
        for text in stale:
            await memory_store.add_memory(pool, text, old_vector, "old-model")
        current = await memory_store.add_memory(pool, "already current", current_vector, "new")

        embedder = FakeEmbedder("new", index=5)
        assert await memory_store.reembed_stale_memories(pool, embedder) == 70
        assert sorted(embedder.seen) == sorted(stale)  # each stale row once, no current row

        async with pool.connection() as conn:
            cursor = await conn.execute(
                "SELECT content, embed_model, embedding FROM memories ORDER BY content"
            )
            rows = await cursor.fetchall()
        assert {row[1] for row in rows} == {"new"}
        for content, _, embedding in rows:
            expected = current_vector if content == current["content"] else embedder.vector
            np.testing.assert_allclose(embedding.to_numpy(), expected, atol=1e-6)

        # Nothing left to do: the embedder is not even called.
        again = FakeEmbedder("new", index=6)
        assert await memory_store.reembed_stale_memories(pool, again) == 0
        assert again.seen == []

        # Two processes starting together: the lock makes the second find nothing to do.
        first, second = FakeEmbedder("newer", 7, delay=0.05), FakeEmbedder("newer", 7, delay=0.05)
        counts = await asyncio.gather(
            memory_store.reembed_stale_memories(pool, first),
            memory_store.reembed_stale_memories(pool, second),
        )
        assert sorted(counts) == [0, 71]
        assert len(first.seen) + len(second.seen) == 71
    finally:
        await pool.close()


# ---------------------------------------------------------------------------------------------
# The Database object


async def test_health_reports_versions(database: Database) -> None:
    health = await database.health()
    assert health["ok"] is True
    assert health["pgvector"].startswith("0.")
    if STANDALONE_URL:  # the standalone tier: Debian's PostgreSQL, reached by its URL
        assert health["server_version"][:2].isdigit()
        assert database.description.endswith("(DATABASE_URL)")
        return
    assert health["server_version"].startswith("18")
    assert database.description.startswith("embedded Postgres 18 at ")
    assert database.description.endswith("pg")


async def test_closing_and_reopening_keeps_the_data(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    data_dir = tmp_path_factory.mktemp("persist")
    settings = load_settings(
        _env_file=None, app_data_dir=data_dir, database_url=None, embedded_db_shared_buffers_mb=160
    )

    started = time.monotonic()
    db = await Database.open(settings)
    first_start = time.monotonic() - started
    assert await shared_buffers(db) == "160MB"
    written = settings.pg_data_dir / "resolveai.conf"
    assert written.stat().st_uid == settings.pg_data_dir.stat().st_uid  # Postgres's own file
    chat = await chat_store.create_chat(db.pool, "Survives a restart")
    await chat_store.add_message(db.pool, chat["chat_id"], "user", "hello")
    await db.close()
    # This process was the only user of that data folder, so closing stopped the server.
    assert not (settings.pg_data_dir / "postmaster.pid").exists()

    # Pretend a process that used this folder crashed without letting go: its pid stays on
    # pgserver's list, and without pruning nobody would ever be "last" to stop the server.
    crashed = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await crashed.wait()
    (settings.pg_data_dir / ".handle_pids.json").write_text(json.dumps([crashed.pid]))

    # Each start applies the setting of the process starting the server.
    settings = settings.model_copy(update={"embedded_db_shared_buffers_mb": 192})
    started = time.monotonic()
    db = await Database.open(settings)
    second_start = time.monotonic() - started
    try:
        assert await shared_buffers(db) == "192MB"
        again = await chat_store.get_chat(db.pool, chat["chat_id"], user_id=None)
        assert again is not None
        assert again["title"] == "Survives a restart"
        messages = await chat_store.list_messages(db.pool, chat["chat_id"])
        assert [m["content"] for m in messages] == ["hello"]
        assert await migrate(db.conninfo) == []
    finally:
        await db.close()
    assert not (settings.pg_data_dir / "postmaster.pid").exists()  # stopped despite the crash
    print(f"embedded Postgres start: first {first_start:.2f} s, later {second_start:.2f} s")


async def shared_buffers(db: Database) -> str:
    async with db.pool.connection() as conn:
        row = await (await conn.execute("SHOW shared_buffers")).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize(
    ("memory_mb", "limit_mb", "expected"),
    [
        (2048, None, 512),  # a quarter of the memory, as Postgres's tuning guide suggests
        (32768, None, 1024),  # at most 1 GiB: the app and the local model need the rest
        (256, None, 128),  # never below Postgres's own default
        (65536, 1024, 256),  # a container's limit counts, not the host's memory
    ],
)
def test_embedded_shared_buffers_follow_the_machine(
    memory_mb: int, limit_mb: int | None, expected: int
) -> None:
    mb = 1024 * 1024
    limit = None if limit_mb is None else limit_mb * mb
    assert automatic_shared_buffers_mb(memory_mb * mb, limit) == expected


@pytest.mark.embedded
async def test_two_databases_in_one_process_share_the_server(
    settings: Settings, database: Database
) -> None:
    # A second Database on the session's data folder; closing it must not stop the server
    # that the session's `database` still uses.
    other = await Database.open(settings)
    chat = await chat_store.create_chat(other.pool, "From the second handle")
    await other.close()
    await other.close()  # closing twice is harmless

    assert (settings.pg_data_dir / "postmaster.pid").exists()
    assert (await database.health())["ok"] is True
    found = await chat_store.get_chat(database.pool, chat["chat_id"], user_id=None)
    assert found is not None


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://me:s3cret@db.example.com:5432/app",
            "postgresql://me:***@db.example.com:5432/app",
        ),
        ("postgres://me:p%40ss@h/db?sslmode=require", "postgres://me:***@h/db?sslmode=require"),
        ("postgresql://me@h/db?password=s3cret&x=1", "postgresql://me@h/db?password=***&x=1"),
        ("postgresql://h:5432/db", "postgresql://h:5432/db"),
    ],
)
def test_passwords_are_masked(url: str, shown: str) -> None:
    assert mask_conninfo(url) == shown


async def test_wrong_database_url_gives_one_plain_line(tmp_path: Path) -> None:
    url = "postgresql://nobody:hunter2@127.0.0.1:1/nope"
    settings = load_settings(
        _env_file=None, app_data_dir=tmp_path, database_url=url, db_connect_timeout=3
    )
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as caught:
        await Database.open(settings)
    assert time.monotonic() - started < 3 + 1

    message = str(caught.value)
    assert "\n" not in message
    assert "DATABASE_URL" in message
    assert "127.0.0.1:1/nope" in message
    assert "hunter2" not in message
    assert "nobody:***@" in message
    assert message.endswith("connection refused")
    # No embedded server was started for it.
    assert not (tmp_path / "pg").exists()


def test_a_wrong_database_url_stops_start_up_before_the_embedder_loads(tmp_path: Path) -> None:
    """The embedder's load (importing torch, seconds) cannot be interrupted: a start-up that began
    it before finding the database unreachable waited for it before it could fail."""
    script = f"""
import asyncio, sys
from core.config import load_settings
from core.db import DatabaseUnavailable
from core.services import open_services
settings = load_settings(_env_file=None, app_data_dir={str(tmp_path)!r},
                         database_url="postgresql://nobody@127.0.0.1:1/nope")
try:
    asyncio.run(open_services(settings))
except DatabaseUnavailable as error:
    print("refused:", error)
print("torch imported:", "torch" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, capture_output=True, text=True,
        timeout=120, env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: Cannot connect to the database at DATABASE_URL" in done.stdout
    assert "torch imported: False" in done.stdout


async def test_check_database_url_gives_up_within_the_timeout() -> None:
    # A socket folder where nothing listens, and a non-routable address: both fail in time.
    with pytest.raises(DatabaseUnavailable, match="DATABASE_URL") as caught:
        await check_database_url("postgresql://me:pw@/db?host=/nonexistent-socket-dir", 2)
    assert "me:pw@" not in str(caught.value)
    assert "me:***@" in str(caught.value)

    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable) as caught:
        await check_database_url("postgresql://me:secret@10.255.255.1:5432/db", 1.5)
    assert time.monotonic() - started < 1.5 + 1
    assert "secret" not in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.embedded
async def test_a_second_process_shares_the_server(settings: Settings, database: Database) -> None:
    postmaster_pid = (settings.pg_data_dir / "postmaster.pid").read_text().split()[0]
    title = f"from another process {uuid.uuid4().hex}"
    script = f"""
import asyncio, json
from pathlib import Path
from core import chat_store
from core.config import load_settings
from core.db import Database

async def main():
    settings = load_settings(_env_file=None, app_data_dir=Path({str(settings.app_data_dir)!r}),
                             database_url=None)
    db = await Database.open(settings)
    chat = await chat_store.create_chat(db.pool, {title!r})
    pid = (settings.pg_data_dir / "postmaster.pid").read_text().split()[0]
    print(json.dumps({{"chat_id": str(chat["chat_id"]), "postmaster": pid,
                      "description": db.description}}))
    await db.close()

asyncio.run(main())
"""
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=str(settings.app_data_dir),
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode()
    reported = json.loads(stdout.decode().strip().splitlines()[-1])

    # Same server (same postmaster), still running after the other process let go of it.
    assert reported["postmaster"] == postmaster_pid
    assert reported["description"].startswith("embedded Postgres 18")
    assert (settings.pg_data_dir / "postmaster.pid").read_text().split()[0] == postmaster_pid
    chat = await chat_store.get_chat(database.pool, uuid.UUID(reported["chat_id"]), user_id=None)
    assert chat is not None
    assert chat["title"] == title


async def test_a_connection_given_back_busy_is_never_handed_out_again(pool) -> None:
    # As a task cancelled inside a pipelined block was seen to leave one: still in pipeline mode,
    # reported idle. The next user of it failed; the pool must close it instead.
    async with pool.connection() as conn:
        conn.pgconn.enter_pipeline_mode()
        busy = conn
    for _ in range(100):  # the pool takes a connection back in a task of its own
        if busy.closed:
            break
        await asyncio.sleep(0.02)
    assert busy.closed
    for _ in range(3):
        assert await fetch_one(pool, "SELECT 1 AS one", ()) == {"one": 1}

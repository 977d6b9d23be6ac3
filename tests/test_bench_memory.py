"""Smoke test of `python -m bench.memory` at a tiny size: the fields are sane and HNSW finds what
exact search finds (a broken ground truth or id matching would show as low recall)."""

from __future__ import annotations

import pytest

from bench import memory as bench_memory
from core.db import migrate
from evals.datasets import LOCOMO_FILE, SQUAD_FILE
from rag.embedder import Embedder

pytestmark = pytest.mark.skipif(
    not (LOCOMO_FILE.exists() and SQUAD_FILE.exists()), reason="needs ../shared/evaldata"
)

FORCED = "HNSW forced"
EXACT = "exact"


async def test_memory_bench_tiny(fresh_database: str, embedder: Embedder) -> None:
    await migrate(fresh_database)
    variants = {FORCED: (bench_memory.HNSW_FORCED, 100), EXACT: (bench_memory.EXACT, 100)}
    report = await bench_memory.run(
        fresh_database,
        embedder,
        sizes=[300, 150],  # 150 real memories, then 150 derived ones on top
        query_count=30,
        real_limit=150,
        variants=variants,
        save_samples=5,
        insert_samples=10,
    )

    # Latency bounds are loose (a busy shared machine); recall is what this test checks.
    assert report.real == 150
    assert report.nearest_derived is not None
    # Derived vectors are meant to spread like real ones.
    assert abs(report.nearest_derived - report.nearest_real) < 0.15
    assert 0 < report.embed_query_ms[0] <= report.embed_query_ms[1] < 10_000
    assert 0 < report.end_to_end_ms[0] <= report.end_to_end_ms[1] < 10_000

    assert [(r.size, r.name) for r in report.searches] == [
        (150, FORCED),
        (150, EXACT),
        (300, FORCED),
        (300, EXACT),
    ]
    for row in report.searches:
        assert 0 < row.p50_ms <= row.p95_ms < 10_000, row
        assert row.short == 0, row
        assert 0.0 <= row.kept_recall <= 1.0
    exact = [r for r in report.searches if r.name == EXACT]
    forced = [r for r in report.searches if r.name == FORCED]
    # The exact scan in Postgres must agree with numpy's exact top 5: checks the ground truth.
    assert all(r.recall_at_k == 1.0 and r.kept_recall == 1.0 for r in exact)
    assert not any(r.index_used for r in exact)
    assert all(r.index_used for r in forced)
    assert all(r.recall_at_k >= 0.95 and r.kept_recall >= 0.95 for r in forced), forced

    assert [r.size for r in report.inserts] == [150, 300]
    for row in report.inserts:
        assert 0 < row.save_ms < 10_000 and row.save_per_s > 0
        assert 0 < row.add_ms < 10_000 and row.add_per_s > 0
        assert row.copy_per_s is not None and row.copy_per_s > 0

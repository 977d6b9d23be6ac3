"""The real bundled embedding model: shape, normalization, meaning, batches, tokens, no blocking."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from core.config import PROJECT_ROOT
from core.errors import StartupError
from rag.embedder import EMBED_DIMENSIONS, Embedder


async def test_vectors_are_normalized_and_384_wide(embedder: Embedder) -> None:
    vectors = await embedder.embed_documents(["The cat sat on the mat.", "Stocks fell sharply."])
    assert vectors.shape == (2, EMBED_DIMENSIONS)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)


async def test_similar_meanings_are_closer(embedder: Embedder) -> None:
    query = await embedder.embed_query("What pet does the user have?")
    documents = await embedder.embed_documents(
        ["The user owns a golden retriever named Max.", "The user works as a tax accountant."]
    )
    scores = documents @ query
    assert scores[0] > scores[1] + 0.1


async def test_batch_matches_one_by_one(embedder: Embedder) -> None:
    texts = [f"Sentence number {i} about Warsaw's bridges." for i in range(70)]
    batch = await embedder.embed_documents(texts)
    single = await embedder.embed_documents([texts[42]])
    assert batch.shape == (70, EMBED_DIMENSIONS)
    assert np.allclose(batch[42], single[0], atol=1e-4)
    assert (await embedder.embed_documents([])).shape == (0, EMBED_DIMENSIONS)


def test_tokenizer_counts_model_tokens(embedder: Embedder) -> None:
    assert embedder.max_seq_length == 256
    assert embedder.count_tokens("hello world") == 4  # [CLS] hello world [SEP]
    assert embedder.count_tokens("word " * 300) > 256  # counting never truncates


async def test_encoding_does_not_block_the_event_loop(embedder: Embedder) -> None:
    texts = ["A long enough sentence to keep the model busy for a moment."] * 256
    ticks = 0
    stop = False

    async def ticker() -> None:
        nonlocal ticks
        while not stop:
            ticks += 1
            await asyncio.sleep(0.005)

    task = asyncio.create_task(ticker())
    started = time.perf_counter()
    await embedder.embed_documents(texts)
    elapsed = time.perf_counter() - started
    stop = True
    await task
    # The loop kept ticking while the model ran (at least a third of the possible ticks).
    assert elapsed > 0.05
    assert ticks >= elapsed / 0.005 / 3


async def test_unknown_model_names_the_setting() -> None:
    model = Embedder("no-such-org/no-such-model")
    with pytest.raises(StartupError, match="EMBED_MODEL_NAME"):
        await model.load()
    assert model.state == "failed"


def test_embed_threads_sets_the_threads_torch_uses(tmp_path) -> None:
    """EMBED_THREADS reaches torch (in a process of its own: torch's threads are per process)."""
    script = f"""
import asyncio, torch
from core.config import load_settings
from rag.embedder import Embedder
settings = load_settings(_env_file=None, app_data_dir={str(tmp_path)!r}, database_url=None)
before = torch.get_num_threads()
embedder = Embedder(settings.embed_model_name, settings.embed_threads)
asyncio.run(embedder.embed_query("hello"))
# OpenMP's thread count is per thread: what counts is the embedder's own (it encodes there).
print(before, embedder._executor.submit(torch.get_num_threads).result())
"""
    env = {**os.environ, "EMBED_THREADS": "1", "OMP_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["2", "1"]

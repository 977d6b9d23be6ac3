"""The real bundled embedding model: shape, normalization, meaning, batches, tokens, no blocking."""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
import torch

from core.config import PROJECT_ROOT
from core.errors import StartupError
from rag.embedder import EMBED_DIMENSIONS, Embedder
from rag.traced_encoder import traced_encoder


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


async def test_the_traced_pass_gives_the_vectors_the_model_gives(embedder: Embedder) -> None:
    """rag/traced_encoder.py: one traced call per batch gives what sentence-transformers' encode
    gives, in the caller's order, for texts of every length (padded, truncated, stray spaces)."""
    texts = [
        f"Sentence {i}: " + "Warsaw's bridges cross the Vistula. " * (i % 45) for i in range(70)
    ]
    texts += ["  stray spaces  ", "x"]
    vectors = await embedder.embed_documents(texts)
    expected = embedder.model.encode(texts, normalize_embeddings=True, show_progress_bar=False)
    assert embedder.traced
    assert np.abs(vectors - expected).max() < 1e-5
    query = await embedder.embed_query("Which river do the bridges cross?")
    assert (
        np.abs(query - embedder.model.encode(["Which river do the bridges cross?"])[0]).max() < 1e-5
    )


async def test_the_embedder_is_ready_only_once_its_pass_is_traced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Health says "warming up" while the embedder loads: tracing is part of that (a CI run saw
    "ready" while the trace still ran, and the server stopped before saying the embedder was
    loaded)."""
    from rag import embedder as embedder_module

    seen: list[str] = []
    model = Embedder()

    def tracing(loaded: Any) -> Any:  # what the state says while the trace runs
        seen.append(model.state)
        return traced_encoder(loaded)

    monkeypatch.setattr(embedder_module, "traced_encoder", tracing)
    await model.load()
    assert seen == ["loading"] and model.state == "ready" and model.traced
    model.close()


def test_a_model_the_trace_does_not_reproduce_keeps_encode(embedder: Embedder) -> None:
    """The traced pass pools by mean; a model pooling otherwise fails the check against its own
    encode and is not traced (it would give other vectors)."""
    model = copy.deepcopy(embedder.model)
    model[1].pooling_mode = "cls"
    assert not np.allclose(model.encode(["Lisbon"]), embedder.model.encode(["Lisbon"]), atol=0.01)
    assert traced_encoder(model) is None
    assert traced_encoder(embedder.model) is not None


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


# --- The ranking copy ----------------------------------------------------------------------------


async def test_ranking_vectors_come_from_a_bf16_copy_and_stored_vectors_do_not() -> None:
    """WEB_RANK_PRECISION=bfloat16: a search round's vectors come from a bf16 copy of the model,
    close to the float32 ones (they rank alike), while memories and documents, whose vectors are
    stored and compared with older ones, keep the float32 model."""
    texts = ["The lighthouse was built in 1871.", "Peanut allergies can be severe."]
    async with Embedder(rank_precision="bfloat16") as embedder:
        stored = await embedder.embed_documents(texts)
        ranked = await embedder.ranking.embed_documents(texts)
        query = await embedder.ranking.embed_query("When was the lighthouse built?")
        assert embedder.ranking.precision == "bfloat16"
        assert {p.dtype for p in embedder.model.parameters()} == {torch.float32}
        assert ranked.dtype == np.float32 and ranked.shape == stored.shape
        assert not np.array_equal(ranked, stored)  # another model made them
        assert np.all(np.sum(ranked * stored, axis=1) > 0.99)
        np.testing.assert_allclose(np.linalg.norm(ranked, axis=1), 1.0, atol=1e-3)
        assert int(np.argmax(ranked @ query)) == 0
        # The view reads like the embedder for chunking (tokens, budget).
        assert embedder.ranking.count_tokens("hello") == embedder.count_tokens("hello")


async def test_float32_ranking_uses_the_stored_model(embedder: Embedder) -> None:
    texts = ["The lighthouse was built in 1871."]
    plain = Embedder(rank_precision="float32")
    plain._model = embedder.model  # the session's loaded model: no second load
    plain.state = "ready"
    try:
        assert plain.ranking.precision == "float32"
        np.testing.assert_array_equal(
            await plain.ranking.embed_documents(texts), await plain.embed_documents(texts)
        )
    finally:
        plain.close()


@pytest.mark.parametrize(("native_bf16", "chosen"), [(True, "bfloat16"), (False, "float32")])
def test_auto_precision_follows_the_cpu(monkeypatch, native_bf16: bool, chosen: str) -> None:
    """auto: bf16 only where the CPU computes it natively (AVX512-BF16); elsewhere torch emulates
    it and the copy is slower than float32 (0.8x on an AVX-512 CPU without it, bench/RESULTS.md)."""
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: native_bf16)
    embedder = Embedder(rank_precision="auto")
    try:
        assert embedder.ranking.precision == chosen
    finally:
        embedder.close()


async def test_a_repeated_query_is_embedded_once(embedder: Embedder, monkeypatch) -> None:
    """A turn looks its user message up twice (memory recall before the reply, the memory
    extraction after it): the second lookup reuses the vector instead of running the model."""
    encoded: list[list[str]] = []
    encode = embedder._encode_blocking

    def counting(texts: list[str], bf16: bool = False) -> np.ndarray:
        encoded.append(texts)
        return encode(texts, bf16)

    monkeypatch.setattr(embedder, "_encode_blocking", counting)
    text = f"What am I allergic to? ({time.time()})"  # not asked before in this session
    first = await embedder.embed_query(text)
    again = await embedder.embed_query(text)
    np.testing.assert_array_equal(first, again)
    assert len(encoded) == 1
    with pytest.raises(ValueError):
        again[0] = 1.0  # shared: nobody may change it in place
    await embedder.embed_query(text + " And my sister?")
    await embedder.ranking.embed_query(text)  # the ranking copy's vectors are its own
    await embedder.embed_documents([text])  # documents are stored, not looked up again
    assert len(encoded) == 4


def test_making_the_embedder_imports_no_torch() -> None:
    """Start-up makes the embedder on the event loop; torch is imported in its own thread, when it
    loads (the ranking precision is decided at first use, not here)."""
    script = (
        "import sys; from rag.embedder import Embedder; Embedder(); print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False"]

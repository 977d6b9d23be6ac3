"""Which llama.cpp CPU backend the local model runs on: the fastest build this CPU can execute.

The Makefile builds llama-cpp-python with llama.cpp's runtime CPU variants (`GGML_BACKEND_DL=ON
GGML_CPU_ALL_VARIANTS=ON`, what llama.cpp's own releases ship): one `libggml-cpu-<name>.so` per
instruction-set level, from plain x86-64 up to AVX-512 with VNNI/BF16. Each reports, from CPUID,
whether this CPU can run it and how well (`ggml_backend_score`, 0 = it can't), so one install
runs on any x86-64 machine and uses AVX-512 where it exists; a missing instruction set means a
lower variant, never SIGILL. llama.cpp's own picker looks for them beside the executable (here:
Python), and the wheel installs them under site-packages/bin, so `load_cpu_backend` picks and
registers one itself before the first model is created.

The AMX variant (`sapphirerapids`) is never picked: these VMs advertise AMX in CPUID, and ggml's AMX
kernels then die with SIGILL mid-prompt (the tile configuration does not survive here). Measured on
this 2-core VM, 1 thread, ~870-token prompt: AVX-512 variant `zen4` prefill 1.6x the portable
(AVX2) build, decode equal (`python -m bench.llama_backends`).

A build without variants (e.g. `CMAKE_ARGS=-DGGML_NATIVE=OFF`) has its CPU backend linked in;
then there is nothing to pick and `load_cpu_backend` returns None.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

# Variants never loaded, whatever their score (see the module docstring).
EXCLUDED_VARIANTS = ("sapphirerapids",)
VARIANT_PREFIX = "libggml-cpu-"


class NoCpuBackend(RuntimeError):
    """No CPU variant of this llama.cpp build runs on this machine."""


@dataclass(frozen=True)
class Variant:
    name: str  # e.g. "zen4", "haswell"
    path: Path
    score: int  # ggml_backend_score: 0 = this CPU can't run it; higher = more of its features


def variant_files() -> list[Path]:
    """The CPU variant libraries of the installed llama-cpp-python (none in a one-backend build)."""
    import llama_cpp

    site_packages = Path(llama_cpp.__file__).resolve().parent.parent
    return sorted((site_packages / "bin").glob(f"{VARIANT_PREFIX}*.so"))


def variant_name(path: Path) -> str:
    return path.name.removeprefix(VARIANT_PREFIX).removesuffix(".so")


def score_variant(path: Path) -> int:
    """The variant's own verdict on this CPU (its score function runs CPUID checks only and is
    compiled without the variant's instruction set, so calling it is safe on any CPU)."""
    score = ctypes.CDLL(str(path)).ggml_backend_score
    score.restype = ctypes.c_int
    return int(score())


def best_variant(variants: list[Variant]) -> Variant:
    """The highest-scoring variant this CPU runs, leaving out EXCLUDED_VARIANTS."""
    usable = [v for v in variants if v.score > 0 and v.name not in EXCLUDED_VARIANTS]
    if not usable:
        names = ", ".join(v.name for v in variants) or "none"
        raise NoCpuBackend(f"No llama.cpp CPU backend runs on this CPU (variants: {names})")
    return max(usable, key=lambda v: v.score)


_loaded: str | None = None


def installed_variants() -> list[Variant]:
    return [Variant(variant_name(path), path, score_variant(path)) for path in variant_files()]


def load_cpu_backend(name: str | None = None) -> str | None:
    """Register the best CPU variant (or the one called `name`, for benchmarks) with llama.cpp,
    once per process, and return its name; None for a build without variants. NoCpuBackend if
    none runs here."""
    global _loaded
    if _loaded is not None:
        return _loaded
    variants = installed_variants()
    if not variants:
        return None
    import llama_cpp

    if name is None:
        chosen = best_variant(variants)
    else:
        chosen = next((v for v in variants if v.name == name and v.score > 0), None)
        if chosen is None:
            raise NoCpuBackend(f"The llama.cpp CPU backend {name!r} is missing or can't run here")
    # The libggml that libllama links to (the same handle: it is loaded already).
    ggml = ctypes.CDLL(str(Path(llama_cpp.__file__).resolve().parent / "lib" / "libggml.so.0"))
    ggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
    ggml.ggml_backend_load.restype = ctypes.c_void_p
    if not ggml.ggml_backend_load(str(chosen.path).encode()):
        raise NoCpuBackend(f"llama.cpp could not load its CPU backend {chosen.path.name}")
    _loaded = chosen.name
    return _loaded

"""Benchmark: the local model's speed on each llama.cpp CPU backend variant of the installed build.

    python -m bench.llama_backends [--threads N] [--rounds 3] [--baseline haswell] [--decode 32]

`core.local_model.cpu_backend` picks the best variant this CPU runs (AVX-512 where there is one).
This measures what that choice is worth against the baseline variant, `haswell` (AVX2, FMA, F16C:
what a portable `-DGGML_NATIVE=OFF` build compiles for), in the same run: each round runs one
fresh process per variant, alternating, that loads the bundled model, reads one ~900-token chat
prompt from an empty cache (prefill) and writes `--decode` tokens greedily (decode). Reported:
median tokens/s per variant and the ratios chosen / baseline. Needs a build with runtime variants
(the Makefile's); a build without them has one backend and nothing to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from core.config import PROJECT_ROOT, get_settings
from core.local_model.cpu_backend import best_variant, installed_variants, load_cpu_backend
from core.local_model.process import default_threads
from core.local_model.weights import ensure_local_model

BASELINE = "haswell"

# A real prompt's shape: instructions, a page of sources (the README), a question.
QUESTION = (
    "From the sources, explain step by step how ResolveAI runs the local model, how a reply "
    "survives the model process crashing, and which settings change it. Cite the sources."
)


def prompt_text() -> str:
    sources = (PROJECT_ROOT / "README.md").read_text()[:3200]
    return (
        "<|im_start|>system\nYou are ResolveAI, a helpful assistant. Answer from the sources and"
        f' cite them as [1].<|im_end|>\n<|im_start|>user\n<sources>\n<source id="1">\n{sources}'
        f"\n</source>\n</sources>\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    )


def measure(variant: str, threads: int, decode: int) -> dict[str, float | str]:
    """In this process: load `variant`, then time one prefill and `decode` greedy tokens."""
    import llama_cpp

    load_cpu_backend(variant)
    model = ensure_local_model(get_settings())
    llm = llama_cpp.Llama(
        model_path=str(model),
        n_ctx=2048,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )
    tokens = llm.tokenize(prompt_text().encode(), add_bos=False, special=True)
    llm.eval(llm.tokenize(b"Hello, how are you?", add_bos=False))  # page the weights in
    llm.reset()
    started = time.perf_counter()
    llm.eval(tokens)
    prefill_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(decode):
        llm.eval([llm.sample(temp=0.0)])
    decode_s = time.perf_counter() - started
    return {
        "variant": variant,
        "prompt_tokens": len(tokens),
        "prefill_tok_s": len(tokens) / prefill_s,
        "decode_tok_s": decode / decode_s,
    }


def run_child(variant: str, threads: int, decode: int) -> dict:
    command = [sys.executable, "-m", "bench.llama_backends", "--child", variant]
    command += ["--threads", str(threads), "--decode", str(decode)]
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=default_threads())
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.threads, args.decode)), flush=True)
        return

    variants = installed_variants()
    if not variants:
        raise SystemExit("This llama-cpp-python build has no CPU variants to compare (see README)")
    chosen = best_variant(variants).name
    compared = [args.baseline, chosen]
    runs: dict[str, list[dict]] = {name: [] for name in compared}
    for _ in range(args.rounds):
        for name in compared:
            runs[name].append(run_child(name, args.threads, args.decode))
    load = os.getloadavg()[0]
    tokens = runs[chosen][0]["prompt_tokens"]
    print(
        f"llama.cpp CPU variants, {args.threads} thread(s), {tokens}-token prompt, {args.decode}"
        f" tokens written, median of {args.rounds} (load average {load:.1f})\n"
    )
    print("| variant | prefill tok/s | decode tok/s |\n| --- | --- | --- |")
    medians = {}
    for name in compared:
        prefill = statistics.median(r["prefill_tok_s"] for r in runs[name])
        decode = statistics.median(r["decode_tok_s"] for r in runs[name])
        medians[name] = (prefill, decode)
        label = f"{name} (chosen)" if name == chosen else f"{name} (baseline)"
        print(f"| {label} | {prefill:.1f} | {decode:.1f} |")
    (p_chosen, d_chosen), (p_base, d_base) = medians[chosen], medians[args.baseline]
    print(f"\nchosen / baseline: prefill {p_chosen / p_base:.2f}x, decode {d_chosen / d_base:.2f}x")


if __name__ == "__main__":
    main()

"""Which HTML converter reads a linked page: trafilatura (main text) against the documents'
converter (BeautifulSoup + markdownify, the whole page), on real HTML files.

    python -m bench.link_html FILE.html [FILE.html ...] [--runs 3]

For each page: its size, the characters each converter keeps, its fastest time over `--runs`, and
the share of the whole page's characters trafilatura kept (what it dropped is navigation, link
targets and footers). Fewer characters of chrome means more of the page's text fits the chunks a
small model reads. rag/link_reader.py uses trafilatura, falling back to the other when it finds no
main text. Measured on the Rust documentation installed with rustup (real pages with sidebars
and navigation): see bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import trafilatura

from rag.document_convert import html_to_markdown


def fastest(convert: object, page: str, runs: int) -> tuple[str, float]:
    best = float("inf")
    out = ""
    for _ in range(runs):
        started = time.perf_counter()
        out = convert(page) or ""  # type: ignore[operator]
        best = min(best, time.perf_counter() - started)
    return out, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()

    def main_text(page: str) -> str | None:
        return trafilatura.extract(
            page, output_format="markdown", include_tables=True, include_links=False
        )

    print("| page | KB | bs4+markdownify chars | ms | trafilatura chars | ms | kept |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    totals = [0, 0, 0.0, 0.0]
    for path in args.files:
        page = path.read_text("utf-8", errors="replace")
        whole, whole_s = fastest(html_to_markdown, page, args.runs)
        main_, main_s = fastest(main_text, page, args.runs)
        totals[0] += len(whole)
        totals[1] += len(main_)
        totals[2] += whole_s
        totals[3] += main_s
        print(
            f"| {path.parent.name}/{path.name} | {len(page) // 1024} | {len(whole)} |"
            f" {whole_s * 1000:.0f} | {len(main_)} | {main_s * 1000:.0f} |"
            f" {len(main_) / max(len(whole), 1):.0%} |"
        )
    print(
        f"| **all {len(args.files)}** | | {totals[0]} | {totals[2] * 1000:.0f} | {totals[1]} |"
        f" {totals[3] * 1000:.0f} | {totals[1] / max(totals[0], 1):.0%} |"
    )


if __name__ == "__main__":
    main()

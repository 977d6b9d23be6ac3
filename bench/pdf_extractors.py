"""Which PDF library to convert uploads with: text quality, page numbers, headings and speed.

    python -m bench.pdf_extractors [--runs 3] [--only NAME,...] [--samples DIR] [--excerpts FILE]

Corpus: pypdf's sample PDFs (../shared/docs/pdf-samples, CC BY-SA, read in place; files.json there
gives each file's true page count). Each library runs in a process of its own (its import time is
reported apart, a crash or hang of one library is a row, not the end of the run) over every file,
page by page, `--runs` times; a file's time is its fastest run.

Only `pypdfium2` (the choice) is in requirements.txt; the rows `resolveai` and `resolveai in
subprocess` are rag/document_convert.py built on it (left out of the consensus). The candidates
(pypdf, markitdown[pdf], pdfplumber, pdfminer.six, pymupdf 2.0 with its pymupdf4llm, pdftext) are
installed into a scratch venv to run this, never into the app's:

    python3.11 -m venv /tmp/pdfbench && /tmp/pdfbench/bin/pip install "markitdown[pdf]" \
        pymupdf==2.0 pypdf pdfplumber pypdfium2 pdftext
    /tmp/pdfbench/bin/python -m bench.pdf_extractors

Quality, measured without a hand-made reference (none exists for this corpus):
- **pages right**: files whose per-page output has the true page count;
- **consensus recall / precision**: per page, the words (\\w{2,}, lower case, NFKC) that at least
  half the libraries found are the page's consensus; recall = share of those this library found,
  precision = share of its words that are in the consensus. Split or glued words ("T his",
  "ofthe"), a wrong page, or mojibake lower both;
- **headings**: lines starting with '#' (only the Markdown converters make any);
- the `--excerpts` file holds each library's text of a few pages, to read side by side.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import re
import subprocess
import sys
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "docs" / "pdf-samples"
EXCERPT_PAGES = [
    ("004-pdflatex-4-pages/pdflatex-4-pages.pdf", 1),
    ("009-pdflatex-geotopo/GeoTopo-komprimiert.pdf", 12),
    ("011-google-doc-document/google-doc-document.pdf", 1),
    ("015-arabic/habibi.pdf", 1),
    ("026-latex-multicolumn/multicolumn.pdf", 1),
]


def _pypdf(path: str) -> list[str]:
    import pypdf

    return [page.extract_text() or "" for page in pypdf.PdfReader(path).pages]


def _pypdfium2(path: str) -> list[str]:
    import pypdfium2

    pdf = pypdfium2.PdfDocument(path)
    pages = []
    for page in pdf:
        textpage = page.get_textpage()
        pages.append(textpage.get_text_bounded())
        textpage.close()
        page.close()
    pdf.close()
    return pages


def _pdfplumber(path: str) -> list[str]:
    import pdfplumber

    with pdfplumber.open(path) as pdf:
        pages = []
        for page in pdf.pages:
            pages.append(page.extract_text() or "")
            page.close()
        return pages


def _pdfminer(path: str) -> list[str]:
    from pdfminer.high_level import extract_pages
    from pdfminer.layout import LTTextContainer

    return [
        "".join(element.get_text() for element in page if isinstance(element, LTTextContainer))
        for page in extract_pages(path)
    ]


def _markitdown(path: str) -> list[str]:
    # markitdown gives one string per document; pdfminer ends each page with a form feed, which is
    # the only page boundary left (lost when pdfplumber's form path ran: then one "page").
    from markitdown import MarkItDown

    text = MarkItDown(enable_plugins=False).convert(path).markdown
    pages = text.split("\f")
    return pages[:-1] if len(pages) > 1 and not pages[-1].strip() else pages


def _pymupdf4llm_layout(path: str) -> list[str]:
    import pymupdf4llm

    chunks = pymupdf4llm.to_markdown(path, page_chunks=True, use_ocr=False, show_progress=False)
    return [chunk["text"] for chunk in chunks]


def _pymupdf4llm_rag(path: str) -> list[str]:
    from pymupdf4llm.helpers import pymupdf_rag

    chunks = pymupdf_rag.to_markdown(path, page_chunks=True, show_progress=False)
    return [chunk["text"] for chunk in chunks]


def _pymupdf_text(path: str) -> list[str]:
    import pymupdf

    with pymupdf.open(path) as doc:
        return [page.get_text() for page in doc]


def _pdftext(path: str) -> list[str]:
    from pdftext.extraction import paginated_plain_text_output

    return paginated_plain_text_output(path, workers=1)


def _resolveai(path: str, in_subprocess: bool = False) -> list[str]:
    # The app's converter, page list filled back to the file's page count (it leaves out pages
    # without text, and refuses a PDF with none).
    import asyncio

    import pypdfium2

    from rag.conversion_process import convert_in_subprocess
    from rag.document_convert import DocumentRejected, convert_document

    data = Path(path).read_bytes()
    pages = [""] * len(pypdfium2.PdfDocument(data))
    try:
        if in_subprocess:
            converted = asyncio.run(convert_in_subprocess(data, "sample.pdf"))
        else:
            converted = convert_document(data, "sample.pdf")
    except DocumentRejected as rejection:
        if "No text found" in str(rejection):
            return pages
        raise
    for page in converted.pages:
        pages[page.number - 1] = page.markdown
    return pages


EXTRACTORS: dict[str, tuple[str, str, Callable[[str], list[str]]]] = {
    # name: (distribution for the version, licence, per-page extractor)
    "pypdf": ("pypdf", "BSD-3-Clause", _pypdf),
    "pypdfium2": ("pypdfium2", "Apache-2.0 / BSD-3-Clause (PDFium)", _pypdfium2),
    "pdfplumber": ("pdfplumber", "MIT", _pdfplumber),
    "pdfminer.six": ("pdfminer.six", "MIT", _pdfminer),
    "markitdown": ("markitdown", "MIT", _markitdown),
    "pymupdf4llm layout": ("pymupdf", "AGPL-3.0 (or commercial)", _pymupdf4llm_layout),
    "pymupdf4llm rag": ("pymupdf", "AGPL-3.0 (or commercial)", _pymupdf4llm_rag),
    "pymupdf get_text": ("pymupdf", "AGPL-3.0 (or commercial)", _pymupdf_text),
    "pdftext": ("pdftext", "Apache-2.0 (pypdfium2 inside)", _pdftext),
    # Not candidates: what was built on the choice. Left out of the consensus.
    "resolveai": ("pypdfium2", "(rag.document_convert)", _resolveai),
    "resolveai in subprocess": (
        "pypdfium2",
        "(convert_in_subprocess)",
        lambda path: _resolveai(path, in_subprocess=True),
    ),
}
OURS = {"resolveai", "resolveai in subprocess"}


def _files(samples: Path) -> list[tuple[str, int, bool]]:
    entries = json.loads((samples / "files.json").read_text())["data"]
    # files.json lists a file or two that the folder does not hold (GeoTopo.pdf): skipped.
    return sorted(
        (e["path"], e["pages"], e["encrypted"]) for e in entries if (samples / e["path"]).exists()
    )


def run_one(name: str, samples: Path, runs: int) -> dict:
    """In the child: time `name` on every file, return its pages' text and timings."""
    import importlib.metadata
    import logging
    import warnings

    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")
    dist, _licence, extract = EXTRACTORS[name]
    started = time.perf_counter()
    try:
        extract(str(samples / "001-trivial/minimal-document.pdf"))  # imports, warms caches
    except ImportError as error:
        return {"missing": str(error)}
    warm = time.perf_counter() - started
    out: dict = {"version": importlib.metadata.version(dist), "warm_s": warm, "files": {}}
    for path, _pages, encrypted in _files(samples):
        if encrypted:
            continue
        best, pages, error = math.inf, None, None
        for _ in range(runs):
            t0 = time.perf_counter()
            try:
                pages = extract(str(samples / path))
            except Exception as exc:
                error = f"{type(exc).__name__}: {str(exc)[:80]}"
                break
            best = min(best, time.perf_counter() - t0)
        out["files"][path] = {"seconds": best, "pages": pages, "error": error}
    return out


def _words(text: str) -> collections.Counter[str]:
    return collections.Counter(re.findall(r"\w{2,}", unicodedata.normalize("NFKC", text).lower()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated extractor names")
    parser.add_argument("--samples", type=Path, default=SAMPLES)
    parser.add_argument("--excerpts", type=Path, default=Path("/tmp/pdf-extractor-excerpts.md"))
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        json.dump(run_one(args.child, args.samples, args.runs), sys.stdout)
        return

    names = [n for n in (args.only.split(",") if args.only else EXTRACTORS) if n]
    results: dict[str, dict] = {}
    for name in names:
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "bench.pdf_extractors", "--child", name]
        cmd += ["--runs", str(args.runs), "--samples", str(args.samples)]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=1800, cwd=Path(__file__).parents[1]
            )
            results[name] = (
                json.loads(proc.stdout)
                if proc.returncode == 0
                else {"missing": f"exit {proc.returncode}: {proc.stderr[-300:]}"}
            )
        except subprocess.TimeoutExpired:
            results[name] = {"missing": "timed out after 1800 s"}
        # Import + first file, in the child process (what a fresh conversion process pays).
        results[name]["wall_s"] = time.perf_counter() - t0
    ran = {n: r for n, r in results.items() if "files" in r}

    files = [f for f in _files(args.samples) if not f[2]]
    # Consensus per page: words that at least half the libraries that read the page found.
    consensus: dict[tuple[str, int], collections.Counter[str]] = {}
    for path, true_pages, _ in files:
        for page in range(true_pages):
            counters = [
                _words(r["files"][path]["pages"][page])
                for n, r in ran.items()
                if n not in OURS
                and r["files"][path]["pages"]
                and len(r["files"][path]["pages"]) == true_pages
            ]
            votes = collections.Counter(w for c in counters for w in c)
            need = max(1, math.ceil(len(counters) / 2))
            consensus[(path, page)] = collections.Counter(
                {w: min(c[w] for c in counters if w in c) for w, v in votes.items() if v >= need}
            )

    print(f"Corpus: {args.samples} ({len(files)} readable files, the encrypted one left out).\n")
    print(
        "| library | version | licence | pages right | consensus recall | consensus precision "
        "| headings | errors | pages/s (all) | pages/s (GeoTopo, 117 p.) | import+first file (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        if "files" not in r:
            print(f"| {name} | | {EXTRACTORS[name][1]} | not run: {r['missing'][:60]} |")
            continue
        right = hits = found = total = headings = pages_done = 0
        seconds = 0.0
        errors = []
        for path, true_pages, _ in files:
            entry = r["files"][path]
            if entry["error"]:
                errors.append(path.split("/")[0][:3])
                continue
            seconds += entry["seconds"]
            pages_done += len(entry["pages"])
            right += len(entry["pages"]) == true_pages
            for page in range(true_pages):
                text = entry["pages"][page] if page < len(entry["pages"]) else ""
                mine, ref = _words(text), consensus[(path, page)]
                hits += sum((mine & ref).values())
                found += sum(mine.values())
                total += sum(ref.values())
                headings += sum(line.startswith("#") for line in text.splitlines())
        geo = r["files"]["009-pdflatex-geotopo/GeoTopo-komprimiert.pdf"]
        geo_rate = f"{117 / geo['seconds']:.1f}" if not geo["error"] else "error"
        print(
            f"| {name} | {r['version']} | {EXTRACTORS[name][1]} | {right}/{len(files)} "
            f"| {hits / total:.3f} | {hits / max(found, 1):.3f} | {headings} "
            f"| {', '.join(errors) or 0} | {pages_done / seconds:.1f} | {geo_rate} "
            f"| {r['warm_s']:.2f} |"
        )

    with args.excerpts.open("w") as out:
        for path, page in EXCERPT_PAGES:
            for name, r in ran.items():
                pages = r["files"][path]["pages"] or []
                text = pages[page - 1] if page <= len(pages) else "(no such page)"
                out.write(f"\n\n======== {path} page {page} — {name}\n{text[:1500]}\n")
    print(f"\nExcerpts to read side by side: {args.excerpts}", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()

"""What a suite run produces: Markdown tables printed to the terminal, and a record of the run.

Each run writes evals/results/<suite>.json (the numbers, the exact command, the data file and its
sha256, the models, the date and the git commit) and regenerates evals/RESULTS.md from every
suite's latest record, so RESULTS.md always shows the latest run of each suite and how to repeat it.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "evals" / "results"
RESULTS_MD = ROOT / "evals" / "RESULTS.md"


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)

    def markdown(self) -> str:
        align = ["---"] + ["---:"] * (len(self.columns) - 1)
        lines = [
            f"**{self.title}**",
            "",
            "| " + " | ".join(self.columns) + " |",
            "| " + " | ".join(align) + " |",
        ]
        lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in self.rows]
        return "\n".join(lines)


def share(part: int, whole: int) -> str:
    """A count out of a whole, as tables show it: "3/44 (7%)" ("–" for nothing counted)."""
    return f"{part}/{whole} ({part / whole:.0%})" if whole else "–"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


@dataclass
class Report:
    """One suite run: its tables, its numbers (JSON-able) and what produced them."""

    suite: str
    data: Path
    tables: list[Table]
    results: dict[str, Any]
    models: dict[str, str]
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        parts = [table.markdown() for table in self.tables]
        parts += [f"- {note}" for note in self.notes]
        return "\n\n".join(parts)


def git_commit() -> str:
    """The short commit, with "+changes" when the working tree differs from it."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            # The records this harness writes are not changes to what produced them.
            [
                "git",
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":!evals/results",
                ":!evals/RESULTS.md",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{commit}+changes" if dirty else commit or "unknown"


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shown(path: Path) -> str:
    """`path` relative to the project ("../shared/…" for the eval data beside it)."""
    resolved = path.resolve()
    if resolved.is_relative_to(ROOT):
        return str(resolved.relative_to(ROOT))
    if resolved.is_relative_to(ROOT.parent):
        return f"../{resolved.relative_to(ROOT.parent)}"
    return str(path)


def save(report: Report, seconds: float) -> Path:
    """Write the run's record and regenerate RESULTS.md; returns the record's path."""
    record = {
        "suite": report.suite,
        "command": "python -m evals " + shlex.join(sys.argv[1:]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": git_commit(),
        "data": shown(report.data),
        "data_sha256": sha256_of(report.data),
        "models": report.models,
        "seconds": round(seconds, 1),
        "results": report.results,
        "markdown": report.markdown(),
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{report.suite}.json"
    path.write_text(json.dumps(record, indent=2, default=str) + "\n", encoding="utf-8")
    write_results_md()
    return path


RESULTS_HEADER = """# Eval results

The latest run of each suite, written by `python -m evals <suite>` (do not edit by hand: the next
run rewrites this file from evals/results/*.json). What each number means: README.md, section
"Quality and speed". Figures on a sample (`--limit`) are noisier than on the whole file; "+changes"
after a commit means the code had uncommitted changes when the suite ran.
"""


def write_results_md(order: list[str] | None = None) -> None:
    from evals.suites import SUITES  # the suites' order, for a stable file

    records = {}
    for path in sorted(RESULTS_DIR.glob("*.json")):
        record = json.loads(path.read_text("utf-8"))
        if "suite" in record and "markdown" in record:
            records[record["suite"]] = record
    sections = [RESULTS_HEADER]
    for name in order or list(SUITES):
        record = records.get(name)
        if record is None:
            sections.append(f"## {name}\n\nNot run yet: `python -m evals {name}`.\n")
            continue
        models = ", ".join(f"{role}: {model}" for role, model in record["models"].items())
        sections.append(
            f"## {name}\n\n"
            f"- Command: `{record['command']}` ({record['seconds']:.0f} s)\n"
            f"- Data: `{record['data']}` (sha256 {record['data_sha256'][:12]}…)\n"
            f"- Models: {models or 'none'}\n"
            f"- Date: {record['date']}, commit {record['commit']}\n\n"
            f"{record['markdown']}\n"
        )
    RESULTS_MD.write_text("\n".join(sections), encoding="utf-8")

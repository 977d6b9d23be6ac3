"""Run one eval suite: `python -m evals <suite> [--data PATH] [--limit N]`.

Prints the suite's Markdown tables, writes evals/results/<suite>.json and regenerates
evals/RESULTS.md (see evals/report.py). `python -m evals --help` lists the suites.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
import time
from pathlib import Path

from core.logs import configure_logging
from evals import report as report_module
from evals.report import save, shown
from evals.suites import SUITES

# Evals reach nothing beyond what the configured models need: no model hub, no cost-map fetch.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def parser(chosen: str | None) -> argparse.ArgumentParser:
    """All suites as sub-commands; only the chosen suite's module is imported (for its options)."""
    main = argparse.ArgumentParser(prog="python -m evals", description=__doc__)
    commands = main.add_subparsers(dest="suite", required=True, metavar="suite")
    for name, (module_name, description) in SUITES.items():
        command = commands.add_parser(name, help=description, description=description)
        if name != chosen:
            continue
        module = importlib.import_module(module_name)
        command.description = module.__doc__
        command.formatter_class = argparse.RawDescriptionHelpFormatter
        command.add_argument(
            "--data",
            type=Path,
            default=module.DEFAULT_DATA,
            help=f"a file in the same format (default: {module.DEFAULT_DATA})",
        )
        command.add_argument("--limit", type=int, default=None, help="questions, spread evenly")
        command.add_argument(
            "--no-save", action="store_true", help="print only; leave results/ and RESULTS.md"
        )
        if hasattr(module, "add_arguments"):
            module.add_arguments(command)
    return main


async def main() -> int:
    chosen = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in SUITES else None
    args = parser(chosen).parse_args()
    if not args.data.is_file():
        print(f"No evaluation data at {args.data} (set EVALDATA_DIR or --data)", file=sys.stderr)
        return 1
    if args.limit is not None and args.limit < 1:
        print("--limit must be at least 1", file=sys.stderr)
        return 2
    configure_logging("INFO")  # the stack's own start-up lines, and suites' progress
    module = importlib.import_module(SUITES[args.suite][0])
    started = time.perf_counter()
    report = await module.run(args)
    seconds = time.perf_counter() - started
    print(report.markdown())
    print(f"\n{args.suite}: {seconds:.0f} s")
    if not args.no_save:
        path = save(report, seconds)
        print(f"Written to {shown(path)} and {shown(report_module.RESULTS_MD)}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

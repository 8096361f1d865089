"""``commbench report`` (one self-contained page of figures and tables) and ``commbench
figures`` (figures 1-8 as PNG and SVG files).

The work is done by :mod:`commbench.analysis`; this module only parses the arguments.
Errors in the input (a malformed result line, a missing path, a bad ``--line-rate``) are
one line on stderr and exit status 2 (:mod:`commbench.cli`).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

# pandas/matplotlib are imported inside the commands: `commbench` builds this parser on
# every start, including each rank of `commbench run`.


def parse_line_rates(items: Sequence[str] | None) -> dict[str, float]:
    """``["local=12.5", ...]`` -> ``{"local": 12.5}``; a bad item raises ``ValueError``."""
    rates: dict[str, float] = {}
    for item in items or ():
        system, sep, value = item.partition("=")
        try:
            rate = float(value)
        except ValueError:
            rate = -1.0
        if not sep or not system or not rate > 0:
            raise ValueError(
                f"bad --line-rate {item!r}: use SYSTEM=GBPS with a positive number, "
                "e.g. --line-rate local=12.5"
            )
        rates[system] = rate
    return rates


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", nargs="+", help="result files (*.jsonl) or directories")
    p.add_argument(
        "--reference",
        default=None,
        help="directory of the papers' numbers (default: the ones shipped with commbench)",
    )
    p.add_argument(
        "--line-rate",
        action="append",
        metavar="SYSTEM=GBPS",
        help="NIC line rate of a system for figure 6 (repeatable), e.g. local=12.5",
    )


def add_report_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments of the ``report`` command."""
    _common(p)
    p.add_argument("-o", "--output", default="report.html", help="report file (.html or .md)")
    p.add_argument("--format", choices=("html", "md"), help="default: from the file suffix")
    p.add_argument(
        "--images", choices=("png", "svg"), default="png", help="how figures are embedded"
    )
    p.add_argument("--title", default="commbench report")
    p.add_argument(
        "--stragglers",
        action="store_true",
        help="print which rank (and node) is the slowest how often and by how much, from "
        "per-rank and per-iteration times, instead of writing the report",
    )


def run_report(args: argparse.Namespace) -> int:
    from commbench.analysis.report import write_report
    from commbench.harness.results import check_output_path

    if args.stragglers:
        return print_stragglers(args.results)
    check_output_path(args.output, "-o")
    path = write_report(
        args.results,
        args.output,
        fmt=args.format,
        reference_dir=args.reference,
        rates=parse_line_rates(args.line_rate),
        image_format=args.images,
        title=args.title,
    )
    print(f"report written to {path}")
    return 0


def print_stragglers(paths: Sequence[str]) -> int:
    from commbench.analysis.load import load_all, load_raw_samples
    from commbench.analysis.stragglers import straggler_tables, straggler_text

    points, _ = load_all(*paths)
    print(straggler_text(*straggler_tables(points, load_raw_samples(points))), end="")
    return 0


def run_figures(args: argparse.Namespace) -> int:
    from commbench.analysis.figures import render_all
    from commbench.analysis.load import load_all, load_reference

    rates = parse_line_rates(args.line_rate)
    points, schedules = load_all(*args.results)
    if points.empty and schedules.empty:
        print(
            f"no result records in {', '.join(args.results)}: every figure says what it needs "
            "(run `make run` or `commbench run ...` first)"
        )
    ref = load_reference(args.reference)
    for r in render_all(points, schedules, args.output, reference=ref, rates=rates):
        where = ", ".join(str(p) for p in r.paths)
        if r.empty:
            first = r.empty.splitlines()[0]
            print(f"figure {r.spec.number}: nothing to draw ({first}) -> {where}")
        else:
            print(f"figure {r.spec.number}: {where}")
    return 0


def add_parser(sub) -> None:
    rep = sub.add_parser(
        "report",
        help="write one self-contained HTML (or Markdown) report from result files",
        description="Load every result file (*.jsonl) given or found under the given "
        "directories and write one page: figures 1-8 inlined, the best implementation per "
        "size and system, speed-ups with their spread, fraction of NIC line rate, cost-model "
        "error, stragglers and the papers' reference numbers (--stragglers: print only the "
        "stragglers' tables).",
    )
    add_report_arguments(rep)
    rep.set_defaults(func=run_report)
    fig = sub.add_parser("figures", help="write figures 1-8 (PNG and SVG) from result files")
    _common(fig)
    fig.add_argument("-o", "--output", default="results/figures", help="output directory")
    fig.set_defaults(func=run_figures)

"""``commbench compare BASE [NEW]``: the arguments (:mod:`commbench.analysis.compare` does
the work). Exit status 1 when a point of NEW is slower than BASE beyond its interval: a
regression gate for a CI pipeline."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="compare two runs (or two implementations) point by point, with 95%% intervals",
        description="Match the points of BASE and NEW (result files or folders) on "
        "collective, size, dtype, workload, ranks and system - not on the implementation - "
        "and give NEW's time over BASE's with its 95% interval and a verdict (faster, slower, "
        "no difference). Exit status 1 when a point is slower beyond its interval. With one "
        "path, --impl A --vs B compares two implementations of one run (A over B).",
    )
    p.add_argument("base", help="BASE results (a *.jsonl file or a folder of them)")
    p.add_argument("new", nargs="?", help="NEW results (default: BASE, with --impl and --vs)")
    p.add_argument(
        "--impl", help="NEW's implementation(s), comma-separated (also BASE's without --vs)"
    )
    p.add_argument("--vs", help="BASE's implementation(s), comma-separated: the baseline")
    p.add_argument(
        "--kind",
        choices=("all", "measured", "modelled"),
        default="all",
        help="which records to compare (default all)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.0,
        metavar="PCT",
        help="a slower point counts as a regression only when its interval lies above "
        "1 + PCT/100 (default 0)",
    )
    p.add_argument("--tiers", action="store_true", help="add where the bytes went, per side")
    p.add_argument("--html", metavar="FILE", help="also write the comparison as one HTML page")
    p.set_defaults(func=run_compare)


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (text or "").split(",") if n.strip())


def run_compare(args: argparse.Namespace) -> int:
    from commbench.analysis.compare import MATCH, compare, html_page, text_table
    from commbench.compare.records import fill_tiers, load_points
    from commbench.errors import UsageError
    from commbench.harness.results import check_output_path

    new_impls, base_impls = _names(args.impl), _names(args.vs)
    if args.new is None and not (new_impls and base_impls):
        raise UsageError("give NEW results, or --impl A --vs B to compare two implementations")
    if not base_impls:
        base_impls = new_impls
    if not 0 <= args.tolerance < 1000:
        raise UsageError(f"--tolerance {args.tolerance}: give a percentage >= 0")
    if args.html:
        check_output_path(args.html, "--html")
    base = load_points([args.base], args.kind)
    new = load_points([args.new or args.base], args.kind)
    if args.tiers:
        base, new = [fill_tiers(r) for r in base], [fill_tiers(r) for r in new]
    result = compare(base, new, base_impls, new_impls, args.tolerance / 100)
    if not result.rows:
        raise UsageError(
            f"no point of {args.new or args.base} matches one of {args.base} "
            f"({len(base)} and {len(new)} records; points match on {', '.join(MATCH)})"
        )
    what_new = f"{args.new or args.base}" + (f" ({', '.join(new_impls)})" if new_impls else "")
    what_base = f"{args.base}" + (f" ({', '.join(base_impls)})" if base_impls else "")
    print(f"# commbench compare: NEW {what_new} over BASE {what_base}")
    print(
        "# time: median per-iteration time of the slowest rank, 95% bootstrap interval "
        "(launches, iterations); new/base < 1: NEW is faster"
    )
    print(text_table(result, args.tiers))
    print(f"# {result.summary()}")
    if result.caveat():
        print(f"# note: {result.caveat()}")
    if args.html:
        from pathlib import Path

        page = html_page(result, "commbench compare", [what_base, what_new], args.tiers)
        Path(args.html).write_text(page, encoding="utf-8")
        print(f"# page written to {args.html}")
    status = result.exit_status()
    if status:
        worst = max(result.regressions, key=lambda r: r.ratio.low)
        print(
            f"commbench compare: {len(result.regressions)} point(s) slower beyond their "
            f"interval (worst: {worst.new_impl} at {worst.key['size_bytes']} B, "
            f"x{worst.ratio.value:.3f})",
            file=sys.stderr,
        )
    return status

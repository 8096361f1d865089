"""Stalls in a stepped collective, from ``commbench run --timeline``: per call and step,
the rank whose wait took longest, where it took more than ``--over-ms`` above the median
rank's (:func:`commbench.analysis.timeline.wait_stalls`); per implementation and size, how
many calls had one, their excess and the nodes they fell on
(:func:`~commbench.analysis.timeline.stall_table`).

    commbench run alltoallv --impl fast -b 1M -e 1M --workload uniform --timing latency \\
        -a 3 -n 20 -w 1 --timeline --out fast.jsonl          # under the launcher
    python -m commbench.benchmarks.stalls fast.jsonl [more.jsonl ...] --over-ms 15

On the emulated 4x2 FAST's stages showed such stalls in about a quarter of its calls and
fan-out (one step) none (docs/model-validation-history.md, item 3 of q20).
"""

from __future__ import annotations

import argparse
import sys

from commbench.analysis import load_all
from commbench.analysis.timeline import load_timeline, stall_table


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m commbench.benchmarks.stalls",
                                description=__doc__.split("\n\n")[0])  # fmt: skip
    p.add_argument("results", nargs="+", help="result files or folders of --timeline runs")
    p.add_argument("--over-ms", type=float, default=15.0,
                   help="a stall: the longest wait this many ms above the median rank's (15)")  # fmt: skip
    args = p.parse_args(argv)
    if not args.over_ms > 0:
        p.error(f"--over-ms {args.over_ms:g}: give a positive number of milliseconds")
    try:
        points, _ = load_all(*args.results)
        table = stall_table(load_timeline(points), args.over_ms * 1e3)
    except (OSError, ValueError) as exc:
        p.error(str(exc))
    if table.empty:
        p.error("no timeline spans in those results: record them with commbench run ... "
                "--timeline --out FILE")  # fmt: skip
    us = [c for c in table.columns if c.endswith("_us")]
    print(table.to_string(index=False, formatters={c: "{:.0f}".format for c in us}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

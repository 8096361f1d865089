"""How late a butterfly's partners come, per point, from ``commbench run --timeline``.

For each point of the given result files (recursive doubling, Rabenseifner, NVRAR: one
exchange per step with rank r XOR ``--distances[step]``): the measured time and, over
ranks, calls and steps (medians), the step (start of the posts to the end of the wait),
its posts, how late the partner's posts ended for the rank that waited, how long that
rank's exchange took once both had posted, and the same for the rank that posted last
(:func:`commbench.analysis.timeline.lateness_table`). Then, per implementation and
size over every point given, each direction's time (a rank's wait's end less its
partner's posts': on NVRAR's one-sided steps the partner's cells into it) as least,
median, upper quartile and most (:func:`~commbench.analysis.timeline.direction_table`):
the slowest rank of a call collects that spread over the steps. The ranks must have
read one clock (one machine: the emulated cluster).

    commbench run allreduce --impl rabenseifner -b 256 -e 4K -f 16 --timing latency \\
        -a 3 -n 10 -w 1 -d bf16 --timeline --out rab.jsonl      # under the launcher
    python -m commbench.benchmarks.lateness rab.jsonl --distances 4,2,1,1,2,4

Distances on 8 single-rank nodes: recursive doubling and NVRAR ``1,2,4``, this suite's
Rabenseifner ``4,2,1,1,2,4``.
"""

from __future__ import annotations

import argparse
import sys

from commbench.analysis import load_all
from commbench.analysis.timeline import direction_table, lateness_table, load_timeline


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m commbench.benchmarks.lateness",
                                description=__doc__.split("\n\n")[0])  # fmt: skip
    p.add_argument("results", nargs="+", help="result files or folders of --timeline runs")
    p.add_argument("--distances", required=True,
                   help="the partner of step k is rank XOR the k-th (e.g. 4,2,1,1,2,4)")  # fmt: skip
    args = p.parse_args(argv)
    try:
        distances = [int(x) for x in args.distances.split(",")]
    except ValueError:
        p.error(f"--distances {args.distances!r}: give integers separated by commas")
    if not distances or min(distances) < 1:
        p.error(f"--distances {args.distances!r}: every distance must be at least 1")
    try:
        points, _ = load_all(*args.results)
        spans = load_timeline(points)
        table = lateness_table(points, spans, distances)
        directions = direction_table(spans, distances)
    except (OSError, ValueError) as exc:
        p.error(str(exc))
    if table.empty:
        p.error("no timeline spans of post and wait steps in those results: record them "
                "with commbench run ... --timeline --out FILE")  # fmt: skip
    for t in (table, directions):
        us = [c for c in t.columns if c.endswith("_us")]
        print(t.to_string(index=False, formatters={c: "{:.0f}".format for c in us}))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

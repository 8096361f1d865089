"""When each rank left each step of a spread-out call, measured (``commbench run
--timeline``) and, with ``--system``, as the flow model has it for the same point.

    commbench run alltoallv --impl spreadout -b 4M -e 4M --workload W -n 4 -w 1 \\
        --timing latency --timeline --out sp.jsonl            # under the launcher
    python -m commbench.benchmarks.step_ends sp.jsonl [more.jsonl ...] \\
        [--system PROFILE.toml] [--call N]

Per spread-out point, one call (the median call, or ``--call``): a row per rank, its
step ends in ms after the call's first step began on any rank (the ranks lined up on one
machine's clock: the emulated cluster's), and under each the model's
(:func:`commbench.kernels.model.flows.step_ends` on the point's traffic, every rank
starting at 0, no timeouts). Where a sender leaves a step and how long the flows into
its receivers take is what the model of a TCP fabric's early release rests on
(docs/model-validation-history.md, "A NIC sends its flows in turn").
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import pandas as pd

from commbench.analysis import load_all
from commbench.analysis.timeline import load_timeline, median_call, rank_step_ends
from commbench.errors import UsageError
from commbench.harness.backends.dtypes import parse_dtype
from commbench.harness.workloads import generate
from commbench.kernels.model.alltoallv import spreadout_steps
from commbench.kernels.model.flows import step_ends
from commbench.model.simulate import fabric_from_profile


def modelled_ends(point: pd.Series, system: str) -> np.ndarray:
    """The flow model's (P - 1) x P step ends (µs) of a spread-out point's traffic on
    ``system`` (a profile's name or path) at the point's GPUs per node."""
    fabric = fabric_from_profile(system, int(point["gpus_per_node"]))
    if not isinstance(point.get("dtype"), str):
        raise ValueError(f"run {point['run_id']} point {point['point']}: no dtype to model it by")
    unit = parse_dtype(point["dtype"]).itemsize
    seed = point.get("seed")
    seed = None if seed is None or pd.isna(seed) else int(seed)
    traffic = generate(point["workload"], int(point["nranks"]), int(point["size_bytes"]),
                       seed=seed, unit=unit)  # fmt: skip
    return step_ends(fabric, *spreadout_steps(traffic))


def _row(label: str, values_us) -> str:
    return f"{label:>8} " + " ".join(f"{v / 1e3:7.1f}" for v in values_us)


def report(points: pd.DataFrame, spans: pd.DataFrame, system: str | None,
           call: int | None) -> list[str]:  # fmt: skip
    """The table of each spread-out point (see the module docstring)."""
    lines = []
    for _, point in points[points["impl"] == "spreadout"].iterrows():
        launch = point["launch_id"] if isinstance(point["launch_id"], str) else ""
        mine = spans[(spans["run_id"] == point["run_id"]) & (spans["launch_id"] == launch)
                     & (spans["point"] == point["point"])]  # fmt: skip
        if mine.empty:
            continue
        n = median_call(mine) if call is None else call
        ends = rank_step_ends(mine[mine["call"] == n])
        if ends.empty:
            raise UsageError(f"no call {n} in {point['run_id']} point {point['point']}")
        table = ends.pivot(index="rank", columns="step", values="end_us").sort_index()
        model = modelled_ends(point, system) if system else None
        lines.append(f"# {point['workload']} {int(point['size_bytes'])} B a rank, "
                     f"{int(point['nodes'])}x{int(point['gpus_per_node'])}, call {n} "
                     f"(run {point['run_id']}); step ends, ms")  # fmt: skip
        lines.append(f"{'rank':>8} " + " ".join(f"{k + 1:>7}" for k in table.columns))
        for r, row in table.iterrows():
            lines.append(_row(str(r), row.to_numpy()))
            if model is not None:
                lines.append(_row("model", model[:, int(r)]))
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m commbench.benchmarks.step_ends",
                                description=__doc__.split("\n\n")[0])  # fmt: skip
    p.add_argument("results", nargs="+", help="result files or folders of --timeline runs")
    p.add_argument(
        "--system", help="also the flow model's ends on this profile (name or PATH.toml)"
    )
    p.add_argument("--call", type=int, help="this timed call (default: the median call)")
    args = p.parse_args(argv)
    if args.call is not None and args.call < 0:
        p.error(f"--call {args.call}: give a call number >= 0")
    try:
        points, _ = load_all(*args.results)
        spans = load_timeline(points)
        lines = report(points, spans, args.system, args.call)
    except (OSError, ValueError, UsageError) as exc:
        p.error(str(exc))
    if not lines:
        p.error("no spread-out timeline in those results: record one with commbench run "
                "alltoallv --impl spreadout ... --timeline --out FILE")  # fmt: skip
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

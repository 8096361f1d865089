"""``make cluster-bench``: the issue-#12 target table, measured on emulated clusters.

For 4 nodes x 2 ranks and 2 nodes x 4 ranks, with a deep and a shallow (lossy) switch
queue (``jobs/emulated/target-*.toml``: NIC = shared memory / 25, capped at what the CPUs
shape), it brings up its own cluster (prefix ``cbb``, a temporary state dir), runs
all-to-allv at 4 MiB per rank, the implementations interleaved launch by launch, and
takes it down again. Times are max over ranks per call (``--timing latency``), medians
over the calls. NIC bytes come from the NICs' counters around each launch. The model
column is ``commbench simulate`` on the same cluster's nominal constants (its NIC's TCP
payload rate, the profile's stage cost), uncalibrated; ``make cluster-validate``
(:mod:`commbench.benchmarks.validate`) predicts from a ``commbench calibrate`` profile.
(Its earlier "calibrated" column took a switch cap from this run's own fan-out time:
fitting, not predicting; the cap is now the measured ``fabric_GBps`` in the model.)

    python -m commbench.benchmarks.cluster [--rounds R] [--iters N] [--workloads uniform] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from commbench.cluster import netns
from commbench.cluster.launcher import measure_shm_GBps, model_argv
from commbench.cluster.plan import ClusterSpec
from commbench.cluster.profiles import load_emulated_profile

PREFIX = "cbb"
SHAPES = ((4, 2), (2, 4))
#: ``fast`` is FAST told the fabric's stage cost (``stage_cost_bytes``, as its scheduler
#: expects); ``fast-default`` the scheduler's default (no stage cost)
IMPLS = ("fast", "fanout", "mpi", "spreadout", "balance-only", "fast+sched", "fast-default")
#: (queue profile, workloads, implementations) measured on every shape
PLAN = (
    ("target-deep", ("uniform", "zipf:0.8"), IMPLS),
    ("target-shallow", ("zipf:0.8",), ("fast", "fanout", "mpi")),
)


def impl_argv(label: str, spec: ClusterSpec) -> list[str]:
    """``--impl`` and ``--param`` words for a row label."""
    if label == "fast-default":
        return ["--impl", "fast"]
    if label in ("fast", "fast+sched") and spec.stage_cost_bytes:
        return ["--impl", label, "--param", f"stage_cost_bytes={spec.stage_cost_bytes}"]
    return ["--impl", label]


SIZE = "4M"


def launch(folder: Path, argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "commbench", "cluster", "exec", "--prefix", PREFIX,
           "--state", str(folder), "--timeout", str(timeout), "--", *argv]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30)


def busiest_nic_bytes(before: dict, after: dict) -> int:
    return max(
        max(
            after[k]["tx_bytes"] - before[k]["tx_bytes"],
            after[k]["rx_bytes"] - before[k]["rx_bytes"],
        )
        for k in after
    )


def lower_bound_bytes(workload: str, spec: ClusterSpec, size: int, seed: int = 1) -> float:
    """Busiest node's inter-node bytes (sent or received) spread over its G NICs."""
    from commbench.harness.workloads import generate

    t = generate(workload, spec.nranks, size, seed=seed, unit=4)
    g = spec.ranks_per_node
    node = t.reshape(spec.nodes, g, spec.nodes, g).sum(axis=(1, 3))
    np.fill_diagonal(node, 0)
    return max(node.sum(axis=1).max(), node.sum(axis=0).max()) / g


def measure(spec: ClusterSpec, folder: Path, impl: str, workload: str, iters: int, out: Path):
    """One launch: per-call max-over-ranks times and the busiest NIC's bytes per call."""
    warmup = 1
    before = netns.counters(spec)
    proc = launch(folder, ["commbench", "run", "alltoallv", *impl_argv(impl, spec), "-b", SIZE, "-e",
                           SIZE, "--workload", workload, "--timing", "latency", "-n", str(iters),
                           "-w", str(warmup), "--out", str(out)])  # fmt: skip
    after = netns.counters(spec)
    if proc.returncode:
        raise RuntimeError(f"{impl} {workload} failed: {proc.stderr.strip()[-800:]}")
    raw = [json.loads(line) for line in out.with_name(out.stem + ".raw.jsonl").open()]
    rec = [json.loads(line) for line in out.open()][-1]
    per_call = np.max(np.array(raw[-1]["samples_us"]), axis=0)  # max over ranks
    calls = warmup + iters + 2  # + the finish call and the checked call
    drops = sum(after[k]["switch_drops"] - before[k]["switch_drops"] for k in after)
    return {
        "samples_us": per_call.tolist(),
        "median_us": float(np.median(per_call)),
        "nic_bytes_per_call": busiest_nic_bytes(before, after) / calls,
        "switch_drops": drops,
        "nwrong": rec["nwrong"],
        "rank_finish_us": rec["rank_finish_us"],
        "stages": (rec.get("info") or {}).get("stages"),
    }


def modelled(spec: ClusterSpec, folder: Path, workload: str) -> dict[str, float]:
    """The cost model's time per implementation for this cluster and workload (µs)."""
    out = folder / f"model-{workload.replace(':', '')}.jsonl"
    argv = model_argv(spec, workload, SIZE)
    subprocess.run([sys.executable, "-m", "commbench", "simulate", *argv, "--out", str(out)],
                   capture_output=True, text=True, check=True, timeout=300)  # fmt: skip
    return {r["impl"]: r["time_us"] for r in map(json.loads, out.open())}


def run_shape(nodes: int, rpn: int, shm: float, args, rows: list[dict]) -> None:
    for profile, every_workload, impls in PLAN:
        workloads = [w for w in every_workload if not args.workloads or w in args.workloads]
        if not workloads:
            continue
        prof = load_emulated_profile(profile)
        spec = prof.cluster_spec(PREFIX, nodes, rpn, prof.nic_mbit(shm), shm_GBps=round(shm, 3),
                                 stage_cost_us=prof.stage_cost_us)  # fmt: skip
        folder = Path(tempfile.mkdtemp(prefix="cbb-state-"))
        if netns.namespaces_with_prefix(PREFIX):
            netns.remove(PREFIX, folder)
        netns.up(spec, folder)
        try:
            for workload in workloads:
                model = modelled(spec, folder, workload)
                lb = lower_bound_bytes(workload, spec, 4 << 20)
                for rnd in range(args.rounds):
                    for impl in impls:  # interleaved: every implementation once per round
                        out = args.out / f"{nodes}x{rpn}-{profile}-{impl}.jsonl"
                        m = measure(spec, folder, impl, workload, args.iters, out)
                        print(f"  {nodes}x{rpn} {profile:14s} {workload:9s} {impl:13s} "
                              f"{m['median_us'] / 1e3:8.1f} ms  drops {m['switch_drops']}",
                              flush=True)  # fmt: skip
                        rows.append(dict(shape=f"{nodes}x{rpn}", queue=profile, workload=workload,
                                         impl=impl, round=rnd, lower_bound_bytes=lb,
                                         model_us=model.get(impl), nic_mbit=spec.nic_mbit,
                                         **m))  # fmt: skip
        finally:
            netns.remove(PREFIX, folder)


def tables(df: pd.DataFrame) -> str:
    """The ratio table against the targets, and modelled vs measured."""
    med = df.groupby(["shape", "queue", "workload", "impl"]).agg(
        median_us=("samples_us", lambda s: float(np.median(np.concatenate(list(s))))),
        nic=("nic_bytes_per_call", "median"),
        lb=("lower_bound_bytes", "first"),
        model_us=("model_us", "first"),
        drops=("switch_drops", "sum"),
        wrong=("nwrong", "sum"),
    )
    t = med["median_us"]
    lines = ["", "## Targets (ratio = other's time / FAST's time; > 1: FAST faster)", "",
             "| shape | measured | target | value |", "|---|---|---|---|"]  # fmt: skip
    for shape in sorted(df["shape"].unique()):

        def r(queue, wl, other, fast="fast", shape=shape):
            """``other``'s time over ``fast``'s; NaN where a row was not measured."""
            key = (shape, queue, wl)
            return t.get((*key, other), np.nan) / t.get((*key, fast), np.nan)

        def nic(wl, impl, shape=shape):
            """``impl``'s busiest NIC over the lower bound (deep queue); NaN if not measured."""
            key = (shape, "target-deep", wl, impl)
            return med.loc[key].nic / med.loc[key].lb if key in med.index else np.nan

        wire, fast_nic = nic("uniform", "fanout"), nic("zipf:0.8", "fast")
        rows = [
            ("FAST vs fan-out, zipf 0.8, deep", ">= 1.3", r("target-deep", "zipf:0.8", "fanout")),
            ("(FAST without the stage cost vs fan-out, zipf 0.8, deep)", "-",
             r("target-deep", "zipf:0.8", "fanout", "fast-default")),
            ("FAST vs fan-out, zipf 0.8, shallow", ">= 2", r("target-shallow", "zipf:0.8", "fanout")),
            ("FAST vs fan-out, uniform", ">= 0.9", r("target-deep", "uniform", "fanout")),
            ("FAST vs MPI_Alltoallv, zipf 0.8", ">= 1.2", r("target-deep", "zipf:0.8", "mpi")),
        ]  # fmt: skip
        lines += [
            f"| {shape} | {what} | {target} | {v:.2f} |" for what, target, v in rows if v == v
        ]
        if fast_nic == fast_nic and wire == wire:
            lines.append(f"| {shape} | busiest NIC / lower bound, FAST (raw; per wire overhead "
                         f"{wire:.3f}) | <= 1.05 | {fast_nic:.3f}; {fast_nic / wire:.3f} |")  # fmt: skip
    lines += ["", "## Modelled vs measured (ms; model = commbench simulate at the NIC's TCP "
              "payload rate, uncalibrated; the calibrated prediction is make cluster-validate's)",
              "", "| shape | workload (queue) | impl | measured | modelled | mod/meas | drops |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip

    def cell(model, measured) -> tuple[str, str]:
        if not (model == model and model):  # NaN or None: not modelled
            return "n/a", "n/a"
        return f"{model / 1e3:.1f}", f"{model / measured:.2f}"

    for (shape, queue, wl, impl), row in med.iterrows():
        m, mr = cell(row.model_us, row.median_us)
        lines.append(f"| {shape} | {wl} ({queue}) | {impl} | {row.median_us / 1e3:.1f} | {m} "
                     f"| {mr} | {int(row.drops)} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m commbench.benchmarks.cluster", description=__doc__)
    p.add_argument("--rounds", type=int, default=1, help="interleaved rounds per point")
    p.add_argument("--iters", type=int, default=5, help="timed calls per launch (>= 5)")
    p.add_argument(
        "--out", type=Path, default=None, help="folder (default results/cluster-bench/STAMP)"
    )
    p.add_argument("--workloads", nargs="+", default=None, choices=("uniform", "zipf:0.8"),
                   help="measure only these workloads' rows (default: all)")  # fmt: skip
    p.add_argument("--tables", type=Path, default=None, help="only redraw a bench.jsonl's tables")
    args = p.parse_args(argv)
    if args.tables:
        print(tables(pd.read_json(args.tables, lines=True)))
        return 0
    if args.iters < 5 or args.rounds < 1:
        p.error("--iters must be at least 5 and --rounds at least 1")
    netns.preflight()
    stamp = _dt.datetime.now().strftime("%Y%m%dT%H%M%S")
    args.out = args.out or Path("results/cluster-bench") / stamp
    args.out.mkdir(parents=True, exist_ok=True)
    shm = measure_shm_GBps()
    print(f"# shared memory (2-rank 4 MiB ping-pong): {shm:.2f} GB/s; machine shared, loaded")
    rows: list[dict] = []
    try:
        for nodes, rpn in SHAPES:
            run_shape(nodes, rpn, shm, args, rows)
    finally:
        if rows:
            pd.DataFrame(rows).to_json(args.out / "bench.jsonl", orient="records", lines=True)
    text = tables(pd.DataFrame(rows))
    (args.out / "tables.md").write_text(text + "\n")
    print(text)
    print(f"\n# rows: {args.out / 'bench.jsonl'}; tables: {args.out / 'tables.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

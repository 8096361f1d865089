"""Realistic result records for the analysis tests, following the driver's record schema.

Times come from simple alpha-beta formulas with seeded per-rank noise, so every figure
has something shaped like real data: NVRAR beating NCCL at small sizes, FAST beating
fan-out on skew with its ranks finishing together, modelled curves next to measured ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

KiB, MiB = 1 << 10, 1 << 20


def make_record(
    *,
    collective: str = "allreduce",
    impl: str = "mpi",
    size_bytes: int = 64 * KiB,
    time_us: float = 100.0,
    system: str = "perlmutter",
    nodes: int = 4,
    gpus_per_node: int = 4,
    workload: str | None = None,
    modelled: bool = False,
    dtype: str = "bfloat16",
    seed: int = 0,
    jitter: float = 0.05,
    finish: bool = False,
    rank_skew: float = 0.0,
    params: dict | None = None,
    rep: int = 0,
) -> dict:
    """One record as ``commbench run`` (or ``simulate`` when ``modelled``) writes it."""
    nranks = nodes * gpus_per_node
    rng = np.random.default_rng([seed, rep, size_bytes % 1000003, len(impl)])
    if modelled:
        ranks = np.full(nranks, time_us)
    else:
        ranks = time_us * (1 + jitter * rng.random(nranks)) * (1 + rank_skew * rng.random(nranks))
    reduce = "max" if collective.startswith("alltoall") else "avg"
    chosen = float(ranks.max() if reduce == "max" else ranks.mean())
    factor = 2 * (nranks - 1) / nranks if collective == "allreduce" else (nranks - 1) / nranks
    metric = size_bytes if collective == "allreduce" else int(size_bytes * (1.5 if workload else 1))
    algbw = metric / (chosen * 1e3)
    return {
        "run_id": f"test-{system}-{rep}",
        "timestamp": "2026-01-01T00:00:00+00:00",
        "git_sha": "0000000",
        "system": system,
        "hostnames": [f"nid{i:03d}" for i in range(nodes)],
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "nranks": nranks,
        "backend": "model" if modelled else "cuda",
        "collective": collective,
        "impl": impl,
        "params": params or {},
        "dtype": dtype,
        "size_bytes": size_bytes,
        "count": size_bytes // 2,
        "metric_bytes": metric,
        "workload": workload,
        "seed": seed,
        "timing_mode": "pipelined",
        "iters": 20,
        "warmup": 5,
        "time_us_min": float(ranks.min()),
        "time_us_avg": float(ranks.mean()),
        "time_us_max": float(ranks.max()),
        "time_us_p50": float(np.median(ranks)),
        "time_us_p99": float(np.quantile(ranks, 0.99)),
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * factor,
        "busbw_factor": factor,
        "time_reduction": reduce,
        "time_us": chosen,
        "nwrong": 0,
        "modelled": modelled,
        "rank_time_us": ranks.tolist(),
        "rank_finish_us": (ranks * 1.02).tolist() if finish else None,
        "info": {},
        "versions": {"python": "3.11"},
        "env": {},
        "raw_file": None,
    }


def allreduce_records(system="perlmutter", nodes=4, gpn=4, reps=2, modelled=False) -> list[dict]:
    """NVRAR, NCCL, MPI and ring allreduce, 64 KiB .. 2 MiB."""
    out = []
    sizes = [64 * KiB << k for k in range(6)]
    lat = {"nvrar": (60, 0.05), "nccl": (180, 0.06), "mpi": (120, 0.09), "ring": (200, 0.08)}
    for rep in range(1 if modelled else reps):
        for impl, (alpha, beta) in lat.items():
            for s in sizes:
                t = alpha + beta * s / KiB
                out.append(
                    make_record(
                        impl=impl,
                        size_bytes=s,
                        time_us=t,
                        system=system,
                        nodes=nodes,
                        gpus_per_node=gpn,
                        modelled=modelled,
                        rep=rep,
                    )
                )
    return out


def alltoallv_records(system="mi300x", nodes=4, gpn=8, modelled=False, reps=2) -> list[dict]:
    """FAST, fan-out, spread-out, MPI and balance-only over Zipf exponents and sizes."""
    out = []
    impls = {
        "fast": (1.0, 0.02),
        "fanout": (1.8, 0.8),
        "spreadout": (2.5, 0.1),
        "mpi": (2.2, 0.3),
        "balance-only": (1.4, 0.3),
    }
    for rep in range(1 if modelled else reps):
        for impl, (slow, skew) in impls.items():
            for s in (0.1, 0.8, 0.99):
                for size in (MiB, 4 * MiB, 16 * MiB):
                    if s != 0.8 and size != 16 * MiB:
                        continue
                    t = 20 + slow * (1 + s) * size / (10 * 1e3)
                    out.append(
                        make_record(
                            collective="alltoallv",
                            impl=impl,
                            size_bytes=size,
                            time_us=t,
                            system=system,
                            nodes=nodes,
                            gpus_per_node=gpn,
                            workload=f"zipf:{s}@{rep}",
                            modelled=modelled,
                            finish=True,
                            rank_skew=skew * s,
                            rep=rep,
                            dtype="uint8",
                        )
                    )
    return out


def modelled_scaling_records() -> list[dict]:
    """Modelled H200 all-to-allv over 2..40 servers and Perlmutter allreduce over nodes."""
    out = []
    for servers in (2, 4, 8, 16, 40):
        for impl, slow in (("fast", 1.0), ("fanout", 1.6), ("spreadout", 1.3)):
            t = 10 * servers + slow * 64 * MiB / (48.9 * 1e3)
            out.append(
                make_record(
                    collective="alltoallv",
                    impl=impl,
                    size_bytes=64 * MiB,
                    time_us=t,
                    system="h200",
                    nodes=servers,
                    gpus_per_node=8,
                    workload="zipf:0.8",
                    modelled=True,
                )
            )
    for nodes in (2, 4):
        out += allreduce_records(system="perlmutter", nodes=nodes, modelled=True)
    # One measured H200 point so figure 7 shows the model's error.
    out.append(
        make_record(
            collective="alltoallv",
            impl="fast",
            size_bytes=64 * MiB,
            time_us=1500.0,
            system="h200",
            nodes=2,
            gpus_per_node=8,
            workload="zipf:0.8@3",
        )
    )
    return out


def schedule_records() -> list[dict]:
    """Schedule-synthesis records (figure 4) in the schema analysis.load documents (hand-made)."""
    out = []
    for gpus in (16, 64, 128, 320, 1024):
        servers = gpus // 8
        for strategy, per in (("plain", 3.0), ("bottleneck", 1.0)):
            for rep in range(3):
                out.append(
                    {
                        "collective": "schedule",
                        "gpus": gpus,
                        "servers": servers,
                        "strategy": strategy,
                        "synthesis_us": per * servers**3 * (1 + 0.1 * rep),
                        "stages": min(servers**2 - 2 * servers + 2, 4 * servers)
                        if servers > 1
                        else 1,
                        "lower_bound": 8 * MiB,
                        "modelled_time_over_lb": 1.0 + 0.02 * servers / 8,
                        "workload": f"zipf:0.8@{rep}",
                        "size_bytes": 64 * MiB,
                        "system": "h200",
                    }
                )
    return out


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
    return path


def synthetic_results(directory: Path) -> Path:
    """A results tree with every kind of record, in several files and sub-directories."""
    write_jsonl(directory / "perlmutter" / "run1" / "allreduce.jsonl", allreduce_records())
    write_jsonl(directory / "vista" / "allreduce.jsonl", allreduce_records("vista", 2, 1, reps=1))
    write_jsonl(directory / "mi300x" / "alltoallv.jsonl", alltoallv_records())
    write_jsonl(directory / "model" / "simulate.jsonl", modelled_scaling_records())
    write_jsonl(directory / "sched" / "schedule.jsonl", schedule_records())
    return directory


def small_results(directory: Path) -> Path:
    """A few records of every kind: enough for each figure, quick to render."""
    a2a = [r for r in alltoallv_records(reps=1) if r["impl"] in ("fast", "fanout")]
    model = [r for r in modelled_scaling_records() if r["collective"] == "alltoallv"]
    model += [r for r in allreduce_records(nodes=4, modelled=True) if r["impl"] != "ring"]
    write_jsonl(directory / "allreduce.jsonl", allreduce_records(reps=1))
    write_jsonl(directory / "alltoallv.jsonl", a2a)
    write_jsonl(directory / "model.jsonl", model)
    write_jsonl(directory / "schedule.jsonl", schedule_records()[::3])
    return directory

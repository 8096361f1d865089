"""Cost-model benchmark: issue targets, evaluation speed at 1024 GPUs, the strategy study.

Run: ``python -m commbench.benchmarks.model`` (``--full`` for the whole study grid that
docs/cost-model.md records; ``--skip-study`` for targets and speed only). Everything is
*modelled* with the ``h200`` profile's constants (overridden where a line says so).

1. Targets: FAST at 320 GPUs (40 x 8), ``zipf:0.8``, 16/64/256 MiB per GPU, 2 and 10 µs per
   stage, next to fan-out, spread-out and balance-only: modelled time over the lower bound
   (busiest NIC's bytes over its bandwidth). Goal at 256 MiB: <= 1.05 (2 µs), <= 1.10 (10 µs),
   for the model-tuned options (``commbench.kernels.model.tune``, what ``commbench simulate`` runs).
2. Speed: one 1024-GPU all-to-allv evaluated per pattern (goal < 1 s each), with the
   scheduler's synthesis and ``transfers()`` table timed on their own.
3. Study: the scheduler's stage-count strategies by modelled time over the lower bound,
   16-320 GPUs x 1-256 MiB per GPU; the geometric mean picks the default.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

import commbench.kernels.fast
from commbench.harness.workloads import generate
from commbench.kernels.model import alltoallv as a2a
from commbench.kernels.model import tune
from commbench.model.simulate import fabric_from_profile

MiB = 1 << 20
WORKLOAD = "zipf:0.8"
SEED = 1

#: name -> scheduler options; ``cost`` means stage_cost_bytes from the fabric
STRATEGIES = {
    "bvn (exact)": {"strategy": "bvn", "max_stages": None},
    "bottleneck (exact)": {"strategy": "bottleneck", "max_stages": None},
    "threshold (exact)": {"strategy": "threshold", "max_stages": None},
    "bottleneck+quantum": {"strategy": "bottleneck", "quantum": "auto", "max_stages": None},
    "bottleneck+tail(2S)": {"strategy": "bottleneck"},
    "bottleneck+tail+cost": {"strategy": "bottleneck", "cost": True},  # DEFAULT
    "threshold+tail+cost": {"strategy": "threshold", "cost": True},
    "bottleneck+quantum+tail+cost": {"strategy": "bottleneck", "quantum": "auto", "cost": True},
}


#: what ``commbench simulate --no-tune`` uses: the scheduler's defaults + the model's stage cost
DEFAULT = STRATEGIES["bottleneck+tail+cost"]


def _schedule(traffic: np.ndarray, fabric, opts: dict):
    opts = dict(opts)
    if opts.pop("cost", False):
        opts["stage_cost_bytes"] = fabric.stage_cost_bytes
    return commbench.kernels.fast.schedule(traffic, fabric.gpus_per_node, **opts)


def _best_of(fn, repeats: int = 3) -> tuple[float, object]:
    best, out = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def targets(servers: int = 40) -> bool:
    print(f"## Targets: modelled, h200 constants, {servers} x 8 GPUs, {WORKLOAD}@{SEED}")
    print(
        "| size/GPU | stage | impl | time (µs) | lb (µs) | time/lb | stages | prologue | fixed "
        "| epilogue |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    ok = True
    chosen = []
    for stage_us, goal in ((2.0, 1.05), (10.0, 1.10)):
        fabric = fabric_from_profile("h200", stage_us=stage_us)
        for size in (16 * MiB, 64 * MiB, 256 * MiB):
            d = generate(WORKLOAD, servers * 8, size, seed=SEED)
            tr = _schedule(d, fabric, {"cost": True}).transfers()
            capped = _schedule(d, fabric, {"cost": True, "max_stage_bytes": "auto"})
            t0 = time.perf_counter()
            tuned = tune.tune_fast(d, 8, fabric)
            secs = time.perf_counter() - t0
            rows = [
                ("fast, scheduler defaults", a2a.fast(d, tr, fabric)),
                ("fast, max_stage_bytes=auto", a2a.fast(d, capped.transfers(), fabric)),
                ("**fast, model-tuned** (simulate's default)", tuned.prediction),
                ("balance-only", a2a.balance_only(d, tr, fabric)),
                ("fanout", a2a.fanout(d, fabric)),
                ("spreadout", a2a.spreadout(d, fabric)),
            ]
            for name, pred in rows:
                info = pred.info
                lb = pred.lower_bound_us
                print(
                    f"| {size // MiB} MiB | {stage_us:g} µs | {name} | {pred.time_us:.0f} | "
                    f"{lb:.0f} | {pred.time_over_lb:.3f} | "
                    f"{info.get('stages', info.get('steps'))} | "
                    + " | ".join(
                        f"{info[k] / lb:.3f}" if k in info else ""
                        for k in ("prologue_us", "stage_fixed_us", "epilogue_us")
                    )
                    + " |"
                )
            chosen.append((size, stage_us, tuned, secs))
            if size == 256 * MiB:
                got = tuned.prediction.time_over_lb
                met = got <= goal
                ok &= met
                print(
                    f"|  |  | **target** fast <= {goal:.2f} | | | {got:.3f} "
                    f"{'met' if met else 'NOT met'} | | | | |"
                )
    print("\nOptions the model chose (tuner time: all candidates, this machine):")
    for size, stage_us, tuned, secs in chosen:
        o = {k: v for k, v in tuned.options.items() if k != "stage_cost_bytes"}
        print(f"  {size // MiB:4d} MiB {stage_us:4g} µs  {o}  "
              f"({len(tuned.candidates)} candidates, {secs:.2f} s)")  # fmt: skip
    print("\nOther laws and seeds, FAST time/lb at 256 MiB per GPU, scheduler defaults -> "
          "model-tuned (2 µs / 10 µs per stage):")  # fmt: skip
    others = [(law, SEED) for law in ("uniform", "moe:64,6", "random", "hotspot")]
    for law, seed in [*others, (WORKLOAD, SEED + 1), (WORKLOAD, SEED + 2)]:
        d = generate(law, servers * 8, 256 * MiB, seed=seed)
        got = []
        for stage_us in (2.0, 10.0):
            fabric = fabric_from_profile("h200", stage_us=stage_us)
            t = tune.tune_fast(d, 8, fabric)
            got.append(f"{t.default_time_us / t.prediction.lower_bound_us:.3f} -> "
                       f"{t.prediction.time_over_lb:.3f}")  # fmt: skip
        print(f"  {f'{law}@{seed}':12s} {' / '.join(got)}")
    print(
        "(prologue: step 0, the first stage's lending; fixed: K x (stage + alpha); "
        "epilogue: from the last stage's end (the tail, its drain, the last "
        "redistribution); all as fractions of lb)\n"
    )
    return ok


def speed(gpus: int = 1024) -> bool:
    fabric = fabric_from_profile("h200")
    d = generate(WORKLOAD, gpus, 64 * MiB, seed=SEED)
    commbench.kernels.fast.warmup()
    t_syn, sched = _best_of(lambda: _schedule(d, fabric, {"cost": True}), 1)
    t_tab, tr = _best_of(sched.transfers, 1)
    print(f"## Speed: one {gpus}-GPU all-to-allv ({WORKLOAD}, 64 MiB per GPU), best of 3")
    print(f"scheduler (not the model): synthesis {t_syn:.3f} s, transfers() {t_tab:.3f} s "
          f"({len(tr)} rows, {sched.nstages} stages)")  # fmt: skip
    ok = True
    for name, fn in (
        ("fanout", lambda: a2a.fanout(d, fabric)),
        ("spreadout", lambda: a2a.spreadout(d, fabric)),
        ("fast", lambda: a2a.fast(d, tr, fabric)),
        ("balance-only", lambda: a2a.balance_only(d, tr, fabric)),
    ):
        secs, _ = _best_of(fn)
        ok &= secs < 1.0
        print(f"  model {name:13s} {secs:7.3f} s  {'< 1 s' if secs < 1.0 else 'OVER 1 s'}")
    flow_level_speed()
    print()
    return ok


def flow_level_speed(
    ranks: tuple[int, ...] = (16, 32, 64), lossy_ranks: tuple[int, ...] = (8, 16)
) -> None:
    """Spread-out flow by flow (a profile with a send buffer, as calibrate measures over
    TCP; 4 ranks a node, 512 KiB a pair): its Python events grow with the ranks, so it has
    no 1024-GPU goal; printed so that what it costs at a size can be read. On a lossy
    fabric it runs once per loss position (at most 64: ``flows.LOSS_POSITIONS``)."""
    fabric = fabric_from_profile("h200").with_(
        gpus_per_node=4, nic_send_buffer_bytes=1.2e6, nic_queue_bytes=250e3, nic_eager_bytes=32768
    )
    for p in ranks:
        d = np.full((p, p), 512 * 1024, dtype=np.int64)
        secs, _ = _best_of(lambda d=d: a2a.spreadout(d, fabric), 1)
        print(f"  model spreadout flow by flow, {p:3d} ranks  {secs:7.3f} s")
    lossy = fabric.with_(loss_timeout_us=200e3)  # one loss round: a run per position
    for p in lossy_ranks:
        d = np.full((p, p), 512 * 1024, dtype=np.int64)
        secs, pred = _best_of(lambda d=d: a2a.spreadout(d, lossy), 1)
        print(
            f"  model spreadout lossy ({pred.info['loss_positions']} runs), {p:3d} ranks"
            f"  {secs:7.3f} s"
        )


def study(full: bool, stage_us: float | None = None, workload: str = WORKLOAD) -> str:
    """Print the study table; return the chosen default strategy's name.

    The default is the first strategy (in :data:`STRATEGIES` order, simplest first) whose
    geometric mean is within 0.5 % of the best one's.
    """
    servers = (2, 8, 16, 40) if full else (2, 8, 40)
    sizes = (1, 4, 16, 64, 256) if full else (1, 16, 256)
    fabric = fabric_from_profile("h200", stage_us=stage_us)
    print(f"## Strategy study: modelled time / lower bound, h200 (stage {fabric.stage_us:g} µs "
          f"+ alpha {fabric.nic_us:g} µs), {workload}@{SEED}, balancing as the plans do it")  # fmt: skip
    names = [*STRATEGIES, "model-best (fast / balance-only / fanout)"]
    ratios: dict[str, dict] = {name: {} for name in names}
    stages: dict[str, dict] = {name: {} for name in names}
    for s in servers:
        for size in sizes:
            d = generate(workload, s * 8, size * MiB, seed=SEED)
            for name, opts in STRATEGIES.items():
                sched = _schedule(d, fabric, opts)
                tr = sched.transfers()
                pred = a2a.fast(d, tr, fabric)
                ratios[name][s, size] = pred.time_over_lb
                stages[name][s, size] = sched.nstages
                if opts == DEFAULT:
                    others = (a2a.balance_only(d, tr, fabric), a2a.fanout(d, fabric))
                    best = min((pred, *others), key=lambda q: q.time_us)
                    ratios[names[-1]][s, size] = best.time_over_lb
                    stages[names[-1]][s, size] = best.info.get("stages", 0)
    head = " | ".join(f"{s * 8} GPUs" for s in servers)
    lines = [
        f"| strategy | {head} | all | worst | stages @ {servers[-1] * 8} GPUs |",
        "|---|" + "---|" * (len(servers) + 3),
    ]
    means = {}
    for name in names:
        per = [_gmean([ratios[name][s, z] for z in sizes]) for s in servers]
        means[name] = _gmean(list(ratios[name].values()))
        st = [stages[name][servers[-1], z] for z in sizes]
        lines.append(
            f"| {name} | " + " | ".join(f"{v:.3f}" for v in per)
            + f" | {means[name]:.3f} | {max(ratios[name].values()):.3f} | "
            + f"{min(st)}-{max(st)} |"
        )  # fmt: skip
    print("\n".join(lines))
    best = min((n for n in STRATEGIES), key=means.get)
    chosen = next(n for n in STRATEGIES if means[n] <= means[best] * 1.005)
    print(f"(geometric mean over {', '.join(f'{z}' for z in sizes)} MiB per GPU; "
          f"best: {best}; chosen default (simplest within 0.5 %): {chosen})\n")  # fmt: skip
    return chosen


def calibration() -> None:
    """The model next to the papers' numbers (reference, never our measurement): the
    NVRAR rows of ``results/reference/model-validation.md`` (``commbench model-validation``
    prints all of it)."""
    from commbench.model.validation import nvrar_rows

    print("\n".join(nvrar_rows()) + "\n")


def _gmean(values: list[float]) -> float:
    return float(np.exp(np.mean(np.log(values))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m commbench.benchmarks.model", description=__doc__)
    ap.add_argument("--full", action="store_true", help="the whole study grid (minutes)")
    ap.add_argument("--skip-study", action="store_true")
    args = ap.parse_args(argv)
    print("# commbench cost model (MODELLED, not measured)\n")
    met = targets()
    fast_enough = speed()
    calibration()
    if not args.skip_study:
        study(args.full)
        if args.full:
            study(True, stage_us=2.0)
            study(True, workload="moe:64,6")
    print(f"targets at 320 GPUs, 256 MiB: {'met' if met else 'NOT met (see table)'}; "
          f"1024-GPU evaluation < 1 s: {'yes' if fast_enough else 'NO'}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

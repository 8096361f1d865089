"""The cost model against the papers' headline numbers, out of sample.

``commbench model-validation`` prints ``results/reference/model-validation.md``; ``--out PATH``
writes it, ``--check PATH`` exits 1 if the file differs from what the model now gives.
``--records DIR`` also writes the modelled records of the papers' configurations (JSONL,
one file per system and collective) that figures 1, 2 and 7 draw:
``commbench figures DIR -o DIR/figures``.
Every number on the model's side comes from the system profiles' constants (each with
its source, listed at the end) and the measured synthesis law
(``commbench.kernels.model.alltoallv.SYNTHESIS_US``); none of them was fitted to the papers'
numbers in the table. The papers' numbers are ``results/reference/*.csv``.
"""

from __future__ import annotations

from commbench.kernels.model import allreduce as ar
from commbench.kernels.model.fabric_table import FABRIC_CONSTANTS
from commbench.model.simulate import alltoallv_points, fabric_from_profile
from commbench.units import format_size

KiB, MiB = 1 << 10, 1 << 20
NVRAR_PAPER_US = {8 * KiB: 62, 64 * KiB: 72, 128 * KiB: 77, 256 * KiB: 82, 512 * KiB: 105,
                  1 * MiB: 158}  # fmt: skip
PROFILES = ("perlmutter", "vista", "h200", "mi300x")


def _times(fabric, servers: int, size: int, workload: str, impls, tune=True, call=True):
    """``{impl: Point}`` of one all-to-allv point (seed 1)."""
    pts = alltoallv_points(fabric, [servers], [size], [workload], list(impls), 1,
                           tune=tune, call_costs=call)  # fmt: skip
    return {p.impl: p for p in pts}


def _algbw(point) -> float:
    """The paper's algbw: mean bytes per GPU (the size) over the time."""
    return point.size / point.prediction.time_us / 1e3


def _status(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _span(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"


def _nccl_over_nvrar(fabric, nodes: int) -> tuple[list[float], str]:
    """NCCL's time over NVRAR's at 128 KiB-2 MiB, and the table row (ratios, NCCL's picks)."""
    ratios, picks = [], []
    for size in (128 * KiB, 256 * KiB, 512 * KiB, 1 * MiB, 2 * MiB):
        nc = ar.nccl(size, nodes, fabric)
        ratios.append(nc.time_us / ar.nvrar(size, nodes, fabric).time_us)
        picks.append(f"{nc.info['algo']}/{nc.info['proto']}")
    row = (f"| {nodes} | " + " | ".join(f"{r:.2f}" for r in ratios)
           + f" | {', '.join(dict.fromkeys(picks))} |")  # fmt: skip
    return ratios, row


def nvrar_rows(summary: list | None = None) -> list[str]:
    f = fabric_from_profile("perlmutter")
    out = ["## NVRAR (Singhania et al.), Perlmutter profile, bf16", "",
           "NVRAR / NCCL latency ratio (NCCL's time over NVRAR's), 128 KiB - 2 MiB. "
           "Paper: 1.9-3.6x; target: inside it or within 25 % of its ends (1.43-4.50x).",
           "", "| nodes | 128 KiB | 256 KiB | 512 KiB | 1 MiB | 2 MiB | NCCL's picks | in band |",
           "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    every, within = [], []
    for nodes in (2, 4, 8, 16):
        ratios, row = _nccl_over_nvrar(f, nodes)
        inside = sum(1.9 * 0.75 <= r <= 3.6 * 1.25 for r in ratios)
        every += ratios
        out.append(f"{row} {inside} of 5 |")
    vista = fabric_from_profile("vista")
    out += ["", "The same ratio on the Vista profile (InfiniBand, one GH200 per node: NVRAR is "
            "plain recursive doubling there). The paper's 1.9-3.6x covers InfiniBand too; "
            "not one of the issue's targets.", "",
            "| nodes | 128 KiB | 256 KiB | 512 KiB | 1 MiB | 2 MiB | NCCL's picks |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    on_ib = []
    for nodes in (2, 4, 8, 16):
        ratios, row = _nccl_over_nvrar(vista, nodes)
        on_ib += ratios
        out.append(row)
    out += ["", "NVRAR alone, 4 nodes x 4 A100. Target: each point within 25 % of the paper's.",
            "", "| size | paper (µs) | model (µs) | model / paper | within 25 % |",
            "|---|---|---|---|---|"]  # fmt: skip
    for size, paper in NVRAR_PAPER_US.items():
        t = ar.nvrar(size, 4, f).time_us
        within.append(t / paper)
        out.append(f"| {format_size(size)} | {paper} | {t:.0f} | {t / paper:.2f} | "
                   f"{'yes' if abs(t / paper - 1) <= 0.25 else 'no'} |")  # fmt: skip
    if summary is not None:
        inside = sum(1.9 * 0.75 <= r <= 3.6 * 1.25 for r in every)
        summary.append(("NVRAR vs NCCL, Perlmutter, 128 KiB-2 MiB, 2-16 nodes", "1.9-3.6x",
                        f"{_span(every)}x ({inside} of {len(every)} points in 1.43-4.50x)",
                        _status(inside == len(every))))  # fmt: skip
        summary.append(("NVRAR vs NCCL, Vista (InfiniBand), 128 KiB-2 MiB, 2-16 nodes",
                        "1.9-3.6x", f"{_span(on_ib)}x", "(not a target)"))  # fmt: skip
        ok = sum(abs(r - 1) <= 0.25 for r in within)
        summary.append(("NVRAR latency, 4 x 4 A100, 8 KiB-1 MiB", "62-158 µs",
                        f"{_span(within)} of the paper ({ok} of {len(within)} within 25 %)",
                        _status(ok == len(within))))  # fmt: skip
    return out


def h200_rows(summary: list | None = None) -> list[str]:
    f = fabric_from_profile("h200")
    out = ["## FAST (Lei et al.), H200 profile: FAST vs the best of NCCL fan-out and DeepEP-like",
           "", "Paper: 1.01-1.3x on skewed (MoE) traffic; target: inside it (± 0.1). FAST "
           "model-tuned, with its per-call costs; 4 servers x 8 GPUs.", "",
           "| workload | size/GPU | fast (µs) | fanout (µs) | deepep (µs) | pxn (µs) | "
           "speed-up over the best | in 0.91-1.4 |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    speedups = []
    for wl in ("expert-zipf:0.8", "moe:64,6"):
        for size in (16 * MiB, 256 * MiB):
            pts = _times(f, 4, size, wl, ("fast", "fanout", "deepep", "pxn"))
            t = {k: v.prediction.time_us for k, v in pts.items()}
            best = min(t["fanout"], t["deepep"])
            r = best / t["fast"]
            speedups.append(r)
            out.append(f"| {wl} | {format_size(size)} | {t['fast']:.0f} | {t['fanout']:.0f} | "
                       f"{t['deepep']:.0f} | {t['pxn']:.0f} | {r:.2f} | "
                       f"{'yes' if 0.91 <= r <= 1.4 else 'no'} |")  # fmt: skip
    if summary is not None:
        ok = sum(0.91 <= r <= 1.4 for r in speedups)
        summary.append(("FAST vs best of NCCL fan-out / DeepEP-like, H200, MoE traffic",
                        "1.01-1.3x", f"{_span(speedups)}x ({ok} of {len(speedups)} in "
                        "0.91-1.4x)", _status(ok == len(speedups))))  # fmt: skip
    return out


def mi300x_rows(summary: list | None = None) -> list[str]:
    out = ["## FAST (Lei et al.), MI300X profile, 4 servers x 8 GPUs", ""]
    out += ["FAST over RCCL fan-out, `zipf:S` (pairwise), 256 MiB per GPU. Paper: 1.3-10x.",
            "", "| flow control | S = 0.1 | 0.5 | 0.8 | 0.99 | inside 1.3-10x |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    skew = {}
    for case in ("lossless", "lossy"):
        f = fabric_from_profile("mi300x", flow_control=case)
        ratios = skew[case] = []
        for s in (0.1, 0.5, 0.8, 0.99):
            pts = _times(f, 4, 256 * MiB, f"zipf:{s}", ("fast", "fanout"))
            ratios.append(pts["fanout"].prediction.time_us / pts["fast"].prediction.time_us)
        inside = sum(1.3 <= r <= 10 for r in ratios)
        out.append(f"| {case} | " + " | ".join(f"{r:.2f}" for r in ratios)
                   + f" | {inside} of 4 |")  # fmt: skip
    out += ["", "Algbw (GB/s, mean bytes per GPU / time) next to the paper's. Paper: FAST "
            "10-12.5, fan-out 1.3-9 (bimodal), spread-out ~4 at `zipf:0.8`; equal sizes "
            ">= 260 MB: fan-out 0.2-4 (collapse), FAST ~14.", "",
            "| workload | size/GPU | flow control | fast | fanout | spreadout | pxn |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    bw = {}
    for wl, size in (("zipf:0.8", 256 * MiB), ("uniform", 64 * MiB), ("uniform", 256 * MiB),
                     ("uniform", 1024 * MiB)):  # fmt: skip
        for case in ("lossless", "lossy"):
            f = fabric_from_profile("mi300x", flow_control=case)
            pts = _times(f, 4, size, wl, ("fast", "fanout", "spreadout", "pxn"))
            bw[wl, size, case] = {k: _algbw(v) for k, v in pts.items()}
            out.append(f"| {wl} | {format_size(size)} | {case} | "
                       + " | ".join(f"{_algbw(pts[k]):.1f}" for k in
                                    ("fast", "fanout", "spreadout", "pxn")) + " |")  # fmt: skip
    out += ["", "Crossover: the smallest size per GPU from which FAST beats RCCL fan-out "
            "(`zipf:0.8`). Paper: FAST loses below ~16-33 MB; target: between 4 and 64 MiB.",
            "", "| flow control | 1 MiB | 4 MiB | 16 MiB | 64 MiB | crossover | in 4-64 MiB |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    crossing = {}
    for case in ("lossless", "lossy"):
        f = fabric_from_profile("mi300x", flow_control=case)
        ratios, cross = [], None
        for size in (1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB):
            pts = _times(f, 4, size, "zipf:0.8", ("fast", "fanout"))
            r = pts["fanout"].prediction.time_us / pts["fast"].prediction.time_us
            ratios.append(r)
            if cross is None and r > 1:
                cross = size
        ok = cross is not None and 4 * MiB <= cross <= 64 * MiB and ratios[0] < 1
        crossing[case] = (cross, ok)
        out.append(
            f"| {case} | "
            + " | ".join(f"{r:.2f}" for r in ratios)
            + f" | {format_size(cross) if cross else 'none'} | {'yes' if ok else 'no'} |"
        )
    out.append("")
    out.append("(cells: fan-out time / FAST time; < 1 means fan-out is faster)")
    if summary is not None:
        for case, ratios in skew.items():
            ok = sum(1.3 <= r <= 10 for r in ratios)
            summary.append((f"FAST vs RCCL fan-out, MI300X, zipf 0.1-0.99, {case}", "1.3-10x",
                            f"{_span(ratios)}x ({ok} of 4 inside)", _status(ok == 4)))  # fmt: skip
        calm = [bw["uniform", s, "lossless"]["fanout"] for s in (64 * MiB, 256 * MiB, 1024 * MiB)]
        lossy = [bw["uniform", s, "lossy"]["fanout"] for s in (64 * MiB, 256 * MiB, 1024 * MiB)]
        onset = lossy[0] < 0.5 * calm[0]  # collapsed already below 256 MiB: wrong onset
        summary.append(("fan-out collapse at >= 256 MiB (uniform), lossy profile", "0.2-4 GB/s",
                        f"lossy {_span(lossy)} GB/s at 64 MiB-1 GiB (lossless "
                        f"{_span(calm)}): collapses{' from far smaller sizes' if onset else ''}",
                        _status(not onset and max(lossy) <= 4)))  # fmt: skip
        z = bw["zipf:0.8", 256 * MiB, "lossless"], bw["zipf:0.8", 256 * MiB, "lossy"]
        summary.append(("algbw, MI300X, zipf:0.8, 256 MiB: FAST / fan-out / spread-out",
                        "10-12.5 / 1.3-9 / ~4 GB/s",
                        f"{z[0]['fast']:.1f} / {z[1]['fanout']:.1f}-{z[0]['fanout']:.1f} (lossy-"
                        f"lossless) / {z[0]['spreadout']:.1f}", "(reference)"))  # fmt: skip
        cross = {c: format_size(v[0]) if v[0] else "none" for c, v in crossing.items()}
        summary.append(("FAST loses to fan-out below some size, MI300X", "16-33 MB (4-64 MiB)",
                        f"FAST ahead from {cross['lossless']} (lossless), {cross['lossy']} "
                        "(lossy)", _status(all(ok for _, ok in crossing.values()))))  # fmt: skip
    return out


def scale_rows(summary: list | None = None) -> list[str]:
    f = fabric_from_profile("h200", stage_us=10.0)
    pts = _times(f, 40, 256 * MiB, "zipf:0.8", ("fast",), call=False)
    r = pts["fast"].prediction.time_over_lb
    if summary is not None:
        summary.append(("320 GPUs, FAST / lower bound at 256 MiB", "< 1.10", f"{r:.3f}",
                        _status(r <= 1.10)))  # fmt: skip
    return ["## FAST at 320 GPUs (h200 profile, `zipf:0.8`, 256 MiB per GPU, 10 µs per stage)",
            "", "Paper: < 10 % above the ideal in its simulation, which leaves out the per-call "
            "costs; so does this row. Target: <= 1.10.", "",
            f"FAST model-tuned / lower bound: **{r:.3f}** ({_status(r <= 1.10)})"]  # fmt: skip


def constants_rows() -> list[str]:
    from commbench.jobs.profile import load_profile

    out = ["## Constants and their sources", "",
           "Each profile's `[fabric]` as the model used it (`jobs/systems/NAME.toml`). "
           "NCCL's protocol and algorithm constants are those of NVIDIA/nccl "
           "`src/graph/tuning.cc` (`kernels/model/nccl.py`).", ""]  # fmt: skip
    for name in PROFILES:
        fab = load_profile(name).fabric
        out += [f"### {name}", "", "| constant | value | source |", "|---|---|---|"]
        for k in FABRIC_CONSTANTS:
            v = getattr(fab, k)
            if v is None:
                continue
            out.append(f"| `{k}` | {v} | {fab.sources.get(k, 'no source given')} |")
        out.append("")
    return out


def render() -> str:
    head = ["# Cost model vs the papers (out of sample)", "",
            "Generated by `commbench model-validation --out results/reference/model-validation.md`; "
            "`tests/test_model_validation.py` checks this file against the model. Everything "
            "on the model's side is **modelled**; the papers' numbers are theirs "
            "(`results/reference/`). No constant was fitted to them: where a target is missed "
            "the model lacks a mechanism (`docs/cost-model.md`, \"What the validation "
            "says\").", ""]  # fmt: skip
    summary: list = []
    body = [nvrar_rows(summary), [""], h200_rows(summary), [""], mi300x_rows(summary), [""],
            scale_rows(summary), [""], constants_rows()]  # fmt: skip
    table = ["## Headlines", "", "| claim | paper | model | target |", "|---|---|---|---|"]
    table += [f"| {c} | {p} | {m} | {v} |" for c, p, m, v in summary]
    parts = [head, table, [""], *body]
    return "\n".join(line for part in parts for line in part).rstrip() + "\n"

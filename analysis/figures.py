"""The eight figures of the report; each returns a Figure and saves PNG + SVG.

Every ``figure_N(data, out_dir=None, ...)`` takes the DataFrame of
:func:`commbench.analysis.load.load_results` (figure 4: of :func:`commbench.analysis.load.load_schedules`),
selects what it needs and draws it. On an empty selection it draws a figure that says
what is missing and how to produce it (see :func:`empty_message`) instead of failing.
Reference overlays (``results/reference/*.csv``) are drawn only where their system, node
count and axes match, labelled ``paper: ...`` (or ``reference: ...`` for spec facts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from commbench.analysis import timeline
from commbench.analysis.load import load_reference
from commbench.analysis.style import (
    REFERENCE_COLOR,
    binary_label,
    count_axis,
    empty_figure,
    impl_color,
    legend,
    log_y,
    new_figure,
    plot_series,
    plot_summary,
    reference_label,
    save,
    series_style,
    size_axis,
)
from commbench.analysis.tables import (
    line_rate_of,
    line_rate_table,
    line_rates,
    pick_baseline,
    speedup,
    summarise,
    with_series,
)
from commbench.analysis.timeline import figure_8

EMPTY_GID = timeline.EMPTY_GID
MAX_PANELS = 6
KiB, MiB = 1 << 10, 1 << 20
SKEWED_EXCLUDE = ("", "uniform")
_SYSTEM_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


# ---------------------------------------------------------------- shared helpers


def empty_message(fig: Figure) -> str | None:
    """The 'nothing to draw' message of a figure drawn on an empty selection, else None."""
    for ax in fig.axes:
        for text in ax.texts:
            if text.get_gid() == EMPTY_GID:
                return text.get_text()
    return None


def _empty(title: str, message: str, out_dir, name: str) -> Figure:
    fig = empty_figure(title, message)
    fig.axes[0].texts[0].set_gid(EMPTY_GID)
    save(fig, out_dir, name)
    return fig


def _note(ax: Axes, text: str) -> None:
    """A panel that has nothing to show says why."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9)


def _reference(reference: pd.DataFrame | None) -> pd.DataFrame:
    return load_reference() if reference is None else reference


def _kinds(df: pd.DataFrame) -> str:
    kinds = sorted(set(df["kind"])) if "kind" in df and not df.empty else []
    return " + ".join(kinds) if kinds else "no data"


def _nodes_text(nodes, gpn) -> str:
    n = "?" if pd.isna(nodes) else int(nodes)
    g = "?" if pd.isna(gpn) else int(gpn)
    return f"{n} node{'s' if n != 1 else ''} × {g} GPU{'s' if g != 1 else ''}"


def _workload_text(keys: Sequence[str]) -> str:
    names = sorted({k for k in keys if k})
    return "workload " + (", ".join(names) if names else "none (dense buffers)")


def _for_system(ref: pd.DataFrame, system: str) -> pd.DataFrame:
    """Reference rows about ``system`` (their system name contained in ours)."""
    name = str(system).lower()
    mask = ref["system"].map(lambda r: bool(r) and str(r).lower() in name)
    return ref.loc[mask.astype(bool)]


def _lines(ctx: pd.DataFrame):
    """``(label, kind, rows)`` per line: series × kind, split further by backend or timing
    mode only when a panel mixes them."""
    data = with_series(ctx)
    split = [
        c
        for c in ("backend", "timing_mode")
        if data.loc[data["kind"] == "measured", c].dropna().nunique() > 1
    ]
    for key, rows in data.groupby(["series", "kind", *split], dropna=False, sort=True):
        label = str(key[0])
        extra = [str(v) for v in key[2:] if not pd.isna(v)]
        if extra:
            label += " [" + ", ".join(extra) + "]"
        yield label, str(key[1]), rows


def _most_covered(df: pd.DataFrame, by: str, over: str) -> float | None:
    """The value of ``by`` that has the most distinct ``over`` values (ties: largest)."""
    if df.empty:
        return None
    counts = df.dropna(subset=[over]).groupby(by)[over].nunique()
    if counts.empty:
        return None
    best = counts.max()
    return float(max(v for v, c in counts.items() if c == best))


def _range_text(lo: float, hi: float) -> str:
    return f"~{lo:g}" if lo == hi else f"{lo:g}–{hi:g}"


def _fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3g} s"
    if us >= 1e3:
        return f"{us / 1e3:.3g} ms"
    return f"{us:.3g} µs"


def _panels(n: int, max_cols: int = 2, width: float = 7.0, height: float = 3.6):
    ncols = max(1, min(n, max_cols))
    nrows = max(1, math.ceil(n / ncols))
    fig, axes = new_figure(ncols=ncols, nrows=nrows, width=width, height=height)
    flat = [ax for row in axes for ax in row]
    for ax in flat[n:]:
        ax.set_axis_off()
    return fig, flat[:n]


def _cap(groups: list, what: str) -> tuple[list, str]:
    if len(groups) <= MAX_PANELS:
        return groups, ""
    return groups[:MAX_PANELS], f" (first {MAX_PANELS} of {len(groups)} {what})"


# ---------------------------------------------------------------- figure 1


def _latency_reference(ax: Axes, lat: pd.DataFrame, what: str) -> list:
    """Overlay the papers' latency points (dotted, labelled as theirs); their sizes."""
    ax.plot(
        lat["size_min"],
        lat["value"],
        linestyle=":",
        marker="x",
        color=REFERENCE_COLOR,
        label=reference_label(what, lat.iloc[0]["source"]),
    )
    return list(lat["size_min"])


def figure_1(
    points: pd.DataFrame,
    out_dir: str | Path | None = None,
    *,
    reference: pd.DataFrame | None = None,
    size_range: tuple[int, int] = (64 * KiB, 2 * MiB),
) -> Figure:
    """All-reduce latency for small messages and NVRAR's speed-up over NCCL/RCCL (or MPI).

    One column per (system, node count, dtype): top, latency (max over ranks, as the NVRAR
    paper reports) per implementation with its min–max band; bottom, NVRAR's speed-up over
    the baseline with the paper's 1.9–3.6× band.
    """
    name = "fig1_allreduce_latency"
    lo, hi = size_range
    title = f"Figure 1: all-reduce latency, {binary_label(lo)}–{binary_label(hi)}"
    sel = points[
        (points["collective"] == "allreduce")
        & (points["size_bytes"] >= lo)
        & (points["size_bytes"] <= hi)
    ]
    if sel.empty:
        return _empty(
            title,
            f"No allreduce results between {binary_label(lo)} and {binary_label(hi)}.\n"
            "Run e.g. `commbench run allreduce --impl nvrar -b 64K -e 2M -d bfloat16` "
            "(and --impl nccl / mpi) or `commbench simulate allreduce`.",
            out_dir,
            name,
        )
    ref = _reference(reference)
    contexts, capped = _cap(
        list(sel.groupby(["system", "nodes", "gpus_per_node", "dtype"], dropna=False)), "panels"
    )
    fig, axes = new_figure(ncols=2, nrows=len(contexts))
    for row, (key, ctx) in enumerate(contexts):
        system, nodes, gpn, dtype = key
        _latency_panel(axes[row][0], ctx, ref, system, nodes)
        _nvrar_speedup_panel(axes[row][1], ctx, ref)
        head = f"{system} · {_nodes_text(nodes, gpn)} · {dtype} allreduce"
        axes[row][0].set_title(f"{head}\nlatency · {_kinds(ctx)}", fontsize=9)
        axes[row][1].set_title(f"{head}\nNVRAR speed-up · {_kinds(ctx)}", fontsize=9)
    fig.suptitle(title + capped)
    save(fig, out_dir, name)
    return fig


def _latency_panel(ax: Axes, ctx: pd.DataFrame, ref: pd.DataFrame, system, nodes) -> None:
    drew = False
    for label, kind, rows in _lines(ctx):
        # imported tools that print no max over ranks (OSU without -f) have no point here
        s = summarise(rows, ["size_bytes"], "latency_max").dropna(subset=["value"])
        if not s.empty:
            plot_summary(ax, s["size_bytes"], s, label, kind)
            drew = True
    lat = ref[(ref["quantity"] == "latency_us") & (ref["collective"] == "allreduce")]
    lat = _for_system(lat, system)
    lat = lat[lat["nodes"] == (nodes if not pd.isna(nodes) else -1)]
    sizes = list(ctx["size_bytes"])
    if not lat.empty:
        lat = lat[(lat["size_min"] >= min(sizes) / 2) & (lat["size_min"] <= max(sizes) * 2)]
    if not lat.empty:
        first = lat.iloc[0]
        sizes += _latency_reference(ax, lat, f"{first['impl']} {int(first['gpus'])} GPUs")
        drew = True
    size_axis(ax, sizes)
    if drew:
        log_y(ax)
    else:
        _note(ax, "no max-over-ranks latency in these records")
    ax.set_ylabel("latency per call (µs, max over ranks)")
    ax.grid(True, which="major", alpha=0.3)
    legend(ax)


def _nvrar_speedup_panel(ax: Axes, ctx: pd.DataFrame, ref: pd.DataFrame) -> None:
    data = with_series(ctx)
    sizes = list(data["size_bytes"])
    drew = False
    base_used = set()
    for kind, part in data.groupby("kind"):
        series = set(part["series"])
        cands = sorted(s for s in series if s.split(" ")[0] == "nvrar")
        base = pick_baseline("allreduce", series - set(cands))
        if not cands or base is None:
            continue
        base_used.add(base)
        for cand in cands:
            xs, vs, los, his = [], [], [], []
            for size, at in part.groupby("size_bytes"):
                b, c = at[at["series"] == base], at[at["series"] == cand]
                if b.empty or c.empty:
                    continue
                v, lo, hi = speedup(b, c)
                xs.append(size)
                vs.append(v)
                los.append(lo)
                his.append(hi)
            if xs:
                plot_series(ax, xs, vs, los, his, f"{cand} over {base}", str(kind))
                drew = True
    band = ref[(ref["quantity"] == "speedup") & (ref["impl"] == "nvrar")]
    for row in band.itertuples():
        ax.fill_between(
            [row.size_min, row.size_max],
            row.low,
            row.high,
            color=REFERENCE_COLOR,
            alpha=0.12,
            hatch="//",
            label=reference_label(f"NVRAR {row.low:g}–{row.high:g}× vs NCCL", row.source),
        )
        sizes += [row.size_min, row.size_max]
    ax.axhline(1.0, color="black", linewidth=0.8)
    size_axis(ax, sizes)
    base_text = "/".join(sorted(base_used)) if base_used else "NCCL"
    ax.set_ylabel(f"speed-up of NVRAR over {base_text} (×)")
    if not drew:
        _note(ax, "no NVRAR and baseline results at the same sizes")
    elif base_used <= {"mpi"}:
        ax.text(
            0.02, 0.02, "no NCCL/RCCL results: baseline is MPI", transform=ax.transAxes, fontsize=7
        )
    ax.grid(True, alpha=0.3)
    legend(ax)


# ---------------------------------------------------------------- figure 2


#: all-to-allv panels drawn next to the FAST paper's numbers use its metric
MEAN_ALGBW_LABEL = "algbw (GB/s, mean bytes per GPU / time)"


def figure_2(
    points: pd.DataFrame,
    out_dir: str | Path | None = None,
    *,
    reference: pd.DataFrame | None = None,
    size: int | None = None,
    zipf: float = 0.8,
) -> Figure:
    """All-to-allv algbw vs Zipf skew at one size (top) and vs size at ``zipf`` (bottom).

    One column per (system, node count). ``size`` defaults, per column, to the size
    measured at the most Zipf exponents.
    """
    name = "fig2_alltoallv_skew"
    title = "Figure 2: all-to-allv bandwidth vs skew"
    sel = points[(points["collective"] == "alltoallv") & points["zipf_s"].notna()]
    if sel.empty:
        return _empty(
            title,
            "No all-to-allv results with a Zipf workload.\nRun e.g. `commbench run alltoallv "
            "--impl fast --workload zipf:0.1,0.5,0.8,0.99 -b 1M -e 64M` (and fanout, "
            "spreadout, mpi, balance-only).",
            out_dir,
            name,
        )
    ref = _reference(reference)
    groups = [
        (key, ctx)
        for key, ctx in sel.groupby(["system", "nodes", "gpus_per_node"], dropna=False)
        if ctx["zipf_s"].nunique() > 1 or ctx["size_bytes"].nunique() > 1
    ]
    if not groups:
        return _empty(
            title,
            "The Zipf all-to-allv results have one exponent and one size per system and node "
            "count: nothing to draw a curve through.\nSweep several exponents "
            "(--workload zipf:0.1,0.5,0.8,0.99) or sizes (-b/-e).",
            out_dir,
            name,
        )
    contexts, capped = _cap(groups, "panels")
    fig, axes = new_figure(ncols=2, nrows=len(contexts))
    for row, ((system, nodes, gpn), ctx) in enumerate(contexts):
        _skew_panel(axes[row][0], ctx, ref, system, nodes, gpn, size)
        _zipf_size_panel(axes[row][1], ctx, system, nodes, gpn, zipf)
    fig.suptitle(title + capped)
    save(fig, out_dir, name)
    return fig


def _skew_panel(ax: Axes, ctx, ref, system, nodes, gpn, size) -> None:
    at_size = size if size is not None else _most_covered(ctx, "size_bytes", "zipf_s")
    part = ctx[ctx["size_bytes"] == at_size]
    for label, kind, rows in _lines(part):
        s = summarise(rows, ["zipf_s"], "mean_algbw")
        plot_summary(ax, s["zipf_s"], s, label, kind)
    alg = ref[(ref["quantity"] == "algbw_GBps") & ref["workload"].str.startswith("zipf")]
    alg = _for_system(alg, system)
    alg = alg[alg["nodes"] == (nodes if not pd.isna(nodes) else -1)]
    for row in alg.itertuples():
        s = float(row.workload.split(":")[1])
        lo = row.low if math.isfinite(row.low) else row.value
        hi = row.high if math.isfinite(row.high) else row.value
        mid = row.value if math.isfinite(row.value) else (lo + hi) / 2
        ax.errorbar(
            [s],
            [mid],
            yerr=[[mid - lo], [hi - mid]],
            fmt="x",
            color=impl_color(row.impl),
            ecolor=REFERENCE_COLOR,
            capsize=4,
            label=reference_label(f"{row.impl} {_range_text(lo, hi)} GB/s", row.source),
        )
    ax.set_xlabel("Zipf exponent s (skew)")
    ax.set_xlim(0, 1.05)
    ax.set_ylabel(MEAN_ALGBW_LABEL)
    ax.set_title(
        f"{system} · {_nodes_text(nodes, gpn)} · {_kinds(part)}\n"
        f"workload zipf:s · {binary_label(at_size or 0)} per GPU",
        fontsize=9,
    )
    if part.empty:
        _note(ax, "no Zipf results at this size")
    ax.grid(True, alpha=0.3)
    legend(ax)


def _zipf_size_panel(ax: Axes, ctx, system, nodes, gpn, zipf: float) -> None:
    part = ctx[np.isclose(ctx["zipf_s"], zipf)]
    for label, kind, rows in _lines(part):
        s = summarise(rows, ["size_bytes"], "mean_algbw")
        plot_summary(ax, s["size_bytes"], s, label, kind)
    size_axis(ax, part["size_bytes"], "mean bytes each GPU sends")
    ax.set_ylabel(MEAN_ALGBW_LABEL)
    ax.set_title(
        f"{system} · {_nodes_text(nodes, gpn)} · {_kinds(part)}\nworkload zipf:{zipf:g}",
        fontsize=9,
    )
    if part.empty:
        _note(ax, f"no results at Zipf s = {zipf:g}")
    ax.grid(True, alpha=0.3)
    legend(ax)


# ---------------------------------------------------------------- figure 3


def figure_3(
    points: pd.DataFrame,
    out_dir: str | Path | None = None,
    *,
    system: str | None = None,
    workload: str | None = None,
    size: int | None = None,
) -> Figure:
    """Per-rank completion of one skewed all-to-allv: FAST's ranks finish together.

    Picks the (system, nodes, workload, size) point that has per-rank times for both
    ``fast`` and ``fanout`` (measured before modelled, then the largest size) unless
    ``system``/``workload``/``size`` narrow it. Left: finish time per rank; right: the same
    sorted, so stragglers stand out.
    """
    name = "fig3_stragglers"
    title = "Figure 3: per-rank completion of one skewed all-to-allv"
    sel = points[points["collective"] == "alltoallv"]
    sel = sel[~sel["workload_key"].isin(SKEWED_EXCLUDE)]
    has_list = [
        isinstance(f, list) or isinstance(t, list)
        for f, t in zip(sel["rank_finish_us"], sel["rank_time_us"], strict=True)
    ]
    sel = sel[has_list]
    if system is not None:
        sel = sel[sel["system"] == system]
    if workload is not None:
        sel = sel[sel["workload_key"] == workload]
    if size is not None:
        sel = sel[sel["size_bytes"] == size]
    if sel.empty:
        return _empty(
            title,
            "No skewed all-to-allv results with per-rank times (rank_finish_us).\n"
            "Run e.g. `commbench run alltoallv --impl fast --workload zipf:0.8 -b 16M -e 16M` "
            "and the same with --impl fanout.",
            out_dir,
            name,
        )
    keys = ["kind", "system", "nodes", "gpus_per_node", "workload_key", "size_bytes"]
    best_key, best_score = None, None
    for key, group in sel.groupby(keys, dropna=False):
        impls = {str(i) for i in group["impl"]}
        score = (
            len(impls & {"fast", "fanout"}),
            key[0] == "measured",
            abs(group["zipf_s"].fillna(0).iloc[0] - 0.8) * -1,
            key[5],
        )
        if best_score is None or score > best_score:
            best_key, best_score = key, score
    kind, sys_name, nodes, gpn, wl, nbytes = best_key
    group = sel
    for k, v in zip(keys, best_key, strict=True):
        group = group[group[k].isna()] if pd.isna(v) else group[group[k] == v]
    use_finish = all(isinstance(f, list) for f in group["rank_finish_us"])
    column = "rank_finish_us" if use_finish else "rank_time_us"
    fig, axes = new_figure(ncols=2)
    by_rank, ordered = axes[0]
    for label, line_kind, rows in _lines(group):
        stack = [v for v in rows[column] if isinstance(v, list)]
        width = min(len(v) for v in stack)
        arr = np.array([v[:width] for v in stack], dtype=float)
        med, lo, hi = np.median(arr, axis=0), arr.min(axis=0), arr.max(axis=0)
        ranks = np.arange(width)
        spread = med.max() / med.min() if med.min() > 0 else math.inf
        text = f"{label}: last {_fmt_us(med.max())}, last/first {spread:.2f}×"
        plot_series(by_rank, ranks, med, lo if len(stack) > 1 else None, hi, text, line_kind)
        order = np.argsort(med)
        style = series_style(label, line_kind)
        ordered.plot(ranks, med[order], label=f"{label} ({line_kind})", markersize=3, **style)
    what = "finish time (µs after common start)" if use_finish else "mean call time (µs)"
    by_rank.set_xlabel("rank")
    by_rank.set_ylabel(what)
    ordered.set_xlabel("ranks sorted by finish time")
    ordered.set_ylabel(what)
    if not use_finish:
        by_rank.set_title("no finish times recorded: per-rank mean call time", fontsize=8)
    for ax in (by_rank, ordered):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        legend(ax)
    fig.suptitle(
        f"{title}\n{sys_name} · {_nodes_text(nodes, gpn)} · workload {wl} · "
        f"{binary_label(nbytes)} per GPU · {kind}",
        fontsize=10,
    )
    save(fig, out_dir, name)
    return fig


# ---------------------------------------------------------------- figure 4


def figure_4(
    schedules: pd.DataFrame,
    out_dir: str | Path | None = None,
    *,
    reference: pd.DataFrame | None = None,
) -> Figure:
    """Schedule synthesis time, stage count and modelled time over the lower bound vs GPUs.

    Input: schedule records (``collective == "schedule"``, schema in
    :mod:`commbench.analysis.load`). One line per strategy (and workload when several), median over
    repetitions with the min–max band; the papers' synthesis times as reference points.
    """
    name = "fig4_schedule_synthesis"
    title = "Figure 4: FAST schedule synthesis vs GPU count"
    if schedules.empty:
        return _empty(
            title,
            "No schedule rows: no FAST record carries its schedule and no record has\n"
            'collective "schedule". `commbench simulate --impl fast` (as make run does) or a\n'
            "measured `fast` run writes them.",
            out_dir,
            name,
        )
    ref = _reference(reference)
    data = schedules.copy()
    several = data["workload_key"].nunique() > 1
    data["line"] = data["strategy"] + (" · " + data["workload_key"] if several else "")
    fig, axes = new_figure(ncols=3, width=6.6)
    synth, stages, gap = axes[0]
    gpus = list(data["gpus"])
    for line, rows in data.groupby("line", sort=True):
        color = impl_color(str(line))
        for ax, col in (
            (synth, "synthesis_us"),
            (stages, "stages"),
            (gap, "modelled_time_over_lb"),
        ):
            s = rows.dropna(subset=[col]).groupby("gpus")[col].agg(["median", "min", "max"])
            if s.empty:
                continue
            ax.plot(s.index, s["median"], marker="o", color=color, label=str(line), markersize=4)
            ax.fill_between(s.index, s["min"], s["max"], color=color, alpha=0.18, linewidth=0)
    for row in ref[(ref["quantity"] == "synthesis_us") & ref["gpus"].notna()].itertuples():
        synth.scatter(
            [row.gpus],
            [row.value],
            marker="x" if row.impl == "fast" else "D",
            color=REFERENCE_COLOR,
            zorder=5,
            label=reference_label(
                f"{row.impl} {_fmt_us(row.value)} @ {row.gpus:g} GPUs", row.source
            ),
        )
        gpus.append(row.gpus)
    for row in ref[(ref["quantity"] == "stages") & ref["gpus"].notna()].itertuples():
        stages.scatter(
            [row.gpus],
            [row.value],
            marker="x",
            color=REFERENCE_COLOR,
            zorder=5,
            label=reference_label(f"plain BvN {row.value:g} stages", row.source),
        )
    bound = data.drop_duplicates("gpus").sort_values("gpus")
    stages.plot(
        bound["gpus"],
        bound["servers"] ** 2 - 2 * bound["servers"] + 2,
        linestyle=":",
        color="black",
        label="BvN bound S²−2S+2 (analytic)",
    )
    gap.axhline(1.0, color="black", linewidth=0.8, label="lower bound")
    for row in ref[ref["quantity"] == "modelled_time_over_lb"].itertuples():
        gap.errorbar(
            [row.gpus],
            [row.high],
            yerr=[[row.high - 1.0], [0]],
            fmt="v",
            color=REFERENCE_COLOR,
            capsize=4,
            label=reference_label(
                f"< {row.high - 1:.0%} over ideal @ {row.gpus:g} GPUs", row.source
            ),
        )
    if data["modelled_time_over_lb"].isna().all():
        _note(gap, "no modelled times in these records")
    for ax, ylabel in (
        (synth, "synthesis time per schedule (µs, measured)"),
        (stages, "stages"),
        (gap, "modelled time / lower bound"),
    ):
        count_axis(ax, gpus, "GPUs")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        legend(ax)
    log_y(synth)
    log_y(stages)
    systems = sorted({str(s) for s in data["system"].dropna()})
    fig.suptitle(
        f"{title}\n{_workload_text(list(data['workload_key']))} · "
        f"cost model: {', '.join(systems) if systems else 'n/a'} · synthesis measured, "
        "time over bound modelled",
        fontsize=10,
    )
    save(fig, out_dir, name)
    return fig


# ---------------------------------------------------------------- figure 5


def figure_5(
    points: pd.DataFrame,
    out_dir: str | Path | None = None,
    *,
    reference: pd.DataFrame | None = None,
    size: int | None = None,
) -> Figure:
    """busbw at a fixed size vs node count, per implementation.

    One panel per (system, collective, workload, dtype); ``size`` defaults, per panel, to
    the size measured at the most node counts (ties: the largest).
    """
    name = "fig5_node_scaling"
    title = "Figure 5: scaling with node count"
    sel = points[points["nodes"].notna()] if not points.empty else points
    if sel.empty:
        return _empty(
            title,
            "No results with a node count.\nRun the same sweep on several node counts, "
            "e.g. `commbench jobs submit --experiment interconnect --nodes 2,4,8`, or "
            "`commbench simulate ... --nodes 2,4,8,16`.",
            out_dir,
            name,
        )
    ref = _reference(reference)
    keys = ["system", "collective", "workload_key", "dtype"]
    groups = sorted(sel.groupby(keys, dropna=False), key=lambda kv: -kv[1]["nodes"].nunique())
    contexts, capped = _cap(groups, "panels, those with the most node counts first")
    fig, axes = _panels(len(contexts), max_cols=2)
    for ax, ((system, collective, wl, dtype), ctx) in zip(axes, contexts, strict=True):
        at = size if size is not None else _most_covered(ctx, "size_bytes", "nodes")
        part = ctx[ctx["size_bytes"] == at]
        for label, kind, rows in _lines(part):
            s = summarise(rows, ["nodes"], "busbw")
            plot_summary(ax, s["nodes"].astype(float), s, label, kind)
        nodes = list(part["nodes"].astype(float))
        bw = ref[(ref["quantity"] == "busbw_GBps") & (ref["collective"] == collective)]
        bw = _for_system(bw, system)
        for row in bw[bw["size_min"] == at].itertuples():
            ax.scatter(
                [row.nodes],
                [row.value],
                marker="x",
                color=REFERENCE_COLOR,
                zorder=5,
                label=reference_label(f"{row.impl} {row.value:g} GB/s", row.source),
            )
            nodes.append(row.nodes)
        count_axis(ax, nodes, "nodes")
        if part["nodes"].nunique() < 2:
            ax.text(0.02, 0.02, "one node count only", transform=ax.transAxes, fontsize=7)
        ax.set_ylabel(f"busbw at {binary_label(at or 0)} (GB/s)")
        ax.set_title(
            f"{system} · {collective} {dtype if isinstance(dtype, str) else ''} · "
            f"{_workload_text([wl])} · {_kinds(part)}",
            fontsize=9,
        )
        ax.grid(True, alpha=0.3)
        legend(ax)
    fig.suptitle(title + capped)
    save(fig, out_dir, name)
    return fig


# ---------------------------------------------------------------- figure 6


def figure_6(
    points: pd.DataFrame,
    out_dir: str | Path | None = None,
    *,
    reference: pd.DataFrame | None = None,
    rates: Mapping[str, float] | None = None,
) -> Figure:
    """The same workloads across systems, busbw as a fraction of each system's NIC line rate.

    Measured results only. Panels per (collective, workload), one line per (system, nodes,
    implementation), colour = system; systems with no known line rate (give ``rates``) get
    their own panel in raw GB/s. Below: the table of :func:`commbench.analysis.tables.line_rate_table`.
    """
    name = "fig6_interconnects"
    title = "Figure 6: interconnect comparison (measured)"
    sel = points[points["kind"] == "measured"] if not points.empty else points
    if sel.empty:
        return _empty(
            title,
            "No measured results.\nRun the `interconnect` experiment on each system "
            "(`commbench jobs submit --system S --experiment interconnect`).",
            out_dir,
            name,
        )
    known = line_rates(_reference(reference), rates)
    sel = with_series(sel)
    sel["line_rate"] = [line_rate_of(s, known) for s in sel["system"]]
    unknown = sorted(set(sel.loc[sel["line_rate"].isna(), "system"]))
    panels = []
    for (collective, wl), ctx in sel.groupby(["collective", "workload_key"], dropna=False):
        for normalised in (True, False):
            part = ctx[ctx["line_rate"].notna() == normalised]
            if not part.empty:
                panels.append((collective, wl, normalised, part))
    panels, capped = _cap(panels, "panels")
    table = line_rate_table(sel, known)
    ncols = min(2, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    table_h = 0.3 * (len(table) + 2)
    fig = Figure(figsize=(7.0 * ncols, 3.6 * nrows + table_h), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subfigures(2, 1, height_ratios=[3.6 * nrows, table_h])
    axes = [ax for row in top.subplots(nrows, ncols, squeeze=False) for ax in row]
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    systems = sorted(set(sel["system"]))
    impls = sorted(set(sel["series"]))
    for ax, (collective, wl, normalised, part) in zip(axes, panels, strict=False):
        for (system, nodes, series), rows in part.groupby(
            ["system", "nodes", "series"], dropna=False
        ):
            s = summarise(rows, ["size_bytes"], "busbw")
            scale = rows["line_rate"].iloc[0] if normalised else 1.0
            color = _SYSTEM_COLORS[systems.index(system) % len(_SYSTEM_COLORS)]
            n = "?" if pd.isna(nodes) else int(nodes)
            ax.plot(
                s["size_bytes"],
                s["value"] / scale,
                color=color,
                marker=_MARKERS[impls.index(series) % len(_MARKERS)],
                markersize=4,
                label=f"{system} {n}n · {series}",
            )
            ax.fill_between(
                s["size_bytes"],
                s["low"] / scale,
                s["high"] / scale,
                color=color,
                alpha=0.15,
                linewidth=0,
            )
        size_axis(ax, part["size_bytes"])
        ax.grid(True, alpha=0.3)
        legend(ax)
        head = f"{collective} · {_workload_text([wl])} · measured"
        if normalised:
            ax.set_ylabel("busbw / NIC line rate")
            ax.set_title(head, fontsize=9)
        else:
            ax.set_ylabel("busbw (GB/s), not normalised")
            ax.set_title(f"{head}\nno line rate known for {', '.join(unknown)}", fontsize=9)
    tab_ax = bottom.subplots()
    tab_ax.set_axis_off()
    cells = [
        [
            r.system,
            "?" if pd.isna(r.nodes) else str(int(r.nodes)),
            r.collective,
            r.workload_key or "-",
            binary_label(r.size_bytes),
            r.best,
            f"{r.busbw_GBps:.3g}",
            f"{r.line_rate_GBps:g}" if math.isfinite(r.line_rate_GBps) else "unknown",
            f"{r.fraction:.1%}" if math.isfinite(r.fraction) else "n/a",
        ]
        for r in table.itertuples()
    ]
    header = [
        "system",
        "nodes",
        "collective",
        "workload",
        "size",
        "best",
        "busbw GB/s",
        "NIC GB/s",
        "fraction",
    ]
    tab = tab_ax.table(cellText=cells, colLabels=header, loc="center", cellLoc="center")
    tab.auto_set_font_size(False)
    tab.set_fontsize(7)
    fig.suptitle(title + capped + " · line rates: results/reference/systems.csv or --line-rate")
    save(fig, out_dir, name)
    return fig


# ---------------------------------------------------------------- figure 7


def figure_7(
    points: pd.DataFrame,
    out_dir: str | Path | None = None,
    *,
    reference: pd.DataFrame | None = None,
    size: int | None = None,
    workload: str | None = None,
    nodes: int | None = None,
) -> Figure:
    """Cost-model predictions at paper scale, with measured points on the same axes.

    All-to-allv panels (one per modelled system): algbw vs servers at one size and workload
    (default: ``zipf:0.8`` if modelled, else the most common; the most common size).
    All-reduce panels (one per modelled system): latency vs size at one node count (default:
    one that was also measured, else the largest modelled).
    """
    name = "fig7_model_predictions"
    title = "Figure 7: cost-model predictions (modelled, dashed) with measured points"
    modelled = points[points["kind"] == "modelled"] if not points.empty else points
    if modelled.empty:
        return _empty(
            title,
            "No modelled records.\nRun e.g. `commbench simulate alltoallv --system h200 "
            "--servers 2,4,8,16,40 --workload zipf:0.8 --size 64M` and `commbench simulate "
            "allreduce --system perlmutter --nodes 2,4,8,16,32 -b 64K -e 2M`.",
            out_dir,
            name,
        )
    ref = _reference(reference)
    measured = points[points["kind"] == "measured"]
    panels: list[tuple[str, Callable[[Axes], None]]] = []
    for system, part in modelled[modelled["collective"].isin(["alltoallv", "alltoall"])].groupby(
        "system"
    ):
        panels.append((system, _a2a_model_panel(part, measured, ref, system, size, workload)))
    for system, part in modelled[modelled["collective"] == "allreduce"].groupby("system"):
        panels.append((system, _allreduce_model_panel(part, measured, ref, system, nodes)))
    if not panels:
        return _empty(
            title, "Modelled records exist but none for allreduce or all-to-all(v).", out_dir, name
        )
    panels, capped = _cap(panels, "panels")
    fig, axes = _panels(len(panels), max_cols=2)
    for ax, (_system, draw) in zip(axes, panels, strict=True):
        draw(ax)
    fig.suptitle(title + capped)
    save(fig, out_dir, name)
    return fig


def _same_system(df: pd.DataFrame, system: str) -> pd.DataFrame:
    return df[df["system"].str.lower() == str(system).lower()]


def _a2a_model_panel(part, measured, ref, system, size, workload) -> Callable[[Axes], None]:
    keys = set(part["workload_key"])
    wl = workload or ("zipf:0.8" if "zipf:0.8" in keys else part["workload_key"].mode().iloc[0])
    part = part[part["workload_key"] == wl]
    at = size if size is not None else int(part["size_bytes"].mode().iloc[0])
    part = part[part["size_bytes"] == at]
    meas = _same_system(measured, system)
    meas = meas[(meas["collective"].isin(["alltoallv", "alltoall"])) & (meas["workload_key"] == wl)]
    meas = meas[meas["size_bytes"] == at]

    def draw(ax: Axes) -> None:
        both = pd.concat([part, meas])
        for label, kind, rows in _lines(both):
            s = summarise(rows, ["nodes"], "mean_algbw")
            plot_summary(ax, s["nodes"].astype(float), s, label, kind)
        xs = list(both["nodes"].astype(float))
        alg = ref[(ref["quantity"] == "algbw_GBps") & (ref["workload"] == wl)]
        for row in _for_system(alg, system).itertuples():
            lo = row.low if math.isfinite(row.low) else row.value
            hi = row.high if math.isfinite(row.high) else row.value
            ax.vlines(
                [row.nodes],
                lo,
                hi,
                color=impl_color(row.impl),
                linewidth=5,
                alpha=0.35,
                label=reference_label(f"{row.impl} {_range_text(lo, hi)} GB/s", row.source),
            )
            xs.append(row.nodes)
        count_axis(ax, xs, "servers (nodes)")
        ax.set_ylabel(MEAN_ALGBW_LABEL)
        ax.set_title(
            f"{system} · all-to-allv · workload {wl} · {binary_label(at)} per GPU · {_kinds(both)}",
            fontsize=9,
        )
        ax.grid(True, alpha=0.3)
        legend(ax)

    return draw


def _allreduce_model_panel(part, measured, ref, system, nodes) -> Callable[[Axes], None]:
    meas = _same_system(measured, system)
    meas = meas[meas["collective"] == "allreduce"]
    if nodes is not None:
        at = nodes
    else:
        common = set(part["nodes"].dropna()) & set(meas["nodes"].dropna())
        at = max(common) if common else part["nodes"].max()
    part = part[part["nodes"] == at]
    meas = meas[meas["nodes"] == at]

    def draw(ax: Axes) -> None:
        both = pd.concat([part, meas])
        for label, kind, rows in _lines(both):
            s = summarise(rows, ["size_bytes"], "latency_max")
            plot_summary(ax, s["size_bytes"], s, label, kind)
        sizes = list(both["size_bytes"])
        lat = ref[(ref["quantity"] == "latency_us") & (ref["nodes"] == at)]
        lat = _for_system(lat, system)
        if not lat.empty:
            sizes += _latency_reference(ax, lat, f"{lat.iloc[0]['impl']} measured by the authors")
        size_axis(ax, sizes)
        log_y(ax)
        ax.set_ylabel("latency per call (µs)")
        gpn = both["gpus_per_node"].dropna()
        ax.set_title(
            f"{system} · allreduce · {_nodes_text(at, gpn.iloc[0] if len(gpn) else None)} · {_kinds(both)}",
            fontsize=9,
        )
        ax.grid(True, alpha=0.3)
        legend(ax)

    return draw


# ---------------------------------------------------------------- all at once


@dataclass
class FigureSpec:
    """One figure: its number, file name, function and input (points or schedules)."""

    number: int
    name: str
    function: Callable[..., Figure]
    input: str = "points"
    options: tuple[str, ...] = field(default_factory=tuple)


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(1, "fig1_allreduce_latency", figure_1, options=("reference",)),
    FigureSpec(2, "fig2_alltoallv_skew", figure_2, options=("reference",)),
    FigureSpec(3, "fig3_stragglers", figure_3),
    FigureSpec(4, "fig4_schedule_synthesis", figure_4, input="schedules", options=("reference",)),
    FigureSpec(5, "fig5_node_scaling", figure_5, options=("reference",)),
    FigureSpec(6, "fig6_interconnects", figure_6, options=("reference", "rates")),
    FigureSpec(7, "fig7_model_predictions", figure_7, options=("reference",)),
    FigureSpec(8, "fig8_timeline", figure_8),
)


@dataclass
class Rendered:
    """What :func:`render_all` made of one figure."""

    spec: FigureSpec
    figure: Figure
    paths: list[Path]
    empty: str | None


def render_all(
    points: pd.DataFrame,
    schedules: pd.DataFrame,
    out_dir: str | Path | None = None,
    *,
    reference: pd.DataFrame | None = None,
    rates: Mapping[str, float] | None = None,
) -> list[Rendered]:
    """Every figure 1–8 from the given results (PNG + SVG into ``out_dir`` when given);
    points recorded with ``--timeline`` only in figure 8 (:func:`timeline.untraced`)."""
    ref = _reference(reference)
    timed = timeline.untraced(points)
    done = []
    for spec in FIGURES:
        data = schedules if spec.input == "schedules" else points if spec.number == 8 else timed
        kwargs = {"reference": ref, "rates": rates}
        fig = spec.function(data, None, **{k: kwargs[k] for k in spec.options})
        paths = save(fig, out_dir, spec.name)
        done.append(Rendered(spec, fig, paths, empty_message(fig)))
    return done

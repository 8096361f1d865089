"""Figure conventions shared by every figure.

Figures are built with :class:`matplotlib.figure.Figure` on an explicit Agg canvas, never
through ``pyplot``: no global state, no GUI, safe in tests and batch jobs.

- message size on a log2 axis with binary labels (8 B ... 16 GiB);
- measured curves solid with round markers, modelled curves dashed with open squares;
- the papers' numbers drawn in grey/black with "paper:" labels — never as our data;
- the spread (min–max over ranks and repetitions) as a shaded band around each line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

BINARY_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
MAX_TICKS = 9

# Fixed colours per implementation so a name has one colour across all figures.
_KNOWN_IMPLS = (
    "nvrar",
    "nccl",
    "rccl",
    "mpi",
    "ring",
    "recursive-doubling",
    "rabenseifner",
    "fast",
    "fanout",
    "spreadout",
    "balance-only",
    "fast-noorder",
    "fast+sched",
    "pxn",
    "deepep",
    "recursive-halving",
    "tree",
    "scatter-allgather",
)
_PALETTE = (
    "#1f77b4",
    "#d62728",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
    "#393b79",
    "#637939",
    "#e7969c",
    "#843c39",
    "#5254a3",
    "#bd9e39",
    "#ad494a",
    "#6b6ecf",
)
REFERENCE_COLOR = "#444444"


def binary_label(nbytes: float) -> str:
    """8 -> ``"8 B"``, 65536 -> ``"64 KiB"``, 1.5 MiB -> ``"1.5 MiB"``."""
    if not math.isfinite(nbytes) or nbytes < 0:
        return ""
    for unit, scale in BINARY_UNITS:
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.3g} {unit}"
    return f"{nbytes:.0f} B" if nbytes == int(nbytes) else f"{nbytes:.3g} B"


def power_of_two_ticks(lo: float, hi: float, max_ticks: int = MAX_TICKS) -> list[float]:
    """Powers of two covering ``[lo, hi]``, thinned to at most ``max_ticks`` (every k-th)."""
    if not (lo > 0 and hi > 0):
        return []
    lo, hi = min(lo, hi), max(lo, hi)
    # Exact exponents (math.log2 rounds 2**40 - 0.002 up to 40.0).
    _, e_lo = math.frexp(lo)
    m_hi, e_hi = math.frexp(hi)
    first, last = e_lo - 1, (e_hi - 1 if m_hi == 0.5 else e_hi)
    exponents = list(range(first, last + 1))
    step = max(1, math.ceil(len(exponents) / max_ticks))
    return [1 << e if e >= 0 else 2.0**e for e in exponents[::step]]


def size_axis(ax: Axes, sizes: Iterable[float], label: str = "message size") -> None:
    """Log2 x axis with binary labels at powers of two spanning ``sizes``."""
    values = [float(s) for s in sizes if s is not None and float(s) > 0]
    ax.set_xscale("log", base=2)
    if values:
        ticks = power_of_two_ticks(min(values), max(values))
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        pad = 2**0.25
        ax.set_xlim(min(values) / pad, max(values) * pad)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: binary_label(x)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(f"{label} (log2)")
    for tick in ax.get_xticklabels():
        tick.set_rotation(30)


def count_axis(ax: Axes, values: Iterable[float], label: str) -> None:
    """Log2 x axis with plain integer labels (node or GPU counts)."""
    vals = sorted({float(v) for v in values if v is not None and float(v) > 0})
    ax.set_xscale("log", base=2)
    if vals:
        ax.xaxis.set_major_locator(FixedLocator(vals))
        pad = 2**0.3
        ax.set_xlim(vals[0] / pad, vals[-1] * pad)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(f"{label} (log2)")


def impl_color(name: str) -> str:
    """Stable colour for an implementation (known names first, others by a stable hash)."""
    m = re.match(r"[\w.+-]+", name.strip().lower())
    base = m.group(0) if m else name
    if base in _KNOWN_IMPLS:
        return _PALETTE[_KNOWN_IMPLS.index(base) % len(_PALETTE)]
    return _PALETTE[sum(base.encode()) % len(_PALETTE)]


def series_style(name: str, kind: str) -> dict:
    """Line style for ``name`` as ``kind`` ('measured' or 'modelled'); an in-place series
    (``... in place``) keeps its implementation's colour with triangles."""
    color = impl_color(name)
    if kind == "modelled":
        return {"color": color, "linestyle": "--", "marker": "s", "markerfacecolor": "none"}
    return {"color": color, "linestyle": "-", "marker": "^" if name.endswith(" in place") else "o"}


def plot_series(
    ax: Axes,
    x: Sequence[float],
    y: Sequence[float],
    low: Sequence[float] | None,
    high: Sequence[float] | None,
    name: str,
    kind: str,
    ci_low: Sequence[float] | None = None,
    ci_high: Sequence[float] | None = None,
) -> None:
    """One implementation's curve with its min–max band, labelled ``name (kind)``, and
    the 95 % interval of each point as an error bar (``ci_low``/``ci_high``; points
    without one get none)."""
    style = series_style(name, kind)
    ax.plot(x, y, label=f"{name} ({kind})", markersize=4, linewidth=1.4, **style)
    if low is not None and high is not None:
        lo, hi = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
        if np.any(np.isfinite(lo) & np.isfinite(hi) & (hi > lo)):
            ax.fill_between(x, lo, hi, color=style["color"], alpha=0.18, linewidth=0)
    if ci_low is not None and ci_high is not None:
        clo, chi = np.asarray(ci_low, dtype=float), np.asarray(ci_high, dtype=float)
        xs = np.asarray(x, dtype=float)
        ok = np.isfinite(clo) & np.isfinite(chi) & (chi > clo)
        if ok.any():  # drawn from lo to hi, wherever the curve's value lies
            mid = (clo[ok] + chi[ok]) / 2
            ax.errorbar(xs[ok], mid, yerr=(chi[ok] - clo[ok]) / 2, fmt="none",
                        ecolor=style["color"], elinewidth=1.0, capsize=2.5, alpha=0.9)  # fmt: skip


def plot_summary(ax: Axes, x: Sequence[float], s, name: str, kind: str) -> None:
    """:func:`plot_series` of a :func:`commbench.analysis.tables.summarise` frame ``s``:
    its value, spread and 95 % interval at ``x``."""
    plot_series(ax, x, s["value"], s["low"], s["high"], name, kind, s["ci_low"], s["ci_high"])


def reference_label(text: str, source: str) -> str:
    """Legend text for a reference number: ``paper: ...`` (``reference: ...`` when the
    number comes from our spec rather than a paper) — never looks like our data."""
    short = re.split(r"[,(:]", source)[0].strip()
    prefix = "reference" if short.lower().startswith("spec") else "paper"
    return f"{prefix}: {text} [{short}]"


def log_y(ax: Axes) -> None:
    """Log y axis with plain number labels (60, 100, 300 rather than 6×10¹)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda y, _pos: ""))


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 7.0, height: float = 3.6):
    """A Figure on an Agg canvas with an ``nrows x ncols`` grid of axes (always 2-D)."""
    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def empty_figure(title: str, message: str) -> Figure:
    """The figure drawn when a selection is empty: the title and what to run to fill it."""
    fig, axes = new_figure(width=7.0, height=2.6)
    ax = axes[0][0]
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, fontsize=10)
    fig.suptitle(title)
    return fig


def legend(ax: Axes) -> None:
    """Legend right of the panel (never over the data), only when something is labelled."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def save(fig: Figure, out_dir: str | Path | None, name: str) -> list[Path]:
    """Write ``name.png`` and ``name.svg`` into ``out_dir`` (created); returns the paths."""
    if out_dir is None:
        return []
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for ext in ("png", "svg"):
        path = out / f"{name}.{ext}"
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths

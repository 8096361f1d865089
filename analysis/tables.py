"""Summaries of result points: spread, best implementation, speed-ups, line rates, model error.

Everything here is pure pandas on the DataFrame of :func:`commbench.analysis.load.load_results`.

Spread conventions (stated once, used by every figure and table):

- a *point* is one (system, nodes, collective, implementation, workload, size, ...)
  combination; it may have several records (repetitions, seeds);
- time: the median over repetitions of the chosen per-call time, spread from the fastest
  rank of the fastest repetition (``time_us_min``) to the slowest rank of the slowest
  (``time_us_max``);
- bandwidth: the median of the recorded value, spread = the bandwidth that the same bytes
  give at those two times;
- speed-up of A over B: median time of B over median time of A; spread = min–max over
  every pair of repetitions of the per-rank ratios (rank i of B over rank i of A) and the
  whole-call ratios;
- interval (``ci_low``/``ci_high``, ``speedup_ci_low``/``speedup_ci_high``): the 95 %
  bootstrap interval of the median per-iteration time of the slowest rank over the group's
  records (launches) and their iterations (:mod:`commbench.analysis.intervals`), in the
  metric's unit; for a speed-up, of the ratio of the two medians. The spread says how far
  ranks and repetitions scatter; the interval, how well the median is known.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from commbench.analysis import tiers as tiers_mod
from commbench.analysis.intervals import Ratio, ratio_interval, records_interval

# One comparison group: everything but the implementation (and repetition).
GROUP = [
    "kind",
    "system",
    "nodes",
    "gpus_per_node",
    "backend",
    "collective",
    "workload_key",
    "dtype",
    "timing_mode",
    "size_bytes",
]
BASELINES: dict[str, tuple[str, ...]] = {
    "allreduce": ("nccl", "rccl", "mpi"),
    "alltoallv": ("fanout", "rccl", "nccl", "mpi"),
    "alltoall": ("fanout", "rccl", "nccl", "mpi"),
    "allgather": ("nccl", "rccl", "mpi"),
    "reducescatter": ("nccl", "rccl", "mpi"),
    "broadcast": ("nccl", "rccl", "mpi"),
}
METRICS = ("time", "latency_max", "algbw", "busbw", "mean_algbw")


def params_key(params: object) -> str:
    """A hashable, stable text for a ``params`` dict ('' for none)."""
    if not isinstance(params, Mapping) or not params:
        return ""
    return json.dumps(params, sort_keys=True, default=str)


def with_series(df: pd.DataFrame) -> pd.DataFrame:
    """Add ``series``: the implementation name plus the params that vary for it.

    ``fast`` stays ``fast`` when all its records share params; otherwise e.g.
    ``fast (strategy=bottleneck)`` and ``fast (strategy=plain)`` become separate lines.
    A record measured in place (``inplace`` 1, nccl-tests' in-place buffers) is its
    implementation's own line, ``ring in place``.
    """
    out = df.copy()
    if out.empty:
        out["series"] = pd.Series(dtype=str)
        return out
    labels = []
    varying: dict[str, list[str]] = {}
    for impl, rows in out.groupby("impl", sort=False):
        dicts = [p if isinstance(p, Mapping) else {} for p in rows["params"]]
        keys = sorted({k for d in dicts for k in d})
        varying[impl] = [
            k for k in keys if len({json.dumps(d.get(k), default=str) for d in dicts}) > 1
        ]
    for impl, params in zip(out["impl"], out["params"], strict=True):
        keys = varying.get(impl, [])
        p = params if isinstance(params, Mapping) else {}
        if keys:
            extra = ", ".join(f"{k}={p.get(k)}" for k in keys)
            labels.append(f"{impl} ({extra})")
        else:
            labels.append(str(impl))
    if "inplace" in out:
        inplace = pd.to_numeric(out["inplace"], errors="coerce").fillna(0).astype(bool)
        labels = [f"{x} in place" if i else x for x, i in zip(labels, inplace, strict=True)]
    out["series"] = labels
    return out


def _bytes_over_time(nbytes: pd.Series, time_us: pd.Series) -> pd.Series:
    """GB/s (1e9) for ``nbytes`` moved in ``time_us`` microseconds."""
    return nbytes / (time_us * 1e3)


#: the columns an interval is computed from
_CI_COLUMNS = ("iter_time_us", "time_us", "time_us_max", "time_us_avg", "modelled", "backend")


def interval_records(df: pd.DataFrame) -> list[dict]:
    """The rows of ``df`` as the records :mod:`commbench.analysis.intervals` reads."""
    cols = [c for c in _CI_COLUMNS if c in df.columns]
    return df[cols].to_dict("records")


def _ci_bounds(part: pd.DataFrame, metric: str) -> tuple[float, float]:
    """The group's interval of ``metric`` (see the module docstring), NaN without one."""
    ci = records_interval(interval_records(part))
    if not ci.known:
        return math.nan, math.nan
    if metric in ("time", "latency_max"):
        return ci.low, ci.high
    if metric == "mean_algbw":
        nbytes, scale = float(part["size_bytes"].median()), 1.0
    else:
        nbytes = float(part["metric_bytes"].median())
        factor = part["busbw_factor"].median()
        scale = float(factor) if metric == "busbw" and math.isfinite(factor) else 1.0
    return nbytes / (ci.high * 1e3) * scale, nbytes / (ci.low * 1e3) * scale


def summarise(df: pd.DataFrame, keys: Sequence[str], metric: str = "time") -> pd.DataFrame:
    """Per ``keys`` group: ``value`` (median), ``low``/``high`` (spread), ``ci_low``/
    ``ci_high`` (95 % interval, NaN where the records have none) and ``n`` records.

    ``metric``: ``time`` (the chosen per-call time), ``latency_max`` (max over ranks, as the
    NVRAR paper reports), ``algbw`` or ``busbw`` (GB/s), ``mean_algbw`` (GB/s: the mean
    bytes each GPU sends, ``size_bytes``, over the time — the FAST paper's all-to-allv
    algbw, where ``algbw`` follows nccl-tests' busiest-rank rule).
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}: use one of {', '.join(METRICS)}")
    keys = list(keys)
    if df.empty:
        return pd.DataFrame(columns=[*keys, "value", "low", "high", "n", "ci_low", "ci_high"])
    work = df.copy()
    if metric in ("time", "latency_max"):
        work["_v"] = work["time_us"] if metric == "time" else work["time_us_max"]
        work["_lo"] = work["time_us_min"].fillna(work["_v"])
        work["_hi"] = work["time_us_max"].fillna(work["_v"])
    elif metric == "mean_algbw":
        work["_v"] = _bytes_over_time(work["size_bytes"], work["time_us"])
        work["_lo"] = _bytes_over_time(
            work["size_bytes"], work["time_us_max"].fillna(work["time_us"])
        )
        work["_hi"] = _bytes_over_time(
            work["size_bytes"], work["time_us_min"].fillna(work["time_us"])
        )
    else:
        algbw = work["algbw_GBps"].fillna(_bytes_over_time(work["metric_bytes"], work["time_us"]))
        factor = work["busbw_factor"].fillna(work["busbw_GBps"] / work["algbw_GBps"]).fillna(1.0)
        scale = factor if metric == "busbw" else 1.0
        value = work["busbw_GBps"].fillna(algbw * factor) if metric == "busbw" else algbw
        slow = work["time_us_max"].fillna(work["time_us"])
        fast = work["time_us_min"].fillna(work["time_us"])
        work["_v"] = value
        work["_lo"] = _bytes_over_time(work["metric_bytes"], slow) * scale
        work["_hi"] = _bytes_over_time(work["metric_bytes"], fast) * scale
    g = work.groupby(keys, dropna=False, sort=True)
    out = g.agg(value=("_v", "median"), low=("_lo", "min"), high=("_hi", "max"), n=("_v", "size"))
    bounds = [_ci_bounds(part, metric) for _, part in g]
    out["ci_low"] = [b[0] for b in bounds]
    out["ci_high"] = [b[1] for b in bounds]
    out = out.reset_index()
    # The band always contains the line (one repetition's chosen time lies in [min, max]).
    out["low"] = np.fmin(out["low"], out["value"])
    out["high"] = np.fmax(out["high"], out["value"])
    return out


def speedup(base: pd.DataFrame, cand: pd.DataFrame) -> tuple[float, float, float]:
    """``(value, low, high)`` speed-up of ``cand`` over ``base`` (see module docstring)."""
    tb = base["time_us"].to_numpy(dtype=float)
    tc = cand["time_us"].to_numpy(dtype=float)
    tb, tc = tb[np.isfinite(tb)], tc[np.isfinite(tc)]
    if tb.size == 0 or tc.size == 0 or np.any(tc <= 0):
        return (math.nan, math.nan, math.nan)
    value = float(np.median(tb) / np.median(tc))
    samples = [value, *(tb[:, None] / tc[None, :]).ravel().tolist()]
    for rb in base["rank_time_us"]:
        for rc in cand["rank_time_us"]:
            if isinstance(rb, list) and isinstance(rc, list) and rb and len(rb) == len(rc):
                a, b = np.asarray(rb, dtype=float), np.asarray(rc, dtype=float)
                ok = (b > 0) & np.isfinite(a) & np.isfinite(b)
                samples.extend((a[ok] / b[ok]).tolist())
    return (value, float(min(samples)), float(max(samples)))


def speedup_interval(base: pd.DataFrame, cand: pd.DataFrame) -> Ratio:
    """Speed-up of ``cand`` over ``base`` (base's median time over cand's) with its 95 %
    interval: :func:`~commbench.analysis.intervals.ratio_interval`, NaN bounds where a
    side has none."""
    r = ratio_interval(interval_records(cand), interval_records(base))
    return Ratio(r.value, r.low, r.high)


#: where-the-bytes-went columns of the comparison tables (medians over a group's records)
TIER_KEYS = ("nic_GBps", "nic_fraction", "scaleup_GBps", "scaleup_fraction", "time_over_lb")


def tier_summary(part: pd.DataFrame) -> dict[str, float]:
    """Median of each :data:`TIER_KEYS` over the records' ``tiers`` (computed here for an
    all-reduce or all-to-all record written without them; NaN where unknown)."""
    found: dict[str, list[float]] = {k: [] for k in TIER_KEYS}
    cols = [c for c in ("tiers", *tiers_mod.RECORD_KEYS) if c in part.columns]
    for rec in part[cols].to_dict("records"):
        t = rec.get("tiers")
        if not isinstance(t, Mapping):
            t = (
                tiers_mod.record_tiers(as_record(rec))
                if rec.get("collective") != "alltoallv"
                else None
            )
        for k in TIER_KEYS:
            v = t.get(k) if isinstance(t, Mapping) else None
            if isinstance(v, (int, float)) and math.isfinite(v):
                found[k].append(float(v))
    return {k: float(np.median(v)) if v else math.nan for k, v in found.items()}


def as_record(rec: dict) -> dict:
    """A DataFrame row as a record: pandas' missing values as None, numpy ints as int."""
    out = {}
    for k, v in rec.items():
        if isinstance(v, (list, dict, str)) or v is None:
            out[k] = v
        elif pd.isna(v):
            out[k] = None
        elif isinstance(v, (np.integer, int)) and not isinstance(v, bool):
            out[k] = int(v)
        else:
            out[k] = v
    return out


def pick_baseline(collective: str, series: Iterable[str]) -> str | None:
    """The baseline a speed-up is measured against: NCCL/RCCL/MPI, fan-out for all-to-all."""
    present = set(series)
    for name in BASELINES.get(collective, ("mpi",)):
        if name in present:
            return name
    return None


def _groups(df: pd.DataFrame):
    """Comparison groups, with the ``series`` column added."""
    if df.empty:
        return
    data = with_series(df)
    yield from data.groupby(GROUP, dropna=False, sort=True)


def speedup_table(
    df: pd.DataFrame, baselines: Mapping[str, Sequence[str]] | None = None
) -> pd.DataFrame:
    """Speed-up of every implementation over its group's baseline, with its spread."""
    chosen = dict(BASELINES)
    chosen.update(baselines or {})
    rows = []
    for key, group in _groups(df):
        info = dict(zip(GROUP, key, strict=True))
        series = group["series"].unique()
        base = None
        for name in chosen.get(info["collective"], ("mpi",)):
            if name in series:
                base = name
                break
        if base is None:
            continue
        base_rows = group[group["series"] == base]
        for name in series:
            if name == base:
                continue
            cand = group[group["series"] == name]
            value, low, high = speedup(base_rows, cand)
            ci = speedup_interval(base_rows, cand)
            rows.append(
                {
                    **info,
                    "impl": name,
                    "baseline": base,
                    "speedup": value,
                    "speedup_low": low,
                    "speedup_high": high,
                    "speedup_ci": ci.value,
                    "speedup_ci_low": ci.low,
                    "speedup_ci_high": ci.high,
                    **tier_summary(cand),
                }
            )
    cols = [*GROUP, "impl", "baseline", "speedup", "speedup_low", "speedup_high", "speedup_ci",
            "speedup_ci_low", "speedup_ci_high", *TIER_KEYS]  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def best_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per group: the fastest implementation, its time and busbw, and its lead over the next."""
    rows = []
    for key, group in _groups(df):
        info = dict(zip(GROUP, key, strict=True))
        times = group.groupby("series")["time_us"].median().dropna().sort_values()
        if times.empty:
            continue
        best = str(times.index[0])
        best_rows = group[group["series"] == best]
        bw = summarise(best_rows, ["series"], "busbw").iloc[0]
        ci = records_interval(interval_records(best_rows))
        row = {
            **info,
            "best": best,
            "time_us": float(times.iloc[0]),
            "time_ci_low": ci.low if ci.known else math.nan,
            "time_ci_high": ci.high if ci.known else math.nan,
            "busbw_GBps": float(bw["value"]),
            "runner_up": None,
            "lead": math.nan,
            "lead_low": math.nan,
            "lead_high": math.nan,
            "lead_ci_low": math.nan,
            "lead_ci_high": math.nan,
            "n_impls": int(times.size),
            **tier_summary(best_rows),
        }
        if times.size > 1:
            second = str(times.index[1])
            second_rows = group[group["series"] == second]
            value, low, high = speedup(second_rows, best_rows)
            lead = speedup_interval(second_rows, best_rows)
            row.update(runner_up=second, lead=value, lead_low=low, lead_high=high,
                       lead_ci_low=lead.low, lead_ci_high=lead.high)  # fmt: skip
        rows.append(row)
    cols = [
        *GROUP,
        "best",
        "time_us",
        "time_ci_low",
        "time_ci_high",
        "busbw_GBps",
        "runner_up",
        "lead",
        "lead_low",
        "lead_high",
        "lead_ci_low",
        "lead_ci_high",
        "n_impls",
        *TIER_KEYS,
    ]
    return pd.DataFrame(rows, columns=cols)


def line_rates(
    reference: pd.DataFrame, overrides: Mapping[str, float] | None = None
) -> dict[str, float]:
    """NIC line rate (GB/s) per system from the reference data, then ``overrides``."""
    rates: dict[str, float] = {}
    if not reference.empty:
        rows = reference[reference["quantity"] == "nic_line_rate_GBps"]
        for system, value in zip(rows["system"], rows["value"], strict=True):
            if system and math.isfinite(value):
                rates[str(system).lower()] = float(value)
    for system, value in (overrides or {}).items():
        if not (isinstance(value, (int, float)) and value > 0):
            raise ValueError(f"line rate for {system!r} must be a positive number of GB/s")
        rates[str(system).lower()] = float(value)
    return rates


def line_rate_of(system: str, rates: Mapping[str, float]) -> float:
    """The rate for ``system``: exact name first, else a known name it contains."""
    name = str(system).lower()
    if name in rates:
        return rates[name]
    for known, value in rates.items():
        if known and known in name:
            return value
    return math.nan


def line_rate_table(df: pd.DataFrame, rates: Mapping[str, float]) -> pd.DataFrame:
    """Measured fraction of NIC line rate: best busbw at the largest size, per system.

    One row per (system, nodes, collective, workload); busbw is per rank, compared with one
    NIC's line rate (one NIC per GPU on every profiled system).
    """
    cols = [
        "system",
        "nodes",
        "gpus_per_node",
        "collective",
        "workload_key",
        "size_bytes",
        "best",
        "busbw_GBps",
        "line_rate_GBps",
        "fraction",
    ]
    measured = df[df["kind"] == "measured"] if not df.empty else df
    if measured.empty:
        return pd.DataFrame(columns=cols)
    data = with_series(measured)
    rows = []
    keys = ["system", "nodes", "gpus_per_node", "collective", "workload_key"]
    for key, group in data.groupby(keys, dropna=False, sort=True):
        size = group["size_bytes"].max()
        at = group[group["size_bytes"] == size]
        bw = summarise(at, ["series"], "busbw").sort_values("value", ascending=False)
        top = bw.iloc[0]
        rate = line_rate_of(key[0], rates)
        rows.append(
            {
                **dict(zip(keys, key, strict=True)),
                "size_bytes": size,
                "best": top["series"],
                "busbw_GBps": float(top["value"]),
                "line_rate_GBps": rate,
                "fraction": float(top["value"]) / rate if math.isfinite(rate) else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def model_error_table(df: pd.DataFrame) -> pd.DataFrame:
    """Where a point was both measured and modelled: both times and modelled / measured."""
    keys = [
        "system",
        "nodes",
        "gpus_per_node",
        "collective",
        "series",
        "workload_key",
        "size_bytes",
    ]
    cols = [*keys, "measured_us", "modelled_us", "ratio"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    data = with_series(df)
    med = data.groupby([*keys, "kind"], dropna=False)["time_us"].median().unstack("kind")
    if "measured" not in med.columns or "modelled" not in med.columns:
        return pd.DataFrame(columns=cols)
    both = med.dropna(subset=["measured", "modelled"]).reset_index()
    both = both.rename(columns={"measured": "measured_us", "modelled": "modelled_us"})
    both["ratio"] = both["modelled_us"] / both["measured_us"]
    return both[cols]


#: (commbench impl, external baseline impl) pairs the agreement check compares.
AGREEMENT_PAIRS = (
    ("mpi", "osu:osu_allreduce"),
    ("mpi", "osu:osu_alltoall"),
    ("nccl", "nccl-tests:all_reduce"),
    ("nccl", "nccl-tests:alltoall"),
    ("rccl", "rccl-tests:all_reduce"),
    ("rccl", "rccl-tests:alltoall"),
    ("mpi", "osu:osu_allgather"),
    ("mpi", "osu:osu_reduce_scatter"),
    ("mpi", "osu:osu_bcast"),
    ("nccl", "nccl-tests:all_gather"),
    ("nccl", "nccl-tests:reduce_scatter"),
    ("nccl", "nccl-tests:broadcast"),
    ("rccl", "rccl-tests:all_gather"),
    ("rccl", "rccl-tests:reduce_scatter"),
    ("rccl", "rccl-tests:broadcast"),
)


def agreement_table(df: pd.DataFrame) -> pd.DataFrame:
    """commbench's baselines against the external tools on the same allocation.

    Measured points of a pair in :data:`AGREEMENT_PAIRS` with the same system, run,
    ranks, collective, size and buffers (in place or not): both median times and
    commbench / external (1 = agree).
    """
    keys = ["system", "run_id", "nodes", "nranks", "collective", "size_bytes", "inplace"]
    cols = [*keys, "impl", "external", "commbench_us", "external_us", "ratio"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    data = df[df["kind"] == "measured"].copy()
    data["run_id"] = data["run_id"].fillna("")
    # in place against in place: records from before --inplace are out of place
    inplace = data["inplace"] if "inplace" in data else pd.Series(0, index=data.index)
    data["inplace"] = pd.to_numeric(inplace, errors="coerce").fillna(0).astype(int)
    med = data.groupby([*keys, "impl"], dropna=False)["time_us"].median().reset_index()
    parts = []
    for ours, theirs in AGREEMENT_PAIRS:
        a = (
            med[med["impl"] == ours]
            .drop(columns="impl")
            .rename(columns={"time_us": "commbench_us"})
        )
        b = med[med["impl"] == theirs].drop(columns=["impl", "nodes"])
        b = b.rename(columns={"time_us": "external_us"})
        both = a.merge(b, on=[k for k in keys if k != "nodes"])
        if both.empty:
            continue
        both["impl"], both["external"] = ours, theirs
        parts.append(both)
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)
    out["ratio"] = out["commbench_us"] / out["external_us"]
    return out[cols].sort_values([*keys, "impl"]).reset_index(drop=True)


def overhead_table(df: pd.DataFrame) -> pd.DataFrame:
    """Measured points that carry the C reference's time (``run --reference c``) or were
    host-bound on a GPU: commbench's time, the library call timed from C on the same
    buffers, their ratio, and what issuing the call took."""
    cols = ["system", "run_id", "nranks", "collective", "impl", "timing_mode", "size_bytes",
            "time_us", "reference_time_us", "ratio", "host_us", "timed_loop", "host_bound"]  # fmt: skip
    if df.empty:
        return pd.DataFrame(columns=cols)
    data = df[df["kind"] == "measured"]
    keep = data["reference_time_us"].notna() | (data["host_bound"] == True)  # noqa: E712
    out = data[keep].copy()
    out["ratio"] = out["time_us"] / out["reference_time_us"]
    return out[cols].sort_values(cols[:7]).reset_index(drop=True)

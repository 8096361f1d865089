"""Confidence intervals of a point's time: a bootstrap over per-iteration samples, and over
launches when the point was repeated.

A measured record carries ``iter_time_us``: for each timed iteration (on GPU backends, each
block of iterations), the time of the slowest rank. The point's statistic is the **median**
of those samples (robust to the odd descheduled iteration of a shared machine); its 95 %
interval is a percentile bootstrap, rounded outwards (the 2.5th percentile taken at or below,
the 97.5th at or above): it holds the true median 91-96 % of the time with 8-40 samples of
skewed laws (tests/test_intervals.py), where the plain percentile bootstrap of a median
holds it about 93 % of the time. Records of one point from several launches (``commbench sweep --repeat
K``) merge by a two-level bootstrap: launches are resampled with replacement, then samples
within each chosen launch, so a launch-to-launch drift widens the interval as it should.

Modelled records are exact (``ci_method`` ``model``: the interval is the time itself);
records with fewer than two samples (imported tools' single numbers, records written before
intervals existed) have no interval (``ci_method`` ``none``), and comparisons involving them
cannot tell.

Record fields (all optional on read, so older files still load): ``iter_time_us``,
``ci_median_us``, ``ci_low_us``, ``ci_high_us``, ``ci_samples``, ``ci_launches``,
``ci_level``, ``ci_method``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
RESAMPLES = 2000
#: One seed for every bootstrap: the same records always give the same interval.
SEED = 20250528
#: Bound on resampled values held at once (resamples x launches x samples per launch).
_MAX_CELLS = 4_000_000

BOOTSTRAP, MODEL, NONE = "bootstrap", "model", "none"
FIELDS = (
    "ci_median_us",
    "ci_low_us",
    "ci_high_us",
    "ci_samples",
    "ci_launches",
    "ci_level",
    "ci_method",
)


@dataclass(frozen=True)
class Interval:
    """The median of a point's samples and its confidence interval (``low``/``high`` NaN
    when there is none)."""

    median: float
    low: float
    high: float
    samples: int
    launches: int
    method: str = BOOTSTRAP
    level: float = LEVEL

    @property
    def known(self) -> bool:
        return self.method != NONE and math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2 if self.known else math.nan

    def fields(self) -> dict:
        """The record fields of this interval (:data:`FIELDS`)."""

        def num(x: float) -> float | None:
            return round(float(x), 4) if math.isfinite(x) else None

        return {
            "ci_median_us": num(self.median),
            "ci_low_us": num(self.low),
            "ci_high_us": num(self.high),
            "ci_samples": int(self.samples),
            "ci_launches": int(self.launches),
            "ci_level": self.level,
            "ci_method": self.method,
        }

    def text(self, digits: int = 2) -> str:
        """``[lo, hi]`` (or ``exact``/``n/a``) for tables."""
        if self.method == MODEL:
            return "exact (model)"
        if not self.known:
            return "n/a"
        return f"[{self.low:.{digits}f}, {self.high:.{digits}f}]"


def _as_groups(groups: Iterable[Sequence[float]]) -> list[np.ndarray]:
    out = []
    for g in groups:
        a = np.asarray(g, dtype=float).ravel()
        a = a[np.isfinite(a)]
        if a.size:
            out.append(a)
    return out


def resampled_medians(
    groups: Sequence[np.ndarray], resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """One median per bootstrap resample of ``groups`` (one array of samples per launch).

    With one launch: its samples resampled with replacement. With several: launches
    resampled with replacement, then each chosen launch's samples, pooled.
    """
    k = len(groups)
    lens = np.array([g.size for g in groups])
    width = int(lens.max())
    table = np.full((k, width), np.nan)
    for i, g in enumerate(groups):
        table[i, : g.size] = g
    pick = (
        np.zeros((resamples, 1), dtype=np.int64) if k == 1 else rng.integers(0, k, (resamples, k))
    )
    n_pick = lens[pick]  # (B, k)
    within = (rng.random((*pick.shape, width)) * n_pick[..., None]).astype(np.int64)
    values = table[pick[..., None], within]
    if (lens == width).all():
        return np.median(values.reshape(resamples, -1), axis=1)
    values[np.arange(width) >= n_pick[..., None]] = np.nan
    return np.nanmedian(values.reshape(resamples, -1), axis=1)


def _resamples_for(groups: Sequence[np.ndarray], resamples: int) -> int:
    cells = max(len(groups), 1) * max((g.size for g in groups), default=1)
    return max(200, min(resamples, _MAX_CELLS // cells))


def _bounds(values: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2 * 100
    lo = float(np.percentile(values, tail, method="lower"))
    hi = float(np.percentile(values, 100 - tail, method="higher"))
    return lo, hi


def median_interval(
    groups: Iterable[Sequence[float]],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval:
    """The median of the pooled samples and its bootstrap interval (see the module
    docstring); no interval with fewer than two samples."""
    gs = _as_groups(groups)
    n = int(sum(g.size for g in gs))
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0, len(gs), NONE, level)
    median = float(np.median(np.concatenate(gs)))
    if n < 2:
        return Interval(median, math.nan, math.nan, n, len(gs), NONE, level)
    rng = np.random.default_rng(seed)
    meds = resampled_medians(gs, _resamples_for(gs, resamples), rng)
    lo, hi = _bounds(meds, level)
    return Interval(median, min(lo, median), max(hi, median), n, len(gs), BOOTSTRAP, level)


def slowest_mean_interval(
    launches: Iterable[Sequence[Sequence[float]]],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Interval:
    """The reading of a point timed with ``-a 3`` (each launch's slowest rank's mean over
    its calls, the median over launches) and its bootstrap interval: what the same
    launches and calls read when drawn again. Each launch is ranks x calls (a raw record's
    ``samples_us``); a resample draws the launches with replacement, then each one's calls
    with replacement, a call whole (every rank's sample of it together: a rank a late
    flow holds up makes its peer late in the same call). Where a few calls pay a large
    cost (a retransmission timeout), the reading moves with how many of them a launch
    draws, and the interval says how far."""
    tables = [np.asarray(t, dtype=float) for t in launches]
    tables = [t.reshape(len(t), -1) for t in tables if t.size]
    if not tables:
        return Interval(math.nan, math.nan, math.nan, 0, 0, NONE, level)
    reading = float(np.median([t.mean(axis=1).max() for t in tables]))
    calls = sum(t.shape[1] for t in tables)
    if calls < 2:
        return Interval(reading, math.nan, math.nan, calls, len(tables), NONE, level)
    rng = np.random.default_rng(seed)
    k = len(tables)
    count = max(200, min(resamples, _MAX_CELLS // max(sum(t.size for t in tables), 1)))
    # per launch, ``count`` x ``k`` independent redraws of its reading (one per slot a
    # resample may give it)
    redrawn = np.empty((k, count, k))
    for j, t in enumerate(tables):
        cols = rng.integers(0, t.shape[1], (count, k, t.shape[1]))
        redrawn[j] = t[:, cols].mean(axis=3).max(axis=0)
    pick = np.zeros((count, 1), dtype=np.int64) if k == 1 else rng.integers(0, k, (count, k))
    slots = np.arange(pick.shape[1])
    values = np.median(redrawn[pick, np.arange(count)[:, None], slots], axis=1)
    lo, hi = _bounds(values, level)
    return Interval(reading, min(lo, reading), max(hi, reading), calls, k, BOOTSTRAP, level)


def exact_interval(time_us: float, launches: int = 1) -> Interval:
    """A modelled point: no noise, the interval is the time itself."""
    t = float(time_us)
    return Interval(t, t, t, 1, launches, MODEL)


# ------------------------------------------------------------------ records


def is_modelled(rec: Mapping) -> bool:
    return bool(rec.get("modelled")) or rec.get("backend") == "model"


def record_samples(rec: Mapping) -> np.ndarray | None:
    """A record's per-iteration samples (``iter_time_us``), or None when it has none."""
    raw = rec.get("iter_time_us")
    if isinstance(raw, (list, tuple, np.ndarray)) and len(raw):
        a = np.asarray(raw, dtype=float)
        a = a[np.isfinite(a)]
        return a if a.size else None
    return None


def _record_time(rec: Mapping) -> float:
    for key in ("time_us", "time_us_max", "time_us_avg"):
        value = rec.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    return math.nan


def record_groups(records: Iterable[Mapping]) -> list[np.ndarray]:
    """One sample array per record (launch): its ``iter_time_us``, or its one time when
    it has none (an imported or older record)."""
    groups = []
    for rec in records:
        samples = record_samples(rec)
        if samples is None:
            t = _record_time(rec)
            samples = np.array([t]) if math.isfinite(t) else None
        if samples is not None:
            groups.append(samples)
    return groups


def records_interval(records: Sequence[Mapping], **kwargs) -> Interval:
    """The interval of one point from its records (one per launch): exact when they are
    modelled, else the bootstrap over their samples (:func:`record_groups`)."""
    records = list(records)
    if records and all(is_modelled(r) for r in records):
        times = [_record_time(r) for r in records]
        return exact_interval(float(np.median(times)), len(records))
    return median_interval(record_groups(records), **kwargs)


def interval_fields(iter_time_us: Sequence[float]) -> dict:
    """What the driver adds to a record: the samples (rounded to ns) and their interval."""
    samples = [round(float(x), 3) for x in iter_time_us]
    return {"iter_time_us": samples, **median_interval([samples]).fields()}


def record_interval(rec: Mapping) -> Interval:
    """The interval a record carries (its ``ci_*`` fields), or the one its samples give;
    ``method`` ``none`` when it has neither (records written before intervals)."""
    if is_modelled(rec):
        return exact_interval(_record_time(rec), int(rec.get("ci_launches") or 1))
    low, high, med = rec.get("ci_low_us"), rec.get("ci_high_us"), rec.get("ci_median_us")
    if all(isinstance(v, (int, float)) and math.isfinite(v) for v in (low, high, med)):
        return Interval(
            float(med),
            float(low),
            float(high),
            int(rec.get("ci_samples") or 0),
            int(rec.get("ci_launches") or 1),
            str(rec.get("ci_method") or BOOTSTRAP),
            float(rec.get("ci_level") or LEVEL),
        )
    samples = record_samples(rec)
    if samples is not None:
        return median_interval([samples])
    return Interval(_record_time(rec), math.nan, math.nan, 0, 1, NONE)


# ------------------------------------------------------------------ ratios


@dataclass(frozen=True)
class Ratio:
    """NEW's median over BASE's, with its interval (NaN bounds when either side has none)."""

    value: float
    low: float
    high: float

    @property
    def known(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def _side(records: Sequence[Mapping]) -> tuple[float, list[np.ndarray], bool] | None:
    """``(median, sample groups, exact)`` of one side of a ratio; None without times."""
    recs = list(records)
    groups = record_groups(recs)
    if not groups:
        return None
    if all(is_modelled(r) for r in recs):
        return float(np.median([g[0] for g in groups])), groups, True
    return float(np.median(np.concatenate(groups))), groups, False


def ratio_interval(
    base: Sequence[Mapping],
    new: Sequence[Mapping],
    level: float = LEVEL,
    resamples: int = RESAMPLES,
    seed: int = SEED,
) -> Ratio:
    """Median time of ``new``'s records over ``base``'s, each side bootstrapped on its own
    (launches, then samples); exact (modelled) sides stay fixed. No interval when a
    measured side has fewer than two samples."""
    sides = (_side(base), _side(new))
    if None in sides or not sides[0][0] > 0:
        return Ratio(math.nan, math.nan, math.nan)
    value = sides[1][0] / sides[0][0]
    if any(not exact and sum(g.size for g in groups) < 2 for _, groups, exact in sides):
        return Ratio(value, math.nan, math.nan)
    if all(exact for _, _, exact in sides):
        return Ratio(value, value, value)
    rng = np.random.default_rng(seed)
    count = min(_resamples_for(groups, resamples) for _, groups, _ in sides)
    b, n = (
        np.full(count, median) if exact else resampled_medians(groups, count, rng)
        for median, groups, exact in sides
    )
    ok = b > 0
    lo, hi = _bounds(n[ok] / b[ok], level)
    return Ratio(value, min(lo, value), max(hi, value))


def merged_points(records: Iterable[Mapping]) -> list[tuple[Mapping, Interval]]:
    """One ``(first record, interval)`` per point (the same
    :func:`~commbench.analysis.records.point_key` and run), its launches merged, in the
    order the points first appear."""
    from commbench.analysis.records import point_key

    groups: dict[tuple, list[Mapping]] = {}
    for rec in records:
        if rec.get("collective") in (None, "schedule"):
            continue
        groups.setdefault((rec.get("run_id"), point_key(rec)), []).append(rec)
    return [(recs[0], records_interval(recs)) for recs in groups.values()]

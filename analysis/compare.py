"""Two sets of records compared point by point: NEW's time over BASE's, with its 95 %
interval and a verdict (what ``commbench compare`` prints, and what the report's and the
scorecard's comparisons use).

Points match on :data:`MATCH` (collective, size, dtype, workload and its seed, ranks and
layout, system, and measured or modelled), not on the implementation: two files of two
implementations compare as readily as two runs of one. Within one side the records of a
point and implementation (``impl`` plus its ``params``) merge, one per launch
(:mod:`commbench.analysis.intervals`). Where a point has one implementation on each side
they pair whatever their names; where it has several, the same names pair.

The ratio is NEW's median per-iteration time (of the slowest rank) over BASE's, with a
bootstrap interval over both sides' launches and samples. Verdict at 95 %: **faster** when
the whole interval is below 1, **slower** when above (beyond ``tolerance``: a ratio interval
above 1 but not above ``1 + tolerance`` is **within tolerance**), **no difference** when it
holds 1, **cannot tell** when a side has no interval (fewer than two samples).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from commbench.analysis.intervals import (
    Interval,
    Ratio,
    ratio_interval,
    records_interval,
)

MATCH = (
    "kind",
    "system",
    "collective",
    "nranks",
    "gpus_per_node",
    "dtype",
    "op",
    "size_bytes",
    "workload",
    "seed",
)
FASTER, SLOWER, SAME, TOLERATED, UNKNOWN = (
    "faster",
    "slower",
    "no difference",
    "within tolerance",
    "cannot tell",
)
VERDICTS = (FASTER, SLOWER, SAME, TOLERATED, UNKNOWN)


def kind(rec: Mapping) -> str:
    return "modelled" if rec.get("modelled") or rec.get("backend") == "model" else "measured"


def match_key(rec: Mapping) -> tuple:
    return tuple(kind(rec) if k == "kind" else _hashable(rec.get(k)) for k in MATCH)


def _hashable(v):
    return json.dumps(v, sort_keys=True, default=str) if isinstance(v, (dict, list)) else v


def impl_label(rec: Mapping) -> str:
    """The implementation and its params: ``fast`` or ``fast (strategy=bvn)``."""
    params = rec.get("params")
    if isinstance(params, Mapping) and params:
        return f"{rec.get('impl')} ({', '.join(f'{k}={params[k]}' for k in sorted(params))})"
    return str(rec.get("impl"))


def is_point(rec: Mapping) -> bool:
    return rec.get("collective") not in (None, "schedule") and rec.get("size_bytes") is not None


def group(records: Iterable[Mapping], impls: Sequence[str] = ()) -> dict[tuple, dict[str, list]]:
    """``{match key: {implementation label: [records]}}``; ``impls`` keeps only those
    implementations (by ``impl`` or by label)."""
    out: dict[tuple, dict[str, list]] = {}
    for rec in records:
        if not is_point(rec):
            continue
        label = impl_label(rec)
        if impls and rec.get("impl") not in impls and label not in impls:
            continue
        out.setdefault(match_key(rec), {}).setdefault(label, []).append(rec)
    return out


def verdict(ratio: Ratio, tolerance: float = 0.0) -> str:
    if not ratio.known:
        return UNKNOWN
    if ratio.high < 1:
        return FASTER
    if ratio.low > 1 + tolerance:
        return SLOWER
    if ratio.low > 1:
        return TOLERATED
    return SAME


@dataclass
class Row:
    """One matched point: both sides' records and intervals, the ratio and the verdict."""

    key: dict
    base_impl: str
    new_impl: str
    base: Interval
    new: Interval
    ratio: Ratio
    verdict: str
    base_records: list = field(repr=False, default_factory=list)
    new_records: list = field(repr=False, default_factory=list)

    @property
    def tiers(self) -> tuple[dict | None, dict | None]:
        """Each side's ``tiers`` (its first record's)."""
        return tuple(_tiers(r) for r in (self.base_records, self.new_records))


def _tiers(records: list) -> dict | None:
    for rec in records:
        if isinstance(rec.get("tiers"), Mapping):
            return rec["tiers"]
    return None


@dataclass
class Comparison:
    rows: list[Row]
    only_base: int  # points (x implementations) with no partner in NEW
    only_new: int
    tolerance: float = 0.0

    def counts(self) -> dict[str, int]:
        return {v: sum(r.verdict == v for r in self.rows) for v in VERDICTS}

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == SLOWER]

    def exit_status(self) -> int:
        """1 when any point is slower beyond its interval (and the tolerance), else 0."""
        return 1 if self.regressions else 0

    def geomean(self) -> float:
        logs = [math.log(r.ratio.value) for r in self.rows if r.ratio.value > 0]
        return math.exp(sum(logs) / len(logs)) if logs else math.nan

    def caveat(self) -> str | None:
        """A warning when measured points rest on one launch a side: their intervals hold
        the iterations' noise, not the drift between launches that two runs of a shared
        machine see (``--repeat`` gives the second level)."""
        single = sum(
            1
            for r in self.rows
            if r.key["kind"] == "measured" and min(r.base.launches, r.new.launches) < 2
        )
        if not single:
            return None
        return (
            f"{single} of {len(self.rows)} points rest on one launch a side: their intervals "
            "cover the noise between iterations, not the drift between launches; repeat "
            "the launches (commbench sweep --repeat K, make run REPEAT=K) before trusting "
            "a verdict on a shared machine"
        )

    def summary(self) -> str:
        c = self.counts()
        parts = [f"{c[FASTER]} faster", f"{c[SLOWER]} slower", f"{c[SAME]} no difference"]
        if c[TOLERATED]:
            parts.append(f"{c[TOLERATED]} within tolerance ({self.tolerance:.0%})")
        if c[UNKNOWN]:
            parts.append(f"{c[UNKNOWN]} cannot tell")
        text = f"{len(self.rows)} points: " + ", ".join(parts) + " at 95 %"
        if self.rows:
            text += f"; geometric mean of new/base {self.geomean():.3f}"
        if self.only_base or self.only_new:
            text += f"; unmatched: {self.only_base} in base, {self.only_new} in new"
        return text


def compare(
    base: Iterable[Mapping],
    new: Iterable[Mapping],
    base_impls: Sequence[str] = (),
    new_impls: Sequence[str] = (),
    tolerance: float = 0.0,
) -> Comparison:
    """Match the points of ``base`` and ``new`` and compare each pair (module docstring)."""
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0 (got {tolerance})")
    b, n = group(base, base_impls), group(new, new_impls)
    rows, only_base, only_new = [], 0, 0
    for key in sorted(set(b) | set(n), key=_sort_key):
        left, right = b.get(key, {}), n.get(key, {})
        if len(left) == 1 and len(right) == 1:
            pairs = [(next(iter(left)), next(iter(right)))]
        else:
            pairs = [(label, label) for label in left if label in right]
        paired_b = {p[0] for p in pairs}
        paired_n = {p[1] for p in pairs}
        only_base += sum(label not in paired_b for label in left)
        only_new += sum(label not in paired_n for label in right)
        for lb, ln in pairs:
            ratio = ratio_interval(left[lb], right[ln])
            rows.append(
                Row(
                    key=dict(zip(MATCH, key, strict=True)),
                    base_impl=lb,
                    new_impl=ln,
                    base=records_interval(left[lb]),
                    new=records_interval(right[ln]),
                    ratio=ratio,
                    verdict=verdict(ratio, tolerance),
                    base_records=left[lb],
                    new_records=right[ln],
                )
            )
    return Comparison(rows, only_base, only_new, tolerance)


def _sort_key(key: tuple):
    return tuple(
        (v is None, str(type(v)), v if isinstance(v, (int, float)) else str(v)) for v in key
    )


# ------------------------------------------------------------------ presentation


def _size(n) -> str:
    n = int(n)
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _layout(key: Mapping) -> str:
    p, g = key.get("nranks"), key.get("gpus_per_node")
    if isinstance(p, int) and isinstance(g, int) and g:
        return f"{p // g}x{g}"
    return str(p)


def _workload(key: Mapping) -> str:
    w = key.get("workload")
    if not w:
        return "-"
    seed = key.get("seed")
    return f"{w}@{seed}" if seed is not None and "@" not in str(w) else str(w)


def _time(ci: Interval) -> str:
    return f"{ci.median:.2f} {ci.text()}" if math.isfinite(ci.median) else "n/a"


def _ratio(r: Ratio) -> str:
    if not math.isfinite(r.value):
        return "n/a"
    if not r.known:
        return f"{r.value:.3f} [n/a]"
    return f"{r.value:.3f} [{r.low:.3f}, {r.high:.3f}]"


def _tier_text(t: Mapping | None) -> str:
    """``NIC 1.2 MB 3.4 GB/s (5%) | up 0.5 MB 1.0 GB/s | 2.1x lb``."""
    if not isinstance(t, Mapping):
        return "-"
    parts = []
    for tier, name in (("nic", "NIC"), ("scaleup", "up")):
        nbytes, rate, frac = (
            t.get(f"{tier}_bytes"),
            t.get(f"{tier}_GBps"),
            t.get(f"{tier}_fraction"),
        )
        if not isinstance(nbytes, (int, float)) or not nbytes:
            continue
        text = f"{name} {nbytes / 1e6:.3g} MB"
        if isinstance(rate, (int, float)):
            text += f" {rate:.3g} GB/s"
        if isinstance(frac, (int, float)):
            text += f" ({frac:.0%})"
        parts.append(text)
    if isinstance(t.get("time_over_lb"), (int, float)):
        parts.append(f"{t['time_over_lb']:.3g}x lb")
    return " | ".join(parts) or "-"


COLUMNS = (
    "kind",
    "system",
    "nodes x G",
    "collective",
    "dtype",
    "workload",
    "size",
    "base",
    "base time (us) [95% CI]",
    "new",
    "new time (us) [95% CI]",
    "new/base [95% CI]",
    "verdict",
)
TIER_COLUMNS = ("base tiers", "new tiers")


def table_rows(comparison: Comparison, tiers: bool = False) -> list[list[str]]:
    """The table's cells, one list per row (:data:`COLUMNS`, then :data:`TIER_COLUMNS`)."""
    out = []
    for r in comparison.rows:
        k = r.key
        cells = [
            k["kind"],
            str(k["system"]),
            _layout(k),
            str(k["collective"]),
            str(k["dtype"]),
            _workload(k),
            _size(k["size_bytes"]),
            r.base_impl,
            _time(r.base),
            r.new_impl,
            _time(r.new),
            _ratio(r.ratio),
            r.verdict,
        ]
        if tiers:
            cells += [_tier_text(t) for t in r.tiers]
        out.append(cells)
    return out


def text_table(comparison: Comparison, tiers: bool = False) -> str:
    """Aligned columns, one line per matched point."""
    header = [*COLUMNS, *(TIER_COLUMNS if tiers else ())]
    rows = table_rows(comparison, tiers)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["# " + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += [
        "  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]
    return "\n".join(lines)


_COLOURS = {FASTER: "#d8f3dc", SLOWER: "#ffd6d6", TOLERATED: "#fff3bf", UNKNOWN: "#eeeeee"}


def html_page(
    comparison: Comparison, title: str, inputs: Sequence[str], tiers: bool = False
) -> str:
    """The comparison as one self-contained HTML page."""
    header = [*COLUMNS, *(TIER_COLUMNS if tiers else ())]
    body = []
    for r, cells in zip(comparison.rows, table_rows(comparison, tiers), strict=True):
        style = f' style="background:{_COLOURS[r.verdict]}"' if r.verdict in _COLOURS else ""
        tds = "".join(f"<td>{html.escape(c)}</td>" for c in cells)
        body.append(f"<tr{style}>{tds}</tr>")
    status = "regression" if comparison.exit_status() else "no regression"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px;color:#222}"
        "table{border-collapse:collapse;font-size:.82em}"
        "th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;white-space:nowrap}"
        "th{background:#f2f2f2}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        f"<p>{html.escape(' vs '.join(inputs))}</p>"
        f"<p><b>{html.escape(comparison.summary())}</b> ({status}).</p>"
        + (f"<p><i>{html.escape(comparison.caveat())}</i></p>" if comparison.caveat() else "")
        + "<p>Time: the median per-iteration time of the slowest rank, with its 95 % bootstrap "
        "interval (over launches and iterations); new/base &lt; 1 means NEW is faster. "
        "Verdict at 95 %: faster or slower when the ratio's whole interval is below or above "
        "1, no difference when it holds 1, cannot tell when a side has no interval.</p>"
        "<table><thead><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in header)
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table></body></html>\n"
    )

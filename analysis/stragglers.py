"""Stragglers: which rank is the slowest how often, and by how much, per node.

Two views of the same question, from what the records carry:

- **points**: each measured record's ``rank_time_us`` (every rank's mean time of the point):
  its slowest rank and how far above the median rank it was;
- **iterations**: each per-rank per-iteration sample row set (``samples_us``, ranks x
  iterations, from the raw side file: latency mode or an imported ``-I 1`` run with one
  process per rank): per iteration, the slowest rank and its lead over the median rank.

Ranks are counted within one layout (system, nodes, GPUs per node, ranks): a slow node of an
allocation shows across every collective and size measured on it. Rank ``r`` sits on node
``r // (nranks / nodes)``, the harness's placement. A point or iteration where every rank
took the same time has no straggler and is not counted as anyone's. Records without
per-rank times (modelled ones, single-rank runs, imported single numbers) are skipped.
Under skewed all-to-all(v) the rank with the most bytes is slowest by design: read those
rows next to the workload.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

#: Columns that tell layouts apart (a rank's identity is its index within one).
LAYOUT = ("system", "nodes", "gpus_per_node", "nranks")
_COUNTS = ("points", "slowest_points", "iterations", "slowest_iterations")
RANK_COLUMNS = (*LAYOUT, "node", "rank", *_COUNTS,
                "point_excess_us", "point_excess_pct", "iter_excess_us", "iter_excess_pct")  # fmt: skip
NODE_COLUMNS = (*LAYOUT, "node", "ranks", *_COUNTS,
                "point_excess_us", "point_excess_pct", "iter_excess_us", "iter_excess_pct",
                "slowest_rank")  # fmt: skip


@dataclass
class _Tally:
    """Per rank: how often it was the slowest and the summed lead over the median."""

    nranks: int
    total: int = 0
    slowest: np.ndarray = field(init=False)
    excess_us: np.ndarray = field(init=False)
    excess_pct: np.ndarray = field(init=False)
    pct_count: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.slowest = np.zeros(self.nranks, dtype=int)
        self.excess_us = np.zeros(self.nranks)
        self.excess_pct = np.zeros(self.nranks)
        self.pct_count = np.zeros(self.nranks, dtype=int)

    def add(self, times: np.ndarray) -> None:
        """``times``: ranks x columns (points or iterations); each column is one contest."""
        self.total += times.shape[1]
        top = times.max(axis=0)
        median = np.median(times, axis=0)
        spread = top > median  # every rank alike: nobody's straggle
        who = times.argmax(axis=0)[spread]
        lead = (top - median)[spread]
        base = median[spread]
        np.add.at(self.slowest, who, 1)
        np.add.at(self.excess_us, who, lead)
        pos = base > 0
        np.add.at(self.excess_pct, who[pos], 100.0 * lead[pos] / base[pos])
        np.add.at(self.pct_count, who[pos], 1)

    def means(self, index) -> tuple[float, float]:
        """Mean lead (us, %) of the ranks ``index`` over the contests they were slowest in."""
        n, npct = self.slowest[index].sum(), self.pct_count[index].sum()
        us = float(self.excess_us[index].sum() / n) if n else math.nan
        pct = float(self.excess_pct[index].sum() / npct) if npct else math.nan
        return us, pct


def _rank_times(value, nranks: int) -> np.ndarray | None:
    """A per-rank vector or ranks x iterations table as floats, or None when it is not
    one value (row) per rank or not finite."""
    if not isinstance(value, (list, tuple, np.ndarray)) or len(value) != nranks:
        return None
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):  # ragged rows
        return None
    if (arr.ndim == 2 and arr.shape[1] == 0) or not np.isfinite(arr).all():
        return None
    return arr


def straggler_tables(
    points: pd.DataFrame, samples: Sequence | pd.Series | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(ranks, nodes)`` from measured ``points`` (:func:`commbench.analysis.load.
    normalise_points`) and, aligned with them, their per-iteration ``samples`` (ranks x
    iterations or None each: :func:`commbench.analysis.load.load_raw_samples`).

    ``ranks``: one row per rank that was the slowest at least once (most often first), with
    ``points`` / ``iterations`` (contests in its layout), ``slowest_points`` /
    ``slowest_iterations`` and the mean lead over the median rank when slowest
    (``*_excess_us``, ``*_excess_pct``). ``nodes``: the same per node, every node of a
    layout, with ``ranks`` (first-last) and the rank that was slowest most often.
    """
    tallies: dict[tuple, tuple[_Tally, _Tally]] = {}
    if samples is None:
        samples = [None] * len(points)
    for row, sample in zip(points.itertuples(index=False), samples, strict=True):
        nranks = row.nranks
        if row.modelled or pd.isna(nranks) or nranks < 2:
            continue
        nranks = int(nranks)
        means = _rank_times(row.rank_time_us, nranks)
        iters = _rank_times(sample, nranks)
        means = means if means is not None and means.ndim == 1 else None
        iters = iters if iters is not None and iters.ndim == 2 else None
        if means is None and iters is None:
            continue
        key = tuple(None if pd.isna(v) else v for v in (row.system, row.nodes,
                                                         row.gpus_per_node, nranks))  # fmt: skip
        by_point, by_iter = tallies.setdefault(key, (_Tally(nranks), _Tally(nranks)))
        if means is not None:
            by_point.add(means[:, None])
        if iters is not None:
            by_iter.add(iters)
    rank_rows, node_rows = [], []
    for key in sorted(tallies, key=lambda k: tuple(str(v) for v in k)):
        by_point, by_iter = tallies[key]
        system, nodes, gpn, nranks = key
        per_node = nranks // int(nodes) if nodes and nranks % int(nodes) == 0 else None
        layout = dict(zip(LAYOUT, key, strict=True))
        for r in range(nranks):
            if not (by_point.slowest[r] or by_iter.slowest[r]):
                continue
            rank_rows.append(
                {**layout, "node": r // per_node if per_node else None, "rank": r,
                 **_stats(by_point, by_iter, [r])}
            )  # fmt: skip
        if per_node is None:
            continue
        for n in range(int(nodes)):
            members = list(range(n * per_node, (n + 1) * per_node))
            # most slowest points first, then most slowest iterations
            counts = [(by_point.slowest[r], by_iter.slowest[r], -r) for r in members]
            top = max(counts)
            first = -top[2] if top[0] or top[1] else None
            node_rows.append(
                {**layout, "node": n, "ranks": f"{members[0]}-{members[-1]}",
                 **_stats(by_point, by_iter, members), "slowest_rank": first}
            )  # fmt: skip
    ranks = pd.DataFrame(rank_rows, columns=list(RANK_COLUMNS))
    if not ranks.empty:
        order = ["slowest_points", "slowest_iterations"]
        ranks["_layout"] = ranks[list(LAYOUT)].astype(str).agg("|".join, axis=1)
        ranks = ranks.sort_values(["_layout", *order, "rank"], ascending=[True, False, False, True])
        ranks = ranks.drop(columns="_layout").reset_index(drop=True)
    return ranks, pd.DataFrame(node_rows, columns=list(NODE_COLUMNS))


def _stats(by_point: _Tally, by_iter: _Tally, index: list[int]) -> dict:
    point_us, point_pct = by_point.means(index)
    iter_us, iter_pct = by_iter.means(index)
    return {
        "points": by_point.total,
        "slowest_points": int(by_point.slowest[index].sum()),
        "iterations": by_iter.total,
        "slowest_iterations": int(by_iter.slowest[index].sum()),
        "point_excess_us": point_us,
        "point_excess_pct": point_pct,
        "iter_excess_us": iter_us,
        "iter_excess_pct": iter_pct,
    }


def _layout_text(row) -> str:
    nodes, gpn = row["nodes"], row["gpus_per_node"]
    if nodes is None or pd.isna(nodes):
        return f"{int(row['nranks'])} ranks"
    return f"{int(nodes)}×{int(gpn)}" if gpn is not None and not pd.isna(gpn) else f"{int(nodes)}"


def _count_text(k, n) -> str:
    return f"{int(k)} of {int(n)} ({k / n:.0%})" if n else ""


def _lead_text(us, pct) -> str:
    if not math.isfinite(us):
        return ""
    return f"{us:.3g}" + (f" ({pct:.1f}%)" if math.isfinite(pct) else "")


def _present(table: pd.DataFrame, first: dict) -> pd.DataFrame:
    rows = table.to_dict("records")
    return pd.DataFrame(
        {
            "system": table["system"],
            "nodes×GPUs": [_layout_text(r) for r in rows],
            **first,
            "slowest in points": [_count_text(r["slowest_points"], r["points"]) for r in rows],
            "lead over median, µs (%)": [
                _lead_text(r["point_excess_us"], r["point_excess_pct"]) for r in rows
            ],
            "slowest in iterations": [
                _count_text(r["slowest_iterations"], r["iterations"]) for r in rows
            ],
            "per-iteration lead, µs (%)": [
                _lead_text(r["iter_excess_us"], r["iter_excess_pct"]) for r in rows
            ],
        }
    )


def present_ranks(ranks: pd.DataFrame) -> pd.DataFrame:
    """:func:`straggler_tables`' ranks with readable columns."""
    node = ranks["node"].map(lambda n: "" if n is None or pd.isna(n) else str(int(n)))
    return _present(ranks, {"node": node, "rank": ranks["rank"]})


def present_nodes(nodes: pd.DataFrame) -> pd.DataFrame:
    """:func:`straggler_tables`' nodes with readable columns."""
    slowest = nodes["slowest_rank"].map(lambda r: "" if r is None or pd.isna(r) else str(int(r)))
    return _present(
        nodes, {"node": nodes["node"], "ranks": nodes["ranks"], "most often slowest": slowest}
    )


def straggler_text(ranks: pd.DataFrame, nodes: pd.DataFrame) -> str:
    """Both tables as plain text (``commbench report --stragglers``)."""
    if ranks.empty:
        return (
            "# stragglers: no measured record with per-rank times (rank_time_us or raw "
            "per-iteration samples) on 2 or more ranks\n"
        )
    parts = [
        "# stragglers per node: how often one of its ranks was the slowest, and its mean "
        "lead over the median rank then",
        present_nodes(nodes).to_string(index=False) if not nodes.empty else "(node layout unknown)",
        "",
        "# stragglers per rank (ranks that were the slowest at least once, most often first)",
        present_ranks(ranks).to_string(index=False),
    ]
    return "\n".join(parts) + "\n"

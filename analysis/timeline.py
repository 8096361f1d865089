"""Where a call's time went, per rank: the spans of ``commbench run --timeline``.

The side file ``<out>.timeline.jsonl`` (named by each record's ``timeline_file``) has one
line per span: the point's keys (``run_id``, ``point``, ``inplace``, ``impl``,
``size_bytes``, ``workload``), ``rank``, ``call``, ``step``, ``kind`` and ``start_us`` /
``end_us`` (µs since that rank's timed loop began), and ``loop_start_us``, that start on
the rank's own clock (the host's monotonic clock: adding it lines up the ranks of one
machine, the emulated cluster's too; empty in files written before it). Each call has
one ``call`` span (the call as the harness timed it) and the algorithm's spans inside it,
which tile it (see :mod:`commbench.kernels.timeline`); library baselines have only the
``call`` span.

:func:`load_timeline` reads the spans of the given points; :func:`timeline_breakdown` sums them
per point and kind (the report's table); :func:`figure_8` draws one call per point as a
Gantt chart, one row per rank; :func:`exchange_lateness` lines up the two ranks of each
exchange of a butterfly (how late the partner came, what the exchange took once both
were in) and :func:`lateness_table` sums that up per point (``python -m
commbench.benchmarks.lateness`` prints it); :func:`rank_step_ends` lines up when each rank
left each step (``python -m commbench.benchmarks.step_ends`` prints it beside the flow
model's).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from commbench.analysis.load import point_side_key
from commbench.analysis.records import SIDE_LINK, side_key
from commbench.analysis.style import binary_label, empty_figure, new_figure, save

SPAN_COLUMNS = ("rank", "call", "step", "kind", "start_us", "end_us", "loop_start_us")
#: Point columns copied onto every span (what a chart or table is grouped by).
POINT_KEYS = ("system", "nodes", "gpus_per_node", "collective", "impl", "size_bytes",
              "workload_key", "dtype", *SIDE_LINK)  # fmt: skip
#: A point's spans: one launch's point (``launch_id`` "" in files written before it).
POINT = list(SIDE_LINK)
#: Kind -> colour (the chart's legend order); ``other`` is the call's time outside spans.
KIND_COLORS = {
    "post": "#1f77b4",
    "wait": "#d62728",
    "copy": "#2ca02c",
    "reduce": "#ff7f0e",
    "pack": "#9467bd",
    "collective": "#8c564b",
    "schedule": "#17becf",
    "call": "#7f7f7f",
}
MAX_POINTS = 6
EMPTY_GID = "commbench-empty"  # what figures.empty_message looks for


def untraced(points: pd.DataFrame) -> pd.DataFrame:
    """The points not recorded span by span (``run --timeline``). A traced point's calls
    are timed from Python and pay the spans' recording, so the figures that compare
    times (1-7) and the scorecard leave them out; figure 8 and the tables show them."""
    if "timeline_file" not in points.columns:
        return points
    traced = points["timeline_file"].map(lambda n: isinstance(n, str) and bool(n))
    return points.loc[~traced.astype(bool)]


def load_timeline(points: pd.DataFrame) -> pd.DataFrame:
    """Every span of the given points (the side files their records name, next to the
    results file), with :data:`POINT_KEYS` copied from the point; empty when none has a
    timeline. A cut-off last line is skipped."""
    wanted: dict[Path, dict[tuple, int]] = {}
    if "timeline_file" in points.columns:
        for i, row in enumerate(points.itertuples(index=False)):
            name, source = getattr(row, "timeline_file", None), row.source_file
            if isinstance(name, str) and name and isinstance(source, str):
                key = point_side_key(row)
                wanted.setdefault(Path(source).parent / name, {})[key] = i
    frames = []
    for path, rows in wanted.items():
        if not path.is_file():
            continue
        spans = []
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    span = json.loads(line)
                except ValueError:  # a torn tail
                    continue
                i = rows.get(side_key(*(span.get(k) for k in SIDE_LINK)))
                if i is not None:
                    spans.append((i, *(span.get(c) for c in SPAN_COLUMNS)))
        if spans:
            frames.append(pd.DataFrame(spans, columns=("row", *SPAN_COLUMNS)))
    if not frames:
        return pd.DataFrame(columns=(*POINT_KEYS, *SPAN_COLUMNS))
    spans = pd.concat(frames, ignore_index=True)
    keys = points.reset_index(drop=True).reindex(columns=list(POINT_KEYS))
    out = pd.concat([keys.iloc[spans["row"]].reset_index(drop=True), spans], axis=1)
    return _linked(out.drop(columns="row"))


def _linked(spans: pd.DataFrame) -> pd.DataFrame:
    """``spans`` with a ``launch_id`` on every row ("" where none was recorded), so that
    grouping by a point's :data:`POINT` keeps them (a NaN key is dropped)."""
    ids = spans["launch_id"] if "launch_id" in spans.columns else pd.Series(None, spans.index)
    return spans.assign(launch_id=ids.map(lambda v: v if isinstance(v, str) else ""))


def timeline_breakdown(spans: pd.DataFrame) -> pd.DataFrame:
    """Per point and kind: mean µs per call and rank, and its share of the call; ``other``
    is the call time no span covers (the harness's stamps around the call)."""
    cols = (*POINT_KEYS, "kind", "us_per_call", "share")
    if spans.empty:
        return pd.DataFrame(columns=cols)
    s = _linked(spans).assign(us=spans["end_us"] - spans["start_us"])
    rows = []
    for _, part in s.groupby(POINT, dropna=False, sort=False):
        head = part.iloc[0]
        calls = part[part["kind"] == "call"]
        ncalls = max(len(calls), 1)  # rank-calls
        call_us = calls["us"].sum() / ncalls
        inner = part[part["kind"] != "call"]
        per_kind = inner.groupby("kind")["us"].sum() / ncalls
        if not inner.empty:
            per_kind["other"] = max(call_us - per_kind.sum(), 0.0)
        per_kind["call"] = call_us
        for kind, us in per_kind.items():
            rows.append({**{k: head[k] for k in POINT_KEYS}, "kind": kind,
                         "us_per_call": float(us), "share": float(us / call_us) if call_us else np.nan})  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def exchange_lateness(spans: pd.DataFrame, distances: list[int]) -> pd.DataFrame:
    """Per rank, call and step of a butterfly whose step ``k`` is one exchange between
    rank r and r XOR ``distances[k]`` (recursive doubling on 8 ranks ``[1, 2, 4]``, this
    suite's Rabenseifner ``[4, 2, 1, 1, 2, 4]``): ``post_us`` (issuing the step's sends
    and receives), ``late_us`` (the partner's posts ended this long after this rank's;
    negative when it was first), ``after_both_us`` (this rank's wait ended this long
    after the later of the two posts: the exchange itself once both are in),
    ``direction_us`` (this rank's wait ended this long after the partner's posts: on a
    one-sided step, NVRAR's, the time of the partner's data into this rank; on a
    two-sided one it waits for its own send too; below 0 where the data landed before
    the partner, preempted after posting, marked its posts' end) and ``step_us`` (start
    of the posts to the end of the wait). A step with several post or wait spans (NVRAR
    waits chunk by chunk) counts from its first post's start, its last post's end and
    its last wait's end. Needs ``loop_start_us`` (ranks that read one clock: one
    machine); steps without both kinds of span are left out."""
    cols = (*POINT, "call", "step", "rank")
    out_cols = (*cols, "partner", "post_us", "late_us", "after_both_us", "direction_us", "step_us")
    spans = _linked(spans)
    s = spans[spans["kind"].isin(("post", "wait")) & (spans["step"] >= 0)]
    s = s[s["step"] < len(distances)]
    if s.empty:
        return pd.DataFrame(columns=out_cols)
    origin = pd.to_numeric(s["loop_start_us"], errors="coerce")
    if origin.isna().any():
        raise ValueError("exchange_lateness needs loop_start_us (timelines written since it)")
    s = s.assign(at_start=origin + s["start_us"], at_end=origin + s["end_us"])
    key = list(cols)
    post = (
        s[s["kind"] == "post"]
        .groupby(key, as_index=False, dropna=False)
        .agg(at_start=("at_start", "min"), at_end=("at_end", "max"))
    )
    wait = s[s["kind"] == "wait"].groupby(key, as_index=False, dropna=False)
    wait = wait.agg(done=("at_end", "max"))
    d = post.merge(wait, on=key)
    step_distance = np.asarray(distances, dtype=np.int64)[d["step"].to_numpy(dtype=np.int64)]
    d["partner"] = d["rank"].to_numpy(dtype=np.int64) ^ step_distance
    theirs = post[[*key, "at_end"]].rename(columns={"rank": "partner", "at_end": "their_end"})
    d = d.merge(theirs, on=[*key[:-1], "partner"])
    d["post_us"] = d["at_end"] - d["at_start"]
    d["late_us"] = d["their_end"] - d["at_end"]
    d["after_both_us"] = d["done"] - np.maximum(d["at_end"], d["their_end"])
    d["direction_us"] = d["done"] - d["their_end"]
    d["step_us"] = d["done"] - d["at_start"]
    return d[list(out_cols)].reset_index(drop=True)


def lateness_table(points: pd.DataFrame, spans: pd.DataFrame, distances: list[int]) -> pd.DataFrame:
    """One row per point of :func:`exchange_lateness`'s medians over ranks, calls and
    steps: the point's measured ``time_us``, ``step_us``, ``post_us``; over the rows
    whose partner posted later (the rank that waited) ``late_us`` and ``after_both_us``
    (the exchange once both were in), and ``last_after_both_us`` over the rows of the
    rank that posted last."""
    cols = ("run_id", "point", "impl", "size_bytes", "time_us", "step_us", "post_us",
            "late_us", "after_both_us", "last_after_both_us")  # fmt: skip
    d = exchange_lateness(spans, distances)
    rows = []
    launch = _linked(points)["launch_id"]
    for (run, launch_id, point), part in d.groupby(["run_id", "launch_id", "point"], sort=False):
        rec = points[(points["run_id"] == run) & (launch == launch_id) & (points["point"] == point)]
        rec = rec.iloc[0]
        waited, last = part[part["late_us"] > 0], part[part["late_us"] <= 0]
        rows.append((run, point, rec["impl"], int(rec["size_bytes"]), float(rec["time_us"]),
                     part["step_us"].median(), part["post_us"].median(),
                     waited["late_us"].median(), waited["after_both_us"].median(),
                     last["after_both_us"].median()))  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def direction_table(spans: pd.DataFrame, distances: list[int]) -> pd.DataFrame:
    """Per implementation and size, pooled over every point, call, step and rank given:
    how many directions and the least, median, upper quartile and most of
    :func:`exchange_lateness`'s ``direction_us``. A call's slowest rank takes the longest
    path through its steps' directions, so their spread, not their median, sets it."""
    cols = ("impl", "size_bytes", "directions", "direction_min_us", "direction_median_us",
            "direction_p75_us", "direction_max_us")  # fmt: skip
    d = exchange_lateness(spans, distances)
    if d.empty:
        return pd.DataFrame(columns=cols)
    keys = spans.drop_duplicates(["run_id", "point"])[["run_id", "point", "impl", "size_bytes"]]
    d = d.merge(keys, on=["run_id", "point"])
    rows = []
    for (impl, size), part in d.groupby(["impl", "size_bytes"], sort=True):
        x = part["direction_us"]
        rows.append((impl, int(size), len(x), x.min(), x.median(), x.quantile(0.75), x.max()))
    return pd.DataFrame(rows, columns=cols)


def wait_stalls(spans: pd.DataFrame, over_us: float) -> pd.DataFrame:
    """The steps in which one rank waited much longer than the others: per point, call
    and step, each rank's wait (its first wait's start to its last wait's end in that
    step), and a row where the longest is more than ``over_us`` above the median rank's:
    the point's keys, ``call``, ``step``, that ``rank``, its ``node`` (rank // GPUs per
    node) and ``excess_us``. One clock per rank suffices (no ``loop_start_us``)."""
    cols = ("run_id", "point", "impl", "size_bytes", "call", "step", "rank", "node",
            "excess_us")  # fmt: skip
    spans = _linked(spans)
    w = spans[(spans["kind"] == "wait") & (spans["step"] >= 0)]
    if w.empty:
        return pd.DataFrame(columns=cols)
    key = ["run_id", "point", "impl", "size_bytes", "gpus_per_node", "call", "step", "launch_id"]
    per_rank = w.groupby([*key, "rank"]).agg(start=("start_us", "min"), end=("end_us", "max"))
    waited = (per_rank["end"] - per_rank["start"]).rename("wait_us").reset_index()
    rows = []
    for k, part in waited.groupby(key, sort=False):
        longest = part.loc[part["wait_us"].idxmax()]
        excess = float(longest["wait_us"] - part["wait_us"].median())
        if excess > over_us:
            g = max(int(k[4]), 1)
            rows.append((*k[:4], int(k[5]), int(k[6]), int(longest["rank"]),
                         int(longest["rank"]) // g, excess))  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def stall_table(spans: pd.DataFrame, over_us: float) -> pd.DataFrame:
    """Per implementation and size over every point given (:func:`wait_stalls`): calls,
    calls with a stall, stalls, their excess (least, median, most) and how many fell on
    each node and on each rank (``by_node``, ``by_rank``: ``index:count`` pairs; the node
    is the rank's by the run's numbering, ``rank // GPUs per node``)."""
    cols = ("impl", "size_bytes", "calls", "stalled_calls", "stalls", "excess_min_us",
            "excess_median_us", "excess_max_us", "by_node", "by_rank")  # fmt: skip
    calls = spans[spans["kind"] == "call"].drop_duplicates(["run_id", "point", "call"])
    if calls.empty:
        return pd.DataFrame(columns=cols)
    stalls = wait_stalls(spans, over_us)
    rows = []
    for (impl, size), part in calls.groupby(["impl", "size_bytes"], sort=True):
        mine = stalls[(stalls["impl"] == impl) & (stalls["size_bytes"] == size)]
        stalled = mine.drop_duplicates(["run_id", "point", "call"])
        x = mine["excess_us"]
        nodes, ranks = (" ".join(f"{n}:{c}" for n, c in mine[col].value_counts().sort_index().items())
                        for col in ("node", "rank"))  # fmt: skip
        rows.append((impl, int(size), len(part), len(stalled), len(mine),
                     x.min() if len(x) else math.nan, x.median() if len(x) else math.nan,
                     x.max() if len(x) else math.nan, nodes or "-", ranks or "-"))  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def rank_step_ends(spans: pd.DataFrame) -> pd.DataFrame:
    """When each rank left each step of each call: per point, call, rank and step (0, 1,
    ...) the end of its last span in that step, ``end_us`` after the call's first span
    of a step on any rank. The ranks are lined up by ``loop_start_us``, one machine's
    clock (the emulated cluster's ranks; those of several machines do not line up)."""
    cols = ("run_id", "point", "impl", "size_bytes", "call", "rank", "step", "end_us")
    s = _linked(spans)
    s = s[s["step"] >= 0]
    if s.empty:
        return pd.DataFrame(columns=cols)
    if s["loop_start_us"].isna().any():
        raise ValueError("spans without loop_start_us (written before it): the ranks cannot "
                         "be lined up; record them again with commbench run ... --timeline")  # fmt: skip
    key = ["run_id", "launch_id", "point", "impl", "size_bytes", "call"]
    t = s.assign(start=s["loop_start_us"] + s["start_us"], end=s["loop_start_us"] + s["end_us"])
    first = t.groupby(key)["start"].min().rename("first")
    ends = t.groupby([*key, "rank", "step"])["end"].max().reset_index().join(first, on=key)
    ends["end_us"] = ends["end"] - ends["first"]
    return ends[list(cols)].reset_index(drop=True)


def median_call(spans: pd.DataFrame) -> int:
    """The call whose slowest rank took the median time (the chart's representative)."""
    calls = spans[spans["kind"] == "call"]
    slowest = (calls["end_us"] - calls["start_us"]).groupby(calls["call"]).max().sort_values()
    return int(slowest.index[len(slowest) // 2])


def figure_8(points: pd.DataFrame, out_dir: str | Path | None = None):
    """Per-rank timeline (Gantt chart) of one call per point with ``--timeline`` spans.

    One panel per point (up to :data:`MAX_POINTS`): each rank a row, its spans coloured by
    kind, a black tick where each step or stage begins, x = µs since the call began on that rank (calls start after a barrier in latency
    mode, back to back when pipelined); the call shown is the median one (:func:`median_call`).
    """
    name = "fig8_timeline"
    title = "Figure 8: where a call's time goes, per rank (--timeline)"
    spans = load_timeline(points)
    if spans.empty:
        fig = empty_figure(
            title,
            "No records with a timeline.\nRun e.g. `commbench run allreduce --impl nvrar "
            "-b 1K -e 1K --timing latency --timeline --out results.jsonl`.",
        )
        fig.axes[0].texts[0].set_gid(EMPTY_GID)
        save(fig, out_dir, name)
        return fig
    groups = list(spans.groupby(POINT, dropna=False, sort=False))
    shown = groups[:MAX_POINTS]
    fig, axes = new_figure(
        ncols=1, nrows=len(shown), width=9.0, height=0.9 + 0.28 * spans["rank"].nunique()
    )
    for ax, (_, part) in zip((row[0] for row in axes), shown, strict=True):
        _gantt(ax, part)
    handles = [Patch(color=c, label=k) for k, c in KIND_COLORS.items() if k in set(spans["kind"])]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    more = f" (first {MAX_POINTS} of {len(groups)} points)" if len(groups) > MAX_POINTS else ""
    fig.suptitle(title + more)
    save(fig, out_dir, name)
    return fig


def _gantt(ax, part: pd.DataFrame) -> None:
    call = median_call(part)
    one = part[part["call"] == call]
    starts = one[one["kind"] == "call"].set_index("rank")["start_us"]
    ranks = sorted(one["rank"].unique())
    for rank in ranks:
        mine = one[one["rank"] == rank]
        t0 = starts.get(rank, mine["start_us"].min())
        whole = mine[mine["kind"] == "call"]
        inner = mine[mine["kind"] != "call"]
        for sel, height, alpha in ((whole, 0.8, 0.25), (inner, 0.6, 1.0)):
            for kind, spans in sel.groupby("kind"):
                bars = list(
                    zip(spans["start_us"] - t0, spans["end_us"] - spans["start_us"], strict=True)
                )
                ax.broken_barh(
                    bars,
                    (rank - height / 2, height),
                    color=KIND_COLORS.get(kind, "#000000"),
                    alpha=alpha,
                )
        inner = inner.sort_values("start_us")  # a black tick where each step / stage begins
        begins = inner["step"].ne(inner["step"].shift()) & (inner["step"] >= 0)
        ax.vlines(inner.loc[begins, "start_us"] - t0, rank - 0.4, rank + 0.4, color="black",
                  linewidth=0.8)  # fmt: skip
    head = part.iloc[0]
    where = f"{head['system']} · {head['nodes']}x{head['gpus_per_node']}"
    what = f"{head['collective']} {head['impl']} {binary_label(int(head['size_bytes']))}"
    if isinstance(head["workload_key"], str) and head["workload_key"]:
        what += f" {head['workload_key']}"
    ax.set_title(f"{where} · {what} · call {call} (median)", fontsize=9)
    ax.set_yticks(ranks)
    ax.set_ylabel("rank")
    ax.invert_yaxis()
    ax.set_xlabel("µs since the call began on the rank")

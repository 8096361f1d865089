"""Load result records (JSONL) and the papers' reference numbers into pandas DataFrames.

Two kinds of records share the files and are told apart by ``collective``:

**Measured or modelled points** (``collective`` = ``allreduce``, ``alltoall``, ``alltoallv``,
...), written by ``commbench run`` and, with ``modelled: true`` and ``backend: "model"``,
by ``commbench simulate``. The fields are those :mod:`commbench.harness.results` writes; the ones the figures
use are ``system, nodes, gpus_per_node, nranks, backend, collective, impl, params, dtype,
size_bytes, metric_bytes, workload, time_us, time_us_min, time_us_avg, time_us_max,
time_reduction,
algbw_GBps, busbw_GBps, busbw_factor, modelled, rank_time_us, rank_finish_us``.

**Schedule-synthesis records** (``collective`` = ``"schedule"``, figure 4), one object per
synthesised schedule (repeat a point to show its spread)::

    {"collective": "schedule",
     "gpus": 64,                    # P = servers * gpus_per_node            (required)
     "servers": 8,                  # S                                     (required)
     "strategy": "bottleneck",      # scheduler option that was used        (required)
     "synthesis_us": 180.5,         # wall time of one schedule() call, µs  (required)
     "synthesis_warm_us": 40.2,     # median of repeated calls on the matrix (optional)
     "timing": "cold",              # synthesis_us: "cold" (one call) or "warm" (a median)
     "tuned": true,                 # options tuned by the cost model       (optional)
     "stages": 12,                  # number of BvN stages                  (required)
     "lower_bound": 8388608,        # T, bytes per NIC                      (optional)
     "modelled_time_over_lb": 1.04, # cost-model time / (T / B), or null    (optional)
     "workload": "zipf:0.8@1",      # traffic spec                          (optional)
     "size_bytes": 67108864,        # mean bytes each GPU sends             (optional)
     "system": "h200",              # fabric constants the model used       (optional)
     "run_id": "...", "timestamp": "...", "git_sha": "..."}          (optional)

FAST point records that carry their schedule in ``info`` (``synthesis_us``, ``stages``,
``strategy``, ``lower_bound_bytes``, ``time_over_lb``: what ``commbench simulate`` writes)
also give one schedule row each, so figure 4 has data from the cost model too.

Loading adds columns: ``source_file``/``source_line`` (where the record came from),
``kind`` (``"measured"`` or ``"modelled"``), ``workload_key`` (the workload spec without
its ``@SEED``, so seeds of one law group together), ``zipf_s`` (the Zipf exponent, NaN for
other laws); ``time_us`` (the per-call time the record's ``algbw_GBps`` was computed from)
is taken from the record or, when absent, chosen by its ``time_reduction`` (``rank0``,
``avg``, ``min``, ``max``; ``time_reduce`` is accepted as a synonym).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Iterable
from importlib.resources import files
from pathlib import Path

import pandas as pd

from commbench.analysis.records import SIDE_LINK, read_jsonl, side_key

#: the papers' numbers shipped with commbench (the repository's ``results/reference``)
REFERENCE_DIR = Path(str(files("commbench.analysis.reference")))

SCHEDULE = "schedule"
SCHEDULE_REQUIRED = ("gpus", "servers", "strategy", "synthesis_us", "stages")
SCHEDULE_OPTIONAL = (
    "synthesis_warm_us",
    "timing",
    "tuned",
    "kind",
    "lower_bound",
    "modelled_time_over_lb",
    "workload",
    "size_bytes",
    "system",
    "run_id",
    "timestamp",
    "git_sha",
)
POINT_REQUIRED = ("collective", "impl", "size_bytes")
RAW_SUFFIX = ".raw.jsonl"
#: ``run --timeline``'s side file: one line per span of every rank and call
TIMELINE_SUFFIX = ".timeline.jsonl"
SIDE_SUFFIXES = (RAW_SUFFIX, TIMELINE_SUFFIX)
POINT_TIMES = ("time_us_min", "time_us_avg", "time_us_max")

# Defaults for fields a point record may lack (older or hand-written files).
POINT_DEFAULTS: dict[str, object] = {
    "run_id": None,
    "launch_id": None,
    "timestamp": None,
    "git_sha": None,
    "system": "unknown",
    "hostnames": None,
    "nodes": None,
    "gpus_per_node": None,
    "nranks": None,
    "backend": None,
    "params": None,
    "dtype": None,
    "count": None,
    "metric_bytes": None,
    "workload": None,
    "seed": None,
    "timing_mode": None,
    "iters": None,
    "warmup": None,
    "time_us_min": math.nan,
    "time_us_avg": math.nan,
    "time_us_max": math.nan,
    "time_us_p50": math.nan,
    "time_us_p99": math.nan,
    "algbw_GBps": math.nan,
    "busbw_GBps": math.nan,
    "busbw_factor": math.nan,
    "time_us": math.nan,
    "time_reduction": None,
    "nwrong": 0,
    "modelled": False,
    "rank_time_us": None,
    "rank_finish_us": None,
    "info": None,
    "versions": None,
    "env": None,
    "raw_file": None,
    "host_us": math.nan,
    "host_bound": None,
    "timed_loop": None,
    "reference_time_us": math.nan,
    "inplace": None,
    # intervals (analysis.intervals) and where the bytes went (analysis.tiers): absent in
    # records written before them
    "iter_time_us": None,
    "ci_median_us": math.nan,
    "ci_low_us": math.nan,
    "ci_high_us": math.nan,
    "ci_samples": math.nan,
    "ci_launches": math.nan,
    "ci_level": math.nan,
    "ci_method": None,
    "launch": None,
    "tiers": None,
    "timeline_file": None,
}
POINT_COLUMNS = tuple(POINT_DEFAULTS) + ("collective", "impl", "size_bytes")
DERIVED_COLUMNS = ("source_file", "source_line", "kind", "workload_key", "zipf_s")

_SEED_RE = re.compile(r"@\d+$")
_ZIPF_RE = re.compile(r"^(?:pair-)?zipf(?::([0-9]*\.?[0-9]+(?:[eE][-+]?\d+)?))?$")
DEFAULT_ZIPF = 0.8  # what commbench.harness.workloads means by a bare "zipf"


def result_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Every ``*.jsonl`` file named or found (recursively) under the given paths, sorted.

    Side files (``*.raw.jsonl``, per-rank per-iteration times; ``*.timeline.jsonl``, the
    ``--timeline`` spans) are not result files and are skipped. A path that does not exist is an error; a directory without result files
    is not.
    """
    files: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files.extend(
                sorted(
                    f
                    for f in p.rglob("*.jsonl")
                    if f.is_file() and not f.name.endswith(SIDE_SUFFIXES)
                )
            )
        elif p.is_file():
            if p.name.endswith(SIDE_SUFFIXES):
                raise ValueError(
                    f"{p} is a side file (raw times or timeline): give the results file next to it"
                )
            files.append(p)
        else:
            raise FileNotFoundError(f"no such result file or directory: {p}")
    seen: set[Path] = set()
    unique = []
    for f in files:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def read_records(path: str | os.PathLike) -> list[dict]:
    """Parse one JSONL file; a bad line raises ``ValueError`` naming ``file:line``.

    A cut-off last line (a run killed while writing it) is skipped with a warning: the
    records before it are whole, and the next ``--resume`` sets that line aside.
    """
    records = []
    for lineno, rec in read_jsonl(path, on_torn_tail=_warn_torn_tail):
        where = f"{path}:{lineno}"
        _check_record(rec, where)
        rec["source_file"] = str(path)
        rec["source_line"] = lineno
        records.append(rec)
    return records


def _warn_torn_tail(where: str) -> None:
    print(
        f"warning: {where}: skipping a cut-off last line (a run was stopped while writing it)",
        file=sys.stderr,
    )


def _check_record(rec: dict, where: str) -> None:
    if rec.get("collective") == SCHEDULE:
        missing = [k for k in SCHEDULE_REQUIRED if rec.get(k) is None]
        if missing:
            raise ValueError(
                f"{where}: schedule record lacks {', '.join(missing)} "
                f"(a schedule record needs {', '.join(SCHEDULE_REQUIRED)})"
            )
        return
    missing = [k for k in POINT_REQUIRED if rec.get(k) is None]
    if missing:
        raise ValueError(
            f"{where}: record lacks {', '.join(missing)} "
            f"(a result record needs {', '.join(POINT_REQUIRED)} and a time_us_* field)"
        )
    if all(rec.get(k) is None for k in POINT_TIMES):
        raise ValueError(f"{where}: record has none of {', '.join(POINT_TIMES)}")
    for key in ("size_bytes", *POINT_TIMES):
        value = rec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{where}: {key} must be a number, got {value!r}")


def load_results(*paths: str | os.PathLike) -> pd.DataFrame:
    """All point records (not schedule records) under ``paths`` in one DataFrame.

    Accepts files and directories (searched for ``*.jsonl``); the result has at least
    :data:`POINT_COLUMNS` and :data:`DERIVED_COLUMNS`, also when nothing was found.
    """
    points, _ = load_all(*paths)
    return points


def load_schedules(*paths: str | os.PathLike) -> pd.DataFrame:
    """All schedule-synthesis records (``collective == "schedule"``) under ``paths``."""
    _, schedules = load_all(*paths)
    return schedules


def load_all(*paths: str | os.PathLike) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(points, schedules)`` from every result file under ``paths`` (one read).

    ``schedules`` holds the schedule records and, in addition, one row per FAST point
    record whose ``info`` carries the schedule it ran or modelled (``synthesis_us`` and
    ``stages``, as ``commbench simulate`` writes them): see :func:`schedules_from_points`.
    """
    points: list[dict] = []
    schedules: list[dict] = []
    for f in result_files(paths):
        for rec in read_records(f):
            (schedules if rec.get("collective") == SCHEDULE else points).append(rec)
    schedules.extend(schedules_from_points(points))
    return normalise_points(points), normalise_schedules(schedules)


def schedules_from_points(records: Iterable[dict]) -> list[dict]:
    """Schedule rows from FAST point records that carry ``info.synthesis_us`` and
    ``info.stages`` (``info.strategy``, ``info.lower_bound_bytes`` and ``info.time_over_lb``
    when present)."""
    rows = []
    for rec in records:
        info = rec.get("info")
        if rec.get("impl") != "fast" or not isinstance(info, dict):
            continue
        if info.get("synthesis_us") is None or info.get("stages") is None:
            continue
        nodes, gpn = rec.get("nodes"), rec.get("gpus_per_node")
        gpus = rec.get("nranks") or (nodes * gpn if nodes and gpn else None)
        if not gpus or not nodes:
            continue
        rows.append(
            {
                "collective": SCHEDULE,
                "gpus": gpus,
                "servers": nodes,
                "strategy": str(info.get("strategy", "fast")),
                # one call: the tuner's (simulate) or setup's (a measured run)
                "synthesis_us": info["synthesis_us"],
                "synthesis_warm_us": info.get("synthesis_warm_us"),
                "timing": "cold",
                "tuned": info.get("tuned"),
                "kind": "modelled" if rec.get("modelled") else "measured",
                "stages": info["stages"],
                "lower_bound": info.get("lower_bound_bytes"),
                # the schedule's own time (without FAST's per-call costs, where the record
                # has them), as the papers' simulated gap to the ideal is
                "modelled_time_over_lb": (
                    info.get("schedule_time_over_lb", info.get("time_over_lb"))
                    if rec.get("modelled")
                    else None
                ),
                "workload": rec.get("workload"),
                "size_bytes": rec.get("size_bytes"),
                "system": rec.get("system"),
                "run_id": rec.get("run_id"),
                "source_file": rec.get("source_file"),
                "source_line": rec.get("source_line"),
            }
        )
    return rows


def normalise_points(records: list[dict]) -> pd.DataFrame:
    """Point records -> DataFrame with defaults filled in and the derived columns."""
    rows = []
    for rec in records:
        row = dict(POINT_DEFAULTS)
        row.update(rec)
        row.setdefault("source_file", None)
        row.setdefault("source_line", None)
        rows.append(row)
    df = pd.DataFrame(rows, columns=_ordered_columns(rows, POINT_COLUMNS))
    if df.empty:
        return pd.DataFrame(columns=[*POINT_COLUMNS, *DERIVED_COLUMNS])
    df["modelled"] = df["modelled"].fillna(False).astype(bool)
    for col in ("size_bytes", *POINT_TIMES, "time_us_p50", "time_us_p99", "algbw_GBps"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    for col in ("busbw_GBps", "busbw_factor", "ci_median_us", "ci_low_us", "ci_high_us"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df["metric_bytes"] = pd.to_numeric(df["metric_bytes"], errors="coerce").fillna(df["size_bytes"])
    df["system"] = df["system"].fillna("unknown").astype(str)
    ranks = pd.to_numeric(df["nranks"], errors="coerce")
    gpn = pd.to_numeric(df["gpus_per_node"], errors="coerce")
    nodes = pd.to_numeric(df["nodes"], errors="coerce")
    nodes = nodes.fillna(ranks / gpn)
    gpn = gpn.fillna(ranks / nodes)
    df["nodes"] = nodes.astype("Int64")
    df["gpus_per_node"] = gpn.astype("Int64")
    df["nranks"] = ranks.fillna(nodes * gpn).astype("Int64")
    df["kind"] = df["modelled"].map({True: "modelled", False: "measured"})
    df["workload_key"] = df["workload"].map(workload_key)
    df["zipf_s"] = df["workload_key"].map(zipf_exponent)
    if "time_reduce" in df:  # the name some writers use for time_reduction
        df["time_reduction"] = df["time_reduction"].fillna(df["time_reduce"])
    df["time_us"] = pd.to_numeric(df["time_us"], errors="coerce")
    missing = df["time_us"].isna()
    if missing.any():
        df.loc[missing, "time_us"] = [
            _chosen_time(r) for r in df.loc[missing].itertuples(index=False)
        ]
    return df


def normalise_schedules(records: list[dict]) -> pd.DataFrame:
    """Schedule records -> DataFrame with numeric columns and ``workload_key``."""
    cols = ("collective", *SCHEDULE_REQUIRED, *SCHEDULE_OPTIONAL, "source_file", "source_line")
    df = pd.DataFrame(records, columns=_ordered_columns(records, cols))
    for col in ("gpus", "servers", "synthesis_us", "synthesis_warm_us", "stages", "lower_bound"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df["modelled_time_over_lb"] = pd.to_numeric(df["modelled_time_over_lb"], errors="coerce")
    df["strategy"] = df["strategy"].astype(str)
    df["workload_key"] = df["workload"].map(workload_key).astype(str)
    return df


def _ordered_columns(rows: list[dict], first: Iterable[str]) -> list[str]:
    cols = list(dict.fromkeys(first))
    for row in rows:
        for key in row:
            if key not in cols:
                cols.append(key)
    return cols


def workload_key(spec: object) -> str:
    """The workload spec without its ``@SEED`` ('' for none): seeds of one law group."""
    if spec is None or (isinstance(spec, float) and math.isnan(spec)):
        return ""
    return _SEED_RE.sub("", str(spec).strip())


def zipf_exponent(key: str) -> float:
    """``"zipf:0.8"`` -> 0.8, ``"zipf"`` -> 0.8 (the generator's default); NaN otherwise."""
    m = _ZIPF_RE.match(key or "")
    if not m:
        return math.nan
    return float(m.group(1)) if m.group(1) else DEFAULT_ZIPF


def _chosen_time(row) -> float:
    """Per-call time the record's bandwidths were computed from (``time_reduction``)."""
    how = row.time_reduction
    if how == "rank0" and isinstance(row.rank_time_us, list) and row.rank_time_us:
        return float(row.rank_time_us[0])
    col = {"min": "time_us_min", "avg": "time_us_avg", "max": "time_us_max"}.get(how)
    if col is not None and not math.isnan(getattr(row, col)):
        return float(getattr(row, col))
    for col in ("time_us_max", "time_us_avg", "time_us_min"):  # alltoallv's rule first
        value = getattr(row, col)
        if not math.isnan(value):
            return float(value)
    return math.nan


REFERENCE_COLUMNS = (
    "source",
    "figure",
    "system",
    "fabric",
    "quantity",
    "impl",
    "baseline",
    "collective",
    "workload",
    "dtype",
    "nodes",
    "gpus",
    "size_min",
    "size_max",
    "value",
    "low",
    "high",
    "unit",
    "note",
)


def load_reference(directory: str | os.PathLike | None = None) -> pd.DataFrame:
    """The papers' numbers (``results/reference/*.csv``) in one DataFrame.

    Every row carries its ``source`` (paper and table or figure). These are never our
    measurements; figures draw them as "paper: ..." overlays. A missing directory gives
    an empty frame (figures then draw no overlays).
    """
    d = Path(directory) if directory is not None else REFERENCE_DIR
    frames = []
    if d.is_dir():
        for f in sorted(d.glob("*.csv")):
            frame = pd.read_csv(f, dtype={"figure": str})
            missing = [c for c in REFERENCE_COLUMNS if c not in frame.columns]
            if missing:
                raise ValueError(f"{f}: reference file lacks column(s) {', '.join(missing)}")
            if frame["source"].isna().any():
                line = int(frame.index[frame["source"].isna()][0]) + 2
                raise ValueError(f"{f}:{line}: reference row without a source")
            frame["reference_file"] = f.name
            frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=[*REFERENCE_COLUMNS, "reference_file"])
    ref = pd.concat(frames, ignore_index=True)
    for col in ("nodes", "gpus", "size_min", "size_max", "value", "low", "high"):
        ref[col] = pd.to_numeric(ref[col], errors="coerce")
    for col in ("figure", "system", "fabric", "impl", "baseline", "collective", "workload"):
        ref[col] = ref[col].fillna("").astype(str)
    return ref


VERSION_KEYS = (
    "commbench",
    "python",
    "mpi4py",
    "mpi",
    "numpy",
    "cupy",
    "library",
    "nvshmem",
    "driver",
)


def run_metadata(points: pd.DataFrame) -> pd.DataFrame:
    """One row per run (``run_id`` within a results folder), system and kind (a ``make run``
    folder holds measured local records and modelled ones of other systems): what ran,
    where, with what.

    Columns: ``run_id, folder, system, kind, backend, nodes, gpus_per_node, records,
    collectives, impls, first, last`` (timestamps), ``git_sha``, ``versions`` (short text)
    and ``job`` — the job's sentinel next to the results when there is one (``ready``, or
    ``error: <first reason>``, as ``commbench jobs`` writes them), else ''.
    """
    cols = [
        "run_id", "folder", "system", "kind", "backend", "nodes", "gpus_per_node", "records",
        "collectives", "impls", "first", "last", "git_sha", "versions", "job",
    ]  # fmt: skip
    if points.empty:
        return pd.DataFrame(columns=cols)
    data = points.assign(
        folder=points["source_file"].map(lambda f: str(Path(f).parent) if f else ""),
        run_key=points["run_id"].fillna("").astype(str),
    )
    rows = []
    keys = ["folder", "run_key", "system", "kind"]
    for (folder, run, system, kind), part in data.groupby(keys, sort=True, dropna=False):
        first = part.iloc[0]
        rows.append(
            {
                "run_id": run,
                "folder": folder,
                "system": system,
                "kind": kind,
                "backend": ", ".join(sorted({str(b) for b in part["backend"].dropna()})),
                "nodes": first["nodes"],
                "gpus_per_node": first["gpus_per_node"],
                "records": len(part),
                "collectives": ", ".join(sorted(set(part["collective"]))),
                "impls": ", ".join(sorted({str(i) for i in part["impl"]})),
                "first": part["timestamp"].dropna().min()
                if part["timestamp"].notna().any()
                else "",
                "last": part["timestamp"].dropna().max() if part["timestamp"].notna().any() else "",
                "git_sha": ", ".join(sorted({str(s) for s in part["git_sha"].dropna()})),
                "versions": _versions_text(first["versions"]),
                "job": _job_status(Path(folder)) if folder else "",
            }
        )
    return pd.DataFrame(rows, columns=cols)


def _versions_text(versions: object) -> str:
    if not isinstance(versions, dict):
        return ""
    parts = []
    for key in VERSION_KEYS:
        if versions.get(key):
            value = str(versions[key]).replace("\x00", "").split(",")[0].strip()
            parts.append(f"{key} {value}")
    return "; ".join(parts)


def _job_status(folder: Path) -> str:
    """The batch job's sentinel in ``folder``: 'ready', 'error: ...' or ''."""
    if (folder / "error").is_file():
        lines = (folder / "error").read_text(errors="replace").splitlines()
        reasons = [line for line in lines if line.strip()]
        return "error: " + (reasons[-1] if reasons else "no reason recorded")
    if (folder / "ready").is_file():
        return "ready"
    return ""


def load_raw_samples(points: pd.DataFrame) -> list[list | None]:
    """Per point (aligned with ``points``), its per-rank per-iteration ``samples_us`` from
    the raw side file its record names (``raw_file``, next to the results file), matched by
    ``run_id``, ``point`` and ``inplace``; None where there are none (pipelined timing,
    no side file, a side file moved away). A cut-off last line is skipped."""
    wanted: dict[Path, list[tuple[int, tuple]]] = {}
    for i, row in enumerate(points.itertuples(index=False)):
        raw_file, source = getattr(row, "raw_file", None), row.source_file
        if isinstance(raw_file, str) and raw_file and isinstance(source, str):
            key = point_side_key(row)
            wanted.setdefault(Path(source).parent / raw_file, []).append((i, key))
    out: list[list | None] = [None] * len(points)
    for path, rows in wanted.items():
        if not path.is_file():
            continue
        found = {
            side_key(*(raw.get(k) for k in SIDE_LINK)): raw.get("samples_us")
            for _, raw in read_jsonl(path, on_torn_tail=lambda where: None)
        }
        for i, key in rows:
            out[i] = found.get(key)
    return out


def point_side_key(row) -> tuple:
    """The :data:`~commbench.analysis.records.SIDE_LINK` key of a point (an ``itertuples``
    row), as :func:`~commbench.analysis.records.side_key` makes a side-file line's."""
    return side_key(*(getattr(row, k, None) for k in SIDE_LINK))

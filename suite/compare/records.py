"""The records ``commbench compare`` reads: every point record under the given files or
folders, with ``tiers`` (where the bytes went) filled in for records written without it."""

from __future__ import annotations

import os
from collections.abc import Iterable

from commbench.analysis import tiers
from commbench.analysis.compare import is_point, kind
from commbench.analysis.load import read_records, result_files


def load_points(paths: Iterable[str | os.PathLike], which: str = "all") -> list[dict]:
    """Point records under ``paths``; ``which``: ``measured``, ``modelled`` or ``all``."""
    out = []
    for f in result_files(paths):
        for rec in read_records(f):
            if is_point(rec) and which in ("all", kind(rec)):
                out.append(rec)
    return out


def fill_tiers(rec: dict) -> dict:
    """``rec`` with ``tiers`` computed when it has none: an all-to-allv's traffic matrix is
    made again from its workload, seed and size (as the run made it)."""
    if isinstance(rec.get("tiers"), dict) or not tiers.applies(rec):
        return rec
    traffic = None
    if rec["collective"] == "alltoallv" and rec.get("workload"):
        from commbench.harness.workloads import generate

        try:
            traffic = generate(
                str(rec["workload"]),
                int(rec["nranks"]),
                int(rec["size_bytes"]),
                seed=rec.get("seed") if rec.get("seed") is not None else 1,
                unit=tiers.itemsize(rec.get("dtype")),
            )
        except (ValueError, OSError):  # a workload file that is not here any more
            traffic = None
    rec["tiers"] = tiers.record_tiers(rec, traffic)
    return rec

"""Reading result records: the JSON-lines files ``commbench run``, ``simulate`` and
``import`` append to (written by :mod:`commbench.harness.results`), and the key that
identifies a measured point across runs. Here, below both the harness and the figures, so
that each reads records the same way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: Fields that identify a measured point across runs (what ``--resume`` compares).
KEY_FIELDS = (
    "system",
    "nranks",
    "gpus_per_node",
    "backend",
    "collective",
    "impl",
    "params",
    "dtype",
    "op",
    "size_bytes",
    "workload",
    "seed",
    "timing_mode",
    "iters",
    "warmup",
    "time_reduction",
)


#: Key fields that records written before them lack, compared only when set (an
#: out-of-place record, ``inplace`` 0, still matches one from before ``--inplace``).
OPTIONAL_KEY_FIELDS = ("inplace", "root")


#: What links a record to its lines in the raw and timeline side files: a job or a sweep
#: gives all its launches one ``run_id``, each launch its own ``launch_id`` (absent in
#: files written before it), and a launch numbers its points.
SIDE_LINK = ("run_id", "launch_id", "point", "inplace")


def side_key(run_id, launch_id, point, inplace) -> tuple:
    """A record's or a side-file line's :data:`SIDE_LINK` values, alike on both sides
    (absent or NaN: None; ``inplace`` absent: out of place)."""

    def given(v):
        if v is None:
            return None
        try:
            return None if v != v else v  # NaN
        except TypeError:  # pandas' NA
            return None

    point = given(point)
    inplace = given(inplace)
    return (str(run_id), given(launch_id), None if point is None else int(point), bool(inplace))


def point_key(record: dict) -> str:
    values: list = [record.get(k) for k in KEY_FIELDS]
    values += [{k: record[k]} for k in OPTIONAL_KEY_FIELDS if record.get(k)]
    return json.dumps(values, sort_keys=True, default=str)


def read_jsonl(path: str | os.PathLike, on_torn_tail=None):
    """``(line number, object)`` for each JSON object line of ``path``.

    A bad line raises ``ValueError`` naming ``file:line``, except a cut-off last line (no
    newline at the end of the file: a run killed while writing it), which is passed to
    ``on_torn_tail(where)`` and skipped; without ``on_torn_tail`` it is an error too.
    """
    path = Path(path)
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                if not line.endswith("\n") and on_torn_tail is not None:
                    on_torn_tail(where)
                    return
                raise ValueError(
                    f"{where}: not valid JSON ({exc.msg} at column {exc.colno}); "
                    "each line of a result file must be one JSON object"
                ) from None
            if not isinstance(obj, dict):
                raise ValueError(
                    f"{where}: expected a JSON object, got {type(obj).__name__}; "
                    "each line of a result file must be one JSON object"
                )
            yield lineno, obj


def read_done(path: str | os.PathLike) -> dict[str, dict]:
    """The records already in ``path`` by point key (for ``--resume``; the last of a key
    wins); a torn last line is ignored (:meth:`RecordWriter.repair` sets it aside before
    anything is appended)."""
    if not Path(path).exists():
        return {}
    return {point_key(rec): rec for _, rec in read_jsonl(path, on_torn_tail=lambda where: None)}

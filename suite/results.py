"""Result records: one JSON object per measured point, appended and flushed at once.

Long format, read with ``pandas.read_json(path, lines=True)``. Per-rank per-iteration raw
times go to a side file next to it (``<out>.raw.jsonl``), one line per point, linked by
``run_id`` and ``point``. ``--resume`` skips points whose :func:`point_key` is already in
the file.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
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
)

ENV_PREFIXES = ("NCCL_", "FI_", "NVSHMEM_", "MPICH_", "OMPI_", "UCX_", "HSA_", "RCCL_", "SLURM_JOB")


def point_key(record: dict) -> str:
    return json.dumps([record.get(k) for k in KEY_FIELDS], sort_keys=True, default=str)


def new_run_id() -> str:
    """``COMMBENCH_RUN_ID`` if the job set it, else a timestamp and the process id."""
    given = os.environ.get("COMMBENCH_RUN_ID")
    if given:
        return given
    return _dt.datetime.now().strftime("%Y%m%dT%H%M%S") + f"-{os.getpid():x}"


def timestamp() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def git_sha() -> str:
    given = os.environ.get("COMMBENCH_GIT_SHA")
    if given:
        return given
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions(transport_info: dict) -> dict:
    import mpi4py
    import numpy
    from mpi4py import MPI

    from suite import __version__

    v = {
        "commbench": __version__,
        "python": platform.python_version(),
        "mpi4py": mpi4py.__version__,
        "mpi": MPI.Get_library_version().splitlines()[0].strip(),
        "numpy": numpy.__version__,
    }
    for key in ("library", "cupy", "driver", "nvshmem"):
        if key in transport_info:
            v[key] = transport_info[key]
    return v


def captured_env() -> dict:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}


def read_keys(path: str | os.PathLike) -> set[str]:
    """Point keys already in ``path`` (for ``--resume``); a torn last line is ignored."""
    keys: set[str] = set()
    p = Path(path)
    if not p.exists():
        return keys
    with p.open() as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                keys.add(point_key(json.loads(line)))
            except json.JSONDecodeError:
                continue
    return keys


class RecordWriter:
    """Appends records (and raw-time lines) and flushes each to disk before returning."""

    def __init__(self, path: str | os.PathLike | None) -> None:
        self.path = Path(path) if path else None
        self.raw_path = (
            self.path.with_name(self.path.name.removesuffix(".jsonl") + ".raw.jsonl")
            if self.path
            else None
        )

    def _append(self, path: Path, obj: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as fh:
            fh.write(json.dumps(obj, default=_json_default) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def write(self, record: dict, raw: dict | None = None) -> None:
        if self.path is None:
            return
        if raw is not None:
            self._append(self.raw_path, raw)
            record["raw_file"] = self.raw_path.name
        self._append(self.path, record)


def _json_default(obj):
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"cannot write {type(obj).__name__} to a result record")

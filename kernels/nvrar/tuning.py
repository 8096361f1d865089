"""Tuning tables: inter-node segment size -> chunk size and parallelism.

One JSON file per backend next to this module (``tuning_cpu.json``, ``tuning_cuda.json``).
The key is the number of data bytes each rank moves in the inter-node step (message bytes
/ gpus_per_node); an entry applies to sizes up to its ``max_bytes``, the last one to
everything larger. Regenerate a table on the target machine with::

    mpiexec -n 8 python -m commbench.benchmarks.nvrar tune --backend cpu --gpus-per-node 4

(see :mod:`commbench.benchmarks.nvrar`); ``--param chunk_bytes=...`` etc. override an entry
for one run.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from importlib.resources import files
from pathlib import Path
from typing import Any

TABLE_DIR = Path(str(files("commbench.kernels.nvrar")))
FIELDS = ("chunk_bytes", "blocks", "threads")


@dataclass(frozen=True)
class Tuning:
    """``chunk_bytes``: data bytes per independently progressing chunk (4 per LL8 cell);
    ``blocks`` / ``threads``: CUDA grid of each chunk's receive kernel (1 / 1 on cpu)."""

    chunk_bytes: int
    blocks: int = 1
    threads: int = 1

    def __post_init__(self) -> None:
        for name in FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"tuning {name} must be a positive integer, got {value!r}")

    def chunk_cells(self) -> int:
        return max(1, self.chunk_bytes // 4)


@dataclass(frozen=True)
class TuningTable:
    backend: str
    entries: tuple[tuple[int, Tuning], ...]  # (max_bytes, tuning), ascending
    source: str = ""

    def lookup(self, nbytes: int) -> Tuning:
        for max_bytes, tuning in self.entries:
            if nbytes <= max_bytes:
                return tuning
        return self.entries[-1][1]

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "source": self.source,
            "key": "inter-node segment bytes per rank (message bytes / gpus_per_node)",
            "entries": [{"max_bytes": m, **asdict(t)} for m, t in self.entries],
        }


def table_path(backend: str) -> Path:
    return TABLE_DIR / f"tuning_{backend}.json"


def parse_table(doc: dict[str, Any]) -> TuningTable:
    """A :class:`TuningTable` from its JSON form; a clear error on malformed input."""
    try:
        raw = doc["entries"]
        entries = sorted(
            (int(e["max_bytes"]), Tuning(**{k: int(e[k]) for k in FIELDS if k in e})) for e in raw
        )
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed tuning table: missing or bad field {exc}") from None
    if not entries:
        raise ValueError("tuning table has no entries")
    return TuningTable(str(doc.get("backend", "")), tuple(entries), str(doc.get("source", "")))


def load_table(backend: str, path: Path | None = None) -> TuningTable:
    path = path or table_path(backend)
    if not path.exists():
        raise FileNotFoundError(
            f"no NVRAR tuning table {path}: regenerate it with "
            f"`python -m commbench.benchmarks.nvrar tune --backend {backend}`"
        )
    return parse_table(json.loads(path.read_text()))


def write_table(table: TuningTable, path: Path) -> None:
    path.write_text(json.dumps(table.to_json(), indent=2) + "\n")


def with_overrides(tuning: Tuning, params: dict[str, Any]) -> Tuning:
    """``tuning`` with any of chunk_bytes / blocks / threads taken from run params."""
    changes = {k: int(params[k]) for k in FIELDS if k in params}
    return replace(tuning, **changes) if changes else tuning


def chunk_bounds(ncells: int, chunk_cells: int) -> list[tuple[int, int]]:
    """``[start, end)`` cell ranges of the chunks (the last one may be short)."""
    if chunk_cells < 1:
        raise ValueError(f"chunk size must be at least one cell, got {chunk_cells}")
    return [(a, min(a + chunk_cells, ncells)) for a in range(0, ncells, chunk_cells)]

"""Run directories: ``RESULTS_ROOT/SYSTEM/RUN_ID/`` with the job script, its results and
the sentinels the job leaves (``ready``, or ``error`` with where it failed)."""

from __future__ import annotations

import datetime as _dt
import secrets
from dataclasses import dataclass
from pathlib import Path

from commbench.errors import UsageError
from commbench.jobs.syntax import NAME_RE

SCRIPT_NAME = "job.sh"
RESULTS_NAME = "results.jsonl"


def new_run_id(label: str, nodes: int, now: _dt.datetime | None = None) -> str:
    """``LABEL-nNODES-TIMESTAMP-XXXX`` (UTC, four random hex digits)."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return f"{label}-n{nodes}-{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(2)}"


def check_run_id(run_id: str) -> str:
    if not NAME_RE.match(run_id) or len(run_id) > 128:
        raise UsageError(f"bad run id {run_id!r}: use letters, digits, '.', '_', '+' and '-'")
    return run_id


@dataclass(frozen=True)
class RunState:
    system: str
    run_id: str
    run_dir: Path
    job_id: str | None
    sentinel: str  # "ready", "error" or "" (none yet)
    error: str  # the error sentinel's text


def scan_runs(results_root: Path) -> list[RunState]:
    """Every rendered job under ``results_root/SYSTEM/RUN_ID/``, oldest first."""
    states = []
    for script in sorted(Path(results_root).glob(f"*/*/{SCRIPT_NAME}")):
        states.append(read_run_state(script.parent))
    return sorted(states, key=lambda s: s.run_dir.stat().st_mtime)


def read_run_state(run_dir: Path) -> RunState:
    job_file, error_file = run_dir / "job-id", run_dir / "error"
    job_id = job_file.read_text().strip() if job_file.is_file() else None
    if error_file.is_file():
        sentinel, error = "error", error_file.read_text().strip()
    elif (run_dir / "ready").is_file():
        sentinel, error = "ready", ""
    else:
        sentinel, error = "", ""
    return RunState(run_dir.parent.name, run_dir.name, run_dir, job_id, sentinel, error)

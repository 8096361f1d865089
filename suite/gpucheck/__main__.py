"""``python -m commbench.gpucheck OUT_DIR``: the one-GPU check (``make gpu-check``, or
``tools/gpu-check.sh run OUT_DIR`` on a GPU machine); the checks are in
:mod:`commbench.gpucheck.checks`, how they run in :mod:`commbench.gpucheck.runner`."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from commbench.errors import UsageError
from commbench.gpucheck import checks as gpuchecks
from commbench.gpucheck.checks import DEFAULT_BUDGET_S, all_checks, gpu_backend, rehearsal
from commbench.gpucheck.runner import FAILED, MIN_START_S, NOT_RUN, run_all, run_worker


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m commbench.gpucheck", description=gpuchecks.__doc__.split("\n\n")[0]
    )
    p.add_argument("out_dir", nargs="?", default=os.environ.get("OUT") or "results/gpucheck",
                   help="folder for summary.txt, summary.json and runs.tar.gz "
                   "(default $OUT, else results/gpucheck)")  # fmt: skip
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                   help=f"seconds for all checks together (default {DEFAULT_BUDGET_S:g})")  # fmt: skip
    p.add_argument("--time-left", type=float, default=None,
                   help="seconds the caller has left: the budget is cut to it")  # fmt: skip
    p.add_argument("--work", default=None,
                   help="folder for the run files and each check's output, packed into "
                   "OUT_DIR/runs.tar.gz (default: a temporary one)")  # fmt: skip
    p.add_argument("--jobs", type=int, default=4, help="concurrent checks at a time (4)")
    p.add_argument("--only", default=None,
                   help="run the checks whose name contains this, and the checks whose "
                   "output they load (FAST's numba core for FAST's)")  # fmt: skip
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--ranks", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--args", default="[]", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        return run_worker(args.worker, args.result, args.ranks, json.loads(args.args))
    budget = args.budget if args.time_left is None else min(args.budget, args.time_left)
    try:
        if budget <= MIN_START_S or args.jobs < 1:
            raise UsageError(f"--budget (and --time-left) must be more than {MIN_START_S:g} s "
                             "and --jobs at least 1")  # fmt: skip
        out_dir = Path(args.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="gpucheck-"))
        (work / "runs").mkdir(parents=True, exist_ok=True)
    except (UsageError, OSError) as exc:
        print(f"gpu-check: error: {exc}", file=sys.stderr)
        return 2
    backend, why = gpu_backend()
    checks = all_checks(backend, work / "runs")
    if args.only:
        chosen = {c.name for c in checks if args.only in c.name}
        needed = {c.needs for c in checks if c.name in chosen}
        checks = [c for c in checks if c.name in chosen or c.name in needed]
        if not chosen:  # a typo must not pass as a run of nothing on a scarce GPU machine
            print(f"gpu-check: error: --only {args.only!r} matches no check on backend "
                  f"{backend or 'none'} (--list names them)", file=sys.stderr)  # fmt: skip
            return 2
    if args.list:
        for c in checks:
            print(f"{c.name:40s} {c.timeout_s:5.0f} s  {c.skip or ''}")
        return 0
    meta = {"backend": backend or f"none ({why})", "out_dir": str(out_dir),
            "host": os.uname().nodename}  # fmt: skip
    if rehearsal():
        meta["REHEARSAL"] = "fake GPU modules and rehearsal-only checks: not a GPU result"
    if args.only:
        meta["only"] = args.only
    results = run_all(checks, out_dir, budget, args.jobs, meta, work=work)
    bad = [r.name for r in results if r.status in (FAILED, NOT_RUN)]
    print(f"gpu-check: {len(results) - len(bad)} ok or not applicable, {len(bad)} failed or "
          f"not run; {out_dir / 'summary.txt'}")  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

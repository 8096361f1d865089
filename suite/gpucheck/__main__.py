"""``python -m commbench.gpucheck OUT_DIR``: the one-GPU check (``make gpu-check``); the
checks are in :mod:`commbench.gpucheck.checks`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from commbench.errors import UsageError
from commbench.gpucheck import checks
from commbench.gpucheck.checks import (
    DEFAULT_BUDGET_S,
    FAILED,
    MIN_START_S,
    all_checks,
    gpu_backend,
    run_all,
    run_worker,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m commbench.gpucheck", description=checks.__doc__.split("\n\n")[0]
    )
    p.add_argument("out_dir", nargs="?", default=os.environ.get("OUT") or "results/gpucheck",
                   help="folder for summary.json / summary.txt / runs/*.jsonl "
                   "(default $OUT, else results/gpucheck)")  # fmt: skip
    p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                   help=f"seconds for all checks together (default {DEFAULT_BUDGET_S:g})")  # fmt: skip
    p.add_argument("--jobs", type=int, default=4, help="commbench-run checks at a time (4)")
    p.add_argument("--only", default=None, help="run the checks whose name contains this")
    p.add_argument("--list", action="store_true", help="list the checks and exit")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    p.add_argument("--ranks", type=int, default=1, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.worker:
        return run_worker(args.worker, args.result, args.ranks)
    try:
        if args.budget <= MIN_START_S or args.jobs < 1:
            raise UsageError(f"--budget must be more than {MIN_START_S:g} s and --jobs at least 1")
        out_dir = Path(args.out_dir)
        (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    except (UsageError, OSError) as exc:
        print(f"gpu-check: error: {exc}", file=sys.stderr)
        return 2
    backend, why = gpu_backend()
    checks = all_checks(backend, out_dir)
    if args.only:
        checks = [c for c in checks if args.only in c.name]
    if args.list:
        for c in checks:
            print(f"{c.name:40s} {c.timeout_s:5.0f} s  {c.skip or ''}")
        return 0
    meta = {"backend": backend or f"none ({why})", "out_dir": str(out_dir),
            "host": os.uname().nodename}  # fmt: skip
    results = run_all(checks, out_dir, args.budget, args.jobs, meta)
    failed = [r.name for r in results if r.status == FAILED]
    print(f"gpu-check: {len(results) - len(failed)} ok or not applicable, {len(failed)} failed; "
          f"{out_dir / 'summary.txt'}")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
